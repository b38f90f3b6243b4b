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

import errno
import gc
import importlib
import sys

TYPE_CHECKING = False  # not ``typing``: signal handlers go in before any heavy import
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence
    from types import ModuleType
    from typing import Any, NoReturn

    from agentstream.errors import AgentstreamError
    from agentstream.plugins import Registry
    from agentstream.render import OutputFailed

__all__ = [
    "COMMANDS",
    "FOLLOW_COMMANDS",
    "STREAM_COMMANDS",
    "command_registry",
    "command_summary",
    "entry",
    "main",
    "run_as_executable",
]

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
            check=_check_command,
        )
    return _registry


def _check_command(name: str, module: object) -> str | None:
    """What keeps a plugin's object from being a command, or ``None``: it needs ``configure`` and ``run``."""
    from agentstream.plugins import describe

    missing = [f"{attr}()" for attr in ("configure", "run") if not callable(getattr(module, attr, None))]
    if not missing:
        return None
    return (
        "is not a command: expected a module with configure(parser) and run(args) -> int, "
        f"got {describe(module)} without {' and '.join(missing)}"
    )


def command_summary(name: str, module: ModuleType | None) -> str:
    """A command's line in ``--help``; a plugin's without one is reported (it would show a blank line)."""
    if name in COMMANDS:
        return COMMANDS[name]
    summary = getattr(module, "SUMMARY", None) or (module.__doc__ or "").strip().partition("\n")[0]
    if summary:
        return str(summary)
    from agentstream.plugins import report_once

    registry = command_registry()
    report_once(
        f"{registry.where(name)} has no SUMMARY (fix: "
        f"{registry.fix_for(name, 'its module must set SUMMARY to a one-line description')})"
    )
    return "(no summary)"


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


def _command(name: str) -> ModuleType:
    """The module of command ``name`` (known to exist); built-ins are found without reading any entry points."""
    if name in COMMANDS:
        return importlib.import_module(f"agentstream.cli.{name}_cmd")
    module = command_registry().get(name)
    assert module is not None
    return module


def _unknown_command(name: str) -> int:
    """Exit 2 for a name that gives no command: why its plugin cannot be used, or the nearest valid name."""
    registry = command_registry()
    problem = registry.problem(name)
    if problem is not None:
        sys.stderr.write(f"agentstream: {problem.message}\n  fix: {problem.fix}\n")
        return 2
    from difflib import get_close_matches

    near = get_close_matches(name, registry.usable_names(), n=1)
    hint = f" (did you mean '{near[0]}'?)" if near else ""
    sys.stderr.write(f"agentstream: unknown command '{name}'{hint}\nRun 'agentstream --help' for the list.\n")
    return 2


def _exit_code(name: str, code: object) -> int:
    """What a command's ``run`` returned, checked: a plugin's wrong return is its error, named, not a traceback."""
    if isinstance(code, int):
        return code
    from agentstream.errors import AgentstreamError, ErrorCode
    from agentstream.plugins import describe

    registry = command_registry()
    raise AgentstreamError(
        f"{registry.where(name)} returned {describe(code)} from run(), expected an exit code (int)",
        code=ErrorCode.EXCEPTION,
        fix=registry.fix_for(name, "its run(args) must return an int, 0 for success"),
    )


STREAM_COMMANDS: frozenset[str] = frozenset({"exec", "demo", "wrap", "logs", "worker"})
"""Commands whose stdout is a stream of their own: even a usage error or an early signal is one."""
FOLLOW_COMMANDS: frozenset[str] = frozenset({"follow", "watch"})
"""Commands that print other runs' events: they always end with their one synthetic terminal line."""


def entry() -> NoReturn:
    """The ``agentstream`` executable: :func:`main`, then an exit no late signal can change."""
    global _collector_held
    gc.disable()  # until the command line is parsed: see _imports_done
    _collector_held = True
    run_as_executable(_run)


