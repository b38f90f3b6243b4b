"""``agentstream sessions``: the stored agent sessions, newest first.

A table for people; with ``--json`` one envelope ``{ok, command, result, next_actions}``
whose ``next_actions`` are templates for resuming a session.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentstream.agent.sessions import SessionRecord

_COLUMNS = (("UPDATED", 16), ("STATUS", 11), ("TURNS", 5), ("MODEL", 22))


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", "-n", type=_positive, default=20, help="how many to show (default 20)")
    parser.add_argument("--json", action="store_true", help="print one JSON envelope instead of a table")


def run(args: argparse.Namespace) -> int:
    from agentstream.agent.sessions import SessionStore
    from agentstream.errors import AgentstreamError

    command = f"agentstream sessions --limit {args.limit}" + (" --json" if args.json else "")
    try:
        store = SessionStore()
        sessions = store.list(args.limit, with_messages=False)
    except AgentstreamError as exc:
        if not args.json:
            raise
        _write_json(_failure(command, exc))
        return exc.exit_code
    if args.json:
        _write_json(_envelope(command, sessions, args.limit, str(store.path)))
    else:
        _write_table(sessions, str(store.path))
    return 0


def _envelope(command: str, sessions: list[SessionRecord], limit: int, store: str) -> dict[str, Any]:
    return {
        "ok": True,
        "command": command,
        "result": {"sessions": [record.summary() for record in sessions], "store": store},
        "next_actions": _next_actions(sessions, limit),
    }


def _failure(command: str, exc: Any) -> dict[str, Any]:
    return {
        "ok": False,
        "command": command,
        "result": None,
        "error": {"message": exc.message, "code": str(exc.code)},
        "fix": exc.fix or "run 'agentstream sessions' again",
        "next_actions": [],
    }


_PROMPT_PARAM = {"description": "what to ask the agent next", "required": True}


def _next_actions(sessions: list[SessionRecord], limit: int) -> list[dict[str, Any]]:
    if not sessions:
        return [
            {
                "command": "agentstream exec <prompt>",
                "description": "Start a session",
                "params": {"prompt": {"description": "what to ask the agent", "required": True}},
            }
        ]
    actions: list[dict[str, Any]] = [
        {
            "command": "agentstream exec --resume <session_id> <prompt>",
            "description": "Continue one of these sessions with a new prompt",
            "params": {
                "session_id": {
                    "description": "a session_id from result.sessions",
                    "value": sessions[0].session_id,
                    "enum": [record.session_id for record in sessions],
                    "required": True,
                },
                "prompt": _PROMPT_PARAM,
            },
        },
        {
            "command": "agentstream exec --continue <prompt>",
            "description": "Continue the most recent session in the current directory",
            "params": {"prompt": _PROMPT_PARAM},
        },
    ]
    if len(sessions) == limit:
        actions.append(
            {
                "command": "agentstream sessions --limit <n> --json",
                "description": "List more sessions (there may be older ones)",
                "params": {"n": {"description": "how many to list", "default": limit * 5}},
            }
        )
    return actions


def _write_json(envelope: dict[str, Any]) -> None:
    import msgspec

    sys.stdout.buffer.write(msgspec.json.encode(envelope) + b"\n")
    sys.stdout.flush()


def _write_table(sessions: list[SessionRecord], store: str) -> None:
    if not sessions:
        sys.stdout.write(f"No sessions in {store}.\n")
        sys.stderr.write('Start one with: agentstream exec "<prompt>"\n')
        return
    id_width = max(len("SESSION"), *(len(record.session_id) for record in sessions))
    header = "  ".join(["SESSION".ljust(id_width), *(name.ljust(width) for name, width in _COLUMNS), "TITLE"])
    rows = [header] + [_row(record, id_width) for record in sessions]
    sys.stdout.write("\n".join(rows) + "\n")
    sys.stderr.write('Resume one with: agentstream exec --resume <session_id> "<prompt>"\n')


def _row(record: SessionRecord, id_width: int) -> str:
    """Session ids are never cut: people copy them into --resume."""
    updated = record.updated_at[:16].replace("T", " ")
    cells = (updated, record.status, str(record.turn_count), record.model)
    fitted = (_fit(cell, width) for cell, (_, width) in zip(cells, _COLUMNS))
    return "  ".join([record.session_id.ljust(id_width), *fitted, record.title])


def _fit(text: str, width: int) -> str:
    return text.ljust(width) if len(text) <= width else text[: width - 1] + "…"
