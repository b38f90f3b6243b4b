"""Codex ``exec --json``: the reference's lines decode, the encoder reproduces them, round trips keep the codex row."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings

from _dialect_kit import (
    FIXTURES,
    assert_field_lost,
    decode,
    decode_fixture,
    encode,
    fixture_lines,
    line,
    objects,
    one,
    only,
    project,
    round_trip,
    violations,
)
from _strategies import full_sessions
from agentstream import protocol as p
from agentstream.consumer import read
from agentstream.dialects import detect_dialect
from agentstream.errors import MalformedEventError

# -- golden ---------------------------------------------------------------------------------


def test_the_exec_doc_example_decodes_to_a_whole_valid_session() -> None:
    events = decode_fixture("codex", "exec-doc.ndjson")
    assert [e.type for e in events] == [
        "start",
        "reasoning",
        "tool_call",
        "tool_result",
        "message",
        "usage",
        "result",
    ]
    start, reasoning, call, result_of_call, message, usage, result = events
    assert start.session_id == "0199a213-81c0-7800-8aa1-bbab2a035a53" and start.command == "codex exec"
    assert (reasoning.reasoning_id, reasoning.content) == ("item_0", "**Searching for README files**")
    assert (call.call_id, call.name, call.arguments) == (
        "item_1",
        "command_execution",
        {"command": "bash -lc ls"},
    )
    assert (result_of_call.status, result_of_call.output) == ("success", "2025-09-11\nAGENTS.md\n...")
    assert message.content == "Yep — there’s a `README.md` in the repository root."
    assert (usage.input_tokens, usage.cached_tokens, usage.output_tokens) == (24763, 24448, 122)
    assert (result.ok, result.exit_code, result.turn_count, result.result) == (True, 0, 1, message.content)
    assert result.usage.input_tokens == 24763 and result.tools_used == ["command_execution"]
    assert not violations(events)


def test_pre_rename_item_type_field_is_understood() -> None:
    call = one(decode_fixture("codex", "mcp-pre-rename.ndjson"), p.ToolCall)
    assert (call.call_id, call.name, call.arguments) == ("item_1", "mcp__github__search_issues", {})


def test_every_item_type_and_non_fatal_errors() -> None:
    events = decode_fixture("codex", "items.ndjson")
    assert events[0].ts == "2025-10-02T10:00:00.000Z"
    plans = only(events, p.Progress)
    assert [(e.current, e.total) for e in plans] == [(0, 2), (1, 2), (2, 2)]
    assert plans[-1].message == "[x] read the code\n[x] fix the bug"
    assert [e.content for e in only(events, p.ToolProgress)] == ["running 3 tests\n", "FAILED test_x\n"]
    results = {e.name: e for e in only(events, p.ToolResult)}
    assert (results["command_execution"].status, results["command_execution"].error) == (
        "error",
        "exit code 2",
    )
    assert results["file_change"].output == "update src/x.py\nadd tests/test_x.py"
    assert results["mcp__github__search_issues"].output == "#12 test_x is flaky"
    assert results["web_search"].status == "success"
    call = next(e for e in only(events, p.ToolCall) if e.name == "web_search")
    assert call.arguments == {"query": "pytest flaky rerun"}
    reconnect, lagged = only(events, p.Error)
    assert reconnect.recoverable and reconnect.code == "PROVIDER_ERROR"
    assert reconnect.details == {"attempt": 2, "max_attempts": 5}
    assert lagged.recoverable and lagged.message == "event stream lagged; dropped 12 events"
    result = events[-1]
    assert isinstance(result, p.Result) and result.ok and result.result == "Fixed the flaky test."
    assert not violations(events)


def test_failed_turn_is_fatal_and_a_force_completed_command_is_cancelled() -> None:
    events = decode_fixture("codex", "failed.ndjson")
    notice, fatal = only(events, p.Error)
    assert notice.recoverable and not fatal.recoverable and fatal.code == "AUTH_EXPIRED"
    command = one(events, p.ToolResult)  # codex#14691: completed with exit_code null
    assert command.status == "cancelled" and "never finished" in command.error
    result = events[-1]
    assert isinstance(result, p.Result) and (result.ok, result.exit_code) == (False, 1)
    assert events[-2] is fatal and result.error.message == "stream error: unexpected status 401 Unauthorized"
    assert not violations(events)


def test_missing_turn_completed_at_eof_closes_the_open_item_and_the_reader_ends_the_stream() -> None:
    decoded = decode_fixture("codex", "interrupted.ndjson")
    closing = one(decoded, p.ToolResult)
    assert closing.status == "cancelled" and closing.synthetic is True
    assert not only(decoded, p.Result)  # how it ended is the reader's to say (it knows the exit status)
    events = list(read(FIXTURES / "codex" / "interrupted.ndjson"))
    assert events[-1].type == "result" and events[-1].synthetic is True and not violations(events)


def test_reconnect_notices_with_a_delay_carry_it() -> None:
    line = b'{"type":"error","message":"stream error: retrying 3/5 in 211ms..."}'
    error = one(decode("codex", [line]), p.Error)
    assert (error.recoverable, error.retry_in_ms, error.details) == (
        True,
        211,
        {"attempt": 3, "max_attempts": 5},
    )


# -- what codex exec 0.171.0 printed (see tests/fixtures/dialects/README.md) --------------------


def test_real_tools_run_pairs_every_item_with_its_outcome() -> None:
    """Parallel calls finish in Codex's order; a web search item carries its own ``id`` twice (Codex's
    ``item_N`` first, the search's ``ws_…`` last, which JSON readers keep)."""
    events = decode_fixture("codex", "real-0.171.0-tools.ndjson")
    outcomes = [(r.call_id, r.name, r.status, r.error) for r in only(events, p.ToolResult)]
    assert outcomes == [
        ("ws_1", "web_search", "success", p.UNSET),
        ("item_2", "command_execution", "error", "exit code 3"),
        ("item_3", "command_execution", "success", p.UNSET),
        ("item_4", "file_change", "success", p.UNSET),
    ]
    usage = one(events, p.Usage)
    assert (usage.input_tokens, usage.cached_tokens, usage.output_tokens, usage.reasoning_tokens) == (
        2700,
        2200,
        75,
        20,
    )
    result = one(events, p.Result)
    assert result.ok and result.result == "One command failed with exit code 3."
    assert not violations(events)


