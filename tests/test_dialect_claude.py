"""Claude Code stream-json: the reference's example lines decode, the encoder reproduces them, SDK parses ours."""

from __future__ import annotations

import io
import itertools
import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _dialect_kit import (
    FIXTURES,
    decode,
    decode_fixture,
    decode_separately,
    encode,
    encode_objects,
    failed_call_text,
    fixture_lines,
    objects,
    one,
    only,
    project,
    round_trip,
    tool_names,
    violations,
)
from _strategies import (
    any_usages,
    delta_runs,
    full_sessions,
    messages,
    reasonings,
    sessions,
    stamped,
    tool_round_trips,
)
from agentstream import protocol as p
from agentstream.consumer import read
from agentstream.dialects import claude as claude_dialect
from agentstream.dialects import detect_dialect, get_dialect
from agentstream.errors import MalformedEventError
from agentstream.transcript import Transcript

SESSION = "96eb14cb-384e-45e5-9916-4d9ebbd73602"


# -- golden: the reference's lines ----------------------------------------------------------


def test_init_of_cli_1_0_starts_the_session_with_its_id_model_and_tools() -> None:
    events = decode_fixture("claude", "init-1.0.ndjson")
    start = events[0]
    assert isinstance(start, p.Start) and len(events) == 1
    assert start.session_id == "3b71dcde-f8b5-44f4-a1f4-5ba2c58c5ea2"
    assert (start.command, start.cwd, start.model) == (
        "claude",
        "/Users/…/local_test_claude",
        "claude-sonnet-4-20250514",
    )
    assert start.tools[:3] == ["Task", "Bash", "Glob"] and len(start.tools) == 16
    assert start.permission_mode == "acceptEdits"


def test_cli_2_0_76_capture_one_line_per_block_with_usage_counted_once() -> None:
    events = decode_fixture("claude", "session-2.0.76.ndjson")
    start, message, call = events[0], one(events, p.Message), one(events, p.ToolCall)
    assert isinstance(start, p.Start) and start.model == "claude-opus-4-5-20251101" and len(start.tools) == 18
    assert {e.session_id for e in events} == {SESSION}
    assert (message.message_id, message.role, message.content) == (
        "msg_01QeKSonrYdZ3EKhoMRd6omG",
        "assistant",
        "Verstanden! …",
    )
    assert (call.call_id, call.name) == ("toolu_017ZDoMzZSCcm6B4dKy3Q8HT", "Read")
    assert call.arguments == {
        "file_path": "/home/aiuser01/helix-v4/adr/038-deterministic-llm-response-enforcement.md"
    }
    usage = one(events, p.Usage)  # two lines of one API message: one usage, the later (larger) figures
    assert (usage.model, usage.input_tokens, usage.cached_tokens, usage.output_tokens) == (
        "claude-opus-4-5-20251101",
        3 + 21746 + 12671,
        12671,
        167,
    )
    closing = one(events, p.ToolResult)  # the capture stops before the tool's result: closed at EOF
    assert closing.call_id == call.call_id and closing.status == "cancelled" and closing.synthetic is True


def test_thinking_block_without_id_or_model_is_reasoning() -> None:
    reasoning = one(decode_fixture("claude", "thinking.ndjson"), p.Reasoning)
    assert reasoning.content == "The user is asking..."


def test_api_error_reported_as_success_with_is_error_is_a_failure() -> None:
    """Claude Code's report of the failed call (a ``<synthetic>`` assistant line with an ``error``) is no message
    of the model's: its text is the turn's error."""
    events = decode_fixture("claude", "api-error.ndjson")
    error, result = events[-2], events[-1]
    assert not only(events, p.Message)
    assert isinstance(error, p.Error) and not error.recoverable and error.code == "PERMISSION_DENIED"
    assert error.message == "Your organization has disabled …"
    assert isinstance(result, p.Result)
    assert (result.ok, result.subtype, result.exit_code, result.turn_count, result.duration_ms) == (
        False,
        "error",
        1,
        484,
        1505,
    )
    assert result.error.code == "PERMISSION_DENIED"  # type: ignore[union-attr]
    assert not only(events, p.Usage)  # the synthetic message carries no usage


def test_tool_results_of_cli_2_1_205_success_and_error() -> None:
    lines = fixture_lines("claude", "tool-results-2.1.205.ndjson")
    ok, failed = (one(events, p.ToolResult) for events in decode_separately("claude", lines))
    assert (ok.call_id, ok.status, ok.output, ok.error) == (
        "toolu_01M38CzXbA7gWUhWz4BCRZfM",
        "success",
        "1\thi from file\n2\t",
        p.UNSET,
    )
    assert (failed.status, failed.error, failed.output) == ("error", "File does not exist.", p.UNSET)


def _ok_result(events: list[p.AnyEvent]) -> p.Result:
    return p.Result(
        ok=True,
        subtype="success",
        exit_code=0,
        session_id=events[0].session_id,
        seq=events[-1].seq + 1,
        ts=p.now_ts(),
    )


def test_partial_message_lines_become_deltas_closed_at_eof() -> None:
    events = decode_fixture("claude", "stream-events.ndjson")
    text_delta, thinking_delta = one(events, p.MessageDelta), one(events, p.ReasoningDelta)
    assert text_delta.content == "hello" and thinking_delta.content == "pondering"
    closing = one(events, p.Message)
    assert (
        closing.message_id == text_delta.message_id
        and closing.content == "hello"
        and closing.synthetic is True
    )
    assert one(events, p.Reasoning).synthetic is True
    assert not violations([*events, _ok_result(events)])


def test_deltas_and_the_complete_assistant_line_are_not_added_twice() -> None:
    """--include-partial-messages: the complete assistant line repeats the streamed text; it closes the run."""
    events = decode_fixture("claude", "partial-messages.ndjson")
    deltas, message = only(events, p.MessageDelta), one(events, p.Message)
    assert [d.content for d in deltas] == ["hel", "lo"] and {d.message_id for d in deltas} == {
        message.message_id
    }
    assert message.content == "hello" and message.synthetic is p.UNSET
    assert one(events, p.Reasoning).reasoning_id == one(events, p.ReasoningDelta).reasoning_id
    transcript = Transcript.from_events(events)
    assert transcript.all_text == "hello" and transcript.reasoning == ["pondering"]
    usage = one(events, p.Usage)  # from message_start + message_delta, not the placeholder on each line
    assert (usage.input_tokens, usage.cached_tokens, usage.output_tokens) == (112, 100, 57)
    result = events[-1]
    assert isinstance(result, p.Result) and result.usage.output_tokens == 57 and result.usage.cost_usd == 0.02
    assert result.tools_used == ["Read"] and not violations(events)


RESULTS = decode_separately("claude", fixture_lines("claude", "results.ndjson"))


def test_success_result_capture() -> None:
    result = one(RESULTS[1], p.Result)
    assert (result.ok, result.subtype, result.exit_code, result.result) == (
        True,
        "success",
        0,
        "Contents: `hi from file`",
    )
    assert (result.duration_ms, result.turn_count, result.usage.cost_usd) == (8929, 2, 0.655998)


