"""Option bundles shared by several commands."""

from __future__ import annotations

import argparse
import sys
from typing import IO

from agentstream.render import OUTPUT_FORMATS


def add_output_options(parser: argparse.ArgumentParser, *, default: str = "stream-json") -> None:
    parser.add_argument(
        "--output-format",
        "-o",
        choices=OUTPUT_FORMATS,
        default=default,
        help=f"what stdout carries (default: {default})",
    )
    parser.add_argument(
        "--dialect",
        metavar="NAME",
        default=None,
        help="with stream-json, write this tool's wire format instead of the canonical one",
    )


def add_input_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", default="-", metavar="FILE", help="a file, or - for stdin (default)")
    parser.add_argument(
        "--from",
        dest="from_dialect",
        metavar="DIALECT",
        default="auto",
        help="the input's wire format (default: detect it from the first lines)",
    )


def open_input(path: str) -> IO[bytes]:
    """A binary reader for a path or ``-``, with a usage error that says what was wrong."""
    if path == "-":
        return sys.stdin.buffer
    from agentstream.errors import UsageError

    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise UsageError(f"no such file: {path}", fix="check the path, or pass - to read stdin") from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a directory", fix="pass a file of NDJSON lines") from None
    except PermissionError:
        raise UsageError(f"cannot read {path}: permission denied") from None
