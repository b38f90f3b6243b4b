"""What every SQLite store of agentstream (sessions, the embedded bus) does on opening a file."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite3

_WAL_ATTEMPTS = 50
_WAL_PAUSE_S = 0.02


def use_wal(db: sqlite3.Connection) -> None:
    """Switch ``db`` to write-ahead logging, so readers and writers in other processes never block each other.

    Two processes switching a new database at the same moment make one of them
    fail at once with "database is locked", whatever the busy timeout; the
    switch is retried for up to a second, after which the error stands.
    """
    import sqlite3  # here, not at the top: importing this module must stay free for start-up

    for attempt in range(_WAL_ATTEMPTS):
        try:
            db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == _WAL_ATTEMPTS - 1:
                raise
            time.sleep(_WAL_PAUSE_S)
