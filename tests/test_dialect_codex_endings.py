"""Codex ``exec --json``: usage figures of unexpected kinds, a run that stops on an error line, later turns."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from _dialect_kit import decode, line, one, only, violations
from agentstream import protocol as p
from agentstream.consumer import read

THREAD = line({"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a53"})
TURN = line({"type": "turn.started"})


def _completed(usage: object) -> bytes:
    return line({"type": "turn.completed", "usage": usage})


def _figures(usage: p.Usage) -> tuple[int, int, int]:
    return usage.input_tokens, usage.cached_tokens, usage.output_tokens


# -- usage: each figure read on its own ---------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "figures", "warned"),
    [
        ({"input_tokens": "100", "cached_input_tokens": 20, "output_tokens": 5}, (100, 20, 5), None),
        ({"input_tokens": 100, "cached_input_tokens": 20.7, "output_tokens": 5}, (100, 21, 5), None),
        ({"input_tokens": 100, "cached_input_tokens": None, "output_tokens": 5}, (100, 0, 5), None),
        (
            {"input_tokens": 100, "cached_input_tokens": 20, "output_tokens": "lots"},
            (100, 20, 0),
            "output_tokens",
        ),
        (
            {"input_tokens": 100, "cached_input_tokens": 20, "output_tokens": -5},
            (100, 20, 0),
            "output_tokens",
        ),
    ],
    ids=["numeric-string", "fraction", "null", "not-a-number", "negative"],
)
def test_one_odd_figure_loses_only_that_figure(
    usage: dict[str, Any], figures: tuple[int, int, int], warned: str | None
) -> None:
    events = decode("codex", [THREAD, TURN, _completed(usage)])
    assert _figures(one(events, p.Usage)) == figures
    result = one(events, p.Result)
    assert (result.usage.input_tokens, result.usage.cached_tokens, result.usage.output_tokens) == figures
    warnings = [event.message for event in only(events, p.Log)]
    if warned is None:
        assert not warnings
    else:
        (warning,) = warnings
        assert f"field '{warned}'" in warning and "usage" in warning
    assert not violations(events)


def test_a_figure_lost_in_one_total_counts_in_the_next_total_that_has_it() -> None:
    """The running total's unknown figure counts nothing in its turn; nothing is counted twice or dropped."""
    first = {"input_tokens": 100, "cached_input_tokens": 20, "output_tokens": 5}
    second = {"input_tokens": 200, "cached_input_tokens": None, "output_tokens": "lots"}
    third = {"input_tokens": 300, "cached_input_tokens": 50, "output_tokens": 9}
    events = decode(
        "codex", [THREAD, TURN, _completed(first), TURN, _completed(second), TURN, _completed(third)]
    )
    assert [_figures(usage) for usage in only(events, p.Usage)] == [(100, 20, 5), (100, 0, 0), (100, 30, 4)]
    totals = p.UsageTotals()
    for usage in only(events, p.Usage):
        totals.add(usage)
    assert (totals.input_tokens, totals.cached_tokens, totals.output_tokens) == (300, 50, 9)


def test_a_usage_with_no_count_at_all_is_lost_whole() -> None:
    events = decode("codex", [THREAD, TURN, _completed({"total": 3})])
    assert not only(events, p.Usage)
    assert "running total" in one(events, p.Log).message
    assert one(events, p.Result).ok


# -- a run that stops on an error line ----------------------------------------------------

UNAUTHORIZED = "unexpected status 401 Unauthorized: Missing bearer or basic authentication in header"


def test_an_error_line_that_ends_the_stream_is_the_cause_of_the_made_up_ending() -> None:
    """``exec`` stops after a 401 with no turn event: the error, not a cut stream, is why the run failed."""
    lines = [THREAD, TURN, line({"type": "error", "message": UNAUTHORIZED})]
    (fatal,) = only(decode("codex", lines), p.Error)
    assert not fatal.recoverable
    assert (fatal.code, fatal.message) == ("AUTH_EXPIRED", UNAUTHORIZED)
    events = list(read(b"\n".join(lines) + b"\n", "codex"))
    result = events[-1]
    assert isinstance(result, p.Result) and result.synthetic and not result.ok
    assert result.error is not p.UNSET and (result.error.code, result.error.message) == (
        "AUTH_EXPIRED",
        UNAUTHORIZED,
    )
    assert not violations(events)
    assert [e.type for e in events] == ["start", "error", "result"]


def test_the_error_line_that_turn_failed_repeats_is_one_fatal_error() -> None:
    """Codex writes the error that failed the turn as an ``error`` line, then again as ``turn.failed``'s."""
    failed = line({"type": "turn.failed", "error": {"message": UNAUTHORIZED}})
    events = decode("codex", [THREAD, TURN, line({"type": "error", "message": UNAUTHORIZED}), failed])
    assert [e.type for e in events] == ["start", "error", "result"]
    (fatal,) = only(events, p.Error)
    assert not fatal.recoverable and fatal.code == "AUTH_EXPIRED"
    assert not violations(events)


