"""``agentstream runs``: the runs on the bus, newest first: a table on a terminal, one JSON envelope when piped."""

from __future__ import annotations

import argparse
import time
from typing import Any

from agentstream.cli._bus_options import add_bus_option
from agentstream.cli._options import positive_int

STATUSES = ("queued", "running", "succeeded", "failed", "interrupted")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--status", action="append", choices=STATUSES, default=[], help="only runs in this state (repeatable)"
    )
    parser.add_argument(
        "--limit", type=positive_int, default=20, metavar="N", help="at most N runs (default 20)"
    )
    parser.add_argument("--json", action="store_true", help="print the JSON envelope even on a terminal")
    add_bus_option(parser)


def run(args: argparse.Namespace) -> int:
    from agentstream.actions import follow_action, runs_action, submit_action, watch_action
    from agentstream.bus import open_bus
    from agentstream.envelope import ok_envelope, print_envelope, print_error
    from agentstream.errors import AgentstreamError, UsageError

    command = "agentstream runs"
    try:
        if args.limit < 1:
            raise UsageError(f"--limit must be at least 1, not {args.limit}", fix="pass --limit 20, say")
        with open_bus(args.bus) as bus:
            runs = bus.list_runs(statuses=args.status, limit=args.limit)
    except AgentstreamError as exc:
        return print_error(command, exc, [runs_action()], json_flag=args.json)
    actions = [follow_action(runs[0].run_id)] if runs else [submit_action()]
    actions += [runs_action(), watch_action()]
    listed = [_row(info) for info in runs]
    envelope = ok_envelope(command, {"runs": listed, "count": len(listed)}, actions)
    return print_envelope(envelope, human=_table, json_flag=args.json)


_COLUMNS = ("RUN", "STATUS", "COMMAND", "UPDATED")


def _table(result: dict[str, Any]) -> str:
    """The runs for a person: one row each, ids never cut (people paste them into follow)."""
    runs = result["runs"]
    if not runs:
        return 'No runs on the bus yet. Start one with: agentstream exec "<prompt>"\n'
    rows = [
        (row["run_id"], row.get("status") or "", row.get("command") or "", (row.get("updated") or "")[:19])
        for row in runs
    ]
    widths = [max(len(_COLUMNS[i]), *(len(r[i]) for r in rows)) for i in range(3)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(_COLUMNS, [*widths, 0], strict=True)).rstrip()
    ]
    lines += [
        "  ".join(cell.ljust(width) for cell, width in zip(r, [*widths, 0], strict=True)).rstrip()
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def _row(info: Any) -> dict[str, Any]:
    import msgspec

    row = msgspec.to_builtins(info)
    for key in ("created", "updated"):
        row[key] = _rfc3339(row[key]) if row.get(key) else None
    return row


def _rfc3339(unix: float) -> str:
    whole = int(unix)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((unix - whole) * 1000):03d}Z"
