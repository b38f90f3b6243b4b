"""AG-UI events (NDJSON and SSE): decoding, AG-UI's own models validate what we write, round trips keep the agui row."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings

from _dialect_kit import (
    assert_field_lost,
    decode,
    decode_fixture,
    encode,
    fixture_lines,
    objects,
    one,
    only,
    project,
    round_trip,
    tool_names,
    violations,
)
from _strategies import full_sessions, stamped
from agentstream import protocol as p
from agentstream.dialects import detect_dialect, get_dialect
from agentstream.errors import MalformedEventError

# -- golden ---------------------------------------------------------------------------------


def test_a_run_with_every_kind_of_event() -> None:
    events = decode_fixture("agui", "run.ndjson")
    start = events[0]
    assert (
        isinstance(start, p.Start) and start.session_id == "run_1" and start.ts == "2026-01-01T00:00:00.000Z"
    )
    assert [(s.name, s.status) for s in only(events, p.Step)] == [("plan", "started"), ("plan", "completed")]
    first, second = only(events, p.Reasoning)
    assert first.content == "Need the weather tool."  # the deprecated THINKING_* events
    assert (second.reasoning_id, second.content) == ("rsn_1", "Answer directly.")
    deltas = only(events, p.MessageDelta)
    assert [d.content for d in deltas] == ["Let me ", "check.", "It is 18°C ", "in Paris."]
    messages = only(events, p.Message)
    assert [(m.message_id, m.content) for m in messages] == [
        ("msg_1", "Let me check."),
        ("msg_3", "It is 18°C in Paris."),
    ]
    call, result_of_call = one(events, p.ToolCall), one(events, p.ToolResult)
    assert (call.call_id, call.name, call.arguments) == ("call_1", "get_weather", {"city": "Paris"})
    assert (result_of_call.name, result_of_call.status, result_of_call.output) == (
        "get_weather",
        "success",
        "18°C, cloudy",
    )
    named = {e.name: e.data for e in only(events, p.GenericEvent)}
    assert named["agui.state_snapshot"] == {"city": "Paris"}
    assert named["agui.state_delta"] == [{"op": "replace", "path": "/city", "value": "Lyon"}]
    assert named["weather_card"] == {"city": "Paris", "temp": 18}
    assert named["agui.raw"]["source"] == "openai"
    usage = one(events, p.Usage)
    assert (usage.model, usage.input_tokens, usage.output_tokens, usage.cached_tokens) == (
        "gpt-5",
        900,
        40,
        512,
    )
    result = events[-1]
    assert isinstance(result, p.Result) and result.ok and result.result == "It is 18°C in Paris."
    assert result.usage.input_tokens == 900 and result.tools_used == ["get_weather"]
    assert not violations(events)


def test_sse_frames_comments_and_event_lines_are_read() -> None:
    events = decode_fixture("agui", "run.sse")
    assert [e.type for e in events] == ["start", "message_delta", "message", "error", "result"]
    error, result = events[-2:]
    assert isinstance(error, p.Error) and (error.code, error.message, error.recoverable) == (
        "PROVIDER_ERROR",
        "model overloaded",
        False,
    )
    assert isinstance(result, p.Result) and not result.ok and result.exit_code == 1
    assert not violations(events)


def test_an_sse_payload_split_over_data_lines_is_joined_and_a_broken_one_is_named() -> None:
    lines = [b'data: {"type":"RUN_STARTED",', b'data: "threadId":"t","runId":"r"}', b""]
    assert one(decode("agui", lines), p.Start).session_id == "r"
    with pytest.raises(MalformedEventError, match="not valid JSON"):
        decode("agui", [b"data: {not json", b""])
    assert get_dialect("agui").decoder().decode_line(b"hello") is None
    cut = decode("agui", [lines[0]])  # the input ends inside a frame: reported, never raised from finish()
    assert one(cut, p.Error).code == "MALFORMED_EVENT"


def test_chunks_interrupts_cancellation_and_unended_calls() -> None:
    lines = [
        b'{"type":"RUN_STARTED","threadId":"t","runId":"r"}',
        b'{"type":"TOOL_CALL_CHUNK","toolCallId":"c1","toolCallName":"search","delta":"{\\"q\\":"}',
        b'{"type":"TOOL_CALL_CHUNK","delta":"\\"x\\"}"}',
        b'{"type":"REASONING_MESSAGE_CHUNK","messageId":"r1","delta":"hm"}',
        b'{"type":"TOOL_CALL_START","toolCallId":"c2","toolCallName":"approve"}',
        b'{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt","interrupts":[{"id":"i1","reason":"approval"}]}}',
    ]
    events = decode("agui", lines)
    first, second = only(events, p.ToolCall)
    assert (first.name, first.arguments) == ("search", {"q": "x"}) and second.name == "approve"
    assert one(events, p.Reasoning).content == "hm"
    assert [r.status for r in only(events, p.ToolResult)] == ["cancelled", "cancelled"]
    assert one(events, p.GenericEvent).name == "agui.interrupt"
    result = events[-1]
    assert isinstance(result, p.Result) and (result.ok, result.subtype) == (True, "interrupt")
    assert not violations(events)
    cancelled = decode(
        "agui",
        [lines[0], b'{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"cancelled"}}'],
    )
    assert (cancelled[-1].ok, cancelled[-1].exit_code, cancelled[-1].subtype) == (False, 130, "interrupted")  # type: ignore[union-attr]


def test_detection() -> None:
    assert detect_dialect(objects(fixture_lines("agui", "run.ndjson"))[:1]) == "agui"


# -- peer: AG-UI's own pydantic models and encoder ----------------------------------------------


def full_session() -> list[p.BaseEvent]:
    events: list[p.BaseEvent] = [
        p.Start(
            command="exec",
            cwd="/w",
            model="gpt-5",
            provider="openai",
            tools=["get_weather"],
            parent_session_id="parent",
        ),
        p.Message(message_id="u1", role="user", content="weather?"),
        p.Step(name="think", status="started"),
        p.ReasoningDelta(reasoning_id="r1", content="use "),
        p.Reasoning(reasoning_id="r1", content="use the tool"),
        p.Step(name="think", status="failed", error="slow"),
        p.MessageDelta(message_id="m1", content="Let me "),
        p.Message(message_id="m1", role="assistant", content="Let me look."),
        p.ToolCall(call_id="c1", name="get_weather", arguments={"city": "Paris"}),
        p.ToolProgress(call_id="c1", content="calling"),
        p.ToolResult(call_id="c1", name="get_weather", status="error", error="timeout", duration_ms=30),
        p.Usage(model="gpt-5", input_tokens=900, output_tokens=40, cached_tokens=512),
        p.GenericEvent(name="agui.state_snapshot", data={"city": "Paris"}),
        p.GenericEvent(name="agui.state_delta", data=[{"op": "add", "path": "/t", "value": 18}]),
        p.GenericEvent(name="weather_card", data={"temp": 18}),
        p.Status(status="busy"),
        p.Log(level="info", message="hi"),
        p.Progress(name="p", percent=50.0),
        p.Error(code="RATE_LIMITED", message="slow down", recoverable=True),
        p.MessageDelta(message_id="m2", content="It is "),  # left open: closed before RUN_FINISHED
        p.Step(name="answer", status="started"),
        p.Result(
            ok=True,
            subtype="success",
            exit_code=0,
            result="It is 18°C",
            usage=p.UsageTotals(input_tokens=900, output_tokens=40, cached_tokens=512),
        ),
    ]
    return stamped(events, "run_1")


def agui_rules(kinds: list[dict[str, Any]]) -> list[str]:
    """The ordering rules of AG-UI's TypeScript verifier, as the reference lists them."""
    problems, text, tools, steps, running = [], set(), set(), set(), False
    for index, event in enumerate(kinds):
        kind = event["type"]
        if index == 0 and kind not in ("RUN_STARTED", "RUN_ERROR"):
            problems.append("first event is not RUN_STARTED")
        if kind == "RUN_STARTED":
            running = True
        elif kind == "TEXT_MESSAGE_START":
            problems += ["text started twice"] if event["messageId"] in text else []
            text.add(event["messageId"])
        elif kind in ("TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"):
            problems += [] if event["messageId"] in text else [f"{kind} without an active message"]
            if kind == "TEXT_MESSAGE_END":
                text.discard(event["messageId"])
        elif kind == "TOOL_CALL_START":
            tools.add(event["toolCallId"])
        elif kind in ("TOOL_CALL_ARGS", "TOOL_CALL_END"):
            problems += [] if event["toolCallId"] in tools else [f"{kind} without an active call"]
            if kind == "TOOL_CALL_END":
                tools.discard(event["toolCallId"])
        elif kind == "STEP_STARTED":
            problems += ["step started twice"] if event["stepName"] in steps else []
            steps.add(event["stepName"])
        elif kind == "STEP_FINISHED":
            problems += [] if event["stepName"] in steps else ["STEP_FINISHED without an active step"]
            steps.discard(event["stepName"])
        elif kind == "RUN_FINISHED":
            problems += ["RUN_FINISHED while something is open"] if text or tools or steps else []
            running = False
        elif kind == "RUN_ERROR":
            running = False
        elif not running:
            problems.append(f"{kind} outside a run")
    return problems


