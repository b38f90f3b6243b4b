"""The consumer: read any agent CLI's stream as canonical events, and never hang or crash on it.

* :func:`read` — a file, a pipe, a binary file object or an iterable of byte chunks.
* :func:`aread` — the same for asyncio (``StreamReader``, async byte iterators, files).
* :func:`spawn` — run a child process and read its stdout, with bounded waits everywhere.

Whatever the input, the output is a valid canonical stream: ``start`` first
(made up if the input had none), exactly one ``result`` last (made up if the
input ended without one), contiguous ``seq``. Every event the reader makes up
carries ``synthetic: true``. Bad lines become recoverable ``error`` events and
reading goes on. Reading stops at the first ``result``; anything after it is
not read (see ``docs/consumer.md``).
"""

from __future__ import annotations

import os
import selectors
import shlex
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Final, NamedTuple, TypeAlias, cast

import msgspec

from agentstream import protocol as p
from agentstream._lines import BlockSplitter, Line, LineSplitter, LineTooLong
from agentstream.dialects.base import DialectDecoder
from agentstream.errors import ErrorCode, ExitCode, MalformedEventError
from agentstream.transcript import Tally

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "AsyncReader",
    "Ending",
    "Reader",
    "Spawn",
    "aread",
    "read",
    "spawn",
]

DETECT_LINES: Final = 8
"""Non-blank lines buffered at most to recognise the dialect."""
PREVIEW_CHARS: Final = 120
CHUNK_BYTES: Final = 1 << 16

Source: TypeAlias = "str | os.PathLike[str] | bytes | IO[bytes] | Iterable[bytes]"
AsyncSource: TypeAlias = (
    "str | os.PathLike[str] | IO[bytes] | asyncio.StreamReader | AsyncIterable[bytes] | Iterable[bytes]"
)


class Ending(NamedTuple):
    """Why an input ended without a ``result``: becomes the synthetic fatal error and result."""

    code: str
    message: str
    exit_code: int
    subtype: str = "error"
    fix: str | None = None
    details: Any = p.UNSET
    duration_ms: int = 0


def _truncated(lines: int, partial: bool) -> Ending:
    cut = "; its last line was cut off" if partial else ""
    return Ending(
        ErrorCode.STREAM_TRUNCATED,
        f"the stream ended after {lines} lines without a result event{cut}",
        ExitCode.ERROR,
        fix="the producer stopped early (crash, kill or closed pipe): check its stderr and exit status",
    )


