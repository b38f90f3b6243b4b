"""The producer: a stream that is always well-formed and always terminated.

``with Stream("my-tool") as s:`` emits ``start`` on entry and exactly one
``result`` on every way out — normal return, exception, ``sys.exit(n)``,
SIGINT/SIGTERM/SIGHUP, a cancelled asyncio task, or the reader closing the
pipe — and makes the process exit with ``result.exit_code`` (141 or 1 instead when the output itself could
not be written: see :class:`~agentstream.render.OutputFailed`). A signal that
arrives after the ``result`` is written does not change the exit code. Every event is written and flushed when it is
emitted, through one write per line, under a lock, so threads and asyncio tasks
may emit concurrently without torn lines or gaps in ``seq``.

When the Stream owns the process (it writes to the real stdout, the default),
it also moves file descriptor 1 to stderr for the rest of the run, so that no
stray ``print`` or library output can reach the reader of the stream.
"""

from __future__ import annotations

import atexit
import errno
import io
import math
import os
import signal
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import IO, Any, Final, Literal, TypeVar, cast, get_args

import msgspec

from agentstream import _signals
from agentstream import protocol as p
from agentstream._accel import speedups
from agentstream._signals import HeldSignal, Interrupted, SignalHandlers
from agentstream.ending import closing_events, process_exit_code
from agentstream.errors import AgentstreamError, ErrorCode, ExitCode, error_text, exit_code_for_signal
from agentstream.render import (
    ColorChoice,
    FdWriter,
    FileWriter,
    OutputError,
    OutputFailed,
    OutputFormat,
    Sink,
    Writer,
    make_sink,
    output_failure,
)
from agentstream.transcript import TALLY_KINDS, Tally, tally_add

__all__ = ["Interrupted", "Stream", "ToolCallScope", "fail_before_start", "stream_was_written"]

E = TypeVar("E", bound=p.Event)
Observer = Callable[[p.Event], None]


class ToolCallScope:
    """What ``Stream.tool_call`` yields: set the outcome, or let it default to success."""

    def __init__(self, stream: Stream, call: p.ToolCall) -> None:
        self.stream = stream
        self.call = call
        self.output: str | None = None
        self.error: str | None = None
        self.status: p.ToolStatus = "success"
        self.truncated: bool | None = None

    def progress(self, content: str) -> None:
        if type(content) is not str:
            _text("content", content)
        self.stream.emit(p.ToolProgress(call_id=self.call.call_id, content=content))

    def succeed(self, output: str, *, truncated: bool | None = None) -> None:
        _text("output", output)
        _flag("truncated", truncated, optional=True)
        self.status, self.output, self.truncated = "success", output, truncated

    def fail(self, error: str, *, status: p.ToolStatus = "error", output: str | None = None) -> None:
        _text("error", error)
        _choice("status", status, _TOOL_STATUSES)
        _text("output", output, optional=True)
        self.status, self.error, self.output = status, error, output


