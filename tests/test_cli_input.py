"""The input side of the reading commands: a stdin that is not there, and dialect detection in ``validate``.

``validate`` chooses how to check an input by its dialect, so it must see the
same dialect the reader (and with it ``convert`` and ``view``) sees: whole JSON
documents, noise before the first event and the fallback notice included. Every
test runs the real ``agentstream`` command in its own process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentstream.consumer import read

ROOT = Path(__file__).resolve().parent.parent
CLAUDE = ROOT / "tests" / "fixtures" / "dialects" / "claude"
CLAUDE_RUN = CLAUDE / "partial-messages.ndjson"
"""A whole recorded run that validates clean."""
CLI = [str(Path(sys.executable).with_name("agentstream"))]
"""The installed command itself (not ``python -m``, whose runpy start-up is not ours)."""


def _run(*argv: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CLI, *argv], input=stdin, capture_output=True, timeout=60)


# -- a closed stdin ---------------------------------------------------------------------------------

READERS = {
    "convert": ["convert"],
    "validate": ["validate"],
    "view": ["view"],
    "export": ["export", "otel", "--endpoint", "http://127.0.0.1:9"],
    "convert-dash": ["convert", "--from", "claude", "-"],
}
"""Every command that reads FILE, or stdin by default."""


@pytest.mark.parametrize("name", sorted(READERS))
def test_a_closed_stdin_is_a_usage_error_with_a_fix(name: str, tmp_path: Path) -> None:
    done = subprocess.run(
        ["sh", "-c", 'exec "$@" <&-', "sh", *CLI, *READERS[name]],
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
    )
    stderr = done.stderr.decode()
    assert done.returncode == 2, stderr
    assert "Traceback" not in stderr
    command = READERS[name][0]
    assert f"agentstream {command}: INVALID_INPUT: stdin is not open (was it closed with <&-?)" in stderr
    assert "\n  fix: pass FILE" in stderr
    assert done.stdout == b""


@pytest.mark.parametrize(
    "argv",
    [
        ["exec", "--provider", "demo", "-"],
        ["exec", "--provider", "demo", "--input-format", "stream-json"],
        ["acp"],
    ],
    ids=["exec-prompt", "exec-turns", "acp"],
)
def test_a_closed_stdin_is_a_usage_error_for_the_commands_that_talk_over_it(
    argv: list[str], tmp_path: Path
) -> None:
    done = subprocess.run(
        ["sh", "-c", 'exec "$@" <&-', "sh", *CLI, *argv], capture_output=True, cwd=tmp_path, timeout=60
    )
    stderr = done.stderr.decode()
    assert done.returncode == 2 and "Traceback" not in stderr, stderr
    assert (
        f"agentstream {argv[0]}: INVALID_INPUT: stdin is not open (was it closed with <&-?)\n  fix: "
        in stderr
    )


def test_a_closed_stdin_does_not_matter_when_a_file_is_named(tmp_path: Path) -> None:
    """Only reading ``-`` needs stdin: the check is where stdin is read, not at start-up."""
    path = tmp_path / "run.ndjson"
    path.write_bytes(_run("demo", "--delay", "0").stdout)
    done = subprocess.run(
        ["sh", "-c", 'exec "$@" <&-', "sh", *CLI, "validate", str(path)], capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr.decode().endswith("(canonical), valid\n")


# -- validate detects what the reader detects -------------------------------------------------------


def _claude_result() -> dict[str, object]:
    """The last line of a recorded Claude Code run: its ``--output-format json`` document."""
    lines = CLAUDE_RUN.read_bytes().splitlines()
    result: dict[str, object] = json.loads(lines[-1])
    assert result["type"] == "result"
    return result


GEMINI = {"session_id": "9b1c-json", "response": "The file says hi.", "stats": {"models": {}}}
NOISE = b"".join(b"npm WARN deprecated package-%d@1.0.0\n" % n for n in range(12))

DOCUMENTS = {
    "gemini-json-compact": (json.dumps(GEMINI) + "\n").encode(),
    "gemini-json-pretty": (json.dumps(GEMINI, indent=2) + "\n").encode(),
    "claude-json-pretty": (json.dumps(_claude_result(), indent=2) + "\n").encode(),
    "claude-json-verbose-array": (CLAUDE / "verbose-json-array.json").read_bytes(),
}
"""A CLI's ``json`` output: one document, which no line of a stream looks like."""


