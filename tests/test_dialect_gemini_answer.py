"""Gemini CLI stream-json: the result's text is the turn's answer, and events without a time take the stream's."""

from __future__ import annotations

from typing import Any

import pytest

from _dialect_kit import line, seed_lines
from agentstream import protocol as p
from agentstream.consumer import read
from agentstream.dialects import get_dialect

INIT, USER, DELTA_1, DELTA_2, TOOL_USE, TOOL_OK, TOOL_ERROR, WARNING, RESULT_OK, RESULT_ERROR = range(10)
CLOCK = "2030-01-01T00:00:00.000Z"
"""The clock, made steady: no event of a stream that gives its own times should show it."""


def _seed(*indexes: int) -> list[bytes]:
    lines = seed_lines("gemini")
    return [lines[index] for index in indexes]


def _both_paths(lines: list[bytes], monkeypatch: pytest.MonkeyPatch) -> list[list[p.AnyEvent]]:
    """The reader's events with the typed decoder and without it (the careful path alone)."""
    monkeypatch.setattr(p, "now_ts", lambda: CLOCK)
    data = b"\n".join(lines) + b"\n"
    typed = list(read(data, "gemini"))
    with monkeypatch.context() as careful_only:
        careful_only.setattr(type(get_dialect("gemini").decoder()), "typed_lines", None)
        careful = list(read(data, "gemini"))
    return [typed, careful]


def _results(events: list[p.AnyEvent]) -> list[p.Result]:
    return [event for event in events if isinstance(event, p.Result)]


def test_the_result_carries_the_turns_assistant_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemini's stream never repeats the answer: it is the assistant's text of the turn, joined, as ``-o json``'s
    ``response`` is."""
    lines = _seed(INIT, USER, DELTA_1, DELTA_2, WARNING, RESULT_OK)
    for events in _both_paths(lines, monkeypatch):
        (result,) = _results(events)
        assert result.ok and result.result == "I am doing well."


def test_the_answer_is_the_text_after_the_last_tool_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemini CLI's ``response`` is the last model reply's text: what led up to a tool call is not part of it."""
    after = line(
        {
            "type": "message",
            "timestamp": "2023-10-27T10:00:05.500Z",
            "role": "assistant",
            "content": "Done.",
            "delta": True,
        }
    )
    lines = [*_seed(INIT, USER, DELTA_1, TOOL_USE, TOOL_OK), after, *_seed(RESULT_OK)]
    for events in _both_paths(lines, monkeypatch):
        (result,) = _results(events)
        assert result.result == "Done."
    for events in _both_paths(_seed(INIT, USER, DELTA_1, TOOL_USE, TOOL_OK, RESULT_OK), monkeypatch):
        (result,) = _results(events)
        assert result.result is p.UNSET


def test_each_turn_answers_with_its_own_text(monkeypatch: pytest.MonkeyPatch) -> None:
    first = _seed(INIT, USER, DELTA_1, DELTA_2, RESULT_OK)
    second = _seed(INIT, USER, TOOL_USE, TOOL_OK, RESULT_ERROR)
    for events in _both_paths(first + second, monkeypatch):
        answered, failed = _results(events)
        assert answered.result == "I am doing well."
        assert not failed.ok and failed.result is p.UNSET  # no assistant text in that turn


def test_a_warning_about_a_lost_field_has_its_lines_time(monkeypatch: pytest.MonkeyPatch) -> None:
    odd = line(
        {
            "type": "tool_use",
            "timestamp": "2023-10-27T10:00:03.000Z",
            "tool_name": "calculator",
            "tool_id": "call_1",
            "parameters": "2+2",
        }
    )
    lines = [*_seed(INIT, USER), odd, *_seed(TOOL_OK, RESULT_OK)]
    for events in _both_paths(lines, monkeypatch):
        (warning,) = [event for event in events if isinstance(event, p.Log)]
        assert warning.ts == "2023-10-27T10:00:03.000Z"
        assert CLOCK not in {event.ts for event in events}


def test_a_line_without_a_time_takes_the_last_one_the_stream_gave(monkeypatch: pytest.MonkeyPatch) -> None:
    untimed: dict[str, Any] = {"type": "result", "status": "success"}
    lines = [*_seed(INIT, USER, DELTA_1, TOOL_USE, TOOL_OK), line(untimed)]
    for events in _both_paths(lines, monkeypatch):
        assert events[-1].ts == "2023-10-27T10:00:04.000Z"
        assert CLOCK not in {event.ts for event in events}
