"""opencode ``run --format json``: parts decode, the encoder reproduces them, round trips keep the opencode row."""

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
from _strategies import full_sessions
from agentstream import protocol as p
from agentstream.dialects import detect_dialect
from agentstream.errors import MalformedEventError

SESSION = "ses_494719016ffe85dkDMj0FPRbHK"


# -- golden ---------------------------------------------------------------------------------


def test_a_run_with_thinking_tools_and_done() -> None:
    events = decode_fixture("opencode", "run.ndjson")
    assert {e.session_id for e in events} == {SESSION}
    start = events[0]
    assert isinstance(start, p.Start) and start.command == "opencode run" and start.synthetic is True
    assert one(events, p.Reasoning).content == "The user wants the file list."
    ls, read = only(events, p.ToolResult)
    assert (ls.name, ls.status, ls.output, ls.duration_ms) == ("bash", "success", "README.md\nsrc\n", 650)
    assert (read.name, read.status, read.error) == ("read", "error", "File not found: /work/missing.txt")
    assert only(events, p.ToolCall)[0].arguments == {"command": "ls", "description": "List files"}
    first, second = only(events, p.Usage)
    assert (first.input_tokens, first.cached_tokens, first.output_tokens, first.reasoning_tokens) == (
        812 + 3000 + 200,
        3000,
        40 + 12,  # opencode's output leaves out the reasoning; canonical output counts it
        12,
    )
    assert first.cache_write_tokens == 200
    assert first.cost_usd == 0.0021 and second.cost_usd == 0.0009
    assert one(events, p.GenericEvent).data == ["external_directory"]  # permissions auto-rejected
    result = events[-1]
    assert isinstance(result, p.Result) and (result.ok, result.exit_code, result.turn_count) == (True, 0, 2)
    assert result.result == "The repository has README.md and src/." and result.tools_used == ["bash", "read"]
    assert result.usage.cost_usd == pytest.approx(0.003) and result.ts == "2025-12-29T19:21:02.700Z"
    assert not violations(events)


def test_a_session_error_fails_the_run() -> None:
    events = decode_fixture("opencode", "error.ndjson")
    error, result = events[-2:]
    assert isinstance(error, p.Error) and not error.recoverable and error.code == "RATE_LIMITED"
    assert isinstance(result, p.Result) and (result.ok, result.exit_code) == (False, 1)
    assert result.error.message == "Rate limit exceeded"  # type: ignore[union-attr]


def test_a_prompt_error_without_done_still_ends_the_run_failed() -> None:
    events = decode_fixture("opencode", "prompt-error.ndjson")
    error, result = events[-2:]
    assert (
        isinstance(error, p.Error)
        and error.code == "AUTH_EXPIRED"
        and error.message == "No API key found for anthropic"
    )
    assert isinstance(result, p.Result) and not result.ok


def test_older_versions_without_done_end_at_a_step_that_stopped() -> None:
    events = decode_fixture("opencode", "no-done.ndjson")
    result = events[-1]
    assert isinstance(result, p.Result) and result.ok and result.synthetic is p.UNSET and result.result == "4"
    cut = decode("opencode", fixture_lines("opencode", "no-done.ndjson")[:2])
    assert not only(cut, p.Result)  # no step ended: the run was cut off; the reader makes up the end


def test_error_then_more_work_is_reported_at_once_and_still_fails_the_run() -> None:
    """opencode goes on after a context overflow (it compacts the conversation), and still exits 1."""
    events = decode_fixture("opencode", "real-1.18.33-compacted.ndjson")
    errors = only(events, p.Error)
    assert [e.recoverable for e in errors] == [True]
    result = events[-1]
    assert isinstance(result, p.Result) and not result.ok and result.error.code == "CONTEXT_LIMIT"  # type: ignore[union-attr]


def test_detection() -> None:
    for name in ("run.ndjson", "error.ndjson", "prompt-error.ndjson"):
        assert detect_dialect(objects(fixture_lines("opencode", name))[:1]) == "opencode"


# -- encoder ------------------------------------------------------------------------------------


def test_encoder_reproduces_the_run() -> None:
    example = objects(fixture_lines("opencode", "run.ndjson"))
    made = objects(encode("opencode", decode_fixture("opencode", "run.ndjson")))
    kinds = [o["type"] for o in made]
    assert kinds == [o["type"] for o in example]
    for mine, theirs in zip(made, example, strict=False):
        assert mine["sessionID"] == theirs["sessionID"]
        if theirs["type"] in ("text", "reasoning"):
            assert {k: mine["part"][k] for k in ("id", "type", "text")} == {
                k: theirs["part"][k] for k in ("id", "type", "text")
            }
        if theirs["type"] == "tool_use":
            state, original = mine["part"]["state"], theirs["part"]["state"]
            assert (mine["part"]["callID"], mine["part"]["tool"]) == (
                theirs["part"]["callID"],
                theirs["part"]["tool"],
            )
            assert {k: state.get(k) for k in ("status", "input", "output", "error")} == {
                k: original.get(k) for k in ("status", "input", "output", "error")
            }
            assert (
                state["time"]["end"] - state["time"]["start"]
                == original["time"]["end"] - original["time"]["start"]
            )
        if theirs["type"] == "step_finish":
            tokens, original = mine["part"]["tokens"], theirs["part"]["tokens"]
            assert mine["part"]["cost"] == theirs["part"]["cost"]
            assert tokens == original
    assert made[-1]["rejected"] == []  # the rejected permissions travel as an event opencode has no line for


