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


STRICT_SURFACE = (
    "tests/_public_api_usage.py",
    "src/agentstream/__init__.py",
    "src/agentstream/protocol.py",
    "src/agentstream/consumer",
    "src/agentstream/stream.py",
    "src/agentstream/transcript.py",
    "src/agentstream/errors.py",
    "src/agentstream/plugins.py",
)


@pytest.mark.slow
def test_the_public_surface_passes_mypy_strict(tmp_path: Path) -> None:
    """The names a user imports type-check under ``--strict``, from a user's file (re-exports included)."""
    import agentstream

    usage = (ROOT / STRICT_SURFACE[0]).read_text()
    missing = [name for name in agentstream.__all__ if not re.search(rf"\b{re.escape(name)}\b", usage)]
    assert not missing, f"{STRICT_SURFACE[0]} does not use: {missing}"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--python-version",
            "3.11",
            "--cache-dir",
            str(tmp_path),
            *STRICT_SURFACE,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    assert "Success: no issues found" in proc.stdout, report
