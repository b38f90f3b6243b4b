"""Optional dependencies: what each command needs is declared, and a missing extra is a clear exit 2.

The missing-extra runs put a directory first on ``PYTHONPATH`` whose ``openai``,
``anthropic`` and ``redis`` packages raise ImportError when imported, exactly what
an install without ``agentstream[agent]`` / ``[redis]`` does to the real code.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import msgspec
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "agentstream"
BLOCKED = ("openai", "anthropic", "redis")


@pytest.fixture(scope="module")
def without_extras(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment in which the extras' packages cannot be imported."""
    stubs = tmp_path_factory.mktemp("no-extras")
    for name in BLOCKED:
        (stubs / name).mkdir()
        (stubs / name / "__init__.py").write_text(
            f"raise ImportError('{name} is not installed (test stub)')\n"
        )
    return {
        **os.environ,
        "PYTHONPATH": str(stubs),
        "OPENAI_API_KEY": "sk-test",
        "ANTHROPIC_API_KEY": "sk-test",
    }


def agentstream(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "agentstream", *args],
        capture_output=True,
        env=env,
        cwd=cwd,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_exec_without_the_agent_extra_exits_2_with_the_install_command(
    provider: str, without_extras: dict[str, str], tmp_path: Path
) -> None:
    done = agentstream(without_extras, tmp_path, "exec", "--provider", provider, "-o", "stream-json", "hi")
    assert done.returncode == 2, done.stderr
    result = msgspec.json.decode(done.stdout.splitlines()[-1])
    assert result["type"] == "result" and result["exit_code"] == 2
    assert result["error"]["code"] == "MISSING_DEPENDENCY"
    assert result["error"]["fix"] == "pip install 'agentstream[agent]'"
    assert f"the Python package '{provider}'" in result["error"]["message"]
    assert "fix: pip install 'agentstream[agent]'" in done.stderr.decode()


def test_follow_on_redis_without_the_redis_extra_exits_2_with_the_install_command(
    without_extras: dict[str, str], tmp_path: Path
) -> None:
    done = agentstream(without_extras, tmp_path, "follow", "--bus", "redis://127.0.0.1:9/0", "run_1")
    assert done.returncode == 2, done.stderr
    result = msgspec.json.decode(done.stdout.splitlines()[-1])
    assert result["error"]["code"] == "MISSING_DEPENDENCY"
    assert result["error"]["fix"] == "pip install 'agentstream[redis]'"


def test_the_core_commands_need_no_extra(without_extras: dict[str, str], tmp_path: Path) -> None:
    """A stream reader's commands, and exec on a recording, run on msgspec alone."""
    demo = agentstream(without_extras, tmp_path, "demo")
    assert demo.returncode == 0, demo.stderr
    (tmp_path / "demo.ndjson").write_bytes(demo.stdout)
    assert agentstream(without_extras, tmp_path, "validate", "-q", "demo.ndjson").returncode == 0
    replay = agentstream(without_extras, tmp_path, "exec", "--provider", "demo", "-o", "stream-json", "hi")
    assert replay.returncode == 0, replay.stderr
    assert msgspec.json.decode(replay.stdout.splitlines()[-1])["ok"] is True


# -- every third-party import is declared ---------------------------------------------


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared_distributions() -> set[str]:
    """The core dependencies and every extra's, by normalised distribution name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"]]
    for extra, extra_requirements in project["optional-dependencies"].items():
        if extra != "test":  # the test extra is not a runtime declaration
            requirements += extra_requirements
    names = {
        _normalise(re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0]) for requirement in requirements
    }
    return names - {"agentstream"}


def _imported_top_levels(path: Path) -> set[str]:
    """Top-level names of every absolute import in a module, wherever it sits (functions, TYPE_CHECKING)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.partition(".")[0])
    return found


def test_every_third_party_import_is_a_declared_dependency() -> None:
    declared = _declared_distributions()
    providers = packages_distributions()  # import name -> the distributions that install it
    undeclared: list[str] = []
    for module in sorted(PACKAGE.rglob("*.py")):
        for name in sorted(_imported_top_levels(module)):
            if name in sys.stdlib_module_names or name in ("agentstream", "__future__"):
                continue
            distributions = {_normalise(dist) for dist in providers.get(name, [])}
            if not distributions & declared:
                where = module.relative_to(ROOT)
                undeclared.append(
                    f"{where}: {name} (from {', '.join(sorted(distributions)) or 'nothing installed'})"
                )
    assert not undeclared, "imports of packages not declared in pyproject.toml:\n" + "\n".join(undeclared)


def test_the_import_walker_sees_imports_inside_functions(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os\n\ndef f():\n    import httpx2.exceptions\n    from redis.retry import Retry\n"
    )
    assert _imported_top_levels(sample) == {"os", "httpx2", "redis"}
