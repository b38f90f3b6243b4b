"""Many threads and asyncio tasks emitting at once: whole lines, contiguous seq."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

from agentstream import protocol as p
from agentstream.stream import Stream

WORKERS = 32
EVENTS_EACH = 10_000


def check_file(path: Path) -> None:
    seqs = []
    per_worker: dict[str, int] = {}
    with path.open("rb") as f:
        for line in f:
            event = p.decode(line)  # raises on any torn or interleaved line
            seqs.append(event.seq)
            if isinstance(event, p.Log):
                worker, _, n = event.message.partition(":")
                assert int(n) == per_worker.get(worker, 0), "a worker's events are out of order"
                per_worker[worker] = int(n) + 1
    assert seqs == list(range(len(seqs)))
    assert len(seqs) == WORKERS * EVENTS_EACH + 2
    assert all(count == EVENTS_EACH for count in per_worker.values()) and len(per_worker) == WORKERS


def test_threads_never_tear_lines(tmp_path: Path) -> None:
    path = tmp_path / "out.ndjson"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    with Stream("threads", out=fd) as s:

        def work(worker: int) -> None:
            for n in range(EVENTS_EACH):
                s.log(f"t{worker}:{n}")

        threads = [threading.Thread(target=work, args=(i,)) for i in range(WORKERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    os.close(fd)
    check_file(path)


def test_asyncio_tasks_never_tear_lines(tmp_path: Path) -> None:
    path = tmp_path / "out.ndjson"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)

    async def main(s: Stream) -> None:
        async def work(worker: int) -> None:
            for n in range(EVENTS_EACH):
                s.log(f"a{worker}:{n}")
                if n % 100 == 0:
                    await asyncio.sleep(0)

        await asyncio.gather(*(work(i) for i in range(WORKERS)))

    with Stream("tasks", out=fd) as s:
        asyncio.run(main(s))
    os.close(fd)
    check_file(path)
