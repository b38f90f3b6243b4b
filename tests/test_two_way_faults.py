"""Two-way sessions (``exec --input-format stream-json``) under faults, with real processes and pipes.

The real command runs against a loopback Anthropic server; the test writes
control lines to its stdin while a turn runs and checks every turn's stream.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from _agent_fakes import (
    FakeModelServer,
    anthropic_env,
    anthropic_reply,
    assert_valid_stream,
    exec_command,
    split_streams,
)


class Session:
    """A running two-way ``exec`` whose stdin the test writes and whose stdout it reads line by line."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            exec_command("--input-format", "stream-json", *args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
        )
        self.lines: list[bytes] = []

    def send(self, obj: dict[str, object]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(obj).encode() + b"\n")
        self.proc.stdin.flush()

    def until(self, kind: str) -> dict[str, object]:
        """Read lines until one of type ``kind``; return it."""
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            assert line, f"stdout ended before a {kind}; read: {self.lines}"
            self.lines.append(line)
            obj = json.loads(line)
            if obj["type"] == kind:
                return obj  # type: ignore[no-any-return]

    def close(self, timeout: float = 20) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        out = self.proc.stdout.read()
        self.proc.wait(timeout=timeout)
        self.lines += [line for line in out.splitlines(keepends=True) if line.strip()]
        return self.proc.returncode


def turn(text: str) -> dict[str, object]:
    return {"type": "message", "role": "user", "content": text}


