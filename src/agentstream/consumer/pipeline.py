"""Lines in, canonical events out: dialect detection, decoding, bad-line reports, made-up start and end.

Shared by every reader: :mod:`.reader` (files, pipes, asyncio) and :mod:`.spawn` (child processes).

Whatever comes in, what goes out is a valid protocol v1 session (``agentstream
validate`` accepts it): one session id, ``seq`` 0, 1, 2 … with no gap, every
turn opened by a ``start`` and closed by a ``result``, every tool call and delta
run closed before that result, a fatal error only right before it. Memory holds
one line, the work still open and a bounded number of held events.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, Literal, NamedTuple, TypeAlias

import msgspec

from agentstream import protocol as p
from agentstream._accel import speedups
from agentstream._lines import (
    LONG_LINE_BYTES,
    BlockSplitter,
    Line,
    LineSplitter,
    LineTooLong,
    count_lines,
    one_value_per_line,
    parse_json,
    split_block,
)
from agentstream._recent_ids import RecentIds
from agentstream.dialects.base import DialectDecoder
from agentstream.ending import closing_events, ending_events, process_exit_code
from agentstream.errors import AgentstreamError, ErrorCode, ExitCode, MalformedEventError
from agentstream.transcript import TALLY_KINDS, Tally, tally_add

__all__ = ["CHUNK_BYTES", "DETECT_LINES", "Ending", "Pipeline", "Turns"]

DETECT_LINES: Final = 8
"""JSON objects looked at, at most, to recognise the dialect."""
DETECT_NOISE_LINES: Final = 256
"""Non-blank lines buffered at most to recognise the dialect: lines that are not JSON objects (a tool's
warnings before its first event) do not count toward :data:`DETECT_LINES`, but do toward this. Also the
noise lines, at most, before a multi-line JSON document that is still recognised as one."""
PREVIEW_CHARS: Final = 120
CHUNK_BYTES: Final = 1 << 16
HELD_LIMIT: Final = 64
"""Events made up before a turn's ``start`` held for it at most; past that, the start is made up."""
DOCUMENT_LIMIT: Final = 64 << 20
"""Bytes a multi-line JSON document (a CLI's ``--output-format json``) may take before it is given up on."""

