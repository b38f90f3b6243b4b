"""The package type-checks cleanly with mypy, under the settings in pyproject.toml's ``[tool.mypy]``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "agentstream"


def _cache_dir(request: pytest.FixtureRequest, tmp_path: Path, name: str) -> Path:
    """mypy's cache, kept between runs in pytest's cache (``-p no:cacheprovider``: a fresh one).

    mypy checks incrementally, with the same result as from scratch: a kept cache turns ~5 s of
    CPU a check into what the edits since the last run cost.
    """
    cache = getattr(request.config, "cache", None)
    return cache.mkdir(name) if cache is not None else tmp_path


def _mypy(cache: Path, *args: str) -> tuple[int, str, str]:
    """Run mypy from the project root; (exit code, stdout, stdout + stderr for the failure message)."""
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(cache), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc.returncode, proc.stdout, proc.stdout + proc.stderr


@pytest.mark.slow
def test_typing_mypy_reports_no_errors(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    code, out, report = _mypy(
        _cache_dir(request, tmp_path, "mypy"), "--config-file", str(ROOT / "pyproject.toml")
    )
    assert code == 0, report
    # It must have checked the whole package, not an empty or mistyped path.
    checked = re.search(r"Success: no issues found in (\d+) source files", out)
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
def test_the_public_surface_passes_mypy_strict(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The names a user imports type-check under ``--strict``, from a user's file (re-exports included)."""
    import agentstream

    usage = (ROOT / STRICT_SURFACE[0]).read_text()
    missing = [name for name in agentstream.__all__ if not re.search(rf"\b{re.escape(name)}\b", usage)]
    assert not missing, f"{STRICT_SURFACE[0]} does not use: {missing}"
    code, out, report = _mypy(
        _cache_dir(request, tmp_path, "mypy-strict"), "--strict", "--python-version", "3.11", *STRICT_SURFACE
    )
    assert code == 0, report
    assert "Success: no issues found" in out, report
