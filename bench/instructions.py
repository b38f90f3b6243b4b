"""The in-process rows of ``bench_hotpath.py`` counted in instructions, ours against the same baselines.

    .venv/bin/python bench/instructions.py [--size 1MiB] [--seed 0] [--jobs 2]

Timed ratios on a shared machine swing by up to a third from one run to the
next; the number of instructions a job executes does not, whatever else the
machine is doing. Each job runs in a child under ``valgrind --tool=callgrind``
(with ``PYTHONHASHSEED=0``) twice: set-up, one warm-up call, then one call, and
then three. The difference of the two totals, halved, is one call's count:
set-up, imports and first-call costs drop out. Ratio = baseline's count / ours
(above 1: we execute fewer instructions).

The ``process`` rows count whole processes instead, start-up and exit
included: ``agentstream convert FILE`` against a Python program doing the
passthrough on the same file (``bench_hotpath.py``'s process rows), each run
once, its output to /dev/null.

Counts are of user space only: a system call counts as the few instructions
that make it. So the emit row (a write per event) reads lower here than in
time, where the kernel's share is the same for both sides; the other rows do
no I/O in the measured call.

Needs valgrind. Run against other code with ``PYTHONPATH=/path/to/src``.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import realistic
from common import MIB, PASSTHROUGH, VENV_BIN, parse_size

if TYPE_CHECKING:
    from agentstream import protocol as p

Job = Callable[[bytes], Callable[[], object]]
"""Set-up from the input's bytes (imports, parsers, anything made once), returning the call that is counted."""

CALLS = (1, 3)
"""Calls counted in the two runs of a job; their difference is what is reported."""


def _convert(source: str, target: str) -> Job:
    def job(data: bytes) -> Callable[[], object]:
        from agentstream.cli.convert_cmd import convert

        return lambda: convert(io.BytesIO(data), io.BytesIO(), from_dialect=source, to_dialect=target)

    return job


def _passthrough(data: bytes) -> Callable[[], object]:
    from common import passthrough

    return lambda: passthrough(data)


def _read_ours(data: bytes) -> Callable[[], object]:
    from agentstream.consumer import read

    def call() -> None:
        for _ in read(io.BytesIO(data), "claude").batches():
            pass

    return call


def _read_sdk(data: bytes) -> Callable[[], object]:
    import orjson
    from claude_agent_sdk._internal.message_parser import parse_message

    def call() -> None:
        for line in io.BytesIO(data):
            parse_message(orjson.loads(line))

    return call


def _validate_ours(data: bytes) -> Callable[[], object]:
    from agentstream.validate import validate_stream

    def call() -> None:
        for _ in validate_stream(io.BytesIO(data)):
            pass

    return call


def _validate_pydantic(data: bytes) -> Callable[[], object]:
    from common import pydantic_adapter

    adapter = pydantic_adapter()

    def call() -> None:
        for line in io.BytesIO(data):
            adapter.validate_json(line)

    return call


def _validate_msgspec(data: bytes) -> Callable[[], object]:
    import msgspec

    from agentstream import protocol as p

    decode = msgspec.json.Decoder(p.Event).decode

    def call() -> None:
        for line in io.BytesIO(data):
            decode(line)

    return call


def _emit_events(data: bytes) -> list[list[p.Event]]:
    """One fresh copy of the session's events per call (emitting stamps them), the same number in every run."""
    from agentstream import protocol as p

    copies: list[list[p.Event]] = []
    for _ in range(1 + max(CALLS)):  # the warm-up's, then the most calls a run makes
        events = [p.decode(line) for line in io.BytesIO(data)]
        copies.append(
            [e for e in events if isinstance(e, p.Event) and not isinstance(e, (p.Start, p.Result))]
        )
    return copies


def _emit_ours(data: bytes) -> Callable[[], object]:
    from agentstream.stream import Stream

    copies = _emit_events(data)
    for events in copies:
        for event in events:
            event.ts = ""  # the producer reads the clock for each event, as it does live
    stream = Stream("bench", out=os.open(os.devnull, os.O_WRONLY)).start()

    def call() -> None:
        for event in copies.pop():
            stream.emit(event)

    return call


def _emit_bare(data: bytes) -> Callable[[], object]:
    import msgspec

    copies = _emit_events(data)
    encode, write, fd = msgspec.json.Encoder().encode, os.write, os.open(os.devnull, os.O_WRONLY)

    def call() -> None:
        for event in copies.pop():
            write(fd, encode(event) + b"\n")

    return call


