"""On a terminal, commands print for people; piped, for programs (the convention of gh, uv and llm)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest


def _run(argv: list[str], env: dict[str, str], *, tty: bool) -> tuple[str, str, int]:
    """Run ``agentstream ARGV`` with stdout on a pseudo-terminal (tty) or a pipe."""
    command = [sys.executable, "-m", "agentstream", *argv]
    if not tty:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
        return done.stdout, done.stderr, done.returncode
    leader, follower = pty.openpty()
    with subprocess.Popen(command, stdout=follower, stderr=subprocess.PIPE, env=env, text=True) as child:
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not data:
                break
            chunks.append(data)
        err = child.stderr.read() if child.stderr else ""
        code = child.wait(timeout=60)
    os.close(leader)
    return b"".join(chunks).decode().replace("\r\n", "\n"), err, code


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "AGENTSTREAM_HOME": str(tmp_path),
        "AGENTSTREAM_BUS": f"sqlite:///{tmp_path}/bus.db",
    }


def test_send_then_runs_a_table_on_a_terminal_and_an_envelope_when_piped(env: dict[str, str]) -> None:
    out, _, code = _run(["send", "deploy/finished", "--data", "{}"], env, tty=True)
    assert code == 0 and out.startswith("sent deploy/finished as run ")
    run_id = out.split()[4]
    table, _, code = _run(["runs"], env, tty=True)
    assert code == 0
    header, row = table.splitlines()[:2]
    assert header.split()[:3] == ["RUN", "STATUS", "COMMAND"]
    assert row.split()[0] == run_id and "succeeded" in row
    piped, _, code = _run(["runs"], env, tty=False)
    envelope = json.loads(piped)
    assert code == 0 and envelope["ok"] is True and envelope["result"]["runs"][0]["run_id"] == run_id
    forced, _, _ = _run(["runs", "--json"], env, tty=True)
    assert json.loads(forced)["result"]["count"] == 1


def test_an_error_is_one_human_line_on_stderr_and_an_envelope_only_for_programs(env: dict[str, str]) -> None:
    out, err, code = _run(["send", "x", "--data", "{not json"], env, tty=True)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "INVALID_INPUT" in err and "fix:" in err
    out, err, code = _run(["send", "x", "--data", "{not json"], env, tty=False)
    assert code == 2 and json.loads(out)["error"]["code"] == "INVALID_INPUT" and "INVALID_INPUT" in err


def test_sessions_table_on_a_terminal_envelope_when_piped(env: dict[str, str]) -> None:
    out, _, code = _run(["sessions"], env, tty=True)
    assert code == 0 and out.startswith("No sessions in ")
    out, _, code = _run(["sessions"], env, tty=False)
    assert code == 0 and json.loads(out)["result"]["sessions"] == []


def test_exec_prints_text_for_a_person_and_stream_json_for_a_program(
    env: dict[str, str], tmp_path: Path
) -> None:
    import agentstream

    cassette = Path(agentstream.__file__).parent / "data" / "demo.cassette.jsonl"
    argv = ["exec", "--cassette", str(cassette), "--cwd", str(tmp_path), "--no-publish", "list the files"]
    out, _, code = _run(argv, env, tty=True)
    assert code == 0 and out.strip() and not out.lstrip().startswith("{")
    out, _, code = _run(argv, env, tty=False)
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and lines[0]["type"] == "start" and lines[-1]["type"] == "result"
    out, _, code = _run([*argv, "--dialect", "gemini"], env, tty=True)
    assert code == 0 and json.loads(out.splitlines()[0])["type"] == "init"
