"""``agentstream runs``: the runs on the bus, newest first: a table on a terminal, one JSON envelope when piped."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agentstream._text import terminal_safe
from agentstream.bus import RUN_STATUSES
from agentstream.cli._bus_options import add_bus_option
from agentstream.cli._options import positive_int


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--status",
        action="append",
        choices=RUN_STATUSES,
        default=[],
        help="only runs in this state (repeatable)",
    )
    parser.add_argument(
        "--limit", type=positive_int, default=20, metavar="N", help="at most N runs (default 20)"
    )
    parser.add_argument("--json", action="store_true", help="print the JSON envelope even on a terminal")
    add_bus_option(parser)


def run(args: argparse.Namespace) -> int:
    from agentstream.actions import runs_action
    from agentstream.bus import missing_local_bus, open_bus
    from agentstream.bus.summary import RUNS_COMMAND, runs_envelope
    from agentstream.envelope import print_envelope, print_error
    from agentstream.errors import AgentstreamError, UsageError

    try:
        if args.limit < 1:
            raise UsageError(f"--limit must be at least 1, not {args.limit}", fix="pass --limit 20, say")
        missing = missing_local_bus(args.bus)
        if missing is not None:  # listing creates nothing: a mistyped --bus is said, not made
            sys.stderr.write(f"agentstream runs: no bus at {missing} yet: no run was recorded there\n")
            envelope = runs_envelope(None, statuses=args.status, limit=args.limit)
        else:
            with open_bus(args.bus) as bus:
                envelope = runs_envelope(bus, statuses=args.status, limit=args.limit)
    except AgentstreamError as exc:
        return print_error(RUNS_COMMAND, exc, [runs_action()], json_flag=args.json)
    statuses = args.status or []
    return print_envelope(envelope, human=lambda result: _table(result, statuses), json_flag=args.json)


_COLUMNS = ("RUN", "STATUS", "COMMAND", "TOKENS", "UPDATED")


def _table(result: dict[str, Any], statuses: list[str]) -> str:
    """The runs for a person: one row each, ids never cut (people paste them into follow)."""
    runs = result["runs"]
    if not runs and statuses:
        return f"No {' or '.join(statuses)} runs on the bus (agentstream runs lists them all).\n"
    if not runs:
        return 'No runs on the bus yet. Start one with: agentstream exec "<prompt>"\n'
    rows = [
        tuple(
            terminal_safe(cell, one_line=True)  # what a run's producer wrote cannot act on the terminal
            for cell in (
                row["run_id"],
                row.get("status") or "",
                row.get("command") or "",
                f"{row.get('tokens') or 0:,}",
                (row.get("updated") or "")[:19].replace("T", " "),
            )
        )
        for row in runs
    ]
    widths = [max(len(_COLUMNS[i]), *(len(r[i]) for r in rows)) for i in range(len(_COLUMNS))]
    return "".join(
        "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip() + "\n"
        for cells in [_COLUMNS, *rows]
    )