class _Pipeline:
    """Lines in, canonical events out: detection, decoding, bad-line reports, made-up start and end.

    Shared by every reader (sync, async, child process). Decoded events keep the
    input's session and ``seq``; each event made up here takes the next ``seq``
    and moves the later decoded ones up by one (unless it took the place of a
    skipped line's seq), so the output stays contiguous.
    """

    def __init__(self, dialect: str, *, label: str, cwd: str = "", max_line_bytes: int | None = None) -> None:
        self.label, self.cwd = label, cwd
        self.dialect: str | None = None
        self._decoder: DialectDecoder | None = None
        self._blocks = BlockSplitter() if max_line_bytes is None else None
        self._lines = LineSplitter(max_line_bytes=max_line_bytes)
        self.line_number = 0
        self.partial = False
        """Whether the last line read had no newline (the input was cut mid-line)."""
        if dialect != "auto":
            self._use(dialect)
        self._probe: list[Line | LineTooLong] = []
        self._objects: list[dict[str, Any]] = []
        self._probed = 0
        self._pending: list[p.Event] = []
        self._session = ""
        self._next_seq = 0
        self._shift = 0
        self._last: p.AnyEvent | None = None
        self.started = False
        self.finished = False
        self.tally = Tally()

    def _use(self, name: str) -> None:
        from agentstream.dialects import get_dialect

        self._decoder = get_dialect(name).decoder()
        self.dialect = name

    # -- input ---------------------------------------------------------------

    def feed_chunk(self, chunk: bytes) -> list[p.AnyEvent]:
        """Events completed by the next piece of raw input (of any size)."""
        if self._blocks is None:
            out: list[p.AnyEvent] = []
            for item in self._lines.feed(chunk):
                out += self.feed(item)
            return out
        block = self._blocks.feed(chunk)
        return self._feed_block(block) if block else []

    def end_of_input(self) -> list[p.AnyEvent]:
        """Events from an unterminated last line (once; :meth:`finish` calls it)."""
        if self._blocks is None:
            out: list[p.AnyEvent] = []
            for item in self._lines.close():
                out += self.feed(item)
            return out
        tail = self._blocks.close()
        return self.feed(Line(self.line_number + 1, tail, False)) if tail else []

    def _feed_block(self, block: bytes | bytearray) -> list[p.AnyEvent]:
        """Whole lines: decoded in one call when the stream is plain, healthy canonical, else line by line."""
        if self.dialect == "canonical" and self.started and not self._shift and not self.finished:
            try:
                events = p.decode_lines(block)
            except MalformedEventError:
                pass  # a bad or unknown line in this block: the careful path below reports it
            else:
                self.line_number += block.count(b"\n")
                if events and events[0].seq == self._next_seq == events[-1].seq - len(events) + 1:
                    return self._accept_batch(events)
                return self._accept(events)  # gaps or missing seqs: take the careful path for these events
        out: list[p.AnyEvent] = []
        number = self.line_number
        parts = block.split(b"\n")
        parts.pop()
        for part in parts:
            number += 1
            data = part[:-1] if part.endswith(b"\r") else part
            if self._decoder is None:
                out += self.feed(Line(number, data, True))
            else:  # what feed() would do with this line, minus the checks that cannot apply to it
                out += self._decode(data, number, True)
            if self.finished:
                break
        self.line_number = number
        self.partial = False
        return out

    def _accept_batch(self, events: list[p.AnyEvent]) -> list[p.AnyEvent]:
        """The fast path of :meth:`_accept`: a started, unshifted stream, and every event has its seq."""
        add = self.tally.add
        for index, event in enumerate(events):
            add(event)
            if type(event) is p.Result:
                del events[index + 1 :]
                self.finished = True
                break
        last = self._last = events[-1]
        self._next_seq = last.seq + 1
        return events

    def feed(self, item: Line | LineTooLong) -> list[p.AnyEvent]:
        """Events from one framed line."""
        self.line_number = item.number
        self.partial = isinstance(item, Line) and not item.terminated
        if self.finished:
            return []
        if self._decoder is None:
            return self._detect(item)
        if isinstance(item, LineTooLong):
            return self.synthetic(_too_long(item))
        return self._decode(item.data, item.number, item.terminated)

    def _decode(self, data: bytes | bytearray, number: int, terminated: bool) -> list[p.AnyEvent]:
        """The events of one line, or the error that says why it was skipped."""
        assert self._decoder is not None
        try:
            events = self._decoder.decode_line(data)
        except Exception as exc:  # a decoder failing on a line is that line's problem, not the reader's
            return self._bad_line(Line(number, data, terminated), exc)
        if events is None:
            return self._bad_line(Line(number, data, terminated), None)
        return self._accept(events)

    def _detect(self, item: Line | LineTooLong) -> list[p.AnyEvent]:
        from agentstream.dialects import detect_dialect

        if isinstance(item, Line) and not item.data.strip():
            return []
        self._probe.append(item)
        self._probed += 1
        obj = _parse_object(_sse_payload(item.data)) if isinstance(item, Line) else None
        if obj is not None:
            self._objects.append(obj)
            name = detect_dialect(self._objects)
            if name is not None:
                return self._settle(name)
        return self._settle(None) if self._probed >= DETECT_LINES else []

    def _settle(self, name: str | None) -> list[p.AnyEvent]:
        """Choose the decoder, then replay the buffered lines through it."""
        out: list[p.AnyEvent] = []
        self._use(name or "canonical")
        if name is None:
            out += self.synthetic(
                p.Error(
                    code=ErrorCode.UNKNOWN_DIALECT,
                    message=f"no known dialect matches the first {self._probed} lines; reading them as canonical",
                    recoverable=True,
                    fix="pass the dialect explicitly (--from NAME); 'agentstream dialects' lists them",
                )
            )
        probe, self._probe, self._objects = self._probe, [], []
        for item in probe:
            out += self.feed(item)
        return out

    def _bad_line(self, line: Line, reason: BaseException | None) -> list[p.AnyEvent]:
        data = line.data
        if not data.strip():
            return []
        out: list[p.AnyEvent] = []
        try:
            data.decode()
        except UnicodeDecodeError as exc:
            out += self.synthetic(_invalid_utf8(line, exc))
            repaired = Line(line.number, data.decode("utf-8", "replace").encode(), line.terminated)
            return out + self.feed(repaired)
        return out + self.synthetic(_malformed(line, reason, self.dialect))

    # -- output --------------------------------------------------------------

    def _accept(self, events: list[p.AnyEvent]) -> list[p.AnyEvent]:
        if self.started and not self._shift:
            for event in events:
                if event.seq < 0:
                    break
            else:
                return self._accept_batch(events) if events else events  # nothing to renumber
        out: list[p.AnyEvent] = []
        for event in events:
            if not self.started:
                self._open(event, out)
                if isinstance(event, p.Start):
                    continue
                _shift_seq(event, self._shift)
            elif self._shift:
                self._restamp(event)
            if event.seq < 0:
                self._stamp_loose(event)
            self._pass(event, out)
            if self.finished:
                break
        return out

    def _stamp_loose(self, event: p.AnyEvent) -> None:
        """Give an event that came without a seq (a foreign line read as canonical) the next one."""
        if isinstance(event, p.UnknownEvent):
            event.raw["seq"] = self._next_seq
            if not event.raw.get("session_id"):
                event.raw["session_id"] = self._session
        else:
            event.seq = self._next_seq
            event.session_id = event.session_id or self._session
        self._shift += 1

    def _restamp(self, event: p.AnyEvent) -> None:
        """Move a decoded event up past the events made up before it, unless they filled a gap.

        A made-up error often stands in for a skipped line that had its own seq;
        when the input's next seq shows that gap, no shift is needed and the
        input's numbering is kept.
        """
        if event.seq < 0:
            return
        self._shift = min(self._shift, max(0, self._next_seq - event.seq))
        if self._shift:
            _shift_seq(event, self._shift)

    def _pass(self, event: p.AnyEvent, out: list[p.AnyEvent]) -> None:
        self._next_seq = event.seq + 1
        self._last = event
        self.tally.add(event)
        out.append(event)
        if isinstance(event, p.Result):
            self.finished = True

    def _open(self, first: p.AnyEvent, out: list[p.AnyEvent]) -> None:
        """Emit the start (the input's, or one made up in front of its first event), then what waited for it."""
        self.started = True
        self._session = first.session_id or (
            self._decoder.sequencer.session_id if self._decoder else p.new_id("ses")
        )
        if isinstance(first, p.Start):
            self._pass(first, out)
            self._flush_pending(out)
            return
        # A stream that lost its beginning: the made-up start takes the seq just below the
        # first event when there is room (so input seqs stay as they were), else it shifts them.
        room = first.seq - 1 - len(self._pending) if first.seq >= 0 else -1
        self._next_seq = room if room >= 0 else max(first.seq, 0)
        out += self.synthetic(p.Start(command=self.label, cwd=self.cwd))
        self._flush_pending(out)
        if room >= 0:
            self._shift = 0

    def _flush_pending(self, out: list[p.AnyEvent]) -> None:
        pending, self._pending = self._pending, []
        for event in pending:
            out += self.synthetic(event)

    def synthetic(self, event: p.Event) -> list[p.AnyEvent]:
        """Stamp an event the reader made up into the output sequence (held back until the start)."""
        event.synthetic = True
        if self.finished:
            return []
        if not self.started:
            self._pending.append(event)
            return []
        p.Sequencer(self._session, self._next_seq).stamp(event, p.now_ts())
        self._next_seq += 1
        self._shift += 1
        self._last = event
        return [event]

    def finish(self, ending: Ending | None = None) -> list[p.AnyEvent]:
        """At end of input: read a last unterminated line, flush the decoder, then make up what the input lacked.

        ``ending`` says why the input ended; by default, a truncated stream.
        """
        out = self.end_of_input()
        ending = ending or _truncated(self.line_number, self.partial)
        if self._decoder is None:
            out += self._settle(None) if self._probed else self._settle("canonical")
        if not self.finished:
            out += self._flush_decoder()
        if self.finished:
            return out
        if not self.started:
            self._session = self._decoder.sequencer.session_id if self._decoder else p.new_id("ses")
            self._open_empty(out)
        return out + self._end(ending)

    def _flush_decoder(self) -> list[p.AnyEvent]:
        """What the decoder still held at end of input; a decoder failing there is reported, not raised."""
        decoder = self._decoder
        assert decoder is not None
        try:
            events = decoder.finish()
        except Exception as exc:  # keep what it had queued, then say what went wrong
            return self._accept(decoder.drain()) + self.synthetic(_unfinished(self.dialect, exc))
        return self._accept(events)

    def _open_empty(self, out: list[p.AnyEvent]) -> None:
        self.started = True
        out += self.synthetic(p.Start(command=self.label, cwd=self.cwd))
        self._flush_pending(out)

    def _end(self, ending: Ending) -> list[p.AnyEvent]:
        out: list[p.AnyEvent] = []
        last = self._last
        if isinstance(last, p.Error) and not last.recoverable:
            info = p.ErrorInfo(code=last.code, message=last.message, fix=last.fix)
        else:
            fix = ending.fix if ending.fix is not None else p.UNSET
            out += self.synthetic(
                p.Error(
                    code=ending.code,
                    message=ending.message,
                    recoverable=False,
                    fix=fix,
                    details=ending.details,
                )
            )
            info = p.ErrorInfo(code=ending.code, message=ending.message, fix=fix)
        tally = self.tally
        result = p.Result(
            ok=False,
            subtype=ending.subtype,
            exit_code=ending.exit_code,
            duration_ms=ending.duration_ms,
            turn_count=tally.turn_count,
            tools_used=list(tally.tools_used),
            usage=tally.usage,
            result=tally.last_text if tally.last_text is not None else p.UNSET,
            error=info,
            command=self.label,
        )
        out += self.synthetic(result)
        self.finished = True
        return out


