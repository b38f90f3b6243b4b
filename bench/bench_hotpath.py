"""The hot path on real-shaped input: every figure of the speed targets, as ratios against baselines run alongside.

    .venv/bin/python bench/bench_hotpath.py [--quick] [--size 16MiB] [--rounds 5] [--long-line 100MiB]

Input: long seeded sessions from ``bench/realistic.py`` (real fixture lines
with fresh ids and varied text) in each source dialect. Ratio = baseline time /
our time (above 1: we are faster), except start-up and memory (ours / baseline:
below 1 is better). Rows:

* ``convert`` claude → canonical, codex → canonical, gemini → claude against
  an orjson ``loads`` + ``dumps`` passthrough of the same lines: as whole
  processes (``agentstream convert FILE`` against a Python process doing the
  passthrough on the same file, output to /dev/null; the kernel's count of
  each child's CPU time, best of ``--rounds``), which is how the targets are
  set; and in process (the ``convert`` function, CPU time of this process,
  best of ``--rounds``), shown with no target: the library call, where the
  reading and writing Python does per event weigh more than a process's
  start-up and I/O (docs/performance.md says what closing that gap needs);
* ``read()`` over a Claude Code stream against the Claude Agent SDK's
  ``parse_message(orjson.loads(line))`` per line, in process;
* validating a large canonical stream (``validate_stream``, what
  ``agentstream validate`` runs) against a pydantic v2 discriminated union's
  ``validate_json`` per line and against a bare msgspec typed decode per line;
* emitting the canonical session's events with a flush per event
  (``Stream.emit`` to a pipe) against a bare ``os.write`` of
  ``msgspec.json.encode(event)``; each in a child process writing into a pipe
  this process drains, CPU time of the loop measured in the child;
* start-up: ``agentstream validate`` on a 10-line file against
  ``python -c "import msgspec"`` (median wall time of many runs; CPU time too);
* peak RSS of ``agentstream validate`` and ``agentstream convert`` on a file
  whose one long line has ``--long-line`` bytes, against that line's size.

Run against other code with ``PYTHONPATH=/path/to/src``: the package is
imported, and its commands run, from there.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import orjson

import realistic
from common import (
    MIB,
    PASSTHROUGH,
    VENV_BIN,
    LineTap,
    available,
    best_of_each,
    drained_child,
    parse_size,
    passthrough,
    reported_time,
    run_child,
    startup_times,
    validate_times,
)

CONVERSIONS = [("claude", "canonical"), ("codex", "canonical"), ("gemini", "claude")]
TARGETS = {
    "convert claude → canonical": "≥ 0.6",
    "convert codex → canonical": "≥ 0.6",
    "convert gemini → claude": "≥ 0.35",
    "read() claude": "≥ 1.0",
    "validate vs pydantic": "≥ 3",
    "validate vs bare msgspec": "≥ 0.8",
    "emit": "≥ 0.6",
    "start-up": "≤ 1.3",
    "peak RSS": "≤ 2.5",
}


class Table:
    """Rows of (measure, ours, baseline, ratio, target), printed as they come."""

    def __init__(self) -> None:
        print(f"{'measure':44} {'ours':>12} {'baseline':>12} {'ratio':>7}  target")

    def row(self, measure: str, ours: str, base: str, ratio: float, target: str) -> None:
        print(f"{measure:44} {ours:>12} {base:>12} {ratio:7.2f}  {target}", flush=True)


def convert_rows(table: Table, inputs: dict[str, bytes], tmp: Path, rounds: int) -> None:
    from agentstream.cli.convert_cmd import convert

    for source, target in CONVERSIONS:
        if not available(source, target):
            continue
        data = inputs[source]
        name = f"convert {source} → {target}"

        def ours(data: bytes = data, source: str = source, target: str = target) -> None:
            convert(io.BytesIO(data), io.BytesIO(), from_dialect=source, to_dialect=target)

        mine, base = best_of_each(rounds, ours, lambda: passthrough(data))
        size = len(data) / MIB
        table.row(
            f"{name}, in process", f"{size / mine:.1f} MiB/s", f"{size / base:.1f} MiB/s", base / mine, "—"
        )
        path = tmp / f"convert.{source}.ndjson"
        path.write_bytes(data)
        command = [str(VENV_BIN / "agentstream"), "convert", "--from", source, "--to", target, str(path)]
        mine, base = best_of_each(
            rounds,
            partial(child_cpu, command),
            partial(child_cpu, [sys.executable, "-c", PASSTHROUGH, str(path)]),
            measure=reported_time,
        )
        table.row(
            f"{name}, process",
            f"{size / mine:.1f} MiB/s",
            f"{size / base:.1f} MiB/s",
            base / mine,
            TARGETS[name],
        )
        path.unlink()


def child_cpu(argv: list[str]) -> float:
    return run_child(argv).cpu


def read_row(table: Table, data: bytes, rounds: int) -> None:
    from claude_agent_sdk._internal.message_parser import parse_message

    from agentstream.consumer import read

    def ours() -> None:
        for _ in read(io.BytesIO(data), "claude").batches():
            pass

    def sdk() -> None:
        for line in io.BytesIO(data):
            parse_message(orjson.loads(line))

    mine, base = best_of_each(rounds, ours, sdk)
    size = len(data) / MIB
    table.row(
        "read() over Claude Code, in process",
        f"{size / mine:.1f} MiB/s",
        f"{size / base:.1f} MiB/s",
        base / mine,
        TARGETS["read() claude"],
    )


def validate_rows(table: Table, data: bytes, rounds: int) -> None:
    from agentstream.validate import validate_stream

    violations = list(validate_stream(io.BytesIO(data)))
    if violations:
        raise SystemExit(f"the canonical input is not valid: {violations[:3]}")
    times = validate_times(data, rounds)
    size = len(data) / MIB
    for name in ("pydantic", "bare msgspec"):
        table.row(
            f"validate, vs {name}",
            f"{size / times['ours']:.1f} MiB/s",
            f"{size / times[name]:.1f} MiB/s",
            times[name] / times["ours"],
            TARGETS[f"validate vs {name}"],
        )


EMIT_CHILD = """
import os, sys, time
import msgspec
from agentstream import protocol as p
from agentstream.stream import Stream
kind, count, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(path, "rb") as file:
    events = [p.decode(line) for line in file]
