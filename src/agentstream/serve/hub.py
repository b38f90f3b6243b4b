"""Bus access for the server: blocking bus calls off the event loop, and one tail per followed run.

The bus API is synchronous and one :class:`~agentstream.bus.Bus` serves one
thread at a time, so every call runs in a worker thread with a bus checked out of a
small pool for that call. Buses are pooled rather than kept per thread because
anyio's worker threads come and go (they exit after a quiet spell): a bus per thread
would leave one open connection behind for every thread that ever ran. A run
that many clients follow is tailed by a single thread (one blocking read at a
time, however many followers), which hands each batch of new records to every
follower's asyncio queue. The hub holds no state that matters: a follower reads
the bus itself to catch up, takes live records from the tail, and goes back to
the bus whenever it sees a hole, so nothing is lost or repeated and any number
of server processes can share one bus.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final, TypeVar

from agentstream.bus import BusUnavailable, BusUnusable, Record, open_bus
from agentstream.bus.liveness import ProducerWatch, lost_after_seconds

if TYPE_CHECKING:
    from agentstream.bus import Bus

__all__ = ["RunHub"]

T = TypeVar("T")
PAGE: Final = 1000
"""The most records one read asks for."""
READ_BYTES: Final = 4 << 20
"""About how many bytes of records one read should bring: the bus limits a read by records only, and a
run's records range from a few bytes to many megabytes (a tool's whole output), so the number asked for
follows the size of those read before (:class:`_ReadSize`)."""
TAIL_BLOCK_S: Final = 1.0
"""Longest blocking read of a tail, so it notices within this long that its followers left."""
POOL_IDLE: Final = 16
"""Idle buses kept for the next calls; more are opened while more calls run at once, and closed after."""
RECHECK_S: Final = 5.0
"""A follower that hears nothing for this long reads the bus itself (in case its tail failed)."""
FOLLOWER_BATCHES: Final = 32
"""Batches the tail holds for one follower that is not taking them (a client that stopped reading): past
that it drops them for that follower, which finds the hole when it reads again and catches up from the bus,
so a stalled client costs bounded memory."""
FOLLOWER_BYTES: Final = 8 << 20
"""Bytes of records the tail holds for one follower that is not taking them, whatever the number of batches:
a few batches of huge records would otherwise pin (and the follower then encode) hundreds of megabytes."""


class RunHub:
    """Lends pooled buses to worker threads and shares one tail thread among the followers of a run."""

    def __init__(self, bus_url: str | None) -> None:
        self.bus_url = bus_url
        self._idle: list[Bus] = []
        self._lent = 0
        self._lock = threading.Lock()
        self._tails: dict[str, _Tail] = {}
        self.closed = False
        self.lost_after = lost_after_seconds()
        """After how long without a sign of life a tail ends a run (:mod:`agentstream.bus.liveness`)."""

    @property
    def open_buses(self) -> int:
        """Buses open for calls now (idle or lent): at most :data:`POOL_IDLE` plus the calls under way."""
        with self._lock:
            return len(self._idle) + self._lent

    @contextmanager
    def lent_bus(self) -> Iterator[Bus]:
        """A bus for one call: an idle one, else a new one; back to the pool after, or closed if it is full.

        A bus whose call failed with :class:`BusUnavailable` is closed rather than pooled, so a broken
        connection is not lent again.
        """
        with self._lock:
            bus = self._idle.pop() if self._idle else None
            self._lent += 1
        broken = False
        try:
            if bus is None:
                bus = open_bus(self.bus_url)
            yield bus
        except BusUnavailable:
            broken = True
            raise
        finally:
            with self._lock:
                self._lent -= 1
                keep = bus is not None and not broken and not self.closed and len(self._idle) < POOL_IDLE
                if keep and bus is not None:
                    self._idle.append(bus)
            if not keep and bus is not None:
                _close_quietly(bus)

    async def call(self, function: Callable[[Bus], T]) -> T:
        """``function(bus)`` in a worker thread, without blocking the event loop."""
        import anyio.to_thread

        def lent_call() -> T:
            with self.lent_bus() as bus:
                return function(bus)

        return await anyio.to_thread.run_sync(lent_call)

    def close(self) -> None:
        """Close the idle buses; a bus lent out now is closed when it comes back."""
        with self._lock:
            self.closed = True
            idle, self._idle = self._idle, []
        for bus in idle:
            _close_quietly(bus)

    async def batches(self, run_id: str, from_seq: int) -> AsyncIterator[list[Record]]:
        """The run's records from ``from_seq`` in ``seq`` order, live, in batches; the last one ends with the ``result``.

        Batches rather than single records so that a follower that fell behind
        (a slow client, a busy machine) catches up with one write per batch. A bus
        that fails raises :class:`BusUnavailable`; one that no retry mends
        (:class:`BusUnusable`) also when the run's tail met it first.
        """
        next_seq = max(from_seq, 0)
        async for page in self._stored(run_id, next_seq):
            page, ended = _through_result(page)
            yield page
            next_seq = page[-1].seq + 1
            if ended:
                return
        if await self._ended_behind(run_id, next_seq):
            return  # a finished run resumed past its end: no tail to start
        queue = _Inbox()
        tail = self._subscribe(run_id, next_seq, queue)
        try:
            while True:
                # Catch up from the bus: everything stored before the tail's batches arrive (or after a hole).
                async for page in self._stored(run_id, next_seq):
                    page, ended = _through_result(page)
                    yield page
                    next_seq = page[-1].seq + 1
                    if ended:
                        return
                if await self._ended_behind(run_id, next_seq):
                    return
                while True:
                    if tail.error is not None and queue.empty():
                        raise tail.error  # everything the tail read is taken: what stopped it ends this follower
                    try:
                        batch = await asyncio.wait_for(queue.get(), timeout=RECHECK_S)
                    except TimeoutError:
                        break
                    while not queue.empty():  # everything that is already waiting, in one go
                        batch = batch + queue.get_nowait()
                    fresh = [record for record in batch if record.seq >= next_seq]
                    if not fresh:
                        if any(record.type == "result" for record in batch):
                            return  # the run ended below this follower's resume point
                        continue
                    if fresh[0].seq != next_seq:
                        break  # a hole: read it from the bus
                    fresh, whole = _up_to_a_hole(fresh)
                    fresh, ended = _through_result(fresh)
                    yield fresh
                    next_seq = fresh[-1].seq + 1
                    if ended:
                        return
                    if not whole:
                        break  # batches dropped while this follower did not take them: the bus has them
        finally:
            self._unsubscribe(run_id, tail, queue)

    async def _stored(self, run_id: str, from_seq: int) -> AsyncIterator[list[Record]]:
        """Non-empty pages of what the bus has stored from ``from_seq``, each of about :data:`READ_BYTES`."""
        size = _ReadSize()
        while True:
            limit = size.limit
            page = await self.call(
                functools.partial(_read_page, run_id=run_id, from_seq=from_seq, limit=limit)
            )
            if page:
                yield page
            if len(page) < limit:
                return
            size.learn(page)
            from_seq = page[-1].seq + 1

    async def _ended_behind(self, run_id: str, next_seq: int) -> bool:
        """True when the run has ended below ``next_seq`` (a resume point past its end)."""
        info = await self.call(lambda bus: bus.get_run(run_id))
        return info is None or (info.terminal and info.last_seq < next_seq)

    def tail_next_seq(self, run_id: str) -> int | None:
        """The next seq the run's shared tail reads (None: no tail), to check it never runs past the run."""
        with self._lock:
            tail = self._tails.get(run_id)
            return tail.next_seq if tail is not None else None

    def _subscribe(self, run_id: str, from_seq: int, queue: _Inbox) -> _Tail:
        loop = asyncio.get_running_loop()
        with self._lock:
            tail = self._tails.get(run_id)
            if tail is None or not tail.is_alive() or tail.error is not None:
                tail = _Tail(self, run_id, from_seq)
                self._tails[run_id] = tail
                tail.followers[queue] = loop
                tail.start()
            else:
                tail.followers[queue] = loop
        return tail

    def _unsubscribe(self, run_id: str, tail: _Tail, queue: _Inbox) -> None:
        with self._lock:
            tail.followers.pop(queue, None)
            if not tail.followers and self._tails.get(run_id) is tail:
                del self._tails[run_id]

    def _tail_done(self, tail: _Tail) -> None:
        with self._lock:
            if self._tails.get(tail.run_id) is tail:
                del self._tails[tail.run_id]