Turns: TypeAlias = Literal["one", "many"]
"""Whether reading stops at the first ``result`` (one run) or goes on to later turns until the input ends."""


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

    Shared by every reader (sync, async, child process). Output events are
    stamped into one session (the input's own id when it has one) with a
    contiguous ``seq``; the input's stamps are kept when they already fit.
    With ``turns="many"`` a ``result`` ends one turn and the next event opens
    another (its own ``start``, or one made up), in the same session with ``seq``
    going on; with ``turns="one"`` the first ``result`` ends the reading.
    """

    def __init__(
        self,
        dialect: str,
        *,
        label: str,
        cwd: str = "",
        max_line_bytes: int | None = None,
        turns: Turns = "many",
        command: Sequence[str] = (),
    ) -> None:
        self.label, self.cwd, self.turns = label, cwd, turns
        self.command = command
        """The command line of the child this pipeline reads, if any: what it names (its model) the stream may not."""
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
        self._document: bytearray | None = None
        """The lines of a multi-line JSON document being gathered (before any event was read)."""
        self._document_first = 0
        self._preamble = True
        """Before the first line read as an event: a line that is only ``{`` or ``[`` opens a document."""
        self._bad_lines = 0
        self._held: list[p.Event] = []
        self._held_fatal: p.Error | None = None
        self._session = ""
        self._next_seq = 0
        self.turn_open = False
        self.turn_count = 0
        """Turns closed by a ``result`` so far."""
        self.finished = False
        """True once nothing more will be read: the first result with ``turns="one"``, or the end of input."""
        self.tally = Tally(for_ending=True)
        """The current turn's totals and open work."""
        self._closed_calls: RecentIds[str] = RecentIds()
        self._closed_runs: RecentIds[tuple[bool, str]] = RecentIds()
        self.after_end: list[p.Event] = []
        """Reports about input after the last result that no turn followed (at most HELD_LIMIT of them)."""
        self.after_end_count = 0

    @property
    def started(self) -> bool:
        """Whether a ``start`` has been written."""
        return bool(self._session)

    @property
    def named_session(self) -> str | None:
        """The session id once a ``start`` is written, when the input gave it (its CLI's own, the one that resumes
        it); ``None`` while none is written, or when the reader made the id up."""
        decoder = self._decoder
        return self._session if self._session and decoder is not None and decoder.session_named else None

    def _use(self, name: str) -> None:
        from agentstream.dialects import get_dialect

        dialect = get_dialect(name)
        self._decoder = dialect.decoder()
        if self.command:
            self._decoder.named_model = dialect.named_model(self.command)
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
        else:
            tail = self._blocks.close()
            out = self.feed(Line(self.line_number + 1, tail, False)) if tail else []
        if self._document is not None:
            out += self._end_document()
        return out

    def _feed_block(self, block: bytes | bytearray) -> list[p.AnyEvent]:
        """Whole lines: decoded in one call when the stream is plain, healthy canonical, else line by line."""
        # A block holding a very long line is read line by line, so that the line is held once (LongLine).
        if (
            self.dialect == "canonical"
            and self.turn_open
            and self._held_fatal is None
            and not self.finished
            and len(block) < LONG_LINE_BYTES
        ):
            try:
                events = p.decode_lines(block)
            except MalformedEventError:
                pass  # a bad or unknown line in this block: the careful path below reports it
            else:
                lines = count_lines(block)
                if one_value_per_line(block, lines, len(events)):
                    self.line_number += lines
                    return self._accept(events)
        number = self.line_number
        parts = split_block(block)
        decoder = self._decoder
        if decoder is None or self._document is not None or self._preamble or self.turns == "one":
            out: list[p.AnyEvent] = []
            for data in parts:  # line by line: detection, a document, or a first result that ends the reading
                number += 1
                out += self.feed(Line(number, data, True))
                if self.finished:
                    break
            self.line_number = number
            self.partial = False
            return out
        out = []
        start, count = 0, len(parts)
        # Runs of lines the decoder reads, each accepted at once, with a bad line reported between two runs.
        while start < count:
            events, stop, reason = decoder.decode_lines(parts, start)
            out += self._accept(events)
            if stop == count:
                break
            out += self._bad_line(Line(number + stop + 1, parts[stop], True), reason)
            start = stop + 1
        self.line_number = number + count
        self.partial = False
        return out

    def feed(self, item: Line | LineTooLong) -> list[p.AnyEvent]:
        """Events from one framed line."""
        self.line_number = item.number
        self.partial = isinstance(item, Line) and not item.terminated
        if self.finished:
            return []
        if self._document is not None:
            return self._gather_document(item)
        if self._preamble and isinstance(item, Line):
            return self._before_events(item)
        if self._decoder is None:
            return self._detect(item)
        if isinstance(item, LineTooLong):
            return self.synthetic(_too_long(item))
        return self._decode(item.data, item.number, item.terminated)

    def _before_events(self, item: Line) -> list[p.AnyEvent]:
        """A line before the first event: the start of a document, or noise before one (a CLI's banner)."""
        data = item.data
        if not data.strip():
            return []
        if _opens_document(data):
            self._document, self._document_first = bytearray(data), item.number
            return []
        if data.lstrip()[:1] == b"[":  # a document on one line (Claude's json output with --verbose)
            document = _parse_document(data)
            if isinstance(document, list):
                self._document_first = item.number
                return self._decode_document(document)
        if self._decoder is None:
            out = self._detect(item)  # settling ends the preamble
            if self._objects:
                self._preamble = False
            return out
        bad = self._bad_lines
        out = self._decode(data, item.number, item.terminated)
        self._probed += 1
        if self._bad_lines == bad or self._probed >= DETECT_NOISE_LINES:
            self._preamble = False
        return out

    # -- a whole JSON document (a CLI's --output-format json, pretty-printed) ------------

    def _gather_document(self, item: Line | LineTooLong) -> list[p.AnyEvent]:
        document = self._document
        assert document is not None
        if isinstance(item, LineTooLong) or len(document) + len(item.data) > DOCUMENT_LIMIT:
            return self._give_up_document(item)
        document += b"\n"
        document += item.data
        if item.data[:1] in (b"}", b"]"):  # a top-level closer sits at column 0 in pretty-printed JSON
            obj = _parse_document(document)
            if obj is not None:
                return self._decode_document(obj)
        return []

    def _end_document(self) -> list[p.AnyEvent]:
        document = self._document
        assert document is not None
        obj = _parse_document(document)
        if obj is not None:
            return self._decode_document(obj)
        return self._give_up_document(None)

    def _decode_document(self, obj: Any) -> list[p.AnyEvent]:
        """Hand a whole document to the dialect (detected from it when not given)."""
        self._document, self._preamble = None, False
        out: list[p.AnyEvent] = []
        if self._decoder is None:  # the noise before the document, if any, is reported first
            from agentstream.dialects import detect_document

            out += self._settle(
                detect_document(obj), f"the JSON document of lines {self._document_first}–{self.line_number}"
            )
        assert self._decoder is not None
        number = self._document_first
        try:
            events = self._decoder.decode_document(obj)
        except Exception as exc:  # the dialect failing on the document is the document's problem
            return out + self._bad_line(Line(number, p.JSON_ENCODER.encode(obj), True), exc)
        if events is not None:
            return out + self._accept(events)
        # Not the dialect's own document: a stream line, or an array of them, pretty-printed.
        for item in obj if isinstance(obj, list) else [obj]:
            out += self._decode(p.JSON_ENCODER.encode(item), number, True)
        return out

    def _give_up_document(self, item: Line | LineTooLong | None) -> list[p.AnyEvent]:
        """Not one JSON document after all: read what was gathered line by line."""
        document, self._document, self._preamble = self._document or bytearray(), None, False
        out: list[p.AnyEvent] = []
        for offset, data in enumerate(bytes(document).split(b"\n")):
            out += self.feed(Line(self._document_first + offset, data, True))
        if item is not None:
            out += self.feed(item)
        return out

    # -- lines -----------------------------------------------------------------

    def _decode(self, data: bytes | bytearray, number: int, terminated: bool) -> list[p.AnyEvent]:
        """The events of one line, or the error that says why it was skipped."""
        assert self._decoder is not None
        events, stop, reason = self._decoder.decode_lines([data], 0)
        out = self._accept(events)
        if stop == 0:
            out += self._bad_line(Line(number, data, terminated), reason)
        return out

    def _detect(self, item: Line | LineTooLong) -> list[p.AnyEvent]:
        from agentstream.dialects import detect_dialect, detect_document

        if isinstance(item, Line) and not item.data.strip():
            return []
        self._probe.append(item)
        self._probed += 1
        obj = _parse_object(_sse_payload(item.data)) if isinstance(item, Line) else None
        if obj is not None:
            self._objects.append(obj)
            name = detect_dialect(self._objects) or (
                detect_document(obj) if len(self._objects) == 1 else None
            )
            if name is not None:
                return self._settle(name)
        settled = len(self._objects) >= DETECT_LINES or self._probed >= DETECT_NOISE_LINES
        return self._settle(None) if settled else []

    def _settle(self, name: str | None, what: str = "") -> list[p.AnyEvent]:
        """Choose the decoder, then replay the buffered lines through it."""
        out = self._choose(name, what or f"the first {self._probed} lines")
        probe, self._probe, self._objects, self._preamble = self._probe, [], [], False
        for item in probe:
            out += self.feed(item)
        return out

    def _choose(self, name: str | None, what: str) -> list[p.AnyEvent]:
        """Use the dialect detection found, or canonical with a notice that none matched ``what``."""
        self._use(name or "canonical")
        if name is not None:
            return []
        return self.synthetic(
            p.Error(
                code=ErrorCode.UNKNOWN_DIALECT,
                message=f"no known dialect matches {what}; read as canonical",
                recoverable=True,
                fix="pass the dialect explicitly (--from NAME); 'agentstream dialects' lists them",
            )
        )

    def _bad_line(self, line: Line, reason: BaseException | None) -> list[p.AnyEvent]:
        data = line.data
        if not data.strip():
            return []
        self._bad_lines += 1
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
        """Decoded events into the output: inside an open turn, runs of ordinary ones in one tight loop.

        An ordinary event (one that neither opens nor ends a turn, is not an error and pairs as it should)
        only needs its stamps checked (kept when they fit), its run or call noted and a place in the tally
        (:func:`_accept_plain`). Everything else, such as a delta that would reopen a closed run or a result
        for an unknown call, goes through :meth:`_take` and the rest of the rules.
        """
        out: list[p.AnyEvent] = []
        times_fit = p.events_timestamped(events)  # one check for the block, usually
        index, count = 0, len(events)
        while index < count:
            if self.turn_open and self._held_fatal is None and not self.finished:
                index, self._next_seq = _accept_plain(
                    events,
                    index,
                    out,
                    self.tally,
                    self._closed_runs,
                    self._closed_calls,
                    self._session,
                    self._next_seq,
                    times_fit,
                    _ACCEPT_KINDS,
                )
                if index == count:
                    break
            elif self.finished:
                break
            self._take(events[index], out)  # a turn may open or end here: its tally and pairing state are new
            index += 1
        return out

    def _take(self, event: p.AnyEvent, out: list[p.AnyEvent]) -> None:
        """One decoded event: opens a turn, ends one, waits (a fatal error) or passes."""
        if type(event) is p.UnknownEvent:
            event = self._foreign(event)
        if type(event) is p.Start:
            if not self.turn_open:
                self._open(event, out)
                return
            event = p.GenericEvent(name="start", data=_event_data(event))  # a second start inside one turn
        if not self.turn_open and self.turn_count:
            if type(event) is p.Result:
                self._stray_result(event)  # nothing between two results: no turn happened
                return
            if type(event) is p.Error and not event.recoverable and len(self._held) < HELD_LIMIT:
                event.recoverable = True  # a turn it opens went on after it; a result right after it: stray
                self._held.append(event)
                return
        if not self.turn_open:
            self._open(None, out, session_id=event.session_id)
        if type(event) is p.Result:
            self._close(event, out)
            return
        self._release_fatal(out)
        if type(event) in _PAIRED:
            event = self._paired(event, out)  # type: ignore[arg-type]  # _PAIRED holds only Event classes
        if type(event) is p.Error and not event.recoverable:
            self._held_fatal = event  # only a result may follow it: wait to see what comes
            return
        self._emit(event, out)

    def _stray_result(self, result: p.Result) -> None:
        """A result right after a result (Claude Code's spurious one after a background task) opens no turn.

        What waited for the next turn (its fatal error, reports of bad lines) goes aside with it.
        """
        held, self._held = self._held, []
        self.after_end += held[: max(0, HELD_LIMIT - len(self.after_end))]
        self.after_end_count += len(held) + 1
        if len(self.after_end) < HELD_LIMIT:
            report = p.Error(
                code=ErrorCode.MALFORMED_EVENT,
                message=f"a second result ({result.subtype}) right after the turn's result was not read as a turn",
                recoverable=True,
                details={"line": self.line_number},
                synthetic=True,
            )
            self.after_end.append(report)

    def _paired(self, event: p.Event, out: list[p.AnyEvent]) -> p.Event:
        """Tool and delta events the pairing rules cannot place are kept as ``foreign.<type>`` events.

        A result whose call was never seen (a stream that lost its beginning)
        gets a made-up call instead, so the call and its outcome stay together.
        """
        tally = self.tally
        if isinstance(event, p.ToolCall):
            if event.call_id in tally.open_calls or event.call_id in self._closed_calls:
                return _foreign_event(event)
        elif isinstance(event, p.ToolResult):
            if event.call_id in self._closed_calls:
                return _foreign_event(event)
            self._closed_calls.add(event.call_id)
            if event.call_id not in tally.open_calls:
                self._emit(p.ToolCall(call_id=event.call_id, name=event.name, synthetic=True), out)
        elif isinstance(event, p.ToolProgress):
            if event.call_id not in tally.open_calls:
                return _foreign_event(event)
        elif isinstance(event, (p.MessageDelta, p.ReasoningDelta)):
            key = _run_key(event)
            if key not in tally.open_runs and key in self._closed_runs:
                return _foreign_event(event)
        elif isinstance(event, (p.Message, p.Reasoning)):
            self._closed_runs.add(_run_key(event))
        return event

    def _foreign(self, event: p.UnknownEvent) -> p.AnyEvent:
        """An unknown line whose ``type`` is a canonical name cannot pass as is: it is kept as an ``event``."""
        if event.type in p.EVENT_TYPES:
            return p.GenericEvent(name=f"foreign.{event.type}", data=event.raw)
        return event

    def _release_fatal(self, out: list[p.AnyEvent]) -> None:
        """A "fatal" error the stream went on after was not fatal: it goes out as recoverable."""
        held, self._held_fatal = self._held_fatal, None
        if held is not None:
            held.recoverable = True
            self._emit(held, out)

    def _emit(self, event: p.AnyEvent, out: list[p.AnyEvent]) -> None:
        self._stamp(event)
        tally_add(self.tally, event)
        out.append(event)

    def _stamp(self, event: p.AnyEvent) -> None:
        """Into this session, at the next seq; the input's own timestamp kept when it is one."""
        seq = self._next_seq
        self._next_seq = seq + 1
        if isinstance(event, p.UnknownEvent):
            raw = event.raw
            ts = raw.get("ts")
            event.raw = {
                **raw,
                "v": p.PROTOCOL_VERSION,
                "session_id": self._session,
                "seq": seq,
                "ts": ts if isinstance(ts, str) and p.is_timestamp(ts) else p.now_ts(),
            }
            return
        event.v = p.PROTOCOL_VERSION
        event.session_id = self._session
        event.seq = seq
        if not p.is_timestamp(event.ts):
            event.ts = p.now_ts()

    def _open(self, start: p.Start | None, out: list[p.AnyEvent], session_id: str = "") -> None:
        """Open a turn with the input's start (or one made up), then what was held for it.

        The session id is the first one the input gives (its start's, else its first event's).
        """
        if not self._session:
            self._session = (start.session_id if start is not None else session_id) or (
                self._decoder.sequencer.session_id if self._decoder else p.new_id("ses")
            )
        if start is None:
            start = p.Start(command=self.label, cwd=self.cwd, synthetic=True)
        self.turn_open = True
        self.tally = Tally(for_ending=True)
        self._closed_calls, self._closed_runs = RecentIds(), RecentIds()
        self._emit(start, out)
        held, self._held = self._held, []
        for event in held:
            self._emit(event, out)

    def _close(self, result: p.Result, out: list[p.AnyEvent]) -> None:
        """End the turn: close its open work, then its fatal error, then the result (exit code made coherent)."""
        if self.tally.has_open_work:
            for event in closing_events(self.tally, "the turn ended before this tool's result"):
                self._emit(event, out)
        held, self._held_fatal = self._held_fatal, None
        if held is not None:
            _fatal_outcome(held, result)
            self._emit(held, out)
        _coherent_outcome(result)
        self._emit(result, out)
        self.turn_open = False
        self.turn_count += 1
        if self.turns == "one":
            self.finished = True

    def synthetic(self, event: p.Event) -> list[p.AnyEvent]:
        """Stamp an event the reader made up into the output (held back, a bounded number, until a turn opens)."""
        event.synthetic = True
        if self.finished:
            return []
        if self.turn_open:
            out: list[p.AnyEvent] = []
            self._release_fatal(out)
            self._emit(event, out)
            return out
        if self.turn_count:  # after a result: kept aside unless another turn comes
            if len(self._held) >= HELD_LIMIT:
                self.after_end_count += 1
                return []
            self._held.append(event)
            return []
        self._held.append(event)
        if len(self._held) < HELD_LIMIT:
            return []
        out = []
        self._open(None, out)  # the input's start is not coming soon: make one up rather than hold more
        return out

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
        self.finished = True
        if not self.turn_open:
            if self.turn_count:
                self.after_end += self._held
                self.after_end_count += len(self._held)
                self._held = []
                return out
            self._open(None, out)
        out += self._end(ending)
        return out

    def _flush_decoder(self) -> list[p.AnyEvent]:
        """What the decoder still held at end of input; a decoder failing there is reported, not raised."""
        decoder = self._decoder
        assert decoder is not None
        try:
            events = decoder.finish()
        except Exception as exc:  # keep what it had queued, then say what went wrong
            return self._accept(decoder.drain()) + self.synthetic(_unfinished(self.dialect, exc))
        return self._accept(events)

    def _end(self, ending: Ending) -> list[p.AnyEvent]:
        """The made-up end of the open turn: its open work closed, the fatal error, the result."""
        out: list[p.AnyEvent] = []
        held, self._held_fatal = self._held_fatal, None
        if held is not None:  # the input's own fatal error is the reason
            for event in closing_events(
                self.tally, f"the run ended before this tool's result: {held.message}"
            ):
                self._emit(event, out)
            self._emit(held, out)
            info = p.ErrorInfo(code=held.code, message=held.message, fix=held.fix)
        else:
            info = p.ErrorInfo(
                code=ending.code,
                message=ending.message,
                fix=ending.fix if ending.fix is not None else p.UNSET,
            )
        for event in ending_events(
            self.tally,
            info,
            exit_code=ending.exit_code,
            subtype=ending.subtype,
            details=ending.details,
            command=self.label,
            duration_ms=ending.duration_ms,
            error_sent=held is not None,
        ):
            self._emit(event, out)
        self.turn_open = False
        self.turn_count += 1
        return out


_PAIRED: Final = frozenset(
    {p.ToolCall, p.ToolResult, p.ToolProgress, p.MessageDelta, p.ReasoningDelta, p.Message, p.Reasoning}
)
"""Event classes whose pairing the reader checks (one by one)."""
_PLAIN: Final = frozenset({p.Usage, p.Log, p.Status, p.Step, p.Progress, p.GenericEvent})
"""Event classes that neither open nor end a turn nor pair with anything: accepted as they are."""

_ACCEPT_KINDS: Final = (
    p.MessageDelta,
    p.ReasoningDelta,
    p.Message,
    p.Reasoning,
    p.ToolCall,
    p.ToolResult,
    p.ToolProgress,
    _PLAIN,
    p.PROTOCOL_VERSION,
    p,  # its now_ts, looked up at each call
    TALLY_KINDS,
)
"""What :func:`_accept_plain` tells events apart by, and stamps them with (the C twin takes it as an argument)."""


def _accept_plain_py(
    events: list[p.AnyEvent],
    start: int,
    out: list[p.AnyEvent],
    tally: Tally,
    closed_runs: RecentIds[tuple[bool, str]],
    closed_calls: RecentIds[str],
    session: str,
    seq: int,
    times_fit: bool,
    kinds: tuple[Any, ...],
) -> tuple[int, int]:
    """Accept ``events[start:]`` into ``out`` while each is ordinary inside an open turn: stamped into the
    session at ``seq`` on (the input's own time kept when it is one), its run or call noted, tallied.

    Returns the index of the first event that is not ordinary (``len(events)``: none) and the next ``seq``.
    """
    message_delta, reasoning_delta, message, reasoning, tool_call, tool_result, tool_progress = kinds[:7]
    plain_kinds, version = kinds[
        7:9
    ]  # kinds[9] is the protocol module; kinds[10], what the C twin tallies by
    open_runs, open_calls, add = tally.open_runs, tally.open_calls, tally.add
    good_ts = None
    for index in range(start, len(events)):
        event = events[index]
        kind = type(event)
        if kind is message_delta:
            key = (False, event.message_id)  # type: ignore[union-attr]
            plain = key in open_runs or key not in closed_runs
        elif kind is reasoning_delta:
            key = (True, event.reasoning_id)  # type: ignore[union-attr]
            plain = key in open_runs or key not in closed_runs
        elif kind is message:
            closed_runs.add((False, event.message_id))  # type: ignore[union-attr]
            plain = True
        elif kind is reasoning:
            closed_runs.add((True, event.reasoning_id))  # type: ignore[union-attr]
            plain = True
        elif kind is tool_call:
            call_id = event.call_id  # type: ignore[union-attr]
            plain = call_id not in open_calls and call_id not in closed_calls
        elif kind is tool_result:
            call_id = event.call_id  # type: ignore[union-attr]
            plain = call_id in open_calls and call_id not in closed_calls
            if plain:
                closed_calls.add(call_id)
        elif kind is tool_progress:
            plain = event.call_id in open_calls  # type: ignore[union-attr]
        else:
            plain = kind in plain_kinds
        if not plain:
            return index, seq
        # The reading's stamps (the same values when the input's own fit: cheaper than comparing first).
        event.v, event.session_id, event.seq = version, session, seq  # type: ignore[misc]
        if not times_fit:  # some event's time is not one: find which (most share a clock reading)
            ts = event.ts
            if ts is not good_ts:
                if p.is_timestamp(ts):
                    good_ts = ts
                else:
                    event.ts = p.now_ts()  # type: ignore[misc]
        seq += 1
        add(event)
        out.append(event)
    return len(events), seq


_accept_plain: Callable[..., tuple[int, int]] = speedups.accept_plain if speedups else _accept_plain_py


def _event_data(event: p.Event) -> dict[str, Any]:
    """An event's own fields without its stamps, to carry it inside an ``event``."""
    data: dict[str, Any] = msgspec.to_builtins(event)
    for key in ("type", "v", "session_id", "seq", "ts", "synthetic"):
        data.pop(key, None)
    return data


def _run_key(event: p.MessageDelta | p.Message | p.ReasoningDelta | p.Reasoning) -> tuple[bool, str]:
    if isinstance(event, (p.MessageDelta, p.Message)):
        return (False, event.message_id)
    return (True, event.reasoning_id)


def _foreign_event(event: p.Event) -> p.GenericEvent:
    """An event kept whole as data, where its own type would break the stream's rules."""
    return p.GenericEvent(name=f"foreign.{event.type}", data=_event_data(event))


def _coherent_outcome(result: p.Result) -> None:
    """``ok`` exactly when ``exit_code`` is 0, and an exit code a process can have (0–255)."""
    failed = not result.ok or result.exit_code != 0
    result.ok = not failed
    result.exit_code = process_exit_code(result.exit_code, ok=not failed)


def _fatal_outcome(fatal: p.Error, result: p.Result) -> None:
    """The result right after a fatal error tells its failure (a producer may still say ok, or fail otherwise).

    A result that says ok, or fails without saying why, gets the fatal error as its error; one that fails
    with another error keeps it, and the fatal error goes out as a notice (recoverable).
    """
    info = p.ErrorInfo(code=fatal.code, message=fatal.message, fix=fatal.fix)
    if result.ok:
        result.ok, result.subtype, result.error = False, "error", info
        result.exit_code = result.exit_code or ExitCode.ERROR
    elif isinstance(result.error, p.UnsetType):
        result.error = info
    elif result.error.code != fatal.code:
        fatal.recoverable = True


def _opens_document(data: bytes | bytearray) -> bool:
    """A first line that is only ``{`` or ``[``: the start of a pretty-printed JSON document."""
    return data.strip() in (b"{", b"[")


def _parse_document(data: bytes | bytearray) -> Any:
    try:
        return p.JSON_DECODER.decode(data)
    except Exception:
        return None


def _sse_payload(data: bytes | bytearray) -> bytes | bytearray:
    """A line as detection sees it: the JSON of an SSE ``data:`` line (AG-UI over SSE), else the line itself."""
    return data[5:] if data.startswith(b"data:") else data


def _parse_object(data: bytes | bytearray) -> dict[str, Any] | None:
    try:
        obj = parse_json(data)
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
        fix=_malformed_fix(reason, dialect),
        details=details,
    )


def _malformed_fix(reason: BaseException | None, dialect: str | None) -> str:
    """The decoder's own advice when it gave some; else what helps with noise and with a wrong dialect."""
    if isinstance(reason, AgentstreamError) and reason.fix:
        return reason.fix
    return (
        _MALFORMED_FIX
        if dialect is None
        else f"{_MALFORMED_FIX}; if the input is not {dialect}, {_FORCE_DIALECT}"
    )


_MALFORMED_FIX: Final = (
    "if the line is noise, nothing is lost (reading went on after it); else fix the tool that wrote it"
)
_FORCE_DIALECT: Final = "'--from NAME' reads it as another dialect ('agentstream dialects' lists them)"


def _why_not_event(data: bytes | bytearray, dialect: str | None) -> str:
    try:
        obj = parse_json(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        return f"not JSON ({exc})"
    if not isinstance(obj, dict):
        from agentstream.dialects.kit import kind_of

        return f"JSON but {kind_of(obj)}, not an object"
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
