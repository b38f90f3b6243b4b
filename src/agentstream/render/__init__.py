"""Where a stream's events go: one sink per output format.

A sink receives every stamped event in order and writes the chosen format:
``stream-json`` (a line per event, canonical or a dialect's), ``json`` (one
object when the run ends) or ``text`` (for a person). A failed write raises
:class:`OutputClosed` (the reader went away: a quiet exit 141) or
:class:`OutputError` (anything else — a full disk, a closed descriptor: one
line on stderr, exit 1), never a bare ``OSError``.
"""

from __future__ import annotations

import errno
import os
from typing import IO, TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

if TYPE_CHECKING:
    from collections.abc import Mapping

    from agentstream.dialects.base import DialectEncoder
    from agentstream.protocol import AnyEvent

__all__ = [
    "COLOR_CHOICES",
    "OUTPUT_FORMATS",
    "ColorChoice",
    "FdWriter",
    "FileWriter",
    "OutputClosed",
    "OutputError",
    "OutputFailed",
    "OutputFormat",
    "Sink",
    "Writer",
    "dialect_encoder",
    "make_sink",
    "output_failure",
    "silence_stdout",
]

OutputFormat: TypeAlias = Literal["stream-json", "json", "text"]
OUTPUT_FORMATS: tuple[OutputFormat, ...] = ("stream-json", "json", "text")
ColorChoice: TypeAlias = Literal["auto", "always", "never"]
"""``--color``: ``auto`` decides by terminal and environment (see ``render.text.use_color``)."""
COLOR_CHOICES: tuple[ColorChoice, ...] = ("auto", "always", "never")


class OutputFailed(SystemExit):
    """The output cannot be written. A SystemExit so ``except Exception`` can't swallow it."""

    error_code = "OUTPUT_ERROR"
    subtype = "output_error"

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(status)
        self.status = status
        self.reason = reason


class OutputClosed(OutputFailed):
    """The reader of our output went away (EPIPE): exit 141, nothing said (the shell's convention)."""

    error_code = "OUTPUT_CLOSED"
    subtype = "output_closed"

    def __init__(self) -> None:
        from agentstream.errors import ExitCode

        super().__init__(int(ExitCode.SIGPIPE), "the reader of stdout went away")


class OutputError(OutputFailed):
    """Any other write failure (full disk, I/O error, stdout not open): exit 1, reported once on stderr."""

    def __init__(self, reason: str) -> None:
        from agentstream.errors import ExitCode

        super().__init__(int(ExitCode.ERROR), reason)


def output_failure(exc: OSError) -> OutputFailed:
    """What a failed write to the output means: the reader left (EPIPE), or a real error."""
    if isinstance(exc, BrokenPipeError) or exc.errno == errno.EPIPE:
        return OutputClosed()
    if exc.errno == errno.EBADF:
        return OutputError("stdout is not open (was it closed with >&-?)")
    return OutputError(f"cannot write to stdout: {exc.strerror or exc}")


def silence_stdout(fd: int = 1) -> None:
    """Point ``fd`` at /dev/null, so the interpreter's last flush of a dead stdout stays quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


class Writer(Protocol):
    def write(self, data: bytes | bytearray) -> None: ...


class FdWriter:
    """Writes whole buffers to a file descriptor, one ``os.write`` per buffer when the pipe has room."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, data: bytes | bytearray) -> None:
        try:
            written = os.write(self.fd, data)
            if written < len(data):
                view = memoryview(data)
                while written < len(data):
                    written += os.write(self.fd, view[written:])
        except OSError as exc:
            raise output_failure(exc) from None


class FileWriter:
    """Writes to a binary file object and flushes, for outputs that are not plain descriptors."""

    __slots__ = ("file",)

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file

    def write(self, data: bytes | bytearray) -> None:
        try:
            self.file.write(data)
            self.file.flush()
        except OSError as exc:
            raise output_failure(exc) from None


class Sink(Protocol):
    def emit(self, event: AnyEvent) -> None:
        """Write (or remember) one stamped event."""

    def close(self) -> None:
        """Write whatever the format still owes; called once, after the last event."""


def make_sink(
    output_format: OutputFormat,
    out: Writer,
    *,
    dialect: str | None = None,
    err: IO[str] | None = None,
    color: ColorChoice | bool | None = None,
    after: Sink | None = None,
    dialect_options: Mapping[str, Any] | None = None,
) -> Sink:
    """The sink for an output format; imports only what that format needs.

    ``after`` is the sink of the previous turn of the same session and ``dialect_options`` what the dialect's
    writer is made with: see :func:`dialect_encoder`.
    """
    if output_format == "stream-json":
        from agentstream.render.lines import LinesSink

        return LinesSink(out, dialect=dialect, after=after, dialect_options=dialect_options)
    if output_format == "json":
        from agentstream.render.json import JsonSink

        return JsonSink(out, dialect=dialect, after=after, dialect_options=dialect_options)
    if output_format == "text":
        from agentstream.render.text import TextSink

        return TextSink(out, err=err, color=color)
    from agentstream.errors import UsageError

    raise UsageError(
        f"unknown output format {output_format!r}",
        fix=f"use one of: {', '.join(OUTPUT_FORMATS)}",
    )


def dialect_encoder(
    dialect: str | None, after: Sink | None = None, options: Mapping[str, Any] | None = None
) -> DialectEncoder | None:
    """The encoder a sink writes ``dialect`` with (None for the canonical form), made with ``options`` (the
    keyword arguments of the dialect's ``encoder()``, such as Claude's ``partial_messages``).

    After the sink of the previous turn of the same session (``after``) that wrote the same dialect, its
    encoder goes on, as one encoder writes a whole session in ``convert``: what spans the session carries on
    (Claude Code's ``total_cost_usd`` is the session's running total, not the turn's).
    """
    if dialect in (None, "canonical"):
        return None
    previous = getattr(after, "encoder", None)
    if previous is not None and getattr(after, "dialect", None) == dialect:
        return previous
    from agentstream.dialects import get_dialect

    return get_dialect(dialect).encoder(**(options or {}))
