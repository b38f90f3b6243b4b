"""Read a file, a pipe, a file object, byte chunks or an asyncio stream as canonical events.

Text is taken too (a text file object, ``str`` chunks): it is encoded as UTF-8,
the protocol's encoding. Whether a source is text is decided once, from the
object or from its first chunk, so bytes cost nothing more.
"""

from __future__ import annotations

import io
import os
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Callable,
    Iterable,
    Iterator,
    Mapping,
)
from collections.abc import Set as AbstractSet
from itertools import chain
from typing import IO, TYPE_CHECKING, Any, TypeAlias, cast

from agentstream import protocol as p
from agentstream.consumer.pipeline import CHUNK_BYTES, Ending, Pipeline, Turns

if TYPE_CHECKING:
    import asyncio

__all__ = ["AsyncReader", "AsyncSource", "Reader", "Source", "aread", "read"]


Source: TypeAlias = "str | os.PathLike[str] | bytes | IO[bytes] | IO[str] | Iterable[bytes] | Iterable[str]"
AsyncSource: TypeAlias = "str | os.PathLike[str] | bytes | IO[bytes] | IO[str] | asyncio.StreamReader | AsyncIterable[bytes] | AsyncIterable[str] | Iterable[bytes] | Iterable[str]"


class _ReaderBase:
    """What the sync and async readers share: the pipeline and what it has learnt."""

    def __init__(
        self, source: object, dialect: str, max_line_bytes: int | None, label: str | None, turns: Turns
    ) -> None:
        self._pipeline = Pipeline(
            dialect, label=label or _label(source), max_line_bytes=max_line_bytes, turns=turns
        )

    @property
    def dialect(self) -> str | None:
        """The dialect being decoded (known after the first lines when auto-detecting)."""
        return self._pipeline.dialect

    @property
    def line_number(self) -> int:
        """The last input line read so far."""
        return self._pipeline.line_number

    @property
    def turn_count(self) -> int:
        """Turns ended by a ``result`` so far (made-up results included)."""
        return self._pipeline.turn_count

    @property
    def after_end(self) -> tuple[list[p.Event], int]:
        """Reports about input after the last result that no later turn took (the first ones), and their count."""
        return self._pipeline.after_end, self._pipeline.after_end_count

    def interrupted(self, signum: int) -> list[p.AnyEvent]:
        """End the stream now, as interrupted by ``signum``: the made-up ending of the turn still open, if any.

        For a program stopped by a signal while it reads: what it writes next makes its own output whole.
        Only between batches (or while the reader waits for input): a batch half decoded has no place here.
        """
        import signal

        from agentstream.errors import ErrorCode, exit_code_for_signal

        name = signal.Signals(signum).name
        ending = Ending(
            ErrorCode.INTERRUPTED, f"interrupted by {name}", exit_code_for_signal(signum), "interrupted"
        )
        return self._pipeline.finish(ending)


class Reader(_ReaderBase):
    """Iterate canonical events from one input. Use as a context manager to close a file it opened."""

    def __init__(
        self,
        source: Source,
        dialect: str = "auto",
        *,
        max_line_bytes: int | None = None,
        label: str | None = None,
        turns: Turns = "many",
    ) -> None:
        super().__init__(source, dialect, max_line_bytes, label, turns)
        self._file, self._chunks, self._owned = _sync_source(source)
        self._source = source
        """Held while its ``buffer`` is read: a text file object closes that buffer when it is collected."""
        self._read_some: Callable[[int], bytes] | None = None

    def batches(self) -> Iterator[list[p.AnyEvent]]:
        """The same events as iterating, in lists (one per chunk of input, maybe empty): less overhead per event."""
        pipeline = self._pipeline
        if pipeline.finished or self._read_some is not None:
            raise RuntimeError("this reader was read already: an input is read once; call read() again on it")
        try:
            for chunk in self._chunk_source():
                yield pipeline.feed_chunk(chunk)
                if pipeline.finished:
                    return
            yield pipeline.finish()
        finally:
            self.close()

    def __iter__(self) -> Iterator[p.AnyEvent]:
        for batch in self.batches():
            yield from batch

    def _chunk_source(self) -> Iterable[bytes]:
        if self._file is None:
            return _bytes_chunks(self._chunks or (), self._source)
        self._read_some = _read_some(self._file)
        return iter(self._read_chunk, b"")

    def _read_chunk(self) -> bytes:
        """One read of the input: where the reader waits for a live producer (see :data:`WAITING`)."""
        assert self._read_some is not None
        return self._read_some(CHUNK_BYTES)

    def close(self) -> None:
        if self._owned and self._file is not None:
            self._file.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read(
    source: Source,
    dialect: str = "auto",
    *,
    max_line_bytes: int | None = None,
    label: str | None = None,
    turns: Turns = "many",
) -> Reader:
    """Canonical events from a path, a file object, ``bytes`` or an iterable of chunks (text is read as UTF-8).

    ``dialect="auto"`` detects the format from the first lines; pass a name to
    force one. ``max_line_bytes`` (off by default) turns longer lines into
    ``LINE_TOO_LONG`` errors instead of reading them. The input is read to its
    end: a ``result`` ends a turn, and later lines are the next turns
    (``turns="one"`` stops at the first ``result`` instead).
    """
    return Reader(source, dialect, max_line_bytes=max_line_bytes, label=label, turns=turns)