def test_our_events_validate_with_ag_ui_models_and_follow_its_ordering_rules() -> None:
    from ag_ui.core import Event, RunFinishedEvent, StepFinishedEvent, ToolCallResultEvent
    from pydantic import TypeAdapter

    adapter = TypeAdapter(Event)
    lines = encode("agui", full_session())
    models = [adapter.validate_json(line) for line in lines]
    kinds = objects(lines)
    assert not agui_rules(kinds)
    names = [type(model).__name__ for model in models]
    assert (
        names[0] == "RunStartedEvent" and names.count("CustomEvent") == 7
    )  # tool progress, usage, card, status, log, progress, retry
    assert {"StateSnapshotEvent", "StateDeltaEvent", "ReasoningMessageContentEvent"} <= set(names)
    finished = models[-1]
    assert isinstance(finished, RunFinishedEvent) and finished.result == "It is 18°C"
    assert finished.usage[0].model == "gpt-5" and finished.usage[0].cached_input_tokens == 512
    tool = next(m for m in models if isinstance(m, ToolCallResultEvent))
    assert tool.content == "timeout" and tool.metadata == {"status": "error", "duration_ms": 30}
    failed_step = next(m for m in models if isinstance(m, StepFinishedEvent))
    assert failed_step.metadata == {"error": "slow", "status": "failed"}


