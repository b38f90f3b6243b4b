"""A dead, unreachable, stalled, unusable or malformed bus costs seconds, never a hang, and never the run.

Every test uses loopback only: a port nothing listens on (connection refused), a
listening socket whose accept queue is full (a connect that is never answered), a
real redis-server stopped with SIGSTOP (connects succeed, nothing is answered); and
SQLite bus paths that no retry can mend (not a database, a directory, under a file).
The generous retry settings in the environment make a regression hang the test
into its subprocess timeout instead of passing slowly.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from _bus_fixtures import RedisServer, events, redis_server  # noqa: F401
from agentstream.bus import BusUnusable, open_bus
from agentstream.bus.sqlite import bus_error

CASSETTE = Path(__file__).resolve().parent.parent / "src" / "agentstream" / "data" / "demo.cassette.jsonl"
CLI = [str(Path(sys.executable).with_name("agentstream"))]
HANG = 90
"""Subprocess timeout: far above what a dead bus may cost, far below the old retry times × runs."""
SLOW_RETRIES = {"AGENTSTREAM_BUS_RETRY": "600", "AGENTSTREAM_BUS_FLUSH_TIMEOUT": "600"}
"""Retries of an outage (a bus reached before) stretched, so only the connect timeout can end the wait."""


def _refused_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


@pytest.fixture
def blackhole() -> Iterator[str]:
    """A loopback port whose connects are never answered: it listens, its accept queue is full."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        try:
            filler.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(filler)
    probe = socket.socket()
    probe.settimeout(0.5)
    with pytest.raises(TimeoutError):  # the premise: a connect here hangs
        probe.connect(("127.0.0.1", port))
    probe.close()
    yield f"redis://127.0.0.1:{port}/0?connect_timeout=0.5"
    for sock in [*fillers, server]:
        sock.close()


def _run(argv: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*CLI, *argv],
        capture_output=True,
        cwd=tmp_path,
        env={**os.environ, **SLOW_RETRIES, **env},
        timeout=HANG,
    )


def _lines(stdout: bytes) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


EXEC = ["exec", "--provider", "replay", "--cassette", str(CASSETTE), "--permission-mode", "read-only", "hi"]


