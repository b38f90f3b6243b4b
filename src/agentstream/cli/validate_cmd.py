"""``agentstream validate``: check a stream against protocol v1's invariants, in any dialect."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

from agentstream.cli._options import (
    add_input_argument,
    check_dialect,
    detect_input,
    exit_status,
    non_negative_int,
    open_input,
    positive_int,
)

if TYPE_CHECKING:
    from agentstream.validate import Validator, Violation

DEFAULT_MAX_VIOLATIONS = 100


def configure(parser: argparse.ArgumentParser) -> None:
    add_input_argument(parser)
    parser.add_argument(
        "--expect-exit",
        type=exit_status,
        metavar="N",
        help="also require result.exit_code == N (only success or failure, in a dialect that cannot"
        " carry the exact status: every one but canonical, locus and agui)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print violations as NDJSON objects, then a summary"
    )
    parser.add_argument(
        "--max-line-bytes", type=positive_int, metavar="N", help="report lines longer than N bytes"
    )
    parser.add_argument(
        "--max-violations",
        type=non_negative_int,
        default=DEFAULT_MAX_VIOLATIONS,
        metavar="N",
        help=f"print at most N violations, then only count them (default {DEFAULT_MAX_VIOLATIONS}; 0: no limit)",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="print nothing; the exit code says it all")


def run(args: argparse.Namespace) -> int:
    """Exit 0 when valid, 1 when not (2, via UsageError, when the command line or the input cannot be used).

    The dialect is the one the reader would detect (:func:`detect_input`); when
    none matches, the input is checked as canonical and stderr says so, as
    ``convert``'s ``UNKNOWN_DIALECT`` event does. Canonical input is checked line
    by line against every rule; input in another dialect is decoded first and
    checked for the promises that dialect can make (start, one terminal event,
    tool pairing, delta runs, fatal errors).
    """
    from agentstream.errors import UsageError, error_text
    from agentstream.validate import Validator

    if args.json and args.quiet:
        raise UsageError("--json and --quiet ask for opposite things", fix="pass one of them")
    check_dialect(args.from_dialect)  # an unknown name is a usage error before anything is read
    source = open_input(args.file)
    dialect = args.from_dialect
    if dialect == "auto":  # what the reader would choose, so validate and convert agree on every input
        source, dialect, unknown = detect_input(source, max_line_bytes=args.max_line_bytes)
        if unknown is not None and not args.quiet:  # said as a usage error is, for the person reading stderr
            fix = unknown.fix if isinstance(unknown.fix, str) else None
            sys.stderr.write(error_text("agentstream validate", unknown.code, unknown.message, fix))
    validator = Validator(
        expect_exit=args.expect_exit, check_stamps=dialect == "canonical", exact_exit=_exact_exit(dialect)
    )
    limit = args.max_violations or None
    count = 0
    for violation in _violations(source, dialect, validator, args):
        count += 1
        if args.quiet or (limit is not None and count > limit):
            continue
        if args.json:
            _write_json({"line": violation.line, "rule": violation.rule, "message": violation.message})
        else:
            sys.stdout.write(f"{violation}\n")
        sys.stdout.flush()
    unprinted = count - limit if limit is not None and count > limit else 0
    if args.json and not args.quiet:
        _write_json(
            {
                "valid": count == 0,
                "violations": count,
                "not_printed": unprinted,
                "events": validator.events,
                "dialect": dialect,
            }
        )
    elif not args.quiet:
        if unprinted:
            sys.stdout.write(f"… {unprinted} more violations not printed (--max-violations {limit})\n")
        verdict = "valid" if count == 0 else f"{count} violation{'s' if count != 1 else ''}"
        sys.stderr.write(f"{args.file}: {validator.events} events ({dialect}), {verdict}\n")
    return 0 if count == 0 else 1


def _violations(
    source: IO[bytes], dialect: str, validator: Validator, args: argparse.Namespace
) -> Iterator[Violation]:
    if dialect != "canonical":
        from agentstream.consumer import read
        from agentstream.validate import validate_decoded

        return validate_decoded(
            read(source, dialect, max_line_bytes=args.max_line_bytes, label=args.file), validator
        )
    from agentstream._lines import iter_blocks, iter_lines
    from agentstream.cli._progress import with_progress
    from agentstream.validate import validate_items

    framed = (
        iter_lines(source, max_line_bytes=args.max_line_bytes) if args.max_line_bytes else iter_blocks(source)
    )
    return validate_items(with_progress(framed, source, sys.stderr, verb="validating"), validator)


def _exact_exit(dialect: str) -> bool:
    if dialect == "canonical":  # known without loading the dialects (start-up time)
        return True
    from agentstream.dialects import get_dialect

    return get_dialect(dialect).exact_exit_code


def _write_json(obj: dict[str, object]) -> None:
    import json

    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
