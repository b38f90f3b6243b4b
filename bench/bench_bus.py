"""Bus benchmarks: follow latency and append throughput, each against a raw baseline run alongside.

    .venv/bin/python bench/bench_bus.py [--events 1000] [--throughput-events 50000] [--skip-redis]

Latency: a producer publishes ``--events`` events 2 ms apart through the real
path (``Stream`` → ``attach_publisher`` → bus); an ``agentstream follow`` child
prints them; the time from ``emit`` to the line arriving on the follower's stdout
is measured with the shared monotonic clock. Baselines: the same pace through
the bare client (Redis: ``XADD`` + a child doing blocking ``XREAD``; SQLite: an
``INSERT`` per event + a child polling ``SELECT`` every 1 ms).

Throughput: one producer appending pre-encoded events in batches of 512
(``Bus.append``), and a ``Stream`` with the publisher attached emitting as fast as
it can until everything is stored. Baselines: redis-py pipelined ``XADD`` in
batches of 512; ``executemany`` of 512-row batches into a bare SQLite table.

A redis-server is started on a free loopback port for the Redis figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from agentstream import protocol as p
from agentstream.bus import Record, open_bus
from agentstream.bus.publish import Publisher
from agentstream.stream import Stream

GAP_S = 0.002
BATCH = 512

RAW_XREAD = """
import sys, redis
r = redis.Redis.from_url(sys.argv[1]); last = "0-0"
out = sys.stdout.buffer
while True:
    reply = r.xread({"raw": last}, block=1000, count=100)
    for _, entries in reply or []:
        for entry_id, fields in entries:
            last = entry_id
            out.write(fields[b"l"] + b"\\n"); out.flush()
            if fields[b"l"] == b"end": sys.exit(0)
"""

RAW_POLL = """
import sys, sqlite3, time
db = sqlite3.connect(sys.argv[1], isolation_level=None); last = 0
out = sys.stdout.buffer
while True:
    rows = db.execute("SELECT id, line FROM raw WHERE id > ? ORDER BY id", (last,)).fetchall()
    for last, line in rows:
        out.write(line + b"\\n"); out.flush()
        if line == b"end": sys.exit(0)
    time.sleep(0.001)
"""


def percentiles(samples_ms: list[float]) -> tuple[float, float]:
    ordered = sorted(samples_ms)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _collect(proc: subprocess.Popen[bytes], parse: Callable[[bytes], int | None], count: int) -> list[float]:
    """Read the child's stdout; for each line carrying a send time, the latency in ms."""
    latencies: list[float] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        sent = parse(line)
        if sent is not None:
            latencies.append((time.monotonic_ns() - sent) / 1e6)
            if len(latencies) >= count:
                break
    return latencies


def _event_send_time(line: bytes) -> int | None:
    marker = b'"message":"t='
    at = line.find(marker)
    if at < 0:
        return None
    start = at + len(marker)
    return int(line[start : line.index(b'"', start)])


