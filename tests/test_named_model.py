"""The model a CLI's command line asks for, in the events of a spawned CLI whose stream never names its own.

Codex's ``exec --json`` and opencode's ``run --format json`` print no model: a spawned child's ``start`` and
``usage`` name the one its ``-m``/``--model`` option gives, else ``unknown``. The children here are stand-ins
named as the CLIs, printing lines the real ones printed (``tests/fixtures/dialects``); the real CLIs are driven
in ``test_real_codex_cli.py`` and ``test_real_opencode_cli.py``.
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from _dialect_kit import one, only, violations
from agentstream import protocol as p
from agentstream.consumer import read, spawn
from agentstream.dialects.base import NamedModel, option_value

FIXTURES = Path(__file__).parent / "fixtures" / "dialects"
CODEX_LINES = FIXTURES / "codex" / "real-0.171.0-tools.ndjson"
OPENCODE_LINES = FIXTURES / "opencode" / "real-1.18.33-tools.ndjson"


@pytest.mark.parametrize(
    ("argv", "model"),
    [
        (["codex", "exec", "--json", "-m", "gpt-5.5", "hi"], "gpt-5.5"),
        (["/opt/bin/codex", "exec", "--model", "o3", "hi"], "o3"),
        (["npx", "@openai/codex", "exec", "--model=o4-mini", "hi"], "o4-mini"),
        (["node", "/x/codex.js", "exec", "-m=gpt-5", "hi"], "gpt-5"),
        (["codex-x86_64-unknown-linux-musl", "exec", "-m", "a", "-m", "b"], "b"),  # the last one counts
        (["codex", "exec", "-m", "a", "-m", "--json"], "a"),  # an option is no model
        (["codex", "exec", "--json", "hi"], None),
        (["codex", "exec", "-m"], None),
        (["codex", "exec", "--model=", "hi"], None),
        (["codex", "exec", "--", "-m", "x"], None),  # after a lone --: arguments
        (["sh", "run.sh", "-m", "x"], None),  # a script's own -m means what the script says
        (["-m", "x", "codex", "exec"], None),  # before the program: not the CLI's option
        (["codexx", "-m", "x"], None),
    ],
)
def test_the_model_option_is_read_only_after_the_program(argv: list[str], model: str | None) -> None:
    assert option_value(argv, "codex", ("-m", "--model")) == model


def _stand_in(tmp_path: Path, name: str, lines: Path) -> str:
    """An executable named ``name`` that prints ``lines`` and exits 0, whatever its arguments."""
    script = tmp_path / name
    script.write_text(
        f"#!{sys.executable}\nimport sys\nsys.stdout.buffer.write(open({str(lines)!r}, 'rb').read())\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def _spawned(argv: list[str], dialect: str) -> list[p.AnyEvent]:
    with spawn(argv, dialect, exit_timeout_s=5) as child:
        events = list(child)
    assert not violations(events)
    return events


@pytest.mark.parametrize("dialect", ["codex", "auto"])
def test_a_spawned_codex_names_the_model_its_command_line_asks_for(tmp_path: Path, dialect: str) -> None:
    codex = _stand_in(tmp_path, "codex", CODEX_LINES)
    events = _spawned([codex, "exec", "--json", "-m", "gpt-5.5", "list the files"], dialect)
    start = one(events, p.Start)
    assert (start.model, start.provider) == ("gpt-5.5", p.UNSET)
    usages = only(events, p.Usage)
    assert usages and {usage.model for usage in usages} == {"gpt-5.5"}
    # the same lines read from a file, or printed by a codex told no model, name none
    for unnamed in (list(read(CODEX_LINES.read_bytes(), "codex")), _spawned([codex, "exec", "hi"], dialect)):
        assert one(unnamed, p.Start).model is p.UNSET
        assert {usage.model for usage in only(unnamed, p.Usage)} == {"unknown"}


def test_a_spawned_opencode_names_the_provider_and_the_model_apart(tmp_path: Path) -> None:
    opencode = _stand_in(tmp_path, "opencode", OPENCODE_LINES)
    events = _spawned(
        [opencode, "run", "--format", "json", "--model", "openrouter/anthropic/claude"], "opencode"
    )
    start = one(events, p.Start)
    assert (start.model, start.provider) == (
        "anthropic/claude",
        "openrouter",
    )  # the provider is the first part
    usages = only(events, p.Usage)
    assert usages and {usage.model for usage in usages} == {"anthropic/claude"}
    assert {usage.model for usage in only(read(OPENCODE_LINES.read_bytes(), "opencode"), p.Usage)} == {
        "unknown"
    }


def test_a_model_name_without_a_provider_is_the_model() -> None:
    from agentstream.dialects import get_dialect

    assert get_dialect("opencode").named_model(["opencode", "run", "-m", "solo"]) == NamedModel("solo")
    assert (
        get_dialect("claude").named_model(["claude", "-p", "--model", "opus"]) is None
    )  # its stream names it
