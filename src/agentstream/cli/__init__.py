"""The ``agentstream`` command. Each subcommand lives in its own module and is
imported only when it runs, so ``agentstream --version`` stays as fast as Python.

Command ``NAME`` lives in ``agentstream.cli.NAME_cmd``, which defines
``configure(parser)`` and ``run(args) -> int`` (the exit code); its one-line
summary is in :data:`COMMANDS`. Commands are also found in the
``agentstream.commands`` entry-point group (:mod:`agentstream.plugins`): a
plugin's entry point names a module of the same shape, with a ``SUMMARY``.
Built-in commands are dispatched without reading any entry points.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

TYPE_CHECKING = False  # not typing's: the command's start-up does not import typing
if TYPE_CHECKING:
    from agentstream.plugins import Registry

__all__ = ["COMMANDS", "command_registry", "command_summary", "main"]

COMMANDS: dict[str, str] = {
    "exec": "Run the agent on a prompt and stream what it does",
    "demo": "Emit a short sample stream (shows the producer's formats)",
    "validate": "Check a stream against the protocol's invariants",
    "view": "Render a stream for a person, live",
    "convert": "Convert a stream from one dialect to another",
    "export": "Export a recorded stream or session log as OpenTelemetry traces",
    "wrap": "Run any agent CLI and re-emit its stream with every guarantee",
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


_registry: Registry[ModuleType] | None = None


def command_registry() -> Registry[ModuleType]:
    """The commands, built-in and plugged in. Made on first use: the common path never needs it."""
    global _registry
    if _registry is None:
        from agentstream.plugins import Registry

        _registry = Registry(
            "agentstream.commands",
            {name: f"agentstream.cli.{name}_cmd" for name in COMMANDS},
            kind="command",
            accepts=lambda module: (
                callable(getattr(module, "configure", None)) and callable(getattr(module, "run", None))
            ),
        )
    return _registry


def command_summary(name: str, module: ModuleType | None) -> str:
    if name in COMMANDS:
        return COMMANDS[name]
    summary = getattr(module, "SUMMARY", None) or (module.__doc__ or "").strip().partition("\n")[0]
    return str(summary)


def _top_help() -> str:
    registry = command_registry()
    plugins = {name: registry.get(name) for name in registry.names() if name not in COMMANDS}
    summaries = {
        **COMMANDS,
        **{name: command_summary(name, m) for name, m in plugins.items() if m is not None},
    }
    width = max(map(len, summaries))
    rows = "\n".join(f"  {name.ljust(width)}  {summary}" for name, summary in summaries.items())
    return (
        "usage: agentstream [--version] COMMAND [ARGS...]\n\n"
        "Canonical streaming output for agent-first command-line tools.\n\n"
        f"commands:\n{rows}\n\n"
        "Run 'agentstream help COMMAND' (or 'agentstream COMMAND --help') for a command's options.\n"
    )


def _version() -> str:
    from agentstream._version import PROTOCOL_VERSION, __version__

    return f"agentstream {__version__} (protocol v{PROTOCOL_VERSION})\n"


def _command(name: str) -> ModuleType | None:
    """The module of command ``name``; built-ins are found without reading any entry points."""
    if name in COMMANDS:
        return importlib.import_module(f"agentstream.cli.{name}_cmd")
    return command_registry().get(name)


def _unknown_command(name: str) -> int:
    from difflib import get_close_matches

    near = get_close_matches(name, command_registry().names(), n=1)
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
        args = [args[1], "--help"]
    name = args[0]
    module = _command(name)
    if module is None:
        return _unknown_command(name)
    from agentstream.cli._help import build_parser

    parsed = build_parser(name, module).parse_args(args[1:])
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
