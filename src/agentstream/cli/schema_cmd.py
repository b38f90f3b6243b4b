"""``agentstream schema``: the JSON Schema of one protocol line."""

from __future__ import annotations

import argparse
import sys

from agentstream.cli._options import non_negative_int


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--indent", type=non_negative_int, default=2, help="spaces per level (0 for one line)"
    )


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(schema_text(indent=args.indent))
    return 0


def schema_text(indent: int = 2) -> str:
    """The schema as written to ``docs/protocol.schema.json``."""
    import json

    from agentstream.protocol import json_schema

    return json.dumps(json_schema(), indent=indent or None, ensure_ascii=False) + "\n"