def test_error_during_execution_without_a_result_key_names_the_missing_session() -> None:
    error, result = RESULTS[0][-2:]
    assert isinstance(error, p.Error) and not error.recoverable and error.code == "SESSION_NOT_FOUND"
    assert isinstance(result, p.Result) and not result.ok and result.result is p.UNSET
    assert (
        result.error.message == "No conversation found with session ID: d56965c9-c855-4042-a8f5-f12bbb14d6f6"
    )  # type: ignore[union-attr]


def test_an_api_error_line_with_no_result_after_it_is_why_the_turn_ended() -> None:
    """Claude Code stops after an authentication failure without writing its result: the ending is that error
    (AUTH_EXPIRED, with the API's text), not a stream cut short."""
    init = b'{"type":"system","subtype":"init","cwd":"/w","session_id":"s1","tools":[],"model":"m"}'
    api_error = (
        b'{"type":"assistant","message":{"id":"m1","model":"<synthetic>","role":"assistant","content":'
        b'[{"type":"text","text":"Invalid API key \xc2\xb7 Please run /login"}]},"error":"authentication_failed",'
        b'"is_api_error_message":true,"session_id":"s1","uuid":"u1"}'
    )
    events = list(read(b"\n".join([init, api_error]) + b"\n", "claude"))
    error = one(events, p.Error)
    assert (error.code, error.message, error.recoverable) == (
        "AUTH_EXPIRED",
        "Invalid API key · Please run /login",
        False,
    )
    result = events[-1]
    assert isinstance(result, p.Result) and not result.ok and isinstance(result.error, p.ErrorInfo)
    assert result.error.code == "AUTH_EXPIRED"
    done = b'{"type":"result","subtype":"success","is_error":false,"duration_ms":1,"num_turns":1,"result":"hi","session_id":"s1"}'
    later = list(read(b"\n".join([init, api_error, done, init]) + b"\n", "claude"))
    assert [e.code for e in later if isinstance(e, p.Error) and not e.synthetic] == [], (
        "a turn that ended says no more"
    )


def test_spurious_second_result_after_a_background_task_is_a_plain_failure() -> None:
    result = one(RESULTS[2], p.Result)
    assert (result.ok, result.exit_code) == (False, 1)
    assert result.error.message == "only prompt commands are supported in streaming mode"  # type: ignore[union-attr]


def test_json_format_result_usage_is_authoritative() -> None:
    """Tokens of every model (``modelUsage``), as the cost is: not the main loop's ``usage`` alone."""
    result = one(RESULTS[3], p.Result)
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.cached_tokens) == (
        3774 + 29 + 23106 + 112686,
        191 + 656,
        112686,
    )
    assert result.usage.cost_usd == 0.1351093 and result.turn_count == 6


def test_extras_status_retries_rate_limits_and_control_frames_never_fail() -> None:
    events = decode_fixture("claude", "extras.ndjson")
    assert one(events, p.Message).content == "<prompt>" and one(events, p.Message).role == "user"
    assert one(events, p.Status).status == "requesting"
    retry = one(events, p.Error)
    assert (retry.code, retry.recoverable, retry.retry_in_ms) == ("RATE_LIMITED", True, 1200)
    assert retry.details == {"attempt": 2, "max_retries": 10, "error_status": 429}
    limit = one(events, p.GenericEvent)
    assert limit.name == "claude.rate_limit" and limit.data["utilization"] == 0.92
    control = one(events, p.UnknownEvent)
    assert control.type == "control_response" and control.raw["response"]["request_id"] == "req_1_4f2a"


def test_startup_hooks_before_init_wait_so_that_start_stays_first() -> None:
    events = decode_fixture("claude", "hooks-before-init.ndjson")
    assert (
        isinstance(events[0], p.Start)
        and events[0].model == "claude-sonnet-4-5"
        and events[0].synthetic is p.UNSET
    )
    assert [e.name for e in only(events, p.GenericEvent)] == [
        "claude.system.hook_started",
        "claude.system.hook_response",
    ]
    result = events[-1]  # an interrupted turn's result has no "result" key
    assert isinstance(result, p.Result) and result.ok and result.result is p.UNSET and not violations(events)


def test_a_cut_off_stream_read_end_to_end_is_closed_and_valid() -> None:
    events = list(read(FIXTURES / "claude" / "cut-off.ndjson"))
    assert events[0].command == "claude"  # type: ignore[union-attr]
    assert one(events, p.ToolResult).status == "cancelled"
    assert events[-1].synthetic is True and not violations(events)


def test_detection_prefers_claude_but_leaves_cursor_and_amp_inits_alone() -> None:
    for fixture in (
        "init-1.0.ndjson",
        "session-2.0.76.ndjson",
        "partial-messages.ndjson",
        "hooks-before-init.ndjson",
    ):
        assert detect_dialect(objects(fixture_lines("claude", fixture))[:1]) == "claude", fixture
    cursor_init = {
        "type": "system",
        "subtype": "init",
        "apiKeySource": "env|flag|login",
        "cwd": "/absolute/path",
        "session_id": "<uuid>",
        "model": "<model display name>",
        "permissionMode": "default",
    }
    assert get_dialect("claude").sniff(cursor_init) == 0.0
    amp_init = objects(fixture_lines("amp", "stream-json.ndjson"))[0]
    assert get_dialect("claude").sniff(amp_init) == 0.0


def test_a_web_search_result_list_keeps_what_it_found() -> None:
    """Each ``web_search_result`` block (no text of its own) is its title and address, not a bare marker."""
    found = [
        {
            "type": "web_search_result",
            "title": "Streaming output",
            "url": "https://example.com/a",
            "page_age": "1d",
        },
        {"type": "web_search_result", "url": "https://example.com/b", "encrypted_content": "Eq"},
        {"type": "image", "source": {}},
    ]
    message = {
        "id": "msg_01Web",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "server_tool_use", "id": "srvtoolu_9", "name": "web_search", "input": {"query": "q"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_9", "content": found},
        ],
    }
    raw = json.dumps({"type": "assistant", "message": message}).encode()
    result = one(decode("claude", [raw]), p.ToolResult)
    assert result.output == "Streaming output <https://example.com/a>\nhttps://example.com/b\n[image]"


def test_server_tool_results_whose_content_is_one_object_keep_its_text_or_the_object() -> None:
    """An ``advisor_tool_result`` (any ``*_tool_result``) holds one object, not text or blocks: no field is lost."""
    events = decode_fixture("claude", "server-tools.ndjson")
    assert not only(events, p.Log) and not violations([*events, _ok_result(events)])
    advice, search = only(events, p.ToolResult)
    assert (advice.call_id, advice.name, advice.status, advice.output) == (
        "srvtoolu_01ABC",
        "advisor",
        "success",
        "Consider edge cases around empty input.",
    )
    assert (search.name, search.status, search.output) == ("web_search", "error", p.UNSET)
    assert search.error == '{"type":"web_search_tool_result_error","error_code":"max_uses_exceeded"}'
    redacted = (
        b'{"type":"assistant","message":{"id":"m","model":"m","content":[{"type":"advisor_tool_result",'
        b'"tool_use_id":"srvtoolu_1","content":{"type":"advisor_redacted_result","encrypted_content":"EuYD"}}]}}'
    )
    result = one(decode("claude", [redacted]), p.ToolResult)
    assert (result.status, result.output) == (
        "success",
        '{"type":"advisor_redacted_result","encrypted_content":"EuYD"}',
    )