def test_each_run_of_a_session_has_a_run_id_of_its_own_in_one_thread() -> None:
    """Three turns of one session: three runs of one thread, each finished under the id it started with, and
    reading them back gives one session again."""
    from ag_ui.core import Event, RunFinishedEvent, RunStartedEvent
    from pydantic import TypeAdapter

    sequencer = p.Sequencer("ses_3")
    turn: list[p.BaseEvent] = [
        p.Start(command="agent"),
        p.Message(message_id="m", role="assistant", content="hi"),
        p.Result(ok=True, subtype="success", exit_code=0),
    ]
    events = [sequencer.stamp(e.__copy__()) for _ in range(3) for e in turn]
    models = [TypeAdapter(Event).validate_json(line) for line in encode("agui", events)]
    started = [(m.thread_id, m.run_id) for m in models if isinstance(m, RunStartedEvent)]
    finished = [(m.thread_id, m.run_id) for m in models if isinstance(m, RunFinishedEvent)]
    assert started == finished == [("ses_3", "ses_3"), ("ses_3", "ses_3.2"), ("ses_3", "ses_3.3")]
    back = round_trip("agui", events)
    assert {e.session_id for e in back} == {"ses_3"} and sum(isinstance(e, p.Result) for e in back) == 3


def test_sse_framing_matches_ag_ui_event_encoder() -> None:
    from ag_ui.core import Event
    from ag_ui.encoder import EventEncoder
    from pydantic import TypeAdapter

    adapter = TypeAdapter(Event)
    framed = b"".join(line + b"\n" for line in encode("agui", full_session(), sse=True))
    frames = framed.split(b"\n\n")
    assert frames[-1] == b"" and all(frame.startswith(b"data: ") for frame in frames[:-1])
    theirs = EventEncoder()
    for frame in frames[:-1]:
        model = adapter.validate_json(frame.removeprefix(b"data: "))
        reencoded = theirs.encode(model).encode()
        assert objects([reencoded.removeprefix(b"data: ")]) == objects([frame.removeprefix(b"data: ")])