# -- round trip -------------------------------------------------------------------------------


def calls_at_their_results(events: list[p.BaseEvent]) -> list[p.BaseEvent]:
    """opencode prints a tool once it finished: its call moves to just before its result."""
    calls = {e.call_id: e for e in only(events, p.ToolCall)}
    out: list[p.BaseEvent] = []
    for event in events:
        if isinstance(event, p.ToolResult):
            out.append(calls[event.call_id])
        if not isinstance(event, p.ToolCall):
            out.append(event)
    return out


def keep(event: dict[str, Any]) -> dict[str, Any] | None:
    kind = event["type"]
    if kind == "start":
        return {"type": kind}
    if kind == "message":
        return event if event["role"] == "assistant" else None
    if kind in ("reasoning", "tool_call"):
        return event
    if kind == "tool_result":
        ok = event["status"] == "success"
        return {
            "type": kind,
            "call_id": event["call_id"],
            "ok": ok,
            "output": event.get("output"),
            "error": None if ok else event.get("error", event["status"]),
            "duration_ms": event["duration_ms"],
        }
    if kind == "usage":
        figures = {
            k: event[k] for k in ("input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens")
        }
        return (
            {"type": kind, **figures, "cost": event.get("cost_usd")}
            if any(figures.values()) or event.get("cost_usd")
            else None
        )
    if kind == "result":
        return {"type": kind, "ok": event["ok"]}
    return None


@settings(max_examples=60, deadline=None)
@given(full_sessions())
def test_round_trip_keeps_what_the_opencode_row_promises(events: list[p.BaseEvent]) -> None:
    back = round_trip("opencode", events)
    assert project(back, keep) == project(calls_at_their_results(events), keep)
    result, source = back[-1], events[-1]
    assert isinstance(result, p.Result) and isinstance(source, p.Result)
    assert result.exit_code == (0 if source.ok else 1) and result.tools_used == tool_names(events)
    messages = [e.content for e in events if isinstance(e, p.Message) and e.role == "assistant"]
    assert result.result == (messages[-1] if messages else p.UNSET)
    if not source.ok:
        expected = (
            source.error.message if source.error is not p.UNSET else f"the run failed ({source.subtype})"
        )
        assert result.error.message == expected  # type: ignore[union-attr]
    assert not violations(back)


# -- robustness ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "problem", "kinds"),
    [
        (
            b'{"type":"text","sessionID":"s","timestamp":1}',
            "field 'part' is missing",
            ["start", "log", "message"],
        ),
        (
            b'{"type":"step_finish","part":{"reason":"tool","tokens":{"input":"many","output":2}}}',
            "field 'input' must be an integer, not a string",
            ["start", "log", "usage"],
        ),
    ],
)
def test_informational_fields_of_the_wrong_kind_are_lost_not_the_line(
    line: bytes, problem: str, kinds: list[str]
) -> None:
    assert [e.type for e in assert_field_lost("opencode", line, problem)] == kinds


def test_step_figures_written_as_numbers_with_a_fraction_or_as_strings_are_read() -> None:
    line = b'{"type":"step_finish","part":{"reason":"tool","tokens":{"input":"12","output":2.6}}}'
    usage = one(decode("opencode", [line]), p.Usage)
    assert (usage.input_tokens, usage.output_tokens) == (12, 3)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (
            b'{"type":"tool_use","part":{"callID":"c","tool":"bash","state":{"status":"done"}}}',
            "field 'status' must be one of",
        ),
    ],
)
def test_unusable_lines_are_named_precisely(line: bytes, problem: str) -> None:
    with pytest.raises(MalformedEventError, match=problem):
        decode("opencode", [line])


@pytest.mark.parametrize(
    ("name", "exit_code", "code"),
    [
        ("real-1.18.33-tools.ndjson", 0, None),
        ("real-1.18.33-length.ndjson", 0, None),
        ("real-1.18.33/rejected.ndjson", 0, None),
        ("real-1.18.33-api-401.ndjson", 1, "AUTH_EXPIRED"),
        ("real-1.18.33-compacted.ndjson", 1, "CONTEXT_LIMIT"),
        ("real-1.18.33-dropped.ndjson", 1, "PROVIDER_ERROR"),
    ],
)
def test_what_opencode_1_18_printed_ends_as_it_exited(name: str, exit_code: int, code: str | None) -> None:
    """opencode 1.18 prints no ``done``: a step that stopped, hit the output limit or had a call rejected ends
    the run (nothing made up), and an API error is coded by its HTTP status."""
    result = decode_fixture("opencode", name)[-1]
    assert isinstance(result, p.Result) and result.synthetic is p.UNSET
    assert (result.exit_code, result.error.code if result.error else None) == (exit_code, code)


def test_a_run_s_start_and_duration_are_its_first_line_s_time_to_its_last() -> None:
    """opencode prints no start and no duration, but times every line: a run whose model call failed after
    57 s of retries (its steps print nothing else) starts at its first step, not at the error."""
    events = decode_fixture("opencode", "real-1.18.33-dropped.ndjson")
    start, result = one(events, p.Start), one(events, p.Result)
    assert (start.ts, result.ts) == ("2026-11-27T13:02:27.207Z", "2026-11-27T13:03:24.705Z")
    assert result.duration_ms == 57_498