def test_conversation_reset_is_an_event_that_the_encoder_writes_back_for_the_sdk() -> None:
    from claude_agent_sdk import ConversationResetMessage
    from claude_agent_sdk._internal.message_parser import parse_message

    events = decode_fixture("claude", "server-tools.ndjson")
    reset = one(events, p.GenericEvent)
    assert reset.name == "claude.conversation_reset"
    assert reset.data == {"new_conversation_id": "d2f4a573-ca99-42a2-bb7a-905b40c908e8"}
    written = next(obj for obj in objects(encode("claude", events)) if obj["type"] == "conversation_reset")
    parsed = parse_message(written)
    assert isinstance(parsed, ConversationResetMessage)
    assert parsed.new_conversation_id == "d2f4a573-ca99-42a2-bb7a-905b40c908e8"
    odd = b'{"type":"conversation_reset","new_conversation_id":true,"uuid":"u","session_id":"s"}'
    kept = decode("claude", [_INIT, odd])
    assert one(kept, p.GenericEvent).data == {} and "new_conversation_id" in one(kept, p.Log).message


_INIT = (
    b'{"type":"system","subtype":"init","cwd":"/w","session_id":"s1","tools":[],"mcp_servers":[],"model":"m"}'
)
_ASK = (
    b'{"type":"assistant","message":{"id":"msg_1","model":"m","role":"assistant","content":[{"type":"tool_use",'
    b'"id":"toolu_1","name":"AskUserQuestion","input":{"q":"?"}}]},"session_id":"s1","uuid":"u1"}'
)


def _deferred_result(deferred: str = '{"id":"toolu_1","name":"AskUserQuestion","input":{"q":"?"}}') -> bytes:
    return (
        b'{"type":"result","subtype":"success","is_error":false,"duration_ms":5,"duration_api_ms":4,"num_turns":1,'
        b'"result":"","stop_reason":"tool_deferred","session_id":"s1","deferred_tool_use":%b,'
        b'"terminal_reason":"tool_deferred","uuid":"u2"}' % deferred.encode()
    )


def test_a_deferred_tool_use_is_a_permission_request_the_run_ends_on() -> None:
    """A PreToolUse hook returned "defer": the run stops, successful, and its result names the call it holds."""
    events = decode("claude", [_INIT, _ASK, _deferred_result()])
    assert [e.type for e in events] == [
        "start",
        "tool_call",
        "event",
        "permission_request",
        "tool_result",
        "result",
    ]
    deferred, request, closed, result = events[2:]
    assert deferred.name == "claude.deferred_tool_use"
    assert deferred.data == {"id": "toolu_1", "name": "AskUserQuestion", "input": {"q": "?"}}
    assert (request.call_id, request.name, request.arguments) == ("toolu_1", "AskUserQuestion", {"q": "?"})
    assert "resume" in request.reason
    assert (closed.call_id, closed.status, closed.synthetic) == ("toolu_1", "cancelled", p.UNSET)
    assert result.ok and result.exit_code == 0 and result.tools_used == ["AskUserQuestion"]
    assert not violations(events), "the producer said why the call has no result: nothing was repaired"


def test_a_deferred_call_not_seen_before_is_called_and_a_lost_one_is_the_last_open_call() -> None:
    unseen = decode("claude", [_INIT, _deferred_result()])
    assert [e.type for e in unseen][1:] == [
        "tool_call",
        "event",
        "permission_request",
        "tool_result",
        "result",
    ]
    call = one(unseen, p.ToolCall)
    assert (call.call_id, call.name, call.arguments) == ("toolu_1", "AskUserQuestion", {"q": "?"})
    assert not violations(unseen)
    lost = decode("claude", [_INIT, _ASK, _deferred_result('"toolu_1"')])  # only terminal_reason says it
    assert one(lost, p.PermissionRequest).call_id == "toolu_1" and one(lost, p.ToolCall).call_id == "toolu_1"
    assert "deferred_tool_use" in one(lost, p.Log).message and not violations(lost)
    answered = (
        b'{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1",'
        b'"content":"done"}]},"session_id":"s1","uuid":"u3"}'
    )
    late = decode("claude", [_INIT, _ASK, answered, _deferred_result()])
    assert not only(late, p.PermissionRequest) and len(only(late, p.ToolCall)) == 1 and not violations(late)


def test_a_deferred_tool_use_round_trips_and_reaches_the_sdk() -> None:
    from claude_agent_sdk import DeferredToolUse, ResultMessage
    from claude_agent_sdk._internal.message_parser import parse_message

    for lines in ([_INIT, _ASK, _deferred_result()], [_INIT, _deferred_result()]):
        events = decode("claude", lines)
        written = objects(encode("claude", events))
        assert [obj["type"] for obj in written] == ["system", "assistant", "result"]
        line = written[-1]
        assert (line["stop_reason"], line["terminal_reason"], line["is_error"]) == (
            "tool_deferred",
            "tool_deferred",
            False,
        )
        parsed = parse_message(line)
        assert isinstance(parsed, ResultMessage) and isinstance(parsed.deferred_tool_use, DeferredToolUse)
        assert (parsed.deferred_tool_use.id, parsed.deferred_tool_use.input) == ("toolu_1", {"q": "?"})
        back = decode("claude", encode("claude", events))
        assert project(back[1:], lambda event: event) == project(events[1:], lambda event: event)


# -- encoder: reproduces the examples -------------------------------------------------------

LOST_INIT = {
    "slash_commands",
    "claude_code_version",
    "output_style",
    "agents",
    "skills",
    "plugins",
    "uuid",
    "apiKeySource",
}


def reencode(lines: list[bytes]) -> list[dict[str, Any]]:
    """Decode example lines and encode the canonical events back to Claude lines."""
    return objects(encode("claude", decode("claude", lines)))


def assert_reproduces(made: dict[str, Any], example: dict[str, Any], lost: set[str]) -> None:
    missing = {key for key in example if key not in made} - lost
    assert not missing, f"fields not reproduced: {missing}"
    for key, value in example.items():
        if key not in lost:
            assert made[key] == value, key


def test_encoder_reproduces_the_2_0_76_lines() -> None:
    example = objects(fixture_lines("claude", "session-2.0.76.ndjson"))
    made = reencode(fixture_lines("claude", "session-2.0.76.ndjson"))
    assert_reproduces(made[0], example[0], LOST_INIT)
    text_line, tool_line = (line for line in made if line["type"] == "assistant")
    for line, original in ((text_line, example[1]), (tool_line, example[2])):
        assert_reproduces(line, original, {"uuid", "message"})
        message_lost = {"usage", "context_management"} | ({"id"} if line is tool_line else set())
        assert_reproduces(line["message"], original["message"], message_lost)


