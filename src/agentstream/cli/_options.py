"""Option bundles shared by several commands."""

from __future__ import annotations

import argparse
import math
import sys
from typing import IO, TYPE_CHECKING

from agentstream.render import COLOR_CHOICES, OUTPUT_FORMATS

if TYPE_CHECKING:
    from agentstream.consumer import Reader


# -- numeric option types: every number on the command line is checked the same way ------------


def _number(text: str, kind: type[int] | type[float], *, minimum: float, what: str) -> float:
    try:
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
    value = seconds(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
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
        help="with stream-json, write this tool's wire format instead of the canonical one",
    )
    add_color_option(parser)


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
        return sys.stdin.buffer
    from agentstream.errors import UsageError

    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise UsageError(f"no such file: {path}", fix="check the path, or pass - to read stdin") from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a directory", fix="pass a file of NDJSON lines") from None
    except PermissionError:
        raise UsageError(f"cannot read {path}: permission denied") from None


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


def sniff_input(source: IO[bytes]) -> tuple[IO[bytes], str]:
    """Detect the dialect from the first lines, and a reader that still yields those lines.

    Reads whole lines (blocking, so a live pipe's first lines are waited for)
    until a dialect is recognised or ``DETECT_LINES`` non-blank lines have been
    seen; nothing recognised means canonical. A canonical line decides at once,
    as it does in :func:`~agentstream.dialects.detect_dialect`, without loading
    the dialects: the common case starts quicker.
    """
    head: list[bytes] = []
    seen = 0
    name = None
    while True:
        line = source.readline()
        if not line:
            break
        head.append(line)
        if not line.strip():
            continue
        seen += 1
        if _is_canonical_line(line):
            name = "canonical"
            break
        from agentstream.dialects import DETECT_LINES, detect_dialect_in_lines

        name = detect_dialect_in_lines([line for line in head if line.strip()])
        if name is not None or seen >= DETECT_LINES:
            break
    return _Replay(b"".join(head), source), name or "canonical"  # type: ignore[return-value]


def _is_canonical_line(line: bytes) -> bool:
    import msgspec

    from agentstream.protocol import JSON_DECODER, is_canonical_object

    try:
        return is_canonical_object(JSON_DECODER.decode(line))
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return False


def add_to_alias(parser: argparse.ArgumentParser) -> None:
    """``--to NAME``, the same option as ``--dialect NAME`` (reads better next to ``--from``)."""
    parser.add_argument("--to", dest="dialect", metavar="NAME", default=None, help="alias of --dialect")


def check_dialect(name: str | None) -> None:
    """Fail early, with the list of names, on a dialect this install cannot use."""
    if name is None or name == "auto":
        return
    from agentstream.dialects import get_dialect
    from agentstream.errors import UnknownDialectError

    try:
        get_dialect(name)
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
    sys.stderr.write(f"agentstream: {count} line(s) after the last result were not read: {first}\n")
