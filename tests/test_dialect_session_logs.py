"""Session logs as dialects: detected, decoded with the log's own times, and ended as the log shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from _codex_log_cases import BAD_RECORD_TIME, unreadable_totals, with_bad_token_count
from _dialect_kit import violations
from agentstream import protocol as p
from agentstream.consumer import read
from agentstream.errors import ErrorCode, UsageError
from agentstream.validate import validate_decoded

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "dialects"
LOGS = {
    "claude-log": FIXTURES / "claude-log" / "project-log.jsonl",
    "codex-log": FIXTURES / "codex-log" / "rollout.jsonl",
    "gemini-log": FIXTURES / "gemini-log" / "chat.jsonl",
}


def events_of(source: Path | bytes) -> tuple[list[p.AnyEvent], str | None]:
    with read(source if isinstance(source, Path) else iter([source])) as reader:
        events = list(reader)
        return events, reader.dialect


def of_type(events: list[p.AnyEvent], kind: type) -> list:
    return [event for event in events if type(event) is kind]


@pytest.mark.parametrize("dialect", sorted(LOGS))
def test_a_finished_log_reads_as_a_finished_session(dialect: str) -> None:
    events, detected = events_of(LOGS[dialect])
    assert detected == dialect
    result = events[-1]
    assert (
        isinstance(result, p.Result) and result.ok and result.exit_code == 0 and result.synthetic is p.UNSET
    )
    assert not of_type(events, p.Error)  # no truncation, no malformed line
    assert [e.seq for e in events] == list(range(len(events)))
    calls, results = of_type(events, p.ToolCall), of_type(events, p.ToolResult)
    assert len(calls) == len(results) == 1 and calls[0].call_id == results[0].call_id
    assert all(not r.synthetic for r in results) and results[0].status == "success"
    assert len(of_type(events, p.Usage)) == 2  # one per model call, whatever the log repeats
    stamps = [e.ts for e in events if isinstance(e, p.BaseEvent)]
    assert all(ts.startswith("2026-11-0") for ts in stamps)  # the log's times, not the reading's
    assert result.duration_ms > 0
    with read(LOGS[dialect]) as reader:
        assert list(validate_decoded(reader)) == []


def test_claude_log_details() -> None:
    events, _ = events_of(LOGS["claude-log"])
    start = events[0]
    assert isinstance(start, p.Start) and start.cwd == "/home/dev/proj"
    assert start.session_id == "7f1c2d3e-0000-4000-8000-00000000abcd"
    first = of_type(events, p.Usage)[0]
    assert (first.input_tokens, first.cached_tokens, first.cache_write_tokens) == (10512, 9000, 1500)
    assert events[-1].usage.cache_write_tokens == 1800
    unknown = [e.type for e in events if isinstance(e, p.UnknownEvent)]
    assert unknown == ["file-history-snapshot", "summary"]  # kept whole, not malformed
    assert of_type(events, p.Reasoning)[0].content == "Use ls."


def _claude_lines() -> list[dict]:
    return [json.loads(line) for line in LOGS["claude-log"].read_text().splitlines()]


def test_a_claude_log_cut_mid_turn_is_not_finished() -> None:
    lines = _claude_lines()[:5]  # up to the tool_use, before its result
    events, _ = events_of(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    error, result = events[-2], events[-1]
    assert isinstance(error, p.Error) and error.code == ErrorCode.NOT_FINISHED and error.synthetic is True
    assert isinstance(result, p.Result) and not result.ok and result.synthetic is True
    cancelled = of_type(events, p.ToolResult)
    assert [r.status for r in cancelled] == ["cancelled"]


def test_an_interrupted_claude_session_says_so() -> None:
    lines = _claude_lines()[:3]
    interrupt = dict(
        lines[1],
        uuid="u-9",
        message={"role": "user", "content": [{"type": "text", "text": "[Request interrupted by user]"}]},
    )
    events, _ = events_of(b"".join(json.dumps(line).encode() + b"\n" for line in [*lines, interrupt]))
    result = events[-1]
    assert isinstance(result, p.Result) and result.subtype == "interrupted" and result.exit_code == 130
    assert result.synthetic is p.UNSET


def test_codex_rollout_details() -> None:
    events, _ = events_of(LOGS["codex-log"])
    usages = of_type(events, p.Usage)
    assert [(u.model, u.input_tokens, u.cached_tokens, u.reasoning_tokens) for u in usages] == [
        ("gpt-5-codex", 5000, 3000, 256),
        ("gpt-5-codex", 6000, 5000, 44),
    ]
    messages = [m.content for m in of_type(events, p.Message) if m.role == "assistant"]
    assert messages == ["There are 2 files."]  # the agent_message event repeats it and is not decoded twice
    assert events[-1].result == "There are 2 files."


def _rollout(*records: tuple[str, dict]) -> bytes:
    """A rollout of ``(type, payload)`` records after a ``session_meta``, a second apart."""
    meta = ("session_meta", {"id": "0199a213-81c0-7800-8aa1-bbab2a035a53", "cwd": "/w"})
    return b"".join(
        json.dumps({"timestamp": f"2026-11-03T10:00:{n:02}.000Z", "type": kind, "payload": payload}).encode()
        + b"\n"
        for n, (kind, payload) in enumerate([meta, *records])
    )


_FAILED_TURN = (
    ("event_msg", {"type": "task_started", "turn_id": "t1"}),
    (
        "event_msg",
        {
            "type": "task_complete",
            "turn_id": "t1",
            "last_agent_message": None,
            "error": {"message": "unexpected status 401 Unauthorized", "codex_error_info": "other"},
        },
    ),
)


def test_a_codex_turn_completed_with_an_error_failed() -> None:
    events, _ = events_of(_rollout(*_FAILED_TURN))
    result = events[-1]
    assert isinstance(result, p.Result) and (result.ok, result.exit_code) == (False, 1)
    assert result.error is not p.UNSET and result.error.code == ErrorCode.AUTH_EXPIRED
    (fatal,) = of_type(events, p.Error)
    assert not fatal.recoverable and not violations(events)


def test_a_failed_codex_turn_followed_by_another_is_a_recoverable_error() -> None:
    reply = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}
    later = [
        ("event_msg", {"type": "task_started", "turn_id": "t2"}),
        ("response_item", reply),
        ("event_msg", {"type": "task_complete", "turn_id": "t2", "last_agent_message": "ok"}),
    ]
    events, _ = events_of(_rollout(*_FAILED_TURN, *later))
    (error,) = of_type(events, p.Error)
    assert error.recoverable and error.code == ErrorCode.AUTH_EXPIRED
    assert events[-1].ok and not violations(events)


@pytest.mark.parametrize(
    ("output", "status"),
    [
        ("Chunk ID: 9a\nWall time: 0.01 seconds\nProcess exited with code 3\nOutput:\noops\n", "error"),
        ("Exit code: 1\nWall time: 0.1 seconds\nOutput:\nfailed\n", "error"),
        ("Chunk ID: 9a\nProcess exited with code 0\nOutput:\nExit code: 1\n", "success"),
        ("Process exited with code 3", "success"),
    ],
    ids=["exec-command", "shell-command", "output-says-it", "no-output-mark"],
)
def test_a_codex_command_s_exit_code_is_read_from_its_output_s_head(output: str, status: str) -> None:
    call = {"type": "function_call", "name": "exec_command", "arguments": '{"cmd": "x"}', "call_id": "c1"}
    records = [
        ("event_msg", {"type": "task_started", "turn_id": "t1"}),
        ("response_item", call),
        ("response_item", {"type": "function_call_output", "call_id": "c1", "output": output}),
        ("event_msg", {"type": "task_complete", "turn_id": "t1"}),
    ]
    events, _ = events_of(_rollout(*records))
    (result,) = of_type(events, p.ToolResult)
    assert result.status == status


def test_codex_records_that_repeat_others_are_not_decoded_twice() -> None:
    repeated = [
        ("event_msg", {"type": "task_started", "turn_id": "t1"}),
        ("event_msg", {"type": "item_completed", "item": {"type": "AgentMessage", "id": "m1"}}),
        ("token_usage_record", {"usage": {"input_tokens": 5, "output_tokens": 1}}),
        ("event_msg", {"type": "task_complete", "turn_id": "t1"}),
    ]
    events, _ = events_of(_rollout(*repeated))
    assert [e.type for e in events] == ["start", "result"]


REAL_ROLLOUTS = FIXTURES / "codex-log" / "real-0.171.0"
"""Rollouts Codex 0.171.0 wrote (see tests/fixtures/dialects/README.md); outside the folder the contract tests
break field by field, as their instructions make them long."""


def test_a_real_codex_rollout_reads_as_its_turn_went() -> None:
    events, dialect = events_of(REAL_ROLLOUTS / "tools.jsonl")
    assert dialect == "codex-log"
    statuses = {r.call_id: (r.name, r.status) for r in of_type(events, p.ToolResult)}
    assert statuses == {
        "ws_1": ("web_search", "success"),
        "call_a": ("exec_command", "success"),
        "call_b": ("exec_command", "error"),
        "call_p": ("apply_patch", "success"),
    }
    assert not [e for e in events if isinstance(e, p.UnknownEvent) and "item_completed" in e.type]
    result = events[-1]
    assert isinstance(result, p.Result) and result.ok
    usage = result.usage
    assert (usage.input_tokens, usage.cached_tokens, usage.output_tokens) == (2700, 2200, 75)
    assert not violations(events)


def test_a_real_codex_rollout_of_a_failed_turn_reads_as_failed() -> None:
    events, _ = events_of(REAL_ROLLOUTS / "api-401.jsonl")
    result = events[-1]
    assert isinstance(result, p.Result) and (result.ok, result.exit_code) == (False, 1)
    assert result.error is not p.UNSET and result.error.code == ErrorCode.AUTH_EXPIRED
    assert not violations(events)


@unreadable_totals
def test_a_codex_token_count_whose_running_total_cannot_be_read_loses_only_itself(
    total: dict | None, last: dict
) -> None:
    """It neither resets the running total (the next good one counted the whole session again) nor counts
    its last_token_usage (the next good total counted that call again): the usage is the clean log's."""
    events, _ = events_of(with_bad_token_count(LOGS["codex-log"], total, last))
    usages = of_type(events, p.Usage)
    assert [(u.input_tokens, u.cached_tokens, u.output_tokens, u.reasoning_tokens) for u in usages] == [
        (5000, 3000, 400, 256),
        (6000, 5000, 120, 44),
    ]
    result = events[-1]
    assert isinstance(result, p.Result) and result.ok
    assert (result.usage.input_tokens, result.usage.cached_tokens, result.usage.output_tokens) == (
        11000,
        8000,
        520,
    )
    (warning,) = [e for e in of_type(events, p.Log) if "total_token_usage" in e.message]
    assert warning.level == "warn" and warning.ts == BAD_RECORD_TIME
    assert not of_type(events, p.Error)


