"""Run a child process and read its stdout as canonical events, with bounded waits everywhere."""

from __future__ import annotations

import os
import select
import selectors
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import IO, Any

from agentstream import protocol as p
from agentstream._children import (
    Foreground,
    GroupWatchdog,
    Strays,
    shell_status,
    signal_child,
    stop_process,
    stop_stragglers,
)
from agentstream._lines import Line, LineSplitter, LineTooLong
from agentstream._signals import SignalsHeld, start_thread
from agentstream.consumer.pipeline import CHUNK_BYTES, Ending, Pipeline, Turns
from agentstream.errors import ErrorCode, ExitCode

__all__ = ["Spawn", "spawn"]

_LONGEST_WAIT_S = 1.0
"""The reading loop never blocks longer: a signal that lands just before its wait is handled by then.

CPython runs a signal's handler when the main thread next executes bytecode; a
signal that arrives after that check but before a blocking call interrupts
nothing. The command line has a thread that cuts such a wait short
(``_signals.wake_main_thread_on_signals``); a program using ``spawn()`` has this.
"""


_STDERR_SETTLE_S = 0.25
"""Longest wait, before a chunk of stdout is read as events, for the stderr lines already written to be read.

Only bytes already in the pipe are waited for (a busy stderr thread catches up
in microseconds), so this bounds the wait for a callback that is slow to return.
"""

_STDERR_REST_S = 1.0
"""Longest wait, once the child has exited, for the stderr it wrote to be handled (its tail goes in the ending).

Only what is already in the pipe is waited for, never its end of file: a
grandchild that keeps stderr open costs nothing, so the reader's waits after the
child's exit stay within ``exit_timeout_s``.
"""


