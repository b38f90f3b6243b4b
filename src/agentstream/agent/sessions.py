"""Agent sessions kept in an embedded SQLite store, so ``--resume``/``--continue`` can go on later.

One row per session; the conversation is an opaque JSON list the agent loop owns.
The database runs in WAL mode with a generous busy timeout and every write in
``BEGIN IMMEDIATE``, so several ``agentstream exec`` processes can save at once
while ``agentstream sessions`` reads.
"""

from __future__ import annotations

import builtins
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec

from agentstream._paths import state_dir
from agentstream._sqlite import use_wal
from agentstream.errors import AgentstreamError, ErrorCode, UsageError
from agentstream.protocol import now_ts

if TYPE_CHECKING:
    import sqlite3

    from agentstream._secrets import Redactor

__all__ = ["SessionRecord", "SessionStore", "shorten_title"]

"""``error.code`` when the store itself cannot be used (corrupt file, unwritable directory)."""

_SCHEMA_VERSION: Final = 1
_BUSY_TIMEOUT_S: Final = 30.0
_TITLE_CHARS: Final = 80
_MIN_PREFIX: Final = 4
_COLUMNS: Final = "session_id, created_at, updated_at, cwd, provider, model, title, status, turn_count, usage, message_count"


def shorten_title(prompt: str, width: int = _TITLE_CHARS) -> str:
    """The first user prompt on one line, cut to ``width`` characters."""
    line = " ".join(prompt.split())
    return line if len(line) <= width else line[: width - 1].rstrip() + "…"


@dataclass
class SessionRecord:
    """One stored session. ``messages`` is the provider-neutral conversation, JSON-serialisable."""

    session_id: str
    created_at: str
    updated_at: str
    cwd: str
    provider: str
    model: str
    title: str
    status: str
    """``running``, ``completed``, ``failed``, ``interrupted``…"""
    turn_count: int = 0
    messages: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    message_count: int = 0
    """Filled by the store (``len(messages)`` at the last save), so listings need not load messages."""

    @classmethod
    def new(cls, *, session_id: str, cwd: str, provider: str, model: str, prompt: str) -> SessionRecord:
        """A fresh ``running`` record for a run that starts with ``prompt``."""
        now = now_ts()
        return cls(session_id, now, now, cwd, provider, model, shorten_title(prompt), "running")

    def summary(self) -> dict[str, Any]:
        """Everything but the messages, for listings."""
        return {
            "session_id": self.session_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "cwd": self.cwd,
            "provider": self.provider,
            "model": self.model,
            "title": self.title,
            "status": self.status,
            "turn_count": self.turn_count,
            "message_count": self.message_count,
            "usage": self.usage,
        }