def test_encoder_reproduces_tool_result_and_result_lines() -> None:
    lines = fixture_lines("claude", "tool-results-2.1.205.ndjson")
    example = objects(lines)[0]
    (block,) = example["message"]["content"]
    block["is_error"] = False  # 2.1.205 left it out on a success; 2.1.332 says it, as we do
    made = next(line for line in reencode(lines[:1]) if line["type"] == "user")
    assert_reproduces(made, {**example, "session_id": made["session_id"]}, {"uuid"})
    for line in fixture_lines("claude", "results.ndjson")[:3]:
        original = objects([line])[0]
        result = next(obj for obj in reencode([line]) if obj["type"] == "result")
        lost = {"uuid", "duration_api_ms", "session_id"}
        assert_reproduces(result, original, lost)


def test_encoder_reproduces_partial_message_and_extra_lines() -> None:
    lines = fixture_lines("claude", "partial-messages.ndjson")
    made = reencode(lines)
    deltas = [
        o["event"]["delta"]
        for o in made
        if o["type"] == "stream_event" and o["event"]["type"] == "content_block_delta"
    ]
    assert deltas == [
        {"type": "thinking_delta", "thinking": "pondering"},
        {"type": "text_delta", "text": "hel"},
        {"type": "text_delta", "text": "lo"},
    ]
    extras = objects(fixture_lines("claude", "extras.ndjson"))
    made = reencode(fixture_lines("claude", "extras.ndjson"))
    by_subtype = {o.get("subtype", o["type"]): o for o in made}
    assert_reproduces(by_subtype["status"], extras[1], set())
    assert_reproduces(by_subtype["api_retry"], extras[2], {"uuid", "session_id"})
    assert_reproduces(by_subtype["rate_limit_event"], extras[3], {"uuid", "session_id"})


# -- peer parser: the Claude Agent SDK reads what we write ------------------------------------


def full_session() -> list[p.BaseEvent]:
    events: list[p.BaseEvent] = [
        p.Start(command="exec", cwd="/work", model="claude-sonnet-4-5", tools=["Read"]),
        p.Message(message_id="u1", role="user", content="read a.txt"),
        p.ReasoningDelta(reasoning_id="r1", content="let me "),
        p.Reasoning(reasoning_id="r1", content="let me read it"),
        p.MessageDelta(message_id="m1", content="Reading"),
        p.Message(message_id="m1", role="assistant", content="Reading a.txt"),
        p.ToolCall(call_id="toolu_1", name="Read", arguments={"file_path": "a.txt"}),
        p.ToolResult(call_id="toolu_1", name="Read", status="success", output="hi"),
        p.Usage(model="claude-sonnet-4-5", input_tokens=100, output_tokens=20, cached_tokens=60),
        p.Status(status="compacting"),
        p.GenericEvent(name="claude.rate_limit", data={"status": "allowed", "utilization": 0.5}),
        p.GenericEvent(name="deploy", data={"env": "prod"}),
        p.Error(code="RATE_LIMITED", message="slow down", recoverable=True, retry_in_ms=500),
        p.Message(message_id="m2", role="assistant", content="a.txt says hi"),
        p.Result(
            ok=True,
            subtype="success",
            exit_code=0,
            duration_ms=1200,
            turn_count=2,
            result="a.txt says hi",
            usage=p.UsageTotals(input_tokens=100, output_tokens=20, cached_tokens=60, cost_usd=0.01),
        ),
    ]
    return stamped(events, "16c61d1b-fe47-4d2a-a97a-fdea9213ac86")


def test_the_claude_agent_sdk_parses_every_line_we_write() -> None:
    from claude_agent_sdk import types as sdk
    from claude_agent_sdk._internal.message_parser import parse_message

    parsed = [parse_message(obj) for obj in objects(encode("claude", full_session()))]
    assert all(message is not None for message in parsed)
    kinds = [type(message).__name__ for message in parsed]
    assert kinds[0] == "SystemMessage" and parsed[0].subtype == "init"
    assert kinds.count("StreamEvent") == 2 * 6 + 3  # two delta runs, one usage and "RateLimitEvent" in kinds
    assistant = [m for m in parsed if isinstance(m, sdk.AssistantMessage)]
    blocks = [type(m.content[0]).__name__ for m in assistant]
    assert blocks == ["ThinkingBlock", "TextBlock", "ToolUseBlock", "TextBlock"]
    assert assistant[1].message_id == "m1" and assistant[2].content[0].input == {"file_path": "a.txt"}
    user = [m for m in parsed if isinstance(m, sdk.UserMessage)]
    assert user[0].content == "read a.txt" and user[1].content[0].tool_use_id == "toolu_1"
    result = parsed[-1]
    assert isinstance(result, sdk.ResultMessage)
    assert (result.is_error, result.num_turns, result.result, result.total_cost_usd) == (
        False,
        2,
        "a.txt says hi",
        0.01,
    )
    assert result.usage == {
        "input_tokens": 40,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 60,
        "output_tokens": 20,
    }


def test_a_failed_run_reaches_the_sdk_as_an_error_result_with_its_reason() -> None:
    from claude_agent_sdk._internal.message_parser import parse_message

    events = full_session()[:2]
    events += [
        p.Error(code="UNKNOWN", message="disk full", session_id=events[0].session_id),
        p.Result(ok=False, subtype="max_turns", exit_code=3, session_id=events[0].session_id),
    ]
    result = parse_message(objects(encode("claude", events))[-1])
    assert (result.subtype, result.is_error, result.errors) == ("error_max_turns", True, ["disk full"])


def test_an_empty_message_or_reasoning_is_no_assistant_line_and_its_delta_run_still_closes() -> None:
    """A delta run an interrupt discarded ends with an empty complete event: the SDK must get no empty block. Its
    message ends as Claude Code ends one whose blocks it dropped, which reads back as discarded, not as said."""
    events = full_session()[:1]
    events += [
        p.MessageDelta(message_id="m1", content="Half an ans"),
        p.Message(message_id="m1", role="assistant", content=""),
        p.ReasoningDelta(reasoning_id="r1", content="hmm"),
        p.Reasoning(reasoning_id="r1", content=""),
        p.Message(message_id="m2", role="assistant", content=""),
        p.Reasoning(reasoning_id="r2", content=""),
        p.Result(ok=False, subtype="interrupted", exit_code=130),
    ]
    lines = encode("claude", stamped(events))
    written = objects(lines)
    assert [line["type"] for line in written if line["type"] != "stream_event"] == ["system", "result"]
    inner = [line["event"] for line in written if line["type"] == "stream_event"]
    run = ["message_start", "content_block_start", "content_block_delta", "message_delta", "message_stop"]
    assert [event["type"] for event in inner] == run * 2, "no content_block_stop: the block never ended"
    assert [event["delta"]["stop_reason"] for event in inner if event["type"] == "message_delta"] == [
        None,
        None,
    ]
    stops = [line for line in written if line.get("event") == {"type": "message_stop"}]
    assert [stop["abandoned_blocks"] for stop in stops] == [
        {"api_message_id": "m1", "from_block_index": 0},
        {"api_message_id": "r1", "from_block_index": 0},
    ]
    back = decode("claude", lines)
    assert [(e.type, e.content) for e in back if isinstance(e, (p.Message, p.Reasoning))] == [
        ("message", ""),
        ("reasoning", ""),
    ]
    assert not violations(back)