def _label(source: object) -> str:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    name = getattr(source, "name", None)
    return name if isinstance(name, str) else "<stream>"


def _sync_source(source: Source) -> tuple[IO[Any] | None, Iterable[Any] | None, bool]:
    """(file, chunks, owned): exactly one of file and chunks is set."""
    if isinstance(source, (str, os.PathLike)):
        return open(source, "rb"), None, True
    if isinstance(source, (bytes, bytearray, memoryview)):
        return None, [bytes(source)], False
    if hasattr(source, "readline"):
        return _binary_file(source), None, False
    if isinstance(source, Iterable) and not isinstance(
        source, (Mapping, AbstractSet)
    ):  # chunks come in order
        return None, source, False
    raise _unreadable(source)


def _unreadable(source: object, chunk: object = None) -> TypeError:
    what = type(source).__name__ + (f" of {type(chunk).__name__} chunks" if chunk is not None else "")
    return TypeError(
        f"cannot read events from {what}: pass a path, a file object, or chunks of bytes or of str"
    )


def _binary_file(source: object) -> IO[Any]:
    """The bytes of a file-like source: a text stream such as ``sys.stdin`` is read through its ``buffer``,
    unless its text layer has read ahead of it already (after a ``readline()``): the rest is then read as text."""
    buffer = getattr(source, "buffer", None)
    if buffer is None or (isinstance(source, io.TextIOBase) and _read_ahead(source, buffer)):
        return cast("IO[Any]", source)  # duck-typed: the caller saw it can read
    return cast("IO[Any]", buffer)


def _read_ahead(text: io.TextIOBase, buffer: Any) -> bool:
    """Whether a seekable text file's layer holds bytes its buffer has passed (so reading the buffer loses them)."""
    try:
        return bool(text.seekable()) and text.tell() != buffer.tell()
    except (OSError, ValueError, AttributeError):  # a position it cannot tell, or no buffer position
        return False


def _read_some(file: IO[Any]) -> Callable[[int], bytes]:
    """How to read a file's next chunk as bytes: ``read1`` (whatever a pipe has, without waiting for more).

    A text file with no ``buffer`` under it (``io.StringIO``) is encoded as it is read.
    """
    if isinstance(file, io.TextIOBase):
        return lambda size: _utf8(file.read(size))
    return cast("Callable[[int], bytes]", getattr(file, "read1", file.read))


def _utf8(text: str) -> bytes:
    """Text as the protocol's UTF-8; characters a text layer decoded with ``surrogateescape`` get their bytes back."""
    return text.encode("utf-8", "surrogateescape")


def _is_text(first: object, source: object) -> bool:
    """Whether chunks like ``first`` are text; a chunk of neither bytes nor text is a clear TypeError."""
    if isinstance(first, str):
        return True
    if isinstance(first, (bytes, bytearray, memoryview)):
        return False
    raise _unreadable(source, first)


def _bytes_chunks(chunks: Iterable[Any], source: object) -> Iterator[bytes]:
    """``chunks`` as bytes, judged by the first one (a check once, not one per chunk)."""
    rest = iter(chunks)
    for first in rest:
        whole = chain((first,), rest)
        return map(_utf8, whole) if _is_text(first, source) else whole
    return iter(())