def run_as_executable(run: Callable[[list[str]], int]) -> NoReturn:
    """A console script's whole life: ``run(argv)`` between our signal handling and an exit it cannot change.

    ``run`` calls :func:`agentstream._signals.deliver_held` once its command line
    is parsed; until then a signal is only held.
    """
    from agentstream import _signals

    _signals.install_cli_handlers()  # before anything heavy: no signal may go unreported
    _signals.wake_main_thread_on_signals()
    try:
        code = run(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    _signals.ignore_late_signals()
    _leave_the_heap_to_the_exit()
    sys.exit(code)


_collector_held = False
"""Whether :func:`entry` holds the cyclic garbage collector off while the command is imported."""


def _imports_done() -> None:
    """Start the garbage collector that :func:`entry` held off, with what is loaded so far frozen.

    Importing a command makes some fifteen thousand tracked objects that live as
    long as the process, none of them garbage: the collections their making set
    off cost about a twentieth of a short command's instructions, and each full
    collection afterwards would walk them again. Frozen, none does.
    """
    global _collector_held
    if _collector_held:
        _collector_held = False
        gc.freeze()
        gc.enable()


def _leave_the_heap_to_the_exit() -> None:
    """Spare the interpreter's shutdown its collections over every object the run leaves behind.

    A model SDK leaves a few hundred thousand, its pydantic classes all in reference cycles:
    collecting and freeing them at shutdown cost an ``exec`` that called the model a quarter of
    its CPU (0.5 s of 1.9 s with ``anthropic``, 0.2 s of 1.0 s with ``openai``). What is garbage
    now is collected, so its finalizers run as they did; what is left is frozen, out of the
    shutdown's collections, and its memory goes back with the process.
    """
    gc.collect()
    gc.freeze()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command and return its exit code (signal handlers are put back afterwards)."""
    from agentstream import _signals

    handlers = _signals.install_cli_handlers()
    try:
        return _run(list(sys.argv[1:] if argv is None else argv))
    finally:
        handlers.restore()


def _run(args: list[str]) -> int:
    if sys.stdout is None:  # started with fd 1 closed (``>&-``)
        sys.stderr.write("agentstream: OUTPUT_ERROR: stdout is not open (was it closed with >&-?)\n")
        return 1
    if not args or args[0] in ("-h", "--help") or args == ["help"]:
        (sys.stdout if args else sys.stderr).write(_top_help())
        return _flushed(0 if args else 2)
    if args[0] in ("-V", "--version"):
        sys.stdout.write(_version())
        return _flushed(0)
    if args[0] == "help":
        args = [args[1], "--help"]
    name = args[0]
    if name not in COMMANDS and command_registry().get(name, report=False) is None:
        return _unknown_command(name)
    from agentstream import _signals
    from agentstream.cli._options import check_output_choice
    from agentstream.errors import AgentstreamError, error_text
    from agentstream.render import OutputFailed

    parsed: argparse.Namespace | None = None
    try:
        module = _command(name)  # inside the guard: a signal during its imports still ends well
        parsed = _parser(name, module).parse_args(args[1:])
        _imports_done()
        _signals.deliver_held()
        check_output_choice(parsed)
        return _flushed(_exit_code(name, module.run(parsed)))
    except AgentstreamError as exc:
        sys.stderr.write(error_text(f"agentstream {name}", exc.code, exc.message, exc.fix))
        return _failed_before_start(name, exc, args, parsed)
    except _signals.Interrupted as stop:
        return _failed_before_start(name, _interrupted(stop.signum), args, parsed)
    except KeyboardInterrupt:
        return 130
    except OutputFailed as failure:
        return _output_failed(name, failure)
    except OSError as exc:
        if exc.filename is not None or exc.errno not in _OUTPUT_ERRNOS:
            raise
        from agentstream.render import output_failure

        return _output_failed(name, output_failure(exc))


def _parser(name: str, module: ModuleType) -> argparse.ArgumentParser:
    """The command's parser; its errors are :class:`UsageError`, so every command reports them alike."""
    from agentstream.cli._help import build_parser
    from agentstream.errors import UsageError

    parser = build_parser(name, module)

    def usage_error(message: str) -> NoReturn:
        raise UsageError(message, fix=f"see '{parser.prog} --help'")

    parser.error = usage_error  # type: ignore[method-assign]
    return parser


_OUTPUT_ERRNOS = frozenset({errno.EPIPE, errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EBADF})
"""Write errors on stdout (an error naming a file is about that file, not stdout)."""


def _flushed(code: int) -> int:
    """Flush stdout now, so a write error is ours to report and not the interpreter's at exit."""
    if sys.stdout is not None:
        sys.stdout.flush()
    return code


def _output_failed(name: str, failure: OutputFailed) -> int:
    """stdout could not be written: 141 quietly for a reader that left, else one line and exit 1."""
    from agentstream.render import OutputClosed, silence_stdout

    if not isinstance(failure, OutputClosed):
        sys.stderr.write(f"agentstream {name}: {failure.error_code}: {failure.reason}\n")
    try:
        silence_stdout()
    except OSError:
        pass
    return failure.status


def _interrupted(signum: int) -> AgentstreamError:
    import signal

    from agentstream.errors import AgentstreamError, ErrorCode, exit_code_for_signal

    error = AgentstreamError(f"interrupted by {signal.Signals(signum).name}", code=ErrorCode.INTERRUPTED)
    error.exit_code = exit_code_for_signal(signum)
    return error


def _failed_before_start(
    name: str, exc: AgentstreamError, args: list[str], parsed: argparse.Namespace | None
) -> int:
    """The stdout a command owes when it stops before its own stream began (see docs/cli.md)."""
    from agentstream.errors import ErrorCode

    code = exc.exit_code
    if name in STREAM_COMMANDS:
        from agentstream.stream import fail_before_start, stream_was_written

        if not stream_was_written():
            output_format, dialect = _output_choice(args, parsed)
            return fail_before_start(f"{name}", exc, output_format=output_format, dialect=dialect)
    elif name in FOLLOW_COMMANDS:
        from agentstream.bus.follow import synthetic_result
        from agentstream.protocol import new_id

        subtype = "interrupted" if exc.code == ErrorCode.INTERRUPTED else "invalid_input"
        line = synthetic_result(new_id(name), 0, subtype, exc, code, [], command=f"agentstream {name}")
        sys.stdout.buffer.write(line)
        return _flushed(code)
    return code


def _output_choice(args: list[str], parsed: argparse.Namespace | None) -> tuple[Any, str | None]:
    """The output format and dialect asked for, read from the raw arguments when parsing failed."""
    from agentstream.render import OUTPUT_FORMATS

    if parsed is not None and hasattr(parsed, "output_format"):
        from agentstream.cli._options import check_output_choice, resolve_output_format
        from agentstream.errors import UsageError

        try:
            check_output_choice(parsed)
        except UsageError:  # the dialect cannot go with that format: the format asked for, canonical
            return parsed.output_format, None
        resolve_output_format(parsed)  # unset: text for a person, stream-json for a program
        return parsed.output_format, getattr(parsed, "dialect", None)
    output_format = "stream-json"
    for i, arg in enumerate(args):
        value = None
        if arg in ("-o", "--output-format") and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--output-format="):
            value = arg.split("=", 1)[1]
        if value in OUTPUT_FORMATS:
            output_format = value
    return output_format, None