def test_total_cost_usd_is_the_conversations_running_total_over_its_turns() -> None:
    """One writer over a session's turns (as ``exec`` and ``wrap --two-way`` write them): each result's cost is
    the conversation's so far; a turn of unknown cost leaves it as it was; another conversation starts again."""

    def turn(cost: float | None, parent: str = "ses_1") -> list[p.BaseEvent]:
        usage = p.UsageTotals(cost_usd=cost if cost is not None else p.UNSET)
        return stamped(
            [
                p.Start(command="exec", cwd="/w", parent_session_id=parent),
                p.Result(ok=True, subtype="success", exit_code=0, usage=usage),
            ],
            p.new_id("ses"),
        )

    session = [*turn(0.25), *turn(None), *turn(0.5), *turn(0.125, parent="ses_2")]
    results = [line for line in encode_objects("claude", session) if line["type"] == "result"]
    assert [(r["session_id"], r.get("total_cost_usd")) for r in results] == [
        ("ses_1", 0.25),
        ("ses_1", 0.25),
        ("ses_1", 0.75),
        ("ses_2", 0.125),
    ]


def _priced_turn(
    calls: list[p.Usage], totals: p.UsageTotals, parent: str = "ses_1", model: str | None = None
) -> list[p.BaseEvent]:
    start = p.Start(command="exec", cwd="/w", parent_session_id=parent, model=model or p.UNSET)
    result = p.Result(ok=True, subtype="success", exit_code=0, usage=totals)
    return stamped([start, *calls, result], p.new_id("ses"))


def test_model_usage_is_the_conversations_running_totals_per_model() -> None:
    """As Claude Code's, ``modelUsage`` is per model over the conversation's turns. A turn's share is split as its
    ``usage`` events split it when they add up to its result's totals, else it all goes to its main model; a turn
    without usage adds nothing; another conversation starts again."""
    haiku = p.Usage(model="claude-haiku-4-5", input_tokens=100, output_tokens=10, cost_usd=0.001)
    sonnet = p.Usage(
        model="claude-sonnet-4-5",
        input_tokens=50,
        output_tokens=5,
        cached_tokens=20,
        cache_write_tokens=3,
        cost_usd=0.01,
    )
    both = p.UsageTotals(
        input_tokens=150, output_tokens=15, cached_tokens=20, cache_write_tokens=3, cost_usd=0.011
    )
    short = p.Usage(model="claude-sonnet-4-5", input_tokens=10, output_tokens=1)
    more = p.UsageTotals(input_tokens=30, output_tokens=3, cost_usd=0.02)  # the result's totals win
    session = [
        *_priced_turn([haiku, sonnet], both),
        *_priced_turn([], p.UsageTotals()),
        *_priced_turn([short], more),
        *_priced_turn([], p.UsageTotals(input_tokens=7, output_tokens=2), parent="ses_2", model="claude-x"),
    ]
    results = [line for line in encode_objects("claude", session) if line["type"] == "result"]
    first = {
        "claude-haiku-4-5": {
            "inputTokens": 100,
            "outputTokens": 10,
            "cacheReadInputTokens": 0,
            "cacheCreationInputTokens": 0,
            "costUSD": 0.001,
        },
        "claude-sonnet-4-5": {
            "inputTokens": 27,
            "outputTokens": 5,
            "cacheReadInputTokens": 20,
            "cacheCreationInputTokens": 3,
            "costUSD": 0.01,
        },
    }
    grown = {"inputTokens": 57, "outputTokens": 8, "costUSD": 0.03}
    third = {**first, "claude-sonnet-4-5": {**first["claude-sonnet-4-5"], **grown}}
    assert [r.get("modelUsage") for r in results] == [
        first,
        first,
        third,
        {
            "claude-x": {
                "inputTokens": 7,
                "outputTokens": 2,
                "cacheReadInputTokens": 0,
                "cacheCreationInputTokens": 0,
            }
        },
    ]
    assert [r["total_cost_usd"] for r in results[:3]] == [0.011, 0.011, 0.031]
    assert "total_cost_usd" not in results[3], "no cost known, none written"
    nameless = _priced_turn([], p.UsageTotals(input_tokens=7, output_tokens=2))
    assert "modelUsage" not in encode_objects("claude", nameless)[-1], "no model known: no entry made up"
    assert "modelUsage" not in encode_objects("amp", session)[-1], "Amp's result has no modelUsage"


# -- round trip --------------------------------------------------------------------------------

_CODES = {
    "RATE_LIMITED",
    "AUTH_EXPIRED",
    "PERMISSION_DENIED",
    "PROVIDER_ERROR",
    "INVALID_INPUT",
    "CONTEXT_LIMIT",
    "UNKNOWN",
}
_SUBTYPES = {"success", "max_turns", "interrupted", "max_budget_usd", "max_structured_output_retries"}


def keep(event: dict[str, Any]) -> dict[str, Any] | None:
    """What a Claude stream carries of each canonical event (the capability table's claude row)."""
    kind = event["type"]
    if kind == "start":
        return {key: event.get(key) for key in ("type", "cwd", "model", "tools")}
    if kind in ("message", "message_delta"):
        if event["role"] == "user" and kind == "message":
            return {"type": kind, "role": "user", "content": event["content"]}
        if event["role"] != "assistant" or (kind == "message" and not event["content"]):
            return None  # an empty message is written as no line (an empty block is never written)
        return event
    if kind == "tool_result":
        ok = event["status"] == "success"
        return {
            "type": kind,
            "call_id": event["call_id"],
            "ok": ok,
            "text": event.get("output", "") if ok else failed_call_text(event),
        }
    if kind == "usage":
        return {
            key: event[key] for key in ("type", "model", "input_tokens", "output_tokens", "cached_tokens")
        }
    if kind == "error":
        if not event["recoverable"]:
            return None
        return {
            "type": kind,
            "code": event["code"] if event["code"] in _CODES else "UNKNOWN",
            "message": event["message"],
            "retry_in_ms": event.get("retry_in_ms"),
        }
    if kind == "result":
        usage = event["usage"]
        return {
            "type": kind,
            "ok": event["ok"],
            "subtype": event["subtype"] if event["subtype"] in _SUBTYPES else "error",
            "duration_ms": event["duration_ms"],
            "turn_count": event["turn_count"],
            "result": event.get("result"),
            "usage": (
                usage["input_tokens"],
                usage["output_tokens"],
                usage["cached_tokens"],
                usage.get("cost_usd"),
            ),
        }
    if kind == "reasoning" and not event["content"]:
        return None  # an empty block is never written
    return event if kind in ("reasoning", "reasoning_delta", "tool_call", "status", "event") else None


