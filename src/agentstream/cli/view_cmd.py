"""``agentstream view``: render any agent CLI's stream for a person as it arrives."""

from __future__ import annotations

import argparse
import sys

from agentstream.cli._options import add_color_option, add_input_argument, note_after_end, open_input


def configure(parser: argparse.ArgumentParser) -> None:
    add_input_argument(parser)
    add_color_option(parser)


def run(args: argparse.Namespace) -> int:
    """Exit with the stream's own exit code (a stream that never finished counts as failed)."""
    from agentstream import protocol as p
    from agentstream.consumer import read
    from agentstream.render import FdWriter
    from agentstream.render.text import TextSink

    # An unusable input (no such file, stdin closed) is a usage error before the sink exists.
    reader = read(open_input(args.file), args.from_dialect, label=args.file)
    sys.stdout.flush()
    sink = TextSink(FdWriter(sys.stdout.fileno()), color=args.color)
    exit_code = 1
    try:
        for event in reader:
            sink.emit(event)
            if isinstance(event, p.Result):
                exit_code = event.exit_code  # a session of many turns: the last turn's
    finally:
        sink.close()  # also on Ctrl-C: the spinner's line is erased, not left behind
    note_after_end(reader)
    return exit_code