def test_real_api_failure_is_one_fatal_error_after_the_retry_notice() -> None:
    events = list(read(FIXTURES / "codex" / "real-0.171.0-api-401.ndjson"))
    assert [e.type for e in events] == ["start", "error", "error", "result"]
    notice, fatal = only(events, p.Error)
    assert notice.recoverable and notice.details == {"attempt": 1, "max_attempts": 1}
    assert (fatal.recoverable, fatal.code) == (False, "AUTH_EXPIRED")
    result = one(events, p.Result)
    assert result.synthetic is p.UNSET and (result.ok, result.exit_code) == (False, 1)
    assert not violations(events)


@pytest.mark.parametrize(
    ("name", "answer"),
    [("real-0.171.0-model-warning.ndjson", "Hello."), ("real-0.171.0-reconnect.ndjson", "Second try.")],
)
def test_real_warnings_and_retries_do_not_fail_the_turn(name: str, answer: str) -> None:
    events = list(read(FIXTURES / "codex" / name))
    assert one(events, p.Error).recoverable
    result = one(events, p.Result)
    assert (result.ok, result.result) == (True, answer) and not violations(events)


def test_detection() -> None:
    for name in (
        "exec-doc.ndjson",
        "items.ndjson",
        "mcp-pre-rename.ndjson",
        "real-0.171.0-model-warning.ndjson",
    ):
        assert detect_dialect(objects(fixture_lines("codex", name))[:1]) == "codex"


# -- encoder reproduces the examples ----------------------------------------------------------


def test_encoder_reproduces_the_exec_doc_example() -> None:
    example = objects(fixture_lines("codex", "exec-doc.ndjson"))
    made = objects(encode("codex", decode_fixture("codex", "exec-doc.ndjson")))
    assert [o["type"] for o in made] == [o["type"] for o in example]
    for mine, theirs in zip(made, example, strict=False):
        if "item" in theirs:  # item ids are renumbered from 0 in order (codex skipped item_2)
            assert {**mine["item"], "id": theirs["item"]["id"]} == theirs["item"]
        elif theirs["type"] == "turn.completed":  # the example predates the reasoning and cache-write counts
            assert mine["usage"] == {
                **theirs["usage"],
                "reasoning_output_tokens": 0,
                "cache_write_input_tokens": 0,
            }
        else:
            assert mine == theirs


def _turn(usage: dict[str, int], thread: str = "0199a213-81c0-7800-8aa1-bbab2a035a53") -> list[bytes]:
    return [
        line({"type": "thread.started", "thread_id": thread}),
        line({"type": "turn.started"}),
        line({"type": "turn.completed", "usage": usage}),
    ]