@settings(max_examples=60, deadline=None)
@given(full_sessions())
def test_round_trip_keeps_what_the_claude_row_promises(events: list[p.BaseEvent]) -> None:
    back = round_trip("claude", events)
    assert project(back, keep) == project(events, keep)
    result, original = back[-1], events[-1]
    assert isinstance(result, p.Result) and isinstance(original, p.Result)
    assert result.tools_used == tool_names(events)
    assert result.exit_code == {"success": 0, "max_turns": 3}.get(result.subtype, 1)
    if original.error is not p.UNSET:
        assert result.error.message == original.error.message  # type: ignore[union-attr]
    elif not result.ok:  # a failed result names its reason even when the original did not
        assert isinstance(result.error, p.ErrorInfo)
        assert result.error.code == ("MAX_TURNS" if result.subtype == "max_turns" else "UNKNOWN")
    assert not violations(back)


# -- a call's usage in its assistant lines ------------------------------------------------------


def keep_complete(event: dict[str, Any]) -> dict[str, Any] | None:
    """The claude row without partial messages: no deltas."""
    return None if event["type"] in ("message_delta", "reasoning_delta") else keep(event)


def _said_id(run: list[p.BaseEvent]) -> str:
    last = run[-1]
    return last.message_id if isinstance(last, p.Message) else last.reasoning_id  # type: ignore[attr-defined]


@st.composite
def model_calls(draw: st.DrawFn) -> list[p.BaseEvent]:
    """One model call as producers write it: what it said (reasoning, answers; streamed or not), its usage, then
    its tool calls and their results. Something in it says something, so that a line can carry the usage."""
    said = draw(
        st.lists(
            st.one_of(
                reasonings.filter(lambda event: bool(event.content)).map(lambda event: [event]),
                messages(("assistant",)).filter(lambda event: bool(event.content)).map(lambda event: [event]),
                delta_runs(roles=("assistant",)),
                delta_runs(reasoning=True),
            ),
            max_size=2,
            unique_by=_said_id,
        )
    )
    calls = draw(
        st.lists(
            tool_round_trips(), min_size=0 if said else 1, max_size=2, unique_by=lambda run: run[0].call_id
        )
    )
    return [*(e for run in said for e in run), draw(any_usages()), *(e for run in calls for e in run)]


@pytest.mark.parametrize("partial", [False, True], ids=["complete-messages", "partial-messages"])
@settings(max_examples=40, deadline=None)
@given(session=sessions(model_calls()))
def test_a_calls_usage_rides_in_its_assistant_lines_and_reads_back_with_or_without_partial_messages(
    partial: bool, session: list[p.BaseEvent]
) -> None:
    """Claude Code writes no ``stream_event`` line without ``--include-partial-messages``: a call's usage is in the
    ``message.usage`` of its assistant lines (and, streamed, its ``message_delta``), one message id per usage, so
    that a reader counting each id once counts each call once; it reads back as the same usage, in its place."""
    lines = encode("claude", session, partial_messages=partial)
    written = objects(lines)
    if not partial:
        assert [line for line in written if line["type"] == "stream_event"] == []
    carriers = {
        line["message"]["id"]
        for line in written
        if line["type"] == "assistant" and "usage" in line["message"]
    }
    assert len(carriers) == len(only(session, p.Usage))
    back = decode("claude", lines)
    kept = keep if partial else keep_complete
    assert project(back, kept) == project(session, kept)
    assert not violations(back)


@pytest.mark.parametrize("partial", [False, True], ids=["complete-messages", "partial-messages"])
@pytest.mark.parametrize(
    "name",
    [
        "real-2.1.332-tool-turn.ndjson",
        "real-2.1.332-partial-thinking.ndjson",
        "real-2.1.332-sdk-session.ndjson",
        "real-2.1.332-sdk-partial-permission.ndjson",
        "session-2.0.76.ndjson",
        "partial-messages.ndjson",
        "stream-events.ndjson",
    ],
)
def test_claude_code_written_again_keeps_its_usage_with_or_without_partial_messages(
    name: str, partial: bool
) -> None:
    """Claude -> canonical -> Claude -> canonical keeps every call's usage, in its place in the conversation, and
    every result's totals, whether the lines written again have partial messages or not."""
    decoded = decode_fixture("claude", name)
    again = decode("claude", encode("claude", decoded, partial_messages=partial))

    def figures(events: list[p.AnyEvent]) -> list[tuple[Any, ...]]:
        return [(u.model, u.input_tokens, u.output_tokens, u.cached_tokens) for u in only(events, p.Usage)]

    def totals(events: list[p.AnyEvent]) -> list[tuple[Any, ...]]:
        return [
            (
                u.input_tokens,
                u.output_tokens,
                u.cached_tokens,
                u.cache_write_tokens,
                pytest.approx(u.cost_usd),
            )
            for u in (result.usage for result in only(events, p.Result))
        ]

    def conversation(event: dict[str, Any]) -> dict[str, Any] | None:
        said = event["type"] in ("message", "reasoning", "tool_call", "tool_result", "usage")
        return keep_complete(event) if said else None

    assert figures(again) == figures(decoded) != []
    assert totals(again)[: len(totals(decoded))] == totals(decoded)  # a capture cut short gets an ending
    assert project(again, conversation) == project(decoded, conversation)


def test_a_calls_usage_and_tool_calls_are_read_at_its_message_delta_before_the_permission_it_asks() -> None:
    """Claude Code writes a streamed message's ``message_stop`` only once the permission its tool call asks for
    (``can_use_tool``, between ``message_delta`` and ``message_stop``) is answered: the call's usage is read at
    ``message_delta``, and its tool call with it, after it, so that a writer knows the usage for the call's line
    before the permission is asked."""
    events = decode_fixture("claude", "real-2.1.332-sdk-partial-permission.ndjson")
    kinds = [
        event.raw.get("type") if isinstance(event, p.UnknownEvent) else event.type
        for event in events
        if not isinstance(event, (p.MessageDelta, p.ReasoningDelta, p.GenericEvent))
    ]
    asked = kinds.index("control_request")
    assert kinds[asked - 4 : asked + 1] == ["reasoning", "message", "usage", "tool_call", "control_request"]
    assert kinds[asked + 1 :] == ["tool_result", "status", "message", "usage", "result"]


def test_a_results_model_usage_keys_besides_tokens_and_cost_are_carried_and_written_back() -> None:
    """``contextWindow``, ``maxOutputTokens``, ``webSearchRequests`` (and any other key of a ``modelUsage`` entry
    canonical usage has no field for) go through an event named ``claude.model_usage`` back into the result."""
    line = fixture_lines("claude", "results.ndjson")[3]
    original = objects([line])[0]
    events = decode("claude", [line])
    carried = [e for e in only(events, p.GenericEvent) if e.name == "claude.model_usage"]
    assert [e.data for e in carried] == [
        {
            model: {"webSearchRequests": 0, "contextWindow": 200000, "maxOutputTokens": 64000}
            for model in original["modelUsage"]
        }
    ]
    assert encode_objects("claude", events)[-1]["modelUsage"] == original["modelUsage"]
    assert not violations(events)


