"""``agentstream validate``: check a stream against protocol v1's invariants."""

from __future__ import annotations

import argparse
import sys

from agentstream.cli._options import add_input_argument, open_input


def configure(parser: argparse.ArgumentParser) -> None:
    add_input_argument(parser)
    parser.add_argument("--expect-exit", type=int, metavar="N", help="also require result.exit_code == N")
    parser.add_argument("--json", action="store_true", help="print violations as NDJSON objects, then a summary")
    parser.add_argument("--max-line-bytes", type=int, metavar="N", help="report lines longer than N bytes")
    parser.add_argument("--quiet", "-q", action="store_true", help="print nothing; the exit code says it all")


def run(args: argparse.Namespace) -> int:
    """Exit 0 when valid, 1 when not (2, via UsageError, when the command line is wrong)."""
    from agentstream.validate import Validator, validate_stream

    validator = Validator(expect_exit=args.expect_exit)
    source = open_input(args.file)
    count = 0
    for violation in validate_stream(source, max_line_bytes=args.max_line_bytes, validator=validator):
        count += 1
        if args.quiet:
            continue
        if args.json:
            _write_json(violation._asdict())
        else:
            sys.stdout.write(f"{violation}\n")
        sys.stdout.flush()
    if args.json and not args.quiet:
        _write_json({"valid": count == 0, "violations": count, "events": validator.events})
    elif not args.quiet:
        verdict = "valid" if count == 0 else f"{count} violation{'s' if count != 1 else ''}"
        sys.stderr.write(f"{args.file}: {validator.events} events, {verdict}\n")
    return 0 if count == 0 else 1


def _write_json(obj: dict[str, object]) -> None:
    import json

    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
