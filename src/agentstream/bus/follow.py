"""Following the bus: one run (``follow``) or every run (``watch``), as NDJSON on stdout.

What a follower prints are the run's own events — its session id, its ``seq``,
byte for byte as the producer wrote them — not a new session. It reads by ``seq``
and resumes from the last one it printed + 1 after a lost connection, so a bus
restart neither loses nor repeats an event; a hole in ``seq`` is reported with a
synthetic, recoverable ``error`` line (``EVENTS_MISSING``) stamped with the first
missing ``seq``.

Exactly one terminal line ends the output: the run's own ``result`` with
``next_actions`` added, or — when the follower stops first — a synthetic
ending (``synthetic: true``): a ``tool_result`` (status ``error``) for each
tool call printed without its result and the complete event of each delta run
left open, so the output is whole; then a fatal ``error`` and a ``result``
(``ok: false``) whose ``subtype`` says why. That ending is the follower's, not
the run's: it is stamped in a session of its own from ``seq`` 0, since every
later ``seq`` of the run is the run's to write; its ``next_actions`` resume the
run at the next ``seq`` not printed. The process exits with the ``result``'s
``exit_code``.
"""

from __future__ import annotations

import fnmatch
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Final, TypeVar

from agentstream import protocol as p
from agentstream._signals import HeldSignal, SignalHandlers, inside_import
from agentstream.actions import follow_action, resume_action, runs_action, watch_action
from agentstream.bus import BOUND_LINE_BYTES, BusUnavailable, BusUnusable, FeedItem, Record
from agentstream.bus.liveness import ProducerWatch
from agentstream.ending import add_line, ending_events
from agentstream.errors import AgentstreamError, ErrorCode, ExitCode, error_text, exit_code_for_signal
from agentstream.transcript import Tally

if TYPE_CHECKING:
    from agentstream.bus import Bus

__all__ = ["FollowOptions", "WatchFilter", "follow", "follower_ending", "synthetic_result", "watch"]

T = TypeVar("T")

POLL_S: Final = 1.0
"""Longest single blocking read, so deadlines are checked at least this often."""


class _Stopped(BaseException):
    """A handled signal; a BaseException so that no library's ``except Exception`` swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _Output:
    """Whole lines to fd 1; a signal that arrives mid-line (or mid-import) is delivered right after it.

    A signal stops the follower once: from the first one, or from the moment the
    terminal line is decided on (:meth:`stop`), the output is ending and later
    signals change nothing, so no second terminal line is ever written. The one
    exception: a second signal while a line is being written, which waits on a
    stdout nobody reads, ends the process at once (:meth:`HeldSignal.hold_or_stop_waiting`).
    """

    def __init__(self, fd: int = 1) -> None:
        self.fd = fd
        self.writing = False
        self.wrote = False
        """Whether any line is out: a follower that printed nothing still owes a whole stream."""
        self.stopped = False
        self.held = HeldSignal()
        self.handlers = SignalHandlers(self._on_signal)

    def install(self) -> None:
        self.handlers.install()

    def restore(self, final_exit: int | None) -> None:
        """Hand the signals back, with the terminal line's code once it is written (a later signal keeps it)."""
        self.handlers.restore(final_exit)

    def stop(self) -> None:
        """The terminal line is decided on: from here a signal neither stops the output nor adds to it."""
        self.stopped = True

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.writing:
            self.held.hold_or_stop_waiting(signum, frame)
            return
        if self.stopped:
            return
        if inside_import(frame):
            self.held.hold(signum, frame)
            return
        self.held.take()
        self._stop_on(signum)

    def _stop_on(self, signum: int) -> None:
        """Stop the output for ``signum``, which stays held: a signal while the ending is written is a second."""
        self.held.hold(signum)
        self.stopped = True
        raise _Stopped(signum)

    def write(self, *pieces: bytes) -> None:
        """Each piece whole, in order; a signal meanwhile waits until they are all out."""
        self.writing = True
        try:
            for piece in pieces:
                view = memoryview(piece)
                while view:
                    view = view[os.write(self.fd, view) :]
                self.wrote = True
        finally:
            self.writing = False
        if self.held.pending and not self.stopped:
            self._stop_on(self.held.pending)

    def write_line(self, line: bytes) -> None:
        """A stored line and its newline: one write, or two for a long line (not copied to add it)."""
        if len(line) < BOUND_LINE_BYTES:
            self.write(line + b"\n")
        else:
            self.write(line, b"\n")