events = [e for e in events if not isinstance(e, (p.Start, p.Result))]
events = (events * (count // len(events) + 1))[:count]
fd = sys.stdout.fileno()
if kind == "ours":
    for event in events:
        event.ts = ""  # the producer reads the clock for each event, as it does live
    stream = Stream("bench", out=fd).start()
    began = time.process_time()
    for event in events:
        stream.emit(event)
    took = time.process_time() - began
else:
    encode = msgspec.json.Encoder().encode
    began = time.process_time()
    for event in events:
        os.write(fd, encode(event) + b"\\n")
    took = time.process_time() - began
print(took, file=sys.stderr)
"""


def emit_row(table: Table, canonical: bytes, tmp: Path, rounds: int, count: int) -> None:
    path = tmp / "emit.ndjson"
    path.write_bytes(canonical)

    def one(kind: str) -> float:
        return drained_child([sys.executable, "-c", EMIT_CHILD, kind, str(count), str(path)])

    mine, base = best_of_each(rounds, lambda: one("ours"), lambda: one("os.write"), measure=reported_time)
    table.row(
        f"emit, flush per event ({count} events)",
        f"{count / mine / 1e3:.0f} k/s",
        f"{count / base / 1e3:.0f} k/s",
        base / mine,
        TARGETS["emit"],
    )


def ten_lines(path: Path) -> None:
    """A valid 10-line canonical stream from the producer."""
    from agentstream.stream import Stream

    out = LineTap()
    with Stream("bench-agent", out=out, model="m", tools=["shell"]) as stream:
        for i in range(3):
            stream.message_delta(f"part {i} ", message_id="msg_1")
        stream.message("part 0 part 1 part 2 ", message_id="msg_1")
        with stream.tool_call("shell", {"command": "ls"}) as call:
            call.succeed("a\nb\n")
        stream.record_usage("m", input_tokens=10, output_tokens=5)
        stream.log("done")
    lines = out.take()
    assert len(lines) == 10, len(lines)
    path.write_bytes(b"".join(lines))


def startup_row(table: Table, tmp: Path, rounds: int) -> None:
    sample = tmp / "ten.ndjson"
    ten_lines(sample)
    times = startup_times(
        {
            "ours": [str(VENV_BIN / "agentstream"), "validate", "-q", str(sample)],
            "msgspec": [sys.executable, "-c", "import msgspec"],
        },
        rounds,
    )
    wall = {name: wall for name, (wall, _) in times.items()}
    cpu = {name: cpu for name, (_, cpu) in times.items()}
    table.row(
        "validate 10 lines, start-up (median wall)",
        f"{wall['ours'] * 1e3:.1f} ms",
        f"{wall['msgspec'] * 1e3:.1f} ms",
        wall["ours"] / wall["msgspec"],
        TARGETS["start-up"],
    )
    table.row(
        "  (best CPU time)",
        f"{cpu['ours'] * 1e3:.1f} ms",
        f"{cpu['msgspec'] * 1e3:.1f} ms",
        cpu["ours"] / cpu["msgspec"],
        TARGETS["start-up"],
    )


def memory_rows(table: Table, tmp: Path, size: int) -> None:
    agentstream = str(VENV_BIN / "agentstream")
    for dialect, command in (
        ("canonical", [agentstream, "validate", "-q"]),
        ("claude", [agentstream, "convert", "--from", "claude", "--to", "canonical"]),
    ):
        path = tmp / f"long.{dialect}.ndjson"
        try:
            line = realistic.write_long_line(path, dialect, size=size)
            peak = run_child([*command, str(path)]).peak_rss_kib * 1024
        finally:
            path.unlink(missing_ok=True)
        table.row(
            f"peak RSS, {' '.join(command[1:2])} ({dialect}, 1 line)",
            f"{peak / MIB:.0f} MiB",
            f"{line / MIB:.0f} MiB",
            peak / line,
            TARGETS["peak RSS"],
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--size", type=parse_size, default=16 * MIB, help="size of each session (default 16MiB)"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--long-line", type=parse_size, default=100 * MIB, help="the long line's size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="--size 4MiB --rounds 3, fewer start-up runs")
    args = parser.parse_args()
    if args.quick:
        args.size, args.rounds = 4 * MIB, 3
    import agentstream

    print(
        f"agentstream from {Path(agentstream.__file__).parent}; sessions of {args.size / MIB:.0f} MiB, seed {args.seed}, best of {args.rounds}"
    )
    inputs = {
        dialect: realistic.generate(dialect, seed=args.seed, size=args.size) for dialect in realistic.DIALECTS
    }
    table = Table()
    with tempfile.TemporaryDirectory(prefix="agentstream-bench-") as name:
        tmp = Path(name)
        steps: list[Callable[[], None]] = [
            lambda: convert_rows(table, inputs, tmp, args.rounds),
            lambda: read_row(table, inputs["claude"], args.rounds),
            lambda: validate_rows(table, inputs["canonical"], args.rounds),
            lambda: emit_row(table, inputs["canonical"], tmp, args.rounds, 20_000 if args.quick else 100_000),
            lambda: startup_row(table, tmp, 15 if args.quick else 41),
            lambda: memory_rows(table, tmp, args.long_line),
        ]
        for step in steps:
            step()


if __name__ == "__main__":
    main()
