"""The session store and ``agentstream sessions``."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentstream.agent.sessions import SessionRecord, SessionStore, shorten_title
from agentstream.cli import main
from agentstream.errors import AgentstreamError, ErrorCode, UsageError


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    monkeypatch.setenv("AGENTSTREAM_HOME", str(path))
    return path


def _record(session_id: str, *, cwd: str = "/work", prompt: str = "do the thing") -> SessionRecord:
    return SessionRecord.new(
        session_id=session_id, cwd=cwd, provider="openai", model="gpt-4o-mini", prompt=prompt
    )


def test_round_trip(home: Path) -> None:
    store = SessionStore()
    record = _record("sess_roundtrip01")
    record.messages = [
        {"role": "user", "content": "hi ✓"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "shell", "arguments": {"n": 1}}],
        },
        {"role": "tool", "call_id": "c1", "name": "shell", "content": "ok", "is_error": False},
    ]
    record.usage = {"input_tokens": 12, "output_tokens": 3, "cost_usd": 0.5}
    record.turn_count = 2
    store.save(record)
    loaded = SessionStore().load("sess_roundtrip01")
    assert loaded == record
    assert loaded.message_count == 3
    assert store.path == home / "sessions.sqlite3"


def test_save_upserts_and_keeps_created_at() -> None:
    store = SessionStore()
    record = _record("sess_upsert")
    store.save(record)
    created, first_update = record.created_at, record.updated_at
    record.status, record.turn_count = "completed", 4
    record.messages.append({"role": "user", "content": "more"})
    store.save(record)
    loaded = store.load("sess_upsert")
    assert (loaded.status, loaded.turn_count, loaded.created_at) == ("completed", 4, created)
    assert loaded.updated_at >= first_update
    assert len(store.list()) == 1


def test_store_file_is_private_and_in_wal_mode(home: Path) -> None:
    store = SessionStore()
    store.save(_record("sess_mode"))
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    with sqlite3.connect(store.path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_explicit_path(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "elsewhere" / "s.db")
    store.save(_record("sess_elsewhere"))
    assert (tmp_path / "elsewhere" / "s.db").exists()
    assert SessionStore(tmp_path / "elsewhere" / "s.db").load("sess_elsewhere").session_id == "sess_elsewhere"


def test_load_missing_says_how_to_find_sessions() -> None:
    with pytest.raises(AgentstreamError) as info:
        SessionStore().load("sess_nope")
    assert info.value.code == ErrorCode.SESSION_NOT_FOUND
    assert "agentstream sessions" in (info.value.fix or "")


def test_load_by_unique_prefix() -> None:
    store = SessionStore()
    for session_id in ("sess_aaaa1111", "sess_aaaa2222", "sess_bbbb3333"):
        store.save(_record(session_id))
    assert store.load("sess_b").session_id == "sess_bbbb3333"
    with pytest.raises(UsageError) as info:
        store.load("sess_aaaa")
    assert "more than one" in info.value.message
    with pytest.raises(AgentstreamError):
        store.load("ses")  # too short to be a prefix


def test_latest_and_list_order() -> None:
    store = SessionStore()
    assert store.latest() is None
    older, newer = _record("sess_older", cwd="/a"), _record("sess_newer", cwd="/b")
    store.save(older)
    store.save(newer)
    assert store.latest().session_id == "sess_newer"  # type: ignore[union-attr]
    assert store.latest(cwd="/a").session_id == "sess_older"  # type: ignore[union-attr]
    assert store.latest(cwd="/nowhere") is None
    store.save(older)  # touching a session makes it the latest
    assert store.latest().session_id == "sess_older"  # type: ignore[union-attr]
    assert [r.session_id for r in store.list()] == ["sess_older", "sess_newer"]
    assert [r.session_id for r in store.list(limit=1)] == ["sess_older"]


def test_list_without_messages_keeps_the_count() -> None:
    store = SessionStore()
    record = _record("sess_count")
    record.messages = [{"role": "user", "content": str(i)} for i in range(5)]
    store.save(record)
    (listed,) = store.list(with_messages=False)
    assert listed.messages == [] and listed.message_count == 5


def test_unserialisable_messages_are_refused() -> None:
    record = _record("sess_bad")
    record.messages = [{"role": "user", "content": object()}]
    with pytest.raises(AgentstreamError) as info:
        SessionStore().save(record)
    assert "JSON-serialisable" in info.value.message


def test_corrupt_store_is_a_clear_error(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "sessions.sqlite3").write_bytes(b"this is not a database" * 100)
    with pytest.raises(AgentstreamError) as info:
        SessionStore().list()
    assert info.value.code == ErrorCode.SESSION_STORE_ERROR and "AGENTSTREAM_HOME" in (info.value.fix or "")


def test_store_from_a_newer_version_is_refused(home: Path) -> None:
    store = SessionStore()
    store.save(_record("sess_v"))
    with sqlite3.connect(store.path) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(AgentstreamError) as info:
        SessionStore().list()
    assert "newer agentstream" in info.value.message


def test_title_is_one_short_line() -> None:
    assert shorten_title("  fix\n the   bug ") == "fix the bug"
    long = shorten_title("word " * 40)
    assert len(long) == 80 and long.endswith("…")


_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from agentstream.agent.sessions import SessionRecord, SessionStore
    name, go = sys.argv[1], Path(sys.argv[2])
    while not go.exists():
        time.sleep(0.005)
    store = SessionStore()
    for i in range(40):
        record = SessionRecord.new(session_id=f"sess_{name}_{i}", cwd="/w", provider="p", model="m", prompt=name)
        record.messages = [{"role": "user", "content": name * 200}] * (i + 1)
        store.save(record)
        shared = SessionRecord.new(session_id="sess_shared", cwd="/w", provider="p", model="m", prompt=name)
        shared.turn_count = i
        store.save(shared)
        store.list(5)
    """
)


