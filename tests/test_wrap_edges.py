"""``wrap`` at its edges: under a real terminal, killed with SIGKILL, and what its exit code is.

Real processes only: a pseudo-terminal that is the controlling terminal of the
session running ``wrap``, real SIGKILL, real grandchildren.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import termios
import textwrap
import time
from pathlib import Path

import pytest

from _consumer_support import exited

CLI = [str(Path(sys.executable).with_name("agentstream"))]


def _events(stdout: bytes) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def _script(tmp_path: Path, name: str, code: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(code))
    return path


def _read_until(fd: int, marker: bytes, timeout: float = 30.0) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while marker not in seen:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"no {marker!r} on the terminal; saw {seen!r}"
        seen += os.read(fd, 4096)
    return seen


def _take_the_terminal() -> None:
    """In the child: the pty on stdin becomes the controlling terminal of its new session."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@pytest.mark.parametrize("touch", ["reads its tty", "sets raw mode"])
def test_a_child_that_uses_the_terminal_runs_under_wrap_as_without_it(tmp_path: Path, touch: str) -> None:
    child = _script(
        tmp_path,
        "tty_child.py",
        f"""
        import os, termios, tty
        from agentstream import Stream
        fd = os.open("/dev/tty", os.O_RDWR)
        with Stream("tty-child") as s:
            if {touch!r} == "sets raw mode":
                saved = termios.tcgetattr(fd)
                tty.setraw(fd)  # tcsetattr: a background process group is stopped here (SIGTTOU)
                termios.tcsetattr(fd, termios.TCSADRAIN, saved)
                s.message("mode set and restored")
            else:
                os.write(fd, b"ready> ")
                s.message("read: " + os.read(fd, 100).decode().strip())  # SIGTTIN in the background
        """,
    )
    master, slave = os.openpty()
    wrap = subprocess.Popen(
        [*CLI, "wrap", "--", sys.executable, str(child)],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=slave,
        start_new_session=True,
        preexec_fn=_take_the_terminal,
        cwd=tmp_path,
    )
    os.close(slave)
    try:
        if touch == "reads its tty":
            _read_until(master, b"ready> ")
            os.write(master, b"hello\n")
        stdout, _ = wrap.communicate(timeout=60)
    finally:
        wrap.kill()
        os.close(master)
    events = _events(stdout)
    assert wrap.returncode == 0, events[-2:]
    messages = [e["content"] for e in events if e["type"] == "message"]
    assert messages == ["read: hello" if touch == "reads its tty" else "mode set and restored"]


def test_sigkill_of_wrap_leaves_neither_child_nor_grandchild_running(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    child = _script(
        tmp_path,
        "busy_child.py",
        f"""
        import subprocess, time
        from agentstream import Stream
        with Stream("busy") as s:
            grandchild = subprocess.Popen(["sleep", "300"])
            s.message("working")
            open({str(pids)!r}, "w").write(f"{{__import__('os').getpid()}} {{grandchild.pid}}")
            time.sleep(300)
        """,
    )
    wrap = subprocess.Popen(
        [*CLI, "wrap", "--", sys.executable, str(child)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    while not pids.exists() or len(pids.read_text().split()) < 2:
        assert time.monotonic() < deadline and wrap.poll() is None, "the child did not start"
        time.sleep(0.05)
    child_pid, grandchild_pid = map(int, pids.read_text().split())
    wrap.kill()
    wrap.wait()
    bound = time.monotonic() + 15  # the watchdog's SIGTERM, then SIGKILL after wrap's --grace (3 s)
    while not (exited(child_pid) and exited(grandchild_pid)) and time.monotonic() < bound:
        time.sleep(0.05)
    left = [pid for pid in (child_pid, grandchild_pid) if not exited(pid)]
    for pid in left:
        os.kill(pid, 9)
    assert not left, f"still running after wrap was SIGKILLed: {left}"


# -- the exit-code policy: the child's own exit status, passed through ---------------------------

CHILDREN = {
    "ok, exits 0": ("s.finish()", 0, 0),
    "ok, exits 3": ("s.finish()", 3, 3),
    "fails with 5, exits 5": ("s.fail('TOOL_FAILED', 'no', exit_code=5)", 5, 5),
    "fails with 5, exits 0": ("s.fail('TOOL_FAILED', 'no', exit_code=5)", 0, 5),
    "no result, exits 4": ("pass", 4, 4),
    "no result, exits 0": ("pass", 0, 1),
    "killed by SIGKILL": ("os.kill(os.getpid(), 9)", None, 137),
}


OUTPUTS = {
    "stream-json": ["-o", "stream-json"],
    "json": ["-o", "json"],
    "claude": ["--to", "claude"],
    "gemini": ["--to", "gemini"],
}
CASES = [(case, "stream-json") for case in sorted(CHILDREN)] + [
    (case, output)
    for case in ("ok, exits 3", "fails with 5, exits 0")
    for output in ("json", "claude", "gemini")
]
"""Every kind of ending in the canonical form; the two that differ from the stream's outcome in every other."""


@pytest.mark.parametrize(("case", "output_name"), CASES)
def test_wraps_exit_code_is_the_childs_own_exit_status(tmp_path: Path, case: str, output_name: str) -> None:
    output = OUTPUTS[output_name]
    ending, status, expected = CHILDREN[case]
    child = _script(
        tmp_path,
        "child.py",
        f"""
        import os, sys
        from agentstream import Stream
        s = Stream("child", out=sys.stdout.buffer, owns_process=False).start()
        s.message("hello")
        {ending}
        sys.stdout.flush()
        os._exit({status if status is not None else 0})
        """,
    )
    done = subprocess.run(
        [*CLI, "wrap", *output, "--", sys.executable, str(child)],
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == expected, done.stderr.decode()
    if output[0] == "-o":
        result = _events(done.stdout)[-1]
        assert result["exit_code"] == expected and result["ok"] is (expected == 0)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_child_lingers_after_its_result_keeps_that_result(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """Claude Code can hang after its result: the outcome is known, so stopping wrap then is no interruption."""
    lingering = tmp_path / "lingering"
    child = _script(
        tmp_path,
        "child.py",
        f"""
        import sys, time
        from agentstream import Stream
        s = Stream("child", out=sys.stdout.buffer, owns_process=False).start()
        s.message("all done")
        s.finish(result="all done")
        sys.stdout.flush()
        time.sleep(1)  # wrap has read the result by now
        open({str(lingering)!r}, "w").close()
        time.sleep(60)
        """,
    )
    wrap = subprocess.Popen(
        [*CLI, "wrap", "--no-publish", "--exit-timeout", "30", "--", sys.executable, str(child)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 30
        while not lingering.exists():
            assert time.monotonic() < deadline and wrap.poll() is None, "the child never got to linger"
            time.sleep(0.05)
        wrap.send_signal(signum)
        out, err = wrap.communicate(timeout=30)
    finally:
        wrap.kill()
    result = _events(out)[-1]
    assert (result["type"], result["ok"], result["subtype"], result["result"]) == (
        "result",
        True,
        "success",
        "all done",
    ), err.decode()
    assert wrap.returncode == 0
