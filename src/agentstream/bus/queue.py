"""Jobs: prompts queued on the bus and run by workers on any number of machines.

A job's attempt ``k`` is one run: ``RUN`` for the first, ``RUN.k`` after that,
each executed as a child process ``agentstream exec PROMPT … --session-id RUN
--bus URL`` that publishes its own events. The worker heartbeats the claim while
the child runs.

A job's final status is what its last attempt's run says: succeeded when that run
succeeded, else failed. When a worker stops heartbeating for ``idle_timeout``
(killed, frozen, machine gone), another worker takes the job over — deciding and
counting nothing yet — and settles the lost attempt (:func:`lost_attempt_outcome`):

* it closes the run if it has no ``result`` yet — a synthetic ``error``
  (``WORKER_LOST``) and ``result`` (subtype ``worker_lost``) whose
  ``next_actions`` point at the retry — after which the bus refuses any late
  event from the old child;
* then it reads how the run ended, whoever ended it: the old child's own
  ``result`` may have landed first (its worker was slow to acknowledge, or the
  result raced the takeover). A run that succeeded makes the job succeeded, one
  that failed or was cancelled on its own makes it failed; only a run cut short
  by its lost worker (``worker_lost``, or interrupted by the worker's stop) runs
  again, as attempt ``k+1`` in run ``RUN.k+1`` (``job_id`` and ``attempt`` are
  on both runs' metadata), or, past ``max_attempts``, fails the job.

A child that exits without a ``result`` (crash, command not found) gets a
synthetic ``PROCESS_CRASHED`` ending; the job then takes its run's outcome. Only
a lost worker causes a retry: a run that fails is an answer, not a fault.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from agentstream import protocol as p
from agentstream._children import GroupWatchdog, orphan_guard
from agentstream._signals import SignalsHeld
from agentstream.actions import follow_action
from agentstream.bus import (
    DEFAULT_RETRY_S,
    RETRY_ENV,
    BusUnavailable,
    BusUnusable,
    Claim,
    Job,
    Record,
    RunInfo,
    SeqConflict,
    bus_seconds,
    open_bus,
)
from agentstream.ending import ending_events, tally_of
from agentstream.errors import AgentstreamError, ErrorCode, ExitCode, UsageError

if TYPE_CHECKING:
    from agentstream.bus import Bus
    from agentstream.stream import Stream

__all__ = [
    "EXEC_ENV",
    "Worker",
    "WorkerOptions",
    "cancel_run",
    "close_run",
    "exec_command",
    "lost_attempt_outcome",
    "new_job",
]

CANCELLED: Final = "cancelled"
"""The ``result.subtype`` of a run ended by :func:`cancel_run`."""
WORKER_LOST: Final = "worker_lost"
"""The ``result.subtype`` of a run ended for the worker that ran it, by the worker that took its job over."""
EXEC_ENV: Final = "AGENTSTREAM_WORKER_EXEC"
"""A command line that replaces ``python -m agentstream exec`` for every job (e.g. another agent)."""

BUS_RETRY_FIRST_S: Final = 0.5
BUS_RETRY_MAX_S: Final = 8.0
"""The worker's backoff while the bus is unreachable: 0.5 s, doubling, at most this."""
STOP_GRACE_S: Final = 5.0
"""How long a job's processes get between SIGTERM and SIGKILL when the worker stops them."""


def exec_command(text: str | None = None) -> list[str]:
    """The argv prefix of every job: ``text``, else ``$AGENTSTREAM_WORKER_EXEC``, else ``python -m agentstream exec``."""
    chosen = (text or os.environ.get(EXEC_ENV, "")).strip()
    if not chosen:
        return [sys.executable, "-m", "agentstream", "exec"]
    try:
        return shlex.split(chosen)
    except ValueError as exc:
        raise UsageError(f"cannot parse the job command {chosen!r}: {exc}", fix="check its quotes") from None


def new_job(prompt: str, args: Sequence[str]) -> Job:
    return Job(job_id=p.new_id("job"), run_id=p.new_id("ses"), prompt=prompt, args=list(args))