class Stream:
    """A producer of one protocol v1 session.

    Parameters
    ----------
    command:
        What is running, echoed in ``start`` (e.g. ``"exec"``).
    output_format:
        ``stream-json`` (default), ``json`` or ``text``.
    dialect:
        With ``stream-json``, write another tool's wire format instead of the canonical one.
    dialect_options:
        Keyword arguments for that dialect's writer (its ``encoder()``), such as ``{"partial_messages": False}``
        for Claude Code's lines without ``--include-partial-messages``.
    out:
        A file descriptor or binary file. Defaults to the process's stdout, in which
        case the Stream owns the process (signals, exit code, stdout isolation).
    owns_process:
        Override that default, e.g. to write to stdout from a thread of a larger program.
    redact:
        Called with every event before it is stamped, written or observed, to scrub
        secrets from it in place: one place that every event of the run passes
        (``exec`` passes its configured secrets' redactor).
    follows:
        The previous turn's Stream in a session of many turns on the same output. A
        dialect's writer goes on from it, as one writer writes a whole session in
        ``convert``: Claude Code's ``total_cost_usd``, say, is the session's running total.
    """

    # Set on the instance only once the result is written: each attribute an instance starts with makes
    # every attribute lookup in emit() dearer (past about 27 of them, measurably).
    _result_thread: int = 0
    """The thread that wrote the result on purpose (0: a signal's ending): it may not emit after it."""
    _dropped: bool = False
    """Whether an event that came after the result was dropped (said once on stderr)."""
    _owes_exit: bool = False
    """Ended by a cancelled asyncio task, whose CancelledError goes on: the process exits with the code at its end."""
    _output_fd: int = -1
    """The output's descriptor, when it has one (see :meth:`_output_is_stuck`)."""
    _forked: bool = False
    """This process is a fork of the one running the stream (:func:`_in_forked_child`): it writes nothing."""
    _after: Sink | None = None
    """The sink of the turn this stream follows (``follows``), whose dialect writer it goes on with."""
    _dialect_options: Mapping[str, Any] | None = None
    """What the dialect's writer is made with (``dialect_options``), when the stream was given any."""

    def __init__(
        self,
        command: str,
        *,
        output_format: OutputFormat = "stream-json",
        dialect: str | None = None,
        out: int | IO[bytes] | None = None,
        err: IO[str] | None = None,
        owns_process: bool | None = None,
        session_id: str | None = None,
        cwd: str | None = None,
        model: str | None = None,
        provider: str | None = None,
        tools: Sequence[str] = (),
        parent_session_id: str | None = None,
        permission_mode: str | None = None,
        color: ColorChoice | bool | None = None,
        redact: Callable[[p.Event], None] | None = None,
        follows: Stream | None = None,
        dialect_options: Mapping[str, Any] | None = None,
    ) -> None:
        _text("command", command)
        if follows is not None and not isinstance(follows, Stream):
            raise TypeError(f"follows must be the previous turn's Stream, not {type(follows).__name__}")
        for name, value in (
            ("session_id", session_id),
            ("cwd", cwd),
            ("model", model),
            ("provider", provider),
            ("parent_session_id", parent_session_id),
            ("permission_mode", permission_mode),
        ):
            _text(name, value, optional=True)
        if isinstance(tools, str) or not all(type(tool) is str for tool in tools):
            raise TypeError(f"tools must be a sequence of str (tool names), not {tools!r}")
        if isinstance(out, io.TextIOBase):
            raise TypeError(
                "out must be a file descriptor or a binary file (lines are bytes): pass its .buffer"
                " (sys.stdout.buffer), or open the file with 'wb'"
            )
        self.command = command
        self._redact = redact
        self.output_format = output_format
        self.owns_process = out is None if owns_process is None else owns_process
        self._out_spec = out
        self._err = err
        if dialect is not None:
            from agentstream.dialects import get_writable_dialect

            writable = get_writable_dialect(dialect)  # a usage error now, before any output is touched
            if dialect_options:
                writable.encoder(**dialect_options)  # and an option it does not take, a TypeError now
                self._dialect_options = dialect_options
        self._dialect = dialect
        self._color = color
        self._start = p.Start(
            command=command,
            cwd=cwd if cwd is not None else os.getcwd(),
            tools=list(tools),
            model=model if model is not None else p.UNSET,
            provider=provider if provider is not None else p.UNSET,
            parent_session_id=parent_session_id if parent_session_id is not None else p.UNSET,
            permission_mode=permission_mode if permission_mode is not None else p.UNSET,
        )
        self._sequencer = p.Sequencer(session_id)
        self._lock = threading.RLock()
        self._closing = False
        self._exiting = False
        """Whether ``__exit__`` is ending the stream (it delivers a held signal once it has left)."""
        self._fast_fd = -1
        self._buffer = bytearray()
        self._main_thread = threading.main_thread().ident or 0
        self._held = HeldSignal()
        self._signal_seen = 0
        self._handlers = SignalHandlers(self._on_signal)
        self._observers: list[Observer] = []
        self._started_at = 0.0
        self._unchecked: frozenset[type[p.BaseEvent]] = frozenset()
        """The kinds of event :meth:`emit` writes with no check: none before the start, after the result or with
        redaction on."""
        self._output_closed = False
        """Delta runs without their complete event yet: id → (role, None for reasoning; the contents so far)."""
        self._output_failure: OutputFailed | None = None
        """Set when the output could not be written before the ``result`` was: the process exits with it."""
        self.result: p.Result | None = None
        self.tally = Tally()
        if follows is not None and follows.started:  # its sink, not itself: a session's turns are no chain
            self._after = follows._sink

    # -- lifecycle ---------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._sequencer.session_id

    @property
    def start_event(self) -> p.Start:
        """The ``start`` this stream opens (or opened) with: its working directory, model, parent session …"""
        return self._start

    @property
    def usage(self) -> p.UsageTotals:
        """Token totals so far (the ``result`` reports them); a wrapper may replace them with its child's."""
        return self.tally.usage

    @usage.setter
    def usage(self, totals: p.UsageTotals) -> None:
        self.tally.usage = totals

    @property
    def turn_count(self) -> int:
        """Model calls so far: one per ``usage`` event."""
        return self.tally.turn_count

    @property
    def tools_used(self) -> list[str]:
        return self.tally.tools_used

    @property
    def started(self) -> bool:
        return self._started_at > 0

    @property
    def finished(self) -> bool:
        return self.result is not None

    @property
    def exit_code(self) -> int:
        """The process's exit code: the result's, unless the output failed before the result reached it."""
        if self._output_failure is not None:
            return self._output_failure.status
        return self.result.exit_code if self.result is not None else int(ExitCode.ERROR)

    def observe(self, observer: Observer) -> None:
        """Call ``observer`` with every event after it is written (e.g. to publish it to a bus)."""
        self._observers.append(observer)

    def start(self) -> Stream:
        """Open the output and emit ``start``. Called by ``__enter__``; idempotent."""
        if self.started:
            return self
        if self.owns_process and threading.current_thread() is not threading.main_thread():
            raise RuntimeError(
                f"Stream({self.command!r}) owns the process (the default, out=None): it sets the exit code and"
                " takes the signals, which only the main thread can; in another thread, pass"
                " out=sys.stdout.buffer (or another binary file) and owns_process=False"
            )
        if self.owns_process or self._out_spec is None:
            with _current_lock:  # two threads starting at once: one of them is refused
                self._claim_stdout()
        try:
            try:
                writer = self._open_output()
            except OutputFailed as failure:
                writer = _NoOutput()
                self._output_closed, self._output_failure = True, failure
            self._sink = make_sink(
                self.output_format,
                writer,
                dialect=self._dialect,
                err=self._err,
                color=self._color,
                after=self._after,
                dialect_options=self._dialect_options,
            )
            self._started_at = time.monotonic()
            self._unchecked = _UNCHECKED if self._redact is None else frozenset()
            if isinstance(writer, FdWriter):
                self._output_fd = writer.fd
            if (
                self.output_format == "stream-json"
                and self._dialect in (None, "canonical")
                and isinstance(writer, FdWriter)
            ):
                self._fast_fd = writer.fd
            _started_streams.add(self)
            if self.owns_process:
                global _process_stream_started
                _process_stream_started = True
                self._handlers.install()
                atexit.register(self._at_exit)
            if self._output_failure is not None:
                raise self._output_failure
            self.emit(self._start)
        except BaseException as exc:
            if not self.started:  # a signal before anything is written: who catches it may start a stream
                self._release_stdout()
                raise
            # A signal, or no reader / no stdout, right at the start: still start … result.
            self._end_at_start(exc)
        return self

    def _end_at_start(self, exc: BaseException) -> None:
        """``start()`` was cut short (``__exit__`` will not run): end the stream here and leave."""
        if self._start.seq < 0 and not self._output_closed:
            try:
                self.emit(self._start)
            except OutputFailed:
                pass
        self._end(exc)
        if self.owns_process or isinstance(exc, OutputFailed):
            raise SystemExit(self.exit_code) from None
        raise exc

    def _open_output(self) -> Writer:
        out = self._out_spec
        if out is None:
            try:
                return FdWriter(_private_stdout(isolate=self.owns_process))
            except OSError as exc:
                raise output_failure(exc) from None
        if isinstance(out, int):
            return FdWriter(out)
        return FileWriter(out)

    def _claim_stdout(self) -> None:
        """Become the one Stream writing this process's stdout (two sessions would interleave there)."""
        global _current
        if _current is not None and not _current.finished:
            raise RuntimeError(
                f"Stream({self.command!r}) cannot start while Stream({_current.command!r}) still writes this "
                "process's stdout (two sessions would interleave): end that one first, or give this one "
                "its own output with out=..."
            )
        _current = self

    def _release_stdout(self) -> None:
        global _current
        with _current_lock:
            if _current is self:
                _current = None

    def __enter__(self) -> Stream:
        if self.finished:
            raise RuntimeError(
                f"Stream({self.command!r}) has already ended (its result is written), so nothing in this `with` "
                "block would be written: a Stream is one run, make a new Stream for the next one"
            )
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        if self._forked:  # the forked process leaves as it would have without a stream: its parent ends it
            return False
        self._end(exc)
        if not self.owns_process or self.result is None:
            return False
        if _is_cancelled(exc):  # asyncio's cancellation goes on unchanged: the exit code waits for the end
            self._owes_exit = True
            return False
        code = self.exit_code
        if isinstance(exc, AgentstreamError):
            sys.stderr.write(
                error_text(self.command, exc.code, exc.message, exc.fix)
            )  # expected: no traceback
        elif exc is not None and not isinstance(exc, SystemExit):
            traceback.print_exception(exc_type, exc, tb, file=sys.stderr)
        elif isinstance(exc, OutputFailed):
            pass  # reported by _leave; a plain SystemExit below, so no one reports it again
        elif isinstance(exc, SystemExit) and _exit_status(exc) == code:
            return False
        if code != 0 or exc is not None:
            raise SystemExit(code) from None
        return False

    def _end(self, exc: BaseException | None) -> None:
        """However the body ended: its matching ending, then leave the stream; a signal held meanwhile goes last."""
        self._exiting = True
        if not self.finished:
            self._finish_for_exception(exc)
        self._leave(exc)
        self._deliver_held_signal()

    def _leave(self, exc: BaseException | None) -> None:
        """Hand the signals back with the process's exit code fixed; say once why the output failed."""
        final = self.exit_code if self.owns_process and self.result is not None else None
        self._handlers.restore(final, keep_exit_code=True)
        failure = self._output_failure
        if failure is not None and self.owns_process:
            if isinstance(failure, OutputError):
                _say(f"agentstream {self.command}: {failure.error_code}: {failure.reason}")
            _silence_private_stdout()

    def _finish_for_exception(self, exc: BaseException | None) -> None:
        """Turn however the body ended into the matching fatal error and result."""
        if exc is None:
            self.finish()
        elif isinstance(exc, OutputFailed):
            self._output_closed, self._output_failure = True, self._output_failure or exc
            self.fail(exc.error_code, exc.reason, exit_code=exc.status, subtype=exc.subtype)
        elif isinstance(exc, Interrupted):
            self._interrupt_result(exc.signum)
        elif isinstance(exc, KeyboardInterrupt):
            self._interrupt_result(signal.SIGINT)
        elif isinstance(exc, SystemExit):
            status = _exit_status(exc)
            if status == 0:
                self.finish()
            else:
                self.fail(ErrorCode.EXCEPTION, _why_it_stopped(exc), exit_code=status)
        elif isinstance(exc, AgentstreamError):
            self.fail(
                exc.code, exc.message, fix=exc.fix, exit_code=process_exit_code(exc.exit_code, ok=False)
            )
        elif _is_cancelled(exc):
            self.fail(
                ErrorCode.INTERRUPTED, _why_it_stopped(exc), exit_code=ExitCode.SIGINT, subtype="interrupted"
            )
        else:
            self.fail(
                ErrorCode.EXCEPTION,
                f"{type(exc).__name__}: {exc}",
                details={"traceback": traceback.format_exception(exc)[-3:]},
            )

    def _interrupt_result(self, signum: int) -> None:
        self.fail(
            ErrorCode.INTERRUPTED,
            _interrupted_by(signum),
            exit_code=exit_code_for_signal(signum),
            subtype="interrupted",
        )

    def finish(
        self,
        *,
        ok: bool | None = None,
        exit_code: int | None = None,
        subtype: str | None = None,
        result: str | None = None,
        error: p.ErrorInfo | None = None,
        next_actions: Sequence[p.NextAction] = (),
    ) -> p.Result:
        """Emit the one ``result`` and close the output. Later calls return the first result.

        ``ok`` and ``exit_code`` must agree (ok exactly when 0); either one alone sets the other.
        """
        if self.result is not None:
            return self.result
        ok, code = _outcome(ok, exit_code, "finish")
        _text("subtype", subtype, optional=True)
        _text("result", result, optional=True)
        if error is not None and type(error) is not p.ErrorInfo:
            raise TypeError(f"error must be a protocol.ErrorInfo, not {type(error).__name__}")
        actions = _next_actions(next_actions)
        if not self.started:
            self.start()
        with self._lock:  # other threads wait from here: none adds work between its closing and the result
            if self.result is not None:  # another thread's ending came first
                return self.result
            event = self._write_result(ok, code, subtype, result, error, actions)
        if not self._exiting:
            self._deliver_held_signal()
        return event

    def _write_result(
        self,
        ok: bool,
        code: int,
        subtype: str | None,
        result: str | None,
        error: p.ErrorInfo | None,
        actions: list[p.NextAction],
    ) -> p.Result:
        """Close the open work and write the result (the lock held throughout)."""
        self._closing = True
        self._close_open_work("the run ended before this tool's result")
        final_text = result if result is not None else self.tally.last_text
        event = p.Result(
            ok=ok,
            subtype=subtype or ("success" if ok else "error"),
            exit_code=code,
            duration_ms=int((time.monotonic() - self._started_at) * 1000),
            turn_count=self.turn_count,
            tools_used=[name for name in self.tools_used if type(name) is str],  # emit() checks nothing
            usage=self.usage,
            result=final_text if type(final_text) is str else p.UNSET,
            error=error if error is not None else p.UNSET,
            command=self.command,
            next_actions=actions,
        )
        self._result_thread = 0 if self._signal_seen else threading.get_ident()
        self.result, self._unchecked = event, frozenset()
        try:
            self.emit(event)
            if not self._output_closed:
                self._sink.close()
        except OutputFailed as failure:
            self._output_closed = True
            self._output_failure = self._output_failure or failure
        return event

    def fail(
        self,
        code: str,
        message: str,
        *,
        fix: str | None = None,
        exit_code: int = ExitCode.ERROR,
        subtype: str = "error",
        details: Any = p.UNSET,
        next_actions: Sequence[p.NextAction] = (),
    ) -> p.Result:
        """Emit a fatal ``error`` immediately followed by the ``result`` (``exit_code`` 1–255: a failure is never 0)."""
        if self.result is not None:
            return self.result
        _text("code", code)
        _text("message", message)
        _text("fix", fix, optional=True)
        _text("subtype", subtype)
        _outcome(False, exit_code, "fail")
        _next_actions(next_actions)
        if details is not p.UNSET:
            _json("details", details)
        if not self.started:
            self.start()
        self._closing = True
        with self._lock:
            # Hold the lock across both events so no other thread can slip between them.
            self._close_open_work(f"the run ended before this tool's result: {message}")
            self.emit(
                p.Error(code=code, message=message, recoverable=False, fix=fix or p.UNSET, details=details)
            )
            return self.finish(
                ok=False,
                exit_code=exit_code,
                subtype=subtype,
                error=p.ErrorInfo(code=code, message=message, fix=fix or p.UNSET),
                next_actions=next_actions,
            )

    def _close_open_work(self, reason: str) -> None:
        """Before the ending: a result for each tool call still open, a complete event for each delta run."""
        if self.tally.has_open_work:
            for event in closing_events(self.tally, reason):
                self.emit(event)

    # -- emitting ----------------------------------------------------------

    def emit(self, event: E) -> E:
        """Stamp and write one event now. Safe from any thread or task.

        This is the producer's hot path: one step (:func:`_stamp_line`, in C when built) stamps the event in
        place as :meth:`Sequencer.stamp` does, encodes and tallies it and, to a descriptor, writes its line.
        """
        lock = self._lock
        lock.acquire()  # not ``with``: its enter and exit calls cost about a tenth of an emit
        try:
            if type(event) not in self._unchecked:  # not started, ended, a start, result or usage, redacting
                if self.result is not None and event is not self.result:
                    return self._after_result(event)
                if not self._started_at:
                    raise RuntimeError(
                        "Stream.start() (or `with Stream(...)`) must come before emitting events"
                    )
                if type(event) in _GUARDED:
                    self._check_guarded(event)
                if self._redact is not None:
                    self._redact(event)
            fd = self._fast_fd
            # Canonical lines to a descriptor: the line goes into the reused buffer, newline and all, and out in
            # one write, all in the one step.
            undone: Exception | int | OutputFailed | None
            try:
                undone = _stamp_line(event, self._sequencer, self._buffer, self.tally, fd, _STAMP_KINDS)
            except OSError as exc:
                undone = output_failure(exc)
            failed = None if undone is None else self._finish_line(event, undone)
            if fd < 0 and not self._output_closed:
                failed = self._write(event)
            if failed is not None:
                self._write_failed(failed)
            if self._observers:
                if len(self._buffer) > _KEPT_BUFFER_BYTES:
                    self._buffer.clear()  # a very long line, written: not held while observers encode it again
                for observer in self._observers:
                    observer(event)  # the bus still gets the run, whatever happened to stdout
            if failed is not None and event is not self.result:
                raise failed
        finally:
            lock.release()
        if self._held.pending:
            self._raise_pending_signal()
        return event

    def _check_guarded(self, event: p.Event) -> None:
        """A ``start``, ``result`` or ``usage`` handed to :meth:`emit` must leave the run's own start and result valid."""
        if type(event) is p.Start and event is not self._start:
            raise ValueError(
                "a Stream writes its own start (the first event): pass its fields to Stream(...)"
            )
        if type(event) is p.Result and event is not self.result:
            raise ValueError("a Stream writes its one result itself: end the run with finish() or fail()")
        if type(event) is p.Usage:
            for name in _USAGE_FIELDS:
                value = getattr(event, name)
                if value is not p.UNSET and value is not None:
                    _fields("Usage", {name: value}, _USAGE_FIELDS)

    def _after_result(self, event: E) -> E:
        """An event after the result: refused in the thread that wrote the result on purpose (a mistake);
        elsewhere (another thread or task racing the ending, code unwinding from a signal) dropped, said once."""
        if threading.get_ident() == self._result_thread:
            raise RuntimeError(
                f"Stream({self.command!r}) has ended (its result is written), so this {event.type} event would be "
                "lost: emit it before finish()/fail() or the end of the `with` block, or start a new Stream"
            )
        if not self._dropped:
            self._dropped = True
            _say(
                f"agentstream {self.command}: a {event.type} event came after the stream's result (from another "
                "thread, or while a signal ended the run) and was dropped; so are any later ones"
            )
        return event

    def _write_failed(self, failure: OutputFailed) -> None:
        """The output is gone (reader left, disk full…): stop writing; the run ends with that failure."""
        self._fast_fd = -1
        self._output_closed = True
        self._output_failure = self._output_failure or failure

    def _finish_line(self, event: p.Event, undone: Exception | int | OutputFailed) -> OutputFailed | None:
        """What :func:`_stamp_line` left undone: a write that failed (its failure), the part of a long line a pipe
        did not take (written now), or an event JSON cannot carry as it is (mended, then stamped again)."""
        if isinstance(undone, OutputFailed):
            return undone
        if isinstance(undone, int):
            return self._write_rest(self._buffer, undone)
        _make_encodable(event, undone)
        try:
            again = _stamp_line(event, self._sequencer, self._buffer, self.tally, self._fast_fd, _STAMP_KINDS)
        except OSError as exc:
            return output_failure(exc)
        if isinstance(again, Exception):
            raise again
        return None if again is None else self._write_rest(self._buffer, again)

    def _write_rest(self, buffer: bytearray, written: int) -> OutputFailed | None:
        """A pipe took only part of a long line: finish it before anything else is written."""
        try:
            FdWriter(self._fast_fd).write(bytes(buffer[written:]))
        except OutputFailed as failure:
            return failure
        return None

    def _write(self, event: p.Event) -> OutputFailed | None:
        try:
            self._sink.emit(event)
        except OutputFailed as failure:
            return failure
        return None

    def _raise_pending_signal(self) -> None:
        """Deliver a signal that arrived mid-write, now that the line is whole."""
        if threading.get_ident() != self._main_thread or self._closing:
            return
        signum = self._held.take()
        if self.result is None:
            self._deliver_signal(signum)

    # -- helpers for every event type ---------------------------------------

    # Each checks its arguments (emit() checks nothing, for speed): a bad one is refused here, at the call,
    # rather than written as a line no reader accepts (or lost after taking its ``seq``). Deltas come by the
    # thousand, so theirs is one cheap test, and the helpers only run to say what was wrong.

    def message(
        self, content: str, *, role: p.Role = "assistant", message_id: str | None = None
    ) -> p.Message:
        if (
            type(content) is not str
            or role not in _ROLES
            or not (message_id is None or type(message_id) is str)
        ):
            _text("content", content)
            _choice("role", role, _ROLES)
            _text("message_id", message_id, optional=True)
        return self.emit(p.Message(message_id=message_id or p.new_id("msg"), role=role, content=content))

    def message_delta(self, content: str, *, message_id: str, role: p.Role = "assistant") -> p.MessageDelta:
        if type(content) is not str or type(message_id) is not str or role not in _ROLES:
            _text("content", content)
            _text("message_id", message_id)
            _choice("role", role, _ROLES)
        return self.emit(p.MessageDelta(message_id=message_id, role=role, content=content))

    def reasoning_delta(self, content: str, *, reasoning_id: str) -> p.ReasoningDelta:
        if type(content) is not str or type(reasoning_id) is not str:
            _text("content", content)
            _text("reasoning_id", reasoning_id)
        return self.emit(p.ReasoningDelta(reasoning_id=reasoning_id, content=content))

    def reasoning(self, content: str, *, reasoning_id: str | None = None) -> p.Reasoning:
        _text("content", content)
        _text("reasoning_id", reasoning_id, optional=True)
        return self.emit(p.Reasoning(reasoning_id=reasoning_id or p.new_id("rsn"), content=content))

    def step_event(self, name: str, status: p.StepStatus, **fields: Any) -> p.Step:
        _text("name", name)
        _choice("status", status, _STEP_STATUSES)
        _fields("step_event", fields, _STEP_FIELDS)
        return self.emit(p.Step(name=name, status=status, **fields))

    def progress(self, name: str, **fields: Any) -> p.Progress:
        _text("name", name)
        _fields("progress", fields, _PROGRESS_FIELDS)
        return self.emit(p.Progress(name=name, **fields))

    def log(self, message: str, *, level: p.LogLevel = "info") -> p.Log:
        _text("message", message)
        _choice("level", level, _LOG_LEVELS)
        return self.emit(p.Log(level=level, message=message))

    def status(self, status: str, message: str | None = None) -> p.Status:
        _text("status", status)
        _text("message", message, optional=True)
        return self.emit(p.Status(status=status, message=message if message is not None else p.UNSET))

    def event(self, name: str, data: Any = None) -> p.GenericEvent:
        _text("name", name)
        _json("data", data)
        return self.emit(p.GenericEvent(name=name, data=data))

    def record_usage(self, model: str, **tokens: Any) -> p.Usage:
        _text("model", model)
        _fields("record_usage", tokens, _USAGE_FIELDS)
        return self.emit(p.Usage(model=model, **tokens))

    def error(
        self,
        code: str,
        message: str,
        *,
        recoverable: bool = True,
        retry_in_ms: int | None = None,
        fix: str | None = None,
    ) -> p.Error:
        """A non-fatal error (use :meth:`fail` for a fatal one, which also ends the run)."""
        _text("code", code)
        _text("message", message)
        _flag("recoverable", recoverable)
        if not recoverable:  # the protocol puts the result right after a fatal error: only fail() can
            raise ValueError(
                f"error({code!r}, recoverable=False) would write a fatal error that no result follows: "
                "end the run with fail(code, message, ...) instead, which writes both"
            )
        _fields("error", {} if retry_in_ms is None else {"retry_in_ms": retry_in_ms}, _ERROR_FIELDS)
        _text("fix", fix, optional=True)
        return self.emit(
            p.Error(
                code=code,
                message=message,
                recoverable=recoverable,
                retry_in_ms=retry_in_ms if retry_in_ms is not None else p.UNSET,
                fix=fix if fix is not None else p.UNSET,
            )
        )

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """``started`` now; ``completed`` or ``failed`` (with the error) when the block ends.

        Nothing when the block ended the run itself (``fail()``, ``finish()``): its result is the last word.
        """
        _text("name", name)
        began = time.monotonic()
        started = p.Step(name=name, status="started")
        try:
            self.emit(started)
            yield
        except BaseException as exc:
            if started.seq >= 0 and self.result is None:
                took = int((time.monotonic() - began) * 1000)
                self.emit(p.Step(name=name, status="failed", duration_ms=took, error=_why_it_stopped(exc)))
            raise
        if self.result is None:
            took = int((time.monotonic() - began) * 1000)
            self.emit(p.Step(name=name, status="completed", duration_ms=took))

    @contextmanager
    def tool_call(
        self, name: str, arguments: dict[str, Any] | None = None, *, call_id: str | None = None
    ) -> Iterator[ToolCallScope]:
        """Emit ``tool_call``, run the block, then exactly one ``tool_result`` — even if the block raises.

        The call is emitted inside the guarded block: a signal delivered right
        after its line is written still gets its ``cancelled`` result (a block that
        ended the run itself got its result from that ending).
        """
        _text("name", name)
        _text("call_id", call_id, optional=True)
        if arguments is not None:
            if type(arguments) is not dict:
                raise TypeError(f"arguments must be a dict, not {type(arguments).__name__}")
            _json("arguments", arguments)
        call = p.ToolCall(call_id=call_id or p.new_id("call"), name=name, arguments=arguments or {})
        scope = ToolCallScope(self, call)
        began = time.monotonic()
        try:
            self.emit(call)
            yield scope
        except BaseException as exc:
            cancelled = isinstance(exc, (SystemExit, KeyboardInterrupt)) or _is_cancelled(exc)
            scope.fail(_why_it_stopped(exc), status="cancelled" if cancelled else "error")
            raise
        finally:
            if call.seq >= 0 and self.result is None:  # only a call that was written gets a result
                self.emit(
                    p.ToolResult(
                        call_id=call.call_id,
                        name=name,
                        status=scope.status,
                        output=scope.output if scope.output is not None else p.UNSET,
                        error=scope.error if scope.error is not None else p.UNSET,
                        duration_ms=int((time.monotonic() - began) * 1000),
                        truncated=scope.truncated if scope.truncated is not None else p.UNSET,
                    )
                )

    # -- signals and exit -------------------------------------------------

    def note_signal(self, signum: int) -> None:
        """A signal its caller handled (``wrap`` passes the first to its child): the next one this stream gets
        is a second, which does not wait for a line stuck on a reader that stopped reading."""
        self._held.hold(signum)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.result is None:
            if _signals.inside(frame, _CRITICAL_CODE) or _signals.inside_import(frame):
                # Mid-line, or mid-import (unwinding there breaks the module): deliver right after. A line
                # that waits on a reader that stopped reading is not waited for again: a second signal while
                # the first is held, or one that is still held 20 ms on while the run already unwinds.
                was_held = self._held.pending
                again = self._held.hold(signum, frame, redeliver=bool(self._signal_seen))
                if (
                    (again or (was_held and self._signal_seen))
                    and not _signals.inside_import(frame)
                    and self._output_is_stuck()
                ):
                    _signals.stop_waiting_for_output(self._signal_seen or self._held.pending)
                return
        elif not self._held.pending and _signals.inside(frame, _FINISH_CODE):
            # The result is being written, or published (the bus waits until it is stored): :meth:`finish`
            # exits right after, with its code. A second signal does not wait. (No frame: nothing is
            # redelivered, even mid-import; the end of finish delivers it.)
            self._held.hold(signum)
            return
        self._held.take()
        self._deliver_signal(signum)

    def _output_is_stuck(self) -> bool:
        """Whether the line being written waits on a reader that stopped reading: its descriptor takes nothing
        now. A busy output (a relay writing line after line) is not stuck; a file object cannot tell, so is."""
        if self._output_fd < 0:
            return True
        import select

        try:
            return not select.select([], [self._output_fd], [], 0)[1]
        except (OSError, ValueError):
            return True

    def _deliver_held_signal(self) -> None:
        """A signal held while the result was written or published (:meth:`finish`): now that both are done,
        it ends the process with the result's code (SignalAfterResult)."""
        if self._held.pending and threading.get_ident() == self._main_thread:
            self._deliver_signal(self._held.take())

    def _deliver_signal(self, signum: int) -> None:
        """Unwind the main thread; a second signal while unwinding stops waiting for cleanup code."""
        if self.result is not None:
            self._result_thread = 0  # what unwinds now may still emit: dropped, not refused
            raise _signals.SignalAfterResult(self.exit_code)  # the result is written: its code stands
        if self._signal_seen:
            self._interrupt_result(self._signal_seen)
            _hard_exit(self.result.exit_code if self.result else exit_code_for_signal(signum))
        self._signal_seen = signum
        raise Interrupted(signum)

    def _at_exit(self) -> None:
        """Last resort when the program exits without finishing its stream; or, after a cancelled task's
        ending, the exit code it owes (unless a later Stream took the process over)."""
        if self._forked:
            return
        if self.result is not None or not self.started:
            if self._owes_exit and _current is self:
                _hard_exit(self.exit_code)
            return
        try:
            self.fail(ErrorCode.NOT_FINISHED, "the program exited without finishing its stream")
        except OutputFailed:
            pass  # nowhere to write it: the exit code says it
        _hard_exit(ExitCode.ERROR)

    def _become_forked_copy(self) -> None:
        """In a fork of the process running this stream: the parent goes on writing it, so this copy writes
        nothing (an event raises), ends nothing and leaves the signals as they were before the stream."""
        self._forked = True
        self._fast_fd = -1
        self._output_closed = False
        self._sink = _ForkedCopy(self.command)
        self._observers = []
        try:
            self._handlers.restore()
        except ValueError:  # forked from a thread that is not the main one: no handler can be set there
            pass

    def run(self, main: Callable[[Stream], object]) -> int:
        """Run ``main(stream)`` inside the stream and return the exit code (for embedding)."""
        try:
            with self:
                main(self)
        except SystemExit as exc:
            return _exit_status(exc)
        return self.exit_code if self.result else 0