def _shift_seq(event: p.AnyEvent, shift: int) -> None:
    if isinstance(event, p.UnknownEvent):
        if isinstance(event.raw.get("seq"), int):
            event.raw["seq"] += shift
    elif event.seq >= 0:
        event.seq += shift


def _sse_payload(data: bytes | bytearray) -> bytes | bytearray:
    """A line as detection sees it: the JSON of an SSE ``data:`` line (AG-UI over SSE), else the line itself."""
    return data[5:] if data.startswith(b"data:") else data


def _parse_object(data: bytes | bytearray) -> dict[str, Any] | None:
    try:
        obj = p.JSON_DECODER.decode(data)
    except Exception:
        return None
    return obj if isinstance(obj, dict) else None


def _preview(data: bytes | bytearray) -> str:
    text = data[: PREVIEW_CHARS * 4].decode("utf-8", "replace")
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _malformed(line: Line, reason: BaseException | None, dialect: str | None) -> p.Error:
    why = str(reason) if reason is not None else _why_not_event(line.data, dialect)
    cut = " (cut off: the input ended mid-line)" if not line.terminated else ""
    details: dict[str, Any] = {"line": line.number, "preview": _preview(line.data)}
    if not line.terminated:
        details["partial"] = True
    return p.Error(
        code=ErrorCode.MALFORMED_EVENT,
        message=f"line {line.number} skipped: {why}{cut}",
        recoverable=True,
        details=details,
    )