class _Inbox(asyncio.Queue[list[Record]]):
    """A follower's batches from the tail, counted in batches and in bytes (see :data:`FOLLOWER_BYTES`)."""

    def __init__(self) -> None:
        super().__init__(maxsize=FOLLOWER_BATCHES)
        self.bytes = 0

    def _put(self, batch: list[Record]) -> None:
        self.bytes += _bytes_of(batch)
        super()._put(batch)

    def _get(self) -> list[Record]:
        batch = super()._get()
        self.bytes -= _bytes_of(batch)
        return batch


def _offer(queue: _Inbox, batch: list[Record]) -> None:
    """Hand a follower the next batch, unless it holds :data:`FOLLOWER_BATCHES` or :data:`FOLLOWER_BYTES` it
    has not taken (see there). A follower that holds none always gets it, however large."""
    if not queue.empty() and queue.bytes + _bytes_of(batch) > FOLLOWER_BYTES:
        return
    try:
        queue.put_nowait(batch)
    except asyncio.QueueFull:
        pass


def _bytes_of(records: list[Record]) -> int:
    return sum(len(record.line) for record in records)


class _ReadSize:
    """The number of records to ask for next, so that a read brings about :data:`READ_BYTES`.

    It starts at one record and at most doubles from one read to the next, so that a read
    never asks for far more records than those before turned out to hold: after small
    records, the next read of huge ones is no more than twice as many as the last.
    """

    def __init__(self) -> None:
        self.limit = 1

    def learn(self, page: list[Record]) -> None:
        """Size the next read after ``page``, a full one."""
        fitting = READ_BYTES * len(page) // max(_bytes_of(page), 1)
        self.limit = max(1, min(PAGE, 2 * self.limit, fitting))


