"""opencode ``run --format json``: every event takes the stream's own time (read as liberally as any number), and
a run appended after another is a turn of its own, with or without ``done``."""

from __future__ import annotations

from typing import Any

import pytest

from _dialect_kit import FIXTURES, decode, decode_fixture, line, one, only, violations
from agentstream import protocol as p
from agentstream.consumer import read

SESSION = "ses_x"
CLOCK = "2030-01-01T00:00:00.000Z"
"""The clock, made steady: no event of a stream that gives its own times should show it."""


def _line(kind: str, timestamp: object, session: str = SESSION, **fields: Any) -> bytes:
    return line({"type": kind, "timestamp": timestamp, "sessionID": session, **fields})


def _step_finish(timestamp: object, **tokens: object) -> bytes:
    part = {"id": "prt_5", "type": "step-finish", "reason": "stop", "cost": 0.01, "tokens": tokens}
    return _line("step_finish", timestamp, part=part)


@pytest.mark.parametrize(
    "timestamp",
    ["1761000003000", " 1761000003000", 1761000003000.4, "2025-10-20T22:40:03Z"],
    ids=["digits", "padded", "fraction", "iso"],
)
def test_a_timestamp_written_another_way_is_still_the_events_time(timestamp: object) -> None:
    usage = one(decode("opencode", [_step_finish(timestamp, input=10, output=2)]), p.Usage)
    assert usage.ts == "2025-10-20T22:40:03.000Z"


def test_a_warning_takes_its_lines_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(p, "now_ts", lambda: CLOCK)
    lines = [
        _line("step_start", 1761000000000, part={"id": "prt_1", "type": "step-start"}),
        _step_finish("1761000003000", input=10, output=2, cache={"read": 1, "write": "x"}),
        _line("done", 1761000004200, reason="idle", rejected="none"),
    ]
    events = list(read(b"\n".join(lines) + b"\n", "opencode"))
    warnings = [event for event in events if isinstance(event, p.Log)]
    assert [warning.ts for warning in warnings] == ["2025-10-20T22:40:03.000Z", "2025-10-20T22:40:04.200Z"]
    assert CLOCK not in {event.ts for event in events}


def test_lines_with_an_unreadable_time_and_the_ending_at_eof_take_the_last_time_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(p, "now_ts", lambda: CLOCK)
    text = {"id": "prt_2", "type": "text", "text": "Files: a, b"}
    lines = [
        _line("step_start", 1761000000000, part={"id": "prt_1", "type": "step-start"}),
        _line("text", "soon", part=text),
        _line(
            "error", None, error={"name": "APIError", "data": {"message": "Rate limit", "statusCode": 429}}
        ),
    ]
    events = list(read(b"\n".join(lines) + b"\n", "opencode"))
    assert [event.type for event in events] == ["start", "message", "error", "result"]
    assert {event.ts for event in events} == {"2025-10-20T22:40:00.000Z"}


def test_the_example_run_keeps_its_own_times() -> None:
    events = list(read(FIXTURES / "opencode" / "no-done.ndjson", "opencode"))
    assert all(event.ts.startswith("2025-12-29") for event in events)


def _error(timestamp: int) -> bytes:
    return _line("error", timestamp, error={"name": "APIError", "data": {"message": "boom"}})


def _done(timestamp: int) -> bytes:
    return _line("done", timestamp, reason="idle", rejected=[])


def test_a_run_after_done_opens_its_own_turn_and_ends_as_itself() -> None:
    """Two ``opencode run`` outputs in one stream: the second's start is made up as the first's (not named after the
    input), and the first run's error does not fail the second."""
    text = {"id": "prt_2", "type": "text", "text": "ok"}
    lines = [
        _error(1761000001000),
        _done(1761000002000),
        _line("text", 1761000003000, part=text),
        _done(1761000004000),
    ]
    events = list(read(b"\n".join(lines) + b"\n", label="runs.jsonl"))
    assert [event.type for event in events] == ["start", "error", "result", "start", "message", "result"]
    _, second = [event for event in events if isinstance(event, p.Start)]
    assert (second.command, second.synthetic, second.ts) == ("opencode run", True, "2025-10-20T22:40:03.000Z")
    failed, answered = [event for event in events if isinstance(event, p.Result)]
    assert not failed.ok and answered.ok and answered.result == "ok"
    assert answered.error is p.UNSET


def _results(events: list[p.AnyEvent]) -> list[tuple[bool, str | None, object, int]]:
    return [(r.ok, r.error.code if r.error else None, r.result, r.turn_count) for r in only(events, p.Result)]


def test_runs_of_one_session_appended_read_as_runs_of_their_own() -> None:
    """Three real ``opencode run`` outputs (1.18, no ``done``), each but the first with ``--continue``: an answer, a
    401, an answer. A run is over after a step that stopped, or an error; what opens a run after that is the next
    run's."""
    events = decode_fixture("opencode", "real-1.18.33-continued.ndjson")
    assert _results(events) == [
        (True, None, "First.", 1),
        (False, "AUTH_EXPIRED", p.UNSET, 0),
        (True, None, "Third.", 1),
    ]
    assert [(e.type, e.recoverable) for e in only(events, p.Error)] == [("error", False)]
    assert len(only(events, p.Start)) == 3 and not violations(events)


def _step(session: str, timestamp: int, text: str) -> list[bytes]:
    """One step of a run of ``session`` that answers ``text`` and stops."""
    finish = {"type": "step-finish", "reason": "stop", "tokens": {"input": 5, "output": 1}}
    return [
        _line("step_start", timestamp, session, part={"type": "step-start"}),
        _line("text", timestamp, session, part={"id": text, "text": text}),
        _line("step_finish", timestamp, session, part=finish),
    ]


def test_a_line_of_another_session_opens_the_next_run() -> None:
    """Each run prints its own session on every line: the first run's error fails only the first run, and a run whose
    output stopped mid-step (its process was stopped) ends there, made up, rather than running into the next."""
    failed = _line("error", 1761000001000, "ses_a", error={"name": "APIError"})
    cut = _step("ses_c", 1761000003000, "Cut")[:2]
    events = decode(
        "opencode", [failed, *_step("ses_b", 1761000002000, "B."), *cut, *_step("ses_d", 1761000004000, "D.")]
    )
    assert _results(events) == [
        (False, "PROVIDER_ERROR", p.UNSET, 0),
        (True, None, "B.", 1),
        (False, "STREAM_TRUNCATED", "Cut", 0),
        (True, None, "D.", 1),
    ]
    truncated = only(events, p.Result)[2]
    assert truncated.synthetic is True and truncated.ts == "2025-10-20T22:40:03.000Z"
    assert {event.session_id for event in events} == {"ses_a"}  # the stream is the first run's
    assert not violations(events)
