"""Plugins through real entry points: a toy package is pip-installed and used through the CLI.

The toy package (``tests/plugins/toy``) declares a dialect, a provider, a toolset,
a bus backend and a command, plus a plugin that cannot be imported and one that
reuses a built-in's name. It is installed with ``pip install --target`` into a
scratch directory put on ``PYTHONPATH``, so ``importlib.metadata`` finds its
``entry_points.txt`` exactly as it would in a virtualenv; nothing is patched.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

import msgspec
import pytest

ROOT = Path(__file__).resolve().parent.parent
TOY = ROOT / "tests" / "plugins" / "toy"


def _registries() -> dict[str, Mapping[str, str]]:
    """Each group's built-ins as the code knows them statically."""
    from agentstream.agent.providers import PROVIDERS
    from agentstream.agent.tools import TOOLSETS
    from agentstream.bus import BACKENDS
    from agentstream.cli import command_registry
    from agentstream.dialects import DIALECTS

    registries = (DIALECTS, PROVIDERS, BACKENDS, TOOLSETS, command_registry())
    return {registry.group: registry.builtins for registry in registries}


def test_built_ins_are_declared_in_pyproject_exactly_as_the_code_knows_them() -> None:
    from agentstream.plugins import GROUPS

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    known = _registries()
    assert set(known) == set(GROUPS)
    for group, builtins in known.items():
        assert declared[group] == dict(builtins), f"pyproject.toml and the code disagree on {group}"


def test_installed_entry_points_match_pyproject() -> None:
    """The editable install's metadata is current (re-run ``pip install -e .`` after editing pyproject)."""
    from importlib.metadata import entry_points

    for group, builtins in _registries().items():
        ours = {
            ep.name: ep.value for ep in entry_points(group=group) if ep.dist and ep.dist.name == "agentstream"
        }
        assert ours == dict(builtins), f"reinstall: pip install -e . ({group} is stale)"


def test_every_built_in_loads() -> None:
    from agentstream.plugins import load_reference

    for group, builtins in _registries().items():
        for name, reference in builtins.items():
            assert load_reference(reference) is not None, f"{group}:{name}"