# -- robustness --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (b'{"type":"assistant","message":"hi"}', "field 'message' must be an object"),
        (
            b'{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t","name":true}]}}',
            "field 'name' must be a string",
        ),
        (b'{"type":"system"}', "field 'subtype' is missing"),
        (
            b'{"type":"user","message":{"content":7}}',
            "field 'content' must be a list of content blocks or a string",
        ),
    ],
)
def test_unusable_lines_are_named_precisely(line: bytes, problem: str) -> None:
    init = b'{"type":"system","subtype":"init","session_id":"s","tools":[],"mcp_servers":[]}'
    with pytest.raises(MalformedEventError, match=problem):
        decode("claude", [init, line])


def test_control_frames_before_init_wait_for_it_and_a_bad_held_line_is_reported() -> None:
    control = fixture_lines("claude", "extras.ndjson")[-1]
    init = fixture_lines("claude", "init-1.0.ndjson")[0]
    events = decode("claude", [control, b'{"type":"system","subtype":true}', init])
    assert [e.type for e in events] == ["start", "control_response", "error"]
    assert events[0].synthetic is p.UNSET and "field 'subtype' must be a string" in events[2].message


def test_verbose_json_output_one_array_of_messages_is_read_too() -> None:
    """#84784: ``--output-format json --verbose`` prints every message in one array."""
    line = (FIXTURES / "claude" / "verbose-json-array.json").read_bytes().strip()
    events = decode("claude", [line])
    assert [e.type for e in events] == ["start", "message", "usage", "result"]
    assert events[-1].result == "Done." and not violations(events)
    with pytest.raises(MalformedEventError, match="every element must be a message object"):
        decode("claude", [b'[{"type":"result"}, 3]'])


# -- --output-format json: one document ------------------------------------------------------------

JSON_SUCCESS = {
    "type": "result",
    "subtype": "success",
    "is_error": False,
    "duration_ms": 29039,
    "duration_api_ms": 29535,
    "num_turns": 6,
    "result": "Task completed successfully! …",
    "session_id": "dc93aac8-fe7f-4d4a-83ef-2bd2c070444e",
    "total_cost_usd": 0.1351093,
    "usage": {
        "input_tokens": 29,
        "cache_creation_input_tokens": 23106,
        "cache_read_input_tokens": 112686,
        "output_tokens": 656,
    },
    "modelUsage": {
        "claude-haiku-4-5-20251001": {
            "inputTokens": 3774,
            "outputTokens": 191,
            "cacheReadInputTokens": 0,
            "cacheCreationInputTokens": 0,
            "costUSD": 0.004729,
        },
        "claude-sonnet-4-5-20250929": {
            "inputTokens": 29,
            "outputTokens": 656,
            "cacheReadInputTokens": 112686,
            "cacheCreationInputTokens": 23106,
            "costUSD": 0.1303803,
        },
    },
    "permission_denials": [],
    "uuid": "e6cfcb90-ee51-4c2c-b73e-3c0c3e368196",
}
"""The reference's ``--output-format json`` capture (section 3), its ``usage`` trimmed to the token counts."""


def test_json_output_document_is_a_whole_successful_run_with_its_final_text() -> None:
    import json

    pretty = json.dumps(JSON_SUCCESS, indent=2, ensure_ascii=False).encode()
    events = get_dialect("claude").decoder().decode_document(msgspec.json.decode(pretty))
    assert [e.type for e in events] == ["start", "message", "usage", "usage", "result"]
    assert not violations(events)
    start, message, _, main, result = events
    assert start.session_id == JSON_SUCCESS["session_id"] and start.model == "claude-sonnet-4-5-20250929"
    assert not start.synthetic
    assert (message.role, message.content) == ("assistant", "Task completed successfully! …")
    assert (main.input_tokens, main.cached_tokens, main.output_tokens) == (29 + 23106 + 112686, 112686, 656)
    assert (result.ok, result.exit_code, result.result, result.turn_count) == (True, 0, message.content, 6)
    assert result.usage.cost_usd == pytest.approx(0.1351093)


@pytest.mark.parametrize(
    ("document", "code", "subtype", "exit_code"),
    [
        (
            {
                "type": "result",
                "subtype": "error_during_execution",
                "duration_ms": 0,
                "duration_api_ms": 0,
                "is_error": True,
                "num_turns": 0,
                "session_id": "27934753-425a-4182-892c-6b1c15050c3f",
                "total_cost_usd": 0,
                "errors": ["No conversation found with session ID: d56965c9-c855-4042-a8f5-f12bbb14d6f6"],
            },
            "SESSION_NOT_FOUND",
            "error",
            1,
        ),
        (
            {
                "type": "result",
                "subtype": "success",
                "is_error": True,
                "terminal_reason": "api_error",
                "api_error_status": 403,
                "num_turns": 484,
                "duration_ms": 1505,
                "result": "Your organization has disabled …",
            },
            "PERMISSION_DENIED",
            "error",
            1,
        ),
        (
            {
                "type": "result",
                "subtype": "error_max_turns",
                "is_error": True,
                "num_turns": 3,
                "duration_ms": 9,
            },
            "MAX_TURNS",
            "max_turns",
            3,
        ),
    ],
)
def test_json_output_document_of_a_failed_run_is_a_failure_with_its_reason(
    document: dict[str, Any], code: str, subtype: str, exit_code: int
) -> None:
    events = get_dialect("claude").decoder().decode_document(document)
    assert [e.type for e in events] == ["start", "error", "result"], "no final text: the result is the error"
    assert not violations(events)
    error, result = events[1:]
    assert error.code == code and not error.recoverable
    assert (result.ok, result.subtype, result.exit_code, result.error.code) == (
        False,
        subtype,
        exit_code,
        code,
    )


def test_json_output_array_of_verbose_mode_and_other_documents() -> None:
    claude = get_dialect("claude")
    array = objects(fixture_lines("claude", "verbose-json-array.json"))[0]
    assert [e.type for e in claude.decoder().decode_document(array)][-1] == "result"
    assert claude.decoder().decode_document({"response": "a gemini document"}) is None


def test_what_a_failing_line_leaves_queued_is_not_lost() -> None:
    """A line held for ``init`` is replayed (and reported) while the next line fails; a third line fails too.
    The replayed line's report and the made-up start it brought wait for the next line that decodes."""
    from agentstream.consumer import read

    lines = [
        b'{"sessionId":"s","kind":"main"}',  # no type: held for init
        b'{"type":"user","id":"g-1"}',  # a turn line (the held one is replayed) without its message
        b'{"$set":{"lastUpdated":"now"}}',  # no type again, now after the start
        b'{"type":"gemini","id":"g-2"}',  # a type Claude does not know: passed on
    ]
    events = list(read(b"\n".join(lines) + b"\n", "claude"))
    assert events[0].type == "start" and events[0].command == "claude"
    reports = [e.message for e in events if isinstance(e, p.Error) and e.code == "MALFORMED_EVENT"]
    assert reports == [
        "line 2 skipped: claude 'user' line: field 'message' is missing (expected an object)",
        "line 3 skipped: claude line: field 'type' is missing (expected a string)",
        "claude line: field 'type' is missing (expected a string)",
    ]


