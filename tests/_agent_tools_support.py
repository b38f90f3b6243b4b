"""Helpers shared by the agent tool and permission tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentstream.agent.tools import Toolbox, ToolContext

OUTSIDE_SECRET = "outside-the-workspace-3f1c"
"""Content of files outside the workspace; it must never appear in an outcome."""


def make_toolbox(workspace: Path, mode: str = "workspace-write", **ctx: Any) -> Toolbox:
    return Toolbox(ToolContext(workspace, mode=mode, **ctx))  # type: ignore[arg-type]


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (dead, not yet reaped by init) counts as gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def gone_soon(pid: int, timeout_s: float = 5.0) -> bool:
    """Whether ``pid`` is gone within ``timeout_s`` (a SIGKILL takes effect quickly but not at once)."""
    import time

    deadline = time.monotonic() + timeout_s
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not process_alive(pid)


def wait_for_file(path: Path, timeout_s: float = 10.0) -> str:
    """Poll for ``path`` to exist with content; the content."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and (text := path.read_text().strip()):
            return text
        time.sleep(0.02)
    raise AssertionError(f"{path} did not appear within {timeout_s}s")


def make_outside(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace and, next to it, a directory with a secret file; both real paths."""
    workspace = tmp_path / "ws"
    outside = tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(OUTSIDE_SECRET + "\n")
    return Path(os.path.realpath(workspace)), Path(os.path.realpath(outside))


def agent_running_shell(workspace: Path, command: str) -> subprocess.Popen[bytes]:
    """A separate agent process whose toolbox runs ``command`` in the shell tool: for real signals to it."""
    script = (
        "from pathlib import Path\n"
        "from agentstream.agent.tools import Toolbox, ToolContext\n"
        f"Toolbox(ToolContext(Path({str(workspace)!r}))).run('shell', {{'command': {command!r}}})\n"
    )
    return subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.DEVNULL)
