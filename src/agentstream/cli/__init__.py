"""The ``agentstream`` command. Each subcommand lives in its own module and is
imported only when it runs, so ``agentstream --version`` stays as fast as Python.

Command ``NAME`` lives in ``agentstream.cli.NAME_cmd``, which defines
``configure(parser)`` and ``run(args) -> int`` (the exit code); its one-line
summary is in :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["COMMANDS", "main"]

COMMANDS: dict[str, str] = {
    "exec": "Run the agent on a prompt and stream what it does",
    "demo": "Emit a short sample stream (shows the producer's formats)",
    "validate": "Check a stream against the protocol's invariants",
    "view": "Render a stream for a person, live",
    "convert": "Convert a stream from one dialect to another",
    "wrap": "Run any agent CLI and re-emit its stream with every guarantee",
    "dialects": "List the wire formats agentstream reads and writes",
    "schema": "Print the protocol's JSON Schema",
    "sessions": "List stored agent sessions",
    "runs": "List runs on the event bus",
    "follow": "Stream one run's events live",
    "watch": "Stream every run's events live",
    "logs": "Stream a file's new lines as log events",
    "send": "Publish an event to the bus",
    "submit": "Queue a prompt for a worker",
    "worker": "Run queued prompts",
    "serve": "Serve runs over HTTP/SSE and a live web page",
}


def _top_help() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name.ljust(width)}  {summary}" for name, summary in COMMANDS.items())
    return (
        "usage: agentstream [--version] COMMAND [ARGS...]\n\n"
        "Canonical streaming output for agent-first command-line tools.\n\n"
        f"commands:\n{rows}\n\n"
        "Run 'agentstream COMMAND --help' for a command's options.\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        (sys.stdout if args else sys.stderr).write(_top_help())
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        from agentstream._version import __version__

        sys.stdout.write(f"agentstream {__version__}\n")
        return 0
    name = args[0]
    if name not in COMMANDS:
        from difflib import get_close_matches

        near = get_close_matches(name, COMMANDS, n=1)
        hint = f" (did you mean '{near[0]}'?)" if near else ""
        sys.stderr.write(
            f"agentstream: unknown command '{name}'{hint}\nRun 'agentstream --help' for the list.\n"
        )
        return 2
    module = importlib.import_module(f"agentstream.cli.{name}_cmd")
    parser = argparse.ArgumentParser(prog=f"agentstream {name}", description=COMMANDS[name])
    module.configure(parser)
    parsed = parser.parse_args(args[1:])
    from agentstream.errors import AgentstreamError

    try:
        return int(module.run(parsed))
    except AgentstreamError as exc:
        fix = f"\n  fix: {exc.fix}" if exc.fix else ""
        sys.stderr.write(f"agentstream {name}: {exc.code}: {exc.message}{fix}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 141
