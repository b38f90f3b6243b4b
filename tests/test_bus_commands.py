"""``runs``, ``send``, ``watch`` and ``logs`` in real processes."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import msgspec
import pytest

from _bus_fixtures import (  # noqa: F401
    RedisServer,
    bus_home,
    bus_url,
    cli,
    events,
    free_port,
    lines_of,
    redis_server,
    spawn_cli,
)
from agentstream import protocol as p
from agentstream.bus import Record, open_bus
from agentstream.envelope import fill

# -- runs ---------------------------------------------------------------------


def test_runs_lists_runs_as_one_envelope_with_fillable_next_actions(bus_url: str) -> None:
    with open_bus(bus_url) as bus:
        bus.append("done", events("done", 2, final=True))
        time.sleep(0.01)
        bus.append("busy", events("busy", 2))
    listed = cli("runs", "--bus", bus_url)
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == 1
    envelope = msgspec.json.decode(listed.stdout)
    assert envelope["ok"] is True and envelope["command"] == "agentstream runs"
    runs = envelope["result"]["runs"]
    assert [(r["run_id"], r["status"]) for r in runs] == [("busy", "running"), ("done", "succeeded")]
    assert runs[1]["exit_code"] == 0 and runs[0]["created"].endswith("Z")
    first = p.NextAction(**envelope["next_actions"][0])
    assert fill(first) == ["agentstream", "follow", "busy", "--from-seq", "0"]
    only = msgspec.json.decode(cli("runs", "--status", "succeeded", "--bus", bus_url).stdout)
    assert [r["run_id"] for r in only["result"]["runs"]] == ["done"]


def test_runs_creates_no_bus_where_none_was_recorded(bus_home: Path) -> None:
    """Listing reads: a SQLite bus that does not exist (a mistyped --bus, say) is said, not made."""
    where = bus_home / "typo" / "deeper" / "bus.sqlite3"
    done = cli("runs", "--bus", f"sqlite://{where}")
    assert done.returncode == 0 and msgspec.json.decode(done.stdout)["result"]["runs"] == []
    assert f"no bus at {where}".encode() in done.stderr
    assert not (bus_home / "typo").exists()


def test_runs_reports_an_unreachable_bus_with_code_and_fix(bus_home: Path) -> None:
    done = cli("runs", "--bus", f"redis://127.0.0.1:{free_port()}")
    envelope = msgspec.json.decode(done.stdout)
    assert done.returncode == 1 and envelope["ok"] is False and envelope["result"] is None
    assert envelope["error"]["code"] == "BUS_UNAVAILABLE" and "redis-server" in envelope["fix"]


@pytest.mark.parametrize(
    "form", ["redis://:{secret}@127.0.0.1:{port}/0", "redis://127.0.0.1:{port}/0?password={secret}"]
)
def test_a_bus_password_is_never_repeated_in_what_is_said(bus_home: Path, form: str) -> None:
    """In the URL's user part or its query (redis-py reads ``?password=`` too): neither stdout nor stderr has it."""
    url = form.format(secret="TOPSECRET", port=free_port())
    for argv in (["runs"], ["follow", "some-run", "--timeout", "1"]):
        done = cli(*argv, "--bus", url)
        assert done.returncode != 0
        assert b"TOPSECRET" not in done.stdout + done.stderr and b"***" in done.stdout + done.stderr


def test_runs_with_a_password_protected_redis(redis_server: RedisServer, bus_home: Path) -> None:
    import redis

    url = redis_server.url
    redis.Redis.from_url(url).config_set("requirepass", "s3cret")
    denied = msgspec.json.decode(cli("runs", "--bus", url).stdout)
    assert (
        denied["ok"] is False and denied["error"]["code"] == "INVALID_INPUT" and "PASSWORD" in denied["fix"]
    )
    allowed = cli("runs", "--bus", url.replace("redis://", "redis://:s3cret@"))
    assert msgspec.json.decode(allowed.stdout)["ok"] is True


# -- send ---------------------------------------------------------------------


def test_send_publishes_an_event_run_and_follow_prints_it(bus_url: str) -> None:
    sent = cli("send", "deploy/done", "--data", '{"version": 3}', "--bus", bus_url)
    envelope = msgspec.json.decode(sent.stdout)
    assert sent.returncode == 0 and envelope["ok"] and envelope["result"]["events"] == 3
    run_id = envelope["result"]["run_id"]
    with open_bus(bus_url) as bus:
        stored = [p.decode(r.line) for r in bus.read(run_id)]
    assert [e.type for e in stored] == ["start", "event", "result"]
    assert stored[1].name == "deploy/done" and stored[1].data == {"version": 3}  # type: ignore[union-attr]
    followed = cli("send", "ping", "--follow", "--bus", bus_url)
    objs = lines_of(followed.stdout)
    assert [o["type"] for o in objs] == ["start", "event", "result"] and followed.returncode == 0
    assert objs[-1]["next_actions"]