def fail_before_start(
    command: str,
    exc: AgentstreamError,
    *,
    output_format: OutputFormat = "stream-json",
    dialect: str | None = None,
    color: ColorChoice | bool | None = None,
    session_id: str | None = None,
    redact: Callable[[p.Event], None] | None = None,
    attach: Callable[[Stream], Callable[[], None]] | None = None,
) -> int:
    """A run that failed before it could begin (bad option, interrupted while starting) as one whole stream.

    Written in the canonical form when the dialect itself is what was wrong.
    ``attach`` hooks the stream up before it starts (a bus publisher) and returns
    what closes it. Returns the exit code (``exc.exit_code``, or what the output allowed).
    """
    try:
        stream = Stream(
            command,
            output_format=output_format,
            dialect=dialect,
            session_id=session_id,
            redact=redact,
            color=color,
        )
    except AgentstreamError:
        stream = Stream(
            command, output_format=output_format, session_id=session_id, redact=redact, color=color
        )
    close = attach(stream) if attach is not None else None
    subtype = "interrupted" if exc.code == ErrorCode.INTERRUPTED else "error"
    try:
        with stream:
            stream.fail(exc.code, exc.message, fix=exc.fix, exit_code=exc.exit_code, subtype=subtype)
    except SystemExit as exit_:
        return _exit_status(exit_)
    finally:
        if close is not None:
            close()
    return stream.exit_code