@pytest.fixture(scope="module")
def toy_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment whose ``PYTHONPATH`` holds the installed toy plugin."""
    target = tmp_path_factory.mktemp("toy-plugin")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(TOY),
        ],
        check=True,
        capture_output=True,
    )
    assert list(target.glob("agentstream_toy-*.dist-info/entry_points.txt"))
    return {**os.environ, "PYTHONPATH": str(target)}


def agentstream(
    env: dict[str, str], *args: str, stdin: bytes = b"", cwd: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "agentstream", *args],
        input=stdin,
        capture_output=True,
        env={**env, "AGENTSTREAM_HOME": os.environ["AGENTSTREAM_HOME"]},
        cwd=cwd,
        timeout=60,
        check=False,
    )


def test_dialects_lists_the_plugin_and_survives_a_broken_one(toy_env: dict[str, str]) -> None:
    from agentstream.dialects import DIALECT_NAMES

    done = agentstream(toy_env, "dialects", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in map(msgspec.json.decode, done.stdout.splitlines())}
    assert list(rows) == [*DIALECT_NAMES, "broken", "toy"]
    assert rows["toy"] == {
        "name": "toy",
        "summary": "The toy plugin's two-line format",
        "available": True,
        "plugin": "agentstream-toy",
        "encodes": True,
    }
    assert rows["broken"]["available"] is False
    assert rows["claude"]["plugin"] is None and "Claude Code" in rows["claude"]["summary"]
    errors = done.stderr.decode().splitlines()
    broken = [line for line in errors if "'broken'" in line]
    assert len(broken) == 1, errors  # reported once
    assert "agentstream-toy" in broken[0] and "ModuleNotFoundError" in broken[0] and "skipped" in broken[0]
    assert any("'claude'" in line and "a built-in has that name" in line for line in errors)


TOY_LINES = b'{"toy":"say","text":"hello"}\n{"toy":"done","ok":true}\n'


def test_convert_reads_and_writes_the_plugin_dialect(toy_env: dict[str, str], tmp_path: Path) -> None:
    source = tmp_path / "toy.ndjson"
    source.write_bytes(TOY_LINES)
    for args in (("--from", "toy"), ()):  # named, then recognised by its sniff
        done = agentstream(toy_env, "convert", *args, str(source))
        assert done.returncode == 0, done.stderr
        events = [msgspec.json.decode(line) for line in done.stdout.splitlines()]
        assert [e["type"] for e in events] == ["start", "message", "result"]
        assert events[1]["content"] == "hello" and events[2]["ok"] is True
    back = agentstream(toy_env, "convert", "--to", "toy", "-", stdin=done.stdout)
    assert back.returncode == 0, back.stderr
    assert back.stdout == TOY_LINES.replace(b'":"', b'": "').replace(b'","', b'", "').replace(
        b":true", b": true"
    )


def test_exec_runs_a_turn_with_the_plugin_provider_and_tool(toy_env: dict[str, str], tmp_path: Path) -> None:
    done = agentstream(
        toy_env, "exec", "--provider", "toy", "-o", "stream-json", "make it loud", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    events = [msgspec.json.decode(line) for line in done.stdout.splitlines()]
    start, result = events[0], events[-1]
    assert start["provider"] == "toy" and start["model"] == "toy-1" and "shout" in start["tools"]
    tool_result = next(e for e in events if e["type"] == "tool_result")
    assert tool_result["output"] == "MAKE IT LOUD"
    assert result["ok"] is True and result["tools_used"] == ["shout"]
    assert any(e["type"] == "message" and e["content"] == "toy heard: MAKE IT LOUD" for e in events)


def test_an_unknown_provider_lists_the_plugins_too(toy_env: dict[str, str], tmp_path: Path) -> None:
    done = agentstream(toy_env, "exec", "--provider", "nope", "hi", cwd=tmp_path)
    assert done.returncode == 2
    error = msgspec.json.decode(done.stdout.splitlines()[-1])["error"]
    assert error["message"] == "unknown provider 'nope'"
    assert error["fix"] == "use one of: openai, anthropic, ollama, replay, demo, toy"


def test_a_plugin_command_runs_and_is_listed(toy_env: dict[str, str]) -> None:
    done = agentstream(toy_env, "toy-hello", "bob")
    assert (done.returncode, done.stdout) == (0, b"hello, bob, from the toy plugin\n")
    listed = agentstream(toy_env, "--help").stdout.decode()
    assert re.search(r"^  toy-hello +Say hello from the toy plugin$", listed, re.MULTILINE)
    assert agentstream(toy_env, "toy-hello", "--help").stdout.startswith(b"usage: agentstream toy-hello")


def test_a_plugin_bus_backend_is_chosen_by_the_url_scheme(toy_env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "toy-bus.sqlite3"
    sent = agentstream(
        toy_env, "send", "deploy/finished", "--data", '{"ok":true}', "--bus", f"toybus://{path}"
    )
    assert sent.returncode == 0, sent.stderr
    run_id = msgspec.json.decode(sent.stdout)["result"]["run_id"]
    assert path.exists()
    runs = agentstream(toy_env, "runs", "--bus", f"toybus://{path}")
    assert runs.returncode == 0, runs.stderr
    assert [run["run_id"] for run in msgspec.json.decode(runs.stdout)["result"]["runs"]] == [run_id]


def test_entry_points_are_read_as_importlib_metadata_reads_them(toy_env: dict[str, str]) -> None:
    """agentstream's own reader of ``entry_points.txt`` finds what the standard library finds."""
    probe = (
        "from importlib.metadata import entry_points\n"
        "from agentstream.plugins import GROUPS, installed_entry_points\n"
        "ours = sorted((g, e.name, e.value, e.distribution) for g in GROUPS for e in installed_entry_points().get(g, []))\n"
        "theirs = sorted((g, e.name, e.value, e.dist.name.replace('_', '-').lower()) for g in GROUPS for e in entry_points(group=g))\n"
        "assert ours == theirs, (ours, theirs)\n"
        "print(len(ours))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], env=toy_env, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
    toy_entries = 7
    assert int(done.stdout) == sum(map(len, _registries().values())) + toy_entries


def test_the_common_path_reads_no_entry_points_and_imports_no_dialect(tmp_path: Path) -> None:
    """``--version`` and a canonical ``validate`` read no metadata and import no dialect module."""
    sample = tmp_path / "ok.ndjson"
    sample.write_bytes(
        b'{"type":"start","v":1,"session_id":"s","seq":0,"ts":"2025-01-01T00:00:00Z","command":"x"}\n'
        b'{"type":"result","v":1,"session_id":"s","seq":1,"ts":"2025-01-01T00:00:00Z","ok":true,'
        b'"subtype":"success","exit_code":0}\n'
    )
    probe = (
        "import sys\n"
        "from agentstream.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "import agentstream.plugins as plugins\n"
        "loaded = sorted(m for m in sys.modules if m == 'importlib.metadata' or m.startswith('agentstream.dialects.'))\n"
        "loaded += ['scanned'] if plugins._installed is not None else []\n"
        "sys.stderr.write(repr(loaded))\n"
        "sys.exit(code)\n"
    )
    for args, expected in (
        (["--version"], []),
        (["validate", "-q", str(sample)], []),
        (["--help"], ["scanned"]),  # lists plugin commands: reads entry points, without importlib.metadata
    ):
        done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stderr.decode().splitlines()[-1] == repr(expected)
