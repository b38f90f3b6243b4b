"""``agentstream runs``: the runs on the bus, newest first, as one JSON envelope."""

from __future__ import annotations

import argparse

from agentstream.bus.publish import add_bus_option

STATUSES = ("queued", "running", "succeeded", "failed", "interrupted")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--status", action="append", choices=STATUSES, default=[], help="only runs in this state (repeatable)"
    )
    parser.add_argument("--limit", type=int, default=20, metavar="N", help="at most N runs (default 20)")
    add_bus_option(parser)


def run(args: argparse.Namespace) -> int:
    from agentstream.actions import runs_action
    from agentstream.bus import open_bus
    from agentstream.bus.summary import RUNS_COMMAND, runs_envelope
    from agentstream.envelope import print_envelope, print_error
    from agentstream.errors import AgentstreamError, UsageError

    try:
        if args.limit < 1:
            raise UsageError(f"--limit must be at least 1, not {args.limit}", fix="pass --limit 20, say")
        with open_bus(args.bus) as bus:
            envelope = runs_envelope(bus, statuses=args.status, limit=args.limit)
    except AgentstreamError as exc:
        return print_error(RUNS_COMMAND, exc, [runs_action()])
    return print_envelope(envelope)