class _ForkedCopy:
    """The sink of a stream in a forked process: refuses every event (two processes would write one session)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def emit(self, event: p.AnyEvent) -> None:
        raise RuntimeError(
            f"this process is a fork of the one that runs Stream({self.command!r}): only that process writes the "
            "stream; give the child a Stream of its own with out=..., or report back to the parent"
        )

    def close(self) -> None:
        return None


_started_streams: weakref.WeakSet[Stream] = weakref.WeakSet()
"""Every stream started in this process (:func:`_in_forked_child` makes each an inert copy in a fork)."""


def _in_forked_child() -> None:
    for stream in list(_started_streams):
        stream._become_forked_copy()


os.register_at_fork(after_in_child=_in_forked_child)


class _NoOutput:
    """The writer of a Stream whose stdout could not be opened: nothing is ever written."""

    def write(self, data: bytes | bytearray) -> None:
        return None


def _say(line: str) -> None:
    """One line on stderr, whatever state stderr is in."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


def _silence_private_stdout() -> None:
    """After a failed output, point the real stdout at /dev/null so no later flush complains."""
    from agentstream.render import silence_stdout

    if _stdout_fd >= 0:
        try:
            silence_stdout(_stdout_fd)
        except OSError:
            pass


_stdout_fd = -1
_stdout_isolated = False
_process_stream_started = False
_current: Stream | None = None
"""The last Stream that wrote the real stdout or owned the process: another may start only once it has ended."""
_current_lock = threading.Lock()


