"""``agentstream serve`` fan-out: publish-to-client latency with 100 SSE followers of one live run on Redis.

    .venv/bin/python bench/bench_serve.py [--followers 100] [--events 300] [--gap-ms 10]

A redis-server on a free loopback port, an ``agentstream serve`` child on it,
and one client process holding ``--followers`` SSE connections to
``/api/runs/RUN/events`` (asyncio, raw sockets, so the client costs little). The
bench publishes ``--events`` events ``--gap-ms`` apart through the real path
(``Stream.emit`` → publisher thread → Redis), each carrying its send time on the
shared monotonic clock; every follower notes when each one arrives.

Baselines in the same run, same pace: the same path with 1 follower (what the
fan-out costs), and ``--followers`` clients in one process doing blocking
``XREAD`` on a bare Redis stream fed by plain ``XADD`` (what Redis alone costs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agentstream.bus.publish import Publisher
from agentstream.stream import Stream
from bench_bus import _Redis, percentiles

SSE_CLIENT = r"""
import asyncio, json, re, sys, time
port, run_id, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
SENT = re.compile(rb"t=(\d+)")

async def follow(samples):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /api/runs/{run_id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n".encode())
    await writer.drain()
    started = False
    while True:
        line = await reader.readline()
        if not line:
            return
        if not line.startswith(b"data:"):
            continue
        if not started:
            started = True
            ready.release()
            continue
        if b'"type":"result"' in line:
            writer.close()
            return
        found = SENT.search(line)
        if found:
            samples.append((time.monotonic_ns() - int(found.group(1))) / 1e6)

async def main():
    global ready
    ready = asyncio.Semaphore(0)
    samples = []
    tasks = [asyncio.create_task(follow(samples)) for _ in range(count)]
    for _ in range(count):
        await ready.acquire()
    sys.stdout.write("ready\n"); sys.stdout.flush()
    await asyncio.gather(*tasks)
    sys.stdout.write(json.dumps(samples) + "\n")

asyncio.run(main())
"""

XREAD_CLIENT = r"""
import asyncio, json, sys, time
import redis.asyncio as redis
url, count = sys.argv[1], int(sys.argv[2])

async def follow(samples, ready):
    client = redis.Redis.from_url(url)
    last = "$"
    await client.ping()
    ready.release()
    while True:
        reply = await client.xread({"raw": last}, block=1000, count=100)
        for _, entries in reply or []:
            for entry_id, fields in entries:
                last = entry_id
                line = fields[b"l"]
                if line == b"end":
                    await client.aclose()
                    return
                samples.append((time.monotonic_ns() - int(line)) / 1e6)

async def main():
    ready = asyncio.Semaphore(0)
    samples = []
    tasks = [asyncio.create_task(follow(samples, ready)) for _ in range(count)]
    for _ in range(count):
        await ready.acquire()
    await asyncio.sleep(0.2)  # every client is inside its blocking XREAD
    sys.stdout.write("ready\n"); sys.stdout.flush()
    await asyncio.gather(*tasks)
    sys.stdout.write(json.dumps(samples) + "\n")

asyncio.run(main())
"""


def _client(code: str, *args: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    if proc.stdout.readline() != b"ready\n":
        raise SystemExit("the client process did not get ready")
    return proc


def _samples(proc: subprocess.Popen[bytes]) -> list[float]:
    out, _ = proc.communicate(timeout=120)
    return [float(x) for x in json.loads(out.splitlines()[-1])]


def serve_latency(url: str, port: int, followers: int, events: int, gap_s: float) -> list[float]:
    """Latencies of ``events`` events seen by each of ``followers`` SSE clients of one live run."""
    with open(os.devnull, "wb") as sink:
        stream = Stream("bench", out=sink)
        publisher = Publisher(url, stream.session_id)
        stream.observe(publisher.on_event)
        with stream:
            publisher.flush()
            _wait_for_run(url, stream.session_id)
            client = _client(SSE_CLIENT, str(port), stream.session_id, str(followers))
            for _ in range(events):
                stream.log(f"t={time.monotonic_ns()}")
                time.sleep(gap_s)
        publisher.close()
    return _samples(client)


def _wait_for_run(url: str, run_id: str) -> None:
    from agentstream.bus import open_bus

    with open_bus(url) as bus:
        while bus.get_run(run_id) is None:
            time.sleep(0.01)


def raw_latency(url: str, followers: int, events: int, gap_s: float) -> list[float]:
    import redis

    client = redis.Redis.from_url(url)
    readers = _client(XREAD_CLIENT, url, str(followers))
    for _ in range(events):
        client.xadd("raw", {"l": str(time.monotonic_ns())})
        time.sleep(gap_s)
    client.xadd("raw", {"l": "end"})
    client.close()
    return _samples(readers)


def _start_server(url: str) -> tuple[subprocess.Popen[bytes], int]:
    import re

    proc = subprocess.Popen(
        [sys.executable, "-m", "agentstream", "serve", "--bus", url, "--port", "0"], stderr=subprocess.PIPE
    )
    assert proc.stderr is not None
    found = re.search(rb"listening on http://127\.0\.0\.1:(\d+)/", proc.stderr.readline())
    if found is None:
        raise SystemExit("agentstream serve did not start")
    return proc, int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--followers", type=int, default=100)
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--gap-ms", type=float, default=10.0)
    args = parser.parse_args()
    gap = args.gap_ms / 1000
    with tempfile.TemporaryDirectory() as tmp:
        redis_server = _Redis(Path(tmp))
        server, port = _start_server(redis_server.url)
        try:
            many = serve_latency(redis_server.url, port, args.followers, args.events, gap)
            one = serve_latency(redis_server.url, port, 1, args.events, gap)
            raw = raw_latency(redis_server.url, args.followers, args.events, gap)
        finally:
            server.terminate()
            server.wait()
            redis_server.stop()
    rows = [
        (f"serve, {args.followers} SSE followers", many),
        ("serve, 1 SSE follower", one),
        (f"raw XADD + {args.followers} blocking XREAD clients", raw),
    ]
    base50, base99 = percentiles(raw)
    print(f"{args.events} events {args.gap_ms:g} ms apart; publish-to-client latency")
    print(f"{'path':<44} {'samples':>8} {'p50':>9} {'p99':>9} {'p50 / raw':>10} {'p99 / raw':>10}")
    for name, samples in rows:
        p50, p99 = percentiles(samples)
        print(
            f"{name:<44} {len(samples):>8} {p50:>7.2f}ms {p99:>7.2f}ms {p50 / base50:>9.2f}x {p99 / base99:>9.2f}x"
        )


if __name__ == "__main__":
    main()