class _ChildBase:
    """What :class:`Spawn` and its async twin share: options, the pipeline, stderr, and how an end is told."""

    def __init__(
        self,
        argv: Sequence[str],
        dialect: str,
        *,
        stderr_as_logs: bool,
        on_stderr: Callable[[str], None] | None,
        cancel_grace_s: float,
        exit_timeout_s: float,
        max_line_bytes: int | None,
        cwd: str | None,
        new_process_group: bool,
        stderr_limit: int,
        turns: Turns = "one",
    ) -> None:
        self.argv = command_words(argv)
        self.stderr_as_logs = stderr_as_logs
        self.cancel_grace_s = cancel_grace_s
        self.exit_timeout_s = exit_timeout_s
        self.new_process_group = new_process_group
        self._pipeline = Pipeline(
            dialect,
            label=shlex.join(self.argv),
            cwd=cwd or os.getcwd(),
            max_line_bytes=max_line_bytes,
            turns=turns,
            command=self.argv,
        )
        self._stderr = _StderrTail(stderr_limit, on_stderr, self._on_stderr_line if stderr_as_logs else None)
        self._started_at = 0.0
        self._cancelled_with = 0
        self._stopped_hung = False
        self._stalled = False
        self._stall_timeout_s: float | None = None
        self._logs: deque[str] = deque()

    @property
    def stderr(self) -> str:
        """What the child wrote on stderr so far (its last ``stderr_limit`` characters)."""
        return self._stderr.text()

    @property
    def dialect(self) -> str | None:
        return self._pipeline.dialect

    @property
    def child_session(self) -> str | None:
        """The child's own session id (the one its CLI resumes) once its stream named one, whether it prints a
        start line with it (Codex's ``thread.started``) or names it on every line (opencode): ``None`` before, or
        when it names none."""
        return self._pipeline.named_session

    def _on_stderr_line(self, text: str) -> None:
        """Queue a stderr line as a log event and wake the reading loop."""
        self._logs.append(text)
        self._wake()

    def _wake(self) -> None:
        """Interrupt the reading loop's wait so queued logs go out now."""

    def _logs_now(self) -> Iterator[p.AnyEvent]:
        while self._logs:
            yield from self._pipeline.synthetic(p.Log(level="info", message=self._logs.popleft()))

    def _ending(self, status: int) -> Ending:
        """The synthetic end for a child that stopped without a result."""
        exit_code = 128 - status if status < 0 else status
        died = f"killed by {_signal_name(-status)}" if status < 0 else f"exit status {status}"
        details = {"exit_status": status, "stderr_tail": self._stderr.tail(2000)}
        took = int((time.monotonic() - self._started_at) * 1000)
        fix: str | None = "see the child's stderr (details.stderr_tail, or Spawn.stderr)"
        if self._cancelled_with and not self._stalled:
            code, subtype, fix = ErrorCode.INTERRUPTED, "interrupted", None
            message = f"cancelled with {_signal_name(self._cancelled_with)}: the child ended ({died}) without a result"
            exit_code = exit_code or 128 + self._cancelled_with
        elif self._stalled:
            code, subtype = ErrorCode.STALLED, "error"
            message = f"the child printed nothing for {self._stall_timeout_s:g}s and was stopped ({died})"
            exit_code, fix = ExitCode.TIMEOUT, "raise the stall timeout, or make the child show progress"
        elif self._stopped_hung:
            code, subtype = ErrorCode.STREAM_TRUNCATED, "error"
            message = (
                f"the child closed its output without a result and had not exited {self.exit_timeout_s:g}s later;"
                f" it was stopped ({died})"
            )
            # The signal was the reader's, not one sent to the run: 143 would say it was.
            exit_code = ExitCode.ERROR
        elif status == 0:
            code, subtype = ErrorCode.STREAM_TRUNCATED, "error"
            message = "the child exited with status 0 without a result event (its stream was cut short)"
            exit_code = ExitCode.ERROR
        elif (meaning := self._exit_meaning(status)) is not None:
            code, message, fix = meaning
            subtype = _SUBTYPES.get(code, "error")
        elif (
            signum := _interrupted_by(status)
        ) is not None:  # stopped from outside, as a person or a runner does
            code, subtype, fix = ErrorCode.INTERRUPTED, "interrupted", None
            message = f"the child was interrupted by {_signal_name(signum)} ({died}) before its result event"
        else:
            code, subtype = ErrorCode.PROCESS_CRASHED, "error"
            message = f"the child ended ({died}) before its result event"
        return Ending(code, message, exit_code, subtype, fix, details, took)

    def _exit_meaning(self, status: int) -> tuple[str, str, str] | None:
        """What the dialect's CLI documents ``status`` to mean (known once the dialect is: asked for, or read)."""
        name = self._pipeline.dialect
        if name is None or status <= 0:
            return None
        from agentstream.dialects import get_dialect

        return get_dialect(name).error_for_exit(status)


def _interrupted_by(status: int) -> int | None:
    """The interrupting signal a child's status shows: killed by SIGINT, SIGTERM or SIGHUP, or an exit with the
    shell's 128 + that signal (a CLI that ends itself on one, as Claude Code does on SIGTERM: 143)."""
    signum = -status if status < 0 else status - 128
    return signum if signum in _INTERRUPTING else None


_INTERRUPTING = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})

_SUBTYPES = {ErrorCode.INTERRUPTED: "interrupted", ErrorCode.MAX_TURNS: "max_turns"}
"""Result subtypes of the error codes a CLI's exit status can mean (any other: ``error``)."""


class PopenChild:
    """How a reader of a ``subprocess.Popen`` child reports it: pid, raw return code, shell status."""

    proc: subprocess.Popen[bytes] | None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def returncode(self) -> int | None:
        """The child's exit status once it has exited (negative: killed by that signal)."""
        return self.proc.poll() if self.proc is not None else None

    @property
    def exit_status(self) -> int | None:
        """The child's exit status as a shell reports it (128 + N when killed by signal N); None before."""
        return shell_status(self.returncode)