class AsyncReader(_ReaderBase):
    """The async twin of :class:`Reader`: same events, same guarantees.

    ``async with aread(...) as reader`` (or :meth:`aclose`) stops a reading left unfinished at once: the
    file it opened is closed, and a pipe's reading thread is let go, rather than when the garbage
    collector gets to it.
    """

    def __init__(
        self,
        source: AsyncSource,
        dialect: str = "auto",
        *,
        max_line_bytes: int | None = None,
        label: str | None = None,
        turns: Turns = "many",
    ) -> None:
        super().__init__(source, dialect, max_line_bytes, label, turns)
        self._source = source
        self._reading: AsyncGenerator[list[p.AnyEvent], None] | None = None

    def batches(self) -> AsyncIterator[list[p.AnyEvent]]:
        """The same events as iterating, in lists (one per chunk of input, maybe empty)."""
        if self._reading is not None:
            raise RuntimeError(
                "this reader was read already: an input is read once; call aread() again on it"
            )
        self._reading = self._batches()
        return self._reading

    async def _batches(self) -> AsyncGenerator[list[p.AnyEvent], None]:
        pipeline = self._pipeline
        chunks = _async_chunks(self._source)
        try:
            async for chunk in chunks:
                yield pipeline.feed_chunk(chunk)
                if pipeline.finished:
                    return
            yield pipeline.finish()
        finally:
            await chunks.aclose()

    async def __aiter__(self) -> AsyncIterator[p.AnyEvent]:
        async for batch in self.batches():
            for event in batch:
                yield event

    async def aclose(self) -> None:
        """Stop reading now (idempotent); the events not yet taken are not read."""
        if self._reading is not None:
            await self._reading.aclose()

    async def __aenter__(self) -> AsyncReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def aread(
    source: AsyncSource,
    dialect: str = "auto",
    *,
    max_line_bytes: int | None = None,
    label: str | None = None,
    turns: Turns = "many",
) -> AsyncReader:
    """``async for event in aread(stream_reader)``: :func:`read` for asyncio.

    Never uses ``StreamReader.readline`` (its 64 KiB limit would break on long lines).
    """
    return AsyncReader(source, dialect, max_line_bytes=max_line_bytes, label=label, turns=turns)


async def _async_chunks(source: AsyncSource) -> AsyncGenerator[bytes, None]:
    import asyncio

    if isinstance(source, asyncio.StreamReader):
        while chunk := await source.read(CHUNK_BYTES):
            yield chunk
    elif isinstance(source, (bytes, bytearray, memoryview)):  # the whole input at once, as read() takes it
        yield bytes(source)
    elif isinstance(source, AsyncIterable):
        chunks: AsyncIterator[Any] = aiter(source)
        async for first in chunks:  # the first chunk tells text from bytes, once
            if _is_text(first, source):
                yield _utf8(first)
                async for text in chunks:
                    yield _utf8(text)
            else:
                yield first
                async for chunk in chunks:
                    yield chunk
            return
    elif isinstance(source, (str, os.PathLike)) or hasattr(source, "read"):
        async for chunk in _file_chunks(source):  # type: ignore[arg-type]
            yield chunk
    elif isinstance(source, Iterable) and not isinstance(source, (Mapping, AbstractSet)):
        for chunk in _bytes_chunks(source, source):
            yield chunk
    else:
        raise _unreadable(source)


async def _file_chunks(source: str | os.PathLike[str] | IO[Any]) -> AsyncGenerator[bytes, None]:
    """A file (or pipe) read in a thread of its own, one chunk per request, so the event loop never blocks on it.

    Not the loop's default executor: a read blocked on a silent pipe would keep ``asyncio.run()`` from
    returning after the consumer was cancelled. This daemon thread is left blocked instead; it reads
    nothing more once its request is withdrawn.
    """
    import asyncio
    import queue
    import threading

    file: IO[Any]
    if isinstance(source, (str, os.PathLike)):
        file, owned = open(source, "rb"), True  # noqa: ASYNC230, SIM115 (opening is instant; closed by the reader)
    else:
        file, owned = _binary_file(source), False
    read_some = _read_some(file)
    loop = asyncio.get_running_loop()
    requests: queue.SimpleQueue[asyncio.Future[bytes] | None] = queue.SimpleQueue()

    def answer(future: asyncio.Future[bytes], chunk: bytes | None, error: BaseException | None) -> None:
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(chunk or b"")

    def serve_requests() -> None:
        try:
            while (future := requests.get()) is not None:
                try:
                    chunk, error = read_some(CHUNK_BYTES), None
                except Exception as exc:
                    chunk, error = None, exc
                loop.call_soon_threadsafe(answer, future, chunk, error)
                if error is not None or not chunk:
                    return
        except RuntimeError:  # the loop closed while a chunk was on its way: nobody is reading
            pass
        finally:
            if owned:
                file.close()

    threading.Thread(target=serve_requests, name="agentstream-aread", daemon=True).start()
    try:
        while True:
            future: asyncio.Future[bytes] = loop.create_future()
            requests.put(future)
            chunk = await future
            if not chunk:
                return
            yield chunk
    finally:
        requests.put(None)


WAITING = frozenset({Reader._read_chunk.__code__})
"""Where a :class:`Reader` waits for input: a signal handler may unwind from there, as nothing is half done."""
