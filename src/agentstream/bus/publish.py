"""Publishing a producer's run to the bus without slowing it down or breaking it.

``exec`` (and ``send``, ``logs --publish``) call :func:`attach_publisher`. The observer registered on the :class:`Stream` only
encodes the event and hands it to a background thread through an unbounded
lock-free queue (a few microseconds); the thread appends in batches. On the
``result`` event the observer waits (bounded by ``AGENTSTREAM_BUS_FLUSH_TIMEOUT``,
default 10 s) until everything up to it is stored, so the end of a run is never
lost to an early exit. A bus that cannot be reached at all is given up after its
connect timeout (``AGENTSTREAM_BUS_CONNECT_TIMEOUT``, default 2 s); an outage of a
bus that was reached is retried in the background with backoff for up to
``AGENTSTREAM_BUS_RETRY`` seconds (default 30). While the run is quiet the thread
touches it every lease, so its followers can tell it from a dead producer's
(:mod:`agentstream.bus.liveness`). A run that someone else ended on the bus
(cancelled, ended for a lost worker or producer) is closed, and the bus refuses
its producer's later events. Each of these costs one warning line on stderr and
never an exception in the producer; once given up, the rest of the run is not
published (and costs nothing more). A malformed URL is refused up front
(:class:`~agentstream.errors.UsageError`, exit 2).
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from agentstream import protocol as p
from agentstream._signals import start_thread
from agentstream.bus import Record

if TYPE_CHECKING:
    from agentstream.bus import Bus
    from agentstream.errors import AgentstreamError
    from agentstream.stream import Stream

__all__ = ["Publisher", "attach_publisher"]

MAX_PENDING: Final = 65536
"""Events buffered while the bus is slow or down; beyond this, events are dropped (and followers see a gap)."""
BATCH: Final = 512


def attach_publisher(stream: Stream, bus_url: str | None, *, enabled: bool = True) -> Callable[[], None]:
    """Publish every event of ``stream`` under run id ``stream.session_id``; return the close function.

    Call before ``stream.start()`` so ``start`` is published too. ``bus_url`` None
    means the default bus (environment, then embedded). Disabled, this does
    nothing and returns a no-op.
    """
    if not enabled:
        return _noop
    from agentstream.bus import check_bus_url

    check_bus_url(bus_url)  # a malformed URL is a usage error before anything runs
    publisher = Publisher(bus_url, stream.session_id)
    stream.observe(publisher.on_event)
    return publisher


def _noop() -> None:
    return None


class Publisher:
    """Hands a run's events to a background thread that appends them to the bus in batches.

    Calling the instance closes it: flush (bounded), stop the thread, close the bus.
    ``error`` holds the last failure, ``dropped`` how many events never reached the bus.
    """

    def __init__(
        self,
        url: str | None,
        run_id: str,
        *,
        flush_timeout: float | None = None,
        retry_for: float | None = None,
    ) -> None:
        from agentstream.bus import DEFAULT_RETRY_S, REACHED_ENV, RETRY_ENV, bus_seconds, connect_timeout
        from agentstream.bus.liveness import lease_seconds

        self.url = url
        self.run_id = run_id
        self.producer = os.urandom(8).hex()
        """This publisher's token on the bus (:meth:`~agentstream.bus.Bus.append_from`): the same through every
        retry and reconnection, so resuming after an outage is this producer going on, never another one."""
        self.flush_timeout = (
            flush_timeout if flush_timeout is not None else _env_seconds("FLUSH_TIMEOUT", 10.0)
        )
        self.retry_for = retry_for if retry_for is not None else bus_seconds(RETRY_ENV, DEFAULT_RETRY_S)
        self.connect_for = connect_timeout(url)
        self._lease = lease_seconds()
        self._reached = os.environ.get(REACHED_ENV, "").strip() == "1"
        """Whether the bus is known to be up (it took a batch, or the worker running this job reached it): an
        outage is retried, a bus never reached is not waited for."""
        self._given_up = False
        self.error: BaseException | None = None
        self.dropped = 0
        self.stored = 0
        self._queue: queue.SimpleQueue[Record | threading.Event | None] = queue.SimpleQueue()
        self._warned = False
        self._closed = False
        self._thread = start_thread(threading.Thread(target=self._run, name=f"publish-{run_id}", daemon=True))

    # -- producer side (hot path) -------------------------------------------

    def on_event(self, event: p.Event) -> None:
        """The Stream observer: encode and enqueue; on ``result``, wait until stored."""
        if self._closed:
            return
        if self._queue.qsize() >= MAX_PENDING:
            self._drop(1, "too many events waiting for the bus")
            return
        self._queue.put(Record(event.seq, event.type, p.encode(event)))
        if isinstance(event, p.Result):
            self.flush()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event enqueued so far is stored or given up; False on timeout."""
        if not self._thread.is_alive():
            return False
        done = threading.Event()
        self._queue.put(done)
        return done.wait(self.flush_timeout if timeout is None else timeout)

    def __call__(self) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        if not self.flush() and self._thread.is_alive():
            self._warn(f"the bus did not take the run's events within {self.flush_timeout:g}s; not published")
        self._closed = True
        self._queue.put(None)
        self._thread.join(timeout=1.0)

    # -- background thread ---------------------------------------------------

    def _run(self) -> None:
        bus: Bus | None = None
        try:
            while True:
                batch, markers, stop = self._next_batch()
                if batch:
                    bus = self._store(bus, batch)
                elif not (markers or stop) and bus is not None:
                    self._touch(bus)
                for marker in markers:
                    marker.set()
                if stop:
                    return
        finally:
            if bus is not None:
                _close_quietly(bus)

    def _next_batch(self) -> tuple[list[Record], list[threading.Event], bool]:
        """Block for one item, then take whatever else is already waiting (up to BATCH records).

        Nothing at all for a lease (once the bus took the run): an empty batch, so the run is touched.
        """
        batch: list[Record] = []
        markers: list[threading.Event] = []
        try:
            item = self._queue.get(timeout=self._lease if self._reached and not self._given_up else None)
        except queue.Empty:
            return batch, markers, False
        while True:
            if item is None:
                return batch, markers, True
            if isinstance(item, threading.Event):
                markers.append(item)
                if not batch:
                    return batch, markers, False
            else:
                batch.append(item)
            if len(batch) >= BATCH:
                return batch, markers, False
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return batch, markers, False

    def _store(self, bus: Bus | None, batch: list[Record]) -> Bus | None:
        """Append one batch, reopening and retrying with backoff through an outage of up to ``retry_for``.

        A bus never reached is given up after ``connect_for``; once given up, batches are dropped at once.
        """
        from agentstream.bus import BusBusy, BusUnusable, open_bus
        from agentstream.errors import AgentstreamError

        if self._given_up:
            self._drop(len(batch), "the bus was given up earlier in this run")
            return bus
        started = time.monotonic()
        deadline = started + (self.retry_for if self._reached else self.connect_for)
        delay = 0.05
        while True:
            try:
                if bus is None:
                    bus = open_bus(self.url)
                added = bus.append_from(self.producer, self.run_id, batch)
                self.stored += added
                self._reached = True
                if added < len(batch):
                    self._check_fenced(bus, batch, added)
                return bus
            except AgentstreamError as exc:
                self.error = exc
                if isinstance(exc, BusBusy) and not self._reached:
                    self._reached = True  # it answered: a lock held elsewhere is an outage to wait out
                    deadline = started + self.retry_for
                lasting = exc.code != "BUS_UNAVAILABLE" or isinstance(exc, BusUnusable)  # no retry mends it
                if lasting or time.monotonic() + delay > deadline:
                    self._given_up = True
                    self._drop(len(batch), _said(exc))
                    return bus
                self._warn(f"{exc.message}; retrying in the background (--no-publish skips the bus)")
            except Exception as exc:  # never let a bus bug reach the producer
                self.error = exc
                self._drop(len(batch), f"{type(exc).__name__}: {exc}")
                return bus
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _touch(self, bus: Bus) -> None:
        """Prove the quiet producer alive (:mod:`agentstream.bus.liveness`); a failure shows at the next append."""
        try:
            bus.touch(self.run_id)
        except Exception:  # never let a bus bug reach the producer
            pass

    def _check_fenced(self, bus: Bus, batch: list[Record], added: int) -> None:
        """Tell a run closed by someone else (cancelled, reclaimed) from a retry whose events were stored already.

        A closed run's append stores nothing and says so only by its count, as a
        retried batch does; the run's stored ending tells the two apart. Fenced off,
        the rest of the run is dropped at once.
        """
        info = bus.get_run(self.run_id)
        if info is None or not info.terminal or self._ends_with_own_result(bus, batch, info.last_seq):
            return
        self._given_up = True
        self.dropped += len(batch) - added
        why = f"{info.status}, subtype {info.subtype}" if info.subtype else info.status
        self._warn(
            f"the run was ended on the bus by another process ({why}), so the bus refuses its events:"
            " they are no longer stored; this process and its own output go on unchanged"
        )

    def _ends_with_own_result(self, bus: Bus, batch: list[Record], last_seq: int) -> bool:
        """Whether the run's stored last event is this batch's own ``result`` (a retry after a lost reply)."""
        own = next((r for r in batch if r.seq == last_seq and r.type == "result"), None)
        if own is None:
            return False
        stored = bus.read(self.run_id, last_seq, limit=1)
        return bool(stored) and stored[0].line == own.line

    def _drop(self, count: int, why: str) -> None:
        self.dropped += count
        self._warn(f"{count} event(s) not published: {why}")

    def _warn(self, message: str) -> None:
        """One line on stderr per publisher, whatever goes wrong after."""
        if self._warned:
            return
        self._warned = True
        try:
            sys.stderr.write(f"agentstream: warning: bus: run {self.run_id}: {message}\n")
            sys.stderr.flush()
        except Exception:
            pass


def _said(exc: AgentstreamError) -> str:
    """An error as the warning line says it: its code, what happened, and the fix."""
    fix = f" (fix: {exc.fix})" if exc.fix else ""
    return f"{exc.code}: {exc.message}{fix}"


def _close_quietly(bus: Bus) -> None:
    try:
        bus.close()
    except Exception:
        pass


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(f"AGENTSTREAM_BUS_{name}", "")
    try:
        return float(raw) if raw else default
    except ValueError:
        return default
