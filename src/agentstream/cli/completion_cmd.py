"""``agentstream completion SHELL``: a completion script built from the commands' own options."""

from __future__ import annotations

import argparse
import sys


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell to complete in")


def run(args: argparse.Namespace) -> int:
    from agentstream.cli._help import completion_script

    sys.stdout.write(completion_script(args.shell))
    return 0