def stream_was_written() -> bool:
    """Has a Stream that owns this process started (so its stdout already carries a stream)?"""
    return _process_stream_started


def _private_stdout(*, isolate: bool) -> int:
    """The real stdout, kept on a descriptor of its own; with ``isolate``, fd 1 then points at stderr.

    Done once per process, so a second Stream (one per turn, say) still writes
    to the real stdout and not to the stderr the first one left on fd 1.
    """
    global _stdout_fd, _stdout_isolated
    if _stdout_fd < 0:
        if sys.stdout is None:  # Python found no fd 1 at start-up (``>&-``)
            raise OSError(errno.EBADF, "stdout is not open")
        sys.stdout.flush()
        _stdout_fd = os.dup(1)
    if isolate and not _stdout_isolated:
        if sys.stdout is not None:
            sys.stdout.flush()
        os.dup2(2, 1)
        _stdout_isolated = True
    return _stdout_fd


_KEPT_BUFFER_BYTES: Final = 1 << 20
"""The size up to which the reused line buffer keeps its memory while observers (the bus) take an event."""
_encode_into = msgspec.json.Encoder().encode_into
_now_ts = p.now_ts
"""Module globals, one lookup each on the producer's hot path."""
_GUARDED: frozenset[type[p.BaseEvent]] = frozenset({p.Start, p.Result, p.Usage})
"""What :meth:`Stream.emit` checks, although it checks nothing else: each could make the run's start or result invalid."""
_UNCHECKED: frozenset[type[p.BaseEvent]] = frozenset(p.EVENT_CLASSES) - _GUARDED
_UNENCODABLE: Final = (TypeError, ValueError, OverflowError, msgspec.EncodeError)
_STAMP_KINDS: Final = (_encode_into, _UNENCODABLE, TALLY_KINDS, _now_ts, os.write)
"""What :func:`_stamp_line` encodes, counts, reads the clock and writes with (the C twin takes it as an argument)."""


