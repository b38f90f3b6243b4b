"""Locus --json-stream: golden seed lines, encoder shapes, Locus's own parser, round trips and junk input."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _dialect_kit import (
    assert_breakage_handled,
    assert_field_lost,
    assert_junk_handled,
    decode,
    decode_each,
    decode_fixture,
    encode,
    encode_objects,
    fields,
    fixture_lines,
    junk,
    line,
    merged,
    mutants,
    one,
    only,
    realistic,
    round_trip,
    seed_lines,
    seed_objects,
    violations,
)
from _strategies import (
    delta_runs,
    ident,
    messages,
    name,
    reasonings,
    sessions,
    stamped,
    text,
    tool_round_trips,
    usages,
)
from agentstream import protocol as p
from agentstream.consumer import read
from agentstream.dialects import detect_dialect, get_dialect
from agentstream.errors import MalformedEventError

START, TEXT, THINKING, TOOL_STARTED, TOOL_OK, TOOL_FAILED, STATUS, ERROR, DONE = range(9)
SESSION = [START, TEXT, THINKING, TOOL_STARTED, TOOL_OK, STATUS, ERROR, DONE]
PEERS = Path(__file__).resolve().parent / "peers"


def _seed(*indexes: int) -> list[bytes]:
    lines = seed_lines("locus")
    return [lines[index] for index in indexes]


def _envelope(kind: str, payload: dict[str, Any], timestamp: int = 1707700000000) -> bytes:
    return line(
        {"protocol": 1, "type": kind, "sessionId": "3f1c-uuid", "timestamp": timestamp, "payload": payload}
    )


def test_the_fixture_holds_every_seed_example() -> None:
    assert [obj["type"] for obj in seed_objects("locus")] == [
        "start",
        "text_delta",
        "thinking",
        "tool_started",
        "tool_completed",
        "tool_completed",
        "status",
        "error",
        "done",
    ]


def test_the_seed_examples_decode_line_by_line() -> None:
    per_line = decode_each("locus", _seed(*SESSION))
    start, text_delta, thinking, tool_started, tool_ok, status, error, done, flushed = per_line
    assert [(s.command, s.model, s.provider, s.cwd) for s in start] == [
        ("exec", "claude-sonnet-4-5-20250929", "anthropic", "/home/user/project")
    ]
    (delta,) = text_delta
    assert (delta.type, delta.role, delta.content) == (
        "message_delta",
        "assistant",
        "The authentication flow works by...",
    )
    closing, thought = thinking
    assert (closing.type, closing.message_id, closing.content) == ("message", delta.message_id, delta.content)
    assert (thought.type, thought.content) == ("reasoning_delta", "Let me analyze the auth middleware...")
    reasoning, call = tool_started
    assert (reasoning.type, reasoning.reasoning_id, reasoning.content) == (
        "reasoning",
        thought.reasoning_id,
        thought.content,
    )
    assert (call.call_id, call.name, call.arguments) == (
        "toolu_abc123",
        "Read",
        {"file_path": "/src/auth/middleware.ts"},
    )
    (result,) = tool_ok
    assert (result.call_id, result.name, result.status, result.duration_ms) == (
        "toolu_abc123",
        "Read",
        "success",
        42,
    )
    assert [(s.status, s.message) for s in status] == [("streaming", "Streaming AI response")]
    (fatal,) = error
    assert (fatal.code, fatal.message, fatal.recoverable) == (
        "NETWORK_TIMEOUT",
        "Request timed out after 30s",
        False,
    )
    (end,) = done
    assert (end.ok, end.subtype, end.exit_code, end.duration_ms, end.tools_used) == (
        True,
        "success",
        0,
        12345,
        ["Read", "Grep", "Edit"],
    )
    assert flushed == []
    # Locus says success after its fatal error (its done line is written whatever happened): the decoder keeps
    # that line's word, and the reader makes the run's outcome the fatal error, as the protocol requires.
    raw = [event for chunk in per_line for event in chunk]
    assert [v.split(": ")[1] for v in violations(raw)] == ["fatal-error"]
    read_back = list(read(b"".join(line + b"\n" for line in _seed(*SESSION)), "locus"))
    assert not violations(read_back)
    final = read_back[-1]
    assert isinstance(final, p.Result) and not final.ok and final.exit_code == 1
    assert isinstance(final.error, p.ErrorInfo) and final.error.code == "NETWORK_TIMEOUT"


def test_failed_tool_example() -> None:
    *_, result = decode("locus", _seed(TOOL_STARTED, TOOL_FAILED))
    assert (result.call_id, result.status, result.error, result.duration_ms) == (
        "toolu_abc123",
        "error",
        "File not found",
        0,
    )


def test_envelope_gives_session_id_and_timestamps() -> None:
    events = decode(
        "locus",
        [
            _envelope("start", {"command": "exec"}, 1707700000000),
            _envelope("text_delta", {"content": "hi"}, 1707700000123),
            _envelope(
                "error",
                {
                    "error": {
                        "code": "PROCESS_CRASHED",
                        "message": "Process terminated by signal",
                        "recoverable": False,
                    }
                },
                1707700000200,
            ),
            _envelope("done", {"exitCode": 1, "duration": 200, "success": False}, 1707700000201),
        ],
    )
    assert {event.session_id for event in events} == {"3f1c-uuid"}
    assert [event.ts for event in events] == [
        "2024-02-12T01:06:40.000Z",
        "2024-02-12T01:06:40.123Z",
        "2024-02-12T01:06:40.123Z",
        "2024-02-12T01:06:40.200Z",
        "2024-02-12T01:06:40.201Z",
    ]
    result = events[-1]
    assert (result.ok, result.exit_code, result.subtype) == (False, 1, "error")
    assert result.error == p.ErrorInfo(code="PROCESS_CRASHED", message="Process terminated by signal")


@pytest.mark.parametrize(
    ("exit_code", "success", "ok", "exit_out"),
    [(0, True, True, 0), (130, True, False, 130), (0, False, False, 1), (1, False, False, 1)],
)
def test_done_keeps_ok_and_exit_code_in_agreement(
    exit_code: int, success: bool, ok: bool, exit_out: int
) -> None:
    result = decode("locus", [_envelope("done", {"exitCode": exit_code, "duration": 1, "success": success})])[
        -1
    ]
    assert (result.ok, result.exit_code) == (ok, exit_out)


def test_thinking_without_content_is_a_status() -> None:
    assert decode("locus", [_envelope("thinking", {})])[-1] == p.Status(
        status="thinking", session_id="3f1c-uuid", seq=1, ts="2024-02-12T01:06:40.000Z"
    )


def test_a_newer_protocol_is_decoded_with_a_warning() -> None:
    raw = json.loads(_envelope("status", {"status": "running"}))
    events = decode("locus", [line({**raw, "protocol": 2})])
    assert isinstance(events[1], p.Log) and "protocol 2" in events[1].message
    assert events[2].status == "running"


def test_lines_without_a_payload_are_malformed() -> None:
    decoder = get_dialect("locus").decoder()
    with pytest.raises(MalformedEventError, match=r"locus 'done' line: field 'payload' is missing"):
        decoder.decode_line(line({"protocol": 1, "type": "done", "sessionId": "s", "timestamp": 1}))


def test_an_exit_code_written_as_a_string_is_read_and_an_unreadable_one_is_lost() -> None:
    done = decode("locus", [_envelope("done", {"exitCode": "0", "duration": 1.5, "success": True})])
    assert [e.type for e in done] == ["start", "result"] and done[-1].exit_code == 0
    events = decode("locus", [_envelope("done", {"exitCode": "zero", "duration": 1, "success": False})])
    warning = one(events, p.Log)
    assert warning.level == "warn" and "field 'exitCode' must be an integer, not a string" in warning.message
    assert events[-1].ok is False and events[-1].exit_code == 1


# -- encoder ----------------------------------------------------------------------------


def _seed_session() -> list[p.BaseEvent]:
    return stamped(
        [
            p.Start(
                command="exec",
                model="claude-sonnet-4-5-20250929",
                provider="anthropic",
                cwd="/home/user/project",
            ),
            p.MessageDelta(message_id="m", content="The authentication flow works by..."),
            p.Message(message_id="m", role="assistant", content="The authentication flow works by..."),
            p.Reasoning(reasoning_id="r", content="Let me analyze the auth middleware..."),
            p.ToolCall(
                call_id="toolu_abc123", name="Read", arguments={"file_path": "/src/auth/middleware.ts"}
            ),
            p.ToolResult(call_id="toolu_abc123", name="Read", status="success", duration_ms=42),
            p.Status(status="streaming", message="Streaming AI response"),
            p.Error(code="NETWORK_TIMEOUT", message="Request timed out after 30s"),
            p.Result(
                ok=True,
                subtype="success",
                exit_code=0,
                duration_ms=12345,
                tools_used=["Read", "Grep", "Edit"],
            ),
        ],
        session_id="3f1c-uuid",
    )


def test_encoder_reproduces_the_seed_examples() -> None:
    events = _seed_session()
    events[0].ts = "2024-02-12T01:06:40.000Z"
    encoded = encode_objects("locus", events)
    assert [{"type": obj["type"], "payload": obj["payload"]} for obj in encoded] == [
        seed_objects("locus")[index] for index in SESSION
    ]
    assert [list(obj) for obj in encoded] == [
        ["protocol", "type", "sessionId", "timestamp", "payload"]
    ] * len(encoded)
    assert {(obj["protocol"], obj["sessionId"]) for obj in encoded} == {(1, "3f1c-uuid")}
    assert encoded[0]["timestamp"] == 1707700000000
    failed = p.ToolResult(call_id="toolu_abc123", name="Read", status="error", error="File not found")
    assert (
        encode_objects("locus", stamped([p.Start(command="exec"), failed]))[1]["payload"]
        == (seed_objects("locus")[TOOL_FAILED]["payload"])
    )


def test_error_codes_outside_locus_travel_in_details() -> None:
    error = p.Error(
        code="RATE_LIMITED",
        message="slow down",
        recoverable=True,
        retry_in_ms=1500,
        fix="wait",
        details={"status": 429},
    )
    encoded = encode_objects("locus", stamped([p.Start(command="exec"), error]))[1]["payload"]["error"]
    assert encoded == {
        "code": "UNKNOWN",
        "message": "slow down",
        "details": {
            "agentstream": {"code": "RATE_LIMITED", "fix": "wait", "retry_in_ms": 1500},
            "details": {"status": 429},
        },
        "recoverable": True,
    }
    decoded = round_trip("locus", stamped([p.Start(command="exec"), error]))[1]
    assert (decoded.code, decoded.fix, decoded.retry_in_ms, decoded.details) == (
        "RATE_LIMITED",
        "wait",
        1500,
        {"status": 429},
    )


def test_a_failed_done_always_follows_a_fatal_error() -> None:
    failed = p.Result(
        ok=False,
        subtype="error",
        exit_code=1,
        error=p.ErrorInfo(code="CONTEXT_LIMIT", message="prompt too long"),
    )
    encoded = encode_objects("locus", stamped([p.Start(command="exec"), p.Status(status="running"), failed]))
    assert [obj["type"] for obj in encoded] == ["start", "status", "error", "done"]
    assert encoded[2]["payload"]["error"] == {
        "code": "CONTEXT_LIMIT",
        "message": "prompt too long",
        "recoverable": False,
    }
    held = stamped(
        [p.Start(command="exec"), p.Error(code="AUTH_EXPIRED", message="log in"), p.Status(status="x")]
    )
    encoded = encode_objects("locus", held)
    assert [obj["type"] for obj in encoded] == ["start", "error", "status", "error", "done"], (
        "a fatal error that a result does not follow keeps its place; the made-up end brings its own"
    )


def test_encoder_keeps_locus_guarantees_on_an_unfinished_stream() -> None:
    events = stamped(
        [
            p.Message(message_id="m", role="user", content="dropped"),
            p.Step(name="s", status="started"),
            p.ToolCall(call_id="c", name="Read"),
        ]
    )
    encoded = encode_objects("locus", events)
    # the open call is closed before the error: the made-up ending is whole
    assert [obj["type"] for obj in encoded] == ["start", "tool_started", "tool_completed", "error", "done"]
    assert encoded[3]["payload"]["error"]["recoverable"] is False
    assert encoded[4]["payload"] == {"exitCode": 1, "duration": 0, "toolsUsed": ["Read"], "success": False}
    more = get_dialect("locus").encoder()
    for event in _seed_session():
        more.encode(event)
    assert more.encode(p.Status(status="late")) == [] and more.finish() == [], "nothing follows done"


# -- Locus's own parser -------------------------------------------------------------------------


def _every_kind() -> list[p.BaseEvent]:
    """A session with every canonical event kind, the ones Locus drops included."""
    return stamped(
        [
            p.Start(command="exec", model="m", provider="anthropic", cwd="/w", tools=["Read"]),
            p.Message(message_id="u", role="user", content="explain"),
            p.ReasoningDelta(reasoning_id="r", content="let me "),
            p.ReasoningDelta(reasoning_id="r", content="see"),
            p.Reasoning(reasoning_id="r", content="let me see"),
            p.MessageDelta(message_id="a", content="The flow "),
            p.Message(message_id="a", role="assistant", content="The flow "),
            p.Message(message_id="b", role="assistant", content="works."),
            p.Reasoning(reasoning_id="r2", content="whole"),
            p.ToolCall(call_id="t1", name="Read", arguments={"path": "a"}),
            p.ToolProgress(call_id="t1", content="..."),
            p.ToolResult(call_id="t1", name="Read", status="success", output="x", duration_ms=7),
            p.ToolCall(call_id="t2", name="Bash"),
            p.ToolResult(call_id="t2", name="Bash", status="denied", error="not allowed"),
            p.Step(name="turn", status="completed", duration_ms=3),
            p.Progress(name="p", percent=50.0),
            p.Log(level="info", message="l"),
            p.Status(status="streaming"),
            p.Status(status="running", message="Building prompt context"),
            p.GenericEvent(name="e", data={"a": 1}),
            p.Usage(model="m", input_tokens=5, output_tokens=7),
            p.Error(code="RATE_LIMITED", message="slow", recoverable=True, retry_in_ms=10, details=[1]),
            p.Error(code="AUTH_EXPIRED", message="log in", fix="run locus login", details={"k": "v"}),
            p.Result(
                ok=False,
                subtype="error",
                exit_code=1,
                duration_ms=99,
                tools_used=["Read", "Bash"],
                usage=p.UsageTotals(input_tokens=5, output_tokens=7),
            ),
        ],
        session_id="0b7f1c2e-uuid",
    )


def _locus_check(lines: list[bytes]) -> dict[str, Any]:
    if not (PEERS / "node_modules" / "@locusai" / "shared").is_dir():
        pytest.fail("Locus's parser is not installed: run `npm install` in tests/peers (.ci/run does)")
    node = shutil.which("node")
    assert node is not None, "node is needed to run Locus's parser"
    completed = subprocess.run(
        [node, str(PEERS / "locus_check.mjs")],
        input=b"".join(item + b"\n" for item in lines),
        capture_output=True,
        check=True,
        timeout=60,
    )
    return json.loads(completed.stdout)  # type: ignore[no-any-return]


def test_locus_own_parser_accepts_every_line_we_write() -> None:
    finished = encode("locus", _every_kind())
    unfinished = encode("locus", _every_kind()[:12])
    kinds = [json.loads(item)["type"] for item in finished]
    assert kinds == [
        "start",
        "thinking",
        "thinking",
        "text_delta",
        "text_delta",
        "thinking",
        "tool_started",
        "tool_completed",
        "tool_started",
        "tool_completed",
        "status",
        "status",
        "error",
        "error",
        "done",
    ]
    assert [json.loads(item)["type"] for item in unfinished][-2:] == ["error", "done"]
    report = _locus_check(finished + unfinished)
    assert report == {
        "lines": len(finished) + len(unfinished),
        "accepted": len(finished) + len(unfinished),
        "rejected": [],
    }


def test_locus_own_parser_rejects_what_it_should() -> None:
    """The check is real: envelope-less seed examples and a bad code fail Locus's schema."""
    bad_code = json.loads(
        _envelope("error", {"error": {"code": "RATE_LIMITED", "message": "m", "recoverable": True}})
    )
    report = _locus_check([*seed_lines("locus")[:2], line(bad_code)])
    assert report["accepted"] == 0 and [item["line"] for item in report["rejected"]] == [1, 2, 3]
    assert "code" in report["rejected"][2]["problem"]


