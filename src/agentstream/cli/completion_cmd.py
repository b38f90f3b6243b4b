"""``agentstream completion SHELL``: a completion script built from the commands' own options.

Built from the parsers, so it cannot drift from them: each command's flags, the
values an option or a positional takes where argparse knows them (``choices``),
and the dialect names for the options that take one (those are plugins, so
argparse has no list; the script has the ones installed, and loading, when it was
made), and the installed plugins' commands.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType

SHELLS = ("bash", "zsh", "fish")

_DIALECT_OPTIONS = {"dialect": False, "from_dialect": True}
"""Options (by dest) whose value is a dialect name, and whether ``auto`` is one of their values."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(completion_script(args.shell))
    return 0


@dataclass
class Completions:
    """What one command completes: its flags, the values some options take, the choices of its positionals."""

    flags: list[str] = field(default_factory=list)
    values: dict[str, list[str]] = field(default_factory=dict)
    """Flag to the words its value is one of."""
    choices: list[str] = field(default_factory=list)
    """The words a positional is one of (``export``'s target, ``completion``'s shell); after one, FILE."""


def completion_script(shell: str) -> str:
    """A completion script for bash, zsh or fish: command names, then each command's options and values."""
    from agentstream.cli import command_registry
    from agentstream.cli._help import build_parser

    modules = command_registry().load_all()
    commands = {name: command_completions(build_parser(name, module)) for name, module in modules.items()}
    if shell == "fish":
        return _fish(commands, modules)
    script = _bash(commands)
    if shell == "zsh":
        return "autoload -U +X bashcompinit && bashcompinit\n" + script
    return script


def command_completions(parser: argparse.ArgumentParser) -> Completions:
    """What ``parser``'s command completes."""
    found = Completions()
    for action in parser._actions:
        found.flags += action.option_strings
        words = _values(action)
        if not words:
            continue
        if action.option_strings:
            found.values.update(dict.fromkeys(action.option_strings, words))
        else:
            found.choices += words
    found.flags.sort()
    return found


def _values(action: argparse.Action) -> list[str]:
    """The words an action's value is one of; empty when any value goes (a file, a number, text)."""
    if action.choices is not None:
        return [str(choice) for choice in action.choices]
    if action.option_strings and action.nargs != 0 and action.dest in _DIALECT_OPTIONS:
        from agentstream.dialects import dialect_names

        return [*(["auto"] if _DIALECT_OPTIONS[action.dest] else []), *dialect_names()]
    return []


def _bash(commands: dict[str, Completions]) -> str:
    names = " ".join(commands)
    flags = "\n".join(f'    {name}) opts="{" ".join(c.flags)}" ;;' for name, c in commands.items())
    choices = "\n".join(
        f'    {name}) args="{" ".join(c.choices)}" ;;' for name, c in commands.items() if c.choices
    )
    values = "\n".join(
        f'    {name}:{flag}) words="{" ".join(words)}" ;;'
        for name, c in commands.items()
        for flag, words in c.values.items()
    )
    return f"""# agentstream completion for bash (and zsh through bashcompinit)
_agentstream() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" cmd="${{COMP_WORDS[1]}}"
  local opts="" args="" words="" i
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W "{names} help --help --version" -- "$cur"))
    return
  fi
  if [[ "$prev" == "=" && "$COMP_CWORD" -gt 2 ]]; then  # --flag=VALUE: bash splits the word at "="
    prev="${{COMP_WORDS[COMP_CWORD-2]}}"
  fi
  case "$cmd:$prev" in
{values}
  esac
  if [ -n "$words" ]; then
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
    return
  fi
  case "$cmd" in
{flags}
    help) opts="{names}" ;;
  esac
  case "$cmd" in
{choices}
  esac
  if [[ "$cur" == -* || "$cmd" == help ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    return
  fi
  for ((i = 2; i < COMP_CWORD; i++)); do  # one of the choices already given: what follows is FILE
    if [[ -n "$args" && " $args " == *" ${{COMP_WORDS[i]}} "* ]]; then
      args=""
    fi
  done
  if [ -n "$args" ]; then
    COMPREPLY=($(compgen -W "$args" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}}
complete -F _agentstream agentstream
"""


def _fish(commands: dict[str, Completions], modules: dict[str, ModuleType]) -> str:
    from agentstream.cli import command_summary

    lines = ["# agentstream completion for fish", "complete -c agentstream -f"]
    for name in commands:
        summary = command_summary(name, modules[name]).replace("'", "\\'")
        lines.append(f"complete -c agentstream -n __fish_use_subcommand -a {name} -d '{summary}'")
    for name, c in commands.items():
        seen = f"__fish_seen_subcommand_from {name}"
        for flag in c.flags:
            kind = "-l " + flag[2:] if flag.startswith("--") else "-s " + flag[1:]
            words = c.values.get(flag)
            takes = f" -x -a '{' '.join(words)}'" if words else ""
            lines.append(f"complete -c agentstream -n '{seen}' {kind}{takes}")
        if c.choices:
            given = " ".join(c.choices)
            condition = f"{seen}; and not __fish_seen_subcommand_from {given}"
            lines.append(f"complete -c agentstream -n '{condition}' -a '{given}'")
    return "\n".join(lines) + "\n"
