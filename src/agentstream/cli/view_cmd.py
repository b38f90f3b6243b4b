"""``agentstream view``: render a stream for a person as it arrives."""

from __future__ import annotations

import argparse
import sys

from agentstream.cli._options import add_input_argument, open_input


def configure(parser: argparse.ArgumentParser) -> None:
    add_input_argument(parser)
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto", help="colour on stderr")


def run(args: argparse.Namespace) -> int:
    """Exit with the stream's own exit code, or 1 when it never finished."""
    from agentstream import protocol as p
    from agentstream._lines import LineTooLong, iter_lines
    from agentstream.errors import MalformedEventError
    from agentstream.render import FdWriter
    from agentstream.render.text import TextSink

    color = {"auto": None, "always": True, "never": False}[args.color]
    sys.stdout.flush()
    sink = TextSink(FdWriter(sys.stdout.fileno()), color=color)
    result: p.Result | None = None
    for item in iter_lines(open_input(args.file)):
        if isinstance(item, LineTooLong) or not item.data.strip():
            continue
        try:
            event = p.decode(item.data)
        except MalformedEventError as exc:
            sys.stderr.write(f"line {item.number}: {exc.message}\n")
            continue
        sink.emit(event)
        if isinstance(event, p.Result):
            result = event
    sink.close()
    return result.exit_code if result is not None else 1
