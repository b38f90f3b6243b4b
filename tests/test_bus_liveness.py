"""A run whose producer dies without its ``result`` is ended by its followers; a quiet producer is not.

Real producers (``_bus_producer.py``: a Stream published as ``exec`` publishes), killed or stopped with
real signals, followed by real ``agentstream follow`` processes, on both backends.
"""

from __future__ import annotations

import asyncio
import io
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _bus_fixtures import PRODUCER, bus_home, bus_url, cli, lines_of, spawn_cli  # noqa: F401
from agentstream import protocol as p
from agentstream.bus import Record, RunInfo, open_bus
from agentstream.bus.liveness import LOST_AFTER_ENV, ProducerWatch
from agentstream.validate import validate_stream

LOST_AFTER = "1.5"


@pytest.fixture(autouse=True)
def short_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """Producers touch every 0.25 s, followers give up on them after 1.5 s: theirs and ours alike."""
    monkeypatch.setenv(LOST_AFTER_ENV, LOST_AFTER)


def start_producer(bus_url: str, plan: str, run_id: str, tmp_path: Path) -> subprocess.Popen[bytes]:
    """A producer that has published its first events (it says so by a file) when this returns."""
    started = tmp_path / f"{run_id}.started"
    argv = [
        sys.executable,
        str(PRODUCER),
        f"{plan} touch={started}",
        "--session-id",
        run_id,
        "--bus",
        bus_url,
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while not started.exists() or not _stored(bus_url, run_id):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr and proc.stderr.read()
        time.sleep(0.02)
    return proc


def _stored(bus_url: str, run_id: str) -> bool:
    with open_bus(bus_url) as bus:
        info = bus.get_run(run_id)
    return info is not None and info.last_seq >= 2


def assert_valid(output: bytes) -> None:
    assert [str(v) for v in validate_stream(io.BytesIO(output))] == []


def test_a_killed_producers_run_is_ended_whole_by_its_follower(bus_url: str, tmp_path: Path) -> None:
    producer = start_producer(bus_url, "tool events=2 interval=60", "killed", tmp_path)
    follower = spawn_cli("follow", "killed", "--timeout", "30", "--bus", bus_url)
    producer.send_signal(signal.SIGKILL)
    producer.wait(timeout=10)
    out, err = follower.communicate(timeout=30)

    assert follower.returncode == 1, err
    objs = lines_of(out)
    assert {o["session_id"] for o in objs} == {"killed"}, "the ending is the run's own, stored on the bus"
    assert [o["type"] for o in objs[-4:]] == ["tool_result", "message", "error", "result"]
    assert objs[-4]["status"] == "cancelled" and objs[-3]["content"] == "working on it"
    assert objs[-2]["code"] == "PRODUCER_LOST" and objs[-2]["recoverable"] is False
    assert objs[-1]["subtype"] == "producer_lost" and objs[-1]["synthetic"] is True
    assert_valid(out)

    with open_bus(bus_url) as bus:
        info = bus.get_run("killed")
    assert info is not None and info.status == "failed" and info.subtype == "producer_lost"
    replay = cli("follow", "killed", "--bus", bus_url, timeout=20)  # a later follower replays that ending
    assert replay.returncode == 1 and replay.stdout == out


def test_a_quiet_producer_that_lives_is_not_taken_for_lost(bus_url: str, tmp_path: Path) -> None:
    """Two seconds between events, longer than the window: its touches keep the run alive."""
    producer = start_producer(bus_url, "events=2 interval=2", "quiet", tmp_path)
    followed = cli("follow", "quiet", "--timeout", "30", "--bus", bus_url)
    produced, _ = producer.communicate(timeout=30)

    assert producer.returncode == 0 and followed.returncode == 0, followed.stderr
    assert followed.stdout.splitlines()[:-1] == produced.splitlines()[:-1]  # the result gains next_actions
    assert lines_of(followed.stdout)[-1]["subtype"] == "success"


def test_a_stopped_producer_that_comes_back_is_fenced_off_and_says_so(bus_url: str, tmp_path: Path) -> None:
    """SIGSTOP past the window: the follower ends the run; once resumed, the producer finishes its own output
    unchanged, and the bus keeps the ending the follower stored rather than the producer's later events."""
    producer = start_producer(bus_url, "events=3 interval=1", "stopped", tmp_path)
    producer.send_signal(signal.SIGSTOP)
    try:
        followed = cli("follow", "stopped", "--timeout", "30", "--bus", bus_url)
    finally:
        producer.send_signal(signal.SIGCONT)
    produced, warnings = producer.communicate(timeout=30)

    assert followed.returncode == 1 and lines_of(followed.stdout)[-1]["subtype"] == "producer_lost"
    assert producer.returncode == 0 and lines_of(produced)[-1]["subtype"] == "success"
    assert b"ended on the bus by another process" in warnings, warnings
    assert cli("follow", "stopped", "--bus", bus_url).stdout == followed.stdout


def test_a_live_run_served_to_many_ends_for_all_when_its_producer_dies(
    bus_home: Path, tmp_path: Path
) -> None:
    """serve's shared tail notices the lost producer too: each of its followers gets the ending."""
    from agentstream.serve.hub import RunHub

    bus_url = f"sqlite:///{tmp_path / 'bus.sqlite3'}"
    producer = start_producer(bus_url, "tool events=2 interval=60", "served", tmp_path)
    hub = RunHub(bus_url)

    async def follower() -> list[str]:
        return [record.type async for batch in hub.batches("served", 0) for record in batch]

    async def scenario() -> list[list[str]]:
        followers = [asyncio.create_task(follower()) for _ in range(2)]
        await asyncio.sleep(0.5)
        producer.send_signal(signal.SIGKILL)
        return await asyncio.wait_for(asyncio.gather(*followers), timeout=30)

    try:
        seen = asyncio.run(scenario())
    finally:
        hub.close()
        producer.kill()
        producer.wait(timeout=10)
    assert seen[0] == seen[1] and seen[0][-2:] == ["error", "result"]


def test_runs_of_jobs_and_runs_without_an_alive_time_are_never_taken_for_lost() -> None:
    """Workers reclaim job runs with a retry; a run an older producer wrote has no alive time to judge by."""
    watch = ProducerWatch(lost_after=0.0)
    job_run = RunInfo(run_id="j", status="running", alive=1.0, last_seq=3, job_id="job_1")
    old_run = RunInfo(run_id="o", status="running", alive=0.0, last_seq=3)
    plain_run = RunInfo(run_id="r", status="running", alive=1.0, last_seq=3)
    for _ in range(2):
        assert not watch.is_lost(job_run) and not watch.is_lost(old_run)
    assert not watch.is_lost(plain_run) and watch.is_lost(plain_run)  # judged by a second look, not the first
    assert not watch.is_lost(RunInfo(run_id="r", status="running", alive=1.0, last_seq=4))  # it moved on


def test_a_bus_file_made_before_alive_times_gains_the_column(bus_home: Path, tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE runs (run_id TEXT PRIMARY KEY, status TEXT NOT NULL, command TEXT NOT NULL DEFAULT '',"
            " created REAL NOT NULL, updated REAL NOT NULL, last_seq INTEGER NOT NULL DEFAULT -1,"
            " exit_code INTEGER, subtype TEXT, job_id TEXT, attempt INTEGER)"
        )
        db.execute("INSERT INTO runs (run_id, status, created, updated) VALUES ('old', 'running', 1, 1)")
    db.close()
    with open_bus(f"sqlite:///{path}") as bus:
        info = bus.get_run("old")
        assert info is not None and info.alive == 0.0
        start = p.Sequencer("new").stamp(p.Start(command="test"))
        bus.append("new", [Record(0, "start", p.encode(start))])
        bus.touch("new")
        fresh = bus.get_run("new")
        assert fresh is not None and fresh.alive > 0


def test_a_backend_without_touches_never_has_a_run_declared_lost(bus_home: Path, tmp_path: Path) -> None:
    """Its quiet producers cannot prove they live, so silence says nothing there, whatever ``alive`` it keeps."""
    from agentstream.bus import Bus
    from agentstream.bus.sqlite import SqliteBus

    class WithoutTouches(SqliteBus):
        touch = Bus.touch

    url = f"sqlite:///{tmp_path / 'bus.sqlite3'}"
    start = p.Sequencer("quiet").stamp(p.Start(command="test"))
    for backend, ended in ((WithoutTouches, False), (SqliteBus, True)):
        bus = backend(url)
        run_id = f"quiet-{backend.__name__}"
        bus.append(run_id, [Record(0, "start", p.encode(start))])
        watch = ProducerWatch(lost_after=0.0)
        looks = [watch.end_if_lost(bus, info) for info in [bus.get_run(run_id)] * 2 if info is not None]
        assert looks == [False, ended]
        final = bus.get_run(run_id)
        assert final is not None and final.terminal is ended
        bus.close()
