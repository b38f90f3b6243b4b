"""NDJSON framing, for blocking readers and for chunked input: lines of any length, a partial last line flagged.

No length cap by default (a 100 MB tool result is a legitimate line); memory
holds one line at a time. ``\\r\\n`` endings are accepted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, NamedTuple

__all__ = ["BlockSplitter", "Line", "LineSplitter", "LineTooLong", "iter_lines", "split_block"]


class Line(NamedTuple):
    number: int
    """1-based line number in the input."""
    data: bytes | bytearray
    """The line without its ending (a bytearray when it was cut from a block that grew across chunks)."""
    terminated: bool
    """False only for a last line that ended without a newline (a truncated stream)."""


class Block(NamedTuple):
    """Several complete lines at once, for readers that can decode a batch in one call."""

    first: int
    """Line number of the first line in ``data``."""
    data: bytes | bytearray
    """Whole lines, each ending with a newline."""
    line_count: int
    """How many lines ``data`` holds (not ``count``: that would hide ``tuple.count``)."""


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
        raw = source.readline() if max_line_bytes is None else source.readline(max_line_bytes + 1)
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


class LineSplitter:
    """Incremental framing for chunked input (pipes read with ``os.read``, asyncio, byte iterators).

    Feed chunks of any size with :meth:`feed`; each call returns the lines it
    completed, in the same :class:`Line` / :class:`LineTooLong` shapes as
    :func:`iter_lines`. :meth:`close` returns the unterminated tail, if any.
    Only the current partial line is buffered, so memory holds one line at most
    (or ``max_line_bytes`` when a limit is set).
    """

    def __init__(self, *, max_line_bytes: int | None = None) -> None:
        self.max_line_bytes = max_line_bytes
        self._buf = bytearray()
        self._number = 0
        self._skipped = -1
        """Bytes of an over-long line dropped so far, or -1 when not skipping."""

    def feed(self, chunk: bytes) -> list[Line | LineTooLong]:
        out: list[Line | LineTooLong] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                self._append(chunk, start, len(chunk))
                return out
            self._append(chunk, start, end)
            out.append(self._complete(terminated=True))
            start = end + 1

    def close(self) -> list[Line | LineTooLong]:
        """The last line when the input ended without a newline (nothing when it ended cleanly)."""
        if not self._buf and self._skipped < 0:
            return []
        return [self._complete(terminated=False)]

    def _append(self, chunk: bytes, start: int, end: int) -> None:
        if self._skipped >= 0:
            self._skipped += end - start
            return
        self._buf += chunk[start:end]
        limit = self.max_line_bytes
        if limit is not None and len(self._buf) > limit:
            self._skipped = len(self._buf)
            self._buf = bytearray()

    def _complete(self, *, terminated: bool) -> Line | LineTooLong:
        self._number += 1
        if self._skipped >= 0:
            item: Line | LineTooLong = LineTooLong(self._number, self._skipped, self.max_line_bytes or 0)
            self._skipped = -1
            return item
        data = bytes(self._buf)
        self._buf.clear()
        if terminated and data.endswith(b"\r"):
            data = data[:-1]
        return Line(self._number, data, terminated)


class BlockSplitter:
    """Cuts chunked input into blocks of whole lines, for readers that decode many lines per call.

    :meth:`feed` returns the complete lines a chunk finished (each ending in
    ``\n``, possibly none); the unfinished rest waits for the next chunk. A line
    longer than a chunk grows in one buffer that is handed on without a copy, so
    memory holds that line once. No length limit (use :class:`LineSplitter` for one).
    """

    def __init__(self) -> None:
        self._tail = bytearray()

    def feed(self, chunk: bytes) -> bytes | bytearray:
        end = chunk.rfind(b"\n") + 1
        if not end:
            self._tail += chunk
            return b""
        block: bytes | bytearray
        if self._tail:
            self._tail += memoryview(chunk)[:end]
            block, self._tail = self._tail, bytearray()
        else:
            block = chunk if end == len(chunk) else chunk[:end]
        if end < len(chunk):
            self._tail += memoryview(chunk)[end:]
        return block

    def close(self) -> bytes:
        """The unterminated last line, if the input ended without a newline."""
        tail, self._tail = bytes(self._tail), bytearray()
        return tail


def iter_blocks(source: IO[bytes], *, block_size: int = 1 << 18) -> Iterator[Block | Line]:
    """Yield runs of complete lines as soon as they are available, and a partial last line as a :class:`Line`.

    Reads with ``read1`` where the source has it, so a live pipe's lines arrive
    without waiting for a full block.
    """
    read = getattr(source, "read1", source.read)
    splitter = BlockSplitter()
    number = 1
    while chunk := read(block_size):
        block = splitter.feed(chunk)
        if block:
            count = block.count(b"\n")
            yield Block(number, block, count)
            number += count
    tail = splitter.close()
    if tail:
        yield Line(number, tail, False)


def split_block(block: bytes | bytearray) -> list[bytes | bytearray]:
    """The lines of a block (as :class:`BlockSplitter` makes them) without their endings, for line-by-line reading.

    A block that grew across chunks (a :class:`bytearray`) starts with the line
    that spanned them, possibly a very long one: that line is cut out of the
    block in place and handed on without a copy, so memory holds it once (the
    block is consumed). The lines after it, all from one chunk, are copied.
    """
    has_cr = b"\r" in block  # one scan of the block, not a check per line
    lines: list[bytes | bytearray]
    if isinstance(block, bytearray):
        end = block.index(b"\n")
        rest = bytes(memoryview(block)[end + 1 :])
        del block[end:]
        lines = [block, *rest.split(b"\n")]
    else:
        lines = list(block.split(b"\n"))
    lines.pop()  # what follows the last newline: nothing
    if has_cr:
        for index, line in enumerate(lines):
            if line.endswith(b"\r"):
                if isinstance(line, bytearray):
                    del line[-1:]
                else:
                    lines[index] = line[:-1]
    return lines