def _stamp_line_py(
    event: p.Event,
    sequencer: p.Sequencer,
    buffer: bytearray,
    tally: Tally,
    fd: int,
    kinds: tuple[Any, ...],
) -> Exception | int | None:
    """Stamp ``event`` into the session at the next seq (at the time it carries, else now) and encode it into
    ``buffer``; then it takes the seq and is tallied, and with an ``fd`` (not -1) goes out as one line in one
    write. An event the encoder refuses takes neither: that error is returned, for :func:`_make_encodable` to
    mend or word. A write that fails raises; one a pipe took only part of returns the bytes it took."""
    encode_into, unencodable, _, now_ts, write = kinds
    event.session_id = sequencer.session_id
    event.seq = sequencer.next_seq
    if not event.ts:
        event.ts = now_ts()
    try:
        encode_into(event, buffer)
    except unencodable as exc:
        return cast(Exception, exc)
    sequencer.next_seq += 1
    tally_add(tally, event)
    if fd < 0:
        return None
    buffer.append(10)
    written: int = write(fd, buffer)
    return None if written == len(buffer) else written


_stamp_line: Callable[..., Exception | int | None] = speedups.stamp_line if speedups else _stamp_line_py


def _make_encodable(event: p.Event, exc: Exception) -> None:
    """Lone surrogates (a file name decoded with ``surrogateescape``) become U+FFFD in place; anything else
    that JSON cannot carry is refused before the event takes a ``seq``."""
    from agentstream._lines import without_lone_surrogates

    if isinstance(exc, UnicodeEncodeError):
        without_lone_surrogates(event)
        return
    raise TypeError(f"a {event.type} event cannot be written as JSON: {exc}") from None


