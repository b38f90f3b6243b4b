"""Benchmark of ``agentstream usage`` against ccusage on the same generated Claude Code log tree.

    .venv/bin/python bench/bench_usage.py [--size 1GiB] [--seed 1]

Generates a seeded ``CLAUDE_CONFIG_DIR`` tree of about ``--size`` (in the temp
directory, deleted afterwards) with the test suite's generator, then runs, as
processes on that tree in the same run, ``agentstream usage --cli claude --json``
and ``ccusage daily --json --offline`` (tests/peers, ``npm install`` there first).
Each is run twice, the best wall time kept; the first run also warms the page
cache for both. Ratio = ccusage's time / ours (above 1.0: we are faster). The
totals of both must agree, or the numbers mean nothing and the benchmark fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests._claude_log_gen import write_tree  # noqa: E402

CCUSAGE = ROOT / "tests" / "peers" / "node_modules" / "ccusage" / "dist" / "index.js"


def _size(text: str) -> int:
    units = {"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30}
    for unit, factor in units.items():
        if text.upper().endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def _tree_bytes(root: Path) -> int:
    return sum(path.stat().st_size for path in root.rglob("*.jsonl"))


def _best(argv: list[str], env: dict[str, str], rounds: int = 2) -> tuple[float, str]:
    best, out = float("inf"), ""
    for _ in range(rounds):
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"{argv[0]} failed: {done.stderr[-2000:]}")
        best, out = min(best, elapsed), done.stdout
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", default="1GiB", help="approximate size of the generated tree")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    node = shutil.which("node")
    if node is None or not CCUSAGE.exists():
        raise SystemExit("needs node and ccusage: run 'npm install' in tests/peers")
    target = _size(args.size)
    with tempfile.TemporaryDirectory(prefix="bench-usage-") as tmp:
        root = Path(tmp) / "claude"
        sessions, turns = 0, 200
        started = time.perf_counter()
        while True:
            batch = 50
            write_tree(
                root / f"batch{sessions}", seed=args.seed + sessions, sessions=batch, turns=turns, filler=900
            )
            sessions += batch
            if _tree_bytes(root) >= target:
                break
        # One CLAUDE_CONFIG_DIR with every batch's projects under it.
        config = Path(tmp) / "config"
        (config / "projects").mkdir(parents=True)
        for batch in root.iterdir():
            for project in (batch / "projects").iterdir():
                project.rename(config / "projects" / f"{batch.name}{project.name}")
        size = _tree_bytes(config)
        files = sum(1 for _ in config.rglob("*.jsonl"))
        print(
            f"generated {size / (1 << 30):.2f} GiB in {files} files ({time.perf_counter() - started:.0f} s)"
        )
        env = {**os.environ, "CLAUDE_CONFIG_DIR": str(config), "TZ": "UTC"}
        ours_s, ours_out = _best(
            [
                sys.executable,
                "-m",
                "agentstream",
                "usage",
                str(config / "projects"),
                "--cli",
                "claude",
                "--json",
            ],
            env,
        )
        theirs_s, theirs_out = _best(
            [node, "--max-old-space-size=8192", str(CCUSAGE), "daily", "--json", "--offline"], env
        )
    ours, theirs = json.loads(ours_out)["result"]["totals"], json.loads(theirs_out)["totals"]
    agree = (
        ours["input_tokens"],
        ours["output_tokens"],
        ours["cache_read_tokens"],
        ours["cache_write_tokens"],
    ) == (
        theirs["inputTokens"],
        theirs["outputTokens"],
        theirs["cacheReadTokens"],
        theirs["cacheCreationTokens"],
    )
    print(f"agentstream usage: {ours_s:.2f} s ({size / ours_s / (1 << 20):.0f} MiB/s)")
    print(f"ccusage daily:     {theirs_s:.2f} s ({size / theirs_s / (1 << 20):.0f} MiB/s)")
    print(f"ratio (ccusage / ours): {theirs_s / ours_s:.2f}x; totals agree: {agree}")
    if not agree:
        raise SystemExit(f"totals differ: ours {ours}, ccusage {theirs}")


if __name__ == "__main__":
    main()