def test_gemini_log_details() -> None:
    events, _ = events_of(LOGS["gemini-log"])
    (call,) = of_type(events, p.ToolCall)
    assert (call.name, call.arguments) == ("list_directory", {"path": "."})
    assert of_type(events, p.ToolResult)[0].output == "README.md\nsrc"
    assert of_type(events, p.Usage)[0].output_tokens == 160  # candidates + thoughts
    rewind = b'{"$rewindTo": "g-3"}\n'
    events, _ = events_of(LOGS["gemini-log"].read_bytes() + rewind)
    assert any(isinstance(e, p.GenericEvent) and e.name == "gemini.rewind" for e in events)


def test_session_log_dialects_are_decode_only() -> None:
    from agentstream.dialects import get_dialect

    for name in LOGS:
        dialect = get_dialect(name)
        assert dialect.can_encode is False
        with pytest.raises(UsageError, match="decode-only"):
            dialect.encoder()


def test_a_field_of_the_wrong_kind_is_lost_with_a_warning_at_the_record_s_own_time() -> None:
    """Claude: a record whose ``sessionId`` is not text still starts the session; Gemini: a reply whose content
    is a boolean is still a reply. Each loss is one warning, stamped with the record's time like its events."""
    claude = LOGS["claude-log"].read_bytes().splitlines(keepends=True)
    first_user = next(i for i, raw in enumerate(claude) if json.loads(raw)["type"] == "user")
    record = json.loads(claude[first_user])
    record["sessionId"] = [42]
    claude[first_user] = json.dumps(record).encode() + b"\n"
    events, _ = events_of(b"".join(claude))
    warnings = [e for e in of_type(events, p.Log) if "field 'sessionId'" in e.message]
    assert len(warnings) == 1 and warnings[0].level == "warn"
    assert warnings[0].ts == record["timestamp"]
    assert isinstance(events[-1], p.Result) and events[-1].ok

    reply = {"id": "g-9", "timestamp": "2026-11-04T09:00:00.000Z", "type": "gemini", "content": True}
    events, _ = events_of(LOGS["gemini-log"].read_bytes() + json.dumps(reply).encode() + b"\n")
    (warning,) = [e for e in of_type(events, p.Log) if "the field was ignored" in e.message]
    assert warning.message.startswith("gemini-log 'gemini' line: field 'content'")
    assert warning.ts == reply["timestamp"]
    assert [m.message_id for m in of_type(events, p.Message)][-1] == "g-9"