@dataclass
class FollowOptions:
    run_id: str
    from_seq: int = 0
    timeout: float | None = None
    wait: bool = False
    """Wait for a run that does not exist yet (and for a bus not reachable yet) instead of failing."""
    reconnect_for: float = 30.0
    """How long an outage of a bus that was reached is retried."""
    connect_for: float = 2.0
    """How long a bus never reached is tried before giving up (unless ``wait``)."""
    command: str = "agentstream follow"
    observer: Callable[[p.AnyEvent], None] | None = None
    """Also gets every event printed (e.g. the OpenTelemetry sink)."""


class _Ended(Exception):
    """The follower must stop with this synthetic terminal."""

    def __init__(self, subtype: str, error: AgentstreamError, exit_code: int) -> None:
        super().__init__(error.message)
        self.subtype, self.error, self.exit_code = subtype, error, exit_code


def follow(open_bus: Callable[[], Bus], options: FollowOptions, out: _Output | None = None) -> int:
    """Print the run from ``options.from_seq`` until its ``result``; return the exit code."""
    out = out or _Output()
    out.install()
    code: int | None = None
    try:
        code = _follow_to_the_end(_RunTail(options, out), open_bus)
    except BrokenPipeError:
        code = int(ExitCode.SIGPIPE)
    finally:
        out.restore(code)
    return code


def _follow_to_the_end(tail: _RunTail, open_bus: Callable[[], Bus]) -> int:
    """The run's own ``result``, or the ending of a follower stopped first: either way, one terminal line.

    A signal before the ending is decided on stops the follower (caught below, even when it lands in
    the ``_Ended`` handler); after it, the output's handler lets the ending be.
    """
    try:
        try:
            return tail.run(open_bus)
        except _Ended as ended:
            tail.out.stop()
            why = (ended.subtype, ended.error, ended.exit_code)
    except _Stopped as stop:
        why = ("follow_interrupted", _interrupted(stop.signum, "follower"), exit_code_for_signal(stop.signum))
    return tail.end(*why)


