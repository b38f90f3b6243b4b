"""Where a stream's events go: one sink per output format.

A sink receives every stamped event in order and writes the chosen format:
``stream-json`` (a line per event, canonical or a dialect's), ``json`` (one
object when the run ends) or ``text`` (for a person). Sinks never raise on a
closed reader except :class:`OutputClosed`, which the Stream turns into a quiet
exit.
"""

from __future__ import annotations

import errno
import os
from typing import IO, TYPE_CHECKING, Literal, Protocol, TypeAlias

if TYPE_CHECKING:
    from agentstream.protocol import AnyEvent

__all__ = [
    "OUTPUT_FORMATS",
    "FdWriter",
    "FileWriter",
    "OutputClosed",
    "OutputFormat",
    "Sink",
    "Writer",
    "make_sink",
]

OutputFormat: TypeAlias = Literal["stream-json", "json", "text"]
OUTPUT_FORMATS: tuple[OutputFormat, ...] = ("stream-json", "json", "text")


class OutputClosed(SystemExit):
    """The reader of our output went away (EPIPE). A SystemExit so ``except Exception`` can't swallow it."""

    def __init__(self) -> None:
        from agentstream.errors import ExitCode

        super().__init__(int(ExitCode.SIGPIPE))


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
        except BrokenPipeError:
            raise OutputClosed() from None
        except OSError as exc:
            if exc.errno in (errno.EPIPE, errno.EBADF):
                raise OutputClosed() from None
            raise


class FileWriter:
    """Writes to a binary file object and flushes, for outputs that are not plain descriptors."""

    __slots__ = ("file",)

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file

    def write(self, data: bytes | bytearray) -> None:
        try:
            self.file.write(data)
            self.file.flush()
        except BrokenPipeError:
            raise OutputClosed() from None


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
    color: bool | None = None,
) -> Sink:
    """The sink for an output format; imports only what that format needs."""
    if output_format == "stream-json":
        from agentstream.render.lines import LinesSink

        return LinesSink(out, dialect=dialect)
    if output_format == "json":
        from agentstream.render.json import JsonSink

        return JsonSink(out)
    if output_format == "text":
        from agentstream.render.text import TextSink

        return TextSink(out, err=err, color=color)
    from agentstream.errors import UsageError

    raise UsageError(
        f"unknown output format {output_format!r}",
        fix=f"use one of: {', '.join(OUTPUT_FORMATS)}",
    )