def close_run(
    bus: Bus,
    run_id: str,
    error: AgentstreamError,
    *,
    subtype: str,
    command: str,
    details: Any = p.UNSET,
    next_actions: Sequence[p.NextAction] = (),
    only_at: int | None = None,
) -> bool:
    """End a run that has no ``result`` with a synthetic fatal ``error`` + ``result``; False if it had one.

    Appends right after the run's last stored event (a ``start`` first if it has
    none), retrying when its producer slips in another event meanwhile; with
    ``only_at``, only while the run's next ``seq`` is that one, with no retry.
    """
    for _ in range(20 if only_at is None else 1):
        info = bus.get_run(run_id)
        if info is not None and info.terminal:
            return False
        next_seq = info.last_seq + 1 if info is not None else 0
        if only_at is not None and next_seq != only_at:
            return False
        ending = _ending(bus, run_id, next_seq, error, subtype, command, details, next_actions)
        if next_seq == 0:
            ending.insert(0, p.Start(command=command))
        try:
            bus.append(run_id, _stamped(run_id, next_seq, ending), if_next_seq=next_seq)
            return True
        except SeqConflict:
            time.sleep(0.01)
    return False


def cancel_run(bus: Bus, run_id: str, *, by: str) -> bool:
    """End a queued or live run as interrupted (subtype ``cancelled``); False if it had already ended.

    The bus then refuses the run's producer any further event; a worker running
    it as a job stops its child at the next heartbeat, and a job still queued is
    dropped when a worker takes it.
    """
    error = AgentstreamError(
        f"the run was cancelled by {by}",
        code=ErrorCode.INTERRUPTED,
        fix="submit the prompt again to run it anew",
    )
    error.exit_code = ExitCode.SIGINT
    return close_run(bus, run_id, error, subtype=CANCELLED, command="exec")


LostAttemptOutcome = Literal["succeeded", "failed", "cancelled", "retry"]


def lost_attempt_outcome(info: RunInfo | None) -> LostAttemptOutcome | None:
    """What a job taken over from a lost worker does, by how its lost attempt's run ended (after the takeover
    closed it, if it could): the one rule of every backend.

    The run's own ending is the job's answer — ``succeeded``, ``cancelled`` (by :func:`cancel_run`), or
    ``failed`` (a crash, an error) — whatever became of the worker that ran it. A run cut short with its
    worker (the ``worker_lost`` ending of a takeover, or ``interrupted`` by the worker's stop) is retried.
    ``None`` while the run is still open: its child, still alive, keeps writing, and will end it.
    """
    if info is None:  # gone (retention): nothing says it ended on its own
        return "retry"
    if not info.terminal:
        return None
    if info.status == "succeeded":
        return "succeeded"
    if info.subtype == CANCELLED:
        return "cancelled"
    return "retry" if info.subtype == WORKER_LOST or info.status == "interrupted" else "failed"


def _ending(
    bus: Bus,
    run_id: str,
    next_seq: int,
    error: AgentstreamError,
    subtype: str,
    command: str,
    details: Any,
    next_actions: Sequence[p.NextAction],
) -> list[p.Event]:
    """The whole ending of the stored run: its open tool calls and delta runs closed, then error and result."""
    tally = tally_of((record.type, record.line) for record in _stored(bus, run_id, next_seq))
    info = p.ErrorInfo(code=str(error.code), message=error.message, fix=error.fix or p.UNSET)
    return ending_events(
        tally,
        info,
        exit_code=int(error.exit_code),
        subtype=subtype,
        details=details,
        command=command,
        next_actions=next_actions,
    )


def _stored(bus: Bus, run_id: str, end: int) -> Iterator[Record]:
    """The run's stored records below ``end``, a page at a time."""
    seq = 0
    while seq < end:
        page = bus.read(run_id, seq, limit=1000)
        if not page:
            return
        yield from (record for record in page if record.seq < end)
        seq = page[-1].seq + 1


def _stamped(run_id: str, next_seq: int, made_up: list[p.Event]) -> list[Record]:
    """Records for events the worker makes up in someone else's run: stamped there, marked synthetic."""
    sequencer = p.Sequencer(run_id, next_seq)
    records = []
    for event in made_up:
        event.synthetic = True
        sequencer.stamp(event)
        records.append(Record(event.seq, event.type, p.encode(event)))
    return records


@dataclass
class WorkerOptions:
    bus_url: str | None
    concurrency: int = 1
    idle_timeout: float = 30.0
    max_attempts: int = 3
    max_jobs: int | None = None
    grace: float = 30.0
    command: list[str] = field(default_factory=exec_command)
    bus_retry: float = field(default_factory=lambda: bus_seconds(RETRY_ENV, DEFAULT_RETRY_S))
    """How long an unreachable bus is retried before the worker gives up."""

    @property
    def heartbeat_every(self) -> float:
        return min(self.idle_timeout / 4, 5.0)


