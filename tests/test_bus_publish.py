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

from _bus_fixtures import CASSETTE, PRODUCER, bus_home, bus_url, cli, free_port, lines_of  # noqa: F401
from agentstream.bus import open_bus
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