def test_two_processes_write_at_once(tmp_path: Path) -> None:
    go = tmp_path / "go"
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, name, str(go)], stderr=subprocess.PIPE)
        for name in "ab"
    ]
    go.write_text("")
    for writer in writers:
        _, err = writer.communicate(timeout=60)
        assert writer.returncode == 0, err.decode()
    store = SessionStore()
    records = store.list(limit=1000)
    assert len(records) == 81
    for name in "ab":
        for i in range(40):
            loaded = store.load(f"sess_{name}_{i}")
            assert loaded.messages == [{"role": "user", "content": name * 200}] * (i + 1)
    assert store.load("sess_shared").turn_count == 39


# --- agentstream sessions ------------------------------------------------------------------------


def _run_cli(capsys: pytest.CaptureFixture[str], *argv: str, tty: bool = True) -> tuple[int, str, str]:
    """``sessions`` in process; ``tty`` makes stdout look like a terminal (the table), else a pipe."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys.stdout, "isatty", lambda: tty)
        code = main(["sessions", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_json_envelope(capsys: pytest.CaptureFixture[str]) -> None:
    store = SessionStore()
    for session_id in ("sess_one", "sess_two"):
        store.save(_record(session_id, prompt=f"prompt of {session_id}"))
    code, out, _ = _run_cli(capsys, "--json")
    assert code == 0
    envelope = json.loads(out)
    assert envelope["ok"] is True and envelope["command"] == "agentstream sessions --limit 20 --json"
    sessions = envelope["result"]["sessions"]
    assert [s["session_id"] for s in sessions] == ["sess_two", "sess_one"]
    assert sessions[0]["title"] == "prompt of sess_two" and "messages" not in sessions[0]
    assert all(action["command"] and action["description"] for action in envelope["next_actions"])
    resume = envelope["next_actions"][0]
    assert resume["command"] == "agentstream exec --resume <session_id> <prompt>"
    assert resume["params"]["session_id"]["value"] == "sess_two"
    assert {"session_id", "prompt"} == set(resume["params"])


def test_cli_json_when_empty_and_when_limited(capsys: pytest.CaptureFixture[str]) -> None:
    envelope = json.loads(_run_cli(capsys, "--json")[1])
    assert envelope["result"]["sessions"] == []
    assert [a["command"] for a in envelope["next_actions"]] == ["agentstream exec <prompt>"]
    store = SessionStore()
    store.save(_record("sess_x"))
    store.save(_record("sess_y"))
    limited = json.loads(_run_cli(capsys, "--json", "--limit", "1")[1])
    assert len(limited["result"]["sessions"]) == 1
    assert limited["next_actions"][-1]["command"] == "agentstream sessions --limit <n> --json"


def test_cli_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        "No sessions"
        in _run_cli(
            capsys,
        )[1]
    )
    SessionStore().save(_record("sess_0123456789abcdef0123", prompt="refactor the parser"))
    code, out, err = _run_cli(capsys)
    header, row = out.splitlines()
    assert code == 0 and header.startswith("SESSION") and header.endswith("TITLE")
    assert row.startswith("sess_0123456789abcdef0123 ") and row.endswith("refactor the parser")
    assert "--resume" in err


def test_cli_failure_envelope_and_usage(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "sessions.sqlite3").write_bytes(b"garbage" * 500)
    code, out, _ = _run_cli(capsys, "--json")
    envelope = json.loads(out)
    assert code == 1 and envelope["ok"] is False
    assert envelope["error"]["code"] == ErrorCode.SESSION_STORE_ERROR and envelope["fix"]
    code, out, err = _run_cli(capsys)
    assert code == 1 and out == "" and ErrorCode.SESSION_STORE_ERROR in err
    assert main(["sessions", "--limit", "0"]) == 2  # a usage error: nothing ran


def test_cli_as_a_real_process(home: Path) -> None:
    SessionStore().save(_record("sess_proc"))
    done = subprocess.run(
        [sys.executable, "-m", "agentstream", "sessions", "--json"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["sessions"][0]["session_id"] == "sess_proc"