@dataclass
class _RunTail:
    options: FollowOptions
    out: _Output
    next_seq: int = 0
    bus: Bus | None = None
    deadline: float = field(default=float("inf"))
    exit_code: int = 0
    """The run's own exit code, once its ``result`` is printed."""
    reached: bool = False
    """Whether the bus answered once: from then on an outage is retried for ``reconnect_for``."""
    tally: Tally = field(default_factory=lambda: Tally(for_ending=True))
    """What was printed still open, for a whole ending if the follower stops first."""
    watch: ProducerWatch | None = None
    """Whether the run's producer still shows signs of life (set once the bus is open)."""

    def __post_init__(self) -> None:
        self.next_seq = max(self.options.from_seq, 0)  # a signal before the first read resumes here too

    def run(self, open_bus: Callable[[], Bus]) -> int:
        if self.options.timeout is not None:
            self.deadline = time.monotonic() + self.options.timeout
        try:
            self.watch = ProducerWatch()
            self.bus = open_bus()
        except AgentstreamError as exc:
            raise _Ended(_subtype_of(exc), exc, exc.exit_code) from exc
        self._check_known()
        block: float | None = None  # the first read does not wait: a finished run may end at once
        while True:
            records = self._with_reconnect(
                lambda bus: bus.read(self.options.run_id, self.next_seq, block=block)  # noqa: B023 (called at once)
            )
            block = self._block()
            for record in records:
                if self._emit(record):
                    return self.exit_code
            self._check_time()
            if not records:
                finished = self._result_behind()
                if finished is not None:
                    self._emit(finished)
                    return self.exit_code

    def _check_known(self) -> None:
        if self.options.wait:
            return
        if self._with_reconnect(lambda bus: bus.get_run(self.options.run_id)) is None:
            error = AgentstreamError(
                f"no run {self.options.run_id!r} on this bus",
                code=ErrorCode.RUN_NOT_FOUND,
                fix="list runs with 'agentstream runs' (same --bus), or pass --wait for a run about to start",
            )
            raise _Ended("run_not_found", error, ExitCode.ERROR)

    def _block(self) -> float:
        return max(0.001, min(POLL_S, self.deadline - time.monotonic()))

    def _check_time(self) -> None:
        if time.monotonic() >= self.deadline:
            error = AgentstreamError(
                f"stopped following after --timeout {self.options.timeout:g}s; the run goes on",
                code=ErrorCode.TIMEOUT,
                fix="resume with the next action, or follow without --timeout",
            )
            raise _Ended("follow_timeout", error, ExitCode.TIMEOUT)

    def _with_reconnect(self, call: Callable[[Bus], T]) -> T:
        """Run ``call`` on the bus, retrying with backoff through an outage.

        A bus that answered before is retried for ``reconnect_for``; one never
        reached is given up after ``connect_for`` — unless ``wait``, which keeps
        trying (until ``--timeout``) with a line on stderr per attempt.
        """
        assert self.bus is not None
        started = time.monotonic()
        delay = 0.05
        while True:
            try:
                answer = call(self.bus)
            except BusUnavailable as exc:
                if self.watch is not None:
                    self.watch.forget()  # the producer could not prove itself alive through the outage either
                if isinstance(exc, BusUnusable):  # no retry mends it
                    raise _Ended("bus_unavailable", exc, ExitCode.ERROR) from exc
                waiting = self.options.wait and not self.reached
                limit = self.options.reconnect_for if self.reached else self.options.connect_for
                if waiting:
                    _say(f"{self.options.command}: {exc.message}; --wait: trying again in {delay:g}s")
                given_up = not waiting and time.monotonic() - started + delay > limit
                if given_up or time.monotonic() + delay >= self.deadline:
                    raise _Ended("bus_unavailable", exc, ExitCode.ERROR) from exc
                time.sleep(delay)
                delay = min(delay * 2, 5.0 if waiting else 1.0)
            else:
                self.reached = True
                return answer

    def _result_behind(self) -> Record | None:
        """The run's ``result`` when it is stored below ``next_seq`` (``--from-seq`` past the end).

        A run whose producer is lost is ended on the bus here; the next read prints that ending.
        """
        info = self._with_reconnect(lambda bus: bus.get_run(self.options.run_id))
        watch = self.watch
        if info is not None and watch is not None and not info.terminal:
            self._with_reconnect(lambda bus: watch.end_if_lost(bus, info))
        if info is None or not info.terminal or info.last_seq >= self.next_seq:
            return None
        last = info.last_seq
        stored = self._with_reconnect(lambda bus: bus.read(self.options.run_id, last, limit=1))
        return stored[0] if stored and stored[0].type == "result" else None

    def _emit(self, record: Record) -> bool:
        """Print one record; True when it was the run's terminal ``result``."""
        if record.seq > self.next_seq:
            self._write(_gap_line(self.options.run_id, self.next_seq, record.seq - 1))
        if record.type == "result":
            line = self._enriched(record.line) + b"\n"
            self.out.stop()
            self._write(line)
            return True
        # Advanced first: a signal held during the write ends the output right after this line,
        # and the terminal's seq must then name the next line, not this one again.
        self.next_seq = max(self.next_seq, record.seq + 1)
        add_line(self.tally, record.type, record.line)
        self._write_stored(record.line)
        return False

    def _enriched(self, line: bytes) -> bytes:
        try:
            event = p.decode(line)
        except AgentstreamError:
            self.exit_code = int(ExitCode.ERROR)
            return line
        if not isinstance(event, p.Result):
            return line
        self.exit_code = event.exit_code
        event.next_actions += self._actions_after()  # after the run's own
        return p.encode(event)

    def _actions_after(self) -> list[p.NextAction]:
        run_id = self.options.run_id
        actions = [follow_action(run_id, description="replay this run from the start")]
        retry = self._retry_of(run_id)
        if retry is not None:
            actions.insert(0, follow_action(retry, description="follow the job's next attempt"))
        return [*actions, runs_action()]

    def _retry_of(self, run_id: str) -> str | None:
        """The run id of the next attempt, when this run was an attempt of a job that was retried.

        Only an attempt that has a run: older versions counted attempts they never ran (one refused for want
        of attempts, one begun as the lost attempt turned out to have succeeded).
        """
        try:
            assert self.bus is not None
            info = self.bus.get_run(run_id)
            if info is None or not info.job_id or not info.attempt:
                return None
            job = self.bus.get_job(info.job_id)
            if job is None or job.attempt <= info.attempt:
                return None
            retry = job.attempt_run_id(info.attempt + 1)
            return retry if self.bus.get_run(retry) is not None else None
        except AgentstreamError:
            return None

    def end(self, subtype: str, error: AgentstreamError, exit_code: int) -> int:
        """Print the one synthetic terminal (:func:`follower_ending`) and return its exit code."""
        ending = follower_ending(
            self.tally,
            self.options.run_id,
            self.next_seq,
            error,
            subtype=subtype,
            exit_code=exit_code,
            command=self.options.command,
            opened=self.out.wrote,
        )
        line = b"".join(p.encode_line(event) for event in ending)
        try:
            self._write(line)
        except BrokenPipeError:
            pass
        result = ending[-1]
        return result.exit_code if isinstance(result, p.Result) else exit_code

    def _write_stored(self, line: bytes) -> None:
        self.out.write_line(line)
        self._observe(line)

    def _write(self, line: bytes) -> None:
        """Print one line (or more), then show its event to the observer, if any."""
        self.out.write(line)
        self._observe(line)

    def _observe(self, line: bytes) -> None:
        if self.options.observer is not None:
            try:
                event = p.decode(line)
            except AgentstreamError:
                return
            self.options.observer(event)


