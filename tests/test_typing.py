"""The package type-checks cleanly with mypy, under the settings in pyproject.toml's ``[tool.mypy]``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "agentstream"


@pytest.mark.slow
def test_typing_mypy_reports_no_errors(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy is not installed; pip install -e '.[test]' brings it")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    # It must have checked the whole package, not an empty or mistyped path.
    checked = re.search(r"Success: no issues found in (\d+) source files", proc.stdout)
    assert checked is not None, report
    assert int(checked.group(1)) == sum(1 for _ in PACKAGE.rglob("*.py")), report
