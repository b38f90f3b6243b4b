"""Helpers for the ``serve`` tests: a real ``agentstream serve`` process, plain HTTP, SSE parsing, runs.

Each server is a child process listening on a free loopback port (``--port 0``;
the port is read from its start-up line, which it prints once it listens). HTTP
goes through ``http.client`` so nothing here depends on the server's own stack.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from agentstream import protocol as p
from agentstream.bus import Record, open_bus

_LISTENING = re.compile(rb"listening on http://127\.0\.0\.1:(\d+)/")


class Server:
    """``agentstream serve --port 0 ARGS`` in a child process; ``stop()`` ends it."""

    def __init__(self, bus_url: str, *args: str, port: int = 0, env: dict[str, str] | None = None) -> None:
        self.bus_url = bus_url
        self.args = args
        self.env = env
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr = b""

    def start(self) -> Server:
        argv = [sys.executable, "-m", "agentstream", "serve", "--bus", self.bus_url, "--port", str(self.port)]
        environment = {**os.environ, **(self.env or {})}
        self.proc = subprocess.Popen(
            [*argv, *self.args], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=environment
        )
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()  # printed once the socket listens
        self.stderr += line
        found = _LISTENING.search(line)
        if found is None:
            rest = self.stop()
            raise AssertionError(f"serve did not start: {line!r} {rest!r}")
        self.port = int(found.group(1))
        return self

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> bytes:
        """Terminate it; return what it wrote on stderr."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
            _, err = self.proc.communicate(timeout=10)
            self.stderr += err or b""
            self.proc = None
        return self.stderr

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return msgspec.json.decode(self.body)


def request(
    server: Server,
    method: str,
    path: str,
    *,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=15)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        connection.close()


def all_headers(server: Server, method: str, path: str, headers: dict[str, str]) -> list[tuple[str, str]]:
    """Every response header, repeated ones included (e.g. Set-Cookie)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=15)
    try:
        connection.request(method, path, headers=headers)
        response = connection.getresponse()
        response.read()
        return [(k.lower(), v) for k, v in response.getheaders()]
    finally:
        connection.close()


@dataclass
class SseEvent:
    id: str | None
    data: str
    comments: list[str] = field(default_factory=list)
    """Comment lines seen since the previous event (heartbeats)."""


class SseStream:
    """An open ``text/event-stream`` response, read one event at a time."""

    def __init__(self, server: Server, path: str, headers: dict[str, str] | None = None) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=15)
        self.connection.request("GET", path, headers={"Accept": "text/event-stream", **(headers or {})})
        self.response = self.connection.getresponse()
        self.status = self.response.status
        self.headers = {k.lower(): v for k, v in self.response.getheaders()}

    def events(self) -> Iterator[SseEvent]:
        """Events until the server ends the stream."""
        data: list[str] = []
        event_id: str | None = None
        comments: list[str] = []
        while True:
            raw = self.response.readline()
            if not raw:
                return
            line = raw.decode().rstrip("\r\n")
            if not line:
                if data:
                    yield SseEvent(event_id, "\n".join(data), comments)
                    data, event_id, comments = [], None, []
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "":
                comments.append(value)
            elif name == "data":
                data.append(value)
            elif name == "id":
                event_id = value

    def close(self) -> None:
        self.connection.close()


def publish(bus_url: str, run_id: str, events: Sequence[p.Event], *, first_seq: int = 0) -> list[Record]:
    """Append events to a run as a producer would (stamped with the run id and consecutive seqs)."""
    sequencer = p.Sequencer(run_id, first_seq)
    records = []
    for event in events:
        sequencer.stamp(event)
        records.append(Record(event.seq, event.type, p.encode(event)))
    with open_bus(bus_url) as bus:
        bus.append(run_id, records)
    return records


def finished_run(bus_url: str, run_id: str, answer: str = "All done.") -> list[Record]:
    return publish(
        bus_url,
        run_id,
        [
            p.Start(command="exec fix the tests"),
            p.Message(message_id="m1", role="assistant", content="Looking at the tests."),
            p.Usage(model="gpt-test", input_tokens=100, output_tokens=20, cost_usd=0.002),
            p.Result(
                ok=True,
                subtype="success",
                exit_code=0,
                duration_ms=1234,
                result=answer,
                usage=p.UsageTotals(input_tokens=100, output_tokens=20, cost_usd=0.002),
            ),
        ],
    )


def wait_for(check: Any, timeout: float = 10.0, what: str = "the condition") -> Any:
    """Poll ``check()`` until it returns something truthy (readiness, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


async def until(check: Callable[[], object], what: str, *, polls: int = 1000) -> object:
    """Poll ``check()`` every 10 ms until it is truthy, at most ``polls`` times (readiness, not a timing assertion)."""
    for _ in range(polls):
        value = check()
        if value:
            return value
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")
