"""The embedded bus: one SQLite file in WAL mode, shared by every process on the machine.

Writers take the write lock up front (``BEGIN IMMEDIATE``) and wait for each other
through ``busy_timeout``, so concurrent producers never lose an append; the
unique key ``(run_id, seq)`` makes a repeated append a no-op. Readers never block
writers (WAL). A live tail polls ``PRAGMA data_version`` — a counter in shared
memory that moves when another connection commits, so a poll costs microseconds —
starting at 1 ms after news and backing off to 25 ms when idle; that bounds the
added latency of a follower by 25 ms.
"""

from __future__ import annotations

import errno
import itertools
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, TypeVar
from urllib.parse import unquote, urlsplit

import msgspec

from agentstream._sqlite import use_wal
from agentstream.bus import (
    BOUND_LINE_BYTES,
    DEFAULT_BUS_FILE,
    DEFAULT_RETENTION_S,
    TERMINAL_STATUSES,
    Bus,
    BusBusy,
    BusUnavailable,
    BusUnusable,
    Claim,
    FeedItem,
    Job,
    ProducerConflict,
    Record,
    RunInfo,
    RunUpdate,
    SeqConflict,
    prune_due,
    run_update,
)
from agentstream.errors import UsageError

__all__ = ["SqliteBus", "bus_error", "open_sqlite", "sqlite_path"]

T = TypeVar("T")

