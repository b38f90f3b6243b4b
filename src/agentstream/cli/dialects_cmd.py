"""``agentstream dialects``: the wire formats this install reads and writes."""

from __future__ import annotations

import argparse
import sys


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="one JSON object per dialect and line, for programs"
    )


def run(args: argparse.Namespace) -> int:
    rows = dialect_rows()
    if args.json:
        import msgspec

        sys.stdout.write("".join(msgspec.json.encode(row).decode() + "\n" for row in rows))
        return 0
    width = max(len(str(row["name"])) for row in rows)
    for row in rows:
        summary = str(row["summary"]) if row["available"] else "(not available in this install)"
        if row.get("encodes") is False:
            summary += " (read only)"
        sys.stdout.write(f"{str(row['name']).ljust(width)}  {summary}\n")
    return 0


def dialect_rows() -> list[dict[str, object]]:
    """``{name, summary, available, encodes}`` for every registered dialect, in registry order."""
    from agentstream.dialects import DIALECT_NAMES, get_dialect

    rows: list[dict[str, object]] = []
    for name in DIALECT_NAMES:
        try:
            dialect = get_dialect(name)
        except ModuleNotFoundError:
            rows.append({"name": name, "summary": "", "available": False})
            continue
        rows.append(
            {"name": name, "summary": dialect.summary, "available": True, "encodes": dialect.can_encode}
        )
    return rows