def test_a_record_that_cannot_be_read_is_rejected_by_name_with_a_fix() -> None:
    from agentstream.dialects import get_dialect
    from agentstream.errors import MalformedEventError

    for dialect, line in (
        ("claude-log", b'{"type": ["user"], "messageId": "m"}'),
        ("codex-log", b'{"timestamp": "2026-11-03T10:00:00.000Z", "type": "response_item", "payload": 7}'),
        ("gemini-log", b'{"$rewindTo": true}'),
    ):
        decoder = get_dialect(dialect).decoder()
        with pytest.raises(MalformedEventError) as raised:
            decoder.decode_line(line)
        assert raised.value.message.startswith(dialect) and raised.value.fix
        assert decoder.finish() == []


def test_a_message_of_the_older_gemini_form_that_cannot_be_read_loses_only_itself() -> None:
    record = {
        "sessionId": "s-old",
        "projectHash": "h",
        "startTime": "2026-11-04T08:00:00.000Z",
        "messages": [
            {"type": "user", "timestamp": "2026-11-04T08:00:01.000Z", "content": "no id"},
            {"id": "g", "type": "gemini", "timestamp": "2026-11-04T08:00:02.000Z", "content": "hello"},
        ],
    }
    events, detected = events_of(json.dumps(record).encode() + b"\n")
    assert detected == "gemini-log"
    (error,) = of_type(events, p.Error)
    assert error.code == ErrorCode.MALFORMED_EVENT and error.recoverable and error.fix
    assert error.message.startswith("gemini-log 'user' line: field 'id'")
    assert [m.content for m in of_type(events, p.Message)] == ["hello"]
    assert isinstance(events[-1], p.Result) and events[-1].ok