# -- properties ---------------------------------------------------------------------------------

statuses = st.builds(p.Status, status=name, message=st.none().map(lambda _: p.UNSET) | text)
locus_errors = st.builds(
    p.Error,
    code=st.sampled_from(["NETWORK_TIMEOUT", "CONTEXT_LIMIT", "UNKNOWN", "RATE_LIMITED", "TOOL_FAILED"]),
    message=text,
    recoverable=st.just(True),
    retry_in_ms=st.none().map(lambda _: p.UNSET) | st.integers(0, 10**6),
    fix=st.none().map(lambda _: p.UNSET) | text,
    details=st.none().map(lambda _: p.UNSET) | st.dictionaries(name, text, max_size=2),
)
tool_results_with_errors = tool_round_trips().map(lambda pair: [pair[0], _with_error(pair[1])])


def _with_error(result: p.ToolResult) -> p.ToolResult:
    if result.status == "error":
        result.error = result.output
    return result


BODY = st.one_of(
    messages(("user", "assistant")).map(lambda m: [m]),
    delta_runs(roles=("assistant",)),
    reasonings.map(lambda r: [r]),
    delta_runs(reasoning=True),
    tool_results_with_errors,
    statuses.map(lambda s: [s]),
    locus_errors.map(lambda e: [e]),
    usages.map(lambda u: [u]),
)