def _why_not_event(data: bytes | bytearray, dialect: str | None) -> str:
    try:
        obj = p.JSON_DECODER.decode(data)
    except msgspec.DecodeError as exc:
        return f"not JSON ({exc})"
    if not isinstance(obj, dict):
        return f"a JSON {type(obj).__name__}, not an object"
    return f"not a valid {dialect} event"


def _unfinished(dialect: str | None, exc: Exception) -> p.Error:
    return p.Error(
        code=ErrorCode.MALFORMED_EVENT,
        message=f"the {dialect} decoder could not finish the stream at end of input: {exc}",
        recoverable=True,
        details={"exception": type(exc).__name__},
    )


def _invalid_utf8(line: Line, exc: UnicodeDecodeError) -> p.Error:
    return p.Error(
        code=ErrorCode.INVALID_UTF8,
        message=f"line {line.number} is not valid UTF-8 (byte {exc.start}); bad bytes replaced with U+FFFD",
        recoverable=True,
        details={"line": line.number, "offset": exc.start},
    )


def _too_long(item: LineTooLong) -> p.Error:
    return p.Error(
        code=ErrorCode.LINE_TOO_LONG,
        message=f"line {item.number} skipped: {item.size} bytes is over the {item.limit}-byte limit",
        recoverable=True,
        fix="raise max_line_bytes (or leave it unset: there is no limit by default)",
        details={"line": item.number, "size": item.size, "limit": item.limit},
    )


# -- readers -----------------------------------------------------------------------


