"""``agentstream-claude``: ``agentstream exec --dialect claude``, usable as the Claude Agent SDK's ``cli_path``.

Differences from typing the long form: ``-v``/``--version`` print the Claude
Code protocol level it speaks (as ``claude -v`` prints its version), and an
option it does not know (the SDK's ``extra_args`` can pass anything) costs a
debug line on stderr instead of exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

__all__ = ["entry", "main"]


def entry() -> NoReturn:
    """The ``agentstream-claude`` executable, with the signal handling of ``agentstream``'s own."""
    from agentstream.cli import run_as_executable

    run_as_executable(main)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-v"], ["--version"]):
        from agentstream._version import __version__
        from agentstream.dialects.claude import CLAUDE_CODE_LEVEL

        sys.stdout.write(f"{CLAUDE_CODE_LEVEL} (agentstream {__version__}, Claude Code stream-json level)\n")
        return 0
    from agentstream.cli import exec_cmd

    parser = argparse.ArgumentParser(
        prog="agentstream-claude", description="agentstream exec --dialect claude"
    )
    exec_cmd.configure(parser)
    parser.set_defaults(dialect="claude")
    parsed, unknown = parser.parse_known_args(_bind_unknown_values(parser, args))
    for option in unknown:
        if option.startswith("-"):
            sys.stderr.write(f"agentstream-claude: debug: unknown option {option} ignored\n")
    from agentstream import _signals
    from agentstream.errors import AgentstreamError

    _signals.deliver_held()

    try:
        return int(exec_cmd.run(parsed))
    except AgentstreamError as exc:
        sys.stderr.write(f"agentstream-claude: {exc.code}: {exc.message}\n")
        return exc.exit_code


def _bind_unknown_values(parser: argparse.ArgumentParser, args: list[str]) -> list[str]:
    """``--flag value`` of an option this command does not know, as ``--flag=value``.

    The SDK's ``extra_args`` pass a flag's value as the next word; left apart, that value would be taken for
    the prompt and answered as a turn of its own (every later answer one turn late).
    """
    known = parser._option_string_actions  # argparse has no public way to ask which options it knows
    bound: list[str] = []
    index = 0
    while index < len(args):
        word = args[index]
        value = args[index + 1] if index + 1 < len(args) else None
        if word == "--":
            bound += args[index:]
            break
        if (
            word.startswith("--")
            and "=" not in word
            and word not in known
            and value
            and not value.startswith("-")
        ):
            bound.append(f"{word}={value}")
            index += 2
            continue
        bound.append(word)
        index += 1
    return bound
