"""Fixtures for the bus tests: a real redis-server on a free loopback port, CLI runners, producers.

Import the fixtures you use into a test module (``from _bus_fixtures import redis_server``).
A missing ``redis-server`` skips the Redis tests, except under ``CI`` where it fails them.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from agentstream import protocol as p
from agentstream.bus import Record

FORBIDDEN_PORT = 6379
PRODUCER = Path(__file__).with_name("_bus_producer.py")
CASSETTE = (  # one recorded model turn, replayed by ``exec --cassette``
    '{"cassette":1,"provider":"openai","model":"gpt-test","recorded_at":"2025-06-01T10:00:00.000Z"}\n'
    '{"call":1,"events":[{"type":"text","text":"Hello from the queue."},'
    '{"type":"usage","input_tokens":10,"output_tokens":5,"cached_tokens":0,"reasoning_tokens":0},'
    '{"type":"end","reason":"stop"}]}\n'
)


def free_port() -> int:
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port != FORBIDDEN_PORT:
            return port


class RedisServer:
    """A redis-server child with its data (AOF) in its own directory, restartable on the same port."""

    def __init__(self, directory: Path, *, persistent: bool = True) -> None:
        self.directory = directory
        self.port = free_port()
        self.persistent = persistent
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        argv += ["--appendonly", "yes" if self.persistent else "no", "--dir", str(self.directory)]
        if self.persistent:  # every write on disk before its reply: a SIGKILL right after a claim keeps it
            argv += ["--appendfsync", "always"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_ready()

    def _wait_ready(self) -> None:
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 10
        try:
            while True:
                try:
                    if client.ping():
                        return
                except redis.ConnectionError:
                    if self.proc is not None and self.proc.poll() is not None:
                        raise RuntimeError(f"redis-server exited with {self.proc.returncode}") from None
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
        finally:
            client.close()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=10)
        self.proc = None


def _require_redis() -> None:
    """A missing server fails the test with what to install; nothing is skipped."""
    if not shutil.which("redis-server"):
        pytest.fail("redis-server is not installed: apt-get install redis-server (.ci/run installs it)")


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    _require_redis()
    directory = tmp_path / "redis"
    directory.mkdir()
    server = RedisServer(directory)
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def bus_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private AGENTSTREAM_HOME (and no inherited AGENTSTREAM_BUS) for this test and its children."""
    home = tmp_path / "home"
    monkeypatch.setenv("AGENTSTREAM_HOME", str(home))
    monkeypatch.delenv("AGENTSTREAM_BUS", raising=False)
    return home


@pytest.fixture(params=["sqlite", "redis"])
def bus_url(request: pytest.FixtureRequest, bus_home: Path, tmp_path: Path) -> Iterator[str]:
    """Each test that uses it runs once per backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'bus.sqlite3'}"
        return
    _require_redis()
    directory = tmp_path / "redis"
    directory.mkdir()
    server = RedisServer(directory, persistent=False)
    server.start()
    try:
        yield server.url
    finally:
        server.kill()


def cli(*args: str, timeout: float = 30, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run ``agentstream ARGS`` in a real child process (environment inherited)."""
    return subprocess.run(
        [sys.executable, "-m", "agentstream", *args], capture_output=True, timeout=timeout, input=stdin
    )


def spawn_cli(*args: str) -> subprocess.Popen[bytes]:
    """Start ``agentstream ARGS``; unbuffered pipes, so ``readline()`` then ``communicate()`` loses nothing."""
    return subprocess.Popen(
        [sys.executable, "-m", "agentstream", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
    )


def lines_of(output: bytes) -> list[dict]:  # type: ignore[type-arg]
    """Every stdout line decoded as a JSON object (fails the test on a non-JSON line)."""
    return [msgspec.json.decode(line) for line in output.splitlines()]


def events(run_id: str, count: int, *, start: int = 0, final: bool = False) -> list[Record]:
    """Records ``start .. start+count-1`` of a run: a ``start`` at seq 0, ``log`` lines, optionally a ``result`` last."""
    records = []
    for seq in range(start, start + count):
        if seq == 0:
            event: p.BaseEvent = p.Start(command="test")
        elif final and seq == start + count - 1:
            event = p.Result(ok=True, subtype="success", exit_code=0)
        else:
            event = p.Log(level="info", message=f"line {seq}")
        event.session_id, event.seq, event.ts = run_id, seq, p.now_ts()
        records.append(Record(seq, event.type, p.encode(event)))
    return records
