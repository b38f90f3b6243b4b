"""Where agentstream keeps state (sessions, the embedded bus) on this machine."""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    """``$AGENTSTREAM_HOME``, else ``$XDG_STATE_HOME/agentstream``, else ``~/.local/state/agentstream``.

    Created on first use, private to the user.
    """
    path = state_path()
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def state_path() -> Path:
    """Where :func:`state_dir` is, without creating it (for what only looks)."""
    explicit = os.environ.get("AGENTSTREAM_HOME")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "agentstream"
