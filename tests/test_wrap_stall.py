"""``wrap --stall-timeout``: a silent child is stopped, a busy one that shows progress is not.

Real child processes and real signals; both streams are checked with
``agentstream validate``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

CLI = str(Path(sys.executable).with_name("agentstream"))


def _wrap(tmp_path: Path, child: str, *options: str) -> subprocess.CompletedProcess[bytes]:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(child))
    argv = [CLI, "wrap", "--no-publish", *options, "--", sys.executable, str(script)]
    return subprocess.run(argv, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)


def _validate(stdout: bytes) -> None:
    checked = subprocess.run([CLI, "validate"], input=stdout, capture_output=True, timeout=30)
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()


def test_a_silent_child_is_stopped_with_stalled_even_if_it_ignores_sigterm(tmp_path: Path) -> None:
    child = """
        import signal, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only the SIGKILL after --grace ends it
        print("ready", file=sys.stderr, flush=True)
        time.sleep(60)
    """
    done = _wrap(tmp_path, child, "--stall-timeout", "1", "--grace", "0.5")
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 124, done.stderr.decode()
    errors = [e for e in events if e["type"] == "error"]
    assert [e["code"] for e in errors] == ["STALLED"]
    assert "printed nothing for 1s" in errors[0]["message"]
    result = events[-1]
    assert result["type"] == "result" and not result["ok"] and result["exit_code"] == 124
    assert result["error"]["code"] == "STALLED"
    _validate(done.stdout)


def test_a_long_tool_call_that_shows_progress_is_not_a_stall(tmp_path: Path) -> None:
    child = """
        import time
        from agentstream import Stream
        with Stream("busy") as stream:
            with stream.tool_call("shell", {"command": "make"}) as call:
                for step in range(10):
                    time.sleep(0.2)
                    call.progress(f"step {step}")
                call.succeed("built")
            stream.message("done")
    """
    done = _wrap(tmp_path, child, "--stall-timeout", "1")
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0, done.stderr.decode()
    assert not [e for e in events if e["type"] == "error"]
    assert sum(e["type"] == "tool_progress" for e in events) == 10
    assert events[-1]["type"] == "result" and events[-1]["ok"] and events[-1]["exit_code"] == 0
    _validate(done.stdout)
