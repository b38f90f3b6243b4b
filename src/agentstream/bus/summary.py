"""What ``agentstream runs`` and ``agentstream serve`` say about a run: its row and the envelopes.

A row is the bus's :class:`~agentstream.bus.RunInfo` (times as RFC 3339) plus
what only the events know: ``duration_ms`` (the ``result``'s own, else the time
since the run was created, live while it runs) and the token ``usage`` with
``tokens`` (input + output) and ``cost_usd`` — from the ``result`` of a finished
run, summed from the ``usage`` events of a live one. Both commands build their
output here, so the CLI and the HTTP API print the same envelope.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from agentstream import protocol as p
from agentstream.actions import follow_action, runs_action, submit_action, watch_action
from agentstream.envelope import Envelope, ok_envelope
from agentstream.errors import AgentstreamError, ErrorCode

if TYPE_CHECKING:
    from agentstream.bus import Bus, RunInfo

__all__ = ["RUNS_COMMAND", "RunNotFound", "known_run", "run_envelope", "run_row", "runs_envelope"]

RUNS_COMMAND = "agentstream runs"
_PAGE = 1000


class RunNotFound(AgentstreamError):
    """No run with that id on this bus."""

    code = ErrorCode.RUN_NOT_FOUND


def runs_envelope(bus: Bus | None, *, statuses: Sequence[str] = (), limit: int = 20) -> Envelope:
    """The runs, newest first, as ``runs`` prints them (``None``: a bus that does not exist yet, so none)."""
    listed = (
        [run_row(bus, info) for info in bus.list_runs(statuses=statuses, limit=limit)]
        if bus is not None
        else []
    )
    actions = [follow_action(listed[0]["run_id"])] if listed else [submit_action()]
    actions += [runs_action(), watch_action()]
    return ok_envelope(RUNS_COMMAND, {"runs": listed, "count": len(listed)}, actions)


def known_run(bus: Bus, run_id: str) -> RunInfo:
    """The run's metadata, or :class:`RunNotFound`."""
    info = bus.get_run(run_id)
    if info is None:
        raise RunNotFound(
            f"no run {run_id!r} on this bus", fix="list runs with 'agentstream runs' (same --bus)"
        )
    return info


def run_envelope(bus: Bus, run_id: str) -> Envelope:
    """One run's row; :class:`RunNotFound` when the bus does not know it."""
    info = known_run(bus, run_id)
    return ok_envelope(
        f"{RUNS_COMMAND} {run_id}", {"run": run_row(bus, info)}, [follow_action(run_id), runs_action()]
    )


def run_row(bus: Bus, info: RunInfo) -> dict[str, Any]:
    row: dict[str, Any] = msgspec.to_builtins(info)
    for key in ("created", "updated", "alive"):
        row[key] = _rfc3339(row[key]) if row.get(key) else None
    usage, duration_ms = _usage_and_duration(bus, info)
    row["duration_ms"] = duration_ms
    row["usage"] = msgspec.to_builtins(usage)
    row["tokens"] = usage.input_tokens + usage.output_tokens
    row["cost_usd"] = None if usage.cost_usd is p.UNSET else usage.cost_usd
    return row


def _usage_and_duration(bus: Bus, info: RunInfo) -> tuple[p.UsageTotals, int]:
    elapsed_ms = int(((info.updated if info.terminal else time.time()) - info.created) * 1000)
    if info.last_seq < 0:
        return p.UsageTotals(), max(elapsed_ms, 0) if info.status != "queued" else 0
    if info.terminal:
        last = bus.read(info.run_id, info.last_seq, limit=1)
        if last and last[0].type == "result":
            result = p.decode(last[0].line)
            if isinstance(result, p.Result):
                return result.usage, result.duration_ms or max(elapsed_ms, 0)
    return _summed_usage(bus, info.run_id), max(elapsed_ms, 0)


def _summed_usage(bus: Bus, run_id: str) -> p.UsageTotals:
    """The totals of a run's ``usage`` events so far (a live run has no ``result`` yet)."""
    totals = p.UsageTotals()
    next_seq = 0
    while True:
        page = bus.read(run_id, next_seq, limit=_PAGE)
        for record in page:
            if record.type == "usage":
                event = p.decode(record.line)
                if isinstance(event, p.Usage):
                    totals.add(event)
        if len(page) < _PAGE:
            return totals
        next_seq = page[-1].seq + 1


def _rfc3339(unix: float) -> str:
    whole = int(unix)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((unix - whole) * 1000):03d}Z"
