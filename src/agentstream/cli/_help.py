"""Help for people: each command's parser with examples, ``agentstream help``, the CLI
reference in ``docs/cli.md`` (and, in ``completion_cmd``, shell completion), all built from the same argparse
definitions so they cannot drift apart.

Imported only when a command runs or help is asked for; ``--version`` never loads it.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import re
from collections.abc import Iterator
from types import ModuleType

from agentstream.cli import COMMANDS, command_summary

__all__ = ["EXAMPLES", "build_parser", "reference_markdown"]

EXAMPLES: dict[str, tuple[str, ...]] = {
    "exec": (
        'agentstream exec --provider demo "What is in this directory?"',
        'agentstream exec -p "fix the failing test" -o json',
        'agentstream exec --dialect claude -p "hello" | jq .type',
    ),
    "demo": ("agentstream demo", "agentstream demo -o text", "agentstream demo --dialect gemini --fail"),
    "validate": (
        "agentstream validate run.ndjson --expect-exit 0",
        "claude -p hi --output-format stream-json --verbose | agentstream validate -",
    ),
    "view": ("agentstream view run.ndjson", "agentstream exec -p hi | agentstream view"),
    "convert": (
        "agentstream convert session.ndjson --to gemini",
        "agentstream convert --from codex -o json < events.jsonl",
    ),
    "wrap": (
        "agentstream wrap -- gemini -p hi --output-format stream-json",
        "agentstream wrap --to claude -- codex exec --json 'list files'",
    ),
    "acp": (
        "agentstream acp --provider anthropic --model claude-sonnet-4-5",
        "agentstream acp --cli claude --permission-mode acceptEdits",
    ),
    "dialects": ("agentstream dialects", "agentstream dialects --json"),
    "schema": ("agentstream schema > protocol.schema.json",),
    "sessions": ("agentstream sessions", "agentstream sessions --json --limit 5"),
    "runs": ("agentstream runs", "agentstream runs --status running --limit 5"),
    "follow": ("agentstream follow RUN_ID", "agentstream follow RUN_ID --from-seq 120"),
    "watch": ("agentstream watch", "agentstream watch --bus redis://localhost:6379/0"),
    "logs": ("agentstream logs --follow app.log", "agentstream logs --follow app.log --publish"),
    "send": ('agentstream send deploy --data \'{"version": "1.2"}\'',),
    "submit": ('agentstream submit "summarise README.md" --follow',),
    "worker": ("agentstream worker", "agentstream worker --concurrency 2 --max-jobs 10"),
    "export": ("OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 agentstream export otel run.ndjson",),
    "serve": (
        "agentstream serve",
        "AGENTSTREAM_TOKEN=secret agentstream serve --host 0.0.0.0 --bus redis://localhost:6379/0",
    ),
    "usage": ("agentstream usage", "agentstream usage ~/.claude/projects --by model --since 2026-11-01"),
    "completion": (
        "agentstream completion bash > /etc/bash_completion.d/agentstream",
        "agentstream completion fish > ~/.config/fish/completions/agentstream.fish",
    ),
}
"""Two or three typical invocations per command, shown at the end of ``--help``."""


def build_parser(name: str, module: ModuleType | None = None) -> argparse.ArgumentParser:
    """The full parser of command ``name`` (a built-in, or a plugin's ``module``), examples as the epilog."""
    if module is None:
        module = importlib.import_module(f"agentstream.cli.{name}_cmd")
    examples = EXAMPLES.get(name, ()) or tuple(getattr(module, "EXAMPLES", ()))
    epilog = "examples:\n" + "\n".join(f"  {line}" for line in examples) if examples else None
    parser = argparse.ArgumentParser(
        prog=f"agentstream {name}",
        description=command_summary(name, module),
        epilog=epilog,
        formatter_class=_UNSIZED_FORMATTER,
    )
    module.configure(parser)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter  # help is sized to the terminal
    return parser


_UNSIZED_FORMATTER = functools.partial(argparse.RawDescriptionHelpFormatter, width=80)
"""What argparse formats its own checks with while options are added: each ``add_argument`` makes a
formatter, and one without a width asks the terminal (importing ``shutil``), a start-up cost of every
command for a size that only help text needs."""


# -- the reference in docs/cli.md ------------------------------------------------------

_REFERENCE_HEAD = """\
# Command reference

Generated from the commands' own definitions (`agentstream help COMMAND` prints the
same); a test fails when this file and the code disagree. What the commands do is
explained in the other documents: [agent](agent.md), [consumer](consumer.md),
[dialects](dialects.md), [bus](bus.md), [protocol](protocol.md).

On a terminal, commands print for people; piped (or with `--json` / `-o`), they print
for programs. Everything but the chosen output goes to stderr. What they print for
people (the text format, tables, error messages) shows the controls, escape
sequences and bidi controls it quotes from a model, a tool or a file as escapes
(`\\e`, `\\r`, `\\x9b`, `\\u202e`), so none can act on the terminal; the machine
formats keep every character, as JSON escapes.

Exit codes: 0 success, 1 error, 2 bad usage or input, 3 max turns, 124 timeout,
127 command not found, 129/130/143 SIGHUP/SIGINT/SIGTERM, 141 the reader of stdout
went away. A command that streams events always exits with `result.exit_code`; a
signal after its `result` does not change it. `convert`, whose output is a stream
too, ends it whole when a signal stops it: the open turn gets its made-up
`INTERRUPTED` ending (no line cut), and it exits 128 + the signal. Any other
failure to write stdout (a full disk, stdout closed) is exit 1 with one
`OUTPUT_ERROR` line on stderr.
A signal is acted on at once, whatever the command is waiting for: its own threads
never take one, and one that lands just before a blocking wait still cuts it short.
The one wait a signal does not cut is the line being written, so that no line is
cut; if that line waits on a reader that stopped reading (a full pipe), a second
signal ends the process at once, without its ending: 128 + the first signal, and
a line on stderr saying stdout is not being read.
The processes it starts inherit no blocked signal.

A usage error (an unknown flag, a value that is not a number where one is meant, a
negative count or number of seconds, 0 where it must be more, an unknown dialect, a
malformed `--bus` URL, an input that cannot be read: a missing `FILE`, or stdin
closed with `<&-` when `FILE` is `-`) is exit 2
before anything runs, with the message and its fix on stderr. `exec`, `demo`, `wrap`,
`logs` and `worker` still write a whole stream on stdout (`start`, `error`
`INVALID_INPUT`, `result`); `follow` and `watch` their one synthetic terminal line;
the other commands nothing. The bus's connect timeout is
`$AGENTSTREAM_BUS_CONNECT_TIMEOUT` (default 2 s; see [bus](bus.md)).

`validate`, `view`, `convert` and `export` detect the input's dialect (unless
`--from` names it) as the reader does ([consumer](consumer.md#dialect-detection)):
from its first lines, or from the one JSON document a CLI's `--output-format json`
writes. When no dialect matches, the input is read as canonical, and said so:
`convert` writes an `UNKNOWN_DIALECT` error event, `validate` the same message and
fix on stderr. An input with no events at all (empty, blank lines, noise) is the
reader's made-up failed ending to `convert` and `view`, a violation to `validate`
(exit 1), and nothing to export to `export` (exit 2, `INVALID_INPUT` on stderr).
"""


def reference_markdown() -> str:
    """``docs/cli.md``: every command's summary, usage, options and examples."""
    return "\n".join([_REFERENCE_HEAD, *(_command_reference(name, build_parser(name)) for name in COMMANDS)])


def _command_reference(name: str, parser: argparse.ArgumentParser) -> str:
    usage = " ".join(parser.format_usage().split())[len("usage: ") :]
    lines = [f"## {name}", "", COMMANDS[name] + ".", "", "```", usage, "```", ""]
    rows = list(_option_rows(parser))
    if rows:
        lines += ["| option | meaning |", "|---|---|", *rows, ""]
    examples = EXAMPLES.get(name, ())
    if examples:
        lines += ["Examples:", "", "```sh", *examples, "```", ""]
    return "\n".join(lines)


def _option_rows(parser: argparse.ArgumentParser) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        yield f"| {_escape(_invocation(action))} | {_escape(_meaning(action))} |"


def _invocation(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    value = ""
    if action.nargs != 0:
        if action.choices:
            value = " " + "|".join(str(choice) for choice in action.choices)
        else:
            value = f" {action.metavar or action.dest.upper()}"
    return ", ".join(f"`{flag}{value}`" for flag in action.option_strings)


def _meaning(action: argparse.Action) -> str:
    text = (action.help or "").replace("%(default)s", str(action.default))
    return re.sub(r"\s+", " ", text).strip()


def _escape(text: str) -> str:
    return text.replace("|", "\\|")
