"""``agentstream usage``: tokens, tool calls, wall time and cost from the agent CLIs' session logs."""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

from agentstream._text import terminal_safe
from agentstream.cli._bus_options import add_bus_option

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}|\d{8}", re.ASCII)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="log files or directories (recursive); default: every CLI's log locations and the bus's runs",
    )
    parser.add_argument("--cli", choices=("claude", "codex", "gemini"), help="only this CLI's logs")
    parser.add_argument("--since", metavar="DATE", help="only model calls on or after DATE (YYYY-MM-DD, UTC)")
    parser.add_argument(
        "--by", choices=("day", "session", "model", "cli"), default="day", help="how to group (default: day)"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the JSON envelope (the default when piped)"
    )
    parser.add_argument(
        "--pricing",
        metavar="FILE",
        help="a price table laid over the shipped one (also $AGENTSTREAM_PRICING); see docs/cli.md",
    )
    add_bus_option(parser)


def run(args: argparse.Namespace) -> int:
    from agentstream.agent.pricing import load_table
    from agentstream.envelope import action, ok_envelope, print_envelope
    from agentstream.errors import UsageError
    from agentstream.observe.usage import CLIS, group_totals, scan, scan_bus

    command = "agentstream usage"
    as_json = args.json or not sys.stdout.isatty()
    since = _since(args.since) if args.since else None  # usage errors: exit 2, nothing on stdout (cli.md)
    prices = load_table(args.pricing)
    missing = [path for path in args.paths if not os.path.lexists(path)]
    if missing:
        raise UsageError(
            f"no such file or directory: {', '.join(missing)}",
            fix="check the path; with no PATH, usage reads every CLI's log locations",
        )
    progress = _Progress() if sys.stderr.isatty() else None
    found = scan(args.paths, clis=(args.cli,) if args.cli else CLIS, progress=progress)
    if progress is not None:
        progress.done()
    if not args.paths and not args.cli:
        scan_bus(found, args.bus, _warn)
    for problem in found.skipped:
        _warn(f"skipped {problem}")
    totals, groups = group_totals(found, prices, by=args.by, since=since)
    if as_json:
        result: dict[str, Any] = {
            "by": args.by,
            "since": since,
            "files": found.files,
            "bytes": found.bytes,
            "pricing": {"version": prices.version, "source": prices.source},
            "totals": totals.as_dict(),
            "groups": [{"key": key, **group.as_dict()} for key, group in groups],
        }
        others = [by for by in ("day", "session", "model", "cli") if by != args.by]
        actions = [
            action(
                "agentstream usage [<path>...] --by <by> --json",
                "the same totals grouped another way",
                by={"default": others[0], "description": f"one of {', '.join(others)}"},
            ),
            action(
                "agentstream usage [<path>...] --pricing <file> --json",
                "price the same calls with your own table",
                file={"description": "a JSON price table (see docs/cli.md)"},
            ),
        ]
        return print_envelope(ok_envelope(command, result, actions))
    sys.stdout.write(_table(args.by, totals, groups))
    if totals.unpriced_models:
        _warn(
            f"no price for {', '.join(sorted(totals.unpriced_models))}: "
            "their tokens are counted, not their cost (add them with --pricing FILE)"
        )
    return 0


def _warn(message: str) -> None:
    """A note on stderr; what it quotes from the logs (model names, paths) cannot act on the terminal."""
    sys.stderr.write(f"agentstream usage: {terminal_safe(message)}\n")


def _since(text: str) -> str:
    import datetime

    from agentstream.errors import UsageError

    day = text if "-" in text else f"{text[:4]}-{text[4:6]}-{text[6:]}"
    try:
        if _DATE.fullmatch(text) is None:
            raise ValueError(text)
        datetime.date.fromisoformat(day)  # a day of the calendar: not 2026-13-45
    except ValueError:
        raise UsageError(
            f"--since takes a date, not {text!r}", fix="pass --since 2026-11-01 (or 20261101)"
        ) from None
    return day


class _Progress:
    """Files and bytes scanned so far, on one stderr line, at most four times a second."""

    def __init__(self) -> None:
        import time

        from agentstream.cli._progress import PROGRESS_MIN_BYTES

        self._min = PROGRESS_MIN_BYTES
        self._clock = time.monotonic
        self._shown = 0.0
        self._drawn = False

    def __call__(self, files: int, done: int) -> None:
        now = self._clock()
        if done >= self._min and now - self._shown >= 0.25:
            self._shown, self._drawn = now, True
            sys.stderr.write(f"\rscanning: {files} files, {done / (1 << 20):.1f} MiB\x1b[K")
            sys.stderr.flush()

    def done(self) -> None:
        if self._drawn:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


_COLUMNS = (
    ("calls", "calls"),
    ("input_tokens", "input"),
    ("output_tokens", "output"),
    ("cache_read_tokens", "cache read"),
    ("cache_write_tokens", "cache write"),
    ("reasoning_tokens", "reasoning"),
    ("tool_calls", "tools"),
    ("wall_time_ms", "wall time"),
    ("cost_usd", "cost"),
)


def _cell(key: str, value: Any) -> str:
    if key == "cost_usd":
        return f"${value:,.2f}"
    if key == "wall_time_ms":
        minutes, seconds = divmod(int(value) // 1000, 60)
        hours, minutes = divmod(minutes, 60)
        return f"{hours}h{minutes:02d}m{seconds:02d}s"
    return f"{value:,}"


def _table(by: str, totals: Any, groups: list[tuple[str, Any]]) -> str:
    rows = [
        [terminal_safe(key, one_line=True), *(_cell(name, getattr(group, name)) for name, _ in _COLUMNS)]
        for key, group in groups
    ]
    rows.append(["total", *(_cell(name, getattr(totals, name)) for name, _ in _COLUMNS)])
    header = [by, *(title for _, title in _COLUMNS)]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            cell.ljust(width) if index == 0 else cell.rjust(width)
            for index, (cell, width) in enumerate(zip(cells, widths, strict=True))
        )

    rule = "  ".join("-" * width for width in widths)
    body = [line(row) for row in rows[:-1]]
    return "\n".join([line(header), rule, *body, rule, line(rows[-1])]) + "\n"