def follower_ending(
    tally: Tally,
    run_id: str,
    resume_at: int,
    error: AgentstreamError,
    *,
    subtype: str,
    exit_code: int,
    command: str,
    opened: bool,
) -> list[p.Event]:
    """The whole ending of a follower (``follow``, a ``serve`` stream) stopped before the run's ``result``.

    The run goes on without the follower, so every ``seq`` of the run's session from
    ``resume_at`` on is the run's own to write. The made-up ending is therefore stamped
    in a session of the follower's own (``follow_…``, ``seq`` from 0): output
    concatenated with that of ``follow --from-seq <resume_at>`` has no ``(session_id,
    seq)`` twice, and the resume point skips nothing. Nothing sent yet (not ``opened``):
    a synthetic ``start`` first, so the output is still one whole stream.
    """
    actions = [resume_action(run_id, resume_at), runs_action()]
    info = p.ErrorInfo(code=str(error.code), message=error.message, fix=error.fix or p.UNSET)
    ending = ending_events(
        tally,
        info,
        exit_code=exit_code,
        subtype=subtype,
        details={"run_id": run_id, "resume_seq": resume_at},
        command=command,
        next_actions=actions,
        tool_status="error",
    )
    if not opened:
        ending.insert(0, p.Start(command=command, synthetic=True))
    sequencer = p.Sequencer(p.new_id("follow"))
    return [sequencer.stamp(event) for event in ending]


def synthetic_result(
    session_id: str,
    seq: int,
    subtype: str,
    error: AgentstreamError | None,
    exit_code: int,
    next_actions: Sequence[p.NextAction],
    *,
    command: str,
    result: str | None = None,
) -> bytes:
    """The terminal line a follower writes when it, not the run, ends the output."""
    event = p.Result(
        ok=error is None,
        subtype=subtype,
        exit_code=int(exit_code),
        error=p.ErrorInfo(code=str(error.code), message=error.message, fix=error.fix or p.UNSET)
        if error
        else p.UNSET,
        result=result if result is not None else p.UNSET,
        command=command,
        next_actions=list(next_actions),
        session_id=session_id,
        seq=seq,
        ts=p.now_ts(),
        synthetic=True,
    )
    return p.encode_line(event)


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _gap_line(run_id: str, first: int, last: int) -> bytes:
    event = p.Error(
        code=ErrorCode.EVENTS_MISSING,
        message=f"events {first}..{last} of run {run_id} are not on the bus",
        recoverable=True,
        details={"from_seq": first, "to_seq": last},
        session_id=run_id,
        seq=first,
        ts=p.now_ts(),
        synthetic=True,
    )
    return p.encode_line(event)


def _interrupted(signum: int, who: str) -> AgentstreamError:
    return AgentstreamError(
        f"the {who} was stopped by {signal.Signals(signum).name}; the runs go on",
        code=ErrorCode.INTERRUPTED,
        fix="resume with the next action",
    )


def _subtype_of(exc: AgentstreamError) -> str:
    if exc.code == ErrorCode.BUS_UNAVAILABLE:
        return "bus_unavailable"
    return "invalid_input" if exc.exit_code == ExitCode.USAGE else "error"


# -- watch ---------------------------------------------------------------------