FIRST_TOTAL = {
    "input_tokens": 1000,
    "cached_input_tokens": 600,
    "cache_write_input_tokens": 100,
    "output_tokens": 50,
    "reasoning_output_tokens": 20,
}
SECOND_TOTAL = {
    "input_tokens": 2500,
    "cached_input_tokens": 1800,
    "cache_write_input_tokens": 100,
    "output_tokens": 90,
    "reasoning_output_tokens": 30,
}


def test_turn_usage_is_what_the_threads_running_total_grew_by() -> None:
    """``turn.completed.usage`` is the thread's total so far (``codex exec resume`` counts on): summing the turns'
    figures as they are would count the first turn again in every later one."""
    events = decode("codex", [*_turn(FIRST_TOTAL), *_turn(SECOND_TOTAL)])
    first, second = only(events, p.Usage)
    assert (first.input_tokens, first.cached_tokens, first.cache_write_tokens) == (1000, 600, 100)
    assert (first.output_tokens, first.reasoning_tokens) == (50, 20)
    assert (second.input_tokens, second.cached_tokens, second.cache_write_tokens) == (1500, 1200, p.UNSET)
    assert (second.output_tokens, second.reasoning_tokens) == (40, 10)
    assert only(events, p.Result)[-1].usage.input_tokens == 2500
    assert not violations(events)


def test_a_running_total_that_starts_again_is_a_new_count() -> None:
    """Two processes' outputs in one file: a total below the last one is the new process's own."""
    events = decode("codex", [*_turn(SECOND_TOTAL), *_turn(FIRST_TOTAL)])
    assert [u.input_tokens for u in only(events, p.Usage)] == [2500, 1000]


def test_another_thread_s_running_total_counts_from_nothing() -> None:
    """Two threads' outputs in one file: the second thread's total is its own, even when it is the larger."""
    other = "0199a213-81c0-7800-8aa1-ccab2a035a54"
    events = decode("codex", [*_turn(FIRST_TOTAL), *_turn(SECOND_TOTAL, other)])
    assert [u.input_tokens for u in only(events, p.Usage)] == [1000, 2500]


def test_the_encoder_writes_the_running_total_the_decoder_reads_back() -> None:
    events = decode("codex", [*_turn(FIRST_TOTAL), *_turn(SECOND_TOTAL)])
    written = [o for o in objects(encode("codex", events)) if o["type"] == "turn.completed"]
    assert [o["usage"] for o in written] == [FIRST_TOTAL, SECOND_TOTAL]


# -- round trip -------------------------------------------------------------------------------

_NATIVE = {"command_execution", "file_change", "web_search"}


def keep(event: dict[str, Any]) -> dict[str, Any] | None:
    """What a codex stream carries (the capability table's codex row); ids are codex's own item ids."""
    kind = event["type"]
    if kind == "start":
        return {"type": kind}
    if kind == "message":
        return event | {"message_id": None} if event["role"] == "assistant" else None
    if kind == "reasoning":
        return event | {"reasoning_id": None}
    if kind == "tool_call":
        return {"type": kind, "name": event["name"], "arguments": event["arguments"]}
    if kind == "tool_result":
        ok = event["status"] == "success"  # a failure codex gives no reason for still gets one
        return {
            "type": kind,
            "name": event["name"],
            "ok": ok,
            "output": event.get("output") or None,
            "error": event.get("error", None if ok else "the tool call failed"),
        }
    if kind == "error" and event["recoverable"]:
        return {"type": kind, "message": event["message"]}
    if kind == "result":
        return {"type": kind, "ok": event["ok"]}
    return None


def summed(events: list[p.BaseEvent]) -> tuple[int, int, int]:
    usages = only(events, p.Usage)
    if not usages:
        result = events[-1]
        assert isinstance(result, p.Result)
        return result.usage.input_tokens, result.usage.output_tokens, 0
    return (
        sum(u.input_tokens for u in usages),
        sum(u.output_tokens for u in usages),
        sum(u.cached_tokens for u in usages),
    )