def test_claude_token_counts_of_another_kind_are_read_as_numbers_or_lost_with_a_warning() -> None:
    """``250.0`` is 250 and ``"10"`` is 10; a count that is no number is lost, said once, not the record."""
    lines = _claude_lines()
    for line in lines:
        usage = line.get("message", {}).get("usage") if line["type"] == "assistant" else None
        if usage is not None:
            usage["input_tokens"] = str(usage["input_tokens"])
            usage["output_tokens"] = float(usage["output_tokens"])
    clean, _ = events_of(LOGS["claude-log"])
    liberal, _ = events_of(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    figures = [(u.input_tokens, u.output_tokens, u.cached_tokens) for u in of_type(liberal, p.Usage)]
    assert figures == [(u.input_tokens, u.output_tokens, u.cached_tokens) for u in of_type(clean, p.Usage)]
    assert not of_type(liberal, p.Log)

    for line in lines:
        if line["type"] == "assistant":
            line["message"]["usage"]["output_tokens"] = "lots"
    lossy, _ = events_of(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    assert [u.output_tokens for u in of_type(lossy, p.Usage)] == [0, 0]
    assert [u.input_tokens for u in of_type(lossy, p.Usage)] == [
        u.input_tokens for u in of_type(clean, p.Usage)
    ]
    (warning,) = of_type(lossy, p.Log)
    assert "field 'output_tokens' must be an integer" in warning.message and warning.level == "warn"
    assert isinstance(lossy[-1], p.Result) and lossy[-1].ok


@pytest.mark.parametrize(
    ("dialect", "provider"),
    [("claude-log", "anthropic"), ("codex-log", "openai"), ("gemini-log", "gcp.gemini")],
)
def test_a_session_log_s_start_names_the_provider_its_cli_calls(dialect: str, provider: str) -> None:
    events, _ = events_of(LOGS[dialect])
    start = events[0]
    assert isinstance(start, p.Start) and start.provider == provider


def test_a_codex_rollout_that_names_its_model_provider_is_taken_at_its_word() -> None:
    lines = LOGS["codex-log"].read_bytes().splitlines(keepends=True)
    meta = json.loads(lines[0])
    assert meta["type"] == "session_meta"
    meta["payload"]["model_provider"] = "azure"
    events, _ = events_of(json.dumps(meta).encode() + b"\n" + b"".join(lines[1:]))
    assert isinstance(events[0], p.Start) and events[0].provider == "azure"