class _ReaderBase:
    """What the sync and async readers share: the pipeline and what it has learnt."""

    def __init__(self, source: object, dialect: str, max_line_bytes: int | None, label: str | None) -> None:
        self._pipeline = _Pipeline(dialect, label=label or _label(source), max_line_bytes=max_line_bytes)

    @property
    def dialect(self) -> str | None:
        """The dialect being decoded (known after the first lines when auto-detecting)."""
        return self._pipeline.dialect

    @property
    def line_number(self) -> int:
        """The last input line read so far."""
        return self._pipeline.line_number


class Reader(_ReaderBase):
    """Iterate canonical events from one input. Use as a context manager to close a file it opened."""

    def __init__(
        self,
        source: Source,
        dialect: str = "auto",
        *,
        max_line_bytes: int | None = None,
        label: str | None = None,
    ) -> None:
        super().__init__(source, dialect, max_line_bytes, label)
        self._file, self._chunks, self._owned = _sync_source(source)

    def batches(self) -> Iterator[list[p.AnyEvent]]:
        """The same events as iterating, in lists (one per chunk of input, maybe empty): less overhead per event."""
        pipeline = self._pipeline
        try:
            for chunk in self._chunk_source():
                yield pipeline.feed_chunk(chunk)
                if pipeline.finished:
                    return
            yield pipeline.finish()
        finally:
            self.close()

    def __iter__(self) -> Iterator[p.AnyEvent]:
        for batch in self.batches():
            yield from batch

    def _chunk_source(self) -> Iterable[bytes]:
        if self._file is None:
            return self._chunks or ()
        read_some = getattr(self._file, "read1", self._file.read)  # read1: whatever a pipe has, no waiting
        return iter(lambda: read_some(CHUNK_BYTES), b"")

    def close(self) -> None:
        if self._owned and self._file is not None:
            self._file.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read(
    source: Source, dialect: str = "auto", *, max_line_bytes: int | None = None, label: str | None = None
) -> Reader:
    """Canonical events from a path, a binary file, ``bytes`` or an iterable of byte chunks.

    ``dialect="auto"`` detects the format from the first lines; pass a name to
    force one. ``max_line_bytes`` (off by default) turns longer lines into
    ``LINE_TOO_LONG`` errors instead of reading them.
    """
    return Reader(source, dialect, max_line_bytes=max_line_bytes, label=label)


def _label(source: object) -> str:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    name = getattr(source, "name", None)
    return name if isinstance(name, str) else "<stream>"


def _sync_source(source: Source) -> tuple[IO[bytes] | None, Iterable[bytes] | None, bool]:
    """(file, chunks, owned): exactly one of file and chunks is set."""
    if isinstance(source, (str, os.PathLike)):
        return open(source, "rb"), None, True
    if isinstance(source, (bytes, bytearray, memoryview)):
        return None, [bytes(source)], False
    if hasattr(source, "readline"):
        return _binary_file(source), None, False
    if isinstance(source, Iterable):
        return None, source, False
    raise TypeError(
        f"cannot read events from {type(source).__name__}: pass a path, a binary file or byte chunks"
    )


def _binary_file(source: object) -> IO[bytes]:
    """The bytes of a file-like source: a text stream such as ``sys.stdin`` is read through its ``buffer``."""
    return cast("IO[bytes]", getattr(source, "buffer", source))  # duck-typed: the caller saw it can read


class AsyncReader(_ReaderBase):
    """The async twin of :class:`Reader`: same events, same guarantees."""

    def __init__(
        self,
        source: AsyncSource,
        dialect: str = "auto",
        *,
        max_line_bytes: int | None = None,
        label: str | None = None,
    ) -> None:
        super().__init__(source, dialect, max_line_bytes, label)
        self._source = source

    async def batches(self) -> AsyncIterator[list[p.AnyEvent]]:
        pipeline = self._pipeline
        async for chunk in _async_chunks(self._source):
            yield pipeline.feed_chunk(chunk)
            if pipeline.finished:
                return
        yield pipeline.finish()

    async def __aiter__(self) -> AsyncIterator[p.AnyEvent]:
        async for batch in self.batches():
            for event in batch:
                yield event