_CRITICAL_CODE = frozenset(
    {
        Stream.emit.__code__,
        _stamp_line_py.__code__,
        Stream._finish_line.__code__,
        Stream._write.__code__,
        Stream._write_rest.__code__,
        Stream.fail.__code__,
        Stream.finish.__code__,
    }
)
"""The Stream's write path, where a raise would tear a line (checked on the signal path only)."""
_FINISH_CODE = frozenset({Stream.finish.__code__})
"""Where the result is written and published: a signal waits until both are done."""


def _exit_status(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    return 1


def _hard_exit(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


def _why_it_stopped(exc: BaseException) -> str:
    """What cut a run, step or tool call short, in the words a person would use (not a bare ``143``)."""
    if isinstance(exc, Interrupted):
        return _interrupted_by(exc.signum)
    if isinstance(exc, KeyboardInterrupt):
        return str(exc) or _interrupted_by(signal.SIGINT)  # a subclass may say who interrupted
    if _is_cancelled(exc):
        return f"the asyncio task was cancelled: {exc}" if str(exc) else "the asyncio task was cancelled"
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None or isinstance(code, int) or not str(code):
            return f"exited with status {_exit_status(exc)}"
        return str(code)  # ``sys.exit("message")``: what Python prints on stderr
    return str(exc) or type(exc).__name__


def _interrupted_by(signum: int) -> str:
    return f"interrupted by {signal.Signals(signum).name}"


def _is_cancelled(exc: BaseException | None) -> bool:
    """An asyncio task's cancellation (asyncio is not imported for this: no asyncio, no such exception).

    Another thread may be importing asyncio right now (a model SDK, on first use): a module not yet
    initialised has no ``CancelledError``, and nothing raised here can be one.
    """
    cancelled = getattr(sys.modules.get("asyncio"), "CancelledError", None)
    return cancelled is not None and isinstance(exc, cancelled)


def _outcome(ok: bool | None, exit_code: int | None, method: str) -> tuple[bool, int]:
    """``ok`` and ``exit_code`` as a result carries them: they must agree (``ok-exit``); either one sets the other.

    A code outside 0–255 is no exit status (256 would wrap to 0, a false success): it becomes 1, not ok.
    """
    if ok is not None and type(ok) is not bool:
        raise TypeError(f"ok must be a bool, not {type(ok).__name__}")
    if exit_code is not None and (type(exit_code) is bool or not isinstance(exit_code, int)):
        raise TypeError(f"exit_code must be an int, not {type(exit_code).__name__}")
    if ok is None:
        ok = exit_code is None or exit_code == 0
    elif exit_code is not None and ok != (exit_code == 0):
        if ok:
            fix = "pass ok=False, or leave ok out (exit_code alone sets it)"
        elif method == "fail":
            fix = "a failure exits non-zero: pass 1-255 or leave exit_code out (1); for a success, call finish()"
        else:
            fix = "a failure exits non-zero: pass 1-255, or leave exit_code out (1)"
        args = f"exit_code={exit_code}" if method == "fail" else f"ok={ok}, exit_code={exit_code}"
        raise ValueError(f"{method}({args}): ok is true exactly when the exit code is 0; {fix}")
    code = process_exit_code(
        exit_code if exit_code is not None else ExitCode.OK if ok else ExitCode.ERROR, ok=ok
    )
    return code == 0, code


def _text(name: str, value: object, *, optional: bool = False) -> None:
    """Refuse what is not a plain ``str`` (msgspec writes no subclass of it)."""
    if type(value) is not str and not (optional and value is None):
        raise TypeError(f"{name} must be a str{' or None' if optional else ''}, not {type(value).__name__}")


def _flag(name: str, value: object, *, optional: bool = False) -> None:
    if type(value) is not bool and not (optional and value is None):
        raise TypeError(f"{name} must be a bool{' or None' if optional else ''}, not {type(value).__name__}")


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        _text(name, value)
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, not {value!r}")


def _fields(method: str, fields: dict[str, Any], kinds: Mapping[str, tuple[type, ...]]) -> None:
    """Refuse a keyword the event does not have, or a value of another type (``True`` is no number here)."""
    for name, value in fields.items():
        kind = kinds.get(name)
        if kind is None:
            raise TypeError(f"{method}() got an unexpected keyword {name!r}; it takes {', '.join(kinds)}")
        if type(value) not in kind:
            expected = " or ".join(k.__name__ for k in kind)
            raise TypeError(f"{method}(): {name} must be {expected}, not {type(value).__name__}")
        if type(value) is float and not math.isfinite(value):
            raise ValueError(f"{method}(): {name} must be a finite number, not {value}")


def _json(name: str, value: object) -> None:
    """Refuse what JSON cannot carry now, rather than when its line is written."""
    try:
        try:
            _check_encode(value)
        except UnicodeEncodeError:  # lone surrogates: replaced when the line is written; anything else?
            from agentstream._lines import without_lone_surrogates

            _check_encode(without_lone_surrogates(value))
    except _UNENCODABLE as exc:
        raise TypeError(f"{name} must be JSON-serialisable: {exc}") from None


def _next_actions(actions: Sequence[p.NextAction]) -> list[p.NextAction]:
    listed = list(actions)
    for action in listed:
        if type(action) is not p.NextAction:
            raise TypeError(f"next_actions must hold protocol.NextAction, not {type(action).__name__}")
        _text("NextAction.command", action.command)  # a Struct checks nothing when it is made
        _text("NextAction.description", action.description)
        if action.params is not p.UNSET:
            if type(action.params) is not dict:
                raise TypeError(f"NextAction.params must be a dict, not {type(action.params).__name__}")
            _json("NextAction.params", action.params)
    return listed


_ROLES: Final[tuple[str, ...]] = get_args(p.Role)
_TOOL_STATUSES: Final[tuple[str, ...]] = get_args(p.ToolStatus)
_STEP_STATUSES: Final[tuple[str, ...]] = get_args(p.StepStatus)
_LOG_LEVELS: Final[tuple[str, ...]] = get_args(p.LogLevel)
_INT: Final = (int,)
_NUMBER: Final = (int, float)
_STR: Final = (str,)
_STEP_FIELDS: Final = {"duration_ms": _INT, "error": _STR}
_PROGRESS_FIELDS: Final = {"percent": _NUMBER, "current": _NUMBER, "total": _NUMBER, "message": _STR}
_USAGE_FIELDS: Final = {
    "input_tokens": _INT,
    "output_tokens": _INT,
    "cached_tokens": _INT,
    "reasoning_tokens": _INT,
    "cache_write_tokens": _INT,
    "cost_usd": _NUMBER,
}
_ERROR_FIELDS: Final = {"retry_in_ms": _INT}
_check_encode = msgspec.json.Encoder().encode
