"""Several processes write the embedded SQLite bus at once; nothing is lost, nothing doubled."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

from _bus_fixtures import PRODUCER, bus_home, spawn_cli  # noqa: F401
from agentstream.bus import open_bus

PRODUCERS = 5
EVENTS = 300
RAW_BATCHES = 200

# A raw appender: many small transactions, each batch retried once to prove retries are harmless.
RAW_WRITER = """
import sys
sys.path.insert(0, sys.argv[3])
from _bus_fixtures import events
from agentstream.bus import open_bus
bus = open_bus(sys.argv[1])
run = sys.argv[2]
records = events(run, {batches} * 5)
for start in range(0, len(records), 5):
    bus.append(run, records[start:start + 5])
    bus.append(run, records[start:start + 5])
"""


def test_many_processes_write_one_sqlite_bus_without_loss(tmp_path: Path, bus_home: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.sqlite3'}"
    follower = spawn_cli("follow", "run_0", "--wait", "--timeout", "60", "--bus", url)
    producers = [
        subprocess.Popen(
            [sys.executable, str(PRODUCER), f"events={EVENTS}", "--session-id", f"run_{n}", "--bus", url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for n in range(PRODUCERS)
    ]
    tests_dir = str(Path(__file__).parent)
    raw = [
        subprocess.Popen(
            [sys.executable, "-c", RAW_WRITER.format(batches=RAW_BATCHES), url, f"raw_{n}", tests_dir],
            stderr=subprocess.PIPE,
        )
        for n in range(2)
    ]
    for proc in producers + raw:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert b"warning" not in err, err
    followed, _ = follower.communicate(timeout=60)

    with open_bus(url) as bus:
        for n in range(PRODUCERS):
            assert [r.seq for r in bus.read(f"run_{n}", limit=10_000)] == list(range(EVENTS + 2))
            assert bus.get_run(f"run_{n}").status == "succeeded"  # type: ignore[union-attr]
        for n in range(2):
            assert [r.seq for r in bus.read(f"raw_{n}", limit=10_000)] == list(range(RAW_BATCHES * 5))
        feed = Counter()
        cursor = "0"
        while batch := bus.read_feed(cursor, limit=5000):
            feed.update((item.run_id, item.record.seq) for item in batch)
            cursor = batch[-1].cursor
    assert len(feed) == PRODUCERS * (EVENTS + 2) + 2 * RAW_BATCHES * 5
    assert set(feed.values()) == {1}  # the all-runs feed has every event exactly once
    assert len(followed.splitlines()) == EVENTS + 2 and follower.returncode == 0