def aread(
    source: AsyncSource, dialect: str = "auto", *, max_line_bytes: int | None = None, label: str | None = None
) -> AsyncReader:
    """``async for event in aread(stream_reader)``: :func:`read` for asyncio.

    Never uses ``StreamReader.readline`` (its 64 KiB limit would break on long lines).
    """
    return AsyncReader(source, dialect, max_line_bytes=max_line_bytes, label=label)


async def _async_chunks(source: AsyncSource) -> AsyncIterator[bytes]:
    import asyncio

    if isinstance(source, asyncio.StreamReader):
        while chunk := await source.read(CHUNK_BYTES):
            yield chunk
    elif isinstance(source, AsyncIterable):
        async for chunk in source:
            yield chunk
    elif isinstance(source, (str, os.PathLike)) or hasattr(source, "read"):
        async for chunk in _file_chunks(source):  # type: ignore[arg-type]
            yield chunk
    elif isinstance(source, Iterable):
        for chunk in source:
            yield chunk
    else:
        raise TypeError(f"cannot read events from {type(source).__name__}")


async def _file_chunks(source: str | os.PathLike[str] | IO[bytes]) -> AsyncIterator[bytes]:
    """A file (or pipe) read in a worker thread, so the event loop never blocks on it."""
    import asyncio

    file: IO[bytes]
    if isinstance(source, (str, os.PathLike)):
        file, owned = open(source, "rb"), True
    else:
        file, owned = _binary_file(source), False
    read_some = getattr(file, "read1", file.read)
    try:
        while chunk := await asyncio.to_thread(read_some, CHUNK_BYTES):
            yield chunk
    finally:
        if owned:
            file.close()


# -- child processes ---------------------------------------------------------------


class Spawn:
    """A child process whose stdout is read as a stream. Iterate it for canonical events.

    Bounded everywhere: after the child's ``result`` (or after its stdout closes)
    it gets ``exit_timeout_s`` to exit, then SIGTERM, then SIGKILL after
    ``cancel_grace_s``. stderr is drained by a thread (the child can never block
    on it); :attr:`stderr` keeps its last ``stderr_limit`` characters.
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
    ) -> None:
        if not argv:
            raise ValueError("spawn() needs a command to run")
        self.argv = list(argv)
        self.stderr_as_logs = stderr_as_logs
        self.cancel_grace_s = cancel_grace_s
        self.exit_timeout_s = exit_timeout_s
        self.new_process_group = new_process_group
        self._popen_kwargs: dict[str, Any] = {"cwd": cwd, "env": env, "stdin": stdin}
        self._pipeline = _Pipeline(
            dialect, label=shlex.join(self.argv), cwd=cwd or os.getcwd(), max_line_bytes=max_line_bytes
        )
        self._stderr = _StderrTail(stderr_limit, on_stderr, self._on_stderr_line if stderr_as_logs else None)
        self.proc: subprocess.Popen[bytes] | None = None
        self._launch_error: OSError | None = None
        self._started_at = 0.0
        self._cancelled_with = 0
        self._stopped_hung = False
        self._kill_timer: threading.Timer | None = None
        self._wake_r, self._wake_w = -1, -1
        self._wake_lock = threading.Lock()
        self._logs: deque[str] = deque()

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> Spawn:
        """Start the child (``__enter__`` and the first iteration do it); a missing binary is not raised."""
        if self._started_at:
            return self
        self._started_at = time.monotonic()
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

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def returncode(self) -> int | None:
        """The child's exit status once it has exited (negative: killed by that signal)."""
        return self.proc.poll() if self.proc is not None else None

    @property
    def stderr(self) -> str:
        """What the child wrote on stderr so far (its last ``stderr_limit`` characters)."""
        return self._stderr.text()

    @property
    def dialect(self) -> str | None:
        return self._pipeline.dialect

    def send_signal(self, signum: int) -> None:
        """Signal the child (its whole process group with ``new_process_group``) if it still runs."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            if self.new_process_group:
                os.killpg(proc.pid, signum)
            else:
                proc.send_signal(signum)
        except ProcessLookupError:
            pass

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
            self._kill_timer.start()

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def close(self) -> None:
        """Make sure the child is gone (bounded: terminate, then kill) and release the pipes."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            wait = self.exit_timeout_s if self._pipeline.finished else 0.0
            self._reap(wait)
        if self._kill_timer is not None:
            self._kill_timer.cancel()
        if self._stderr.join(timeout=1.0):
            assert proc.stderr is not None
            proc.stderr.close()  # left open while a grandchild still holds the pipe and the thread reads it
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
        for signum in (signal.SIGTERM, signal.SIGKILL):
            try:
                return self.proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                self.send_signal(signum)
                wait_s = self.cancel_grace_s
        return self.proc.wait()

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
            self._stderr.join(timeout=1.0)
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
        with _Watch(fd, self._wake_r, self.proc) as watch:
            while True:
                chunk = watch.next_chunk(self.exit_timeout_s)
                if chunk is None:
                    yield from self._logs_now()
                    continue
                yield from pipeline.feed_chunk(chunk) if chunk else pipeline.end_of_input()
                if pipeline.finished:
                    return
                if not chunk:
                    if watch.held_open:
                        self._stop_stragglers()
                    return

    def _stop_stragglers(self) -> None:
        """The child is gone but something it started still holds our pipe: end its process group too."""
        if not self.new_process_group or self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass

    def _drain_until_exit(self, deadline: float) -> None:
        """After the result: discard further output until the child exits; stop it if it does not in time."""
        assert self.proc is not None and self.proc.stdout is not None
        with _Watch(self.proc.stdout.fileno(), -1, self.proc) as watch:
            while time.monotonic() < deadline:
                if watch.next_chunk(0.0, deadline=deadline) == b"":
                    break
        self._reap(max(0.0, deadline - time.monotonic()))

    def _wait_after_eof(self) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=self.exit_timeout_s)
        except subprocess.TimeoutExpired:
            self._stopped_hung = True
            return self._reap(0.0)

    def _on_stderr_line(self, text: str) -> None:
        """From the stderr thread: queue the line as a log event and wake the reading loop."""
        self._logs.append(text)
        with self._wake_lock:
            if self._wake_w < 0:
                return
            try:
                os.write(self._wake_w, b"\0")
            except BlockingIOError:
                pass  # the pipe is full: the loop is awake already

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
        if self._cancelled_with:
            code, subtype, fix = ErrorCode.INTERRUPTED, "interrupted", None
            message = f"cancelled with {_signal_name(self._cancelled_with)}: the child ended ({died}) without a result"
            exit_code = exit_code or 128 + self._cancelled_with
        elif self._stopped_hung:
            code, subtype = ErrorCode.STREAM_TRUNCATED, "error"
            message = (
                f"the child closed its output without a result and had not exited {self.exit_timeout_s:g}s later;"
                f" it was stopped ({died})"
            )
        elif status == 0:
            code, subtype = ErrorCode.STREAM_TRUNCATED, "error"
            message = "the child exited with status 0 without a result event (its stream was cut short)"
            exit_code = ExitCode.ERROR
        else:
            code, subtype = ErrorCode.PROCESS_CRASHED, "error"
            message = f"the child ended ({died}) before its result event"
        return Ending(code, message, exit_code, subtype, fix, details, took)


