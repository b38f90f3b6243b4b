"""Shell output that is not UTF-8 keeps to the caps, and a shell command does not outlive a killed agent."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _agent_tools_support import agent_running_shell, gone_soon, make_toolbox, wait_for_file
from agentstream.agent.tools._base import HeadTail
from agentstream.agent.tools._shell import _ProgressPump

NOT_STREAMED = "[further output is not streamed; the result has it]"


def omitted(text: str) -> int:
    found = re.search(r"\[\.\.\. (\d+) bytes omitted", text)
    assert found, text[-300:]
    return int(found.group(1))


@pytest.mark.parametrize("size", [20_000, 1_000_000])
def test_head_tail_of_bytes_that_are_not_utf8_fits_and_counts_true(size: int) -> None:
    """Each such byte shows as U+FFFD (3 bytes of text): the text still fits, and its marker counts bytes fed."""
    kept = HeadTail(32_000)
    kept.feed(b"\xff" * size)
    text = kept.text()
    assert kept.truncated and len(text.encode()) <= 32_000
    assert text.count("\ufffd") + omitted(text) == size


def test_shell_output_that_is_not_utf8_keeps_its_true_omitted_count(tmp_path: Path) -> None:
    box = make_toolbox(tmp_path, output_cap_bytes=32_000)
    out = box.run("shell", {"command": "head -c 20000 /dev/zero | tr '\\0' '\\377'"})
    assert out.status == "success" and out.truncated
    assert len(out.output.encode()) <= 32_000
    assert out.output.count("\ufffd") + omitted(out.output) == 20_000


def test_progress_of_bytes_that_are_not_utf8_stays_within_its_cap() -> None:
    chunks: list[str] = []
    pump = _ProgressPump(chunks.append, cap=32_000)
    for _ in range(10):
        pump.feed(b"\xff" * 4096 + b"\n")
        pump.flush()
    streamed = "".join(chunks)
    assert streamed.endswith(NOT_STREAMED)
    assert len(streamed.removesuffix(NOT_STREAMED).encode()) <= 32_000


def test_a_shell_command_and_its_children_die_when_the_agent_is_sigkilled(tmp_path: Path) -> None:
    """SIGKILL runs no cleanup in the agent; the command's group (which ignores SIGTERM here) still ends."""
    agent = agent_running_shell(tmp_path, "trap '' TERM; sleep 60 & echo $! > bg.pid; echo $$ > sh.pid; wait")
    try:
        pids = [int(wait_for_file(tmp_path / name)) for name in ("sh.pid", "bg.pid")]
        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=10)
        assert all(gone_soon(pid) for pid in pids), "the command outlived the agent"
    finally:
        agent.kill()
        for name in ("sh.pid", "bg.pid"):
            if (tmp_path / name).exists():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int((tmp_path / name).read_text()), signal.SIGKILL)


DIES_RIGHT_AFTER_STARTING = """
import os, signal, subprocess, sys
from agentstream._children import GroupWatchdog
watchdog = GroupWatchdog(grace=0.5)
child = subprocess.Popen(
    watchdog.announcing(["/bin/sh", "-c", "trap '' TERM; sleep 60 & wait"]),
    start_new_session=True, stdin=watchdog.child_stdin,
)
os.write(1, b"%d" % child.pid)
os.kill(os.getpid(), signal.SIGKILL)  # the moment a watchdog started after the child would not be running yet
"""


def test_a_watchdog_started_before_its_child_sees_a_sigkill_right_after_the_start() -> None:
    """The child names its group to the watchdog itself: a parent killed as soon as Popen returns (before it
    could hand the child's pid to anyone) still leaves nothing of the child's group behind."""
    parent = subprocess.run(
        [sys.executable, "-c", DIES_RIGHT_AFTER_STARTING], capture_output=True, timeout=30, check=False
    )
    assert parent.returncode == -signal.SIGKILL, parent.stderr
    group = int(parent.stdout)
    deadline = time.monotonic() + 10
    while _members_of(group) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _members_of(group)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"the child's group outlived its parent: {left}"


def _members_of(group: int) -> list[int]:
    """The live processes of process group ``group`` (zombies are gone already, as far as it matters)."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                state, _parent, pgrp = (entry / "stat").read_text().rpartition(")")[2].split()[:3]
                if int(pgrp) == group and state != "Z":
                    members.append(int(entry.name))
    return members
