"""Option bundles shared by several commands."""

from __future__ import annotations

import argparse
import math
import sys
from typing import IO, TYPE_CHECKING, NamedTuple, cast

from agentstream.render import COLOR_CHOICES, OUTPUT_FORMATS

if TYPE_CHECKING:
    from agentstream.consumer import Reader
    from agentstream.protocol import AnyEvent, Error


# -- numeric option types: every number on the command line is checked the same way ------------


def _number(text: str, kind: type[int] | type[float], *, minimum: float, what: str) -> float:
    """``text`` as ``kind``, written the plain way: Python would also take ``1_000`` and other scripts' digits."""
    try:
        if not text.isascii() or "_" in text:
            raise ValueError(text)
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if not math.isfinite(value) or value < minimum:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def non_negative_int(text: str) -> int:
    """A count where 0 means none (or "no limit", as the option's help says)."""
    return int(_number(text, int, minimum=0, what="a whole number of 0 or more"))


def positive_int(text: str) -> int:
    return int(_number(text, int, minimum=1, what="a whole number of 1 or more"))


def exit_status(text: str) -> int:
    value = non_negative_int(text)
    if value > 255:
        raise argparse.ArgumentTypeError(f"{text!r} is not an exit status (0 to 255)")
    return value


def seconds(text: str) -> float:
    """A duration in seconds, 0 or more."""
    return float(_number(text, float, minimum=0.0, what="a number of seconds (0 or more)"))


def positive_seconds(text: str) -> float:
    """A duration that must be longer than zero (a timeout that could never be met otherwise)."""
    return _positive(text, "a positive number of seconds")


def positive_dollars(text: str) -> float:
    """An amount of money that must be more than zero (a budget nothing could be spent within otherwise)."""
    return _positive(text, "a positive amount in US dollars")


def _positive(text: str, what: str) -> float:
    value = float(_number(text, float, minimum=0.0, what=what))
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def add_output_options(parser: argparse.ArgumentParser, *, default: str | None = "stream-json") -> None:
    """``-o/--output-format`` and ``--dialect``; ``default=None`` means text on a terminal, else stream-json."""
    shown = default or "text on a terminal, stream-json when piped"
    parser.add_argument(
        "--output-format",
        "-o",
        choices=OUTPUT_FORMATS,
        default=default,
        help=f"what stdout carries (default: {shown})",
    )
    parser.add_argument(
        "--dialect",
        metavar="NAME",
        default=None,
        action=OneDialect,
        help="with stream-json, write this tool's wire format instead of the canonical one; with -o json,"
        " its one result object (claude and cursor, whose JSON output is their result line)",
    )
    add_color_option(parser)


class OneDialect(argparse.Action):
    """``--dialect`` and its alias ``--to``: naming two different output dialects is a usage error, not the last one."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        chosen = getattr(namespace, self.dest, None)
        if chosen is not None and chosen != values:
            parser.error(
                f"{option_string} {values} conflicts with the output dialect already named ({chosen})"
            )
        setattr(namespace, self.dest, values)


def check_output_choice(args: argparse.Namespace) -> None:
    """An output dialect is a stream format: with ``-o text`` (or ``-o json``, unless the dialect's CLI prints
    its result line as its JSON output) it would be silently ignored."""
    dialect, output_format = getattr(args, "dialect", None), getattr(args, "output_format", None)
    if dialect in (None, "canonical") or output_format in (None, "stream-json"):
        return
    if output_format == "json":
        from agentstream.dialects import get_dialect

        if get_dialect(dialect).json_output_is_result_line:
            return
    from agentstream.errors import UsageError

    raise UsageError(
        f"--dialect/--to {dialect} names a stream format, but -o {output_format} writes no stream"
        + (f" (and {dialect}'s JSON output is not its result line)" if output_format == "json" else ""),
        fix=f"drop -o {output_format} (--dialect means stream-json), or drop --dialect",
    )


def add_color_option(parser: argparse.ArgumentParser) -> None:
    """``--color``, for every command that renders text for a person (the rule: ``render.text.use_color``)."""
    parser.add_argument(
        "--color",
        choices=COLOR_CHOICES,
        default="auto",
        help="colour the text output: auto (a terminal, unless NO_COLOR is set or TERM=dumb), always or never",
    )


def resolve_output_format(args: argparse.Namespace) -> None:
    """Fill in an unset ``--output-format``: people get text, programs get stream-json.

    ``--dialect`` names a wire format, so it also means stream-json.
    """
    if args.output_format is None:
        for_person = sys.stdout.isatty() and not args.dialect
        args.output_format = "text" if for_person else "stream-json"


def add_input_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "file", nargs="?", default="-", metavar="FILE", help="a file, or - for stdin (default)"
    )
    parser.add_argument(
        "--from",
        dest="from_dialect",
        metavar="DIALECT",
        default="auto",
        help="the input's wire format (default: detect it from the first lines)",
    )


def open_input(path: str) -> IO[bytes]:
    """A binary reader for a path or ``-``, with a usage error that says what was wrong."""
    if path == "-":
        return stdin_bytes(fix="pass FILE, or give the command a stdin to read: '< FILE' or a pipe")
    from agentstream.errors import UsageError

    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise UsageError(f"no such file: {path}", fix="check the path, or pass - to read stdin") from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a directory", fix="pass a file of NDJSON lines") from None
    except PermissionError:
        raise UsageError(f"cannot read {path}: permission denied") from None


def stdin_bytes(*, fix: str) -> IO[bytes]:
    """Standard input as bytes, or a usage error when the process has none (started with ``<&-``).

    Python sets ``sys.stdin`` to ``None`` when fd 0 is closed at start-up; every
    command that reads stdin comes here, so that is an error with a ``fix``
    (what the command could read instead), never an ``AttributeError``.
    """
    if sys.stdin is None:
        from agentstream.errors import UsageError

        raise UsageError("stdin is not open (was it closed with <&-?)", fix=fix)
    return sys.stdin.buffer


class _Replay:
    """A binary reader that gives back lines already read, then the rest of the source."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self._head = head
        self._rest = rest

    def read1(self, size: int = -1) -> bytes:
        if self._head:
            data, self._head = self._head, b""
            return data
        read_some = getattr(self._rest, "read1", self._rest.read)
        return read_some(size)

    read = read1

    def readline(self, size: int = -1) -> bytes:
        if self._head:
            cut = self._head.find(b"\n") + 1 or len(self._head)
            line, self._head = self._head[:cut], self._head[cut:]
            return line
        return self._rest.readline(size)

    def fileno(self) -> int:
        return self._rest.fileno()

    def tell(self) -> int:
        return self._rest.tell() - len(self._head)


