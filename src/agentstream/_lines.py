"""NDJSON framing for blocking readers: lines of any length, a partial last line flagged.

No length cap by default (a 100 MB tool result is a legitimate line); memory
holds one line at a time. ``\\r\\n`` endings are accepted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, NamedTuple

__all__ = ["Line", "LineTooLong", "iter_lines"]


class Line(NamedTuple):
    number: int
    """1-based line number in the input."""
    data: bytes
    """The line without its ending."""
    terminated: bool
    """False only for a last line that ended without a newline (a truncated stream)."""


class LineTooLong(Exception):
    """A line went past the configured ``max_line_bytes``; the rest of it was skipped."""

    def __init__(self, number: int, size: int, limit: int) -> None:
        super().__init__(f"line {number} is longer than {limit} bytes ({size} bytes read)")
        self.number, self.size, self.limit = number, size, limit


def iter_lines(source: IO[bytes], *, max_line_bytes: int | None = None) -> Iterator[Line | LineTooLong]:
    """Yield each line of ``source`` as soon as it is complete.

    With ``max_line_bytes``, an over-long line is read through to its end in
    bounded chunks and yielded as a :class:`LineTooLong` instead of its data.
    """
    number = 0
    while True:
        if max_line_bytes is None:
            raw = source.readline()
        else:
            raw = source.readline(max_line_bytes + 1)
        if not raw:
            return
        number += 1
        if max_line_bytes is not None and len(raw) > max_line_bytes and not raw.endswith(b"\n"):
            yield _skip_rest(source, number, len(raw), max_line_bytes)
            continue
        if raw.endswith(b"\n"):
            yield Line(number, raw[:-2] if raw.endswith(b"\r\n") else raw[:-1], True)
        else:
            yield Line(number, raw, False)


def _skip_rest(source: IO[bytes], number: int, size: int, limit: int) -> LineTooLong:
    while True:
        chunk = source.readline(1 << 16)
        size += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return LineTooLong(number, size, limit)
