"""The ``agentstream`` command. Each subcommand lives in its own module and is
imported only when it runs, so ``agentstream --version`` stays as fast as Python.

Command ``NAME`` lives in ``agentstream.cli.NAME_cmd``, which defines
``configure(parser)`` and ``run(args) -> int`` (the exit code); its one-line
summary is in :data:`COMMANDS`.
"""

from __future__ import annotations

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
    "export": "Export a recorded stream or session log as OpenTelemetry traces",
    "wrap": "Run any agent CLI and re-emit its stream with every guarantee",
    "acp": "Serve agentstream's agent, or any agent CLI, as an ACP agent on stdio",
    "dialects": "List the wire formats agentstream reads and writes",
    "schema": "Print the protocol's JSON Schema",
    "sessions": "List stored agent sessions",
    "runs": "List runs on the event bus",
    "usage": "Tokens, tool calls and cost from the agent CLIs' session logs",
    "follow": "Stream one run's events live",
    "watch": "Stream every run's events live",
    "logs": "Stream a file's new lines as log events",
    "send": "Publish an event to the bus",
    "submit": "Queue a prompt for a worker",
    "worker": "Run queued prompts",
    "completion": "Print a shell completion script (bash, zsh or fish)",
    "serve": "Serve runs over HTTP/SSE and a live web page",
}


def _top_help() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name.ljust(width)}  {summary}" for name, summary in COMMANDS.items())
    return (
        "usage: agentstream [--version] COMMAND [ARGS...]\n\n"
        "Canonical streaming output for agent-first command-line tools.\n\n"
        f"commands:\n{rows}\n\n"
        "Run 'agentstream help COMMAND' (or 'agentstream COMMAND --help') for a command's options.\n"
    )


def _version() -> str:
    from agentstream._version import PROTOCOL_VERSION, __version__

    return f"agentstream {__version__} (protocol v{PROTOCOL_VERSION})\n"


def _unknown_command(name: str) -> int:
    from difflib import get_close_matches

    near = get_close_matches(name, COMMANDS, n=1)
    hint = f" (did you mean '{near[0]}'?)" if near else ""
    sys.stderr.write(f"agentstream: unknown command '{name}'{hint}\nRun 'agentstream --help' for the list.\n")
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help") or args == ["help"]:
        (sys.stdout if args else sys.stderr).write(_top_help())
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        sys.stdout.write(_version())
        return 0
    if args[0] == "help":
        if args[1] not in COMMANDS:
            return _unknown_command(args[1])
        args = [args[1], "--help"]
    name = args[0]
    if name not in COMMANDS:
        return _unknown_command(name)
    from agentstream.cli._help import build_parser

    module = importlib.import_module(f"agentstream.cli.{name}_cmd")
    parsed = build_parser(name).parse_args(args[1:])
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
