"""acai --streaming-json: golden seed lines, encoder shapes, round trips and junk input."""

from __future__ import annotations

import json
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
    response_items,
    round_trip,
    seed_lines,
    seed_objects,
    violations,
    without,
)
from _strategies import messages, sessions, stamped, tool_round_trips
from agentstream import protocol as p
from agentstream.dialects import detect_dialect, get_dialect
from agentstream.dialects.kit import RAW_ARGUMENTS_KEY

SCHEMA_EXAMPLES = slice(0, 7)
SESSION = slice(7, 16)


def test_the_fixture_holds_every_seed_example() -> None:
    kinds = [obj["type"] for obj in seed_objects("acai")]
    assert kinds[SCHEMA_EXAMPLES] == [
        "message",
        "function_call",
        "function_call_output",
        "reasoning",
        "init",
        "result",
        "result",
    ]
    assert kinds[SESSION] == [
        "init",
        "message",
        "message",
        "reasoning",
        "function_call",
        "message",
        "function_call_output",
        "message",
        "result",
    ]


def test_the_full_example_decodes_line_by_line() -> None:
    per_line = decode_each("acai", seed_lines("acai")[SESSION])
    init, system, user, reasoning, call, say, output, answer, result, flushed = per_line
    (start,) = init
    assert isinstance(start, p.Start) and not start.synthetic
    assert start.session_id == "550e8400-e29b-41d4-a716-446655440000"
    assert (start.cwd, start.tools) == ("/Users/user/project", ["shell"])
    assert [(m.role, m.content) for m in system + user] == [
        ("system", "You are a helpful AI CLI assistant."),
        ("user", "List files in the current directory"),
    ]
    (thought,) = reasoning
    assert (thought.reasoning_id, thought.content) == (
        "reason_001",
        "The user wants to list files. I'll use the Shell tool to run ls.",
    )
    (tool_call,) = call
    assert (tool_call.call_id, tool_call.name, tool_call.arguments) == (
        "call_001",
        "Shell",
        {"command": "ls"},
    )
    assert [(m.type, m.role, m.content) for m in say] == [
        ("message", "assistant", "Let me list the files for you.")
    ]
    (tool_result,) = output
    assert (tool_result.call_id, tool_result.name, tool_result.status) == ("call_001", "Shell", "success")
    assert tool_result.output == "file1.txt\nfile2.txt\nfile3.txt"
    assert answer[0].content.startswith("Here are the files")
    (end,) = result
    assert (end.ok, end.subtype, end.exit_code, end.duration_ms, end.turn_count) == (
        True,
        "success",
        0,
        1523,
        2,
    )
    assert end.usage == p.UsageTotals(
        input_tokens=150, output_tokens=320, cached_tokens=50, reasoning_tokens=120
    )
    assert end.tools_used == ["Shell"]
    assert flushed == []
    assert not violations([event for chunk in per_line for event in chunk])


def test_schema_examples_decode_alone() -> None:
    message, call, output, reasoning, init, ok, _failed = seed_lines("acai")[SCHEMA_EXAMPLES]
    events = decode("acai", [message])
    assert isinstance(events[0], p.Start) and events[0].synthetic and events[0].command == "acai instruct"
    assert (events[1].message_id, events[1].role, events[1].content) == (
        "msg_abc123",
        "assistant",
        "Hello! How can I help you today?",
    )
    paired = decode("acai", [call, output])
    assert paired[1].arguments == {"command": "ls -la"}
    assert (paired[2].call_id, paired[2].name) == ("call_xyz789", "Shell")
    assert paired[2].output.startswith("total 8\ndrwxr-xr-x")
    assert decode("acai", [output])[1].name == "unknown", "a result with no call seen cannot know its name"
    assert decode("acai", [reasoning])[1].content.startswith("The user is asking about the weather")
    assert decode("acai", [init])[0].session_id == "550e8400-e29b-41d4-a716-446655440000"
    assert decode("acai", [ok])[-1].ok is True