def _kept(events: list[p.AnyEvent]) -> list[tuple[Any, ...]]:
    """What Locus carries, in order. Assistant text and reasoning have no boundaries, so adjacent runs merge."""
    kept: list[tuple[Any, ...]] = []
    for event in events:
        if isinstance(event, p.Message) and event.role == "assistant":
            kept.append(("assistant", event.content))
        elif isinstance(event, p.Reasoning):
            kept.append(("reasoning", event.content))
        elif isinstance(event, p.ToolCall):
            kept.append(("call", event.ts, event.call_id, event.name, event.arguments))
        elif isinstance(event, p.ToolResult):
            kept.append(
                ("result", event.ts, event.call_id, event.name, event.status, event.error, event.duration_ms)
            )
        elif isinstance(event, p.Status):
            kept.append(("status", event.ts, event.status, event.message))
        elif isinstance(event, p.Error) and event.recoverable:
            kept.append(
                ("error", event.ts, event.code, event.message, event.fix, event.retry_in_ms, event.details)
            )
    return merged(merged(kept, "assistant"), "reasoning")


@settings(max_examples=60, deadline=None)
@given(sessions(middle=BODY), ident)
def test_round_trip_keeps_what_locus_carries(session: list[p.BaseEvent], provider: str) -> None:
    session = realistic(session)
    session[0].provider = provider
    decoded = round_trip("locus", session)
    assert not violations(decoded)
    start, result, original = decoded[0], decoded[-1], session[-1]
    assert (start.session_id, start.ts, start.command, start.cwd, start.model, start.provider) == (
        session[0].session_id,
        session[0].ts,
        "exec",
        "/work",
        "m1",
        provider,
    )
    assert _kept(decoded) == _kept(session)
    assert (
        result.ok,
        result.subtype,
        result.exit_code,
        result.duration_ms,
        result.tools_used,
        result.ts,
    ) == (
        original.ok,
        original.subtype,
        original.exit_code,
        original.duration_ms,
        original.tools_used,
        original.ts,
    )
    if not original.ok:
        fatal = decoded[-2]
        assert isinstance(fatal, p.Error) and not fatal.recoverable, (
            "Locus: a failed done follows a fatal error"
        )
        assert result.error == p.ErrorInfo(code="UNKNOWN", message="the run failed")