def _up_to_a_hole(records: list[Record]) -> tuple[list[Record], bool]:
    """The records before the first gap in their ``seq``, and whether there was none."""
    first = records[0].seq
    for index, record in enumerate(records):
        if record.seq != first + index:
            return records[:index], False
    return records, True


def _through_result(records: list[Record]) -> tuple[list[Record], bool]:
    """The records up to and including a ``result``, and whether there was one."""
    for index, record in enumerate(records):
        if record.type == "result":
            return records[: index + 1], True
    return records, False


def _close_quietly(bus: Bus) -> None:
    try:
        bus.close()
    except Exception:
        pass  # closing a connection that already failed: nothing left to release


def _read_page(bus: Bus, *, run_id: str, from_seq: int, limit: int) -> list[Record]:
    return bus.read(run_id, from_seq, limit=limit)


class _Tail(threading.Thread):
    """Reads one run's new records as they are stored and hands each batch to every follower.

    It starts at the first follower's next seq, but never past what the run has stored: a
    follower resuming beyond the end must not make the tail skip the records every other
    follower waits for (they would get them only from their own reads, every RECHECK_S).
    """

    def __init__(self, hub: RunHub, run_id: str, from_seq: int) -> None:
        super().__init__(name=f"tail-{run_id[:40]}", daemon=True)
        self.hub = hub
        self.run_id = run_id
        self.next_seq = from_seq
        self.followers: dict[_Inbox, asyncio.AbstractEventLoop] = {}
        self.watch = ProducerWatch(hub.lost_after)
        self.error: BusUnusable | None = None
        """What stopped the tail for good, set before its followers are woken to end their streams with it."""

    def run(self) -> None:
        import time

        bus: Bus | None = None
        started = False
        size = _ReadSize()
        try:
            while not self.hub.closed:
                with self.hub._lock:
                    if not self.followers:
                        return
                try:
                    if bus is None:
                        bus = open_bus(self.hub.bus_url)
                    if not started:
                        self._start_within_stored(bus)
                        started = True
                    batch = bus.read(self.run_id, self.next_seq, limit=size.limit, block=TAIL_BLOCK_S)
                    if not batch:
                        self._end_if_producer_lost(bus)
                        continue
                except BusUnusable as exc:
                    self._stop_for(exc)
                    return
                except BusUnavailable:
                    self.watch.forget()
                    time.sleep(0.5)  # followers fall back to their own reads meanwhile
                    continue
                if len(batch) == size.limit:
                    size.learn(batch)
                self.next_seq = batch[-1].seq + 1
                self._hand_out(batch)
                if batch[-1].type == "result":
                    return
        finally:
            self.hub._tail_done(self)
            if bus is not None:
                bus.close()

    def _hand_out(self, batch: list[Record]) -> None:
        """Offer ``batch`` to every follower in its own event loop."""
        with self.hub._lock:
            # Taken after the read: a follower that joined during it may have read the bus
            # before this batch was stored, so it must get the batch from here.
            followers = list(self.followers.items())
        for queue, loop in followers:
            try:
                loop.call_soon_threadsafe(_offer, queue, batch)
            except RuntimeError:  # that follower's loop has closed
                pass

    def _stop_for(self, error: BusUnusable) -> None:
        """Stop for a bus no retry mends: each follower, woken by an empty batch, ends its stream with ``error``
        once it has taken what came before (one that misses the wake-up meets the error in its own next read)."""
        self.error = error
        self._hand_out([])

    def _end_if_producer_lost(self, bus: Bus) -> None:
        """End the run on the bus when its producer is lost: the next read hands that ending to every follower."""
        info = bus.get_run(self.run_id)
        if info is not None:
            self.watch.end_if_lost(bus, info)

    def _start_within_stored(self, bus: Bus) -> None:
        """Move the start back to the run's stored last seq + 1 when a follower asked for more."""
        info = bus.get_run(self.run_id)
        if info is not None:
            self.next_seq = min(self.next_seq, info.last_seq + 1)
