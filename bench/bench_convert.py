"""Benchmarks for the consumer: ``convert`` throughput and memory, as ratios against a baseline run alongside.

    .venv/bin/python bench/bench_convert.py [--size 1GiB] [--rounds 5] [--quick] [--breakdown]

1. Throughput of ``convert`` (read, detect, decode, encode, write; in process)
   for gemini → claude, claude → canonical and canonical → canonical, against
   an orjson ``loads`` + ``dumps`` passthrough of the very same input lines
   (the least a program that touches every event must do). Ratio =
   baseline time / our time: 1.0 means as fast as the passthrough; the target
   is at least 0.5.
2. Peak RSS of ``agentstream convert`` run as a process on a generated file of
   ``--size`` (default 1 GiB, in the temp directory, deleted afterwards),
   against the same command on a 10-line file (start-up RSS). Target: ≤ 64 MiB.

``--breakdown`` prints, instead, where each conversion's time goes in µs per
input line: the passthrough, parsing the lines alone (msgspec), reading them
(parse, decode, stamp), encoding the decoded events, and the whole ``convert``.

A dialect whose module is missing is skipped with a note. Every time is the
best of ``--rounds`` in CPU time of this process (both sides run here, single
threaded, so other load on the machine does not skew the ratio); ratios compare
numbers from the same run.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from agentstream import protocol as p
from agentstream.cli.convert_cmd import convert
from agentstream.dialects import get_dialect
from common import (
    MIB,
    available,
    best_of,
    best_of_each,
    parse_size,
    passthrough,
    peak_rss_kib,
    producer_session,
)

PAIRS = [("gemini", "claude"), ("claude", "canonical"), ("canonical", "canonical")]


def in_dialect(lines: Iterator[bytes], dialect: str) -> Iterator[bytes]:
    """Canonical lines re-encoded into ``dialect`` (the input a user of that tool would have)."""
    if dialect == "canonical":
        yield from lines
        return
    encoder = get_dialect(dialect).encoder()
    for line in lines:
        for out in encoder.encode(p.decode(line)):
            yield out + b"\n"
    for out in encoder.finish():
        yield out + b"\n"


def write_input(path: Path, dialect: str, *, size: int) -> int:
    """Write a session in ``dialect`` of about ``size`` bytes; return the number of lines."""
    probe = sum(len(line) for line in in_dialect(producer_session(50), dialect)) / 50
    count = 0
    with open(path, "wb", buffering=MIB) as out:
        for line in in_dialect(producer_session(max(1, int(size / probe))), dialect):
            out.write(line)
            count += 1
    return count


def ours(data: bytes, source: str, target: str) -> None:
    convert(io.BytesIO(data), io.BytesIO(), from_dialect="auto", to_dialect=target)


def breakdown(rounds: int, size: int, tmp: Path) -> list[tuple[str, int, list[float]]]:
    """Where a conversion's time goes, in µs per input line: parse only, read (parse + decode), encode, all."""
    import msgspec

    from agentstream.consumer import read

    rows = []
    parse = msgspec.json.Decoder().decode
    for source, target in PAIRS:
        if not available(source, target):
            continue
        path = tmp / f"breakdown.{source}.ndjson"
        write_input(path, source, size=size)
        data = path.read_bytes()
        path.unlink()
        lines = data.splitlines()
        events = [event for batch in read(io.BytesIO(data), source).batches() for event in batch]

        def parse_only() -> None:
            for line in lines:
                parse(line)

        def read_only() -> None:  # in chunks, as convert reads
            for _ in read(io.BytesIO(data), source).batches():
                pass

        def encode_only() -> None:
            if target == "canonical":
                msgspec.json.Encoder().encode_lines(events)
                return
            encoder = get_dialect(target).encoder()
            for event in events:
                encoder.encode(event)
            encoder.finish()

        stages = [
            lambda: passthrough(data),
            parse_only,
            read_only,
            encode_only,
            lambda: ours(data, source, target),
        ]
        rows.append(
            (
                f"{source} → {target}",
                len(lines),
                [best_of(rounds, stage) / len(lines) * 1e6 for stage in stages],
            )
        )
    return rows


