"""Lines in, canonical events out: dialect detection, decoding, bad-line reports, made-up start and end.

Shared by every reader: :mod:`.reader` (files, pipes, asyncio) and :mod:`.spawn` (child processes).
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

import msgspec

from agentstream import protocol as p
from agentstream._lines import BlockSplitter, Line, LineSplitter, LineTooLong
from agentstream.dialects.base import DialectDecoder
from agentstream.errors import ErrorCode, ExitCode, MalformedEventError
from agentstream.transcript import Tally

__all__ = ["CHUNK_BYTES", "DETECT_LINES", "Ending", "Pipeline"]

DETECT_LINES: Final = 8
"""Non-blank lines buffered at most to recognise the dialect."""
PREVIEW_CHARS: Final = 120
CHUNK_BYTES: Final = 1 << 16


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


class Pipeline:
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
