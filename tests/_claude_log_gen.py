"""Seeded Claude Code project-log trees, shaped as Claude Code writes them, for the usage tests and benchmark.

Each API response is written once per content block (thinking, text, tool_use),
every record repeating the message's ``usage``, ``id`` and ``requestId``; tool
results come back in ``user`` records. Sessions span several days and models,
and some files repeat an earlier session's records (as a resumed session does).
Models are ones whose prices ccusage ships for ``--offline`` use.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

MODELS = ("claude-sonnet-4-20250514", "claude-opus-4-1-20250805", "claude-3-5-haiku-20241022")


def _record(kind: str, session: str, ts: str, uuid: str, parent: str | None, **fields: object) -> str:
    record = {
        "parentUuid": parent,
        "isSidechain": False,
        "userType": "external",
        "cwd": "/home/dev/project",
        "sessionId": session,
        "version": "2.0.31",
        "gitBranch": "main",
        "type": kind,
        "uuid": uuid,
        "timestamp": ts,
        **fields,
    }
    return json.dumps(record, separators=(",", ":"))


def session_lines(rng: random.Random, session: str, day: int, turns: int, filler: int) -> list[str]:
    lines, parent, n = [], None, 0
    for turn in range(turns):
        n += 1
        ts = f"2026-10-{day:02d}T{(turn // 60) % 24:02d}:{turn % 60:02d}:{n % 60:02d}.{n % 1000:03d}Z"
        uuid = f"{session[:8]}-u{n}"
        lines.append(_record("user", session, ts, uuid, parent, message={"role": "user", "content": "do it"}))
        parent = uuid
        model = rng.choice(MODELS)
        usage = {
            "input_tokens": rng.randint(1, 400),
            "cache_creation_input_tokens": rng.randint(0, 5000),
            "cache_read_input_tokens": rng.randint(0, 60000),
            "output_tokens": rng.randint(1, 900),
            "service_tier": "standard",
        }
        message_id, request_id = f"msg_{session[:8]}{turn:05d}", f"req_{session[:8]}{turn:05d}"
        blocks: list[dict[str, object]] = [
            {"type": "thinking", "thinking": "x" * rng.randint(10, filler), "signature": "sig"},
            {"type": "text", "text": "y" * rng.randint(10, filler)},
        ]
        tool = rng.random() < 0.5
        if tool:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{session[:8]}{turn:05d}",
                    "name": "Bash",
                    "input": {"command": "ls"},
                }
            )
        for block in blocks:
            n += 1
            uuid = f"{session[:8]}-a{n}"
            message = {
                "model": model,
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "content": [block],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage,
            }
            lines.append(
                _record("assistant", session, ts, uuid, parent, requestId=request_id, message=message)
            )
            parent = uuid
        if tool:
            n += 1
            uuid = f"{session[:8]}-r{n}"
            result = {
                "tool_use_id": f"toolu_{session[:8]}{turn:05d}",
                "type": "tool_result",
                "content": "z" * filler,
            }
            lines.append(
                _record("user", session, ts, uuid, parent, message={"role": "user", "content": [result]})
            )
            parent = uuid
    return lines


def write_tree(root: Path, *, seed: int, sessions: int, turns: int, filler: int = 200) -> Path:
    """A ``CLAUDE_CONFIG_DIR``-shaped tree under ``root``; returns ``root``. Every tenth file also replays another."""
    rng = random.Random(seed)
    written: list[list[str]] = []
    for index in range(sessions):
        session = f"{rng.getrandbits(32):08x}-0000-4000-8000-{index:012d}"
        project = root / "projects" / f"-home-dev-project{index % 3}"
        project.mkdir(parents=True, exist_ok=True)
        lines = session_lines(rng, session, 1 + index % 5, turns, filler)
        if written and index % 10 == 9:
            lines = written[rng.randrange(len(written))][:turns] + lines  # a resumed session's copied history
        written.append(lines)
        (project / f"{session}.jsonl").write_text("\n".join(lines) + "\n")
    return root
