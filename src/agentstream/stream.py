"""The producer: a stream that is always well-formed and always terminated.

``with Stream("my-tool") as s:`` emits ``start`` on entry and exactly one
``result`` on every way out — normal return, exception, ``sys.exit(n)``,
SIGINT/SIGTERM/SIGHUP, or the reader closing the pipe — and makes the process
exit with ``result.exit_code`` (141 or 1 instead when the output itself could
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
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import IO, Any, Final, Literal, TypeVar

import msgspec

from agentstream import _signals
from agentstream import protocol as p
from agentstream._signals import HeldSignal, Interrupted, SignalHandlers
from agentstream.ending import closing_events
from agentstream.errors import AgentstreamError, ErrorCode, ExitCode, exit_code_for_signal
from agentstream.render import (
    ColorChoice,
    FdWriter,
    FileWriter,
    OutputError,
    OutputFailed,
    OutputFormat,
    Writer,
    make_sink,
    output_failure,
)
from agentstream.transcript import Tally

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
        self.stream.emit(p.ToolProgress(call_id=self.call.call_id, content=content))

    def succeed(self, output: str, *, truncated: bool | None = None) -> None:
        self.status, self.output, self.truncated = "success", output, truncated

    def fail(self, error: str, *, status: p.ToolStatus = "error", output: str | None = None) -> None:
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
    out:
        A file descriptor or binary file. Defaults to the process's stdout, in which
        case the Stream owns the process (signals, exit code, stdout isolation).
    owns_process:
        Override that default, e.g. to write to stdout from a thread of a larger program.
    redact:
        Called with every event before it is stamped, written or observed, to scrub
        secrets from it in place: one place that every event of the run passes
        (``exec`` passes its configured secrets' redactor).
    """

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
    ) -> None:
        self.command = command
        self._redact = redact
        self.output_format = output_format
        self.owns_process = out is None if owns_process is None else owns_process
        self._out_spec = out
        self._err = err
        if dialect is not None:
            from agentstream.dialects import get_dialect

            get_dialect(dialect)  # an unknown name is a usage error now, before any output is touched
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
        self._output_closed = False
        """Delta runs without their complete event yet: id → (role, None for reasoning; the contents so far)."""
        self._output_failure: OutputFailed | None = None
        """Set when the output could not be written before the ``result`` was: the process exits with it."""
        self.result: p.Result | None = None
        self.tally = Tally()
        self._last_fatal: p.Error | None = None

    # -- lifecycle ---------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._sequencer.session_id

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
        self._started_at = time.monotonic()
        try:
            writer = self._open_output()
        except OutputFailed as failure:
            writer = _NoOutput()
            self._output_closed, self._output_failure = True, failure
        self._sink = make_sink(
            self.output_format, writer, dialect=self._dialect, err=self._err, color=self._color
        )
        if (
            self.output_format == "stream-json"
            and self._dialect in (None, "canonical")
            and isinstance(writer, FdWriter)
        ):
            self._fast_fd = writer.fd
        try:
            if self.owns_process:
                global _process_stream_started
                _process_stream_started = True
                self._handlers.install()
                atexit.register(self._at_exit)
            if self._output_failure is not None:
                raise self._output_failure
            self.emit(self._start)
        except BaseException as exc:
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

    def __enter__(self) -> Stream:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        self._end(exc)
        if not self.owns_process or self.result is None:
            return False
        code = self.exit_code
        if isinstance(exc, AgentstreamError):
            fix = f"\n  fix: {exc.fix}" if exc.fix else ""
            sys.stderr.write(f"{self.command}: {exc.code}: {exc.message}{fix}\n")  # expected: no traceback
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
        self._handlers.restore(self.exit_code if self.owns_process and self.result is not None else None)
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
                self.fail(ErrorCode.EXCEPTION, f"exited with status {status}", exit_code=status)
        elif isinstance(exc, AgentstreamError):
            self.fail(exc.code, exc.message, fix=exc.fix, exit_code=exc.exit_code)
        else:
            self.fail(
                ErrorCode.EXCEPTION,
                f"{type(exc).__name__}: {exc}",
                details={"traceback": traceback.format_exception(exc)[-3:]},
            )

    def _interrupt_result(self, signum: int) -> None:
        name = signal.Signals(signum).name
        self.fail(
            ErrorCode.INTERRUPTED,
            f"interrupted by {name}",
            exit_code=exit_code_for_signal(signum),
            subtype="interrupted",
        )

    def finish(
        self,
        *,
        ok: bool = True,
        exit_code: int | None = None,
        subtype: str | None = None,
        result: str | None = None,
        error: p.ErrorInfo | None = None,
        next_actions: Sequence[p.NextAction] = (),
    ) -> p.Result:
        """Emit the one ``result`` and close the output. Later calls return the first result."""
        if self.result is not None:
            return self.result
        if not self.started:
            self.start()
        self._closing = True
        self._close_open_work("the run ended before this tool's result")
        code = exit_code if exit_code is not None else (ExitCode.OK if ok else ExitCode.ERROR)
        if not 0 <= code <= 255:  # not an exit status (256 would wrap to 0, a false success)
            ok, code = False, ExitCode.ERROR
        final_text = result if result is not None else self.tally.last_text
        event = p.Result(
            ok=ok,
            subtype=subtype or ("success" if ok else "error"),
            exit_code=int(code),
            duration_ms=int((time.monotonic() - self._started_at) * 1000),
            turn_count=self.turn_count,
            tools_used=list(self.tools_used),
            usage=self.usage,
            result=final_text if final_text is not None else p.UNSET,
            error=error if error is not None else p.UNSET,
            command=self.command,
            next_actions=list(next_actions),
        )
        self.result = event
        try:
            self.emit(event)
            if not self._output_closed:
                self._sink.close()
        except OutputFailed as failure:
            self._output_closed = True
            self._output_failure = self._output_failure or failure
        if not self._exiting:
            self._deliver_held_signal()
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
        """Emit a fatal ``error`` immediately followed by the ``result``."""
        if self.result is not None:
            return self.result
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

        This is the producer's hot path: it stamps in place (what
        :meth:`Sequencer.stamp` does, inlined) and makes one write per line.
        """
        lock = self._lock
        lock.acquire()  # not ``with``: its enter and exit calls cost about a tenth of an emit
        try:
            if self.result is None or event is self.result:
                if not self._started_at:
                    raise RuntimeError(
                        "Stream.start() (or `with Stream(...)`) must come before emitting events"
                    )
                if self._redact is not None:
                    self._redact(event)
                sequencer = self._sequencer
                event.session_id = sequencer.session_id
                event.seq = sequencer.next_seq
                sequencer.next_seq += 1
                if not event.ts:
                    event.ts = _now_ts()
                if type(event) in _ACCOUNTED:
                    self.tally.add(event)
                failed: OutputFailed | None = None
                fd = self._fast_fd
                if fd >= 0:
                    # Canonical lines to a descriptor: encode into one reused buffer, one write.
                    buffer = self._buffer
                    _encode_into(event, buffer)
                    buffer.append(10)
                    try:
                        written = _os_write(fd, buffer)
                    except OSError as exc:
                        failed = output_failure(exc)
                    else:
                        if written < len(buffer):
                            failed = self._write_rest(buffer, written)
                elif not self._output_closed:
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

    def _write_failed(self, failure: OutputFailed) -> None:
        """The output is gone (reader left, disk full…): stop writing; the run ends with that failure."""
        self._fast_fd = -1
        self._output_closed = True
        self._output_failure = self._output_failure or failure

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

    def message(
        self, content: str, *, role: p.Role = "assistant", message_id: str | None = None
    ) -> p.Message:
        return self.emit(p.Message(message_id=message_id or p.new_id("msg"), role=role, content=content))

    def message_delta(self, content: str, *, message_id: str, role: p.Role = "assistant") -> p.MessageDelta:
        return self.emit(p.MessageDelta(message_id=message_id, role=role, content=content))

    def reasoning_delta(self, content: str, *, reasoning_id: str) -> p.ReasoningDelta:
        return self.emit(p.ReasoningDelta(reasoning_id=reasoning_id, content=content))

    def reasoning(self, content: str, *, reasoning_id: str | None = None) -> p.Reasoning:
        return self.emit(p.Reasoning(reasoning_id=reasoning_id or p.new_id("rsn"), content=content))

    def step_event(self, name: str, status: p.StepStatus, **fields: Any) -> p.Step:
        return self.emit(p.Step(name=name, status=status, **fields))

    def progress(self, name: str, **fields: Any) -> p.Progress:
        return self.emit(p.Progress(name=name, **fields))

    def log(self, message: str, *, level: p.LogLevel = "info") -> p.Log:
        return self.emit(p.Log(level=level, message=message))

    def status(self, status: str, message: str | None = None) -> p.Status:
        return self.emit(p.Status(status=status, message=message if message is not None else p.UNSET))

    def event(self, name: str, data: Any = None) -> p.GenericEvent:
        return self.emit(p.GenericEvent(name=name, data=data))

    def record_usage(self, model: str, **tokens: Any) -> p.Usage:
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
        """``started`` now; ``completed`` or ``failed`` (with the error) when the block ends."""
        began = time.monotonic()
        started = p.Step(name=name, status="started")
        try:
            self.emit(started)
            yield
        except BaseException as exc:
            if started.seq >= 0:
                took = int((time.monotonic() - began) * 1000)
                self.step_event(name, "failed", duration_ms=took, error=str(exc) or type(exc).__name__)
            raise
        self.step_event(name, "completed", duration_ms=int((time.monotonic() - began) * 1000))

    @contextmanager
    def tool_call(
        self, name: str, arguments: dict[str, Any] | None = None, *, call_id: str | None = None
    ) -> Iterator[ToolCallScope]:
        """Emit ``tool_call``, run the block, then exactly one ``tool_result`` — even if the block raises.

        The call is emitted inside the guarded block: a signal delivered right
        after its line is written still gets its ``cancelled`` result.
        """
        call = p.ToolCall(call_id=call_id or p.new_id("call"), name=name, arguments=arguments or {})
        scope = ToolCallScope(self, call)
        began = time.monotonic()
        try:
            self.emit(call)
            yield scope
        except BaseException as exc:
            cancelled = isinstance(exc, (SystemExit, KeyboardInterrupt))
            scope.fail(str(exc) or type(exc).__name__, status="cancelled" if cancelled else "error")
            raise
        finally:
            if call.seq >= 0:  # only a call that was written gets a result
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
                if (again or (was_held and self._signal_seen)) and not _signals.inside_import(frame):
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

    def _deliver_held_signal(self) -> None:
        """A signal held while the result was written or published (:meth:`finish`): now that both are done,
        it ends the process with the result's code (SignalAfterResult)."""
        if self._held.pending and threading.get_ident() == self._main_thread:
            self._deliver_signal(self._held.take())

    def _deliver_signal(self, signum: int) -> None:
        """Unwind the main thread; a second signal while unwinding stops waiting for cleanup code."""
        if self.result is not None:
            raise _signals.SignalAfterResult(self.exit_code)  # the result is written: its code stands
        if self._signal_seen:
            self._interrupt_result(self._signal_seen)
            _hard_exit(self.result.exit_code if self.result else exit_code_for_signal(signum))
        self._signal_seen = signum
        raise Interrupted(signum)

    def _at_exit(self) -> None:
        """Last resort when the program exits without finishing its stream."""
        if self.result is not None or not self.started:
            return
        try:
            self.fail(ErrorCode.NOT_FINISHED, "the program exited without finishing its stream")
        except OutputFailed:
            pass  # nowhere to write it: the exit code says it
        _hard_exit(ExitCode.ERROR)

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
_os_write = os.write
_now_ts = p.now_ts
"""Module globals, one lookup each on the producer's hot path."""
_ACCOUNTED: frozenset[type[p.BaseEvent]] = frozenset(
    {p.Usage, p.ToolCall, p.ToolResult, p.Message, p.MessageDelta, p.Reasoning, p.ReasoningDelta}
)
_CRITICAL_CODE = frozenset(
    {
        Stream.emit.__code__,
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