def test_a_failed_result_becomes_a_fatal_error_then_the_result() -> None:
    *_, error, result = decode("acai", [seed_lines("acai")[6]])
    assert isinstance(error, p.Error) and not error.recoverable
    assert (error.code, error.message) == ("UNKNOWN", "Error: API request failed: rate limit exceeded")
    assert (result.ok, result.subtype, result.exit_code, result.duration_ms) == (False, "error", 1, 342)
    assert result.error == p.ErrorInfo(
        code="UNKNOWN", message="Error: API request failed: rate limit exceeded"
    )
    assert result.usage.input_tokens == 45


def test_later_versions_exit_code_is_kept_and_names_the_error() -> None:
    obj = {
        "type": "result",
        "success": False,
        "subtype": "error",
        "error": "bad input",
        "duration_ms": 1,
        "turn_count": 0,
        "exit_code": 3,
    }
    error, result = decode("acai", [line(obj)])[1:]
    assert (error.code, result.exit_code) == ("INVALID_INPUT", 3)


def test_arguments_that_are_not_json_are_kept_raw_and_reported() -> None:
    obj = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "Shell",
        "arguments": "{not json",
    }
    _start, log, call = decode("acai", [line(obj)])
    assert call.arguments == {RAW_ARGUMENTS_KEY: "{not json"}
    assert isinstance(log, p.Log) and log.level == "warn" and "not valid JSON" in log.message
    assert "call_1" not in log.message and RAW_ARGUMENTS_KEY in log.message
    listed = decode("acai", [line({**obj, "arguments": "[1, 2]"})])
    assert listed[-1].arguments == {RAW_ARGUMENTS_KEY: "[1, 2]"} and "not a JSON object" in listed[1].message
    # The encoder gives the raw string back unchanged.
    assert encode_objects("acai", [p.Start(command="x"), call])[1]["arguments"] == "{not json"


def test_unknown_lines_pass_through_whole() -> None:
    obj = {"type": "hook_event", "name": "pre", "x": 1}
    events = decode("acai", [line(obj)])
    assert events == [p.UnknownEvent(type="hook_event", raw=obj)]


# -- encoder ----------------------------------------------------------------------------

IGNORED = frozenset({"id"})


def test_encoder_reproduces_the_full_example() -> None:
    shell = p.ToolCall(call_id="call_001", name="Shell", arguments={"command": "ls"})
    events = stamped(
        [
            p.Start(command="acai instruct", cwd="/Users/user/project", tools=["shell"]),
            p.Message(message_id="m1", role="system", content="You are a helpful AI CLI assistant."),
            p.Message(message_id="m2", role="user", content="List files in the current directory"),
            p.Reasoning(
                reasoning_id="reason_001",
                content="The user wants to list files. I'll use the Shell tool to run ls.",
            ),
            shell,
            p.Message(message_id="m3", role="assistant", content="Let me list the files for you."),
            p.ToolResult(
                call_id="call_001", name="Shell", status="success", output="file1.txt\nfile2.txt\nfile3.txt"
            ),
            p.Message(
                message_id="m4",
                role="assistant",
                content="Here are the files in your current directory:\n- file1.txt\n- file2.txt\n- file3.txt",
            ),
            p.Result(
                ok=True,
                subtype="success",
                exit_code=0,
                duration_ms=1523,
                turn_count=2,
                usage=p.UsageTotals(
                    input_tokens=150, output_tokens=320, cached_tokens=50, reasoning_tokens=120
                ),
            ),
        ],
        session_id="550e8400-e29b-41d4-a716-446655440000",
    )
    encoded = encode_objects("acai", events)
    expected = seed_objects("acai")[SESSION]
    assert without(encoded, IGNORED) == without(expected, IGNORED)
    assert encoded[4]["id"] == "fc_001" and encoded[3]["id"] == "reason_001"


def test_encoder_reproduces_the_error_result_folding_the_fatal_error() -> None:
    message = "Error: API request failed: rate limit exceeded"
    events = stamped(
        [
            p.Start(command="acai"),
            p.Error(code="RATE_LIMITED", message=message),
            p.Result(
                ok=False,
                subtype="error",
                exit_code=1,
                duration_ms=342,
                turn_count=1,
                usage=p.UsageTotals(input_tokens=45),
                error=p.ErrorInfo(code="RATE_LIMITED", message=message),
            ),
        ]
    )
    encoded = encode_objects("acai", events)
    assert [obj["type"] for obj in encoded] == ["init", "result"], "acai has no error line"
    assert encoded[1] == seed_objects("acai")[6]