@dataclass
class WatchFilter:
    """Which feed events ``watch`` prints; empty means everything."""

    runs: Sequence[str] = ()
    """Run ids or globs."""
    types: Sequence[str] = ()
    names: Sequence[str] = ()
    """Globs on the ``name`` of ``event``/``step``/``progress`` events."""

    def __call__(self, item: FeedItem) -> bool:
        if self.types and item.record.type not in self.types:
            return False
        if self.runs and not any(fnmatch.fnmatchcase(item.run_id, pattern) for pattern in self.runs):
            return False
        if self.names:
            name = _name_of(item.record)
            return name is not None and any(fnmatch.fnmatchcase(name, pattern) for pattern in self.names)
        return True


def _name_of(record: Record) -> str | None:
    if record.type not in ("event", "step", "progress", "tool_call", "tool_result"):
        return None
    import msgspec

    value = msgspec.json.decode(record.line).get("name")
    return value if isinstance(value, str) else None


@dataclass
class _WatchState:
    cursor: str = ""
    printed: int = 0


def watch(
    open_bus: Callable[[], Bus],
    *,
    since: str | None,
    keep: WatchFilter,
    timeout: float | None = None,
    count: int | None = None,
    reconnect_for: float = 30.0,
    command: str = "agentstream watch",
) -> int:
    """Print every run's events as they are stored, until a signal, ``timeout`` or ``count``."""
    out = _Output()
    out.install()
    state = _WatchState()
    watch_id = p.new_id("watch")
    code: int | None = None
    try:
        try:
            subtype, error, code = _watch_loop(
                open_bus, out, state, since, keep, timeout, count, reconnect_for
            )
            out.stop()  # a signal before this line stops the watcher below; after it, the ending is let be
        except _Stopped as stop:
            subtype, error, code = (
                "watch_interrupted",
                _interrupted(stop.signum, "watcher"),
                exit_code_for_signal(stop.signum),
            )
        if error is not None and code == ExitCode.USAGE:  # as every command says a usage error: on stderr too
            _say(error_text(command, error.code, error.message, error.fix).rstrip("\n"))
        actions = [watch_action(state.cursor or None), runs_action()]
        summary = f"{state.printed} event(s); resume after cursor {state.cursor}" if state.cursor else None
        line = synthetic_result(watch_id, 0, subtype, error, code, actions, command=command, result=summary)
        try:
            out.write(line)
        except BrokenPipeError:
            pass  # the reader is gone: the watch's own code stands
    except BrokenPipeError:
        code = int(ExitCode.SIGPIPE)
    finally:
        out.restore(code)
    return code


def _watch_loop(
    open_bus: Callable[[], Bus],
    out: _Output,
    state: _WatchState,
    since: str | None,
    keep: WatchFilter,
    timeout: float | None,
    count: int | None,
    reconnect_for: float,
) -> tuple[str, AgentstreamError | None, int]:
    deadline = time.monotonic() + timeout if timeout is not None else float("inf")
    try:
        bus = open_bus()
        state.cursor = since if since is not None else bus.feed_end()
        while True:
            for item in _read_feed(bus, state.cursor, deadline, reconnect_for):
                state.cursor = item.cursor
                if keep(item):
                    out.write_line(item.record.line)
                    state.printed += 1
                    if count is not None and state.printed >= count:
                        return "watch_count", None, int(ExitCode.OK)
            if time.monotonic() >= deadline:
                return "watch_timeout", None, int(ExitCode.OK)
    except _Ended as ended:
        return ended.subtype, ended.error, ended.exit_code
    except AgentstreamError as exc:
        return _subtype_of(exc), exc, exc.exit_code


def _read_feed(bus: Bus, cursor: str, deadline: float, reconnect_for: float) -> list[FeedItem]:
    """One read of the feed (at least one, however short the timeout), retrying through an outage."""
    outage = 0.0
    while True:
        remaining = deadline - time.monotonic()
        try:
            return bus.read_feed(cursor, block=min(POLL_S, remaining) if remaining > 0 else None)
        except BusUnavailable as exc:
            outage = outage or time.monotonic()
            lasting = isinstance(exc, BusUnusable)  # no retry mends it
            if lasting or time.monotonic() - outage > reconnect_for or time.monotonic() >= deadline:
                raise _Ended("bus_unavailable", exc, ExitCode.ERROR) from exc
            time.sleep(0.2)
