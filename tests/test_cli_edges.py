"""The command line at its edges: signals at any moment, a stdout that cannot be written, usage errors.

Every test runs the real ``agentstream`` command in a real process and sends real
signals or gives it a real broken stdout (a closed pipe, /dev/full, a closed fd).
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agentstream.validate import validate_stream

ROOT = Path(__file__).resolve().parent.parent
CASSETTE = ROOT / "src" / "agentstream" / "data" / "demo.cassette.jsonl"
FIXTURE = ROOT / "tests" / "fixtures" / "dialects" / "claude" / "api-error.ndjson"
CLI = [str(Path(sys.executable).with_name("agentstream"))]
"""The installed command itself (not ``python -m``, whose runpy start-up is not ours)."""

SWEEP_SIZE = int(os.environ.get("AGENTSTREAM_SIGNAL_SWEEP", "24"))
"""Signals sent per command; set it higher to measure (the report's figures used 80)."""

RUNS = {
    "exec": [
        "exec",
        "--provider",
        "replay",
        "--cassette",
        str(CASSETTE),
        "--permission-mode",
        "read-only",
        "list the files",
    ],
    "demo": ["demo", "--delay", "0.01"],
}


def _events(stdout: bytes) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def _outcome(signum: int, code: int, stdout: bytes, stderr: bytes) -> str:
    """What one signalled run did: the only acceptable outcomes are the first three."""
    if not stdout and (
        code == -signum or b"KeyboardInterrupt" in stderr or b"Fatal Python error: init_" in stderr
    ):
        # Killed by the signal's default action, or the interpreter's own start-up failed on it
        # (SIGINT while it sets up its streams or imports site): our handlers were not installed
        # yet. Once they are, none of these can happen.
        return "before_handlers"
    try:
        events = _events(stdout)
    except ValueError:
        return f"torn output (exit {code})"
    if not events or events[0]["type"] != "start" or events[-1]["type"] != "result":
        said = stderr.decode(errors="replace").strip().splitlines()[-3:]
        return f"no whole stream (exit {code}, {len(events)} lines; stderr ends {said})"
    violations = list(validate_stream(io.BytesIO(stdout), expect_exit=code))
    if violations:
        return f"invalid stream: {violations[0]}"
    result = events[-1]
    if result["exit_code"] != code:
        return f"exit {code} but result says {result['exit_code']}"
    if result["ok"] and code == 0:
        return "completed"  # the signal came after the result: the result's code stands
    error = result.get("error") or {}
    if code == 128 + signum and error.get("code") == "INTERRUPTED":  # type: ignore[union-attr]
        return "interrupted"
    return f"other ending {error} (exit {code})"


def _run_signalled(argv: list[str], signum: int, delay: float, cwd: Path) -> str:
    proc = subprocess.Popen([*CLI, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
    time.sleep(delay)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=30)
    return _outcome(signum, proc.returncode, stdout, stderr)


@pytest.mark.parametrize("command", sorted(RUNS))
def test_a_signal_at_any_moment_ends_the_run_as_one_whole_stream(command: str, tmp_path: Path) -> None:
    """A sweep of SIGINT/SIGTERM from process start to past the run's end."""
    argv = RUNS[command]
    began = time.monotonic()
    whole = subprocess.run([*CLI, *argv], capture_output=True, cwd=tmp_path, timeout=60)
    length = time.monotonic() - began
    assert whole.returncode == 0, whole.stderr.decode()
    delays = [length * 1.1 * i / (SWEEP_SIZE - 1) for i in range(SWEEP_SIZE)]
    signals = [signal.SIGINT if i % 2 else signal.SIGTERM for i in range(SWEEP_SIZE)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = list(pool.map(lambda d, s: _run_signalled(argv, s, d, tmp_path), delays, signals))
    counts = Counter(outcomes)
    print(f"{command}: {SWEEP_SIZE} signals over {length:.2f}s: {dict(counts)}")
    unexpected = {k: v for k, v in counts.items() if k not in ("before_handlers", "interrupted", "completed")}
    assert not unexpected, counts
    assert counts["interrupted"] > 0, counts


def test_a_signal_inside_an_import_is_delivered_when_the_import_is_done(tmp_path: Path) -> None:
    """The class behind "a signal during a provider SDK's import": never a half-imported module."""
    (tmp_path / "slow_sdk.py").write_text(
        textwrap.dedent(
            """
            import os, signal, sys, time
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
            READY = True
            sys.stderr.write("import finished\\n")
            """
        )
    )
    script = tmp_path / "producer.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, time
            from agentstream import Stream
            with Stream("job") as s:
                import slow_sdk
                s.message("after the import: " + str(slow_sdk.READY))
                time.sleep(5)
            """
        )
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, cwd=tmp_path, timeout=30)
    events = _events(done.stdout)
    assert b"import finished" in done.stderr
    assert done.returncode == 143
    assert events[0]["type"] == "start"
    assert events[-1]["error"]["code"] == "INTERRUPTED"  # type: ignore[index]
    assert b"Traceback" not in done.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_after_the_result_does_not_change_the_exit_code(tmp_path: Path, signum: int) -> None:
    script = tmp_path / "late.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, sys, time
            from agentstream import cli
            run = cli._run
            def run_then_get_a_signal(args):
                code = run(args)  # the result is written; the process has not exited yet
                os.kill(os.getpid(), {int(signum)})
                time.sleep(5)
                return code
            cli._run = run_then_get_a_signal
            sys.argv = ["agentstream", "demo", "--delay", "0"]
            cli.entry()
            """
        )
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, cwd=tmp_path, timeout=30)
    events = _events(done.stdout)
    assert events[-1]["type"] == "result" and events[-1]["exit_code"] == 0
    assert done.returncode == 0, done.stderr.decode()


# -- stdout that cannot be written ---------------------------------------------------------------

WRITERS = {
    "demo": ["demo", "--delay", "0"],
    "demo-json": ["demo", "--delay", "0", "-o", "json"],
    "demo-text": ["demo", "--delay", "0", "-o", "text"],
    "demo-dialect": ["demo", "--delay", "0", "--dialect", "claude"],
    "exec": RUNS["exec"],
    "exec-json": [*RUNS["exec"], "-o", "json"],
    "convert": ["convert", str(FIXTURE)],
    "validate": ["validate", str(FIXTURE)],
    "runs": ["runs"],
    "sessions": ["sessions"],
    "dialects": ["dialects"],
    "schema": ["schema"],
    "logs": ["logs", str(FIXTURE)],
}
"""Every command that writes to stdout without a bus or a child to set up."""


def _run_into(
    argv: list[str], stdout: int | None, cwd: Path, pass_fds: tuple[int, ...] = ()
) -> tuple[int, str]:
    done = subprocess.run(
        [*CLI, *argv], stdout=stdout, stderr=subprocess.PIPE, cwd=cwd, timeout=60, pass_fds=pass_fds
    )
    return done.returncode, done.stderr.decode()


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_reader_gone_before_the_first_write_is_exit_141(name: str, tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `| true` that has already exited
    try:
        code, stderr = _run_into(WRITERS[name], write_end, tmp_path)
    finally:
        os.close(write_end)
    assert code == 141, stderr
    assert "Traceback" not in stderr and "OUTPUT" not in stderr


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_full_disk_is_one_line_on_stderr_and_exit_1(name: str, tmp_path: Path) -> None:
    with open("/dev/full", "wb") as full:
        code, stderr = _run_into(WRITERS[name], full.fileno(), tmp_path)
    assert code == 1, stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr
    assert stderr.count("OUTPUT_ERROR: cannot write to stdout: No space left on device") == 1, stderr


@pytest.mark.parametrize("name", ["demo", "exec", "convert", "runs"])
def test_a_closed_stdout_descriptor_is_a_clear_error(name: str, tmp_path: Path) -> None:
    done = subprocess.run(
        ["sh", "-c", 'exec "$@" >&-', "sh", *CLI, *WRITERS[name]],
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        timeout=60,
    )
    stderr = done.stderr.decode()
    assert done.returncode == 1, stderr
    assert "Traceback" not in stderr
    assert "OUTPUT_ERROR: stdout is not open" in stderr


# -- usage errors ---------------------------------------------------------------------------------

BAD_USAGE = {
    "exec": ["exec", "--dialect", "nosuch", "hi"],
    "exec-flag": ["exec", "--no-such-flag", "hi"],
    "exec-max-turns": ["exec", "--max-turns", "-1", "hi"],
    "exec-permission-timeout": ["exec", "--permission-timeout", "-1", "hi"],
    "exec-heartbeat": ["exec", "--heartbeat", "-5", "hi"],
    "exec-heartbeat-nan": ["exec", "--heartbeat", "nan", "hi"],
    "demo": ["demo", "--delay", "soon"],
    "wrap": ["wrap", "--grace", "-3", "--", "true"],
    "wrap-idle-timeout": ["wrap", "--from", "acp", "-p", "hi", "--idle-timeout", "0", "--", "true"],
    "logs": ["logs", "--timeout", "-1", "-f", "x.log"],
    "worker": ["worker", "--concurrency", "0"],
    # A dialect agentstream only reads cannot be the output (it once ended in a traceback).
    "exec-decode-only": ["exec", "--provider", "demo", "--dialect", "gemini-log", "hi"],
    "demo-decode-only": ["demo", "--dialect", "claude-log"],
    "wrap-decode-only": ["wrap", "--dialect", "codex-log", "--", "true"],
    "logs-decode-only": ["logs", "--dialect", "gemini-log", "x.log"],
    "wrap-two-dialects": ["wrap", "--to", "claude", "--dialect", "gemini", "--", "true"],
    "logs-timeout-without-follow": ["logs", "--timeout", "2", "x.log"],
}


@pytest.mark.parametrize("name", sorted(BAD_USAGE))
@pytest.mark.parametrize("output_format", ["stream-json", "json"])
def test_a_usage_error_of_a_stream_command_is_still_a_whole_stream(
    name: str, output_format: str, tmp_path: Path
) -> None:
    command, *rest = BAD_USAGE[name]
    argv = [command, "-o", output_format, *rest]  # before wrap's "--"
    done = subprocess.run([*CLI, *argv], capture_output=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stderr.decode()
    assert (
        b"INVALID_INPUT" in done.stderr and b"Traceback" not in done.stderr
    )  # the person reading stderr sees it
    if output_format == "json":
        result = json.loads(done.stdout)
    else:
        events = _events(done.stdout)
        assert [e["type"] for e in events] == ["start", "error", "result"]
        assert not list(validate_stream(io.BytesIO(done.stdout), expect_exit=2))
        result = events[-1]
    assert result["exit_code"] == 2 and result["ok"] is False
    assert result["error"]["code"] == "INVALID_INPUT" and result["error"]["fix"]


@pytest.mark.parametrize(
    "argv",
    [
        ["convert", "--max-line-bytes", "-5"],
        ["validate", "--bogus"],
        ["runs", "--limit", "x"],
        ["runs", "--limit", "1_0"],
        ["runs", "--limit", "\u0663"],  # an Arabic-Indic three: a digit to Python, not on a command line
        ["convert", "--max-line-bytes", "\u0663"],
        ["acp", "--max-turns", "-1"],
        ["acp", "--max-tokens", "0"],
        ["sessions", "--limit", "1_0"],
        ["convert", "--to", "claude", "--dialect", "gemini"],
        ["convert", "-o", "text", "--to", "gemini"],
        ["validate", "--json", "--quiet"],
    ],
    ids=[
        "convert",
        "validate",
        "runs",
        "runs-underscore",
        "runs-other-digits",
        "convert-other-digits",
        "acp-max-turns",
        "acp-max-tokens",
        "sessions-underscore",
        "convert-two-dialects",
        "convert-dialect-without-a-stream",
        "validate-json-quiet",
    ],
)
def test_a_usage_error_of_a_data_command_writes_nothing_on_stdout(argv: list[str], tmp_path: Path) -> None:
    done = subprocess.run([*CLI, *argv], capture_output=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    assert done.stdout == b""
    assert b"INVALID_INPUT" in done.stderr and b"fix:" in done.stderr


def test_every_numeric_option_is_range_checked() -> None:
    """A bare int or float takes -1 (and float nan and inf): every number goes through cli._options' checks."""
    from agentstream.cli import COMMANDS
    from agentstream.cli._help import build_parser

    unchecked = [
        f"{name} {action.option_strings[0]}"
        for name in COMMANDS
        for action in build_parser(name)._actions
        if action.type in (int, float)
    ]
    assert unchecked == []


@pytest.mark.parametrize("command", ["follow", "watch"])
def test_a_usage_error_of_a_follower_is_its_one_terminal_line(command: str, tmp_path: Path) -> None:
    argv = [command, "run-x", "--timeout", "-2"] if command == "follow" else [command, "--count", "-2"]
    done = subprocess.run([*CLI, *argv], capture_output=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    (line,) = _events(done.stdout)
    assert line["type"] == "result" and line["synthetic"] is True and line["subtype"] == "invalid_input"


# -- logs --follow ----------------------------------------------------------------------------------


def test_logs_follow_never_yields_a_torn_line_while_the_file_is_truncated_and_rewritten(
    tmp_path: Path,
) -> None:
    """A fault test: a writer truncates and rewrites the file in a tight loop (often past the
    reader's offset before it polls again); every line read must be one the writer wrote whole."""
    log = tmp_path / "churn.log"
    log.write_text("")
    tail = subprocess.Popen(
        [*CLI, "logs", "--follow", str(log), "--from-start", "--timeout", "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    assert tail.stdout is not None
    while b'"following"' not in tail.stdout.readline():
        pass
    rewrites = 0
    until = time.monotonic() + 2.5
    while time.monotonic() < until:
        # Each generation is longer than the last few, so the size alone rarely shows the truncation.
        lines = "".join(
            f"gen{rewrites:05d} line{i:03d} {'x' * (rewrites % 7 * 9)}end\n" for i in range(rewrites % 40 + 5)
        )
        with open(log, "w") as f:
            f.write(lines[: len(lines) // 2])
            f.flush()
            f.write(lines[len(lines) // 2 :])
        rewrites += 1
    stdout, stderr = tail.communicate(timeout=30)
    messages = [e["message"] for e in _events(stdout) if e["type"] == "log"]
    torn = [m for m in messages if not re.fullmatch(r"gen\d{5} line\d{3} x*end", m)]
    print(f"{rewrites} rewrites, {len(messages)} lines read, {len(torn)} torn")
    assert tail.returncode == 0, stderr.decode()
    assert messages and not torn, torn[:5]


@pytest.mark.parametrize("stop", ["timeout", "signal"])
def test_logs_follow_keeps_the_unterminated_last_line_when_it_stops(tmp_path: Path, stop: str) -> None:
    log = tmp_path / "app.log"
    log.write_text("")
    argv = [*CLI, "logs", "--follow", str(log), *(["--timeout", "3"] if stop == "timeout" else [])]
    tail = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    assert tail.stdout is not None
    while b'"following"' not in tail.stdout.readline():
        pass
    with open(log, "a") as f:
        f.write("fatal: first\nWarning: no newline yet")
    if stop == "signal":
        time.sleep(1.0)  # for the tail to read the lines before the signal
        tail.send_signal(signal.SIGTERM)
    stdout, _ = tail.communicate(timeout=30)
    logs = [(e["level"], e["message"]) for e in _events(stdout) if e["type"] == "log"]
    assert logs == [("error", "fatal: first"), ("warn", "Warning: no newline yet")]
    assert tail.returncode == (0 if stop == "timeout" else 143)


def test_an_ending_closes_the_delta_runs_it_cut_short() -> None:
    from agentstream import Stream

    out = io.BytesIO()
    with Stream("job", out=out, owns_process=False) as s:
        s.reasoning_delta("thinking ", reasoning_id="rsn_1")
        s.message_delta("Half an ", message_id="msg_1")
        s.message_delta("answer", message_id="msg_1")
        s.message_delta("closed", message_id="msg_2")
        s.message("closed", message_id="msg_2")
        s.fail("PROVIDER_ERROR", "the connection dropped")
    events = _events(out.getvalue())
    assert not list(validate_stream(io.BytesIO(out.getvalue()), expect_exit=1))
    closing = [(e["type"], e["content"]) for e in events[-4:-2]]
    assert sorted(closing) == [("message", "Half an answer"), ("reasoning", "thinking ")]
    assert [e["type"] for e in events[-2:]] == ["error", "result"]