class Worker:
    """Claims jobs and runs each as a child process, reporting on its own stream."""

    def __init__(self, options: WorkerOptions, stream: Stream) -> None:
        self.options = options
        self.stream = stream
        self.name = f"{socket.gethostname()}-{os.getpid()}-{os.urandom(2).hex()}"
        self.started = 0
        self._active: dict[str, _JobRun] = {}
        self._lock = threading.Condition()
        self._outage_since = 0.0
        self._retry_in = BUS_RETRY_FIRST_S

    def serve(self) -> None:
        """Run jobs until ``max_jobs`` have been taken (forever by default)."""
        bus = open_bus(self.options.bus_url)
        try:
            while self.options.max_jobs is None or self.started < self.options.max_jobs:
                if not self._wait_for_slot(timeout=0.5):
                    continue
                # A job claimed is a job started: a signal in between would leave it claimed and never run,
                # its attempt counted, until another worker reclaimed it as lost.
                with SignalsHeld():
                    claim, pause = self._claim(bus)
                    if claim is not None:
                        self._start(claim)
                time.sleep(pause)  # the backoff of an outage, outside the block: signals do not wait for it
            self.wait_all(None)
        finally:
            bus.close()

    def _wait_for_slot(self, timeout: float) -> bool:
        with self._lock:
            if len(self._active) < self.options.concurrency:
                return True
            self._lock.wait(timeout)
            return len(self._active) < self.options.concurrency

    def _claim(self, bus: Bus) -> tuple[Claim | None, float]:
        """One claim attempt (blocking briefly), and how long to wait before the next.

        An unreachable bus is retried with backoff, one recoverable ``error`` per
        attempt (with ``retry_in_ms``), and given up — :class:`BusUnavailable`
        ends the worker — once it has been unreachable for ``bus_retry`` seconds.
        """
        try:
            claim = bus.claim(self.name, idle_timeout=self.options.idle_timeout, block=0.5)
        except BusUnusable:
            raise  # no retry mends it
        except BusUnavailable as exc:
            now = time.monotonic()
            self._outage_since = self._outage_since or now
            if now - self._outage_since + self._retry_in > self.options.bus_retry:
                raise BusUnavailable(
                    f"{exc.message}; gave up after {now - self._outage_since:.0f}s of retries",
                    fix=f"start the bus, then the worker again (${RETRY_ENV} sets how long it retries)",
                ) from exc
            self.stream.error(exc.code, exc.message, fix=exc.fix, retry_in_ms=int(self._retry_in * 1000))
            pause, self._retry_in = self._retry_in, min(self._retry_in * 2, BUS_RETRY_MAX_S)
            return None, pause
        if self._outage_since:
            self.stream.status("bus_available", "the bus is reachable again")
            self._outage_since, self._retry_in = 0.0, BUS_RETRY_FIRST_S
        return claim, 0.0

    def _start(self, claim: Claim) -> None:
        job_run = _JobRun(self, claim)
        with self._lock:
            self._active[claim.job.job_id] = job_run
        self.started += 1
        job_run.thread.start()  # not start_thread: the job's child would inherit its blocked signals

    def finished(self, job_run: _JobRun) -> None:
        with self._lock:
            self._active.pop(job_run.claim.job.job_id, None)
            self._lock.notify_all()

    def wait_all(self, timeout: float | None) -> bool:
        """Wait for running jobs; True if none is left."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._active:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._lock.wait(remaining if remaining is not None else 1.0)
        return True

    def cancel_all(self) -> None:
        """SIGTERM every child; their runs end interrupted and their jobs are left to be reclaimed."""
        with self._lock:
            running = list(self._active.values())
        for job_run in running:
            job_run.cancel()


class _JobRun:
    """One claimed job in its own thread: settle a lost attempt, run the child, heartbeat, finish."""

    def __init__(self, worker: Worker, claim: Claim) -> None:
        self.worker = worker
        self.claim = claim
        self.options = worker.options
        self.proc: subprocess.Popen[bytes] | None = None
        self.watchdog: GroupWatchdog | None = None
        self.cancelled = False
        self._outage = False
        """Whether the last heartbeat found the bus unreachable (said once on the worker's stream)."""
        self.thread = threading.Thread(target=self._main, name=f"job-{claim.job.job_id}", daemon=True)

    def _event(self, name: str, **data: Any) -> None:
        self.worker.stream.event(
            name, {"job_id": self.claim.job.job_id, "attempt": self.claim.attempt, **data}
        )

    def _main(self) -> None:
        try:
            with open_bus(self.options.bus_url) as bus:
                self._run(bus)
        except AgentstreamError as exc:
            self.worker.stream.error(exc.code, f"job {self.claim.job.job_id}: {exc.message}", fix=exc.fix)
        finally:
            self.worker.finished(self)

    def _run(self, bus: Bus) -> None:
        if self.claim.run_id is None:  # taken over from a lost worker
            retried = self._settle_lost(bus, self.claim)
            if retried is None:
                return
            self.claim = retried
        claim = self.claim
        assert claim.run_id is not None  # a first attempt, or a retry
        if _cancelled(bus, claim.run_id):  # cancelled before it started
            bus.finish_job(claim, "failed")
            self._event("job.cancelled", run_id=claim.run_id)
            return
        bus.register_run(claim.run_id, command="exec", job_id=claim.job.job_id, attempt=claim.attempt)
        code = self._execute(bus, claim.run_id)
        if code is None:
            return
        self._finish(bus, claim.run_id, code)

    def _settle_lost(self, bus: Bus, claim: Claim) -> Claim | None:
        """End the lost attempt's run if it has no ``result``, then act on how it ended
        (:func:`lost_attempt_outcome`): the claim of the job's next attempt, or None once the job is settled —
        or left to be taken over again while the lost run's child still writes it."""
        lost = claim.previous_run_id
        assert lost is not None  # a takeover names its lost attempt's run
        retry = (
            claim.job.attempt_run_id(claim.attempt + 1) if claim.attempt < self.options.max_attempts else None
        )
        self._close_lost(bus, lost, retry)
        outcome = lost_attempt_outcome(bus.get_run(lost))
        if outcome is None:
            self._event("job.unsettled", lost_run_id=lost, reason="its run is still being written")
            return None
        if outcome == "retry" and retry is not None:
            retried = bus.retry_job(claim)
            if retried is None:
                self._event("job.lost", run_id=lost, reason="another worker took the job over")
                return None
            self._event("job.reclaimed", lost_run_id=lost, run_id=retry)
            return retried
        status = "succeeded" if outcome == "succeeded" else "failed"
        if not bus.finish_job(claim, status):
            self._event("job.lost", run_id=lost, reason="another worker took the job over")
            return None
        self._event("job.reclaimed", lost_run_id=lost, run_id=None)
        if outcome == "retry":
            self._event(
                "job.failed", run_id=lost, reason=f"no attempts left after {self.options.max_attempts}"
            )
        else:
            name = "job.cancelled" if outcome == "cancelled" else f"job.{status}"
            self._event(name, run_id=lost, note="the lost worker's run had ended")
        return None

    def _close_lost(self, bus: Bus, lost: str, retry: str | None) -> None:
        """End the lost attempt's run with ``WORKER_LOST`` unless it has a ``result``; the bus then refuses
        its old child any later event."""
        outcome = f"retried as run {retry} (attempt {self.claim.attempt + 1} of {self.options.max_attempts})"
        if retry is None:
            outcome = f"not retried: all {self.options.max_attempts} attempts are used"
        error = AgentstreamError(
            f"the worker running this job stopped heartbeating for {self.options.idle_timeout:g}s; {outcome}",
            code=ErrorCode.WORKER_LOST,
            fix=f"follow run {retry}"
            if retry
            else "submit the prompt again, or raise the workers' --max-attempts",
        )
        close_run(
            bus,
            lost,
            error,
            subtype=WORKER_LOST,
            command="exec",
            details={"job_id": self.claim.job.job_id, "attempt": self.claim.attempt, "retry_run_id": retry},
            next_actions=[follow_action(retry, description="follow the retry")] if retry else [],
        )

    def _execute(self, bus: Bus, run_id: str) -> int | None:
        """Run the child to its end, heartbeating; None if the claim was lost or the job cancelled."""
        argv = [*self.options.command, self.claim.job.prompt, *self.claim.job.args]
        argv += ["--session-id", run_id]
        try:
            # The bus by the environment, not the command line, which every user of the machine can read
            # (a Redis URL may hold a password).
            self.proc = _spawn(argv, _job_environment(self.options.bus_url))
        except OSError as exc:
            error = AgentstreamError(
                f"cannot start {argv[0]}: {exc}", code=ErrorCode.CLI_NOT_FOUND, fix=f"check ${EXEC_ENV}"
            )
            close_run(bus, run_id, error, subtype="error", command="exec")
            return 127
        except ValueError as exc:  # a NUL in the prompt or an option, from a submitter that did not check
            error = AgentstreamError(
                f"cannot start the job's command: {exc} in its prompt or options",
                code=ErrorCode.INVALID_INPUT,
                fix="submit the prompt again without NUL characters",
            )
            close_run(bus, run_id, error, subtype="error", command="exec")
            return 2
        proc = self.proc
        watchdog = self.watchdog = GroupWatchdog(proc.pid, grace=STOP_GRACE_S)
        self._event("job.started", run_id=run_id, pid=proc.pid)
        try:
            return self._supervise(bus, run_id, proc)
        finally:
            # However the job ended (its child exited, the bus failed us mid-job), nothing of it goes on:
            # whatever the child left running in its group would outlive the job on a machine left unattended.
            watchdog.fire()
            proc.wait()  # a fired watchdog SIGKILLs the group after its grace period
            watchdog.release()

    def _supervise(self, bus: Bus, run_id: str, proc: subprocess.Popen[bytes]) -> int | None:
        """Heartbeat until the child exits (its status), or None once the claim is lost or the job cancelled."""
        while True:
            try:
                return proc.wait(timeout=self.options.heartbeat_every)
            except subprocess.TimeoutExpired:
                pass
            if self.cancelled:
                continue
            if not self._heartbeat(bus):
                self._event("job.lost", run_id=run_id, reason="another worker took the job over")
                self._stop_child()
                return None
            if _cancelled(bus, run_id):  # cancelled: the bus already refuses the child's events
                self._stop_child()
                bus.finish_job(self.claim, "failed")
                self._event("job.cancelled", run_id=run_id)
                return None

    def _finish(self, bus: Bus, run_id: str, code: int) -> None:
        if self.cancelled:
            self._event("job.cancelled", run_id=run_id, exit_code=code)
            return
        crashed = AgentstreamError(
            f"the job's process exited with status {code} without finishing its run",
            code=ErrorCode.PROCESS_CRASHED,
            fix="see the worker's stderr for the process's own messages",
        )
        close_run(bus, run_id, crashed, subtype="process_crashed", command="exec")
        info = bus.get_run(run_id)
        status = "succeeded" if info is not None and info.status == "succeeded" else "failed"
        if bus.finish_job(self.claim, status):
            self._event(f"job.{status}", run_id=run_id, exit_code=code)

    def _heartbeat(self, bus: Bus) -> bool:
        """True unless the bus says the claim is lost. An unreachable bus is not a lost claim: the worker's
        stream says so once (a recoverable ``BUS_UNAVAILABLE``), and says when it is back. A bus that no retry
        mends (:class:`BusUnusable`) is raised: the job is given up (its child stopped) with that error."""
        try:
            held = bus.heartbeat(self.claim)
        except BusUnusable:
            raise
        except BusUnavailable as exc:
            if not self._outage:
                self._outage = True
                retry_in_ms = int(self.options.heartbeat_every * 1000)
                self.worker.stream.error(
                    exc.code,
                    f"job {self.claim.job.job_id}: {exc.message}",
                    fix=exc.fix,
                    retry_in_ms=retry_in_ms,
                )
            return True
        if self._outage:
            self._outage = False
            self.worker.stream.status("bus_available", "the bus is reachable again")
        return held

    def cancel(self) -> None:
        self.cancelled = True
        self._stop_child()

    def _stop_child(self) -> None:
        """SIGTERM the job's whole process group, then SIGKILL it after the grace period (in the background).

        The group, not just the child: a grandchild left running would go on
        working on a job that another worker may already be retrying.
        """
        watchdog = self.watchdog
        if watchdog is not None:
            watchdog.fire()


def _cancelled(bus: Bus, run_id: str) -> bool:
    """True when :func:`cancel_run` ended the run; an unreachable bus says no, an unusable one is raised."""
    try:
        info = bus.get_run(run_id)
    except BusUnusable:
        raise
    except BusUnavailable:
        return False
    return info is not None and info.terminal and info.subtype == CANCELLED


def _job_environment(bus_url: str | None) -> dict[str, str]:
    """The job's environment: its bus, and word that this worker has reached it (:data:`REACHED_ENV`).

    A failure to reach the bus is then an outage to wait out for the retry window, not a bus never reached
    (given up after the connect timeout, which lost a whole run to a Redis restart as the job began). The
    connect timeout itself stays the one every client has: it also bounds each Redis reply, so a longer one
    would let one stalled command hold the job's child that long.
    """
    from agentstream.bus import BUS_ENV, REACHED_ENV

    environment = {**os.environ, REACHED_ENV: "1"}
    if bus_url:
        environment[BUS_ENV] = bus_url
    return environment


def _spawn(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start a job's child in a process group of its own: stdout discarded (it publishes to the bus),
    stderr shared, no stdin.

    Its own group so that the job's processes, grandchildren included, can be
    ended together (:class:`GroupWatchdog`, also when the worker dies); the
    guard covers the child itself until the watchdog is up.
    """
    return subprocess.Popen(
        orphan_guard(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, process_group=0, env=env
    )