def test_sse_written_by_ag_ui_itself_decodes() -> None:
    from ag_ui.core import (
        RunFinishedEvent,
        RunStartedEvent,
        TextMessageContentEvent,
        TextMessageEndEvent,
        TextMessageStartEvent,
        ToolCallArgsEvent,
        ToolCallEndEvent,
        ToolCallResultEvent,
        ToolCallStartEvent,
    )
    from ag_ui.encoder import EventEncoder

    encoder = EventEncoder()
    stream = "".join(
        encoder.encode(event)
        for event in [
            RunStartedEvent(thread_id="t", run_id="r"),
            TextMessageStartEvent(message_id="m", role="assistant"),
            TextMessageContentEvent(message_id="m", delta="hi"),
            TextMessageEndEvent(message_id="m"),
            ToolCallStartEvent(tool_call_id="c", tool_call_name="f"),
            ToolCallArgsEvent(tool_call_id="c", delta='{"a":1}'),
            ToolCallEndEvent(tool_call_id="c"),
            ToolCallResultEvent(message_id="x", tool_call_id="c", content="done"),
            RunFinishedEvent(thread_id="t", run_id="r", result="hi"),
        ]
    )
    events = decode("agui", stream.encode().split(b"\n"))
    assert [e.type for e in events] == [
        "start",
        "message_delta",
        "message",
        "tool_call",
        "tool_result",
        "result",
    ]
    assert one(events, p.ToolCall).arguments == {"a": 1} and one(events, p.ToolResult).output == "done"
    assert not violations(events)


# -- round trip -------------------------------------------------------------------------------


def with_deltas(events: list[p.BaseEvent]) -> list[p.BaseEvent]:
    """AG-UI streams every text: a complete message or reasoning with no deltas before it gains one."""
    seen: set[tuple[bool, str]] = set()
    out: list[p.BaseEvent] = []
    for event in events:
        if isinstance(event, (p.MessageDelta, p.ReasoningDelta)):
            reasoning = isinstance(event, p.ReasoningDelta)
            seen.add((reasoning, event.reasoning_id if reasoning else event.message_id))  # type: ignore[union-attr]
        elif (
            isinstance(event, p.Message)
            and event.role != "tool"
            and (False, event.message_id) not in seen
            and event.content
        ):
            out.append(p.MessageDelta(message_id=event.message_id, role=event.role, content=event.content))
        elif isinstance(event, p.Reasoning) and (True, event.reasoning_id) not in seen and event.content:
            out.append(p.ReasoningDelta(reasoning_id=event.reasoning_id, content=event.content))
        out.append(event)
    return out


def keep(event: dict[str, Any]) -> dict[str, Any] | None:
    kind = event["type"]
    if kind == "tool_result":
        return event | {"output": event.get("output") or ""}
    if kind == "error" and not event["recoverable"]:
        return {key: event[key] for key in ("type", "code", "message")}
    if kind == "result":
        return {
            key: event.get(key)
            for key in ("type", "ok", "subtype", "exit_code", "duration_ms", "turn_count", "usage", "result")
        }
    return event


@settings(max_examples=60, deadline=None)
@given(full_sessions())
def test_round_trip_keeps_what_the_agui_row_promises(events: list[p.BaseEvent]) -> None:
    lines = encode("agui", events)
    assert not agui_rules(objects(lines))
    back = decode("agui", lines)
    source = events[-1]
    assert isinstance(source, p.Result)
    expected = with_deltas(events)
    if not source.ok and source.error is p.UNSET:  # RUN_ERROR always names an error
        message = f"the run failed ({source.subtype})"
        expected.insert(-1, p.Error(code="UNKNOWN", message=message))
    assert project([e for e in back if e.synthetic is not True], keep) == project(expected, keep)
    result = back[-1]
    assert isinstance(result, p.Result) and result.tools_used == tool_names(events) and not violations(back)


@settings(max_examples=25, deadline=None)
@given(full_sessions())
def test_every_event_we_write_validates_with_ag_ui(events: list[p.BaseEvent]) -> None:
    from ag_ui.core import Event
    from pydantic import TypeAdapter

    adapter = TypeAdapter(Event)
    for line in encode("agui", events):
        adapter.validate_json(line)


# -- robustness -------------------------------------------------------------------------------


def test_a_run_without_its_run_id_still_starts_and_says_what_it_lost() -> None:
    events = assert_field_lost("agui", b'{"type":"RUN_STARTED","threadId":"t"}', "field 'runId' is missing")
    assert isinstance(events[0], p.Start) and not events[0].synthetic


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (b'{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":true}', "field 'delta' must be a string"),
        (b'{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"paused"}}', "must be one of"),
        (b"data: [1, 2]", "the data is not a JSON object"),
    ],
)
def test_unusable_lines_are_named_precisely(line: bytes, problem: str) -> None:
    with pytest.raises(MalformedEventError, match=problem):
        decode("agui", [line])
