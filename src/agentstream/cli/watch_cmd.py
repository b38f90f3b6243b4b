"""``agentstream watch``: every run's events as they reach the bus (a tap on the whole bus)."""

from __future__ import annotations

import argparse

from agentstream.cli._bus_options import add_bus_option
from agentstream.cli._options import positive_int, seconds


def configure(parser: argparse.ArgumentParser) -> None:
    add_bus_option(parser)
    parser.add_argument(
        "--run", action="append", default=[], metavar="ID", help="only these runs (glob; repeatable)"
    )
    parser.add_argument(
        "--type", action="append", default=[], metavar="TYPE", help="only this event type (repeatable)"
    )
    parser.add_argument(
        "--name",
        action="append",
        default=[],
        metavar="GLOB",
        help="only event/step/progress/tool events so named",
    )
    start = parser.add_mutually_exclusive_group()
    start.add_argument(
        "--since", metavar="CURSOR", default=None, help="resume after a cursor from a previous watch"
    )
    start.add_argument("--from-start", action="store_true", help="begin with the oldest events the bus keeps")
    parser.add_argument("--timeout", type=seconds, default=None, metavar="S", help="stop after S seconds")
    parser.add_argument(
        "--count", type=positive_int, default=None, metavar="N", help="stop after printing N events"
    )
    parser.add_argument(
        "--reconnect-timeout",
        type=seconds,
        default=30.0,
        metavar="S",
        help="retry an unreachable bus this long",
    )


def run(args: argparse.Namespace) -> int:
    from agentstream.bus import check_bus_url, open_bus
    from agentstream.bus.follow import WatchFilter, watch

    check_bus_url(args.bus)  # a usage error, said on stderr too, before watching (as follow does)
    keep = WatchFilter(runs=args.run, types=args.type, names=args.name)
    return watch(
        lambda: open_bus(args.bus),
        since="0" if args.from_start else args.since,
        keep=keep,
        timeout=args.timeout,
        count=args.count,
        reconnect_for=args.reconnect_timeout,
    )
