"""joelclaw ADR-0058 streams: golden seed lines, the HATEOAS envelope, encoder shapes, round trips, junk."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from _dialect_kit import (
    assert_breakage_handled,
    assert_junk_handled,
    decode,
    decode_each,
    encode_objects,
    fields,
    junk,
    line,
    mutants,
    realistic,
    round_trip,
    seed_lines,
    seed_objects,
    violations,
    without,
)
from _strategies import errors, json_values, logs, name, sessions, small_int, stamped, steps, text
from agentstream import protocol as p
from agentstream.dialects import detect_dialect, get_dialect
from agentstream.dialects.kit import rfc3339

COMMAND = "joelclaw send video/download --follow"
# The ADR's terminal line has placeholders (`"result":{...}`, `"next_actions":[...]`) that are not JSON, so the
# terminal lines here follow its TypeScript StreamEvent types and the shapes stream.ts writes (reference §2d).
NEXT = [
    {
        "command": "joelclaw run <run-id>",
        "description": "Inspect the run",
        "params": {"run-id": {"description": "Run id", "value": "01J5", "required": True}},
    },
    {"command": "joelclaw runs --count 3", "description": "List recent runs"},
]
RESULT = {
    "type": "result",
    "ok": True,
    "command": COMMAND,
    "result": {"reason": "completed", "final_event": "done"},
    "next_actions": NEXT,
}
ERROR = {
    "type": "error",
    "ok": False,
    "command": "joelclaw gateway stream",
    "error": {"message": "Redis connection failed", "code": "REDIS_CONNECT_FAILED"},
    "fix": "kubectl port-forward svc/redis 6379",
    "next_actions": NEXT[1:],
}


def test_the_fixture_holds_every_seed_example_that_is_json() -> None:
    assert [obj["type"] for obj in seed_objects("joelclaw")] == [
        "start",
        "step",
        "progress",
        "step",
        "step",
        "log",
        "step",
    ]


def test_the_seed_stream_decodes_line_by_line() -> None:
    per_line = decode_each("joelclaw", [*seed_lines("joelclaw"), line(RESULT)])
    start, download, progress, downloaded, transcribe, log, transcribed, result, flushed = per_line
    assert [(s.command, s.ts) for s in start] == [(COMMAND, "2026-02-19T08:25:00.000Z")]
    steps_ = download + downloaded + transcribe + transcribed
    assert [(s.name, s.status, s.duration_ms) for s in steps_] == [
        ("download", "started", p.UNSET),
        ("download", "completed", 3200),
        ("transcribe", "started", p.UNSET),
        ("transcribe", "completed", 45000),
    ]
    assert [(e.name, e.percent) for e in progress] == [("download", 45)]
    assert [(e.level, e.message) for e in log] == [("warn", "Large file, chunked transcription")]
    placeholder_stamped = [event.ts for event in steps_ + progress + log]
    assert all(rfc3339(ts) == ts for ts in placeholder_stamped), (
        "the seed's '...' timestamps are replaced, not kept"
    )
    (end,) = result
    assert (end.ok, end.subtype, end.exit_code, end.command) == (True, "success", 0, COMMAND)
    assert end.result == '{"reason":"completed","final_event":"done"}'
    assert end.next_actions == [
        p.NextAction(
            command="joelclaw run <run-id>",
            description="Inspect the run",
            params={"run-id": {"description": "Run id", "value": "01J5", "required": True}},
        ),
        p.NextAction(command="joelclaw runs --count 3", description="List recent runs"),
    ]
    assert flushed == []
    assert not violations([event for chunk in per_line for event in chunk])


def test_the_error_envelope_is_a_fatal_error_and_a_failed_result() -> None:
    start, error, result = decode("joelclaw", [line(ERROR)])
    assert start.synthetic
    assert (error.code, error.message, error.recoverable, error.fix) == (
        "REDIS_CONNECT_FAILED",
        "Redis connection failed",
        False,
        "kubectl port-forward svc/redis 6379",
    )
    assert (result.ok, result.exit_code, result.command) == (False, 1, "joelclaw gateway stream")
    assert result.error == p.ErrorInfo(
        code="REDIS_CONNECT_FAILED",
        message="Redis connection failed",
        fix="kubectl port-forward svc/redis 6379",
    )
    assert [action.command for action in result.next_actions] == ["joelclaw runs --count 3"]


def test_a_bare_envelope_from_a_non_streaming_command_is_read_too() -> None:
    bare = {key: value for key, value in RESULT.items() if key != "type"}
    assert detect_dialect([bare]) == "joelclaw"
    result = decode("joelclaw", [line(bare)])[-1]
    assert (result.ok, result.command, len(result.next_actions)) == (True, COMMAND, 2)


def test_an_interrupted_stream_is_a_successful_result() -> None:
    interrupted = {
        "type": "result",
        "ok": True,
        "command": COMMAND,
        "result": {"reason": "interrupted"},
        "next_actions": [],
    }
    result = decode("joelclaw", [line(interrupted)])[-1]
    assert (result.ok, result.exit_code, result.result) == (True, 0, '{"reason":"interrupted"}')


# -- encoder ----------------------------------------------------------------------------------


def test_encoder_reproduces_the_seed_stream_and_the_envelopes() -> None:
    events = stamped(
        [
            p.Start(command=COMMAND),
            p.Step(name="download", status="started"),
            p.Progress(name="download", percent=45),
            p.Step(name="download", status="completed", duration_ms=3200),
            p.Step(name="transcribe", status="started"),
            p.Log(level="warn", message="Large file, chunked transcription"),
            p.Step(name="transcribe", status="completed", duration_ms=45000),
            p.Result(
                ok=True,
                subtype="success",
                exit_code=0,
                result='{"reason":"completed","final_event":"done"}',
                next_actions=[
                    p.NextAction(
                        command=a["command"], description=a["description"], params=a.get("params", p.UNSET)
                    )
                    for a in NEXT
                ],
            ),
        ]
    )
    encoded = encode_objects("joelclaw", events)
    assert without(encoded, frozenset({"ts"})) == without(
        [*seed_objects("joelclaw"), RESULT], frozenset({"ts"})
    )
    assert encoded[0]["ts"] == events[0].ts and "ts" not in encoded[-1]
    failure = stamped(
        [
            p.Start(command="joelclaw gateway stream"),
            p.Error(code="REDIS_CONNECT_FAILED", message="Redis connection failed", fix=ERROR["fix"]),
            p.Result(
                ok=False,
                subtype="error",
                exit_code=1,
                next_actions=[
                    p.NextAction(command="joelclaw runs --count 3", description="List recent runs")
                ],
            ),
        ]
    )
    encoded = encode_objects("joelclaw", failure)
    assert [obj["type"] for obj in encoded] == ["start", "error"], "the fatal error is the terminal envelope"
    assert encoded[1] == ERROR


def test_encoder_keeps_the_envelope_guarantees() -> None:
    events = stamped(
        [
            p.Start(command="joelclaw watch"),
            p.Message(message_id="m", role="assistant", content="dropped"),
            p.Log(level="debug", message="d"),
            p.Progress(name="copy", current=3, total=4),
            p.Error(code="RATE_LIMITED", message="retrying", recoverable=True),
        ]
    )
    encoded = encode_objects("joelclaw", events)
    assert [obj["type"] for obj in encoded] == ["start", "log", "progress", "log", "error"]
    assert encoded[1]["level"] == "info" and encoded[2]["percent"] == 75.0
    assert encoded[3] == {
        "type": "log",
        "level": "error",
        "message": "RATE_LIMITED: retrying",
        "ts": events[4].ts,
    }
    terminal = encoded[-1]
    assert terminal == {
        "type": "error",
        "ok": False,
        "command": "joelclaw watch",
        "error": {"message": "the stream ended without a result", "code": "NOT_FINISHED"},
        "fix": "no fix was given: see error.message",
        "next_actions": [],
    }
    plain = encode_objects(
        "joelclaw", stamped([p.Start(command="x"), p.Result(ok=True, subtype="success", exit_code=0)])
    )
    assert plain[-1] == {"type": "result", "ok": True, "command": "x", "result": None, "next_actions": []}


# -- properties ---------------------------------------------------------------------------------

progresses = st.builds(p.Progress, name=name, percent=st.floats(0, 100), message=text)
events_ = st.builds(p.GenericEvent, name=name, data=json_values)
actions = st.lists(
    st.builds(
        p.NextAction,
        command=text,
        description=text,
        params=st.just(p.UNSET) | st.dictionaries(name, st.dictionaries(name, text, max_size=2), max_size=2),
    ),
    max_size=3,
)
BODY = st.one_of(steps, logs, progresses, events_, errors).map(lambda event: [event])
STEPS = st.builds(
    p.Step, name=name, status=st.sampled_from(["completed", "failed"]), duration_ms=small_int, error=text
)


def _kept(events: list[p.AnyEvent]) -> list[tuple[Any, ...]]:
    kept: list[tuple[Any, ...]] = []
    for event in events:
        if isinstance(event, p.Step):
            kept.append(("step", event.ts, event.name, event.status, event.duration_ms, event.error))
        elif isinstance(event, p.Progress):
            kept.append(("progress", event.ts, event.name, event.percent, event.message))
        elif isinstance(event, p.Log):
            kept.append(("log", event.ts, event.level, event.message))
        elif isinstance(event, p.Error) and event.recoverable:
            kept.append(("log", event.ts, "error", f"{event.code}: {event.message}"))
        elif isinstance(event, p.GenericEvent):
            kept.append(("event", event.ts, event.name, event.data))
    return kept


@settings(max_examples=60, deadline=None)
@given(sessions(middle=BODY | STEPS.map(lambda step: [step])), actions, st.none() | text, st.none() | text)
def test_round_trip_keeps_what_joelclaw_carries(
    session: list[p.BaseEvent], next_actions: list[p.NextAction], final: str | None, fix: str | None
) -> None:
    session = realistic(session)
    original = session[-1]
    original.next_actions = next_actions
    original.result = final if final is not None else p.UNSET
    if not original.ok:
        original.error = p.ErrorInfo(
            code="TOOL_FAILED", message="it broke", fix=fix if fix is not None else p.UNSET
        )
    decoded = round_trip("joelclaw", session)
    assert not violations(decoded)
    assert (decoded[0].command, decoded[0].ts) == ("exec", session[0].ts)
    assert _kept(decoded) == _kept(session)
    result = decoded[-1]
    assert (result.ok, result.exit_code, result.command, result.next_actions) == (
        original.ok,
        original.exit_code,
        "exec",
        next_actions,
    )
    if original.ok:
        assert result.result == original.result
    else:
        assert (result.error.code, result.error.message) == ("TOOL_FAILED", "it broke")
        assert result.error.fix == (fix if fix is not None else "no fix was given: see error.message")


def test_sniff_does_not_claim_canonical_or_other_starts() -> None:
    assert detect_dialect([seed_objects("joelclaw")[0]]) == "joelclaw"
    canonical = {
        "type": "start",
        "v": 1,
        "session_id": "s",
        "seq": 0,
        "ts": "2026-02-19T08:25:00.000Z",
        "command": "x",
    }
    locus = {"protocol": 1, "type": "start", "sessionId": "s", "timestamp": 1, "payload": {"command": "exec"}}
    assert get_dialect("joelclaw").sniff(canonical) == 0.0
    assert get_dialect("joelclaw").sniff(locus) == 0.0
    assert detect_dialect([canonical]) == "canonical"


ACTIONS = st.lists(fields(["command", "description", "params"]), max_size=2)


BASES = [
    *seed_objects("joelclaw"),
    RESULT,
    ERROR,
    {key: value for key, value in ERROR.items() if key != "type"},
    {
        "type": "progress",
        "name": "copy",
        "current": 3,
        "total": 4,
        "message": "m",
        "ts": "2026-02-19T08:25:00Z",
    },
    {"type": "event", "name": "video/downloaded", "data": {"id": 1}, "ts": "2026-02-19T08:25:00Z"},
]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        mutants(BASES)
        | junk(
            ["start", "step", "progress", "log", "event", "result", "error"],
            [
                "command",
                "ts",
                "name",
                "status",
                "duration_ms",
                "error",
                "percent",
                "current",
                "total",
                "message",
                "level",
                "data",
                "ok",
                "result",
                "fix",
            ],
            nested={"next_actions": ACTIONS, "error": fields(["message", "code"])},
        )
        | fields(
            ["ok", "command", "result", "fix"],
            nested={"next_actions": ACTIONS, "error": fields(["message", "code"])},
        ),
        max_size=6,
    )
)
def test_junk_raises_only_malformed_event_errors(junk_lines: list[dict[str, Any]]) -> None:
    assert_junk_handled("joelclaw", junk_lines)


def test_every_single_field_breakage_is_decoded_or_malformed() -> None:
    assert_breakage_handled("joelclaw", BASES)