def _read_dialect(source: bytes | Path) -> str | None:
    """The dialect the library's reader chooses for ``source`` (known once it has read the input)."""
    reader = read(source)
    list(reader)
    return reader.dialect


def _summary(stdout: bytes) -> dict[str, object]:
    summary = json.loads(stdout.splitlines()[-1])
    assert isinstance(summary, dict) and "dialect" in summary, summary
    return summary


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_validate_recognises_a_whole_json_document_as_the_reader_does(name: str) -> None:
    data = DOCUMENTS[name]
    expected = _read_dialect(data)
    assert expected == name.partition("-")[0]
    checked = _run("validate", "--json", "-", stdin=data)
    assert checked.returncode == 0, checked.stdout.decode()
    summary = _summary(checked.stdout)
    assert summary["valid"] is True and summary["dialect"] == expected
    converted = _run("convert", "-", stdin=data)
    assert converted.returncode == 0, converted.stderr.decode()
    assert summary["events"] == len(converted.stdout.splitlines())  # it checked what convert writes
    assert b"UNKNOWN_DIALECT" not in checked.stderr + converted.stdout


def test_validate_looks_past_noise_before_the_first_event_as_the_reader_does(tmp_path: Path) -> None:
    """More lines of noise than the detection window holds objects, then a Claude stream."""
    path = tmp_path / "noisy.ndjson"
    path.write_bytes(NOISE + CLAUDE_RUN.read_bytes())
    assert _read_dialect(path) == "claude"
    checked = _run("validate", "--json", str(path))
    summary = _summary(checked.stdout)
    assert summary["dialect"] == "claude", checked.stdout.decode()
    violations = [json.loads(line) for line in checked.stdout.splitlines()[:-1]]
    assert [v["line"] for v in violations] == list(range(1, 13))  # the noise, and nothing else
    assert {v["rule"] for v in violations} == {"malformed"} and checked.returncode == 1


def test_validate_says_when_no_dialect_matches_as_convert_does(tmp_path: Path) -> None:
    path = tmp_path / "ticks.ndjson"
    path.write_bytes(b"".join(b'{"kind":"tick","n":%d}\n' % n for n in range(3)))
    converted = _run("convert", str(path))
    notices = [
        e for e in map(json.loads, converted.stdout.splitlines()) if e.get("code") == "UNKNOWN_DIALECT"
    ]
    assert len(notices) == 1
    checked = _run("validate", str(path))
    assert checked.returncode == 1
    stderr = checked.stderr.decode()
    assert stderr.startswith(
        f"agentstream validate: UNKNOWN_DIALECT: {notices[0]['message']}\n  fix: {notices[0]['fix']}\n"
    ), stderr
    assert stderr.endswith("ticks.ndjson: 0 events (canonical), 5 violations\n")
    assert checked.stdout.count(b": malformed: ") == 3  # still checked as canonical, line by line
    quiet = _run("validate", "--quiet", str(path))
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (1, b"", b"")


def test_validate_of_canonical_input_does_not_load_the_dialects(tmp_path: Path) -> None:
    """The common case keeps its fast start: a canonical first line decides without the detection machinery."""
    path = tmp_path / "run.ndjson"
    path.write_bytes(_run("demo", "--delay", "0").stdout)
    code = (
        "import sys; from agentstream.cli import main; code = main(['validate', sys.argv[1]]);"
        "print(code, sorted(m for m in sys.modules if m.startswith(('agentstream.dialects', 'agentstream.consumer'))))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, timeout=60)
    assert done.stdout.decode().split(maxsplit=1) == ["0", "[]\n"], done.stderr.decode()
