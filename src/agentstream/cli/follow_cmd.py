"""``agentstream follow RUN``: a run's events as NDJSON, live, ending with exactly one terminal line."""

from __future__ import annotations

import argparse

from agentstream.bus.publish import add_bus_option


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN", help="the run id (its session id); see 'agentstream runs'")
    add_bus_option(parser)
    add_follow_options(parser)
    parser.add_argument("--from-seq", type=int, default=0, metavar="N", help="start at this seq (default 0)")
    parser.add_argument("--wait", action="store_true", help="wait for a run that has not started yet")


def add_follow_options(parser: argparse.ArgumentParser, *, timeout_flag: str = "--timeout") -> None:
    """What every command that follows a run offers (follow, send --follow, submit --follow)."""
    parser.add_argument(
        timeout_flag,
        dest="follow_timeout",
        type=float,
        default=None,
        metavar="S",
        help="stop following after S seconds",
    )
    parser.add_argument(
        "--reconnect-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="how long to keep retrying an unreachable bus before giving up (default 30)",
    )


def follow_run(args: argparse.Namespace, run_id: str, *, command: str, wait: bool, from_seq: int = 0) -> int:
    from agentstream.bus import open_bus
    from agentstream.bus.follow import FollowOptions, follow
    from agentstream.observe.otel import otel_sink_from_environ

    otel = otel_sink_from_environ()
    options = FollowOptions(
        run_id=run_id,
        from_seq=from_seq,
        timeout=args.follow_timeout,
        wait=wait,
        reconnect_for=args.reconnect_timeout,
        command=command,
        observer=otel.on_event if otel else None,
    )
    return follow(lambda: open_bus(args.bus), options)


def run(args: argparse.Namespace) -> int:
    return follow_run(
        args, args.run_id, command=f"agentstream follow {args.run_id}", wait=args.wait, from_seq=args.from_seq
    )