@pytest.mark.parametrize("kind", ["refused", "blackholed"])
def test_exec_on_a_dead_bus_finishes_its_run_with_one_warning(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = _refused_url() if kind == "refused" else request.getfixturevalue("blackhole")
    done = _run([*EXEC, "--bus", url], tmp_path)
    events = _lines(done.stdout)
    assert done.returncode == 0 and events[-1]["ok"] is True
    assert done.stderr.decode().count("warning: bus") == 1, done.stderr.decode()


@pytest.mark.parametrize("kind", ["refused", "blackholed"])
def test_follow_on_a_dead_bus_gives_up_with_its_terminal_line(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = _refused_url() if kind == "refused" else request.getfixturevalue("blackhole")
    done = _run(["follow", "some-run", "--bus", url, "--reconnect-timeout", "600"], tmp_path)
    *_, error, line = _lines(done.stdout)  # a whole stream: made-up start, the fatal error, the result
    assert error["type"] == "error" and error["code"] == "BUS_UNAVAILABLE"
    assert done.returncode == 1
    assert line["synthetic"] is True and line["subtype"] == "bus_unavailable"
    assert line["error"]["code"] == "BUS_UNAVAILABLE"  # type: ignore[index]


def test_follow_wait_keeps_trying_visibly_until_its_timeout(tmp_path: Path) -> None:
    done = _run(["follow", "some-run", "--bus", _refused_url(), "--wait", "--timeout", "5"], tmp_path)
    line = _lines(done.stdout)[-1]
    assert line["subtype"] == "bus_unavailable" and done.returncode == 1
    tries = done.stderr.decode().count("--wait: trying again")
    assert tries >= 2, done.stderr.decode()


def test_worker_retries_with_backoff_then_gives_up(tmp_path: Path) -> None:
    done = _run(["worker", "--bus", _refused_url()], tmp_path, AGENTSTREAM_BUS_RETRY="2")
    events = _lines(done.stdout)
    attempts = [e for e in events if e["type"] == "error" and e.get("recoverable")]
    assert len(attempts) >= 2
    waits = [e["retry_in_ms"] for e in attempts]
    assert waits == sorted(waits) and waits[0] < waits[-1]  # backoff
    assert done.returncode == 1 and events[-1]["error"]["code"] == "BUS_UNAVAILABLE"  # type: ignore[index]
    assert "gave up after" in events[-1]["error"]["message"]  # type: ignore[index]


BAD_URLS = ["redis://127.0.0.1:notaport/0", "redis://127.0.0.1:6379/zero", "ftp://example/bus", "sqlite://"]
COMMANDS = {
    "exec": EXEC,
    "follow": ["follow", "some-run"],
    "watch": ["watch", "--count", "1"],
    "worker": ["worker"],
    "runs": ["runs"],
    "submit": ["submit", "a prompt"],
    "send": ["send", "greeting", '{"hello": 1}'],
    "logs": ["logs", "--publish", str(CASSETTE)],
}


CASES = [("exec", url) for url in BAD_URLS] + [
    (command, BAD_URLS[0]) for command in sorted(COMMANDS) if command != "exec"
]
"""Every kind of malformed URL once, and every command that takes ``--bus`` once."""


@pytest.mark.parametrize(("command", "url"), CASES)
def test_a_malformed_bus_url_is_exit_2_before_anything_runs(command: str, url: str, tmp_path: Path) -> None:
    done = _run([*COMMANDS[command], "--bus", url], tmp_path)
    assert done.returncode == 2, done.stderr.decode()
    assert b"INVALID_INPUT" in done.stdout + done.stderr
    if command == "exec":  # nothing ran: no model turn, no tool call
        assert [e["type"] for e in _lines(done.stdout)] == ["start", "error", "result"]


def test_the_connect_timeout_from_the_environment_must_be_a_positive_number(tmp_path: Path) -> None:
    done = _run(
        ["follow", "some-run", "--bus", _refused_url()], tmp_path, AGENTSTREAM_BUS_CONNECT_TIMEOUT="soon"
    )
    assert done.returncode == 2
    assert b"AGENTSTREAM_BUS_CONNECT_TIMEOUT" in done.stdout


# -- a server that takes connections but never answers ----------------------------

STALL_BOUND = 10.0
"""A generous multiple of what a stalled Redis may cost with ``?connect_timeout=1``; redis-py's own
socket timeout and retry made it 20 s and more."""


@pytest.fixture
def stalled_redis(redis_server: RedisServer) -> Iterator[RedisServer]:
    """A real redis-server, reachable, then stopped with SIGSTOP: connects succeed, nothing is answered."""
    redis_server.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    yield redis_server


STALLED_COMMANDS = {
    "runs": ["runs"],
    "follow": ["follow", "some-run", "--reconnect-timeout", "600"],
    "watch": ["watch", "--count", "1"],
    "send": ["send", "greeting"],
    "submit": ["submit", "a prompt"],
}


@pytest.mark.parametrize("command", sorted(STALLED_COMMANDS))
def test_a_stalled_redis_costs_the_connect_timeout_and_says_so(
    command: str, stalled_redis: RedisServer, tmp_path: Path
) -> None:
    url = f"{stalled_redis.url}?connect_timeout=1"
    began = time.monotonic()
    done = _run([*STALLED_COMMANDS[command], "--bus", url], tmp_path)
    assert time.monotonic() - began < STALL_BOUND, done.stdout.decode()
    assert done.returncode == 1
    error = _lines(done.stdout)[-1]["error"]
    assert error["code"] == "BUS_UNAVAILABLE"  # type: ignore[index]
    assert "did not answer within its connect timeout (1s)" in error["message"]  # type: ignore[index]


def test_exec_on_a_stalled_redis_finishes_its_run_within_the_connect_timeout(
    stalled_redis: RedisServer, tmp_path: Path
) -> None:
    began = time.monotonic()
    done = _run([*EXEC, "--bus", f"{stalled_redis.url}?connect_timeout=1"], tmp_path)
    assert time.monotonic() - began < STALL_BOUND
    assert done.returncode == 0 and _lines(done.stdout)[-1]["ok"] is True
    warning = done.stderr.decode()
    assert warning.count("warning: bus") == 1 and "did not answer" in warning, warning


def test_a_follower_whose_redis_stalls_mid_run_gives_up_after_its_reconnect_timeout(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    url = f"{redis_server.url}?connect_timeout=1"
    with open_bus(url) as bus:
        bus.append("live", events("live", 2))
    follower = subprocess.Popen(
        [*CLI, "follow", "live", "--bus", url, "--reconnect-timeout", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env={**os.environ, **SLOW_RETRIES},
    )
    assert follower.stdout is not None
    for _ in range(2):  # both stored events printed: the follower is tailing the live run
        assert follower.stdout.readline()
    redis_server.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    began = time.monotonic()
    out, _ = follower.communicate(timeout=HANG)
    assert time.monotonic() - began < STALL_BOUND + 2  # the reconnect timeout, plus one try's connect timeout
    end = _lines(out)[-1]
    assert follower.returncode == 1 and end["subtype"] == "bus_unavailable"
    assert "did not answer" in end["error"]["message"]  # type: ignore[index]


# -- a SQLite bus that no retry can mend ---------------------------------------------

UNUSABLE = {  # what is at the bus path → what the error says of it
    "not a database": "is not an SQLite bus (SQLite says: file is not a database)",
    "a directory": "it is a directory, or in one this process cannot write",
    "under a file": "cannot make the SQLite bus at",
}


def _unusable_bus(kind: str, tmp_path: Path) -> Path:
    path = tmp_path / "bus.sqlite3"
    if kind == "a directory":
        path.mkdir()
        return path
    path.write_bytes(b"these bytes are no SQLite database, however long they go on " * 4)
    return path / "bus.sqlite3" if kind == "under a file" else path


@pytest.mark.parametrize("kind", sorted(UNUSABLE))
def test_a_command_on_an_unusable_sqlite_bus_says_what_is_wrong_and_how_to_fix_it(
    kind: str, tmp_path: Path
) -> None:
    bus = _unusable_bus(kind, tmp_path)
    for command in (["runs"], ["send", "greeting"]):
        done = _run([*command, "--bus", f"sqlite://{bus}"], tmp_path)
        stderr = done.stderr.decode()
        assert done.returncode == 1, stderr
        assert f"agentstream {' '.join(command)}: BUS_UNAVAILABLE: " in stderr and UNUSABLE[kind] in stderr
        assert "--bus sqlite:///" in stderr or "move this file aside" in stderr  # the fix names the way out
        assert "check disk space" not in stderr and "no bus at" not in stderr


@pytest.mark.parametrize("command", [["follow", "r1"], ["watch", "--timeout", "1"]])
def test_a_follower_of_a_bus_under_a_file_ends_with_that_error_not_an_empty_bus(
    command: list[str], tmp_path: Path
) -> None:
    done = _run([*command, "--bus", f"sqlite://{_unusable_bus('under a file', tmp_path)}"], tmp_path)
    ending = _lines(done.stdout)[-1]
    assert done.returncode == 1 and ending["subtype"] == "bus_unavailable", done.stderr
    assert (
        ending["error"]["code"] == "BUS_UNAVAILABLE"
        and UNUSABLE["under a file"] in ending["error"]["message"]
    )
    assert "--bus sqlite:///" in ending["error"]["fix"]


def test_usage_says_a_bus_under_a_file_cannot_be_counted_rather_than_that_it_is_empty(tmp_path: Path) -> None:
    done = _run(["usage", "--bus", f"sqlite://{_unusable_bus('under a file', tmp_path)}"], tmp_path)
    stderr = done.stderr.decode()
    assert "the bus's runs are not counted: BUS_UNAVAILABLE: " in stderr, stderr
    assert (
        UNUSABLE["under a file"] in stderr and "(fix: choose a file" in stderr and "no bus at" not in stderr
    )


@pytest.mark.parametrize("kind", sorted(UNUSABLE))
def test_exec_on_an_unusable_sqlite_bus_gives_it_up_at_once_and_claims_no_retry(
    kind: str, tmp_path: Path
) -> None:
    done = _run([*EXEC, "--bus", f"sqlite://{_unusable_bus(kind, tmp_path)}"], tmp_path)
    warning = done.stderr.decode()
    assert done.returncode == 0 and _lines(done.stdout)[-1]["ok"] is True
    assert warning.count("warning: bus") == 1 and UNUSABLE[kind] in warning, warning
    assert "retrying" not in warning and "(fix: " in warning


def test_a_read_only_bus_file_is_unusable_not_an_outage(tmp_path: Path) -> None:
    """The error SQLite gives a write to a file it may only read (a read-only connection stands in for file
    permissions, which root ignores) is given up at once, with the fix, not retried as an outage."""
    path = tmp_path / "bus.sqlite3"
    open_bus(f"sqlite://{path}").close()
    reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError) as refused:
        reader.execute("DELETE FROM runs")
    reader.close()
    error = bus_error(refused.value, path)
    assert isinstance(error, BusUnusable) and "cannot be written by this process" in error.message
    assert error.fix is not None and "write the file and its directory" in error.fix