def test_send_with_bad_json_is_an_invalid_input_envelope(bus_home: Path) -> None:
    sent = cli("send", "x", "--data", "{not json")
    envelope = msgspec.json.decode(sent.stdout)
    assert (
        sent.returncode == 2 and envelope["error"]["code"] == "INVALID_INPUT" and "--data" in envelope["fix"]
    )
    with open_bus() as bus:
        assert bus.list_runs() == []  # nothing was published


# -- watch --------------------------------------------------------------------


def test_watch_taps_every_run_with_filters_and_a_resumable_cursor(bus_url: str) -> None:
    with open_bus(bus_url) as bus:
        bus.append("before", events("before", 2))
        cursor = bus.feed_end()  # watch from here: "before" is not shown
    watcher = spawn_cli(
        "watch",
        "--bus",
        bus_url,
        "--since",
        cursor,
        "--run",
        "app-*",
        "--type",
        "log",
        "--count",
        "3",
        "--timeout",
        "20",
    )
    with open_bus(bus_url) as bus:
        bus.append("app-1", events("app-1", 3))
        bus.append("other", events("other", 3))
        bus.append("app-2", events("app-2", 3))
    output, err = watcher.communicate(timeout=30)
    objs = lines_of(output)
    assert watcher.returncode == 0, err
    assert [(o["session_id"], o["seq"]) for o in objs[:-1]] == [("app-1", 1), ("app-1", 2), ("app-2", 1)]
    end = objs[-1]
    assert end["type"] == "result" and end["subtype"] == "watch_count" and end["synthetic"]
    resume = fill(p.NextAction(**end["next_actions"][0]))
    assert resume[:3] == ["agentstream", "watch", "--since"]
    rest = cli(*resume[1:], "--bus", bus_url, "--type", "log", "--timeout", "0.3")
    assert [(o["session_id"], o["seq"]) for o in lines_of(rest.stdout)[:-1]] == [("app-2", 2)]


def test_watch_from_start_and_by_event_name(bus_url: str) -> None:
    with open_bus(bus_url) as bus:
        for run_id, name in (("r1", "build/started"), ("r2", "deploy/started")):
            event = p.GenericEvent(name=name, session_id=run_id, seq=1)
            bus.append(run_id, [*events(run_id, 1), Record(1, "event", p.encode(event))])
    watched = cli("watch", "--from-start", "--name", "deploy/*", "--timeout", "0.3", "--bus", bus_url)
    objs = lines_of(watched.stdout)
    assert [o["name"] for o in objs[:-1]] == ["deploy/started"]
    assert objs[-1]["subtype"] == "watch_timeout" and watched.returncode == 0


def test_sigint_ends_watch_with_one_terminal_line(bus_url: str) -> None:
    with open_bus(bus_url) as bus:
        cursor = bus.feed_end()
        watcher = spawn_cli("watch", "--bus", bus_url, "--since", cursor)
        bus.append("r", events("r", 2))
    shown = watcher.stdout.readline() + watcher.stdout.readline()
    watcher.send_signal(signal.SIGINT)
    output, err = watcher.communicate(timeout=10)
    objs = lines_of(shown + output)
    assert watcher.returncode == 130 and b"Traceback" not in err
    assert [o["type"] for o in objs] == ["start", "log", "result"]
    assert objs[-1]["subtype"] == "watch_interrupted" and objs[-1]["error"]["code"] == "INTERRUPTED"


# -- logs ---------------------------------------------------------------------


def test_logs_without_follow_emits_the_files_lines(tmp_path: Path, bus_home: Path) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"started\n2024-01-01 WARN disk low\n[error] boom\nno newline")
    done = cli("logs", str(log))
    objs = lines_of(done.stdout)
    assert done.returncode == 0
    assert [(o["level"], o["message"]) for o in objs if o["type"] == "log"] == [
        ("info", "started"),
        ("warn", "2024-01-01 WARN disk low"),
        ("error", "[error] boom"),
        ("info", "no newline"),
    ]
    missing = cli("logs", str(tmp_path / "nope.log"))
    end = lines_of(missing.stdout)[-1]
    assert missing.returncode == 2 and end["error"]["code"] == "INVALID_INPUT" and end["error"]["fix"]


