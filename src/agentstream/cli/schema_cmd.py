"""``agentstream schema``: the JSON Schema of one protocol line."""

from __future__ import annotations

import argparse
import sys

from agentstream.cli._options import non_negative_int


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--indent", type=non_negative_int, default=2, help="spaces per level (0 for one line)"
    )
    parser.add_argument(
        "--input",
        action="store_true",
        help="the schema of a two-way session's input lines instead (docs/protocol.input.schema.json)",
    )


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(schema_text(indent=args.indent, input_side=args.input))
    return 0


def schema_text(indent: int = 2, *, input_side: bool = False) -> str:
    """The schema as written to ``docs/protocol.schema.json`` (or ``docs/protocol.input.schema.json``)."""
    import json

    from agentstream.protocol import input_json_schema, json_schema

    schema = input_json_schema() if input_side else json_schema()
    return json.dumps(schema, indent=indent or None, ensure_ascii=False) + "\n"