def test_interrupt_during_a_tool_kills_its_group_and_the_session_goes_on(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    command = "echo $$ > shell.pid; echo started; sleep 30"
    script = [
        anthropic_reply(tool_calls=[("toolu_1", "shell", {"command": command})]),
        anthropic_reply("Next turn answered."),
    ]
    with FakeModelServer(script) as server:
        session = Session(["--permission-mode", "full"], anthropic_env(tmp_path, server), work)
        session.send(turn("run something long"))
        session.until("tool_progress")
        session.send({"type": "interrupt"})
        result = session.until("result")
        pid = int((work / "shell.pid").read_text())
        session.send(turn("and now?"))
        session.until("result")
        code = session.close()
    first, second = split_streams(session.lines)
    events = assert_valid_stream(first, 130)
    assert result["subtype"] == "interrupted" and result["exit_code"] == 130
    assert [(e.status, e.error) for e in events if e.type == "tool_result"] == [
        ("cancelled", "interrupted by the client")  # words for a person, not an exception's class name
    ]
    assert_valid_stream(second, 0)
    assert code == 0  # the last turn's
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError(f"the tool's shell {pid} outlived the interrupt")
    # the model was told the call did not finish before the next turn
    assert "stopped before this tool call finished" in json.dumps(server.posts[1].body["messages"])


def test_interrupt_during_a_model_stream(tmp_path: Path) -> None:
    script = [anthropic_reply("words " * 50, stall_after=6), anthropic_reply("Back.")]
    with FakeModelServer(script) as server:
        session = Session([], anthropic_env(tmp_path, server), tmp_path)
        session.send(turn("talk"))
        session.until("message_delta")
        session.send({"type": "interrupt"})
        result = session.until("result")
        session.send(turn("again"))
        session.until("result")
        code = session.close()
    first, second = split_streams(session.lines)
    assert_valid_stream(first, 130)
    assert result["subtype"] == "interrupted"
    assert json.loads(second[-1])["result"] == "Back." and code == 0


def test_an_interrupt_sent_right_behind_its_turn_stops_that_turn(tmp_path: Path) -> None:
    """A client interrupts just after sending (the turn queued, not begun): that turn stops before any tool."""
    work = tmp_path / "work"
    work.mkdir()
    script = [anthropic_reply(tool_calls=[("toolu_1", "shell", {"command": "sleep 30"})])] * 2 + [
        anthropic_reply("Done.")
    ]
    with FakeModelServer(script) as server:
        session = Session(["--permission-mode", "full"], anthropic_env(tmp_path, server), work)
        session.send(turn("run it"))
        session.send({"type": "interrupt"})
        result = session.until("result")
        session.send(turn("say something"))
        session.send({"type": "interrupt"})
        session.until("result")
        code = session.close()
    first, second = split_streams(session.lines)
    for events in (assert_valid_stream(first, 130), assert_valid_stream(second, 130)):
        assert events[-1].subtype == "interrupted"  # type: ignore[union-attr]
        assert not [e for e in events if e.type == "tool_progress"]  # the 30 s command never ran
    assert result["subtype"] == "interrupted" and code == 130


def test_an_unanswered_permission_request_is_denied_after_the_timeout(tmp_path: Path) -> None:
    script = [
        anthropic_reply(tool_calls=[("toolu_2", "shell", {"command": "touch nope.txt"})]),
        anthropic_reply("Fine, I will not."),
    ]
    args = [
        "--permission-mode",
        "read-only",
        "--permission-prompt-tool",
        "stdio",
        "--permission-timeout",
        "0.5",
    ]
    with FakeModelServer(script) as server:
        session = Session(args, anthropic_env(tmp_path, server), tmp_path)
        session.send(turn("touch it"))
        request = session.until("permission_request")
        session.until("result")
        code = session.close()
    events = assert_valid_stream(session.lines, 0)
    assert request["call_id"] == "toolu_2" and request["name"] == "shell"
    results = [e for e in events if e.type == "tool_result"]
    assert results[0].status == "denied" and "no decision within 0.5s" in results[0].error
    assert not (tmp_path / "nope.txt").exists() and code == 0


def test_a_permission_decision_allows_the_call(tmp_path: Path) -> None:
    script = [
        anthropic_reply(tool_calls=[("toolu_3", "shell", {"command": "touch yes.txt"})]),
        anthropic_reply("Done."),
    ]
    args = ["--permission-mode", "read-only", "--permission-prompt-tool", "stdio"]
    with FakeModelServer(script) as server:
        session = Session(args, anthropic_env(tmp_path, server), tmp_path)
        session.send(turn("touch it"))
        request = session.until("permission_request")
        session.send({"type": "permission_decision", "call_id": "nobody", "decision": "allow"})
        session.send({"type": "permission_decision", "call_id": request["call_id"], "decision": "allow"})
        session.until("result")
        code = session.close()
    events = assert_valid_stream(session.lines, 0)
    assert [e.status for e in events if e.type == "tool_result"] == ["success"]
    assert (tmp_path / "yes.txt").exists() and code == 0
    assert any(e.type == "error" and "nobody" in e.message for e in events)


def test_a_decision_that_comes_after_its_turn_is_a_note_not_an_error(tmp_path: Path) -> None:
    """A late decision (its request timed out) or a second one must not turn a good session into exit 2."""
    with FakeModelServer([anthropic_reply("Done.")]) as server:
        session = Session([], anthropic_env(tmp_path, server), tmp_path)
        session.send(turn("hello"))
        session.until("result")
        session.send({"type": "permission_decision", "call_id": "call_late", "decision": "allow"})
        code = session.close()
        assert session.proc.stderr is not None
        stderr = session.proc.stderr.read().decode()
    events = assert_valid_stream(session.lines, 0)
    assert code == 0 and [e.type for e in events].count("result") == 1
    assert "a permission decision, but no turn is running" in stderr


def test_a_byte_order_mark_before_the_first_turn_is_dropped(tmp_path: Path) -> None:
    """Windows tools start a file with one; the first turn must still be read."""
    with FakeModelServer([anthropic_reply("Hi.")]) as server:
        session = Session([], anthropic_env(tmp_path, server), tmp_path)
        assert session.proc.stdin is not None
        session.proc.stdin.write(b"\xef\xbb\xbf" + json.dumps(turn("hello")).encode() + b"\n")
        session.proc.stdin.flush()
        session.until("result")
        code = session.close()
    events = assert_valid_stream(session.lines, 0)
    assert code == 0 and events[-1].result == "Hi."


def test_stdin_closed_mid_turn_finishes_the_turn_then_exits(tmp_path: Path) -> None:
    with FakeModelServer([anthropic_reply("All of it.", chunk=2)]) as server:
        session = Session([], anthropic_env(tmp_path, server), tmp_path)
        session.send(turn("hello"))
        code = session.close()
    events = assert_valid_stream(session.lines, code)
    assert events[-1].result == "All of it." and code == 0


def test_the_client_dying_ends_the_session_and_its_tool(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    command = "echo $$ > shell.pid; echo started; sleep 30"
    with FakeModelServer(
        [anthropic_reply(tool_calls=[("toolu_4", "shell", {"command": command})])]
    ) as server:
        # No heartbeat: no write can find the pipe closed while the tool sleeps, so only watching stdout can.
        args = ["--permission-mode", "full", "--heartbeat", "0"]
        session = Session(args, anthropic_env(tmp_path, server), work)
        session.send(turn("run something long"))
        session.until("tool_progress")
        assert session.proc.stdout is not None and session.proc.stdin is not None
        session.proc.stdout.close()  # the client is gone: both pipes close
        session.proc.stdin.close()
        code = session.proc.wait(timeout=20)
    pid = int((work / "shell.pid").read_text())
    assert code in (0, 141), code
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError(f"the tool's shell {pid} outlived the client")


@pytest.mark.parametrize("pause", [0.0, 1.0], ids=["as-the-turn-ends", "between-turns"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_after_a_turn_ends_the_session(tmp_path: Path, signum: int, pause: float) -> None:
    """Right after a turn's result (its run still being stored) or while waiting for the next turn, a signal
    ends the session, with the code of the last stream written: the finished turn's, or that of an
    interrupted stream of its own. The reader thread still blocked on stdin must not abort the exit."""
    with FakeModelServer([anthropic_reply("First turn answered.")]) as server:
        session = Session([], anthropic_env(tmp_path, server), tmp_path)
        session.send(turn("hello"))
        session.until("result")
        time.sleep(pause)
        session.proc.send_signal(signum)  # stdin stays open
        code = session.proc.wait(timeout=20)
    assert session.proc.stdout is not None and session.proc.stderr is not None
    session.lines += session.proc.stdout.read().splitlines(keepends=True)
    stderr = session.proc.stderr.read()
    assert b"Fatal Python error" not in stderr, stderr
    streams = split_streams(session.lines)
    last = assert_valid_stream(streams[-1], code)  # the exit code is the last stream's
    if pause:  # well after the result, the session was waiting: an interrupted stream of its own
        assert len(streams) == 2
    if len(streams) == 2:
        assert code == 128 + signum and last[-1].error.code == "INTERRUPTED"  # type: ignore[union-attr]
        first = assert_valid_stream(streams[0], 0)
        assert last[0].parent_session_id == first[0].session_id  # type: ignore[union-attr]
    else:
        assert code == 0