BUSY_TIMEOUT_MS: Final = 15000
POLL_MIN_S: Final = 0.001
POLL_MAX_S: Final = 0.025

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,  -- the all-runs feed cursor
    run_id  TEXT    NOT NULL,
    seq     INTEGER NOT NULL,
    type    TEXT    NOT NULL,
    ts      REAL    NOT NULL,
    line    BLOB    NOT NULL,
    UNIQUE (run_id, seq)
);
CREATE TABLE IF NOT EXISTS runs (
    run_id    TEXT PRIMARY KEY,
    status    TEXT NOT NULL,
    command   TEXT NOT NULL DEFAULT '',
    created   REAL NOT NULL,
    updated   REAL NOT NULL,
    last_seq  INTEGER NOT NULL DEFAULT -1,
    exit_code INTEGER,
    subtype   TEXT,
    job_id    TEXT,
    attempt   INTEGER,
    alive     REAL NOT NULL DEFAULT 0,
    producer  TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_updated ON runs (updated);
CREATE TABLE IF NOT EXISTS jobs (
    job_id    TEXT PRIMARY KEY,
    run_id    TEXT NOT NULL,
    prompt    TEXT NOT NULL,
    args      TEXT NOT NULL,
    status    TEXT NOT NULL,
    attempt   INTEGER NOT NULL DEFAULT 0,
    worker    TEXT,
    heartbeat REAL,
    created   REAL NOT NULL,
    updated   REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status, created);
"""

_RUN_COLUMNS: Final = (
    "run_id, status, command, created, updated, last_seq, exit_code, subtype, job_id, attempt, alive"
)
_JOB_COLUMNS: Final = "job_id, run_id, prompt, args, status, attempt, worker, created, updated"


def sqlite_path(url: str) -> Path:
    """``sqlite:///abs/path`` → that path; ``sqlite://`` → the default file in the state directory."""
    parts = urlsplit(url)
    if parts.netloc:
        raise UsageError(
            f"bad SQLite bus URL {url!r}: a host is not allowed",
            fix="use three slashes and an absolute path: sqlite:///home/me/bus.sqlite3",
        )
    path = unquote(parts.path)
    if not path:
        from agentstream._paths import state_dir

        return state_dir() / DEFAULT_BUS_FILE
    return Path(os.path.expanduser(path))


def open_sqlite(url: str, *, retention: float, maxlen: int | None, connect_timeout: float) -> SqliteBus:
    """The ``sqlite`` backend's factory. A run is kept whole, so ``maxlen`` (a Redis stream cap) is unused,
    and a local file has no connection to time out."""
    return SqliteBus(url, retention=retention)


class SqliteBus(Bus):
    """The SQLite backend. One connection per instance; use one instance per thread."""

    def __init__(self, url: str, *, retention: float = DEFAULT_RETENTION_S) -> None:
        self.url = url
        self.path = sqlite_path(url)
        self.retention = retention
        self._poll = POLL_MIN_S
        self._last_prune = 0.0
        self._db = self._connect()

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
            db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            use_wal(db)
            db.execute("PRAGMA synchronous = NORMAL")
            db.executescript(_SCHEMA)
            _add_columns(db)
            return db
        except (OSError, sqlite3.Error) as exc:
            raise bus_error(exc, self.path) from exc

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, holding the write lock from its start."""
        with _translated(self.path):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        with _translated(self.path):
            return self._db.execute(sql, params).fetchall()

    # -- runs ------------------------------------------------------------------

    def append(self, run_id: str, records: Sequence[Record], *, if_next_seq: int | None = None) -> int:
        return self._append(run_id, records, if_next_seq, None)

    def append_from(self, producer: str, run_id: str, records: Sequence[Record]) -> int:
        return self._append(run_id, records, None, producer)

    def _append(
        self, run_id: str, records: Sequence[Record], if_next_seq: int | None, producer: str | None
    ) -> int:
        if not records:
            return 0
        update = run_update(records)
        now = time.time()
        with self._write() as db:
            row = db.execute(
                "SELECT status, last_seq, producer FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            last_seq = row[1] if row else -1
            if if_next_seq is not None and last_seq + 1 != if_next_seq:
                raise SeqConflict(f"run {run_id} is at seq {last_seq + 1}, not {if_next_seq}")
            if producer is not None and row and row[2] is not None and row[2] != producer:
                raise ProducerConflict(run_id)
            if row and row[0] in TERMINAL_STATUSES:
                return 0
            before = db.total_changes
            for short, run in itertools.groupby(
                records, key=lambda record: len(record.line) <= BOUND_LINE_BYTES
            ):
                if short:
                    db.executemany(_INSERT_EVENT, [(run_id, r.seq, r.type, now, r.line) for r in run])
                else:
                    for record in run:
                        _insert_long_event(db, run_id, record, now)
            added = db.total_changes - before
            top = max(last_seq, max(r.seq for r in records))
            self._upsert_run(db, run_id, row is not None, update, top, now, producer)
        if update.status in TERMINAL_STATUSES:
            self._maybe_prune(now)
        return added

    @staticmethod
    def _upsert_run(
        db: sqlite3.Connection,
        run_id: str,
        exists: bool,
        update: RunUpdate,
        top: int,
        now: float,
        producer: str | None,
    ) -> None:
        status, command, exit_code, subtype = update
        if not exists:
            db.execute(
                "INSERT INTO runs (run_id, status, command, created, updated, last_seq, exit_code, subtype,"
                " alive, producer) VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6, ?7, ?4, ?8)",
                (run_id, status or "running", command or "", now, top, exit_code, subtype, producer),
            )
            return
        db.execute(
            "UPDATE runs SET status = CASE WHEN ?1 IS NOT NULL THEN ?1"
            " WHEN status = 'queued' THEN 'running' ELSE status END,"
            " command = coalesce(?2, command), exit_code = coalesce(?3, exit_code),"
            " subtype = coalesce(?4, subtype), last_seq = ?5, updated = ?6, alive = ?6,"
            " producer = coalesce(producer, ?8) WHERE run_id = ?7",
            (status, command, exit_code, subtype, top, now, run_id, producer),
        )

    def touch(self, run_id: str) -> None:
        with self._write() as db:
            db.execute(
                "UPDATE runs SET alive = ? WHERE run_id = ? AND status = 'running'", (time.time(), run_id)
            )

    def _maybe_prune(self, now: float) -> None:
        """Delete runs whose last event, and finished jobs whose end, is older than the retention."""
        if not prune_due(self._last_prune, now, self.retention):
            return
        self._last_prune = now
        cutoff = now - self.retention
        with self._write() as db:
            db.execute(
                "DELETE FROM events WHERE run_id IN (SELECT run_id FROM runs WHERE updated < ?)", (cutoff,)
            )
            db.execute("DELETE FROM runs WHERE updated < ?", (cutoff,))
            db.execute("DELETE FROM jobs WHERE status IN ('succeeded', 'failed') AND updated < ?", (cutoff,))

    def read(
        self, run_id: str, from_seq: int = 0, *, limit: int = 1000, block: float | None = None
    ) -> list[Record]:
        def fetch() -> list[Record]:
            rows = self._query(
                "SELECT seq, type, line FROM events WHERE run_id = ? AND seq >= ? ORDER BY seq LIMIT ?",
                (run_id, from_seq, limit),
            )
            return [Record(seq, kind, bytes(line)) for seq, kind, line in rows]

        return self._wait_for(fetch, block)

    def _wait_for(self, fetch: Callable[[], list[T]], block: float | None) -> list[T]:
        """``fetch()`` now; if empty and ``block``, again each time another connection commits."""
        if not block:
            return fetch()
        version = self._data_version()  # before fetching, so a commit in between is not missed
        found = fetch()
        if found:
            return found
        deadline = time.monotonic() + block
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            time.sleep(min(self._poll, remaining))
            self._poll = min(self._poll * 2, POLL_MAX_S)
            current = self._data_version()
            if current == version:
                continue
            version = current
            found = fetch()
            if found:
                self._poll = POLL_MIN_S
                return found

    def _data_version(self) -> int:
        return int(self._query("PRAGMA data_version")[0][0])

    def get_run(self, run_id: str) -> RunInfo | None:
        rows = self._query(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,))
        return _run_info(rows[0]) if rows else None

    def list_runs(self, *, statuses: Sequence[str] = (), limit: int = 50) -> list[RunInfo]:
        where = f"WHERE status IN ({', '.join('?' * len(statuses))})" if statuses else ""
        rows = self._query(
            f"SELECT {_RUN_COLUMNS} FROM runs {where} ORDER BY created DESC LIMIT ?", (*statuses, limit)
        )
        return [_run_info(row) for row in rows]

    def register_run(
        self, run_id: str, *, command: str, job_id: str | None = None, attempt: int | None = None
    ) -> None:
        now = time.time()
        with self._write() as db:
            db.execute(
                "INSERT INTO runs (run_id, status, command, created, updated, job_id, attempt)"
                " VALUES (?, 'queued', ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET"
                " job_id = coalesce(excluded.job_id, job_id), attempt = coalesce(excluded.attempt, attempt),"
                " command = CASE WHEN command = '' THEN excluded.command ELSE command END",
                (run_id, command, now, now, job_id, attempt),
            )

    # -- feed ------------------------------------------------------------------

    def feed_end(self) -> str:
        return str(self._query("SELECT coalesce(max(id), 0) FROM events")[0][0])

    def read_feed(self, cursor: str, *, limit: int = 1000, block: float | None = None) -> list[FeedItem]:
        after = _feed_position(cursor)

        def fetch() -> list[FeedItem]:
            rows = self._query(
                "SELECT id, run_id, seq, type, line FROM events WHERE id > ? ORDER BY id LIMIT ?",
                (after, limit),
            )
            return [FeedItem(str(i), run, Record(seq, kind, bytes(line))) for i, run, seq, kind, line in rows]

        return self._wait_for(fetch, block)

    # -- jobs ------------------------------------------------------------------

    def enqueue(self, job: Job) -> None:
        now = time.time()
        with self._write() as db:
            db.execute(
                f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES (?, ?, ?, ?, 'queued', 0, NULL, ?, ?)",
                (job.job_id, job.run_id, job.prompt, msgspec.json.encode(job.args).decode(), now, now),
            )

    def claim(self, worker: str, *, idle_timeout: float, block: float = 0.0) -> Claim | None:
        def attempt() -> list[Claim]:
            found = self._claim_once(worker, idle_timeout)
            return [found] if found else []

        found = self._wait_for(attempt, block)
        return found[0] if found else None

    def _claim_once(self, worker: str, idle_timeout: float) -> Claim | None:
        now = time.time()
        claimable = "status = 'queued' OR (status = 'running' AND heartbeat < ?)"
        if not self._query(f"SELECT 1 FROM jobs WHERE {claimable} LIMIT 1", (now - idle_timeout,)):
            return None  # a read, so idle workers polling on every commit never take the write lock
        with self._write() as db:
            row = db.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE status = 'running' AND heartbeat < ?"
                " ORDER BY heartbeat LIMIT 1",
                (now - idle_timeout,),
            ).fetchone()
            if row is None:
                row = db.execute(
                    f"SELECT {_JOB_COLUMNS} FROM jobs WHERE status = 'queued' ORDER BY created LIMIT 1"
                ).fetchone()
            if row is None:
                return None
            job = _job(row)
            queued = job.status == "queued"
            if queued:  # a queued job's first attempt is counted as it is taken; a takeover counts none
                job.attempt = 1
            db.execute(
                "UPDATE jobs SET status = 'running', attempt = ?, worker = ?, heartbeat = ?, updated = ?"
                " WHERE job_id = ?",
                (job.attempt, worker, now, now, job.job_id),
            )
        job.status, job.worker = "running", worker
        return Claim.first(job, worker) if queued else Claim.takeover(job, worker)

    def heartbeat(self, claim: Claim) -> bool:
        return self._update_owned(claim, "heartbeat = ?", (time.time(),))

    def retry_job(self, claim: Claim) -> Claim | None:
        now = time.time()
        counted = self._update_owned(claim, "attempt = attempt + 1, heartbeat = ?, updated = ?", (now, now))
        return claim.next_attempt() if counted else None

    def finish_job(self, claim: Claim, status: str) -> bool:
        return self._update_owned(claim, "status = ?, updated = ?", (status, time.time()))

    def _update_owned(self, claim: Claim, assignments: str, values: tuple[object, ...]) -> bool:
        """Update the job only while this claim still owns it (same worker, same attempt, running)."""
        with self._write() as db:
            cursor = db.execute(
                f"UPDATE jobs SET {assignments} WHERE job_id = ? AND worker = ? AND attempt = ?"
                " AND status = 'running'",
                (*values, claim.job.job_id, claim.token, claim.attempt),
            )
            return cursor.rowcount == 1

    def get_job(self, job_id: str) -> Job | None:
        rows = self._query(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE job_id = ?", (job_id,))
        return _job(rows[0]) if rows else None


@contextmanager
def _translated(path: Path) -> Iterator[None]:
    """Turn what SQLite says of the bus file (locked past the timeout, disk full, not a database) into
    :func:`bus_error`'s errors; errors of the statements themselves (a constraint, a bug) pass unchanged."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if type(exc) not in (sqlite3.DatabaseError, sqlite3.OperationalError):
            raise
        raise bus_error(exc, path) from exc


_NOT_A_BUS: Final = frozenset({sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT})
_NOT_WRITABLE: Final = frozenset({sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_AUTH})
_NO_FILE_ERRNOS: Final = frozenset(
    {errno.EACCES, errno.EPERM, errno.EROFS, errno.EEXIST, errno.ENOTDIR, errno.EISDIR}
)
"""Errors of making the bus file's directory that no retry mends (as against a full disk, say)."""


def bus_error(exc: sqlite3.Error | OSError, path: Path) -> BusUnavailable:
    """What went wrong with the bus file, said so that it can be acted on.

    A lock held elsewhere is :class:`BusBusy` (waited out); a file that cannot work as it is (not a
    database, not writable, a directory, or in a place no file can be made) is :class:`BusUnusable`, given up
    at once with what to change; anything else (a full disk, an I/O error) is an outage, retried.
    """
    if isinstance(exc, OSError):
        if exc.errno in _NO_FILE_ERRNOS:
            return BusUnusable(f"cannot make the SQLite bus at {path}: {exc}", fix=_ELSEWHERE)
        return BusUnavailable(f"cannot open the SQLite bus at {path}: {exc}", fix=_OUTAGE_FIX)
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF  # the primary code of an extended one
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return BusBusy(
            f"the SQLite bus is locked by another process past {BUSY_TIMEOUT_MS // 1000}s: {exc}",
            fix="find what holds the bus file open in a long transaction (fuser, lsof) and end it",
        )
    if code in _NOT_A_BUS:
        return BusUnusable(
            f"{path} is not an SQLite bus (SQLite says: {exc})",
            fix="point --bus / $AGENTSTREAM_BUS at the bus file, or move this file aside so a new bus is made there",
        )
    if code in _NOT_WRITABLE:
        return BusUnusable(
            f"the SQLite bus at {path} cannot be written by this process (SQLite says: {exc})",
            fix="let this user write the file and its directory (SQLite adds -wal and -shm files beside it),"
            f" or {_ELSEWHERE}",
        )
    if code == sqlite3.SQLITE_CANTOPEN:
        return BusUnusable(
            f"cannot open the SQLite bus at {path}: it is a directory, or in one this process cannot write"
            f" (SQLite says: {exc})",
            fix=_ELSEWHERE,
        )
    return BusUnavailable(f"the SQLite bus at {path} failed: {exc}", fix=_OUTAGE_FIX)


_ELSEWHERE: Final = "choose a file in a directory this user can write: --bus sqlite:///ABSOLUTE/PATH.sqlite3"
_OUTAGE_FIX: Final = "check disk space and permissions of the bus file"


def _feed_position(cursor: str) -> int:
    try:
        return int(cursor)
    except ValueError:
        raise UsageError(
            f"bad feed cursor {cursor!r} for the SQLite bus", fix="pass a cursor printed by this bus, or 0"
        ) from None


def _run_info(row: tuple[Any, ...]) -> RunInfo:
    run_id, status, command, created, updated, last_seq, exit_code, subtype, job_id, attempt, alive = row
    return RunInfo(
        run_id=run_id,
        status=status,
        command=command,
        created=created,
        updated=updated,
        last_seq=last_seq,
        exit_code=exit_code,
        subtype=subtype,
        job_id=job_id,
        attempt=attempt,
        alive=alive,
    )


_ADDED_COLUMNS: Final = {"alive": "REAL NOT NULL DEFAULT 0", "producer": "TEXT"}
"""Columns of ``runs`` newer than the first bus files, with their declarations."""


def _add_columns(db: sqlite3.Connection) -> None:
    """Give a bus file made before runs had an ``alive`` time or a ``producer`` those columns (another process
    may race us to them)."""
    present = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
    for name, declaration in _ADDED_COLUMNS.items():
        if name in present:
            continue
        try:
            db.execute(f"ALTER TABLE runs ADD COLUMN {name} {declaration}")
        except sqlite3.OperationalError as exc:
            if "duplicate column" not in str(exc):
                raise


def _job(row: tuple[Any, ...]) -> Job:
    job_id, run_id, prompt, args, status, attempt, worker, created, updated = row
    return Job(
        job_id=job_id,
        run_id=run_id,
        prompt=prompt,
        args=msgspec.json.decode(args),
        status=status,
        attempt=attempt,
        worker=worker,
        created=created,
        updated=updated,
    )


_INSERT_EVENT: Final = "INSERT OR IGNORE INTO events (run_id, seq, type, ts, line) VALUES (?, ?, ?, ?, ?)"


def _insert_long_event(db: sqlite3.Connection, run_id: str, record: Record, now: float) -> None:
    """Insert a row for a very long line, then write the line into it.

    A bound parameter is copied whole into SQLite's memory, next to the caller's copy (a 100 MB tool
    output held twice more); an incremental blob write goes through the page cache instead.
    """
    cursor = db.execute(
        "INSERT OR IGNORE INTO events (run_id, seq, type, ts, line) VALUES (?, ?, ?, ?, zeroblob(?))",
        (run_id, record.seq, record.type, now, len(record.line)),
    )
    row = cursor.lastrowid
    if cursor.rowcount == 1 and row is not None:  # not a repeat of a stored event
        with db.blobopen("events", "line", row) as blob:
            blob.write(record.line)