def test_encoder_drops_what_acai_cannot_carry_and_always_ends_with_a_result() -> None:
    events = stamped(
        [
            p.Message(message_id="m", role="assistant", content="hi"),
            p.MessageDelta(message_id="m2", content="par"),
            p.Step(name="s", status="started"),
            p.Error(code="RATE_LIMITED", message="slow down", recoverable=True),
            p.Usage(model="m", input_tokens=3),
        ]
    )
    encoded = encode_objects("acai", events)
    # the open delta run is closed (acai carries it as a complete message), then the result
    assert [obj["type"] for obj in encoded] == ["init", "message", "message", "result"]
    assert encoded[2]["content"] == "par"
    assert encoded[-1]["success"] is False and encoded[-1]["error"] == "the stream ended without a result"


# -- properties ---------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    sessions(
        middle=st.one_of(
            messages(("system", "user", "assistant", "tool")).map(lambda m: [m]), tool_round_trips()
        )
    )
)
def test_round_trip_keeps_what_acai_carries(session: list[p.BaseEvent]) -> None:
    session = realistic(session)
    decoded = round_trip("acai", session)
    assert not violations(decoded)
    start, result = decoded[0], decoded[-1]
    assert (start.session_id, start.cwd, start.tools) == (
        session[0].session_id,
        session[0].cwd,
        session[0].tools,
    )
    assert response_items(decoded) == response_items(session)
    original = session[-1]
    assert (result.ok, result.subtype, result.exit_code, result.duration_ms, result.turn_count) == (
        original.ok,
        original.subtype,
        original.exit_code,
        original.duration_ms,
        original.turn_count,
    )
    assert (result.usage, result.tools_used) == (original.usage, original.tools_used)


def test_sniff_claims_acai_init_only() -> None:
    init = seed_objects("acai")[7]
    assert detect_dialect([init]) == "acai"
    gemini_init = {"type": "init", "timestamp": "2023-10-27T10:00:00.000Z", "session_id": "s", "model": "m"}
    canonical_start = p.encode(stamped([p.Start(command="x")])[0])
    assert get_dialect("acai").sniff(gemini_init) == 0.0
    assert get_dialect("acai").sniff(json.loads(canonical_start)) == 0.0


BASES = [
    *seed_objects("acai"),
    {
        "type": "result",
        "success": False,
        "subtype": "error",
        "error": "e",
        "duration_ms": 1,
        "turn_count": 1,
        "exit_code": 2,
        "usage": {"input_tokens": 1},
    },
    {"type": "function_call", "id": "fc", "call_id": "c", "name": "Shell", "arguments": {"command": "ls"}},
    {"type": "reasoning", "id": "r", "summary": [{"type": "summary_text", "text": "t"}, "u"]},
]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        mutants(BASES)
        | junk(
            ["init", "message", "reasoning", "function_call", "function_call_output", "result"],
            [
                "session_id",
                "cwd",
                "tools",
                "role",
                "content",
                "id",
                "summary",
                "call_id",
                "name",
                "arguments",
                "output",
                "success",
                "subtype",
                "error",
                "duration_ms",
                "turn_count",
                "exit_code",
            ],
            nested={
                "usage": fields(
                    ["input_tokens", "output_tokens", "total_tokens"],
                    nested={
                        "input_tokens_details": fields(["cached_tokens"]),
                        "output_tokens_details": fields(["reasoning_tokens"]),
                    },
                )
            },
        ),
        max_size=6,
    )
)
def test_junk_raises_only_malformed_event_errors(junk_lines: list[dict[str, Any]]) -> None:
    assert_junk_handled("acai", junk_lines)


def test_every_single_field_breakage_is_decoded_or_malformed() -> None:
    assert_breakage_handled("acai", BASES)
