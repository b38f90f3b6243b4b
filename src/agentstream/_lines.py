"""NDJSON framing, for blocking readers and for chunked input: lines of any length, a partial last line flagged.

No length cap by default (a 100 MB tool result is a legitimate line); memory
holds one line at a time. ``\\r\\n`` endings are accepted. A very long line is
handed over as a :class:`LongLine`, which :func:`parse_long_line` reads
without a third copy.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import IO, Any, Final, NamedTuple, TypeGuard, TypeVar, cast

from agentstream._accel import speedups

__all__ = [
    "LONG_LINE_BYTES",
    "BlockSplitter",
    "Line",
    "LineSplitter",
    "LineTooLong",
    "LongLine",
    "NotSure",
    "count_lines",
    "has_blank_line",
    "is_long",
    "iter_lines",
    "lenient_json",
    "one_value_per_line",
    "parse_json",
    "parse_long_line",
    "split_block",
]

T = TypeVar("T")

LONG_LINE_BYTES: Final = 8 << 20
"""From this size on, a line the framing hands over is parsed by :func:`parse_long_line`, to save a copy."""


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


class LongLine(bytearray):
    """A line (or block) that grew across chunks, which the framing hands over and nothing else holds.

    Whoever decodes it may empty it (:func:`parse_long_line`): that is what lets a 100 MB line be read
    holding about twice its size rather than three times. Lines a caller passes in are never of this type,
    so they are never touched.
    """

    __slots__ = ()


class NotSure(Exception):
    """:func:`parse_long_line` cannot promise the usual decoder's answer for this line; the line is as it was."""


def is_long(line: object) -> TypeGuard[LongLine]:
    """Whether ``line`` is a :class:`LongLine` worth reading with :func:`parse_long_line`."""
    return type(line) is LongLine and len(line) >= LONG_LINE_BYTES


def parse_long_line(line: LongLine, finish: Callable[[Any], T | None]) -> T | None:
    """``finish`` applied to the JSON value of ``line``, holding about twice the line's size, not three times.

    msgspec decodes a string with escapes through a scratch buffer of its own, so the line, that buffer and
    the string are held at once. Here the line becomes text and is emptied; the standard library's parser
    then builds the string from the text. Where that parser could answer differently from msgspec (invalid
    UTF-8, a surrogate escape, ``NaN``, a number out of range) or fails, :class:`NotSure` is raised for the
    usual decoder, which also words the error. When ``finish`` raises or returns ``None`` (the line is not
    what the caller reads), the line is made whole again first, for whoever reports it.
    """
    try:
        text = line.decode()
    except UnicodeDecodeError:
        raise NotSure from None
    if re.search(SURROGATE_ESCAPE, text) is not None:
        raise NotSure  # msgspec refuses a lone one, the standard library takes it
    import json

    line.clear()  # from here on the line is held once, as text
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except (ValueError, RecursionError):
        line += text.encode()
        raise NotSure from None
    result = None
    try:
        result = finish(value)
    finally:
        if result is None:
            value = None  # not held while the line is refilled
            line += text.encode()
    return result


SURROGATE_ESCAPE: Final = r"\\u[dD][89a-fA-F]"
"""A UTF-16 surrogate written as an escape (compiled on first use: most runs never need it)."""


def parse_json(data: bytes | bytearray) -> Any:
    """The JSON value of a line, read as liberally as other tools write it (see :func:`lenient_json`).

    Raises msgspec's own error, which says best what is wrong, when the line is not JSON either way.
    """
    import msgspec  # loaded already by whoever reads lines; imported here as protocol imports this module

    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as refused:
        try:
            return lenient_json(data)
        except (ValueError, RecursionError):
            raise refused from None


def lenient_json(data: bytes | bytearray) -> Any:
    """The JSON value of a line msgspec refused for what other tools' parsers take: a number out of range
    (``1e400``), ``NaN`` and ``Infinity`` (Python's ``json.dumps`` writes them) or a lone surrogate escape
    (JavaScript's ``JSON.stringify`` of a string cut mid-emoji).

    Such a number becomes a non-finite float, which no field takes as a number (so it is lost, and said
    so, as a field of the wrong kind is); a lone surrogate becomes U+FFFD, as invalid UTF-8 does. Raises
    ``ValueError`` (or ``RecursionError``) when the line is not JSON this way either.
    """
    import json

    return without_lone_surrogates(json.loads(data, parse_constant=float))


