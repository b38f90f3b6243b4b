"""Publishing a producer's run: complete, cheap for the producer, and never fatal to it."""

from __future__ import annotations

import argparse
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _bus_fixtures import CASSETTE, PRODUCER, bus_home, bus_url, cli, free_port, lines_of  # noqa: F401
from _consumer_support import agent_script
from agentstream import protocol as p
from agentstream.bus import Record, open_bus
from agentstream.bus.publish import Publisher
from agentstream.bus.queue import cancel_run
from agentstream.cli._bus_options import add_publish_options, publish
from agentstream.stream import Stream


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_publish_options(parser)
    return parser.parse_args(list(argv))


def test_every_event_reaches_the_bus_as_the_stream_wrote_it(bus_url: str) -> None:
    out = io.BytesIO()
    stream = Stream("embedded", out=out)
    close = publish(stream, _args("--bus", bus_url))
    with stream:
        for n in range(500):
            stream.log(f"line {n}")
    close()
    with open_bus(bus_url) as bus:
        stored = bus.read(stream.session_id, limit=10_000)
        info = bus.get_run(stream.session_id)
    assert [r.line for r in stored] == out.getvalue().splitlines()
    assert info is not None and info.status == "succeeded" and info.command == "embedded"


def test_no_publish_publishes_nothing(bus_home: Path) -> None:
    stream = Stream("quiet", out=io.BytesIO())
    close = publish(stream, _args("--no-publish"))
    with stream:
        stream.log("x")
    close()
    with open_bus() as bus:
        assert bus.list_runs() == []


def test_an_unreachable_bus_costs_one_warning_and_never_the_run(bus_home: Path) -> None:
    env = {**os.environ, "AGENTSTREAM_BUS_RETRY": "0.3", "AGENTSTREAM_BUS_FLUSH_TIMEOUT": "2"}
    url = f"redis://127.0.0.1:{free_port()}"
    done = subprocess.run(
        [sys.executable, str(PRODUCER), "events=50", "--bus", url], capture_output=True, env=env, timeout=60
    )
    assert done.returncode == 0
    objs = lines_of(done.stdout)
    assert len(objs) == 52 and objs[-1]["type"] == "result" and objs[-1]["ok"] is True
    warnings = done.stderr.decode().splitlines()
    assert len(warnings) == 1 and "warning" in warnings[0] and "BUS_UNAVAILABLE" not in warnings[0]
    assert "cannot reach Redis" in warnings[0]