def test_the_error_line_before_turn_failed_is_its_report_whatever_its_words() -> None:
    """What a line decodes to does not hang on its wording: ``turn.failed``'s own message is the failure's."""
    failed = line({"type": "turn.failed", "error": {"message": "something else"}})
    events = decode("codex", [THREAD, TURN, line({"type": "error", "message": UNAUTHORIZED}), failed])
    (fatal,) = only(events, p.Error)
    assert (fatal.recoverable, fatal.message) == (False, "something else")


def test_a_retry_notice_before_other_lines_goes_out_as_recoverable() -> None:
    item = {"id": "item_0", "type": "agent_message", "text": "back"}
    notice = line({"type": "error", "message": "Reconnecting... 1/5 (stream disconnected)"})
    events = decode("codex", [THREAD, TURN, notice, line({"type": "item.completed", "item": item})])
    assert [e.type for e in events] == ["start", "error", "message"]
    assert one(events, p.Error).details == {"attempt": 1, "max_attempts": 5}


def test_a_retry_notice_reaches_a_live_reader_before_the_next_line_is_written() -> None:
    """Codex waits after a retry notice before it writes again (seconds, longer with each attempt): a reader of
    the pipe has the notice while Codex waits, not once the next line comes."""
    notice = line({"type": "error", "message": "Reconnecting... 1/5 (stream disconnected)"})
    item = line({"type": "item.completed", "item": {"id": "item_0", "type": "agent_message", "text": "back"}})
    read_fd, write_fd = os.pipe()
    notice_read = threading.Event()
    order: list[str] = []

    def codex_retrying() -> None:
        with os.fdopen(write_fd, "wb", buffering=0) as out:
            out.write(b"\n".join([THREAD, TURN, notice]) + b"\n")
            notice_read.wait(10)  # the back-off: the notice is read during it, or never will be
            order.append("next line written")
            out.write(item + b"\n" + _completed({"input_tokens": 3, "output_tokens": 1}) + b"\n")

    writer = threading.Thread(target=codex_retrying)
    writer.start()
    with os.fdopen(read_fd, "rb") as source:
        for event in read(source, "codex"):
            if isinstance(event, p.Error):
                order.append("notice read")
                notice_read.set()
    writer.join()
    assert order == ["notice read", "next line written"]


def test_a_turn_failed_without_an_error_names_the_error_line_before_it() -> None:
    events = decode(
        "codex",
        [THREAD, TURN, line({"type": "error", "message": UNAUTHORIZED}), line({"type": "turn.failed"})],
    )
    (fatal,) = only(events, p.Error)
    assert (fatal.recoverable, fatal.message) == (False, UNAUTHORIZED)
    result = one(events, p.Result)
    assert result.error is not p.UNSET and result.error.code == "AUTH_EXPIRED"


def test_an_error_line_followed_by_more_work_is_not_the_cause() -> None:
    item = {"id": "item_0", "type": "agent_message", "text": "still here"}
    lines = [
        THREAD,
        TURN,
        line({"type": "error", "message": UNAUTHORIZED}),
        line({"type": "item.completed", "item": item}),
    ]
    assert all(error.recoverable for error in only(decode("codex", lines), p.Error))


def test_a_retry_notice_at_the_end_is_not_the_cause() -> None:
    """Codex was still retrying: the stream was cut, which the reader says."""
    lines = [THREAD, TURN, line({"type": "error", "message": "Reconnecting... 2/5 (stream disconnected)"})]
    assert one(decode("codex", lines), p.Error).recoverable


def test_an_error_line_after_the_turn_ended_fails_nothing() -> None:
    usage = {"input_tokens": 1, "output_tokens": 1}
    lines = [THREAD, TURN, _completed(usage), line({"type": "error", "message": UNAUTHORIZED})]
    assert one(decode("codex", lines), p.Error).recoverable


# -- later turns ------------------------------------------------------------------------------


def test_a_turn_after_an_ended_one_gets_a_start_named_for_codex() -> None:
    """Without its own ``thread.started`` the next turn's start is made up, as ``codex exec``'s, not the input's name."""
    usage = {"input_tokens": 1, "output_tokens": 1}
    item = {"id": "item_1", "type": "agent_message", "text": "again"}
    lines = [
        THREAD,
        TURN,
        _completed(usage),
        TURN,
        line({"type": "item.completed", "item": item}),
        _completed(usage),
    ]
    events = list(read(b"\n".join(lines) + b"\n", label="session.jsonl"))
    starts = only(events, p.Start)
    assert [(start.command, start.synthetic is True) for start in starts] == [
        ("codex exec", False),
        ("codex exec", True),
    ]
    assert [e.type for e in events].count("result") == 2
    assert not violations(events)


def test_a_turn_started_opens_no_second_start_after_thread_started() -> None:
    events = decode("codex", [THREAD, TURN, _completed({"input_tokens": 1, "output_tokens": 1})])
    assert one(events, p.Start).synthetic is not True
