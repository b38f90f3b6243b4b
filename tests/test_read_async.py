"""aread(): the async twin gives exactly what read() gives, from every kind of async source."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from _consumer_support import assert_valid_stream, canonical_session, strip_volatile
from agentstream import protocol as p
from agentstream.consumer import AsyncReader, aread, read

INPUTS = {
    "valid": canonical_session(),
    "truncated": canonical_session(finish=False)[:-7],
    "junk": b"[SandboxDebug] x\n" + canonical_session().replace(b"\n", b"\nnot json\n", 2),
    "invalid-utf8": canonical_session().replace(b"\n", b"\n\xff\xfe\n", 1),
    "empty": b"",
    "long-line": canonical_session(lambda s: s.message("L" * (1 << 20))),
}


async def collect(source: object, **options: object) -> list[p.AnyEvent]:
    return [event async for event in aread(source, **options)]  # type: ignore[arg-type]


async def chunked(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        await asyncio.sleep(0)
        yield data[i : i + size]


@pytest.mark.parametrize("name", list(INPUTS))
@pytest.mark.parametrize("size", [1, 7, 65536])
def test_async_iterator_source_equals_sync_output(name: str, size: int) -> None:
    data = INPUTS[name]
    if size == 1 and len(data) > 100_000:
        size = 997
    want = strip_volatile(read(data))
    got = asyncio.run(collect(chunked(data, size)))
    assert_valid_stream(got)
    assert strip_volatile(got) == want


@pytest.mark.parametrize("name", list(INPUTS))
def test_file_path_source_equals_sync_output(name: str, tmp_path: Path) -> None:
    path = tmp_path / "in.ndjson"
    path.write_bytes(INPUTS[name])
    got = asyncio.run(collect(path))
    assert strip_volatile(got) == strip_volatile(read(path))


def test_stream_reader_with_a_line_far_over_the_64k_readline_limit() -> None:
    data = INPUTS["long-line"]

    async def main() -> list[p.AnyEvent]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return await collect(reader)

    got = asyncio.run(main())
    assert_valid_stream(got)
    assert [len(e.content) for e in got if isinstance(e, p.Message)] == [1 << 20]


def test_subprocess_pipe_is_read_live() -> None:
    """A child writes one line, waits for us to see it, then finishes: aread must not wait for EOF."""
    lines = canonical_session().splitlines(keepends=True)
    code = (
        "import sys\n"
        f"lines = {lines!r}\n"
        "sys.stdout.buffer.write(lines[0]); sys.stdout.flush()\n"
        "sys.stdin.readline()\n"
        "sys.stdout.buffer.write(b''.join(lines[1:])); sys.stdout.flush()\n"
    )

    async def main() -> list[p.AnyEvent]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        assert proc.stdout is not None and proc.stdin is not None
        events = []
        async for event in aread(proc.stdout):
            events.append(event)
            if isinstance(event, p.Start):
                proc.stdin.write(b"go\n")
                await proc.stdin.drain()
        await asyncio.wait_for(proc.wait(), 10)
        return events

    got = asyncio.run(asyncio.wait_for(main(), 20))
    assert strip_volatile(got) == strip_volatile(read(b"".join(lines)))


def test_binary_pipe_object_is_read_in_a_thread() -> None:
    read_fd, write_fd = os.pipe()
    data = INPUTS["junk"]

    async def main() -> list[p.AnyEvent]:
        with os.fdopen(read_fd, "rb") as pipe:
            writer = asyncio.get_running_loop().run_in_executor(None, _write_all, write_fd, data)
            events = await collect(pipe)
            await writer
            return events

    got = asyncio.run(main())
    assert strip_volatile(got) == strip_volatile(read(data))


def _write_all(fd: int, data: bytes) -> None:
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def test_cancelling_the_reader_of_a_silent_pipe_lets_asyncio_run_return() -> None:
    """The read blocked on the pipe is not in the loop's executor, which asyncio.run() would wait for."""
    program = (
        "import asyncio, subprocess\n"
        "from agentstream import aread\n"
        "child = subprocess.Popen(['sleep', '60'], stdout=subprocess.PIPE)  # silent, and alive throughout\n"
        "async def main():\n"
        "    async def consume():\n"
        "        async for _ in aread(child.stdout):\n"
        "            pass\n"
        "    try:\n"
        "        await asyncio.wait_for(consume(), 0.3)\n"
        "    except TimeoutError:\n"
        "        print('cancelled', flush=True)\n"
        "asyncio.run(main())\n"
        "print('returned', flush=True)\n"
        "child.kill()\n"
    )
    import subprocess

    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["cancelled", "returned"]


def _open_descriptors_on(path: Path) -> int:
    return sum(
        1 for fd in os.listdir("/proc/self/fd") if os.path.realpath(f"/proc/self/fd/{fd}") == str(path)
    )


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors through /proc (Linux)")
def test_async_with_closes_the_file_of_a_reading_left_unfinished_and_a_second_pass_says_so(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run.ndjson"
    path.write_bytes(canonical_session() * 2000)  # many chunks: the reading is left well before the end

    async def leave_early() -> AsyncReader:
        async with aread(path) as reader:
            async for _ in reader:
                break
        return reader

    async def read_again(reader: AsyncReader) -> None:
        async for _ in reader:
            pass

    reader = asyncio.run(leave_early())
    for _ in range(200):  # the reading thread closes the file once it is told to stop
        if _open_descriptors_on(path) == 0:
            break
        time.sleep(0.01)
    assert _open_descriptors_on(path) == 0
    with pytest.raises(RuntimeError, match="read already"):
        asyncio.run(read_again(reader))
