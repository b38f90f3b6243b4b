"""Every benchmark, one after another: ``.venv/bin/python bench/run_all.py [--quick]``.

Each prints its own ratios against baselines measured in the same run; see
``docs/performance.md`` for what they measure and the figures last recorded.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

QUICK_ARGS = {
    "bench_foundation.py": ["--quick"],
    "bench_convert.py": ["--quick"],
    "bench_hotpath.py": ["--quick"],
    "bench_agent.py": ["--rounds", "3"],
    "bench_bus.py": ["--throughput-events", "10000"],
    "bench_serve.py": ["--events", "100"],
    "instructions.py": ["--size", "256KiB"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs of each benchmark")
    args = parser.parse_args()
    failed = 0
    for script, quick in QUICK_ARGS.items():
        print(f"== {script}", flush=True)
        argv = [sys.executable, str(HERE / script), *(quick if args.quick else [])]
        failed += subprocess.run(argv, check=False).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