def test_sniff_claims_locus_lines() -> None:
    assert detect_dialect([json.loads(_envelope("start", {"command": "exec"}))]) == "locus"
    assert get_dialect("locus").sniff(seed_objects("locus")[START]) == 0.8
    opencode = {"type": "text", "timestamp": 1707700000000, "sessionID": "s", "part": {}}
    assert get_dialect("locus").sniff(opencode) == 0.0


PAYLOAD = [
    "command",
    "model",
    "provider",
    "cwd",
    "content",
    "tool",
    "toolId",
    "parameters",
    "success",
    "duration",
    "error",
    "status",
    "message",
    "exitCode",
    "toolsUsed",
    "tokensUsed",
]


BASES = [
    *({"protocol": 1, "sessionId": "s", "timestamp": 1707700000000, **obj} for obj in seed_objects("locus")),
    json.loads(
        _envelope(
            "error",
            {
                "error": {
                    "code": "UNKNOWN",
                    "message": "m",
                    "recoverable": True,
                    "details": {
                        "agentstream": {"code": "RATE_LIMITED", "fix": "f", "retry_in_ms": 5},
                        "details": [1],
                    },
                }
            },
        )
    ),
]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        mutants(BASES)
        | junk(
            ["start", "text_delta", "thinking", "tool_started", "tool_completed", "status", "error", "done"],
            ["protocol", "sessionId", "timestamp"],
            nested={
                "payload": fields(
                    PAYLOAD,
                    nested={
                        "error": fields(
                            ["code", "message", "recoverable", "details"],
                            nested={
                                "details": fields(
                                    ["agentstream", "details"],
                                    nested={"agentstream": fields(["code", "fix", "retry_in_ms"])},
                                )
                            },
                        )
                    },
                )
            },
        ),
        max_size=6,
    )
)
def test_junk_raises_only_malformed_event_errors(junk_lines: list[dict[str, Any]]) -> None:
    assert_junk_handled("locus", junk_lines)


