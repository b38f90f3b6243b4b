"""Gemini CLI stream-json: golden seed lines, exit codes, encoder shapes, round trips and junk input."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
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
    merged,
    mutants,
    only,
    realistic,
    round_trip,
    seed_lines,
    seed_objects,
    violations,
    without,
)
from _strategies import delta_runs, errors, messages, sessions, stamped, text, tool_round_trips, usages
from agentstream import protocol as p
from agentstream.consumer import read
from agentstream.dialects import detect_dialect, get_dialect

INIT, USER, DELTA_1, DELTA_2, TOOL_USE, TOOL_OK, TOOL_ERROR, WARNING, RESULT_OK, RESULT_ERROR = range(10)
SESSION = [INIT, USER, DELTA_1, DELTA_2, TOOL_USE, TOOL_OK, WARNING, RESULT_OK]


def _seed(*indexes: int) -> list[bytes]:
    lines = seed_lines("gemini")
    return [lines[index] for index in indexes]


def test_the_fixture_holds_every_seed_example() -> None:
    assert [obj["type"] for obj in seed_objects("gemini")] == [
        "init",
        "message",
        "message",
        "message",
        "tool_use",
        "tool_result",
        "tool_result",
        "error",
        "result",
        "result",
    ]


def test_the_seed_session_decodes_line_by_line() -> None:
    per_line = decode_each("gemini", _seed(*SESSION))
    init, user, delta_1, delta_2, tool_use, tool_ok, warning, result, flushed = per_line
    (start,) = init
    assert (start.session_id, start.model, start.ts, start.command) == (
        "session-123",
        "gemini-pro",
        "2023-10-27T10:00:00.000Z",
        "gemini",
    )
    assert [(m.type, m.role, m.content, m.ts) for m in user] == [
        ("message", "user", "Hello, how are you?", "2023-10-27T10:00:01.000Z")
    ]
    assert [(d.type, d.content, d.ts) for d in delta_1 + delta_2] == [
        ("message_delta", "I am ", "2023-10-27T10:00:02.000Z"),
        ("message_delta", "doing well.", "2023-10-27T10:00:02.100Z"),
    ]
    closing, call = tool_use
    assert isinstance(closing, p.Message), "the next non-delta line closes the run with one complete message"
    assert (closing.message_id, closing.content, closing.ts) == (
        delta_1[0].message_id,
        "I am doing well.",
        "2023-10-27T10:00:02.100Z",
    )
    assert (call.call_id, call.name, call.arguments, call.ts) == (
        "call_1",
        "calculator",
        {"expression": "2+2"},
        "2023-10-27T10:00:03.000Z",
    )
    (ok,) = tool_ok
    assert (ok.call_id, ok.name, ok.status, ok.output) == ("call_1", "calculator", "success", "4")
    (error,) = warning
    assert (error.type, error.message, error.recoverable) == (
        "error",
        "Loop detected, stopping execution",
        True,
    )
    (end,) = result
    assert (end.ok, end.subtype, end.exit_code, end.duration_ms, end.ts) == (
        True,
        "success",
        0,
        6000,
        "2023-10-27T10:00:06.000Z",
    )
    assert end.usage == p.UsageTotals(input_tokens=50, output_tokens=50, cached_tokens=0)
    assert end.tools_used == ["calculator"]
    assert flushed == []
    assert not violations([event for chunk in per_line for event in chunk])


def test_tool_error_example_pairs_with_its_call() -> None:
    *_, result = decode("gemini", _seed(TOOL_USE, TOOL_ERROR))
    assert (result.call_id, result.name, result.status) == ("call_1", "calculator", "error")
    assert result.error == "ValueError: Invalid expression"


def test_error_result_example_is_a_fatal_error_then_a_failed_result() -> None:
    start, error, result = decode("gemini", _seed(RESULT_ERROR))
    assert start.synthetic, "Gemini streams that fail before init (e.g. auth) have no start of their own"
    assert (error.code, error.message, error.recoverable) == ("UNKNOWN", "Something went wrong", False)
    assert (result.ok, result.subtype, result.exit_code) == (False, "error", 1)
    assert result.error == p.ErrorInfo(code="UNKNOWN", message="Something went wrong")


@pytest.mark.parametrize(
    ("error_type", "code", "exit_code", "subtype"),
    [
        ("FatalAuthenticationError", "AUTH_EXPIRED", 41, "error"),
        ("FatalInputError", "INVALID_INPUT", 42, "error"),
        ("FatalSandboxError", "UNKNOWN", 44, "error"),
        ("FatalConfigError", "INVALID_INPUT", 52, "error"),
        ("FatalTurnLimitedError", "MAX_TURNS", 53, "max_turns"),
        ("FatalToolExecutionError", "TOOL_FAILED", 54, "error"),
        ("FatalUntrustedWorkspaceError", "PERMISSION_DENIED", 55, "error"),
        ("FatalCancellationError", "INTERRUPTED", 130, "interrupted"),
        ("unknown", "UNKNOWN", 1, "error"),
    ],
)
def test_exit_code_follows_geminis_error_class(
    error_type: str, code: str, exit_code: int, subtype: str
) -> None:
    obj = {
        "type": "result",
        "timestamp": "2023-10-27T10:00:06.000Z",
        "status": "error",
        "error": {"type": error_type, "message": "boom"},
        "stats": {"duration_ms": 0},
    }
    *_, error, result = decode("gemini", [line(obj)])
    assert (error.code, result.error.code, result.exit_code, result.subtype) == (
        code,
        code,
        exit_code,
        subtype,
    )


def test_invalid_stream_failure_takes_the_error_line_as_its_cause() -> None:
    lines = [
        line(
            {
                "type": "error",
                "timestamp": "2023-10-27T10:00:05.000Z",
                "severity": "error",
                "message": "Model stream ended with an invalid chunk",
            }
        ),
        line({"type": "result", "timestamp": "2023-10-27T10:00:06.000Z", "status": "error"}),
    ]
    _, error, result = decode("gemini", lines)
    assert (error.recoverable, error.code, error.message, error.ts) == (
        False,
        "PROVIDER_ERROR",
        "Model stream ended with an invalid chunk",
        "2023-10-27T10:00:05.000Z",
    ), "a reply Gemini could not use, in words it has no table row for, is still the provider's failure"
    assert (result.ok, result.exit_code) == (False, 1), (
        "Gemini itself exits 0 here; ok and exit_code must agree"
    )
    assert result.error == p.ErrorInfo(
        code="PROVIDER_ERROR", message="Model stream ended with an invalid chunk"
    )


INVALID_STREAM = [
    ("The model response was blocked due to safety settings.", "PROVIDER_ERROR", "refusal"),
    ("The model response was blocked due to recitation/copyright filters.", "PROVIDER_ERROR", "refusal"),
    (
        "Model response was truncated because it exceeded the token limit. "
        "Try using /compress to free up context space.",
        "CONTEXT_LIMIT",
        "error",
    ),
    ("The model response was blocked due to other policy settings.", "PROVIDER_ERROR", "error"),
    ("Model stream ended without a finish reason.", "PROVIDER_ERROR", "error"),
    ("Model stream ended with malformed function call.", "PROVIDER_ERROR", "error"),
    ("Model stream ended with unexpected tool call.", "PROVIDER_ERROR", "error"),
    (
        "The model returned an empty response with no text or thoughts. "
        "This may be a transient API issue; please try again.",
        "PROVIDER_ERROR",
        "error",
    ),
    (
        "The model returned reasoning thoughts but no final response text. "
        "If your context window is near capacity, try using /compress.",
        "PROVIDER_ERROR",
        "error",
    ),
]
"""What Gemini CLI 0.61 says of each reply it cannot use (its InvalidStream), and what that is in our terms."""


@pytest.mark.parametrize(("message", "code", "subtype"), INVALID_STREAM)
def test_a_reply_gemini_cannot_use_fails_with_what_its_words_name(
    message: str, code: str, subtype: str
) -> None:
    """A refusal, the token limit, a broken reply: in stream-json (the error line) and in ``-o json`` alike."""
    lines = [
        line(
            {
                "type": "error",
                "timestamp": "2023-10-27T10:00:05.000Z",
                "severity": "error",
                "message": message,
            }
        ),
        line({"type": "result", "timestamp": "2023-10-27T10:00:06.000Z", "status": "error"}),
    ]
    document = _document(response="", stats=_METRICS, error={"type": "INVALID_STREAM", "message": message})
    for events in (decode("gemini", lines), get_dialect("gemini").decoder().decode_document(document)):
        assert not violations(events)
        error, result = events[-2:]
        assert (error.code, error.message, error.recoverable) == (code, message, False)
        assert (result.ok, result.subtype, result.exit_code, result.error.code) == (False, subtype, 1, code)


def test_encoder_keeps_a_refusal_and_a_truncated_answer() -> None:
    """A refusal is written as Gemini's own kind of one (a truncated answer's code is its type already); both read
    back with their code and subtype."""
    endings = [
        (
            "refusal",
            p.ErrorInfo(code="PROVIDER_ERROR", message="the model's answer was refused"),
            "SAFETY_BLOCKED",
        ),
        ("error", p.ErrorInfo(code="CONTEXT_LIMIT", message="cut off at the token limit"), "CONTEXT_LIMIT"),
    ]
    for subtype, ending, kind in endings:
        failed = p.Result(ok=False, subtype=subtype, exit_code=1, error=ending)
        encoded = encode_objects("gemini", stamped([p.Start(command="g"), failed]))
        assert encoded[-1]["error"] == {"type": kind, "message": ending.message}
        result = decode("gemini", [line(encoded[-1])])[-1]
        assert (result.subtype, result.error, result.exit_code) == (subtype, ending, 1)


def test_severity_error_followed_by_a_successful_result_is_not_fatal() -> None:
    lines = [
        line(
            {
                "type": "error",
                "timestamp": "2023-10-27T10:00:05.000Z",
                "severity": "error",
                "message": "Maximum session turns exceeded",
            }
        ),
        line({"type": "result", "timestamp": "2023-10-27T10:00:06.000Z", "status": "success"}),
    ]
    _, error, result = decode("gemini", lines)
    assert error.recoverable and result.ok
    lines.insert(1, _seed(TOOL_USE)[0])
    assert decode("gemini", lines)[1].recoverable, "a severity error that the run outlives is recoverable"
    *_, last = decode("gemini", lines[:1])
    assert isinstance(last, p.Error) and not last.recoverable, "at the end of input it is what ended the run"


def test_per_model_stats_become_usage_events() -> None:
    stats = {
        "total_tokens": 9,
        "input_tokens": 7,
        "output_tokens": 2,
        "cached": 1,
        "input": 6,
        "duration_ms": 5,
        "tool_calls": 0,
        "models": {
            "gemini-2.5-pro": {
                "total_tokens": 9,
                "input_tokens": 7,
                "output_tokens": 2,
                "cached": 1,
                "input": 6,
            }
        },
    }
    events = decode(
        "gemini",
        [
            line(
                {
                    "type": "result",
                    "timestamp": "2023-10-27T10:00:06.000Z",
                    "status": "success",
                    "stats": stats,
                }
            )
        ],
    )
    (usage,) = only(events, p.Usage)
    assert (usage.model, usage.input_tokens, usage.output_tokens, usage.cached_tokens) == (
        "gemini-2.5-pro",
        7,
        2,
        1,
    )
    assert events[-1].usage == p.UsageTotals(input_tokens=7, output_tokens=2, cached_tokens=1)


def test_a_delta_run_open_at_eof_is_closed_by_finish() -> None:
    per_line = decode_each("gemini", _seed(INIT, DELTA_1))
    (closing,) = per_line[-1]
    assert isinstance(closing, p.Message) and closing.content == "I am "


# -- encoder -------------------------------------------------------------------------------


def _at(ts: str, event: p.BaseEvent) -> p.BaseEvent:
    event.ts = ts
    return event


def test_encoder_reproduces_the_seed_session_with_timestamps() -> None:
    objs = seed_objects("gemini")
    ts = [obj["timestamp"] for obj in objs]
    events = stamped(
        [
            _at(ts[INIT], p.Start(command="gemini", model="gemini-pro")),
            _at(ts[USER], p.Message(message_id="u", role="user", content="Hello, how are you?")),
            _at(ts[DELTA_1], p.MessageDelta(message_id="a", content="I am ")),
            _at(ts[DELTA_2], p.MessageDelta(message_id="a", content="doing well.")),
            _at(ts[DELTA_2], p.Message(message_id="a", role="assistant", content="I am doing well.")),
            _at(
                ts[TOOL_USE], p.ToolCall(call_id="call_1", name="calculator", arguments={"expression": "2+2"})
            ),
            _at(ts[TOOL_OK], p.ToolResult(call_id="call_1", name="calculator", status="success", output="4")),
            _at(
                ts[WARNING],
                p.Error(code="UNKNOWN", message="Loop detected, stopping execution", recoverable=True),
            ),
            _at(
                ts[RESULT_OK],
                p.Result(
                    ok=True,
                    subtype="success",
                    exit_code=0,
                    duration_ms=6000,
                    usage=p.UsageTotals(input_tokens=50, output_tokens=50),
                ),
            ),
        ],
        session_id="session-123",
    )
    assert encode_objects("gemini", events) == [objs[index] for index in SESSION]


def test_encoder_reproduces_the_tool_error_and_error_result_examples() -> None:
    objs = seed_objects("gemini")
    failed_tool = p.ToolResult(
        call_id="call_1", name="calculator", status="error", error="ValueError: Invalid expression"
    )
    encoded = encode_objects("gemini", stamped([p.Start(command="g"), failed_tool]))
    assert without(encoded[1], frozenset({"timestamp"})) == without(
        objs[TOOL_ERROR], frozenset({"timestamp"})
    )
    failure = stamped(
        [
            p.Start(command="g"),
            p.Error(code="UNKNOWN", message="Something went wrong"),
            p.Result(
                ok=False,
                subtype="error",
                exit_code=1,
                error=p.ErrorInfo(code="UNKNOWN", message="Something went wrong"),
            ),
        ]
    )
    encoded = encode_objects("gemini", failure)
    assert [obj["type"] for obj in encoded] == ["init", "result"], "the fatal error folds into the result"
    assert without(encoded[1], frozenset({"timestamp"})) == without(
        objs[RESULT_ERROR], frozenset({"timestamp"})
    )


def test_encoder_error_types_and_dropped_events() -> None:
    events = stamped(
        [
            p.Start(command="g"),
            p.Message(message_id="s", role="system", content="sys"),
            p.Reasoning(reasoning_id="r", content="hmm"),
            p.Step(name="x", status="started"),
            p.Error(code="AUTH_EXPIRED", message="log in again"),
            p.Result(ok=False, subtype="error", exit_code=41),
        ]
    )
    encoded = encode_objects("gemini", events)
    assert [obj["type"] for obj in encoded] == ["init", "result"]
    assert encoded[1]["error"] == {"type": "FatalAuthenticationError", "message": "log in again"}
    assert "stats" not in encoded[1], "a result with nothing to count has no stats"
    unknown_code = encode_objects(
        "gemini",
        stamped(
            [
                p.Start(command="g"),
                p.Result(
                    ok=False,
                    subtype="error",
                    exit_code=1,
                    error=p.ErrorInfo(code="RATE_LIMITED", message="slow"),
                ),
            ]
        ),
    )
    assert unknown_code[1]["error"]["type"] == "RATE_LIMITED"
    assert decode("gemini", [line(unknown_code[1])])[-1].error.code == "RATE_LIMITED"


def test_encoder_stats_count_tools_and_sum_usage_per_model() -> None:
    events = stamped(
        [
            p.Start(command="g", model="gemini-pro"),
            p.Usage(model="gemini-pro", input_tokens=10, output_tokens=4, cached_tokens=3),
            p.ToolCall(call_id="t", name="read_file"),
            p.ToolResult(call_id="t", name="read_file", status="cancelled"),
            p.Usage(model="gemini-pro", input_tokens=5, output_tokens=1),
            p.Result(
                ok=True,
                subtype="success",
                exit_code=0,
                duration_ms=9,
                usage=p.UsageTotals(input_tokens=15, output_tokens=5, cached_tokens=3),
            ),
        ]
    )
    tool_result, result = encode_objects("gemini", events)[2:]
    assert tool_result["status"] == "error", "Gemini has only success and error"
    figures = {"total_tokens": 20, "input_tokens": 15, "output_tokens": 5, "cached": 3, "input": 12}
    assert result["stats"] == {
        **figures,
        "duration_ms": 9,
        "tool_calls": 1,
        "models": {"gemini-pro": figures},
    }


def test_encoder_ends_an_unfinished_stream_with_a_failed_result() -> None:
    encoded = encode_objects("gemini", stamped([p.Start(command="g"), p.Error(code="UNKNOWN", message="x")]))
    assert [obj["type"] for obj in encoded] == ["init", "error", "result"]
    assert encoded[1]["severity"] == "error", "a fatal error not followed by a result keeps its own line"
    assert encoded[2]["status"] == "error" and encoded[2]["error"]["type"] == "NOT_FINISHED"


# -- properties -----------------------------------------------------------------------------


def _kept(events: list[p.AnyEvent]) -> list[tuple[Any, ...]]:
    """What Gemini carries, in order: user and assistant text (assistant runs merge), tools, recoverable errors."""
    kept: list[tuple[Any, ...]] = []
    for event in events:
        if isinstance(event, p.Message) and event.role in ("user", "assistant"):
            kept.append((event.role, event.content))
        elif isinstance(event, p.ToolCall):
            kept.append(("call", event.call_id, event.name, event.arguments))
        elif isinstance(event, p.ToolResult):
            kept.append(("result", event.call_id, event.name, event.status, event.output, event.error))
        elif isinstance(event, p.Error) and event.recoverable:
            kept.append(("error", event.message))
    return merged(kept, "assistant")


def _per_model(events: list[p.AnyEvent]) -> dict[str, tuple[int, int, int]]:
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for usage in only(events, p.Usage):
        figures = totals[usage.model]
        figures[0] += usage.input_tokens
        figures[1] += usage.output_tokens
        figures[2] += usage.cached_tokens
    return {model: tuple(figures) for model, figures in totals.items()}  # type: ignore[misc]


BODY = st.one_of(
    messages(("user", "assistant", "system")).map(lambda m: [m]),
    delta_runs(roles=("assistant",)),
    tool_round_trips(),
    usages.map(lambda u: [u]),
    errors.map(lambda e: [e]),
)


@settings(max_examples=60, deadline=None)
@given(sessions(middle=BODY))
def test_round_trip_keeps_what_gemini_carries(session: list[p.BaseEvent]) -> None:
    session = realistic(session)
    decoded = round_trip("gemini", session)
    assert not violations(decoded)
    start, result, original = decoded[0], decoded[-1], session[-1]
    assert (start.session_id, start.model, start.ts) == (
        session[0].session_id,
        session[0].model,
        session[0].ts,
    )
    assert _kept(decoded) == _kept(session)
    assert _per_model(decoded) == _per_model(session)
    assert (result.ok, result.exit_code, result.duration_ms, result.tools_used, result.ts) == (
        original.ok,
        original.exit_code,
        original.duration_ms,
        original.tools_used,
        original.ts,
    )
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.cached_tokens) == (
        original.usage.input_tokens,
        original.usage.output_tokens,
        original.usage.cached_tokens,
    )


def test_sniff_claims_gemini_init_only() -> None:
    init = seed_objects("gemini")[INIT]
    assert detect_dialect([init]) == "gemini"
    acai_init = seed_objects("acai")[7]
    opencode_tool = {"type": "tool_use", "timestamp": 1707700000000, "sessionID": "s", "part": {}}
    assert get_dialect("gemini").sniff(acai_init) == 0.0
    assert get_dialect("gemini").sniff(opencode_tool) == 0.0


STATS = ["total_tokens", "input_tokens", "output_tokens", "cached", "input", "duration_ms", "tool_calls"]


BASES = [
    *seed_objects("gemini"),
    {
        "type": "result",
        "timestamp": "2023-10-27T10:00:06.000Z",
        "status": "success",
        "stats": {
            "total_tokens": 3,
            "input_tokens": 2,
            "output_tokens": 1,
            "cached": 0,
            "input": 2,
            "duration_ms": 1,
            "tool_calls": 0,
            "models": {
                "gemini-pro": {
                    "total_tokens": 3,
                    "input_tokens": 2,
                    "output_tokens": 1,
                    "cached": 0,
                    "input": 2,
                }
            },
        },
    },
    {"type": "error", "timestamp": "2023-10-27T10:00:05.000Z", "severity": "error", "message": "m"},
]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        mutants(BASES)
        | junk(
            ["init", "message", "tool_use", "tool_result", "error", "result"],
            [
                "timestamp",
                "session_id",
                "model",
                "role",
                "content",
                "delta",
                "tool_name",
                "tool_id",
                "parameters",
                "status",
                "output",
                "severity",
                "message",
            ],
            nested={
                "error": fields(["type", "message"]),
                "stats": fields(STATS, nested={"models": st.dictionaries(text, fields(STATS), max_size=2)}),
            },
        ),
        max_size=6,
    )
)
def test_junk_raises_only_malformed_event_errors(junk_lines: list[dict[str, Any]]) -> None:
    assert_junk_handled("gemini", junk_lines)


def test_every_single_field_breakage_is_decoded_or_malformed() -> None:
    assert_breakage_handled("gemini", BASES)


# -- exit codes -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code", "subtype"),
    [
        (41, "AUTH_EXPIRED", "error"),
        (42, "INVALID_INPUT", "error"),
        (44, "UNKNOWN", "error"),
        (52, "INVALID_INPUT", "error"),
        (53, "MAX_TURNS", "max_turns"),
        (54, "TOOL_FAILED", "error"),
        (55, "PERMISSION_DENIED", "error"),
        (130, "INTERRUPTED", "interrupted"),
    ],
)
def test_a_documented_exit_code_names_the_error_even_with_nothing_on_stdout(
    status: int, code: str, subtype: str
) -> None:
    """A real child that exits as Gemini CLI does at start-up (no init, no result) gets the error its code means."""
    import sys

    from agentstream.consumer import spawn

    with spawn([sys.executable, "-c", f"import sys; sys.exit({status})"], dialect="gemini") as child:
        events = list(child)
    error, result = events[-2:]
    assert isinstance(error, p.Error) and (error.code, error.recoverable) == (code, False)
    assert error.fix and f"exit {status}" in error.message
    assert isinstance(result, p.Result) and (result.exit_code, result.subtype, result.ok) == (
        status,
        subtype,
        False,
    )
    assert not violations(events)


def test_exit_codes_gemini_does_not_document_are_left_to_the_reader() -> None:
    gemini = get_dialect("gemini")
    assert gemini.error_for_exit(0) is None and gemini.error_for_exit(1) is None
    assert gemini.error_for_exit(2) is None and gemini.error_for_exit(137) is None


# -- -o json: one document --------------------------------------------------------------------------

_METRICS = {
    "models": {
        "gemini-2.5-pro": {
            "api": {"totalRequests": 2, "totalErrors": 0, "totalLatencyMs": 4100},
            "tokens": {
                "input": 7400,
                "prompt": 9000,
                "candidates": 310,
                "total": 9500,
                "cached": 1600,
                "thoughts": 190,
                "tool": 0,
            },
            "roles": {},
        }
    },
    "tools": {
        "totalCalls": 1,
        "totalSuccess": 1,
        "totalFail": 0,
        "totalDurationMs": 12,
        "totalDecisions": {"accept": 1, "reject": 0, "modify": 0, "auto_accept": 0},
        "byName": {"read_file": {"count": 1, "success": 1, "fail": 0, "durationMs": 12}},
    },
    "files": {"totalLinesAdded": 0, "totalLinesRemoved": 0},
}
"""``SessionMetrics`` as ``uiTelemetry.ts`` defines it (reference A.6)."""


def _document(**fields: Any) -> Any:
    """A ``-o json`` document as Gemini prints it (``JSON.stringify(output, null, 2)``), parsed back."""
    import json

    return json.loads(json.dumps({"session_id": "9b1c-json", **fields}, indent=2))


def test_json_output_document_is_a_whole_successful_run_with_its_response() -> None:
    events = (
        get_dialect("gemini")
        .decoder()
        .decode_document(_document(response="The file says hi.", stats=_METRICS))
    )
    assert [e.type for e in events] == ["start", "message", "usage", "result"]
    assert not violations(events)
    start, message, usage, result = events
    assert (start.session_id, start.model, bool(start.synthetic)) == ("9b1c-json", "gemini-2.5-pro", False)
    assert message.content == "The file says hi."
    assert (usage.input_tokens, usage.cached_tokens, usage.output_tokens, usage.reasoning_tokens) == (
        9000,
        1600,
        500,  # the candidates and the thoughts, as the chat log's tokens are read
        190,
    )
    assert (result.ok, result.exit_code, result.result, result.tools_used) == (
        True,
        0,
        message.content,
        ["read_file"],
    )
    assert result.usage.input_tokens == 9000


@pytest.mark.parametrize(
    ("error", "code", "subtype", "exit_code"),
    [
        (
            {"type": "FatalTurnLimitedError", "message": "Reached max session turns"},
            "MAX_TURNS",
            "max_turns",
            53,
        ),
        (
            {"type": "FatalInputError", "message": "No input provided", "code": 42},
            "INVALID_INPUT",
            "error",
            42,
        ),
        (
            {"type": "INVALID_STREAM", "message": "Model stream ended with an invalid chunk"},
            "PROVIDER_ERROR",
            "error",
            1,
        ),
    ],
)
def test_json_output_document_with_an_error_is_a_failure_with_its_code(
    error: dict[str, Any], code: str, subtype: str, exit_code: int
) -> None:
    document = _document(
        response="partial", stats=_METRICS, error=error, warnings=["Skipping unreadable file"]
    )
    events = get_dialect("gemini").decoder().decode_document(document)
    assert [e.type for e in events] == ["start", "log", "message", "usage", "error", "result"]
    assert not violations(events)
    warning, error_event, result = events[1], events[-2], events[-1]
    assert (warning.level, warning.message) == ("warn", "Skipping unreadable file")
    assert (error_event.code, error_event.message, error_event.recoverable) == (code, error["message"], False)
    assert (result.ok, result.subtype, result.exit_code) == (False, subtype, exit_code)


def test_only_gemini_documents_are_read_as_gemini_documents() -> None:
    gemini = get_dialect("gemini")
    assert gemini.decoder().decode_document({"type": "result", "subtype": "success"}) is None
    assert gemini.decoder().decode_document([{"response": "x"}]) is None
    assert [e.type for e in gemini.decoder().decode_document({"response": "just text"})] == [
        "start",
        "message",
        "result",
    ]


@pytest.mark.parametrize(
    ("error", "code", "exit_code"),
    [
        (
            {"type": "FatalTurnLimitedError", "message": "Reached max session turns", "code": 53},
            "MAX_TURNS",
            53,
        ),
        ({"type": "FatalAuthenticationError", "message": "Login expired", "code": 41}, "AUTH_EXPIRED", 41),
        # An API error exits with its HTTP status (the process keeps its low byte: 429 & 0xFF).
        (
            {"type": "Error", "message": "[API Error: quota exceeded (Status: 429)]", "code": 429},
            "RATE_LIMITED",
            173,
        ),
        (
            {"type": "Error", "message": "[API Error: internal (Status: 500)]", "code": 500},
            "PROVIDER_ERROR",
            244,
        ),
        # A fatal tool error names the tool's error type, and Gemini exits 54.
        (
            {
                "type": "FatalToolExecutionError",
                "message": "Error executing tool write_file: …",
                "code": "no_space_left",
            },
            "TOOL_FAILED",
            54,
        ),
    ],
)
def test_an_error_document_alone_is_detected_and_read_with_its_code(
    error: dict[str, Any], code: str, exit_code: int
) -> None:
    """What Gemini prints on a failure in ``-o json``: ``{session_id, error}`` only, pretty-printed."""
    import json

    from agentstream.consumer import read

    document = json.dumps({"session_id": "9b1c-json", "error": error}, indent=2).encode()
    events = list(read([document + b"\n"]))
    assert not violations(events)
    start, result = events[0], events[-1]
    assert start.command == "gemini" and start.session_id == "9b1c-json"
    assert (result.ok, result.error.code, result.exit_code) == (False, code, exit_code)
    assert result.error.message == error["message"]


def test_a_fatal_tool_error_result_in_the_stream_is_a_tool_failure() -> None:
    result_line = line(
        {
            "type": "result",
            "timestamp": "2026-01-01T00:00:03.000Z",
            "status": "error",
            "error": {"type": "no_space_left", "message": "Error executing tool write_file: no space left"},
        }
    )
    result = decode("gemini", [*_seed(INIT), result_line])[-1]
    assert (result.ok, result.error.code, result.exit_code) == (False, "TOOL_FAILED", 54)


@pytest.mark.parametrize(
    ("status", "message", "expected"),
    [
        ("success", "[Operation Cancelled] Reason: User denied execution.", "cancelled"),
        ("error", "[Operation Cancelled] Reason: User denied execution.", "cancelled"),
        ("success", "File not found: a.txt", "error"),
        ("error", "File not found: a.txt", "error"),
    ],
)
def test_a_tool_line_with_an_error_is_never_a_success(status: str, message: str, expected: str) -> None:
    """Gemini writes a cancelled call as ``success`` with its error: the typed and careful paths agree."""
    tool_result = {
        "type": "tool_result",
        "timestamp": "2026-01-01T00:00:02.000Z",
        "tool_id": seed_objects("gemini")[TOOL_USE]["tool_id"],
        "status": status,
        "error": {"type": "TOOL_EXECUTION_ERROR", "message": message},
    }
    for extra in ({}, {"unknown_field": 1}):  # the second one takes the careful path
        events = decode("gemini", [*_seed(INIT, TOOL_USE), line({**tool_result, **extra})])
        (result,) = only(events, p.ToolResult)
        assert result.status == expected and result.error == f"TOOL_EXECUTION_ERROR: {message}"


REAL = Path(__file__).parent / "fixtures" / "dialects" / "gemini"
"""What Gemini CLI 0.61.0 printed against the fake Gemini API (tests/test_real_gemini_cli.py)."""


@pytest.mark.parametrize(
    ("name", "exit_code", "code", "subtype", "answer"),
    [
        ("plain-auto.ndjson", 0, None, "success", "Hello from the fake Gemini."),
        ("tool.ndjson", 0, None, "success", "There is one file, notes.txt."),
        ("tool.json", 0, None, "success", "There is one file, notes.txt."),
        ("read-file-error.ndjson", 0, None, "success", "No such file."),
        ("thinking.ndjson", 0, None, "success", "The answer is 4."),
        ("api-error-400.ndjson", 144, "CONTEXT_LIMIT", "error", p.UNSET),
        ("rate-limited-429.ndjson", 173, "RATE_LIMITED", "error", p.UNSET),
        ("cut-off.ndjson", 1, "PROVIDER_ERROR", "error", "A long answer that will "),
        ("no-finish-reason.ndjson", 1, "PROVIDER_ERROR", "error", "Cut off he"),
        ("malformed-call.ndjson", 1, "PROVIDER_ERROR", "error", "Calling a tool."),
        ("safety-blocked.ndjson", 1, "PROVIDER_ERROR", "refusal", p.UNSET),
        ("max-tokens.json", 1, "CONTEXT_LIMIT", "error", ""),
    ],
)
def test_what_the_real_cli_printed(
    name: str, exit_code: int, code: str | None, subtype: str, answer: object
) -> None:
    """The result of each real output: its exit code is the process's (but for InvalidStream, which exits 0)."""
    events = list(read((REAL / name).read_bytes(), "auto"))
    assert not violations(events)
    (result,) = [event for event in events if isinstance(event, p.Result)]
    error = result.error.code if result.error is not p.UNSET else None
    assert (result.ok, result.exit_code, error, result.subtype, result.result) == (
        exit_code == 0,
        exit_code,
        code,
        subtype,
        answer,
    )


def test_thoughts_are_the_rest_of_the_total() -> None:
    """stream-json's ``output_tokens`` leaves the thoughts out; they are what ``total_tokens`` has beyond it."""
    events = list(read((REAL / "thinking.ndjson").read_bytes(), "gemini"))
    (usage,) = [event for event in events if isinstance(event, p.Usage)]
    assert (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens) == (50, 18, 12)


@pytest.mark.parametrize(
    ("name", "replies"),
    [
        ("real-0.61.0-tools.ndjson", 3),  # two calls, their results, one more call, its result, the answer
        ("tool.ndjson", 2),
        ("plain-auto.ndjson", 1),  # the router's call is not the conversation's
        ("rate-limited-429.ndjson", 0),
        ("tool.json", 2),  # -o json: the main role's requests
    ],
)
def test_the_turn_count_is_the_model_s_replies(name: str, replies: int) -> None:
    """A reply is the model's text and calls, up to its tools' results, after which the CLI asks again."""
    (result,) = only(list(read((REAL / name).read_bytes(), "auto")), p.Result)
    assert result.turn_count == replies