class Spawn(_ChildBase, PopenChild):
    """A child process whose stdout is read as a stream. Iterate it for canonical events.

    Bounded everywhere: after the child's ``result`` (or after its stdout closes)
    it gets ``exit_timeout_s`` to exit, then SIGTERM, then SIGKILL after
    ``cancel_grace_s``. With ``turns="many"`` (a two-way session that the
    caller feeds through ``stdin``) a ``result`` ends only its turn: reading goes
    on until the child closes its stdout or exits, and the caller ends the
    session by closing the child's stdin or calling :meth:`close`. With
    ``stall_timeout_s`` a child that writes no byte on stdout for that long while
    a turn is due (always with ``turns="one"``; while a turn is open with
    ``"many"``, since between turns it waits for its caller) is cancelled and its
    stream ends with a ``STALLED`` error (exit code 124); any output, a
    keep-alive or progress line included, is a sign of life. ``passthrough``
    sees every complete stdout line (newline included) before the reader does;
    a line it returns True for was handled by the caller and is not read as an
    event. stderr is drained by a thread (the child can never block
    on it); :attr:`stderr` keeps its last ``stderr_limit`` characters. With
    ``stderr_as_logs``, the stderr lines the child wrote before a piece of its
    stdout come before that piece's events (its ``result`` included).

    With ``new_process_group`` the child leads a process group of its own, which
    a watchdog process ends if this process dies without closing the Spawn (even
    by SIGKILL), so neither the child nor its children are left running; and,
    when this process has the terminal, that group gets the terminal while the
    child runs, so a CLI that reads its TTY or sets raw mode works as it would
    without the wrapper.
    """

    def __init__(
        self,
        argv: Sequence[str],
        dialect: str = "auto",
        *,
        stderr_as_logs: bool = False,
        on_stderr: Callable[[str], None] | None = None,
        cancel_grace_s: float = 3.0,
        exit_timeout_s: float = 5.0,
        max_line_bytes: int | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: int | IO[Any] | None = subprocess.DEVNULL,
        new_process_group: bool = False,
        stderr_limit: int = 1 << 20,
        turns: Turns = "one",
        stall_timeout_s: float | None = None,
        passthrough: Callable[[bytes], bool] | None = None,
    ) -> None:
        super().__init__(
            argv,
            dialect,
            stderr_as_logs=stderr_as_logs,
            on_stderr=on_stderr,
            cancel_grace_s=cancel_grace_s,
            exit_timeout_s=exit_timeout_s,
            max_line_bytes=max_line_bytes,
            cwd=cwd,
            new_process_group=new_process_group,
            stderr_limit=stderr_limit,
            turns=turns,
        )
        self._popen_kwargs: dict[str, Any] = {"cwd": cwd, "env": env, "stdin": stdin}
        self._stall_timeout_s = stall_timeout_s if stall_timeout_s and stall_timeout_s > 0 else None
        self._last_output = 0.0
        self._passthrough = passthrough
        self._partial = bytearray()
        self._max_partial = max_line_bytes or (8 << 20)
        self.proc: subprocess.Popen[bytes] | None = None
        self._launch_error: OSError | None = None
        self.stopped = False
        """Whether the Spawn had to stop the child itself (cancel, or it lingered): then its status is ours."""
        self._kill_timer: threading.Timer | None = None
        self._wake_r, self._wake_w = -1, -1
        self._wake_lock = threading.Lock()
        self._watchdog: GroupWatchdog | None = None
        self._strays: Strays | None = None
        self._foreground = Foreground()
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> Spawn:
        """Start the child (``__enter__`` and the first iteration do it); a missing binary is not raised."""
        if self._started_at:
            return self
        self._started_at = time.monotonic()
        with SignalsHeld():  # the child, and what stops it, in place before a signal can unwind this
            try:
                self.proc = subprocess.Popen(
                    self.argv,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    process_group=0 if self.new_process_group else None,
                    **self._popen_kwargs,
                )
            except OSError as exc:
                self._launch_error = exc
                return self
            if self.new_process_group:
                self._watchdog = GroupWatchdog(self.proc.pid, grace=self.cancel_grace_s)
                self._strays = Strays(self.proc.pid)
                self._foreground.give(self.proc.pid)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        assert self.proc.stderr is not None
        self._stderr.start(self.proc.stderr.fileno())
        return self

    def __enter__(self) -> Spawn:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def send_signal(self, signum: int) -> None:
        """Signal the child (its whole process group with ``new_process_group``) if it still runs."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        self.stopped = True
        signal_child(proc.pid, signum, group=self.new_process_group, strays=self._strays)

    def cancel(self, signum: int = signal.SIGTERM) -> None:
        """Ask the child to stop (SIGTERM by default), and SIGKILL it if it is still there after the grace period.

        Safe from any thread or a signal handler. The stream then ends with the
        child's own result if it sends one, else a synthetic ``INTERRUPTED`` one.
        """
        self._cancelled_with = self._cancelled_with or signum
        self.send_signal(signum)
        if self._kill_timer is None and self.proc is not None:
            self._kill_timer = threading.Timer(self.cancel_grace_s, self.send_signal, (signal.SIGKILL,))
            self._kill_timer.daemon = True
            start_thread(self._kill_timer)

    @property
    def stall_timeout_s(self) -> float | None:
        return self._stall_timeout_s

    @property
    def stalled(self) -> bool:
        """Whether the child was stopped for printing nothing for ``stall_timeout_s``."""
        return self._stalled

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def close(self) -> None:
        """Make sure the child is gone (bounded: terminate, then kill) and release the pipes."""
        proc = self.proc
        if proc is None or self._closed:
            return
        self._closed = True
        if proc.poll() is None:
            wait = self.exit_timeout_s if self._pipeline.finished else 0.0
            self._reap(wait)
        if self._strays is not None:
            self._strays.end(self.cancel_grace_s)
        self._foreground.take_back()
        if self._watchdog is not None:
            self._watchdog.release()
            self._watchdog = None
        if self._kill_timer is not None:
            self._kill_timer.cancel()
        self._stderr.settle(_STDERR_REST_S)
        assert proc.stderr is not None
        self._stderr.close_when_done(proc.stderr)
        with self._wake_lock:
            for fd in (self._wake_r, self._wake_w):
                if fd >= 0:
                    os.close(fd)
            self._wake_r = self._wake_w = -1
        assert proc.stdout is not None
        proc.stdout.close()

    def _reap(self, wait_s: float) -> int:
        """Wait up to ``wait_s`` for the child to exit, then SIGTERM, then SIGKILL; return its status."""
        assert self.proc is not None
        return stop_process(self.proc, wait_first=wait_s, grace=self.cancel_grace_s, send=self.send_signal)

    # -- events ------------------------------------------------------------------

    def __iter__(self) -> Iterator[p.AnyEvent]:
        self.start()
        pipeline = self._pipeline
        try:
            if self._launch_error is not None:
                yield from pipeline.finish(_launch_failure(self.argv[0], self._launch_error))
                return
            yield from self._pump()
            if pipeline.finished:
                self._drain_until_exit(time.monotonic() + self.exit_timeout_s)
                return
            status = self._wait_after_eof()
            self._stderr.settle(_STDERR_REST_S)  # the rest of stderr, for the ending
            yield from self._logs_now()
            yield from pipeline.finish(self._ending(status))
        finally:
            self.close()

    def _pump(self) -> Iterator[p.AnyEvent]:
        """Read stdout until the child's result, or EOF, or its exit with the pipe held open by a grandchild."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        os.set_blocking(fd, False)
        pipeline = self._pipeline
        self._last_output = time.monotonic()
        with _Watch(fd, self._wake_r, self.proc) as watch:
            while True:
                chunk = watch.next_chunk(self.exit_timeout_s, deadline=self._stall_deadline())
                if chunk is None:
                    self._check_stall()
                    yield from self._logs_now()
                    continue
                self._last_output = time.monotonic()
                if self.stderr_as_logs:  # what the child wrote on stderr before this output goes first
                    self._stderr.settle(_STDERR_SETTLE_S)
                    yield from self._logs_now()
                yield from self._read(chunk)
                if pipeline.finished:
                    return
                if not chunk:
                    if watch.held_open:
                        self._stop_stragglers()
                    return

    def _read(self, chunk: bytes) -> Iterator[p.AnyEvent]:
        """Events from the next chunk (``b""``: end of output), the lines ``passthrough`` takes left out.

        A line goes to ``passthrough`` only once the events of the lines before it have been taken from here,
        so that what the caller writes of it lands where the child wrote it (after a ``result`` it follows)."""
        pipeline = self._pipeline
        if self._passthrough is None:
            yield from pipeline.feed_chunk(chunk) if chunk else pipeline.end_of_input()
            return
        if not chunk:
            rest, self._partial = bytes(self._partial), bytearray()
            yield from (pipeline.feed_chunk(rest) if rest else []) + pipeline.end_of_input()
            return
        self._partial += chunk
        start = 0
        while (end := self._partial.find(b"\n", start)) >= 0:
            line = bytes(self._partial[start : end + 1])
            start = end + 1
            if not self._passthrough(line):
                yield from pipeline.feed_chunk(line)
        del self._partial[:start]
        if len(self._partial) > self._max_partial:  # no newline in sight: the reader judges the long line
            yield from pipeline.feed_chunk(bytes(self._partial))
            self._partial.clear()

    def _stall_deadline(self) -> float | None:
        """When the child's silence becomes a stall; None when no clock runs (off, fired, or between turns)."""
        if self._stall_timeout_s is None or self._stalled:
            return None
        if self._pipeline.turns == "many" and not self._pipeline.turn_open:
            return None
        return self._last_output + self._stall_timeout_s

    def _check_stall(self) -> None:
        deadline = self._stall_deadline()
        if deadline is not None and time.monotonic() >= deadline:
            self._stalled = True
            self.cancel(signal.SIGTERM)

    def _stop_stragglers(self) -> None:
        """The child is gone but something it started still holds our pipe: end that too."""
        if self._strays is not None and self.proc is not None and self.proc.stdout is not None:
            stop_stragglers(self.proc.pid, self._strays, self.proc.stdout.fileno())

    def _drain_until_exit(self, deadline: float) -> None:
        """After the result: discard further output until the child exits; stop it if it does not in time."""
        assert self.proc is not None and self.proc.stdout is not None
        with _Watch(self.proc.stdout.fileno(), -1, self.proc) as watch:
            while time.monotonic() < deadline:
                if watch.next_chunk(0.0, deadline=deadline) == b"":
                    if watch.held_open:  # the child is gone, what it started after its result is not
                        self._stop_stragglers()
                    break
        self._reap(max(0.0, deadline - time.monotonic()))

    def _wait_after_eof(self) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=self.exit_timeout_s)
        except subprocess.TimeoutExpired:
            self._stopped_hung = True
            return self._reap(0.0)

    def _wake(self) -> None:
        """From the stderr thread: a byte on the wake-up pipe ends the reading loop's wait."""
        with self._wake_lock:
            if self._wake_w < 0:
                return
            try:
                os.write(self._wake_w, b"\0")
            except BlockingIOError:
                pass  # the pipe is full: the loop is awake already


