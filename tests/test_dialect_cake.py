"""cake --output-format stream-json: every record kind, every outcome, tasks, odd fields, round trips, detection."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _dialect_kit import (
    assert_breakage_handled,
    assert_field_lost,
    assert_junk_handled,
    decode,
    decode_fixture,
    encode_objects,
    fixture_lines,
    junk,
    line,
    mutants,
    objects,
    only,
    realistic,
    response_items,
    round_trip,
    seed_objects,
    violations,
)
from _strategies import messages, sessions, stamped, tool_round_trips
from agentstream import protocol as p
from agentstream.dialects import detect_dialect, detect_dialect_in_lines, get_dialect
from agentstream.dialects.kit import event_data

SESSION = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
FILES = (
    "cake_run.jsonl",
    "cake_interrupted.jsonl",
    "cake_multi_task.jsonl",
    "cake_outcomes.jsonl",
    "cake_replay.jsonl",
    "cake_replay_error.jsonl",
)
USAGE = p.UsageTotals(input_tokens=2210, output_tokens=318, cached_tokens=1024, reasoning_tokens=96)


def _all_objects() -> list[dict[str, Any]]:
    return [obj for name in FILES for obj in objects(fixture_lines("cake", name))]


def _complete(**fields: Any) -> dict[str, Any]:
    """A ``task_complete`` record of a one-turn task, with ``fields`` set (or overridden)."""
    return {
        "type": "task_complete",
        "duration_ms": 10,
        "turn_count": 1,
        "tool_call_count": 0,
        "session_id": SESSION,
        "task_id": "t1",
        "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7},
        **fields,
    }


# -- decoding ------------------------------------------------------------------------------


def test_a_live_run_decodes_every_line_kind_with_the_lines_own_times() -> None:
    events = decode_fixture("cake", "cake_run.jsonl")
    assert not violations(events)
    assert [e.type for e in events] == [
        "start",
        "message",
        "reasoning",
        "tool_call",
        "event",
        "tool_result",
        "message",
        "result",
    ]
    start, user, thought, call, hook, output, answer, result = events
    assert all(e.session_id == SESSION for e in events), "task_start's session id is the stream's"
    assert (start.command, start.synthetic, start.ts) == ("cake", p.UNSET, "2026-05-11T09:15:02.481Z")
    assert (user.role, user.content, user.ts) == (
        "user",
        "How many TODO comments are in src?",
        "2026-05-11T09:15:02.481Z",
    )
    assert (thought.reasoning_id, thought.content) == (
        "rs_68a1f0c2",
        "Search the tree with grep.\n\nThen count the lines.",
    )
    assert (call.call_id, call.name, call.arguments["command"]) == (
        "call_Qm4x",
        "bash",
        "grep -rn TODO src | wc -l",
    )
    assert call.ts == "2026-05-11T09:15:04.640Z"
    assert hook.name == "cake.hook_event" and hook.ts == "2026-05-11T09:15:04.688Z"
    assert hook.data["event"] == "pre_tool_use" and hook.data["resolved_decision"] == "allow"
    assert "type" not in hook.data
    assert (output.call_id, output.name, output.status, output.output) == (
        "call_Qm4x",
        "bash",
        "success",
        "12\n",
    )
    assert (answer.message_id, answer.role, answer.ts) == (
        "msg_68a1f0c9",
        "assistant",
        "2026-05-11T09:15:06.250Z",
    )
    assert (result.ok, result.subtype, result.exit_code, result.duration_ms, result.turn_count) == (
        True,
        "success",
        0,
        3771,
        2,
    )
    assert result.usage == USAGE and result.tools_used == ["bash"]
    assert result.result == "There are 12 TODO comments under src."
    assert result.error is p.UNSET


def test_an_interrupted_task_ends_as_the_other_dialects_end_an_interrupted_run() -> None:
    events = decode_fixture("cake", "cake_interrupted.jsonl")
    assert not violations(events)
    cancelled, error, result = events[-3:]
    assert (cancelled.call_id, cancelled.status, cancelled.synthetic) == ("call_slow", "cancelled", True)
    assert isinstance(error, p.Error) and not error.recoverable
    assert (error.code, error.message) == ("INTERRUPTED", "the task was interrupted")
    assert (result.ok, result.subtype, result.exit_code) == (False, "interrupted", 130)
    assert result.error == p.ErrorInfo(code="INTERRUPTED", message="the task was interrupted")
    assert result.usage.input_tokens == 900


@pytest.mark.parametrize(
    ("record", "subtype", "exit_code", "code", "message"),
    [
        (
            {"subtype": "error_during_execution", "is_error": True, "error": "tool failed"},
            "error",
            1,
            "UNKNOWN",
            "tool failed",
        ),
        (
            {"subtype": "error_output_schema", "is_error": True, "error": "missing summary"},
            "output_schema",
            1,
            "UNKNOWN",
            "missing summary",
        ),
        (
            {"subtype": "interrupted", "is_error": True},
            "interrupted",
            130,
            "INTERRUPTED",
            "the task was interrupted",
        ),
        (
            {"subtype": "cut_off", "is_error": True, "error": "no final message"},
            "cut_off",
            1,
            "PROVIDER_ERROR",
            "no final message",
        ),
        (
            {"subtype": "limit_exceeded", "is_error": True, "error": "max_turns hit", "limit": "max_turns"},
            "max_turns",
            3,
            "MAX_TURNS",
            "max_turns hit",
        ),
        (
            {"subtype": "limit_exceeded", "is_error": True, "limit": "max_tool_calls"},
            "max_turns",
            3,
            "MAX_TURNS",
            "the max_tool_calls limit was reached",
        ),
        (
            {"subtype": "error_during_execution", "is_error": True},
            "error",
            1,
            "UNKNOWN",
            "cake reported a failure without a message",
        ),
        (
            {"subtype": "budget_spent", "is_error": True, "error": "over budget"},
            "budget_spent",
            1,
            "UNKNOWN",
            "over budget",
        ),
    ],
)
def test_each_failing_subtype_gives_a_fatal_error_then_a_failed_result(
    record: dict[str, Any], subtype: str, exit_code: int, code: str, message: str
) -> None:
    events = decode(
        "cake",
        [line({"type": "task_start", "session_id": SESSION, "task_id": "t1"}), line(_complete(**record))],
    )
    assert not violations(events)
    *_, error, result = events
    assert isinstance(error, p.Error) and (error.code, error.message, error.recoverable) == (
        code,
        message,
        False,
    )
    assert (result.ok, result.subtype, result.exit_code) == (False, subtype, exit_code)
    assert result.error == p.ErrorInfo(code=code, message=message)


def test_a_success_or_an_unknown_subtype_that_is_no_error_succeeds() -> None:
    for record in ({"subtype": "success", "is_error": False}, {"subtype": "noted", "success": True}):
        events = decode("cake", [line(_complete(**record))])
        assert [e.type for e in events] == ["start", "result"]
        assert (events[-1].ok, events[-1].subtype, events[-1].exit_code) == (True, "success", 0)


def test_the_outcomes_file_holds_one_task_per_failing_subtype() -> None:
    events = decode_fixture("cake", "cake_outcomes.jsonl")
    assert not violations(events)
    results = only(events, p.Result)
    assert [(r.subtype, r.error.code) for r in results] == [
        ("cut_off", "PROVIDER_ERROR"),
        ("output_schema", "UNKNOWN"),
        ("error", "UNKNOWN"),
    ]
    (thought,) = only(events, p.Reasoning)
    assert thought.content == "Considering the layout of the", (
        "without a summary, the reasoning content is read"
    )


def test_several_tasks_are_several_turns_of_one_session() -> None:
    events = decode_fixture("cake", "cake_multi_task.jsonl")
    assert not violations(events)
    starts, results = only(events, p.Start), only(events, p.Result)
    assert len(starts) == 2 and len(results) == 2
    assert [s.ts for s in starts] == ["2026-05-11T11:00:00.000Z", "2026-05-11T11:05:00.000Z"]
    assert {e.session_id for e in events} == {SESSION}
    first, second = results
    assert (first.ok, first.result) == (True, "It is called cake.")
    assert (second.ok, second.subtype, second.exit_code, second.result) == (
        False,
        "max_turns",
        3,
        "I could not remove the folder.",
    )
    assert second.error.message.startswith("max_tool_calls limit exceeded")
    denials = [e for e in events if isinstance(e, p.GenericEvent) and e.name == "cake.permission_denials"]
    assert [d.data for d in denials] == [["bash: rm -rf target"]]
    assert events.index(denials[0]) < events.index(second) - 1, "the fatal error stays just before the result"


def test_a_task_left_without_its_completion_is_ended_when_the_next_one_starts() -> None:
    start = {
        "type": "task_start",
        "session_id": SESSION,
        "task_id": "t1",
        "timestamp": "2026-05-11T11:00:00Z",
    }
    call = {"type": "function_call", "id": "fc", "call_id": "c1", "name": "bash", "arguments": "{}"}
    events = decode(
        "cake",
        [
            line(start),
            line(call),
            line({**start, "task_id": "t2"}),
            line(_complete(subtype="success", is_error=False)),
        ],
    )
    assert not violations(events)
    assert [e.type for e in events] == [
        "start",
        "tool_call",
        "tool_result",
        "error",
        "result",
        "start",
        "result",
    ]
    cancelled, error, ended = events[2:5]
    assert (cancelled.call_id, cancelled.status, cancelled.synthetic) == ("c1", "cancelled", True)
    assert (error.code, ended.ok, ended.synthetic) == ("NOT_FINISHED", False, True)


def test_a_replay_opens_with_the_session_meta_and_carries_context_records() -> None:
    events = decode_fixture("cake", "cake_replay.jsonl")
    assert not violations(events)
    assert [e.type for e in events] == ["start", "event", "message", "event", "message", "result"]
    start = events[0]
    assert (start.cwd, start.model, start.tools) == (
        "/home/dev/proj",
        "gpt-5.4-mini",
        ["bash", "read", "edit", "write"],
    )
    assert start.ts == "2026-05-13T07:30:00.500Z"
    assert [e.name for e in only(events, p.GenericEvent)] == ["cake.prompt_context", "cake.skill_activated"]
    assert events[2].role == "system", "cake's developer role is a system message"


def test_a_replay_error_fails_the_run_with_the_code_and_exit_code_cake_names() -> None:
    events = decode_fixture("cake", "cake_replay_error.jsonl")
    assert not violations(events)
    start, error, result = events
    assert start.synthetic and start.session_id == SESSION
    assert (error.code, result.exit_code, result.ok) == ("SESSION_NOT_FOUND", 3, False)
    assert error.message.startswith("session not found")


def test_turn_usage_of_a_session_file_is_a_usage_event() -> None:
    meta = {
        "type": "session_meta",
        "format_version": 4,
        "session_id": SESSION,
        "working_directory": "/w",
        "model": "m5",
        "tools": [],
    }
    turn = {
        "type": "turn_usage",
        "session_id": SESSION,
        "task_id": "t",
        "turn": 1,
        "usage": {
            "input_tokens": 4,
            "input_tokens_details": {"cached_tokens": 1},
            "output_tokens": 2,
            "output_tokens_details": {"reasoning_tokens": 1},
            "total_tokens": 6,
        },
    }
    (usage,) = only(decode("cake", [line(meta), line(turn)]), p.Usage)
    assert (
        usage.model,
        usage.input_tokens,
        usage.cached_tokens,
        usage.output_tokens,
        usage.reasoning_tokens,
    ) == ("m5", 4, 1, 2, 1)


# -- liberal reading -------------------------------------------------------------------------


def test_a_timestamp_of_the_wrong_kind_is_ignored_not_the_line() -> None:
    obj = {"type": "message", "role": "assistant", "content": "hi", "id": "m", "timestamp": ["2026"]}
    message = decode("cake", [line(obj)])[-1]
    assert message.content == "hi" and message.ts.startswith("20")


def test_fields_of_the_wrong_kind_are_lost_with_one_warning() -> None:
    events = assert_field_lost(
        "cake", line(_complete(subtype="success", is_error=False, duration_ms="soon")), "duration_ms"
    )
    assert events[-1].ok and events[-1].duration_ms == 0
    events = assert_field_lost(
        "cake", line(_complete(subtype="cut_off", is_error=True, error=True)), "'error'"
    )
    assert events[-1].error.message == "the model's response was cut off"
    events = assert_field_lost(
        "cake",
        line(_complete(subtype="success", is_error=False, permission_denials="x")),
        "permission_denials",
    )
    assert not only(events, p.GenericEvent)


def test_a_task_complete_without_a_string_subtype_is_malformed() -> None:
    from agentstream.errors import MalformedEventError

    with pytest.raises(MalformedEventError, match=r"^cake 'task_complete' line"):
        decode("cake", [line(_complete(subtype=True, is_error=False))])


# -- encoding ---------------------------------------------------------------------------------


def test_the_encoder_writes_cake_records_in_cakes_key_order() -> None:
    events = stamped(
        [
            p.Start(command="cake", cwd="/w", model="m5", tools=["bash"]),
            p.Message(message_id="msg_1", role="user", content="go"),
            p.Reasoning(reasoning_id="rs_1", content="think"),
            p.ToolCall(call_id="call_1", name="bash", arguments={"command": "ls"}),
            p.ToolResult(call_id="call_1", name="bash", status="success", output="a\n"),
            p.GenericEvent(name="cake.permission_denials", data=["bash: rm"]),
            p.Error(code="MAX_TURNS", message="max_tool_calls limit exceeded"),
            p.Result(
                ok=False,
                subtype="max_turns",
                exit_code=3,
                duration_ms=9,
                turn_count=2,
                result="partial",
                usage=USAGE,
            ),
        ],
        session_id=SESSION,
    )
    meta, task, message, reasoning, call, output, complete = encode_objects("cake", events)
    assert list(meta) == [
        "type",
        "format_version",
        "session_id",
        "timestamp",
        "working_directory",
        "model",
        "tools",
    ]
    assert list(task) == ["type", "session_id", "task_id", "timestamp"] and task["session_id"] == SESSION
    assert task["timestamp"] == events[0].ts
    assert list(message) == ["type", "role", "content", "id", "timestamp"]
    assert reasoning["summary"] == [{"type": "summary_text", "text": "think"}]
    assert list(call) == ["type", "id", "call_id", "name", "arguments", "timestamp"] and call["id"] == "fc_1"
    assert list(output) == ["type", "call_id", "output", "timestamp"]
    assert list(complete) == [
        "type",
        "subtype",
        "is_error",
        "result",
        "error",
        "limit",
        "duration_ms",
        "turn_count",
        "tool_call_count",
        "session_id",
        "task_id",
        "usage",
        "permission_denials",
    ]
    assert (complete["subtype"], complete["limit"], complete["tool_call_count"]) == (
        "limit_exceeded",
        "max_tool_calls",
        1,
    )
    assert complete["task_id"] == task["task_id"] and complete["permission_denials"] == ["bash: rm"]
    assert complete["usage"]["input_tokens_details"] == {"cached_tokens": 1024}


@pytest.mark.parametrize(
    ("subtype", "code", "cake"),
    [
        ("interrupted", "INTERRUPTED", "interrupted"),
        ("error", "INTERRUPTED", "interrupted"),
        ("error", "MAX_TURNS", "limit_exceeded"),
        ("cut_off", "PROVIDER_ERROR", "cut_off"),
        ("output_schema", "UNKNOWN", "error_output_schema"),
        ("error", "RATE_LIMITED", "error_during_execution"),
    ],
)
def test_a_failed_result_is_written_as_the_matching_task_complete(subtype: str, code: str, cake: str) -> None:
    error = p.ErrorInfo(code=code, message="why")
    events = stamped([p.Start(command="x"), p.Result(ok=False, subtype=subtype, exit_code=1, error=error)])
    complete = encode_objects("cake", events)[-1]
    assert (complete["subtype"], complete["is_error"]) == (cake, True)
    assert ("error" in complete) == (cake != "interrupted")


def test_the_encoder_carries_cake_events_back_and_drops_foreign_ones() -> None:
    hook = {
        "timestamp": "2026-05-11T09:15:04.688310442Z",
        "task_id": "t",
        "event": "stop",
        "decision": "none",
    }
    events = stamped(
        [
            p.Start(command="x"),
            p.GenericEvent(name="cake.hook_event", data=hook),
            p.GenericEvent(name="hook_event", data=hook),
            p.GenericEvent(name="other.thing", data={"a": 1}),
            p.Result(ok=True, subtype="success", exit_code=0),
        ]
    )
    encoded = encode_objects("cake", events)
    assert [obj["type"] for obj in encoded] == ["task_start", "hook_event", "task_complete"]
    assert encoded[1] == {"type": "hook_event", **hook}


def _same(events: list[p.AnyEvent]) -> list[tuple[Any, ...]]:
    """What a round trip through cake keeps of a decoded fixture: every event's fields and time, but the ending's
    (a made-up event, such as the result of a call a task left open, is stamped with the time it was read)."""
    return [
        (e.type, None if e.synthetic else e.ts, event_data(e))
        for e in events
        if isinstance(e, p.BaseEvent) and not isinstance(e, (p.Result, p.Error))
    ] + [
        (r.ok, r.subtype, r.exit_code, r.duration_ms, r.turn_count, r.usage, r.result, r.error)
        for r in only(events, p.Result)
    ]


@pytest.mark.parametrize("name", [name for name in FILES if name != "cake_replay_error.jsonl"])
def test_fixtures_round_trip_through_the_encoder(name: str) -> None:
    decoded = decode_fixture("cake", name)
    again = round_trip("cake", decoded)
    assert not violations(again)
    assert _same(again) == _same(decoded)


@settings(max_examples=60, deadline=None)
@given(
    sessions(
        middle=st.one_of(
            messages(("system", "user", "assistant", "tool")).map(lambda m: [m]), tool_round_trips()
        )
    )
)
def test_round_trip_keeps_what_cake_carries(session: list[p.BaseEvent]) -> None:
    session = realistic(session)
    decoded = round_trip("cake", session)
    assert not violations(decoded)
    start, result = decoded[0], decoded[-1]
    original_start, original = session[0], session[-1]
    assert (start.session_id, start.cwd, start.model, start.tools, start.ts) == (
        original_start.session_id,
        original_start.cwd,
        original_start.model,
        original_start.tools,
        original_start.ts,
    )
    assert response_items(decoded, timed=True) == response_items(session, timed=True)
    assert (result.ok, result.duration_ms, result.turn_count, result.usage, result.tools_used) == (
        original.ok,
        original.duration_ms,
        original.turn_count,
        original.usage,
        original.tools_used,
    )
    assert (result.exit_code == 0) == (original.exit_code == 0)


# -- detection --------------------------------------------------------------------------------


def test_task_records_identify_cake_surely() -> None:
    start, complete = (
        objects(fixture_lines("cake", "cake_run.jsonl"))[0],
        objects(fixture_lines("cake", "cake_run.jsonl"))[-1],
    )
    assert get_dialect("cake").sniff(start) >= 0.95 and get_dialect("cake").sniff(complete) >= 0.95
    for name in FILES:
        assert detect_dialect_in_lines(fixture_lines("cake", name)[:8]) == "cake", name


def test_item_lines_go_to_acai_without_a_timestamp_and_to_cake_with_one() -> None:
    for obj in seed_objects("acai"):
        assert get_dialect("cake").sniff(obj) == 0.0, obj["type"]
    assert detect_dialect(seed_objects("acai")[7:]) == "acai"
    call = {"type": "function_call", "id": "fc", "call_id": "c", "name": "bash", "arguments": "{}"}
    assert detect_dialect([call]) == "acai"
    assert detect_dialect([{**call, "timestamp": "2026-05-11T09:15:04Z"}]) == "cake"
    message = {"type": "message", "role": "assistant", "content": "hi", "timestamp": "2026-05-11T09:15:04Z"}
    assert detect_dialect([message]) == "gemini", "a Gemini message has a timestamp but no id"
    assert detect_dialect([{**message, "id": "msg_1"}]) == "cake"


def test_the_shared_item_lines_decode_as_acai_decodes_them() -> None:
    items = [
        obj for obj in _all_objects() if obj["type"] in ("function_call", "function_call_output", "message")
    ]
    items = [
        {k: v for k, v in obj.items() if k != "timestamp"} for obj in items if obj.get("role") != "developer"
    ]
    assert len(items) > 5

    def contents(dialect: str) -> list[dict[str, Any]]:
        events = decode(dialect, [line(obj) for obj in items], "s")[1:]
        return [{k: v for k, v in event_data(e).items() if k != "message_id" or "id" in v} for e in events]

    assert contents("cake") == contents("acai")


def test_cake_exit_codes_name_the_error() -> None:
    dialect = get_dialect("cake")
    assert dialect.error_for_exit(130).code == "INTERRUPTED"
    assert dialect.error_for_exit(2).code == "PROVIDER_ERROR"
    assert dialect.error_for_exit(3).code == "INVALID_INPUT"
    assert dialect.error_for_exit(1) is None


# -- junk ---------------------------------------------------------------------------------------

BASES = _all_objects()


def test_every_single_field_breakage_is_decoded_or_malformed() -> None:
    assert_breakage_handled("cake", BASES)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        mutants(BASES)
        | junk(
            [
                "task_start",
                "task_complete",
                "hook_event",
                "session_meta",
                "replay_error",
                "turn_usage",
                "reasoning",
            ],
            [
                "session_id",
                "task_id",
                "timestamp",
                "subtype",
                "is_error",
                "success",
                "error",
                "limit",
                "result",
                "usage",
                "summary",
                "content",
                "kind",
                "exit_code",
                "permission_denials",
                "tools",
                "model",
            ],
        ),
        max_size=6,
    )
)
def test_junk_raises_only_malformed_event_errors(junk_lines: list[dict[str, Any]]) -> None:
    assert_junk_handled("cake", junk_lines)


def test_a_task_complete_is_stamped_with_the_end_of_its_task() -> None:
    """``task_complete`` has no timestamp of its own: its events take the task's start plus its duration."""
    events = decode_fixture("cake", "cake_run.jsonl")
    assert events[0].ts == "2026-05-11T09:15:02.481Z"
    assert events[-1].ts == "2026-05-11T09:15:06.252Z"  # 02.481 + 3.771 s