def test_an_sdk_driven_session_reads_as_its_turns_with_the_hosts_state_inside_them() -> None:
    """Claude Code 2.1.332 driven by the Claude Agent SDK writes ``session_state_changed`` lines for the host
    between turns (``idle`` after a result, ``running`` before the next ``init``): they open no turn of their
    own, so two turns read as two, and the last ``idle`` adds no made-up third one."""
    data = b"\n".join(fixture_lines("claude", "real-2.1.332-sdk-session.ndjson"))
    with read(io.BytesIO(data), "claude") as reader:
        events = list(reader)
    assert [e.type for e in events if isinstance(e, (p.Start, p.Result))] == ["start", "result"] * 2
    assert not [
        e for e in events if e.synthetic is True or (isinstance(e, p.GenericEvent) and e.name == "start")
    ]
    states = [
        (e.data["state"], sum(isinstance(before, p.Start) for before in events[:index]))
        for index, e in enumerate(events)
        if isinstance(e, p.GenericEvent) and e.name == "claude.system.session_state_changed"
    ]
    # each state in the turn it came before or during (the turn's number), the trailing idle left out
    assert states == [("running", 1), ("requires_action", 1), ("running", 1), ("idle", 2), ("running", 2)]
    assert violations(events) == []


def _claude_lines(
    session: list[p.BaseEvent],
    *,
    short: bool,
    encoder_class: type[Any] | None = None,
    cuts: list[int] | None = None,
    uuids: int = 0,
) -> list[bytes]:
    """The session written by a reproducible Claude encoder, deltas of the open run the short way or not;
    with ``cuts``, in batches cut there (``encode_batch``), else event by event. ``uuids``: the lines' uuid
    counter so far."""
    encoder = (encoder_class or type(get_dialect("claude").encoder()))()
    encoder.reproducible("seed")
    encoder._uuids = uuids
    encoder._short_deltas = short and encoder._short_deltas
    events = [msgspec.structs.replace(event) for event in session]
    if cuts is None:
        return [out for event in events for out in encoder.encode(event)] + encoder.finish()
    edges = [0, *sorted(cut % (len(events) + 1) for cut in cuts), len(events)]
    batches = [events[start:end] for start, end in itertools.pairwise(edges)]
    return [out for batch in batches for out in encoder.encode_batch(batch)] + encoder.finish()


@settings(max_examples=150, deadline=None)
@given(session=full_sessions() | sessions(delta_runs()), cuts=st.none() | st.lists(st.integers(0, 10_000)))
def test_a_delta_of_the_open_run_is_written_the_same_the_short_way(
    session: list[p.BaseEvent], cuts: list[int] | None
) -> None:
    """Event by event or in batches cut anywhere (a batch's runs of deltas are written in one loop)."""
    assert _claude_lines(session, short=True, cuts=cuts) == _claude_lines(session, short=False)


@st.composite
def deltas_that_stray(draw: st.DrawFn) -> list[p.BaseEvent]:
    """A streamed session whose deltas now and then name another run, another session (or none) or another
    role than the deltas around them, and may be left without their ending."""
    session = draw(full_sessions() | sessions(delta_runs()))
    for event in session:
        if type(event) is not p.MessageDelta:
            continue
        if draw(st.integers(0, 3)) == 0:
            event.message_id = draw(
                st.sampled_from(["msg_other", *(e.message_id for e in session if type(e) is p.MessageDelta)])
            )
        if draw(st.integers(0, 3)) == 0:
            event.session_id = draw(st.sampled_from(["ses_other", ""]))
        if draw(st.integers(0, 3)) == 0:
            event.role = draw(st.sampled_from(["user", "system"]))
    return session[: draw(st.integers(1, len(session)))] if draw(st.booleans()) else session


@settings(max_examples=200, deadline=None)
@given(session=deltas_that_stray(), cuts=st.lists(st.integers(0, 10_000), max_size=3))
def test_a_batch_stops_its_run_at_a_delta_that_strays(session: list[p.BaseEvent], cuts: list[int]) -> None:
    assert _claude_lines(session, short=True, cuts=cuts) == _claude_lines(session, short=False)


@settings(max_examples=200, deadline=None)
@given(session=deltas_that_stray(), cuts=st.lists(st.integers(0, 10_000), max_size=3))
def test_a_run_of_deltas_is_written_as_the_python_version_writes_it(
    session: list[p.BaseEvent], cuts: list[int]
) -> None:
    with_c = _claude_lines(session, short=True, cuts=cuts)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(claude_dialect, "_write_deltas", claude_dialect._write_deltas_py)
        assert _claude_lines(session, short=True, cuts=cuts) == with_c


@pytest.mark.parametrize("uuids", [0xFFFFFFFFFFF0, 0xFFFFFFFFFFFFF0, 2**63 - 5, 2**64 - 40])
def test_a_line_uuids_counter_past_twelve_hex_digits_is_written_as_the_python_version_writes_it(
    uuids: int,
) -> None:
    session = list(read((FIXTURES / "claude" / "partial-messages.ndjson").read_bytes(), "claude"))
    with_c = _claude_lines(session, short=True, cuts=[], uuids=uuids)
    assert any(f"{uuids + 1:012x}".encode() in line for line in with_c)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(claude_dialect, "_write_deltas", claude_dialect._write_deltas_py)
        assert _claude_lines(session, short=True, cuts=[], uuids=uuids) == with_c


def test_every_example_stream_is_written_the_same_with_its_deltas_the_short_way() -> None:
    """Whole, and cut after its last delta (the ending the encoder makes up closes the run from its tally)."""
    for path in sorted((FIXTURES / "claude").glob("*.ndjson")):
        session = list(read(path.read_bytes(), "claude"))
        deltas = [index for index, event in enumerate(session) if type(event) is p.MessageDelta]
        if deltas:
            cut = session[: deltas[-1] + 1]
            assert _claude_lines(cut, short=True) == _claude_lines(cut, short=False), path.name
        short = _claude_lines(session, short=True)
        assert short == _claude_lines(session, short=False), path.name
        assert _claude_lines(session, short=True, cuts=[]) == short, path.name
        assert sum(b'"text_delta"' in line for line in short) == sum(
            type(event) is p.MessageDelta for event in session
        ), path.name


def test_an_encoder_that_writes_deltas_its_own_way_is_not_skipped() -> None:
    encoder_class = type(get_dialect("claude").encoder())

    class Loud(encoder_class):  # type: ignore[misc,valid-type]
        def on_message_delta(self, event: p.MessageDelta) -> list[Any]:
            return [{"type": "loud", "text": event.content.upper()}]

    session = stamped(
        [
            p.Start(command="c"),
            *[p.MessageDelta(message_id="m", role="assistant", content=part) for part in ("ab", "cd")],
            p.Message(message_id="m", role="assistant", content="abcd"),
            p.Result(ok=True, subtype="success", exit_code=0),
        ]
    )
    lines = _claude_lines(session, short=True, encoder_class=Loud)
    assert [json.loads(line)["text"] for line in lines if b'"loud"' in line] == ["AB", "CD"]