ROWS: list[tuple[str, str, tuple[str, Job], tuple[str, Job]]] = [
    (
        "convert claude → canonical",
        "claude",
        ("ours", _convert("claude", "canonical")),
        ("orjson", _passthrough),
    ),
    (
        "convert codex → canonical",
        "codex",
        ("ours", _convert("codex", "canonical")),
        ("orjson", _passthrough),
    ),
    ("convert gemini → claude", "gemini", ("ours", _convert("gemini", "claude")), ("orjson", _passthrough)),
    ("read() over Claude Code", "claude", ("ours", _read_ours), ("SDK parser", _read_sdk)),
    ("validate, vs pydantic", "canonical", ("ours", _validate_ours), ("pydantic", _validate_pydantic)),
    ("validate, vs bare msgspec", "canonical", ("ours", _validate_ours), ("msgspec", _validate_msgspec)),
    ("emit (user space only)", "canonical", ("ours", _emit_ours), ("os.write", _emit_bare)),
]
JOBS: dict[str, Job] = {f"{row[0]}/{side[0]}": side[1] for row in ROWS for side in row[2:]}
PROCESS_ROWS = [
    (f"convert {source} → {target}, process", source, target)
    for source, target in (("claude", "canonical"), ("codex", "canonical"), ("gemini", "claude"))
]


def run_child(job: str, path: str, calls: int) -> None:
    """Inside valgrind: set up, warm up, then ``calls`` counted calls."""
    call = JOBS[job](Path(path).read_bytes())
    call()
    for _ in range(calls):
        call()


_COLLECTED = re.compile(rb"Collected\s*:\s*(\d+)")


def count(job: str, path: Path, calls: int) -> int:
    """Instructions of a whole child run (set-up, warm-up and ``calls`` calls)."""
    return count_process(job, [sys.executable, __file__, "--child", job, str(path), str(calls)])


def count_process(name: str, command: list[str]) -> int:
    """Instructions of one run of ``command`` under callgrind, its stdout to /dev/null."""
    argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, timeout=3600)
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(
            f"{name}: valgrind failed ({done.returncode}):\n{done.stderr.decode(errors='replace')[-2000:]}"
        )
    return int(found[1])


def process_rows(pool: ThreadPoolExecutor, paths: dict[str, Path], only: str) -> None:
    """Whole ``agentstream convert`` processes against whole passthrough processes on the same file."""
    for measure, source, target in (row for row in PROCESS_ROWS if only in row[0]):
        path = str(paths[source])
        convert = [str(VENV_BIN / "agentstream"), "convert", "--from", source, "--to", target, path]
        mine = pool.submit(count_process, measure, convert)
        theirs = pool.submit(count_process, measure, [sys.executable, "-c", PASSTHROUGH, path])
        ours, base = mine.result(), theirs.result()
        print(
            f"{measure:38} {ours:>14,} {base:>14,} {base / ours:6.2f}  vs orjson (whole processes)",
            flush=True,
        )


def per_call(pool: ThreadPoolExecutor, job: str, path: Path) -> int:
    few, more = (pool.submit(count, job, path, calls) for calls in CALLS)
    return (more.result() - few.result()) // (CALLS[1] - CALLS[0])


class Counts:
    """Per-call counts, each job counted once (ours is the same job in both validate rows)."""

    def __init__(self, pool: ThreadPoolExecutor, paths: dict[str, Path]) -> None:
        self.pool, self.paths = pool, paths
        self.known: dict[tuple[Job, str], int] = {}

    def of(self, measure: str, side: str, dialect: str) -> int:
        job = f"{measure}/{side}"
        key = (JOBS[job], dialect)
        if key not in self.known:
            self.known[key] = per_call(self.pool, job, self.paths[dialect])
        return self.known[key]


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        run_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=parse_size, default=MIB, help="size of each session (default 1MiB)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="children run at once")
    parser.add_argument(
        "--only", default="", metavar="TEXT", help="only the rows whose measure contains TEXT"
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    import agentstream

    print(
        f"agentstream from {Path(agentstream.__file__).parent}; sessions of {args.size / MIB:g} MiB, seed {args.seed}"
    )
    print(f"{'measure':38} {'ours':>14} {'baseline':>14} {'ratio':>6}  (instructions per call)")
    with (
        tempfile.TemporaryDirectory(prefix="agentstream-instructions-") as name,
        ThreadPoolExecutor(args.jobs) as pool,
    ):
        paths: dict[str, Path] = {}
        rows = [row for row in ROWS if args.only in row[0]]
        dialects = {row[1] for row in rows} | {row[1] for row in PROCESS_ROWS if args.only in row[0]}
        for dialect in dialects:
            paths[dialect] = Path(name) / f"{dialect}.ndjson"
            paths[dialect].write_bytes(realistic.generate(dialect, seed=args.seed, size=args.size))
        counts = Counts(pool, paths)
        for measure, dialect, (mine, _), (theirs, _) in rows:
            ours, base = counts.of(measure, mine, dialect), counts.of(measure, theirs, dialect)
            print(f"{measure:38} {ours:>14,} {base:>14,} {base / ours:6.2f}  vs {theirs}", flush=True)
        process_rows(pool, paths, args.only)


if __name__ == "__main__":
    main()
