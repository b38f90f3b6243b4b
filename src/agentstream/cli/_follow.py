"""Following a run from the command line: shared by follow, send --follow and submit --follow."""

from __future__ import annotations

import argparse

from agentstream.cli._options import seconds

__all__ = ["add_follow_options", "follow_run"]


def add_follow_options(parser: argparse.ArgumentParser, *, timeout_flag: str = "--timeout") -> None:
    """What every command that follows a run offers (follow, send --follow, submit --follow)."""
    parser.add_argument(
        timeout_flag,
        dest="follow_timeout",
        type=seconds,
        default=None,
        metavar="S",
        help="stop following after S seconds",
    )
    parser.add_argument(
        "--reconnect-timeout",
        type=seconds,
        default=30.0,
        metavar="S",
        help="how long to keep retrying a bus that went away (default 30); one never reached is"
        " given up after its connect timeout (default 2 s) unless --wait",
    )


def follow_run(args: argparse.Namespace, run_id: str, *, command: str, wait: bool, from_seq: int = 0) -> int:
    from agentstream.bus import connect_timeout, open_bus
    from agentstream.bus.follow import FollowOptions, follow
    from agentstream.observe.otel import otel_sink_from_environ

    otel = otel_sink_from_environ()
    options = FollowOptions(
        run_id=run_id,
        from_seq=from_seq,
        timeout=args.follow_timeout,
        wait=wait,
        reconnect_for=args.reconnect_timeout,
        connect_for=connect_timeout(args.bus),
        command=command,
        observer=otel.on_event if otel else None,
    )
    return follow(lambda: open_bus(args.bus), options)
