"""``agentstream follow RUN``: a run's events as NDJSON, live, ending with exactly one terminal line."""

from __future__ import annotations

import argparse

from agentstream.cli._bus_options import add_bus_option
from agentstream.cli._follow import add_follow_options, follow_run
from agentstream.cli._options import non_negative_int


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN", help="the run id (its session id); see 'agentstream runs'")
    add_bus_option(parser)
    add_follow_options(parser)
    parser.add_argument(
        "--from-seq", type=non_negative_int, default=0, metavar="N", help="start at this seq (default 0)"
    )
    parser.add_argument("--wait", action="store_true", help="wait for a run that has not started yet")


def run(args: argparse.Namespace) -> int:
    from agentstream.bus import check_bus_url

    # A malformed URL is a usage error, found before following: its one terminal line (docs/cli.md).
    check_bus_url(args.bus)
    return follow_run(
        args, args.run_id, command=f"agentstream follow {args.run_id}", wait=args.wait, from_seq=args.from_seq
    )
