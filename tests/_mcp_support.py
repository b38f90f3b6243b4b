"""A remote MCP server for tests: the official MCP Python SDK's streamable-HTTP app (``_mcp_http_server.py``)
started on a free loopback port, and the log of what it was sent."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _bus_fixtures import free_port

SERVER = Path(__file__).parent / "_mcp_http_server.py"


@contextmanager
def remote_server(tmp_path: Path, *options: str) -> Iterator[tuple[str, Path]]:
    """The SDK's server on a free port: its URL, and the log of the requests it got."""
    port, log, said = free_port(), tmp_path / "remote.jsonl", tmp_path / "remote.stderr"
    with said.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, str(SERVER), str(port), str(log), *options],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, f"the MCP server exited: {said.read_text()}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the MCP server did not start listening in 30 s"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/{'sse' if '--sse' in options else 'mcp'}", log
    finally:
        proc.terminate()
        proc.wait(10)


def requests(log: Path) -> list[dict[str, Any]]:
    """What the server was sent, one entry per HTTP request."""
    return [json.loads(line) for line in log.read_text().splitlines()]