def without_lone_surrogates(value: Any) -> Any:
    """``value`` with each lone surrogate (which UTF-8 cannot encode) replaced by U+FFFD, as invalid UTF-8 is.

    Strings, lists and dicts are copied; a msgspec struct (an event) is changed in place and returned.
    """
    if isinstance(value, str):
        return re.sub(_LONE_SURROGATE, "\ufffd", value)
    if isinstance(value, list):
        return [without_lone_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {without_lone_surrogates(key): without_lone_surrogates(item) for key, item in value.items()}
    import msgspec  # loaded already: see parse_json

    if isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            setattr(value, name, without_lone_surrogates(getattr(value, name)))
    return value


_LONE_SURROGATE: Final = "[\ud800-\udfff]"
"""Any surrogate json.loads leaves is a lone one: it joins an escaped pair into one character (compiled on
first use, as most runs never need it)."""


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is out of range")
    return value


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
        if number == 0 and raw.startswith(UTF8_BOM):  # see LeadingBom
            raw = raw[len(UTF8_BOM) :]
            if not raw:  # the input was the mark alone
                continue
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


UTF8_BOM: Final = b"\xef\xbb\xbf"


class LeadingBom:
    """Drops a UTF-8 byte order mark from the very start of chunked input, wherever the chunks are cut.

    Windows tools (PowerShell's ``Out-File``, Notepad) write one; left in place it makes the first
    line, usually the one that names the session, unreadable as JSON. Only the input's first three
    bytes are looked at: a BOM anywhere else is the line's own business.
    """

    __slots__ = ("_head",)

    def __init__(self) -> None:
        self._head: bytes | None = b""
        """The first bytes while they could still be a BOM; ``None`` once past the start."""

    def feed(self, chunk: bytes) -> bytes:
        """``chunk`` with a leading BOM cut off (bytes that may start one wait for the next chunk)."""
        head = self._head
        if head is None:
            return chunk
        head += chunk
        if len(head) < len(UTF8_BOM) and UTF8_BOM.startswith(head):
            self._head = head
            return b""
        self._head = None
        return head[len(UTF8_BOM) :] if head.startswith(UTF8_BOM) else head

    def close(self) -> bytes:
        """What waited at the end of input: the first bytes of a BOM that never finished are data."""
        head, self._head = self._head or b"", None
        return head


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
        self._buf = LongLine()
        self._number = 0
        self._skipped = -1
        """Bytes of an over-long line dropped so far, or -1 when not skipping."""
        self._bom = LeadingBom()

    def feed(self, chunk: bytes) -> list[Line | LineTooLong]:
        out: list[Line | LineTooLong] = []
        chunk = self._bom.feed(chunk)
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
        rest = self._bom.close()
        self._append(rest, 0, len(rest))
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
            self._buf = LongLine()

    def _complete(self, *, terminated: bool) -> Line | LineTooLong:
        self._number += 1
        if self._skipped >= 0:
            item: Line | LineTooLong = LineTooLong(self._number, self._skipped, self.max_line_bytes or 0)
            self._skipped = -1
            return item
        data: bytes | bytearray
        if len(self._buf) >= LONG_LINE_BYTES:  # handed over, not copied: a LongLine (see parse_long_line)
            data, self._buf = self._buf, LongLine()
        else:
            data = bytes(self._buf)
            self._buf.clear()
        return Line(self._number, _without_cr(data) if terminated else data, terminated)


class BlockSplitter:
    """Cuts chunked input into blocks of whole lines, for readers that decode many lines per call.

    :meth:`feed` returns the complete lines a chunk finished (each ending in
    ``\n``, possibly none); the unfinished rest waits for the next chunk. A line
    longer than a chunk grows in one buffer that is handed on without a copy, so
    memory holds that line once. No length limit (use :class:`LineSplitter` for one).
    """

    def __init__(self) -> None:
        self._tail = LongLine()
        self._bom = LeadingBom()

    def feed(self, chunk: bytes) -> bytes | bytearray:
        chunk = self._bom.feed(chunk)
        end = chunk.rfind(b"\n") + 1
        if not end:
            self._tail += chunk
            return b""
        block: bytes | bytearray
        if self._tail:
            self._tail += memoryview(chunk)[:end]
            block, self._tail = self._tail, LongLine()
        else:
            block = chunk if end == len(chunk) else chunk[:end]
        if end < len(chunk):
            self._tail += memoryview(chunk)[end:]
        return block

    def close(self) -> bytes:
        """The unterminated last line, if the input ended without a newline."""
        tail, self._tail = bytes(self._tail + self._bom.close()), LongLine()
        return tail


def iter_blocks(source: IO[bytes], *, block_size: int = 1 << 16) -> Iterator[Block | Line]:
    """Yield runs of complete lines as soon as they are available, and a partial last line as a :class:`Line`.

    Reads with ``read1`` where the source has it, so a live pipe's lines arrive
    without waiting for a full block. Blocks of 64 KiB stay in the CPU's cache and
    in memory the allocator reuses: validating a session went 21 → 17.5 ms per
    8 MiB against blocks of 256 KiB.
    """
    read = getattr(source, "read1", source.read)
    splitter = BlockSplitter()
    number = 1
    while chunk := read(block_size):
        block = splitter.feed(chunk)
        if block:
            count = count_lines(block)
            yield Block(number, block, count)
            number += count
    tail = splitter.close()
    if tail:
        yield Line(number, tail, False)


def _count_lines(block: bytes | bytearray) -> int:
    return block.count(b"\n")


_BLANK_LINE = rb"\n[ \t\r]*\n"
_BLANK_FIRST_LINE = rb"[ \t\r]*\n"


def _has_blank_line(block: bytes | bytearray) -> bool:
    """Whether a line of ``block`` (the first included) holds nothing but spaces, tabs and CRs.

    (The C twin's stand-in: its patterns are compiled by ``re``'s cache when first used, not at every start.)"""
    return re.match(_BLANK_FIRST_LINE, block) is not None or re.search(_BLANK_LINE, block) is not None


count_lines: Callable[[bytes | bytearray], int] = speedups.count_lines if speedups else _count_lines
"""The newlines in a block: the C twin is a memchr loop, 3-4× faster than ``bytes.count`` of one byte."""
has_blank_line: Callable[[bytes | bytearray], bool] = speedups.has_blank_line if speedups else _has_blank_line
"""The C twin looks at each line's first bytes once; the regexes stop at every newline."""


def _split_lines(data: bytes | bytearray, start: int) -> list[bytes | bytearray]:
    """``data[start:].split(b"\\n")``, each piece as bytes."""
    whole = data if start == 0 and type(data) is bytes else bytes(memoryview(data)[start:])
    return cast("list[bytes | bytearray]", whole.split(b"\n"))


split_lines: Callable[[bytes | bytearray, int], list[bytes | bytearray]] = (
    speedups.split_lines if speedups else _split_lines
)
"""The C twin finds each newline with memchr, where ``bytes.split`` of one byte tests them one at a time (3×
faster on a block of Claude Code's lines), and cuts the lines out of a bytearray without copying it first."""


def one_value_per_line(block: bytes | bytearray, lines: int, values: int) -> bool:
    """Whether the ``values`` decoded from ``block``'s ``lines`` lines in one call were one per line.

    ``decode_lines`` skips a blank line and takes two values written on one line, so a count that
    matches proves it only when no line is blank (a blank line could hide a line of two). Else the
    block is read line by line, where a line of two values is malformed.
    """
    return values == lines and not has_blank_line(block)


def split_block(block: bytes | bytearray) -> list[bytes | bytearray]:
    """The lines of a block (as :class:`BlockSplitter` makes them) without their endings, for line-by-line reading.

    A block that grew across chunks (a :class:`bytearray`) starts with the line
    that spanned them, possibly a very long one: that line is cut out of the
    block in place and handed on without a copy, so memory holds it once (the
    block is consumed). The lines after it, all from one chunk, are copied.
    """
    has_cr = b"\r" in block  # one scan of the block, not a check per line
    if isinstance(block, bytearray):
        end = block.index(b"\n")
        lines = split_lines(block, end + 1)  # copied out before the block is cut to its first line
        del block[end:]
        lines.insert(0, block)
    else:
        lines = split_lines(block, 0)
    lines.pop()  # what follows the last newline: nothing
    if has_cr:
        lines = [_without_cr(line) for line in lines]
    return lines


def _without_cr(line: bytes | bytearray) -> bytes | bytearray:
    """``line`` without a final ``\\r``; a bytearray (a very long line, maybe) loses it in place, with no copy."""
    if not line.endswith(b"\r"):
        return line
    if isinstance(line, bytearray):
        del line[-1:]
        return line
    return line[:-1]
