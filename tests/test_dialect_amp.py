"""Amp ``--stream-json``: Claude-compatible lines with ``T-`` sessions; detection, decoding, encoding, round trips."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings

from _dialect_kit import (
    FIXTURES,
    decode,
    decode_fixture,
    encode,
    failed_call_text,
    fixture_lines,
    line,
    objects,
    project,
    round_trip,
    tool_names,
    violations,
)
from _strategies import full_sessions
from agentstream import protocol as p
from agentstream.consumer import read
from agentstream.dialects import detect_dialect

FIXTURE = FIXTURES / "amp" / "stream-json.ndjson"


def test_the_documented_example_decodes() -> None:
    events = decode_fixture("amp", "stream-json.ndjson")
    start, message, result = events
    assert isinstance(start, p.Start) and start.command == "amp" and start.session_id == "T-2775dc92-…"
    assert (start.cwd, start.tools, start.model) == ("/Users/mrnugget/work/amp", ["oracle", "..."], p.UNSET)
    assert isinstance(message, p.Message) and message.content == "2 + 2 equals 4."
    assert isinstance(result, p.Result)
    assert (result.ok, result.duration_ms, result.turn_count, result.result) == (
        True,
        2906,
        1,
        "2 + 2 equals 4.",
    )


def test_the_t_session_id_tells_amp_from_claude() -> None:
    assert detect_dialect(objects(fixture_lines("amp", "stream-json.ndjson"))[:1]) == "amp"
    events = list(read(FIXTURE))
    assert events[0].command == "amp" and not violations(events)  # type: ignore[union-attr]
    # Without a T- id Amp's init looks like Claude's: Claude wins and --from amp forces Amp.
    bare = objects(fixture_lines("amp", "stream-json.ndjson"))[0] | {"session_id": "2775dc92"}
    assert detect_dialect([bare]) == "claude"


def test_encoder_reproduces_the_documented_lines_field_for_field() -> None:
    example = objects(fixture_lines("amp", "stream-json.ndjson"))
    made = objects(encode("amp", decode_fixture("amp", "stream-json.ndjson")))
    assert made[0] == example[0]
    assistant = {**made[1], "message": {**made[1]["message"], "usage": {}}}  # usage is not per message here
    assert assistant == {**example[1], "session_id": made[1]["session_id"]}
    assert {k: v for k, v in made[2].items() if k != "session_id"} == {
        k: v for k, v in example[2].items() if k != "session_id"
    }


def test_amp_lines_carry_no_claude_only_fields() -> None:
    events = [
        p.Start(command="x", cwd="/w", model="m", session_id="s1"),
        p.MessageDelta(message_id="m1", content="a", session_id="s1"),
        p.Message(message_id="m1", role="assistant", content="ab", session_id="s1"),
        p.Usage(model="m", input_tokens=1, session_id="s1"),
        p.Status(status="busy", session_id="s1"),
        p.Result(ok=True, subtype="success", exit_code=0, session_id="s1"),
    ]
    made = objects(encode("amp", events))
    assert [o["type"] for o in made] == ["system", "assistant", "result"]
    assert {o["session_id"] for o in made} == {"T-s1"} and "uuid" not in made[1]
    assert "duration_api_ms" not in made[2] and "usage" not in made[2]


def keep(event: dict[str, Any]) -> dict[str, Any] | None:
    """The amp row: Claude's minus deltas, usage, status, events, retries, message ids and the model."""
    kind = event["type"]
    if kind == "start":
        return {key: event.get(key) for key in ("type", "cwd", "tools")}
    if kind == "message":
        if event["role"] not in ("user", "assistant") or (
            event["role"] == "assistant" and not event["content"]
        ):
            return None  # an empty answer is written as no line (as in Claude's encoder, an empty block never is)
        return {"type": kind, "role": event["role"], "content": event["content"]}
    if kind == "reasoning":
        return {"type": kind, "content": event["content"]} if event["content"] else None
    if kind == "tool_call":
        return event
    if kind == "tool_result":
        ok = event["status"] == "success"
        return {
            "type": kind,
            "call_id": event["call_id"],
            "ok": ok,
            "text": event.get("output", "") if ok else failed_call_text(event),
        }
    if kind == "result":
        return {key: event.get(key) for key in ("type", "ok", "duration_ms", "turn_count", "result")}
    return None


@settings(max_examples=40, deadline=None)
@given(full_sessions())
def test_round_trip_keeps_what_the_amp_row_promises(events: list[p.BaseEvent]) -> None:
    back = round_trip("amp", events)
    assert project(back, keep) == project(events, keep)
    result = back[-1]
    assert isinstance(result, p.Result) and result.tools_used == tool_names(events) and not violations(back)


@pytest.mark.parametrize(
    ("subtype", "code"), [("error_during_execution", "UNKNOWN"), ("error_max_turns", "MAX_TURNS")]
)
def test_an_error_result_keeps_the_cause_amp_gives_in_error(subtype: str, code: str) -> None:
    """Amp's error results name their cause in ``error`` (Claude Code's list theirs in ``errors``)."""
    failed = {
        "type": "result",
        "subtype": subtype,
        "duration_ms": 2906,
        "is_error": True,
        "num_turns": 2,
        "error": "Tool execution failed: the sandbox refused the command",
        "session_id": "T-5f0c8a2e-1b7d-4e8a-9c0f-3a1b2c3d4e5f",
    }
    events = decode("amp", [line(failed)])
    error, result = events[-2], events[-1]
    assert isinstance(error, p.Error) and error.message == failed["error"] and not error.recoverable
    assert (result.ok, result.error.code, result.error.message) == (False, code, failed["error"])
    if code != "UNKNOWN":  # a subtype that names its cause says so, in the dialect's own name
        bare = decode("amp", [line({key: value for key, value in failed.items() if key != "error"})])[-1]
        assert bare.error.message.startswith(f"amp ended with {subtype}")


def test_result_totals_keep_the_cache_writes() -> None:
    usage = {
        "input_tokens": 12,
        "cache_creation_input_tokens": 367,
        "cache_read_input_tokens": 9000,
        "output_tokens": 80,
    }
    result = {"type": "result", "subtype": "success", "is_error": False, "num_turns": 1, "result": "ok"}
    totals = decode("amp", [line({**result, "usage": usage, "session_id": "T-1"})])[-1].usage
    assert (totals.input_tokens, totals.cached_tokens, totals.cache_write_tokens) == (
        12 + 367 + 9000,
        9000,
        367,
    )


def test_a_stream_without_init_goes_on_under_the_session_its_lines_name() -> None:
    session = "T-5f0c8a2e-1b7d-4e8a-9c0f-3a1b2c3d4e5f"
    lines = [
        line(
            {
                "type": "assistant",
                "message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "hi"}],
                    "stop_reason": "end_turn",
                },
                "parent_tool_use_id": None,
                "session_id": session,
            }
        ),
        line(
            {"type": "result", "subtype": "success", "is_error": False, "num_turns": 1, "session_id": session}
        ),
    ]
    for dialect in ("amp", "claude"):
        assert {event.session_id for event in decode(dialect, lines)} == {session}