def throughput(rounds: int, size: int, tmp: Path) -> list[tuple[str, float, float, float]]:
    rows = []
    for source, target in PAIRS:
        if not available(source, target):
            continue
        path = tmp / f"throughput.{source}.ndjson"
        write_input(path, source, size=size)
        data = path.read_bytes()
        path.unlink()
        base, mine = best_of_each(rounds, lambda: passthrough(data), lambda: ours(data, source, target))
        rows.append((f"{source} → {target}", len(data) / mine / MIB, len(data) / base / MIB, base / mine))
    return rows


def memory(size: int, tmp: Path, pairs: list[tuple[str, str]]) -> list[tuple[str, int, float, int, int]]:
    rows = []
    command = [sys.executable, "-m", "agentstream", "convert"]
    for source, target in pairs:
        if not available(source, target):
            continue
        path = tmp / f"memory.{source}.ndjson"
        small = tmp / f"small.{source}.ndjson"
        try:
            write_input(path, source, size=size)
            with open(path, "rb") as src, open(small, "wb") as dst:
                dst.writelines(line for _, line in zip(range(10), src, strict=False))
            startup, _ = peak_rss_kib([*command, "--to", target, str(small)])
            peak, took = peak_rss_kib([*command, "--to", target, str(path)])
            rows.append((f"{source} → {target}", path.stat().st_size, took, peak, startup))
        finally:
            path.unlink(missing_ok=True)
            small.unlink(missing_ok=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--size", type=parse_size, default=1 << 30, help="file size for the memory run (default 1GiB)"
    )
    parser.add_argument(
        "--throughput-size", type=parse_size, default=32 * MIB, help="input size per throughput run"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="--size 64MiB --throughput-size 8MiB --rounds 3")
    parser.add_argument(
        "--breakdown", action="store_true", help="only where the time goes, in µs per input line"
    )
    args = parser.parse_args()
    if args.quick:
        args.size, args.throughput_size, args.rounds = 64 * MIB, 8 * MIB, 3
    with tempfile.TemporaryDirectory(prefix="agentstream-bench-") as tmp_name:
        tmp = Path(tmp_name)
        if args.breakdown:
            print(f"µs per input line, {args.throughput_size / MIB:.0f} MiB input, best of {args.rounds}")
            print(
                f"{'conversion':26} {'lines':>7} {'orjson':>7} {'parse':>7} {'read':>7} {'encode':>7} {'convert':>8}"
            )
            for name, count, cost in breakdown(args.rounds, args.throughput_size, tmp):
                print(
                    f"{name:26} {count:7} "
                    + " ".join(f"{value:7.2f}" for value in cost[:4])
                    + f" {cost[4]:8.2f}"
                )
            return
        print(f"convert throughput, {args.throughput_size / MIB:.0f} MiB input, best of {args.rounds}")
        print(f"{'conversion':26} {'ours MiB/s':>11} {'orjson MiB/s':>13} {'ratio':>6}  (target ≥ 0.5)")
        for name, mine, base, ratio in throughput(args.rounds, args.throughput_size, tmp):
            print(f"{name:26} {mine:11.1f} {base:13.1f} {ratio:6.2f}")
        print()
        print(f"peak RSS of `agentstream convert` on a {args.size / MIB:.0f} MiB file (target ≤ 64 MiB)")
        print(f"{'conversion':26} {'file MiB':>9} {'seconds':>8} {'peak MiB':>9} {'start-up MiB':>13}")
        for name, file_size, took, peak, startup in memory(
            args.size, tmp, [("gemini", "claude"), ("claude", "canonical")]
        ):
            print(f"{name:26} {file_size / MIB:9.0f} {took:8.1f} {peak / 1024:9.1f} {startup / 1024:13.1f}")


if __name__ == "__main__":
    main()