def spawn(argv: Sequence[str], dialect: str = "auto", **options: Any) -> Spawn:
    """Run ``argv`` and iterate its stdout as canonical events; see :class:`Spawn` for the options.

    ``with spawn(["gemini", "-p", "hi", "-o", "stream-json"]) as child: for event in child: ...``

    ``dialect="acp"`` drives an ACP agent through one prompt (``prompt=`` is required);
    see :class:`agentstream.consumer.acp_client.AcpSpawn`.
    """
    if dialect == "acp":
        from agentstream.consumer.acp_client import AcpSpawn

        return AcpSpawn(argv, **options)  # type: ignore[return-value]  # the same surface as Spawn
    return Spawn(argv, dialect, **options)


def command_words(argv: Sequence[str]) -> list[str]:
    """The command as a list of words; a string (a ``Sequence[str]`` too) would run a program named by its first letter."""
    if isinstance(argv, (str, bytes)):
        raise TypeError(
            f"spawn() takes the command as a list of words, such as {shlex.split(str(argv))[:3]!r}, not one string"
        )
    if not argv:
        raise ValueError("spawn() needs a command to run")
    return list(argv)


def _launch_failure(program: str, exc: OSError) -> Ending:
    """The shell's convention: 127 for a program that is not there, 126 for one that cannot run."""
    if isinstance(exc, FileNotFoundError):
        message, status, fix = (
            "command not found",
            ExitCode.NOT_FOUND,
            f"install {program}, or check that it is on PATH",
        )
    else:
        message, status = f"cannot run it: {exc.strerror or exc}", ExitCode.CANNOT_EXECUTE
        fix = f"check that {program} is an executable file (chmod +x)"
    return Ending(
        ErrorCode.CLI_NOT_FOUND, f"{program}: {message}", status, fix=fix, details={"errno": exc.errno}
    )


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class _Watch:
    """Waits on a child's stdout, a wake-up pipe and the child's exit at once.

    ``next_chunk`` returns bytes read, ``b""`` at end of output (or when the
    child has exited and its stdout stayed silent for ``linger_s``, held open by
    a grandchild), or ``None`` when only the wake-up pipe fired.
    """

    def __init__(self, fd: int, wake_fd: int, proc: subprocess.Popen[bytes]) -> None:
        self.fd, self.wake_fd, self.proc = fd, wake_fd, proc
        self.exited_at = 0.0
        self.held_open = False
        """True when the child exited but its stdout did not close within the linger time."""
        self._selector = selectors.DefaultSelector()
        self._selector.register(fd, selectors.EVENT_READ, "out")
        if wake_fd >= 0:
            self._selector.register(wake_fd, selectors.EVENT_READ, "wake")
        self._pidfd = _pidfd(proc.pid)
        if self._pidfd >= 0:
            self._selector.register(self._pidfd, selectors.EVENT_READ, "exit")

    def __enter__(self) -> _Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self._selector.close()
        if self._pidfd >= 0:
            os.close(self._pidfd)

    def next_chunk(self, linger_s: float, deadline: float | None = None) -> bytes | None:
        while True:
            timeout = self._timeout(linger_s, deadline)
            ready = self._selector.select(timeout)
            woken = False
            for key, _ in ready:
                if key.data == "out":
                    try:
                        return os.read(self.fd, CHUNK_BYTES)
                    except BlockingIOError:
                        continue
                if key.data == "exit":
                    self._note_exit()
                else:
                    os.read(self.wake_fd, 4096)
                    woken = True
            if woken:
                return None
            if not self.exited_at and self.proc.poll() is not None:
                self._note_exit()
            now = time.monotonic()
            if self.exited_at and now - self.exited_at >= linger_s:
                self.held_open = True
                return b""
            if deadline is not None and now >= deadline:
                return None

    def _note_exit(self) -> None:
        if self._pidfd >= 0:
            self._selector.unregister(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
        self.exited_at = self.exited_at or time.monotonic()

    def _timeout(self, linger_s: float, deadline: float | None) -> float:
        now = time.monotonic()
        limits = [now + _LONGEST_WAIT_S]
        if self.exited_at:
            limits.append(self.exited_at + linger_s)
        elif self._pidfd < 0:
            limits.append(now + 0.2)  # no pidfd on this system: poll for the exit
        if deadline is not None:
            limits.append(deadline)
        return max(0.0, min(limits) - now)


def _pending_bytes(fd: int) -> int:
    """How many bytes wait unread in the pipe ``fd`` (0 when that cannot be told)."""
    import fcntl  # here: only a reader that settles stderr needs them
    import termios

    try:
        return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder, signed=True)
    except OSError:
        return 0


