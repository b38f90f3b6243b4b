"""``agentstream convert [--from X] --to Y [FILE|-]``: one dialect in, another out, streaming.

Memory stays flat (one chunk of input at a time) and output is written as each
chunk is decoded: flushed per chunk when the input is a pipe or a terminal, so
live conversion works, and buffered for regular files. A signal ends the output
whole: the open turn gets its made-up ``INTERRUPTED`` ending, and the command
exits 128 + the signal.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING

from agentstream.cli._options import (
    add_input_argument,
    add_output_options,
    add_to_alias,
    check_dialect,
    note_after_end,
    open_input,
    positive_int,
)
from agentstream.cli._progress import is_regular_file, with_progress

if TYPE_CHECKING:
    from types import FrameType

    from agentstream.protocol import AnyEvent
    from agentstream.render import ColorChoice, OutputFormat, Sink


def configure(parser: argparse.ArgumentParser) -> None:
    add_input_argument(parser)
    add_output_options(parser)
    add_to_alias(parser)
    parser.add_argument(
        "--max-line-bytes",
        type=positive_int,
        default=None,
        metavar="N",
        help="report lines longer than N bytes as LINE_TOO_LONG errors instead of reading them (default: no limit)",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress line on stderr, even on a terminal"
    )


def run(args: argparse.Namespace) -> int:
    """Exit 0 once the whole input is converted (a broken input shows up as error events, not as the exit code)."""
    check_dialect(args.from_dialect)
    check_dialect(args.dialect, writing=True)
    source = open_input(args.file)
    stop = _StopOnSignal()
    stop.handlers.install()
    final_exit: int | None = None
    try:
        convert(
            source,
            sys.stdout.buffer,
            from_dialect=args.from_dialect,
            to_dialect=args.dialect,
            output_format=args.output_format,
            color=args.color,
            max_line_bytes=args.max_line_bytes,
            label="<stdin>" if args.file == "-" else args.file,
            progress=None if args.no_progress else sys.stderr,
            stop=stop,
        )
        stop.end()  # the output is whole: a signal from here on changes nothing
        final_exit = 0
    finally:
        stop.handlers.restore(final_exit)
    return 0


class _StopOnSignal:
    """The command's signal handler: a signal ends the conversion, with the input's open turn made whole.

    It unwinds the main thread only where the reader waits for input. Anywhere else (a batch being
    decoded or written) the signal is held: it is raised once the batch is out (:meth:`check`), and sent
    again shortly in case the reader has started waiting meanwhile. A second signal, while the first
    is held or its ending is written, means stdout is not being read: the process ends at once
    (:func:`~agentstream._signals.stop_waiting_for_output`). Once the output is whole, signals change
    nothing.
    """

    def __init__(self) -> None:
        from agentstream._signals import HeldSignal, SignalHandlers

        self.held = HeldSignal()
        self.handlers = SignalHandlers(self._on_signal)
        self.ending = False

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        from agentstream._signals import Interrupted, stop_waiting_for_output
        from agentstream.consumer.reader import WAITING

        if self.ending:
            if self.held.pending:  # an interrupted run's ending, waiting on a reader that stopped reading
                stop_waiting_for_output(self.held.pending)
            return
        if frame is not None and frame.f_code in WAITING:
            self.held.take()
            raise Interrupted(signum)
        self.held.hold_or_stop_waiting(signum, frame, redeliver=True)

    def end(self, interrupted_by: int | None = None) -> None:
        """The output is ending: whole (signals change nothing), or after ``interrupted_by`` (a further
        signal is a second one)."""
        self.ending = True
        if interrupted_by is not None:
            self.held.hold(interrupted_by)

    def check(self) -> None:
        """Between batches: a signal held meanwhile stops the conversion here."""
        if self.held.pending:
            from agentstream._signals import Interrupted

            raise Interrupted(self.held.take())


def convert(
    source: IO[bytes],
    out: IO[bytes],
    *,
    from_dialect: str = "auto",
    to_dialect: str | None = None,
    output_format: OutputFormat = "stream-json",
    color: ColorChoice = "auto",
    max_line_bytes: int | None = None,
    label: str | None = None,
    progress: IO[str] | None = None,
    stop: _StopOnSignal | None = None,
) -> None:
    """Read ``source`` in one dialect and write it to ``out`` in another (the whole command, minus options).

    With ``stop``, a signal it lets through ends the output with an interrupted ending, then goes on up.
    """
    from agentstream._signals import Interrupted
    from agentstream.consumer import read
    from agentstream.render import make_sink

    writer = _Output(out, flush_each=not is_regular_file(source))
    sink = (
        _LinesOut(writer, to_dialect)
        if output_format == "stream-json"
        else make_sink(output_format, writer, dialect=to_dialect, color=color)
    )
    with read(source, from_dialect, max_line_bytes=max_line_bytes, label=label) as reader:
        batches: Iterable[list[AnyEvent]] = reader.batches()
        if progress is not None:
            batches = with_progress(batches, source, progress, verb="converting")
        try:
            for batch in batches:
                _emit(sink, batch)
                if stop is not None:
                    stop.check()
        except Interrupted as interrupted:
            if stop is None:
                raise
            stop.end(interrupted.signum)
            _emit(sink, reader.interrupted(interrupted.signum))
            sink.close()
            writer.flush()
            raise
    sink.close()
    writer.flush()
    if progress is not None:
        note_after_end(reader)


def _emit(sink: _LinesOut | Sink, batch: list[AnyEvent]) -> None:
    """One batch into the sink: whole, for ``stream-json``; event by event for the other formats."""
    if isinstance(sink, _LinesOut):
        sink.emit_batch(batch)
        return
    for event in batch:
        sink.emit(event)


_LONG_LINE = 1 << 20
"""A batch with a line this long is written line by line rather than joined (no second copy of it)."""


class _LinesOut:
    """The ``stream-json`` sink, a batch at a time: one encode call or one join, and one write, per batch.

    Writes the same bytes as :class:`agentstream.render.lines.LinesSink` fed one event at a time.
    """

    def __init__(self, writer: _Output, dialect: str | None) -> None:
        from agentstream.dialects import get_dialect

        self._writer = writer
        self._encoder = None if dialect is None or dialect == "canonical" else get_dialect(dialect).encoder()

    def emit_batch(self, batch: list[AnyEvent]) -> None:
        encoder = self._encoder
        if encoder is None:
            self._write_canonical(batch)
            return
        self._write(encoder.encode_batch(batch))

    def close(self) -> None:
        if self._encoder is not None:
            self._write(self._encoder.finish())

    def _write(self, lines: list[bytes]) -> None:
        if not lines:
            return
        if max(map(len, lines)) < _LONG_LINE:  # the usual batch: one join, one write
            lines.append(b"")
            self._writer.write(b"\n".join(lines))
        else:  # a huge line goes out as it is, not copied into a joined buffer
            self._writer.write_lines(lines)

    def _write_canonical(self, batch: list[AnyEvent]) -> None:
        from agentstream import protocol as p

        if p.UnknownEvent in map(type, batch):  # the scan in C
            self._writer.write(b"".join(map(p.encode_line, batch)))
        else:
            self._writer.write(p.JSON_ENCODER.encode_lines(batch))


class _Output:
    """Buffered writes to stdout, flushed per line for live input; a failed write ends the command (see render)."""

    def __init__(self, file: IO[bytes], *, flush_each: bool) -> None:
        self.file, self.flush_each = file, flush_each

    def write(self, data: bytes | bytearray) -> None:
        try:
            self.file.write(data)
            if self.flush_each:
                self.file.flush()
        except OSError as exc:
            self._failed(exc)

    def write_lines(self, lines: list[bytes]) -> None:
        """Each line and its newline, without joining them first (flushed once at the end, for live input)."""
        try:
            for line in lines:
                self.file.write(line)
                self.file.write(b"\n")
            if self.flush_each:
                self.file.flush()
        except OSError as exc:
            self._failed(exc)

    def flush(self) -> None:
        try:
            self.file.flush()
        except OSError as exc:
            self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        from agentstream.render import output_failure, silence_stdout

        if self.file is sys.stdout.buffer:
            silence_stdout(sys.stdout.fileno())  # so the interpreter's final flush does not complain again
        raise output_failure(exc) from None
