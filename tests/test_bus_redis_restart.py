"""Redis is killed (SIGKILL) and restarted on the same port while a run is produced and followed.

The server keeps its data in an append-only file in its own directory, so the
stream survives the restart; the producer's publisher and the follower both
retry through the outage. Checked by ``seq``: nothing lost, nothing repeated.
"""

from __future__ import annotations

import io
import subprocess
import sys
import threading
import time

import pytest

from _bus_fixtures import PRODUCER, RedisServer, bus_home, cli, lines_of, redis_server, spawn_cli  # noqa: F401
from agentstream.bus import REACHED_ENV, open_bus
from agentstream.bus.publish import Publisher
from agentstream.bus.queue import EXEC_ENV
from agentstream.stream import Stream

EVENTS = 100


def test_follow_survives_a_redis_restart_without_loss_or_duplicates(redis_server: RedisServer) -> None:
    url = redis_server.url
    follower = spawn_cli("follow", "survivor", "--wait", "--timeout", "60", "--bus", url)
    producer = subprocess.Popen(
        [
            sys.executable,
            str(PRODUCER),
            f"events={EVENTS} interval=0.025",
            "--session-id",
            "survivor",
            "--bus",
            url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
    )
    first = follower.stdout.readline()  # the run is live and followed
    assert b'"type":"start"' in first
    time.sleep(0.6)
    redis_server.kill()  # SIGKILL: no shutdown, no final save
    time.sleep(0.8)
    assert producer.poll() is None, "the run must still be going when Redis comes back"
    redis_server.start()  # same port, same data directory
    produced, producer_err = producer.communicate(timeout=60)
    rest, follower_err = follower.communicate(timeout=60)
    assert producer.returncode == 0, producer_err

    followed = lines_of(first + rest)
    seqs = [obj["seq"] for obj in followed]
    assert seqs == list(range(EVENTS + 2)), follower_err  # start, EVENTS logs, result: each once, in order
    assert followed[-1]["type"] == "result" and followed[-1]["ok"] is True
    assert follower.returncode == 0
    assert (first + rest).splitlines()[:-1] == produced.splitlines()[:-1]
    assert producer_err.count(b"warning") == 1, producer_err  # the producer saw the outage, said so once

    with open_bus(url) as bus:
        stored = bus.read("survivor", limit=10_000)
        info = bus.get_run("survivor")
    assert [r.seq for r in stored] == list(range(EVENTS + 2))
    assert info is not None and info.status == "succeeded"


def test_a_worker_says_when_its_running_job_loses_the_bus_and_when_it_is_back(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(EXEC_ENV, f"{sys.executable} {PRODUCER}")
    url = redis_server.url
    submitted = cli("submit", "events=60 interval=0.05", "--bus", url)
    assert submitted.returncode == 0, submitted.stderr
    worker = spawn_cli("worker", "--bus", url, "--max-jobs", "1", "--idle-timeout", "2")
    assert worker.stdout is not None
    while b"job.started" not in worker.stdout.readline():  # the job runs now
        pass
    redis_server.kill()
    time.sleep(1.5)  # at least one heartbeat (every 0.5 s) meets the outage
    redis_server.start()
    out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    events = lines_of(out)  # from after job.started
    outage = [e for e in events if e["type"] == "error" and e["code"] == "BUS_UNAVAILABLE"]
    assert outage and all(e["recoverable"] and e["retry_in_ms"] > 0 for e in outage)
    assert any(e["type"] == "status" and e["status"] == "bus_available" for e in events)
    assert [e["name"] for e in events if e["type"] == "event"] == ["job.succeeded"]


@pytest.mark.parametrize("reached", [True, False])
def test_a_jobs_publisher_waits_out_an_outage_from_its_first_batch_with_the_usual_connect_timeout(
    reached: bool,
    redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A worker's job is told the bus was reached ($AGENTSTREAM_BUS_REACHED): Redis down as the job begins
    is waited out for the retry window, while the connect timeout stays short. Not told, the publisher gives
    a bus it never reached up after that connect timeout."""
    server = redis_server
    server.kill()  # down as the job begins; started again on the same port below
    monkeypatch.setenv("AGENTSTREAM_BUS_CONNECT_TIMEOUT", "0.3")
    if reached:
        monkeypatch.setenv(REACHED_ENV, "1")
    else:
        monkeypatch.delenv(REACHED_ENV, raising=False)
    out = io.BytesIO()
    stream = Stream("job", out=out)
    publisher = Publisher(server.url, stream.session_id, retry_for=30)
    stream.observe(publisher.on_event)
    starting = threading.Timer(1.5, server.start)
    starting.start()
    try:
        with stream:
            stream.log("written while Redis is down")
        publisher.close()
    finally:
        starting.join()
    with open_bus(server.url) as bus:
        stored = [record.line for record in bus.read(stream.session_id)]
    warning = capsys.readouterr().err
    if reached:
        assert stored == out.getvalue().splitlines() and publisher.dropped == 0, warning
        assert "retrying in the background" in warning
    else:
        assert stored == [] and publisher.dropped == len(out.getvalue().splitlines()), warning