def _replay(head: list[bytes], source: IO[bytes]) -> IO[bytes]:
    """``source`` with the lines already read from it put back in front."""
    return cast("IO[bytes]", _Replay(b"".join(head), source))  # the part of a binary file the readers use


class DetectedInput(NamedTuple):
    """What :func:`detect_input` learnt from the first lines of an input."""

    source: IO[bytes]
    """A reader that still yields the lines detection read."""
    dialect: str
    """The dialect the reader (``read(source)``) would choose; canonical when nothing matched."""
    unknown: Error | None
    """The reader's own ``UNKNOWN_DIALECT`` notice when nothing matched (``None`` when a dialect did)."""


def detect_input(source: IO[bytes], *, max_line_bytes: int | None = None) -> DetectedInput:
    """Detect the dialect exactly as the reader does, and a reader that still yields the lines it took.

    Commands that choose how to read by the dialect (``validate`` checks canonical
    input line by line, anything else decoded) ask the reader's own pipeline, fed
    whole lines (blocking, so a live pipe's first lines are waited for) until it
    settles: the same detection window, noise rules, whole-document recognition
    (Gemini's or Claude's ``json`` output, pretty-printed or on one line) and
    fallback, with no second copy of them to drift apart. A canonical first line
    decides at once, as it would in the reader, without loading the dialects: the
    common case starts quicker.
    """
    head: list[bytes] = []
    line = source.readline()
    while line and not line.strip():
        head.append(line)
        line = source.readline()
    head.append(line)
    if _is_canonical_line(line):
        return DetectedInput(_replay(head, source), "canonical", None)
    from agentstream.consumer.pipeline import Pipeline

    probe = Pipeline("auto", label="", max_line_bytes=max_line_bytes)
    events = probe.feed_chunk(b"".join(head))
    while probe.dialect is None and line:
        line = source.readline()
        head.append(line)
        events += probe.feed_chunk(line)
    # Whatever the probe still held comes out here, its UNKNOWN_DIALECT notice (made when it settled for
    # nothing) among it: that notice always waits for a turn to open, and finish() opens one.
    events += probe.finish()
    assert probe.dialect is not None  # finish() settles an undecided reader
    return DetectedInput(_replay(head, source), probe.dialect, _unknown_dialect(events))


def _unknown_dialect(events: list[AnyEvent]) -> Error | None:
    from agentstream import protocol as p
    from agentstream.errors import ErrorCode

    for event in events:
        if type(event) is p.Error and event.code == ErrorCode.UNKNOWN_DIALECT:
            return event
    return None


def _is_canonical_line(line: bytes) -> bool:
    import msgspec

    from agentstream.protocol import JSON_DECODER, is_canonical_object

    try:
        return is_canonical_object(JSON_DECODER.decode(line))
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return False


def add_to_alias(parser: argparse.ArgumentParser) -> None:
    """``--to NAME``, the same option as ``--dialect NAME`` (reads better next to ``--from``)."""
    parser.add_argument(
        "--to", dest="dialect", metavar="NAME", default=None, action=OneDialect, help="alias of --dialect"
    )


def check_dialect(name: str | None, *, writing: bool = False) -> None:
    """Fail early, with the list of names, on a dialect this install cannot use (``writing``: cannot write).

    ``auto`` and ``canonical`` (built in, so always there) pass without loading the dialects: start-up time.
    """
    if name is None or name in ("auto", "canonical"):
        return
    from agentstream.dialects import get_dialect, get_writable_dialect
    from agentstream.errors import UnknownDialectError

    try:
        get_writable_dialect(name) if writing else get_dialect(name)
    except ModuleNotFoundError:
        raise UnknownDialectError(
            f"dialect {name!r} is not available in this install",
            fix="'agentstream dialects' lists those that are",
        ) from None


def note_after_end(reader: Reader) -> None:
    """Say on stderr what the input held after its last result that no later turn took (bad lines)."""
    reports, count = reader.after_end
    if not count:
        return
    first = getattr(reports[0], "message", "") if reports else ""
    sys.stderr.write(
        f"agentstream: what followed the last result was not read ({count} report(s); the first: {first})\n"
    )
