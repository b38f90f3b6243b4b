"""What ``agentstream runs`` and ``agentstream serve`` say about a run: its row and the envelopes.

A row is the bus's :class:`~agentstream.bus.RunInfo` (times as RFC 3339) plus
what only the events know: ``duration_ms`` (the ``result``'s own, else the time
since the run was created, live while it runs) and the token ``usage`` with
``tokens`` (input + output) and ``cost_usd`` — from the ``result`` of a finished
run, summed from the ``usage`` events of a live one. Both commands build their
output here, so the CLI and the HTTP API print the same envelope.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec

from agentstream import protocol as p
from agentstream.actions import follow_action, runs_action, submit_action, watch_action
from agentstream.bus.liveness import ProducerWatch
from agentstream.envelope import Envelope, ok_envelope
from agentstream.errors import AgentstreamError, ErrorCode

if TYPE_CHECKING:
    from agentstream.bus import Bus, RunInfo

__all__ = [
    "RUNS_COMMAND",
    "LiveRuns",
    "RunNotFound",
    "known_run",
    "run_envelope",
    "run_row",
    "runs_envelope",
]

RUNS_COMMAND = "agentstream runs"
_PAGE = 1000


class RunNotFound(AgentstreamError):
    """No run with that id on this bus."""

    code = ErrorCode.RUN_NOT_FOUND


class LiveRuns:
    """What ``serve`` keeps about live runs from one row of a run to the next: its usage so far, and a watch
    on its producer.

    A live run's usage is the sum of its ``usage`` events, and summing them anew
    reads the whole run — every tool output in it — each time its row is built.
    ``serve`` builds rows every second or two for every page open on the run list,
    so it keeps the totals and how far they go, and reads only the events since.

    A run whose producer was killed outright stays ``running`` until a follower sees it
    lost (:mod:`agentstream.bus.liveness`); a page showing the list follows no run, so
    each row of a running run is also a look at its producer, and a run lost for
    ``$AGENTSTREAM_BUS_LOST_AFTER`` seconds of them is ended as a follower ends it.
    """

    MAX_RUNS: Final = 1000
    """Runs remembered; the least recently asked for is dropped first (and summed anew if asked again)."""

    def __init__(self, lost_after: float | None = None) -> None:
        self._known: dict[tuple[str, float], tuple[int, p.UsageTotals]] = {}
        self._watches: dict[str, ProducerWatch] = {}
        self._lost_after = lost_after
        self._lock = threading.Lock()

    def observed(self, bus: Bus, info: RunInfo) -> RunInfo:
        """``info``, or the run as it is now if its producer turned out lost and this ended it."""
        with self._lock:
            watch = self._watches.pop(info.run_id, None)
            if info.status == "running":
                self._watches[info.run_id] = watch = watch or ProducerWatch(self._lost_after)
                _forget_the_oldest(self._watches, self.MAX_RUNS)
        if watch is None or not watch.end_if_lost(bus, info):
            return info
        return bus.get_run(info.run_id) or info

    def totals(self, bus: Bus, info: RunInfo) -> p.UsageTotals:
        """The run's usage so far, reading only the events after those already summed."""
        key = (info.run_id, info.created)  # a run id used again (its old run expired) starts over
        with self._lock:
            next_seq, known = self._known.pop(key, (0, p.UsageTotals()))
        totals = msgspec.structs.replace(known)  # a copy: another thread may be adding to the same run
        next_seq = _add_usage(bus, info.run_id, next_seq, totals)
        with self._lock:
            self._known[key] = (next_seq, totals)
            _forget_the_oldest(self._known, self.MAX_RUNS)
        return totals


def _forget_the_oldest(remembered: dict[Any, Any], keep: int) -> None:
    """Drop the entries put in first (a dict keeps that order) until ``keep`` are left."""
    while len(remembered) > keep:
        del remembered[next(iter(remembered))]


def runs_envelope(
    bus: Bus | None, *, statuses: Sequence[str] = (), limit: int = 20, live: LiveRuns | None = None
) -> Envelope:
    """The runs, newest first, as ``runs`` prints them (``None``: a bus that does not exist yet, so none)."""
    listed = (
        [run_row(bus, info, live) for info in bus.list_runs(statuses=statuses, limit=limit)]
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


def run_envelope(bus: Bus, run_id: str, live: LiveRuns | None = None) -> Envelope:
    """One run's row; :class:`RunNotFound` when the bus does not know it."""
    info = known_run(bus, run_id)
    return ok_envelope(
        f"{RUNS_COMMAND} {run_id}",
        {"run": run_row(bus, info, live)},
        [follow_action(run_id), runs_action()],
    )


def run_row(bus: Bus, info: RunInfo, live: LiveRuns | None = None) -> dict[str, Any]:
    """The run's row; with ``live``, a live run's usage is summed on from where it was last time, and a run
    whose producer is lost is ended (:class:`LiveRuns`)."""
    if live is not None:
        info = live.observed(bus, info)
    row: dict[str, Any] = msgspec.to_builtins(info)
    for key in ("created", "updated", "alive"):
        row[key] = _rfc3339(row[key]) if row.get(key) else None
    usage, duration_ms = _usage_and_duration(bus, info, live)
    row["duration_ms"] = duration_ms
    row["usage"] = msgspec.to_builtins(usage)
    row["tokens"] = usage.input_tokens + usage.output_tokens
    row["cost_usd"] = None if usage.cost_usd is p.UNSET else usage.cost_usd
    return row


def _usage_and_duration(bus: Bus, info: RunInfo, live: LiveRuns | None) -> tuple[p.UsageTotals, int]:
    elapsed_ms = int(((info.updated if info.terminal else time.time()) - info.created) * 1000)
    if info.last_seq < 0:
        return p.UsageTotals(), max(elapsed_ms, 0) if info.status != "queued" else 0
    if info.terminal:
        last = bus.read(info.run_id, info.last_seq, limit=1)
        if last and last[0].type == "result":
            result = p.decode(last[0].line)
            if isinstance(result, p.Result):
                return result.usage, result.duration_ms or max(elapsed_ms, 0)
    if live is not None:
        return live.totals(bus, info), max(elapsed_ms, 0)
    totals = p.UsageTotals()
    _add_usage(bus, info.run_id, 0, totals)
    return totals, max(elapsed_ms, 0)


def _add_usage(bus: Bus, run_id: str, next_seq: int, totals: p.UsageTotals) -> int:
    """Add the run's ``usage`` events from ``next_seq`` to ``totals`` (a live run has no ``result`` yet);
    the seq after the last event read."""
    while True:
        page = bus.read(run_id, next_seq, limit=_PAGE)
        for record in page:
            if record.type == "usage":
                event = p.decode(record.line)
                if isinstance(event, p.Usage):
                    totals.add(event)
        if page:
            next_seq = page[-1].seq + 1
        if len(page) < _PAGE:
            return next_seq


def _rfc3339(unix: float) -> str:
    whole = int(unix)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((unix - whole) * 1000):03d}Z"
