"""Endings made up for a stream that did not end itself: close what is open, then the error and the result.

Every party that ends someone else's stream — the reader at end of input, a
wrapped child that died, a follower of a dead run, a worker reclaiming a lost
job, a dialect encoder whose input stopped short — builds that ending here, so
each one is whole: every open tool call gets a ``tool_result``, every open delta
run its complete event, then the fatal ``error`` and the ``result``. The events
come unstamped and marked ``synthetic``; the caller stamps them into its stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from agentstream import protocol as p
from agentstream.errors import MalformedEventError
from agentstream.transcript import Tally

__all__ = ["add_line", "closing_events", "ending_events", "process_exit_code", "tally_of"]

_TALLIED = frozenset(
    {"tool_call", "tool_result", "message_delta", "message", "reasoning_delta", "reasoning", "usage"}
)
"""The event types a tally counts: stored lines of other types need not be decoded."""


class _Closer(msgspec.Struct):
    """A stored ``tool_result`` or ``reasoning`` line as a tally reads it: the id of what it closes, nothing more.

    Their text (a tool's output may run to hundreds of MiB) is skipped by the parser, never built.
    """

    call_id: str = ""
    reasoning_id: str = ""


_CLOSER = msgspec.json.Decoder(_Closer)


def add_line(tally: Tally, kind: str, line: bytes) -> None:
    """Fold one stored canonical line (of type ``kind``) into a tally; lines it does not count are not decoded."""
    if kind == "tool_result" or kind == "reasoning":
        try:
            closer = _CLOSER.decode(line)
        except msgspec.DecodeError:
            return  # a bad stored line counts for nothing
        if kind == "tool_result":
            tally.open_calls.pop(closer.call_id, None)
        else:
            tally.open_runs.pop((True, closer.reasoning_id), None)
    elif kind in _TALLIED:
        try:
            tally.add(p.decode(line))
        except MalformedEventError:
            pass  # a bad stored line counts for nothing


def closing_events(tally: Tally, reason: str, *, status: p.ToolStatus = "cancelled") -> list[p.Event]:
    """A ``tool_result`` for each open call and a complete event for each open delta run (the tally forgets them)."""
    out: list[p.Event] = []
    for call_id, name in tally.open_calls.items():
        out.append(p.ToolResult(call_id=call_id, name=name, status=status, error=reason, synthetic=True))
    for (reasoning, run_id), run in tally.open_runs.items():
        if reasoning:
            out.append(p.Reasoning(reasoning_id=run_id, content=run.text, synthetic=True))
        else:
            out.append(p.Message(message_id=run_id, role=run.role, content=run.text, synthetic=True))
    tally.open_calls.clear()
    tally.open_runs.clear()
    return out


def ending_events(
    tally: Tally,
    error: p.ErrorInfo,
    *,
    exit_code: int,
    subtype: str = "error",
    details: Any = p.UNSET,
    command: str | None = None,
    duration_ms: int = 0,
    next_actions: Sequence[p.NextAction] = (),
    error_sent: bool = False,
    tool_status: p.ToolStatus = "cancelled",
) -> list[p.Event]:
    """The whole made-up ending: closing events, the fatal ``error`` (unless ``error_sent``), the ``result``.

    ``error_sent`` is for a stream whose last event already is the fatal error
    this ending reports: nothing may come between it and the result, so the
    caller must have closed open work before that error.
    """
    reason = f"the run ended before this tool's result: {error.message}"
    out = [] if error_sent else closing_events(tally, reason, status=tool_status)
    if not error_sent:
        out.append(
            p.Error(
                code=error.code,
                message=error.message,
                recoverable=False,
                fix=error.fix,
                details=details,
                synthetic=True,
            )
        )
    out.append(
        p.Result(
            ok=False,
            subtype=subtype,
            exit_code=process_exit_code(exit_code, ok=False),
            duration_ms=max(0, int(duration_ms)),
            turn_count=tally.turn_count,
            tools_used=list(tally.tools_used),
            usage=tally.usage,
            result=tally.last_text if tally.last_text is not None else p.UNSET,
            error=error,
            command=command if command is not None else p.UNSET,
            next_actions=list(next_actions),
            synthetic=True,
        )
    )
    return out


def process_exit_code(exit_code: int, *, ok: bool) -> int:
    """The exit status a result stands for: 0–255, and never 0 for a failure (256 would wrap to 0)."""
    if ok and exit_code == 0:
        return 0
    return exit_code if 0 < exit_code <= 255 else 1


def tally_of(lines: Iterable[tuple[str, bytes]]) -> Tally:
    """A tally of stored lines, given as (type, line) pairs (to end a stream read back from storage)."""
    tally = Tally(for_ending=True)
    for kind, line in lines:
        add_line(tally, kind, line)
    return tally