def spawn(argv: Sequence[str], dialect: str = "auto", **options: Any) -> Spawn:
    """Run ``argv`` and iterate its stdout as canonical events; see :class:`Spawn` for the options.

    ``with spawn(["gemini", "-p", "hi", "-o", "stream-json"]) as child: for event in child: ...``
    """
    return Spawn(argv, dialect, **options)


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

    def _timeout(self, linger_s: float, deadline: float | None) -> float | None:
        limits = []
        if self.exited_at:
            limits.append(self.exited_at + linger_s)
        elif self._pidfd < 0:
            limits.append(time.monotonic() + 0.2)  # no pidfd on this system: poll for the exit
        if deadline is not None:
            limits.append(deadline)
        return max(0.0, min(limits) - time.monotonic()) if limits else None


def _pidfd(pid: int) -> int:
    """A descriptor that becomes readable when ``pid`` exits (Linux), or -1."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return -1


class _StderrTail:
    """Drains a child's stderr in a thread: keeps the tail, echoes lines, feeds log events."""

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

    def start(self, fd: int) -> None:
        self._thread = threading.Thread(target=self._run, args=(fd,), name="agentstream-stderr", daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> bool:
        """Wait for the draining to end; True once it has."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def _run(self, fd: int) -> None:
        splitter = LineSplitter(max_line_bytes=self.limit)
        while True:
            try:
                chunk = os.read(fd, CHUNK_BYTES)
            except OSError:
                break
            for item in splitter.feed(chunk) if chunk else splitter.close():
                self._add(item)
            if not chunk:
                break

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