def test_a_signalled_producer_still_publishes_its_interrupted_result(bus_url: str, tmp_path: Path) -> None:
    started = tmp_path / "started"
    producer = subprocess.Popen(
        [
            sys.executable,
            str(PRODUCER),
            f"events=500 interval=0.01 touch={started}",
            "--session-id",
            "sig",
            "--bus",
            bus_url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    while not started.exists():
        time.sleep(0.01)
    time.sleep(0.2)
    producer.send_signal(signal.SIGINT)
    out, _ = producer.communicate(timeout=30)
    assert producer.returncode == 130
    with open_bus(bus_url) as bus:
        stored = bus.read("sig", limit=10_000)
        info = bus.get_run("sig")
    assert [r.line for r in stored] == out.splitlines()  # everything, the result included
    assert info is not None and info.status == "interrupted" and info.exit_code == 130


def test_exec_publishes_by_default_so_follow_works(bus_home: Path, tmp_path: Path) -> None:
    cassette = tmp_path / "c.cassette"
    cassette.write_text(CASSETTE)
    ran = cli(
        "exec",
        "say hello",
        "--cassette",
        str(cassette),
        "--session-id",
        "ses_published",
        "--cwd",
        str(tmp_path),
    )
    assert ran.returncode == 0, ran.stderr
    followed = cli("follow", "ses_published")
    assert followed.returncode == 0
    assert followed.stdout.splitlines()[:-1] == ran.stdout.splitlines()[:-1]
    assert lines_of(followed.stdout)[-1]["result"] == "Hello from the queue."


def _producer_argv(kind: str, bus_url: str, tmp_path: Path) -> list[str]:
    """A producer that publishes 20 events over about a second: a Stream, or a wrap of a child that writes them."""
    if kind == "stream":
        return [sys.executable, str(PRODUCER), "events=20 interval=0.05", "--bus", bus_url]
    child = agent_script(
        tmp_path, "for n in range(20):\n    stream.log(f'event {n}')\n    time.sleep(0.05)\nstream.finish()\n"
    )
    return [sys.executable, "-m", "agentstream", "wrap", "--bus", bus_url, "--", *child]


@pytest.mark.parametrize("kind", ["stream", "wrap"])
def test_a_producer_whose_run_is_cancelled_warns_once_and_goes_on(
    kind: str, bus_url: str, tmp_path: Path
) -> None:
    """Fenced off by a cancel on the bus, the producer says so once on stderr; its own stream is unchanged."""
    producer = subprocess.Popen(
        _producer_argv(kind, bus_url, tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0
    )
    assert producer.stdout is not None
    first = producer.stdout.readline()
    run_id = lines_of(first)[0]["session_id"]
    with open_bus(bus_url) as bus:
        while (info := bus.get_run(run_id)) is None or info.last_seq < 2:  # some of the run is on the bus
            assert producer.poll() is None, producer.communicate()
            time.sleep(0.01)
        assert cancel_run(bus, run_id, by="the test")
        rest, err = producer.communicate(timeout=30)
        stored = bus.read(run_id, limit=10_000)
        info = bus.get_run(run_id)
    assert producer.returncode == 0, err
    printed = lines_of(first + rest)
    assert [o["type"] for o in printed].count("log") == 20 and printed[-1][
        "ok"
    ] is True  # its own, to the end
    warnings = err.decode().splitlines()
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"agentstream: warning: bus: run {run_id}: the run was ended on the bus")
    assert (
        "cancelled" in warnings[0] and "no longer stored" in warnings[0] and "go on unchanged" in warnings[0]
    )
    assert info is not None and (info.status, info.subtype) == ("interrupted", "cancelled")
    kept = [r.line for r in stored[:-2]]
    assert kept == (first + rest).splitlines()[: len(kept)]  # the producer's events up to the cancel, no more
    assert [lines_of(r.line)[0].get("synthetic") for r in stored[-2:]] == [True, True]


def test_a_retried_batch_that_the_bus_had_stored_is_not_taken_for_a_fence(
    bus_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An append whose reply was lost stores nothing the second time; that is no cancelled run, so no warning."""
    out = io.BytesIO()
    stream = Stream("retried", out=out)
    with stream:
        stream.log("one")
    lines = out.getvalue().splitlines()
    records = [Record(e.seq, e.type, line) for e, line in zip(map(p.decode, lines), lines, strict=True)]
    with open_bus(bus_url) as bus:
        bus.append(stream.session_id, records)  # the first attempt, whose reply "was lost"
    publisher = Publisher(bus_url, stream.session_id)
    for event in map(p.decode, lines):
        publisher.on_event(event)  # the same events again: the bus stores none of them
    publisher.close()
    assert (publisher.stored, publisher.dropped, publisher.error) == (0, 0, None)
    assert capsys.readouterr().err == ""


def test_a_bus_locked_by_another_process_past_the_connect_timeout_is_waited_for_not_given_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lock held elsewhere (a long transaction, a backup) means the bus is there: the run waits it out."""
    import sqlite3
    import threading

    from agentstream.bus import sqlite as sqlite_bus

    bus_url = f"sqlite:///{tmp_path / 'bus.sqlite3'}"
    with open_bus(bus_url):
        pass  # the file and its tables exist
    monkeypatch.setattr(sqlite_bus, "BUSY_TIMEOUT_MS", 200)  # SQLite gives up on the lock after 0.2 s …
    monkeypatch.setenv("AGENTSTREAM_BUS_CONNECT_TIMEOUT", "0.3")  # … past a bus never reached's deadline
    holder = sqlite3.connect(tmp_path / "bus.sqlite3", isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(1.5, holder.execute, ("COMMIT",))
    release.start()
    out = io.BytesIO()
    stream = Stream("locked out", out=out)
    publisher = Publisher(bus_url, stream.session_id)
    stream.observe(publisher.on_event)
    with stream:
        stream.log("written while the lock is held")
    publisher.close()
    release.join()
    holder.close()
    with open_bus(bus_url) as bus:
        stored = bus.read(stream.session_id, 0)
    assert [r.line for r in stored] == out.getvalue().splitlines()
    assert publisher.dropped == 0
    assert "locked by another process" in capsys.readouterr().err  # one warning, while it waited


def test_two_producers_of_one_run_id_are_never_merged(bus_url: str) -> None:
    """Two real producers, started together on the same run id: the bus keeps one whole run, the other's
    events are refused with SEQ_CONFLICT and a fix on its stderr, and both finish their own output."""
    argv = [
        sys.executable,
        str(PRODUCER),
        "events=20 interval=0.02",
        "--session-id",
        "twin",
        "--bus",
        bus_url,
    ]
    producers = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outputs = [producer.communicate(timeout=60) for producer in producers]
    assert [producer.returncode for producer in producers] == [0, 0]
    refused = [stderr.decode() for _, stderr in outputs if stderr]
    assert len(refused) == 1, refused
    assert "SEQ_CONFLICT" in refused[0] and "another producer" in refused[0] and "fix:" in refused[0]
    with open_bus(bus_url) as bus:
        stored = [record.line for record in bus.read("twin", limit=1000)]
        info = bus.get_run("twin")
    kept = next(stdout for stdout, stderr in outputs if not stderr)
    assert stored == kept.splitlines()  # the winner's run, byte for byte, and nothing of the other's
    assert info is not None and info.status == "succeeded" and info.last_seq == len(stored) - 1