def test_every_single_field_breakage_is_decoded_or_malformed() -> None:
    assert_breakage_handled("locus", BASES)


# -- the flat lines of the rewritten CLI (0.21 on) ---------------------------------------------------


def test_the_rewritten_cli_flat_lines_decode() -> None:
    events = decode_fixture("locus", "cli-v3.ndjson")
    assert [type(e).__name__ for e in events] == [
        "Start",
        "Status",
        "Status",
        "ReasoningDelta",
        "Reasoning",
        "MessageDelta",
        "MessageDelta",
        "Message",
        "ToolCall",
        "ToolResult",
        "MessageDelta",
        "Message",
        "Result",
    ]
    start, result = events[0], events[-1]
    assert start.session_id == "stream-1741600812345" and start.command == "exec"
    assert start.ts == "2026-03-10T10:00:12.345Z"
    assert [e.status for e in only(events, p.Status)] == ["thinking", "working"]
    assert [e.content for e in only(events, p.Message)] == [
        "I'll update the import in tests/test_auth.py.",
        "Done: the suite passes.",
    ]
    call, done = one(events, p.ToolCall), one(events, p.ToolResult)
    assert call.name == "Edit" and call.arguments["file_path"] == "tests/test_auth.py"
    assert (done.call_id, done.status, done.duration_ms) == (call.call_id, "success", 41)
    assert (
        done.output == "Edited tests/test_auth.py\n-from app.auth import check\n+from app.auth import verify"
    )
    assert (result.ok, result.exit_code, result.duration_ms, result.tools_used) == (True, 0, 9312, ["Edit"])
    assert violations(events) == []