def test_logs_reads_a_pipe_live_and_stdin_as_dash(tmp_path: Path, bus_home: Path) -> None:
    """A FIFO (or /dev/stdin, or a shell's <(cmd)) is read to its end, each line as soon as it is whole."""
    fifo = tmp_path / "app.fifo"
    os.mkfifo(fifo)
    proc = spawn_cli("logs", str(fifo))
    writer = os.open(fifo, os.O_RDWR)  # never blocks, even when nothing reads the FIFO
    try:
        os.write(writer, b"first\n")
        assert [o["message"] for o in _read_until(proc, 1)] == ["first"]  # out before the pipe closes
        os.write(writer, b"second\n")
    finally:
        os.close(writer)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and [o["message"] for o in lines_of(out) if o["type"] == "log"] == ["second"]
    dash = cli("logs", "-", stdin=b"from stdin\n")
    assert dash.returncode == 0 and [o["message"] for o in lines_of(dash.stdout) if o["type"] == "log"] == [
        "from stdin"
    ]


def test_logs_redacts_the_configured_secrets(
    tmp_path: Path, bus_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-ant-api03-" + "Lq4" * 10
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    log = tmp_path / "app.log"
    log.write_text(f"using key {key}\n")
    done = cli("logs", str(log))
    assert [o["message"] for o in lines_of(done.stdout) if o["type"] == "log"] == [
        "using key [redacted:ANTHROPIC_API_KEY]"
    ]


def _read_until(proc: object, count: int) -> list[dict]:  # type: ignore[type-arg]
    """The next ``count`` log events from a running ``logs --follow``."""
    found = []
    while len(found) < count:
        line = proc.stdout.readline()  # type: ignore[attr-defined]
        assert line, "logs --follow ended early"
        obj = msgspec.json.decode(line)
        if obj["type"] == "log":
            found.append(obj)
    return found


def test_logs_follow_survives_rotation_and_truncation(tmp_path: Path, bus_home: Path) -> None:
    log = tmp_path / "app.log"
    log.write_text("old line\n")
    tail = spawn_cli("logs", "--follow", str(log), "--publish", "--timeout", "20")
    assert tail.stdout is not None
    while b'"following"' not in tail.stdout.readline():  # the file is open: what comes next is new
        pass
    with log.open("a") as f:
        f.write("one\ntw")
        f.flush()
        time.sleep(0.1)
        f.write("o\n")
    assert [o["message"] for o in _read_until(tail, 2)] == ["one", "two"]  # not the old line; partial joined
    with log.open("a") as f:
        f.write("last of the old file\n")
    os.rename(log, tmp_path / "app.log.1")
    log.write_text("first of the new file\n")
    assert [o["message"] for o in _read_until(tail, 2)] == ["last of the old file", "first of the new file"]
    time.sleep(0.3)
    log.write_text("after truncation\n")  # same file, shorter: read again from its start
    assert [o["message"] for o in _read_until(tail, 1)] == ["after truncation"]
    tail.send_signal(signal.SIGINT)
    rest, _ = tail.communicate(timeout=10)
    end = lines_of(rest)[-1]
    assert end["type"] == "result" and end["exit_code"] == 130 == tail.returncode
    with open_bus() as bus:  # --publish: the same run is on the bus
        (info,) = bus.list_runs()
        messages = [msgspec.json.decode(r.line).get("message") for r in bus.read(info.run_id)]
    assert "first of the new file" in messages and info.status == "interrupted"


def test_logs_follow_waits_for_a_file_and_can_start_from_its_beginning(
    tmp_path: Path, bus_home: Path
) -> None:
    log = tmp_path / "later.log"
    tail = spawn_cli("logs", "-f", str(log), "--from-start", "--timeout", "20")
    first = msgspec.json.decode(tail.stdout.readline())
    waiting = msgspec.json.decode(tail.stdout.readline())
    assert first["type"] == "start" and waiting["status"] == "waiting"
    log.write_text("hello\n")
    assert [o["message"] for o in _read_until(tail, 1)] == ["hello"]
    tail.send_signal(signal.SIGTERM)
    tail.communicate(timeout=10)
    assert tail.returncode == 143


@pytest.mark.parametrize(
    ("line", "level"), [("DEBUG x", "debug"), ("level=warn y", "warn"), ("FATAL", "error")]
)
def test_log_levels_are_read_from_the_start_of_a_line(line: str, level: str) -> None:
    from agentstream.cli.logs_cmd import level_of

    assert level_of(line) == level
    assert level_of("x" * 200 + " ERROR late") == "info"


def test_a_bad_watch_cursor_is_said_on_stderr_too(bus_home: Path) -> None:
    done = cli("watch", "--since", "garbage", "--bus", f"sqlite:///{bus_home / 'bus.sqlite3'}")
    assert done.returncode == 2
    assert b"INVALID_INPUT: bad feed cursor 'garbage'" in done.stderr and b"fix:" in done.stderr


def test_no_run_matching_a_status_filter_is_not_said_as_an_empty_bus() -> None:
    from agentstream.cli.runs_cmd import _table

    assert _table({"runs": []}, ["failed"]).startswith("No failed runs on the bus")
    assert _table({"runs": []}, []).startswith("No runs on the bus yet")