def _pidfd(pid: int) -> int:
    """A descriptor that becomes readable when ``pid`` exits (Linux), or -1."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return -1


class _StderrTail:
    """Drains a child's stderr in a thread: keeps the tail, echoes lines, feeds log events.

    The thread counts the bytes it has taken from the pipe and the bytes it has
    handled, so that :meth:`settle` can wait for exactly what the child wrote
    before a given moment, never for what it may write later.
    """

    def __init__(
        self,
        limit: int,
        echo: Callable[[str], None] | None,
        to_log: Callable[[str], None] | None,
    ) -> None:
        self.limit = limit
        self._callbacks = [cb for cb in (echo, to_log) if cb is not None]
        self._lines: deque[str] = deque()
        self._size = 0
        self._thread: threading.Thread | None = None
        self._splitter = LineSplitter(max_line_bytes=limit)
        self._fd = -1
        self._progress = threading.Condition()
        self._taken = 0
        """Bytes read from the pipe (a read and this count change together, under ``_progress``)."""
        self._handled = 0
        """Bytes whose complete lines have gone to the callbacks."""
        self._ended = False
        self._pipe: IO[bytes] | None = None
        """The pipe to close when the draining ends (set by :meth:`close_when_done`)."""

    def start(self, fd: int) -> None:
        self._fd = fd
        self._thread = start_thread(
            threading.Thread(target=self._run, args=(fd,), name="agentstream-stderr", daemon=True)
        )

    def close_when_done(self, pipe: IO[bytes]) -> None:
        """Close ``pipe`` now if the draining has ended, else as soon as it ends.

        A grandchild may hold stderr open long after the child is gone; the thread
        still polls the pipe then, so it closes it itself, and nobody waits for it.
        """
        with self._progress:
            if self._thread is not None and not self._ended:
                self._pipe = pipe
                return
        pipe.close()

    def settle(self, timeout: float) -> None:
        """Wait until the lines the child had written on stderr by now are handled (bounded by ``timeout``).

        Only what is already in the pipe is waited for, so a child that keeps its
        stderr open and quiet costs nothing: a reader calls this before it takes
        the child's result, so stderr written before that result comes before it.
        """
        deadline = time.monotonic() + timeout
        with self._progress:
            if self._thread is None or self._ended:
                return
            target = self._taken + _pending_bytes(self._fd)
            while self._handled < target and not self._ended:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._progress.wait(remaining)

    def _run(self, fd: int) -> None:
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            while True:
                poller.poll()  # data, end of file or an error: the read below does not block
                with self._progress:
                    try:
                        chunk = os.read(fd, CHUNK_BYTES)
                    except OSError:
                        break
                    self._taken += len(chunk)
                self.feed(chunk)
                with self._progress:
                    self._handled += len(chunk)
                    self._progress.notify_all()
                if not chunk:
                    break
        finally:
            with self._progress:
                self._ended = True
                self._progress.notify_all()
                if self._pipe is not None:
                    self._pipe.close()

    def feed(self, chunk: bytes) -> None:
        """The next chunk of stderr (``b""`` at its end), from the thread or an async reader."""
        for item in self._splitter.feed(chunk) if chunk else self._splitter.close():
            self._add(item)

    def _add(self, item: Line | LineTooLong) -> None:
        if isinstance(item, LineTooLong):
            text = f"[a stderr line of {item.size} bytes was left out]"
        else:
            text = item.data.decode("utf-8", "replace")
        self._lines.append(text)
        self._size += len(text) + 1
        while self._size > self.limit and len(self._lines) > 1:
            self._size -= len(self._lines.popleft()) + 1
        for callback in self._callbacks:
            try:
                callback(text)
            except Exception:
                pass  # a broken callback must not stop the draining, or the child would block

    def text(self) -> str:
        return "".join(line + "\n" for line in list(self._lines))

    def tail(self, chars: int) -> str:
        return self.text()[-chars:]