def test_a_lone_error_ends_a_rewritten_cli_run_as_a_failure() -> None:
    """The rewritten CLI writes no ``done`` after a failure (and exits 0): its error is the reason, not a cut."""
    events = list(read(Path(__file__).parent / "fixtures" / "dialects" / "locus" / "cli-v3-failed.ndjson"))
    error, result = events[-2], events[-1]
    assert isinstance(error, p.Error) and not error.recoverable
    assert (error.code, error.message) == ("UNKNOWN", "Claude CLI exited with code 1: rate limit reached")
    assert error.details == {"retryable": True}
    assert (result.ok, result.exit_code, result.error.code) == (False, 1, "UNKNOWN")
    assert one(events, p.Message).content == "Looking at the build"
    assert violations(events) == []


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("No prompt provided", "INVALID_INPUT"),
        ("claude CLI not available", "CLI_NOT_FOUND"),
        ('No sandbox configured for "codex". Run "locus sandbox" to create one.', "INVALID_INPUT"),
        ("Execution failed", "UNKNOWN"),
    ],
)
def test_the_rewritten_cli_failures_get_their_codes(message: str, code: str) -> None:
    raw = line({"type": "error", "message": message, "retryable": False})
    events = list(read([raw]))
    assert detect_dialect([json.loads(raw)]) == "locus"
    result = events[-1]
    assert isinstance(result, p.Result) and (result.ok, result.error.code) == (False, code)
    assert (result.error.fix is p.UNSET) == (code == "UNKNOWN")