def latency_ours(url: str, events: int) -> tuple[float, float]:
    run_id = p.new_id("bench")
    follower = subprocess.Popen(
        [sys.executable, "-m", "agentstream", "follow", run_id, "--wait", "--bus", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    result: list[float] = []
    reader = threading.Thread(target=lambda: result.extend(_collect(follower, _event_send_time, events)))
    reader.start()
    time.sleep(0.5)  # the follower is up and waiting
    with open(os.devnull, "wb") as sink:
        stream = Stream("bench", out=sink, session_id=run_id)
        publisher = Publisher(url, run_id)
        stream.observe(publisher.on_event)
        with stream:
            for _ in range(events):
                stream.log(f"t={time.monotonic_ns()}")
                time.sleep(GAP_S)
        publisher.close()
    reader.join(timeout=60)
    follower.wait(timeout=30)
    return percentiles(result)


def latency_raw(
    child_code: str, target: str, send: Callable[[bytes], None], events: int
) -> tuple[float, float]:
    child = subprocess.Popen([sys.executable, "-c", child_code, target], stdout=subprocess.PIPE)
    result: list[float] = []

    def parse(line: bytes) -> int | None:
        return int(line[2:]) if line.startswith(b"t=") else None

    reader = threading.Thread(target=lambda: result.extend(_collect(child, parse, events)))
    reader.start()
    time.sleep(0.5)
    for _ in range(events):
        send(f"t={time.monotonic_ns()}".encode())
        time.sleep(GAP_S)
    send(b"end")
    reader.join(timeout=60)
    child.wait(timeout=30)
    return percentiles(result)


def _records(run_id: str, count: int) -> list[Record]:
    sequencer = p.Sequencer(run_id)
    records = []
    for n in range(count):
        event = sequencer.stamp(
            p.Log(level="info", message=f"benchmark line {n} with some typical length text")
        )
        records.append(Record(event.seq, event.type, p.encode(event)))
    return records


def throughput_append(url: str, count: int) -> float:
    run_id = p.new_id("bench")
    records = _records(run_id, count)
    with open_bus(url) as bus:
        began = time.perf_counter()
        for start in range(0, count, BATCH):
            bus.append(run_id, records[start : start + BATCH])
        took = time.perf_counter() - began
    return count / took


def throughput_stream(url: str, count: int) -> float:
    """A producer's view: emit as fast as possible, until the publisher has stored everything."""
    with open(os.devnull, "wb") as sink:
        stream = Stream("bench", out=sink)
        publisher = Publisher(url, stream.session_id)
        stream.observe(publisher.on_event)
        began = time.perf_counter()
        with stream:
            for n in range(count):
                stream.log(f"benchmark line {n} with some typical length text")
        publisher.close()
        took = time.perf_counter() - began
    assert publisher.dropped == 0 and publisher.stored == count + 2, (publisher.dropped, publisher.stored)
    return (count + 2) / took


def throughput_raw_redis(url: str, count: int) -> float:
    import redis

    client = redis.Redis.from_url(url)
    lines = [r.line for r in _records("raw", count)]
    began = time.perf_counter()
    for start in range(0, count, BATCH):
        pipe = client.pipeline(transaction=False)
        for line in lines[start : start + BATCH]:
            pipe.xadd("rawtp", {"l": line})
        pipe.execute()
    took = time.perf_counter() - began
    client.close()
    return count / took


def throughput_raw_sqlite(path: str, count: int) -> float:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("CREATE TABLE IF NOT EXISTS rawtp (run_id TEXT, seq INTEGER, line BLOB)")
    lines = [(r.seq, r.line) for r in _records("raw", count)]
    began = time.perf_counter()
    for start in range(0, count, BATCH):
        db.execute("BEGIN")
        db.executemany("INSERT INTO rawtp VALUES ('raw', ?, ?)", lines[start : start + BATCH])
        db.execute("COMMIT")
    took = time.perf_counter() - began
    db.close()
    return count / took


class _Redis:
    def __init__(self, directory: Path) -> None:
        self.port = 6379
        while self.port == 6379:  # never the default port: a real server may be there
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                self.port = sock.getsockname()[1]
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(directory),
            ],
            stdout=subprocess.DEVNULL,
        )
        self.url = f"redis://127.0.0.1:{self.port}/0"
        import redis

        client = redis.Redis.from_url(self.url)
        for _ in range(200):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.02)
        client.close()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def bench_sqlite(directory: Path, events: int, throughput_events: int) -> list[tuple[str, str, str, str]]:
    url = f"sqlite:///{directory / 'bus.sqlite3'}"
    raw_path = str(directory / "raw.sqlite3")
    raw = sqlite3.connect(raw_path, isolation_level=None)
    raw.execute("PRAGMA journal_mode = WAL")
    raw.execute("PRAGMA synchronous = NORMAL")  # as the bus sets it
    raw.execute("CREATE TABLE raw (id INTEGER PRIMARY KEY, line BLOB)")
    ours = latency_ours(url, events)
    base = latency_raw(
        RAW_POLL, raw_path, lambda line: raw.execute("INSERT INTO raw (line) VALUES (?)", (line,)), events
    )
    append = throughput_append(url, throughput_events)
    streamed = throughput_stream(url, throughput_events)
    raw_tp = throughput_raw_sqlite(str(directory / "rawtp.sqlite3"), throughput_events)
    return _rows(
        "SQLite", ours, base, "raw sqlite3 INSERT + 1 ms poll", append, streamed, raw_tp, "raw executemany"
    )


def bench_redis(directory: Path, events: int, throughput_events: int) -> list[tuple[str, str, str, str]]:
    import redis

    server = _Redis(directory)
    try:
        client = redis.Redis.from_url(server.url)
        ours = latency_ours(server.url, events)
        base = latency_raw(RAW_XREAD, server.url, lambda line: client.xadd("raw", {"l": line}), events)
        append = throughput_append(server.url, throughput_events)
        streamed = throughput_stream(server.url, throughput_events)
        raw_tp = throughput_raw_redis(server.url, throughput_events)
        client.close()
    finally:
        server.stop()
    return _rows(
        "Redis", ours, base, "raw XADD + blocking XREAD", append, streamed, raw_tp, "raw pipelined XADD"
    )


def _rows(
    backend: str,
    ours: tuple[float, float],
    base: tuple[float, float],
    base_name: str,
    append: float,
    streamed: float,
    raw_tp: float,
    raw_name: str,
) -> list[tuple[str, str, str, str]]:
    return [
        (
            f"{backend} follow latency p50",
            f"{ours[0]:.2f} ms",
            f"{base[0]:.2f} ms ({base_name})",
            f"{ours[0] / base[0]:.2f}x",
        ),
        (
            f"{backend} follow latency p99",
            f"{ours[1]:.2f} ms",
            f"{base[1]:.2f} ms ({base_name})",
            f"{ours[1] / base[1]:.2f}x",
        ),
        (
            f"{backend} Bus.append, batches of {BATCH}",
            f"{append:,.0f} ev/s",
            f"{raw_tp:,.0f} ev/s ({raw_name})",
            f"{append / raw_tp:.2f}x",
        ),
        (
            f"{backend} Stream + publisher",
            f"{streamed:,.0f} ev/s",
            f"{raw_tp:,.0f} ev/s ({raw_name})",
            f"{streamed / raw_tp:.2f}x",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--throughput-events", type=int, default=50_000)
    parser.add_argument("--skip-redis", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("AGENTSTREAM_HOME", tempfile.mkdtemp(prefix="bench-home-"))
    rows: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-bus-") as tmp:
        rows += bench_sqlite(Path(tmp), args.events, args.throughput_events)
        if not args.skip_redis and shutil.which("redis-server"):
            rows += bench_redis(Path(tmp), args.events, args.throughput_events)
    header = ("measure", "agentstream", "baseline (same run)", "ratio")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print(" | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)))
    print(
        f"\n{args.events} latency events {GAP_S * 1000:g} ms apart; {args.throughput_events} throughput events; "
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
