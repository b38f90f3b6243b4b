"""``agentstream sessions``: the stored agent sessions, newest first.

A table on a terminal; piped or with ``--json``, one envelope ``{ok, command, result, next_actions}``
whose ``next_actions`` are templates for resuming a session.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from agentstream._text import terminal_safe
from agentstream.cli._options import positive_int

if TYPE_CHECKING:
    from agentstream.agent.sessions import SessionRecord
    from agentstream.protocol import NextAction

_COLUMNS = (("UPDATED", 16), ("STATUS", 11), ("TURNS", 5), ("MODEL", 22))


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", "-n", type=positive_int, default=20, help="how many to show (default 20)")
    parser.add_argument("--json", action="store_true", help="print the JSON envelope even on a terminal")


def run(args: argparse.Namespace) -> int:
    from agentstream.agent.sessions import SessionStore
    from agentstream.envelope import ok_envelope, print_envelope, print_error, wants_json
    from agentstream.errors import AgentstreamError

    command = f"agentstream sessions --limit {args.limit}" + (" --json" if args.json else "")
    try:
        store = SessionStore()
        sessions = store.list(args.limit, with_messages=False)
    except AgentstreamError as exc:
        return print_error(command, exc, json_flag=args.json)
    if not wants_json(args.json):
        _write_table(sessions, str(store.path))
        return 0
    result = {"sessions": [record.summary() for record in sessions], "store": str(store.path)}
    return print_envelope(ok_envelope(command, result, _next_actions(sessions, args.limit)))


def _next_actions(sessions: list[SessionRecord], limit: int) -> list[NextAction]:
    from agentstream.actions import continue_action, exec_action, resume_session_action, sessions_action

    if not sessions:
        return [exec_action()]
    ids = [record.session_id for record in sessions]
    actions = [resume_session_action(ids[0], choices=ids), continue_action()]
    if len(sessions) == limit:
        actions.append(sessions_action(limit * 5))
    return actions


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
    cells = (updated, record.status, str(record.turn_count), terminal_safe(record.model, one_line=True))
    fitted = (_fit(cell, width) for cell, (_, width) in zip(cells, _COLUMNS, strict=False))
    session_id, title = (terminal_safe(text, one_line=True) for text in (record.session_id, record.title))
    return "  ".join([session_id.ljust(id_width), *fitted, title])


def _fit(text: str, width: int) -> str:
    return text.ljust(width) if len(text) <= width else text[: width - 1] + "…"
