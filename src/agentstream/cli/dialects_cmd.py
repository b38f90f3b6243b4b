"""``agentstream dialects``: the wire formats this install reads and writes."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentstream.dialects.base import Dialect


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
        if not row["available"]:
            summary = "(failed to load; see the message above)"
        else:
            summary = str(row["summary"]) + (" (read only)" if row["encodes"] is False else "")
        source = f"  [plugin {row['plugin']}]" if row["plugin"] else ""
        sys.stdout.write(f"{str(row['name']).ljust(width)}  {summary}{source}\n")
    return 0


def dialect_rows() -> list[dict[str, object]]:
    """``{name, summary, available, plugin, encodes}`` for every dialect: the built-ins, then the plugins'.

    ``plugin`` is the distribution that provides a plugin's dialect (``None`` for a built-in).
    """
    from agentstream.dialects import DIALECTS

    rows: list[dict[str, object]] = []
    for name in DIALECTS.names():
        dialect = DIALECTS.get(name)
        rows.append(
            {
                "name": name,
                "summary": _summary(name, dialect) if dialect is not None else "",
                "available": dialect is not None,
                "plugin": DIALECTS.plugin_distribution(name),
                "encodes": dialect.can_encode if dialect is not None else False,
            }
        )
    return rows


def _summary(name: str, dialect: Dialect) -> str:
    """A dialect's summary; a plugin's without one is reported and listed all the same."""
    summary = getattr(dialect, "summary", None)
    if isinstance(summary, str) and summary:
        return summary
    from agentstream.dialects import DIALECTS
    from agentstream.plugins import report_once

    report_once(
        f"{DIALECTS.where(name)} has no summary (fix: "
        f"{DIALECTS.fix_for(name, 'its Dialect class must set summary to a one-line description')})"
    )
    return "(no summary)"