@settings(max_examples=60, deadline=None)
@given(full_sessions())
def test_round_trip_keeps_what_the_codex_row_promises(events: list[p.BaseEvent]) -> None:
    native = [e for e in only(events, p.ToolCall) if e.name in _NATIVE]
    back = round_trip("codex", [e for e in events if e not in native])  # native tools: their own test below
    original = [
        e for e in events if not (isinstance(e, p.ToolResult) and e.call_id in {n.call_id for n in native})
    ]
    assert project(back, keep) == project([e for e in original if e not in native], keep)
    result, source = back[-1], events[-1]
    assert isinstance(result, p.Result) and isinstance(source, p.Result)
    # usage rides on turn.completed only: a failed turn loses it
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.cached_tokens) == (
        summed(events) if source.ok else (0, 0, 0)
    )
    assert result.exit_code == (0 if source.ok else 1)
    assert result.result == next(
        (e.content for e in reversed(events) if isinstance(e, p.Message) and e.role == "assistant"), p.UNSET
    )
    if not source.ok:
        failure = source.error.message if source.error is not p.UNSET else "the turn failed"
        assert result.error.message == failure  # type: ignore[union-attr]
    assert not violations(back)


def test_native_codex_tools_round_trip_as_their_own_items() -> None:
    calls = [
        (
            p.ToolCall(call_id="a", name="command_execution", arguments={"command": "ls"}),
            p.ToolResult(
                call_id="a", name="command_execution", status="error", output="boom\n", error="exit code 2"
            ),
        ),
        (
            p.ToolCall(
                call_id="b", name="file_change", arguments={"changes": [{"path": "x", "kind": "add"}]}
            ),
            p.ToolResult(call_id="b", name="file_change", status="success", output="add x"),
        ),
        (
            p.ToolCall(call_id="c", name="web_search", arguments={"query": "q"}),
            p.ToolResult(call_id="c", name="web_search", status="success"),
        ),
        (
            p.ToolCall(call_id="d", name="command_execution", arguments={"command": "rm -rf /"}),
            p.ToolResult(call_id="d", name="command_execution", status="denied", output=""),
        ),
    ]
    events = [
        p.Start(command="x"),
        *(e for pair in calls for e in pair),
        p.ToolProgress(call_id="a", content="late"),
        p.Result(ok=True, subtype="success", exit_code=0),
    ]
    made = objects(encode("codex", events))
    assert [o["item"]["type"] for o in made if o["type"] == "item.completed"] == [
        "command_execution",
        "file_change",
        "web_search",
        "command_execution",
    ]
    back = decode("codex", encode("codex", events))
    results = only(back, p.ToolResult)
    assert [(r.name, r.status, r.output if r.output is not p.UNSET else None) for r in results] == [
        ("command_execution", "error", "boom\n"),
        ("file_change", "success", "add x"),
        ("web_search", "success", '{"query":"q"}'),
        ("command_execution", "denied", ""),
    ]
    assert results[0].error == "exit code 2"
    assert [c.arguments for c in only(back, p.ToolCall)] == [c.arguments for c, _ in calls]


# -- robustness -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "problem", "kinds"),
    [
        (b'{"type":"thread.started"}', "field 'thread_id' is missing", ["start", "log"]),
        (
            b'{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":true}}',
            "field 'text' must be a string, not a boolean",
            ["start", "log", "message"],
        ),
    ],
)
def test_informational_fields_of_the_wrong_kind_are_lost_not_the_line(
    line: bytes, problem: str, kinds: list[str]
) -> None:
    assert [e.type for e in assert_field_lost("codex", line, problem)] == kinds


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (b'{"type":"item.completed","item":{"id":"item_0"}}', "field 'type' is missing"),
        (b'{"type":"item.started","item":[]}', "field 'item' must be an object"),
    ],
)
def test_unusable_lines_are_named_precisely(line: bytes, problem: str) -> None:
    with pytest.raises(MalformedEventError, match=problem):
        decode("codex", [line])


def test_a_web_search_result_carries_the_query_codex_filled_in_at_completion() -> None:
    started = {"id": "item_3", "type": "web_search", "query": "", "action": {"type": "other"}}
    completed = {
        **started,
        "query": "codex cli jsonl",
        "action": {"type": "search", "query": "codex cli jsonl"},
    }
    for extra in ({}, {"unknown_field": 1}):  # the typed path, then the careful one
        events = decode(
            "codex",
            [
                line({"type": "thread.started", "thread_id": "t"}),
                line({"type": "item.started", "item": {**started, **extra}}),
                line({"type": "item.completed", "item": {**completed, **extra}}),
            ],
        )
        call, result = one(events, p.ToolCall), one(events, p.ToolResult)
        assert call.arguments == {"query": "", "action": {"type": "other"}}
        assert json.loads(result.output) == {"query": "codex cli jsonl", "action": completed["action"]}
