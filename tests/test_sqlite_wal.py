"""Opening a new SQLite store from several processes at the same moment (sessions, the embedded bus)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

OPENER = """
import sqlite3, sys, time
from agentstream._sqlite import use_wal
path, start_at = sys.argv[1], float(sys.argv[2])
db = sqlite3.connect(path, timeout=5, isolation_level=None)
time.sleep(max(0.0, start_at - time.time()))
use_wal(db)
print(db.execute("PRAGMA journal_mode").fetchone()[0])
"""


def test_processes_switching_a_new_store_to_wal_at_once_all_succeed(tmp_path: Path) -> None:
    for round_ in range(6):
        path = tmp_path / f"store-{round_}.sqlite3"
        start_at = time.time() + 0.5  # every process starts its switch at this instant
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", OPENER, str(path), str(start_at)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for _ in range(4)
        ]
        results = [proc.communicate(timeout=30) for proc in procs]
        assert [proc.returncode for proc in procs] == [0, 0, 0, 0], [err.decode() for _, err in results]
        assert {out.strip() for out, _ in results} == {b"wal"}
