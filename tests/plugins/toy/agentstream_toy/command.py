"""``agentstream toy-hello``: a command added by a plugin."""

from __future__ import annotations

import argparse
import sys

SUMMARY = "Say hello from the toy plugin"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", default="world")


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(f"hello, {args.name}, from the toy plugin\n")
    return 0
