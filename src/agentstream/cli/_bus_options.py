"""The ``--bus`` and ``--no-publish`` options every bus-aware command shares."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from agentstream.bus import BUS_ENV

if TYPE_CHECKING:
    from agentstream.stream import Stream

__all__ = ["add_bus_option", "add_publish_options", "bus_url_of", "publish"]


def add_bus_option(parser: argparse.ArgumentParser) -> None:
    """``--bus URL`` alone, for commands that only read the bus."""
    parser.add_argument(
        "--bus",
        metavar="URL",
        default=None,
        help=f"event bus URL: sqlite:///PATH or redis[s]://… (default: ${BUS_ENV}, else the embedded SQLite bus)",
    )


def add_publish_options(parser: argparse.ArgumentParser, *, default: bool = True) -> None:
    """``--bus URL`` and ``--no-publish`` (or ``--publish`` when publishing is opt-in)."""
    add_bus_option(parser)
    if default:
        parser.add_argument(
            "--no-publish",
            action="store_true",
            help="do not record this run on the bus (follow will not see it)",
        )
    else:
        parser.add_argument(
            "--publish",
            dest="no_publish",
            action="store_false",
            default=True,
            help="also record this run on the bus, so follow/watch can see it",
        )


def bus_url_of(args: argparse.Namespace) -> str | None:
    """The ``--bus`` value, or None for the default (env, then embedded)."""
    return getattr(args, "bus", None)


def publish(stream: Stream, args: argparse.Namespace) -> Callable[[], None]:
    """Attach the bus publisher the command line asked for; returns its close function."""
    from agentstream.bus.publish import attach_publisher

    return attach_publisher(stream, bus_url_of(args), enabled=not getattr(args, "no_publish", False))