def test_an_error_the_rewritten_cli_went_on_after_was_not_fatal() -> None:
    more = [
        line({"type": "text_delta", "content": "retrying"}),
        line({"type": "done", "sessionId": "s", "stats": {}}),
    ]
    events = list(read([raw + b"\n" for raw in (*fixture_lines("locus", "cli-v3-failed.ndjson"), *more)]))
    assert one(events, p.Error).recoverable is True
    assert events[-1].ok is True and violations(events) == []


@pytest.mark.parametrize(
    "first",
    [
        {"type": "start", "sessionId": "stream-1", "timestamp": "2026-03-10T10:00:00.000Z"},
        {"type": "status", "state": "thinking", "elapsed": 3},
        {"type": "error", "message": "No prompt provided", "retryable": False},
        {"type": "done", "sessionId": "stream-1", "stats": {"duration": 1, "tools": 0, "tokens": 0}},
    ],
)
def test_the_rewritten_cli_lines_are_detected(first: dict[str, Any]) -> None:
    assert detect_dialect([first]) == "locus"


def test_flat_sniffing_leaves_other_shapes_alone() -> None:
    locus = get_dialect("locus")
    joelclaw_start = {"type": "start", "command": "joelclaw send", "ts": "2026-03-10T10:00:00.000Z"}
    joelclaw_error = {"type": "error", "ok": False, "command": "c", "error": {"message": "m", "code": "X"}}
    assert locus.sniff(joelclaw_start) == 0.0 and locus.sniff(joelclaw_error) == 0.0
    assert locus.sniff({"type": "text_delta", "content": "x"}) == 0.0
    assert detect_dialect([joelclaw_start]) == "joelclaw"


def test_a_flat_field_of_another_kind_loses_only_that_field() -> None:
    events = assert_field_lost(
        "locus", line({"type": "tool_started", "tool": "Bash", "params": "ls -la"}), r"'params'"
    )
    assert one(events, p.ToolCall).arguments == {}
    with pytest.raises(MalformedEventError, match=r"locus 'text_delta' line: field 'content'"):
        get_dialect("locus").decoder().decode_line(line({"type": "text_delta", "content": [7]}))


FLAT_BASES = [
    *(json.loads(raw) for raw in fixture_lines("locus", "cli-v3.ndjson")),
    *(json.loads(raw) for raw in fixture_lines("locus", "cli-v3-failed.ndjson")),
]


def test_every_single_flat_field_breakage_is_decoded_or_malformed() -> None:
    assert_breakage_handled("locus", FLAT_BASES)


def test_the_rewritten_cli_converts_to_lines_locus_own_parser_accepts() -> None:
    """Read the new shape, write the envelope: what an integration built on ``@locusai/shared`` can parse."""
    events = decode_fixture("locus", "cli-v3.ndjson") + decode(
        "locus", fixture_lines("locus", "cli-v3-failed.ndjson")
    )
    written = encode("locus", events)
    report = _locus_check(written)
    assert report == {"lines": len(written), "accepted": len(written), "rejected": []}
