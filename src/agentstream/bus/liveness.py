"""Telling a run whose producer died from one that is only quiet.

A producer killed outright (SIGKILL, the OOM killer, a lost machine) never stores its
``result``, and nothing else would ever end its run: it would stay ``running`` and its
followers would wait forever. So a producer proves it is alive. Every append stamps the
run's ``alive`` time, and its publisher touches a quiet run every :func:`lease_seconds`.
A follower that sees a running run's ``alive`` stand still for :func:`lost_after_seconds`,
by its own clock (so the clocks of different hosts never matter), ends the run on the
bus as a worker ends a lost worker's: the open tool calls and delta runs closed, a fatal
``PRODUCER_LOST`` error and a ``result``. Every follower then prints that ending as the
run's own, and the bus refuses the producer's later events should it come back.

Runs of a job are left to the workers, which reclaim them with a retry; runs whose
``alive`` is 0 (an older producer) and runs on a backend that does not implement
:meth:`~agentstream.bus.Bus.touch` are never declared lost.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final

from agentstream.errors import AgentstreamError, ErrorCode

if TYPE_CHECKING:
    from agentstream.bus import Bus, RunInfo

__all__ = ["LOST_AFTER_ENV", "ProducerWatch", "lease_seconds", "lost_after_seconds"]

LOST_AFTER_ENV: Final = "AGENTSTREAM_BUS_LOST_AFTER"
DEFAULT_LOST_AFTER_S: Final = 30.0
LEASES_PER_LOSS: Final = 6
"""A producer touches its quiet run this many times within the time after which it counts as lost."""


def lost_after_seconds() -> float:
    """How long a running run's producer may show no sign of life: ``$AGENTSTREAM_BUS_LOST_AFTER`` (default 30).

    Producers and followers must agree on it (as workers on ``--idle-timeout``): producers touch at a
    sixth of it.
    """
    from agentstream.bus import bus_seconds

    return bus_seconds(LOST_AFTER_ENV, DEFAULT_LOST_AFTER_S)


def lease_seconds() -> float:
    """How often a producer touches its quiet run."""
    return lost_after_seconds() / LEASES_PER_LOSS


class ProducerWatch:
    """Watches one run's ``alive`` time by the watcher's own monotonic clock.

    Call :meth:`forget` after an outage of the bus: a producer cannot prove anything through
    it either, so the time it lasted is not held against it.
    """

    def __init__(self, lost_after: float | None = None) -> None:
        self.lost_after = lost_after if lost_after is not None else lost_after_seconds()
        self._seen: tuple[float, int, float] | None = None
        """The run's ``alive`` and ``last_seq`` when first seen so, and since when (monotonic)."""

    def forget(self) -> None:
        self._seen = None

    def is_lost(self, info: RunInfo) -> bool:
        """Whether ``info`` shows a running run whose producer did nothing for ``lost_after``."""
        if info.status != "running" or not info.alive or info.job_id is not None:
            self._seen = None
            return False
        now = time.monotonic()
        if self._seen is None or self._seen[:2] != (info.alive, info.last_seq):
            self._seen = (info.alive, info.last_seq, now)
            return False
        return now - self._seen[2] >= self.lost_after

    def end_if_lost(self, bus: Bus, info: RunInfo) -> bool:
        """End the run on the bus when its producer is lost; True if this call ended it.

        Only while the run still ends where it was watched: an event stored meanwhile is a sign of life. Only on
        a backend whose producers can touch their runs: on one without :meth:`Bus.touch`, a quiet run would look dead.
        """
        from agentstream.bus import Bus

        if type(bus).touch is Bus.touch or not self.is_lost(info):
            return False
        from agentstream.bus.queue import close_run

        error = AgentstreamError(
            f"the run's producer showed no sign of life for {self.lost_after:g}s (killed, or its machine "
            "or its connection to the bus lost); one of the run's followers ended it",
            code=ErrorCode.PRODUCER_LOST,
            fix=f"run the prompt again; producers and followers must agree on ${LOST_AFTER_ENV}",
        )
        self._seen = None
        return close_run(
            bus, info.run_id, error, subtype="producer_lost", command=info.command, only_at=info.last_seq + 1
        )