class SessionStore:
    """Sessions in ``path`` (default ``state_dir()/sessions.sqlite3``; ``AGENTSTREAM_HOME`` moves it)."""

    def __init__(self, path: Path | None = None) -> None:
        try:
            self.path = Path(path) if path is not None else state_dir() / "sessions.sqlite3"
        except OSError as exc:
            raise _store_error(Path(str(exc.filename)), exc) from None
        self._ready = False

    def save(self, record: SessionRecord) -> None:
        """Insert or update ``record``; stamps ``updated_at`` (and ``created_at`` if empty)."""
        record.updated_at = now_ts()
        record.created_at = record.created_at or record.updated_at
        record.message_count = len(record.messages)
        redact = _redactor()
        try:
            messages = msgspec.json.encode(redact.value(record.messages))
            usage = msgspec.json.encode(record.usage)
        except (TypeError, msgspec.EncodeError) as exc:
            raise AgentstreamError(f"session {record.session_id} is not JSON-serialisable: {exc}") from None
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            db.execute(
                "INSERT INTO sessions (session_id, created_at, updated_at, updated_ns, cwd, provider, model,"
                " title, status, turn_count, usage, message_count, messages)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (session_id) DO UPDATE SET updated_at = excluded.updated_at,"
                " updated_ns = excluded.updated_ns, cwd = excluded.cwd, provider = excluded.provider,"
                " model = excluded.model, title = excluded.title, status = excluded.status,"
                " turn_count = excluded.turn_count, usage = excluded.usage,"
                " message_count = excluded.message_count, messages = excluded.messages",
                (
                    record.session_id,
                    record.created_at,
                    record.updated_at,
                    time.time_ns(),
                    record.cwd,
                    record.provider,
                    record.model,
                    redact(record.title),
                    record.status,
                    record.turn_count,
                    usage.decode(),
                    record.message_count,
                    messages.decode(),
                ),
            )
            db.execute("COMMIT")

    def load(self, session_id: str) -> SessionRecord:
        """The session with this id, or with this unique id prefix (at least 4 characters)."""
        with self._db() as db:
            rows = db.execute(
                f"SELECT {_COLUMNS}, messages FROM sessions WHERE session_id = ?", (session_id,)
            )
            found = rows.fetchall()
            if not found and len(session_id) >= _MIN_PREFIX:
                found = db.execute(
                    f"SELECT {_COLUMNS}, messages FROM sessions WHERE substr(session_id, 1, ?) = ? LIMIT 2",
                    (len(session_id), session_id),
                ).fetchall()
        if len(found) > 1:
            raise UsageError(
                f"{session_id!r} is the start of more than one session id",
                fix="give more of the id; 'agentstream sessions' lists them",
            )
        if not found:
            raise AgentstreamError(
                f"no session {session_id!r} in {self.path}",
                code=ErrorCode.SESSION_NOT_FOUND,
                fix="'agentstream sessions' lists them; --continue picks the latest",
            )
        return _record(found[0])

    def latest(self, cwd: str | None = None) -> SessionRecord | None:
        """The most recently saved session (in ``cwd``, if given), for ``--continue``."""
        where, params = ("WHERE cwd = ?", (cwd,)) if cwd is not None else ("", ())
        with self._db() as db:
            row = db.execute(
                f"SELECT {_COLUMNS}, messages FROM sessions {where} ORDER BY updated_ns DESC LIMIT 1", params
            ).fetchone()
        return _record(row) if row else None

    def list(self, limit: int = 20, *, with_messages: bool = True) -> builtins.list[SessionRecord]:
        """The ``limit`` most recently saved sessions, newest first.

        With ``with_messages=False`` the records carry no messages (``message_count``
        still says how many); do not save such a record back.
        """
        messages = "messages" if with_messages else "'[]'"
        with self._db() as db:
            rows = db.execute(
                f"SELECT {_COLUMNS}, {messages} FROM sessions ORDER BY updated_ns DESC LIMIT ?", (limit,)
            ).fetchall()
        return [_record(row) for row in rows]

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        """A connection for one operation; SQLite errors become an error with a fix."""
        import sqlite3

        try:
            db = self._connect(sqlite3)
            try:
                yield db
            finally:
                if db.in_transaction:
                    db.rollback()
                db.close()
        except (sqlite3.Error, OSError) as exc:
            raise _store_error(self.path, exc) from None

    def _connect(self, driver: Any) -> sqlite3.Connection:
        if not self._ready:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
        db: sqlite3.Connection = driver.connect(self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
        if not self._ready:
            try:
                _initialise(db)
            except BaseException:
                db.close()
                raise
            self._ready = True
        return db


def _redactor() -> Redactor:
    """Every save passes here: the configured secrets never reach the store's file."""
    from agentstream._secrets import configured_redactor

    return configured_redactor()


def _store_error(path: Path, exc: Exception) -> AgentstreamError:
    return AgentstreamError(
        f"the session store {path} cannot be used: {exc}",
        code=ErrorCode.SESSION_STORE_ERROR,
        fix="check that the file and its directory are writable, or set AGENTSTREAM_HOME to use another store",
    )


def _initialise(db: sqlite3.Connection) -> None:
    use_wal(db)
    db.execute("BEGIN IMMEDIATE")
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > _SCHEMA_VERSION:
        db.execute("ROLLBACK")
        raise AgentstreamError(
            f"the session store was written by a newer agentstream (schema {version})",
            code=ErrorCode.SESSION_STORE_ERROR,
            fix="upgrade agentstream, or set AGENTSTREAM_HOME to use another store",
        )
    db.execute(
        "CREATE TABLE IF NOT EXISTS sessions (session_id TEXT PRIMARY KEY, created_at TEXT NOT NULL,"
        " updated_at TEXT NOT NULL, updated_ns INTEGER NOT NULL, cwd TEXT NOT NULL, provider TEXT NOT NULL,"
        " model TEXT NOT NULL, title TEXT NOT NULL, status TEXT NOT NULL, turn_count INTEGER NOT NULL,"
        " usage TEXT NOT NULL, message_count INTEGER NOT NULL, messages TEXT NOT NULL)"
    )
    db.execute("CREATE INDEX IF NOT EXISTS sessions_by_time ON sessions (updated_ns)")
    db.execute("CREATE INDEX IF NOT EXISTS sessions_by_cwd ON sessions (cwd, updated_ns)")
    db.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
    db.execute("COMMIT")


def _record(row: tuple[Any, ...]) -> SessionRecord:
    (session_id, created, updated, cwd, provider, model, title, status, turns, usage, count, messages) = row
    return SessionRecord(
        session_id,
        created,
        updated,
        cwd,
        provider,
        model,
        title,
        status,
        turns,
        msgspec.json.decode(messages),
        msgspec.json.decode(usage),
        count,
    )
