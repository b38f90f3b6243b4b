"""The real Gemini CLI (tests/peers, ``@google/gemini-cli``) against a fake Gemini API on loopback.

Each test runs ``gemini -p`` headless under a throwaway home whose settings turn off
telemetry, usage statistics and update checks and allow one attempt per request (a
retry waits five seconds), then checks what agentstream makes of what the CLI
printed: ``convert`` and ``validate`` on its stream-json and json output,
``gemini-log`` on the chat log it wrote, and ``wrap`` around it. Most runs name the
model (``-m``) so that the CLI sends the conversation alone; one keeps the default
``auto`` model, whose router asks a small model first.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from _agent_fakes import (
    GEMINI_MODEL,
    FakeModelServer,
    Reply,
    Sse,
    agentstream,
    assert_valid_stream,
    gemini_aside,
    gemini_error,
    gemini_reply,
)
from _dialect_kit import one, only
from agentstream import protocol as p

CLI = Path(__file__).parent / "peers" / "node_modules" / "@google" / "gemini-cli" / "bundle" / "gemini.js"
SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False, "maxAttempts": 1},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
}
PROMPT = "what is here?"


def gemini_command() -> list[str]:
    node = shutil.which("node")
    assert node, "node is missing: install Node.js (the Gemini CLI runs on it)"
    assert CLI.is_file(), "the Gemini CLI is missing: cd tests/peers && npm install"
    return [node, str(CLI)]


@dataclass
class Run:
    """What one run of the CLI (or of ``agentstream wrap`` around it) printed, and what it left in its home."""

    returncode: int
    stdout: bytes
    stderr: str
    home: Path
    server: FakeModelServer

    def chat_log(self) -> bytes:
        (log,) = (self.home / ".gemini" / "tmp").glob("*/chats/session-*.jsonl")
        return log.read_bytes()


def run_gemini(
    root: Path,
    script: Sequence[Reply],
    *args: str,
    output: str = "stream-json",
    model: str | None = GEMINI_MODEL,
    wrap: bool = False,
) -> Run:
    """``gemini -p PROMPT -o OUTPUT --yolo [-m MODEL] ARGS`` in a fresh folder holding one file."""
    home, work = root / "home", root / "work"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS))
    work.mkdir()
    (work / "notes.txt").write_text("remember the milk\n")
    command = [*gemini_command(), "-p", PROMPT, "--output-format", output, "--yolo", *args]
    if model is not None:
        command += ["-m", model]
    if wrap:
        command = [sys.executable, "-m", "agentstream", "wrap", "--", *command]
    with FakeModelServer(script, aside=gemini_aside) as server:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "TMPDIR": str(root),  # where the CLI writes its error reports
            "GEMINI_API_KEY": "gm-test-0123456789",
            "GOOGLE_GEMINI_BASE_URL": server.url,
            "GEMINI_CLI_NO_RELAUNCH": "true",  # one Node process, not a second one for memory flags
            "NO_COLOR": "1",
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        }
        proc = subprocess.run(command, cwd=work, env=env, capture_output=True, timeout=60)
    return Run(proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace"), home, server)


def converted(data: bytes, dialect: str = "gemini", *, exit_code: int | None = None) -> list[p.AnyEvent]:
    """``agentstream convert`` of ``data``: quiet on stderr, the same with the dialect detected, and valid
    (with the exit code the CLI exited with, when given); ``validate`` agrees."""
    named, detected = agentstream("convert", dialect, data), agentstream("convert", "auto", data)
    assert (named.returncode, named.stderr) == (0, b""), named.stderr.decode()
    assert _without_ids(detected.stdout) == _without_ids(named.stdout)
    lines = named.stdout.splitlines()
    events = assert_valid_stream(lines, exit_code) if exit_code is not None else [p.decode(x) for x in lines]
    validated = agentstream("validate", dialect, data)
    assert validated.returncode == 0, validated.stdout.decode() + validated.stderr.decode()
    return events


def _without_ids(stdout: bytes) -> list[dict[str, object]]:
    """Events without what each reading makes up afresh (message ids, and times of lines that have none)."""
    drop = {"message_id", "ts"}
    return [{k: v for k, v in json.loads(line).items() if k not in drop} for line in stdout.splitlines()]


LOOK = [
    gemini_reply("Let me look.", [("list_directory", {"dir_path": "."})], usage=(200, 15), chunk=40),
    gemini_reply("There is one file, notes.txt.", usage=(260, 9), cached=100, chunk=40),
]
"""A reply that lists the folder, then the answer."""


def test_a_plain_answer_routed_by_the_default_model(tmp_path: Path) -> None:
    """``auto``: the router's call (to a small model) counts in the usage, and the json document's model is the
    one that answered."""
    reply = [gemini_reply("Hello from the fake Gemini.", usage=(120, 9), chunk=12)]
    run = run_gemini(tmp_path / "lines", reply, model=None)
    assert run.returncode == 0, run.stderr
    assert [r.path.split(":")[-1] for r in run.server.posts] == [
        "generateContent",
        "streamGenerateContent?alt=sse",
    ]
    events = converted(run.stdout, exit_code=0)
    assert [e.type for e in events] == [
        "start",
        "message",
        *["message_delta"] * 3,
        "message",
        "usage",
        "usage",
        "result",
    ]
    start, result = events[0], one(events, p.Result)
    assert (start.model, start.session_id) == ("auto", json.loads(run.stdout.splitlines()[0])["session_id"])
    assert (result.ok, result.result) == (True, "Hello from the fake Gemini.")
    assert [(u.model, u.input_tokens, u.output_tokens) for u in only(events, p.Usage)] == [
        ("gemini-2.5-flash-lite", 5, 3),
        ("gemini-2.5-flash", 120, 9),
    ]
    assert (result.usage.input_tokens, result.usage.output_tokens) == (125, 12)

    document = run_gemini(tmp_path / "json", reply, model=None, output="json")
    events = converted(document.stdout, exit_code=0)
    assert events[0].model == "gemini-2.5-flash"
    assert (one(events, p.Result).result, one(events, p.Result).usage.input_tokens) == (
        "Hello from the fake Gemini.",
        125,
    )


def test_a_tool_call_and_the_answer_after_it(tmp_path: Path) -> None:
    """The result's text is the last reply's, as the CLI's own json output has it; the call and its result
    pair up; the chat log tells the same run with the same usage."""
    run = run_gemini(tmp_path / "lines", LOOK)
    assert run.returncode == 0, run.stderr
    events = converted(run.stdout, exit_code=0)
    (call,), (outcome,) = only(events, p.ToolCall), only(events, p.ToolResult)
    assert (call.name, call.arguments, outcome.call_id, outcome.status) == (
        "list_directory",
        {"dir_path": "."},
        call.call_id,
        "success",
    )
    result = one(events, p.Result)
    assert (result.result, result.tools_used) == ("There is one file, notes.txt.", ["list_directory"])
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.cached_tokens) == (
        460,
        24,
        100,
    )

    document = run_gemini(tmp_path / "json", LOOK, output="json")
    assert json.loads(document.stdout)["response"] == result.result
    assert one(converted(document.stdout, exit_code=0), p.Result).usage == result.usage

    logged = converted(run.chat_log(), "gemini-log", exit_code=0)
    assert [m.content for m in only(logged, p.Message) if m.role == "assistant"] == [
        "Let me look.",
        "There is one file, notes.txt.",
    ]
    assert "" not in {m.content for m in only(logged, p.Message)}  # no message for the tool responses
    (logged_call,), (logged_outcome,) = only(logged, p.ToolCall), only(logged, p.ToolResult)
    assert logged_call.ts <= logged_outcome.ts and logged_outcome.output.startswith("Directory listing for")
    assert one(logged, p.Result).usage == result.usage
    assert one(logged, p.Result).result == result.result


def test_a_failed_tool_call(tmp_path: Path) -> None:
    script = [
        gemini_reply("", [("read_file", {"file_path": "missing.txt"})], usage=(200, 15)),
        gemini_reply("No such file.", usage=(260, 9)),
    ]
    run = run_gemini(tmp_path, script)
    assert run.returncode == 0, run.stderr
    (outcome,) = only(converted(run.stdout, exit_code=0), p.ToolResult)
    assert outcome.status == "error" and outcome.error.startswith("file_not_found: File not found: ")
    logged = converted(run.chat_log(), "gemini-log", exit_code=0)
    assert [m.content for m in only(logged, p.Message) if m.role == "assistant"] == ["No such file."]


def test_thoughts_count_as_reasoning_and_output(tmp_path: Path) -> None:
    """stream-json shows no thoughts and leaves their tokens out of ``output_tokens``; they are in the total."""
    reply = gemini_reply(
        "The answer is 4.",
        thinking="**Adding** two and two gives four.",
        usage=(50, 6),
        thoughts=12,
        chunk=64,
    )
    run = run_gemini(tmp_path, [reply])
    assert run.returncode == 0, run.stderr
    events = converted(run.stdout, exit_code=0)
    assert not only(events, p.Reasoning)
    usage = one(events, p.Result).usage
    assert (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens) == (50, 18, 12)
    logged = converted(run.chat_log(), "gemini-log", exit_code=0)
    assert [r.content for r in only(logged, p.Reasoning)] == ["Adding\ntwo and two gives four."]
    assert one(logged, p.Result).usage == usage


@pytest.mark.parametrize(
    ("status", "code"),
    [(400, "CONTEXT_LIMIT"), (401, "AUTH_EXPIRED"), (429, "RATE_LIMITED"), (500, "PROVIDER_ERROR")],
)
def test_an_api_error_ends_the_run_with_its_http_status(tmp_path: Path, status: int, code: str) -> None:
    """Gemini CLI exits with the HTTP status (its low byte) and names the error type ``unknown``."""
    run = run_gemini(tmp_path, [gemini_error(status)])
    assert run.returncode == status & 0xFF, run.stderr
    result = one(converted(run.stdout, exit_code=run.returncode), p.Result)
    assert (result.ok, result.error.code, result.exit_code) == (False, code, run.returncode)
    assert result.error.message.startswith("[API Error: ")


def test_a_stream_cut_off_part_way(tmp_path: Path) -> None:
    """The CLI does not retry a body cut off mid-way: the run fails (exit 1) on Node's ``terminated``."""
    cut = Sse(
        gemini_reply("A long answer that will be cut off part way through.", chunk=8).events, drop_after=3
    )
    run = run_gemini(tmp_path, [cut])
    assert run.returncode == 1, run.stderr
    events = converted(run.stdout, exit_code=1)
    result = one(events, p.Result)
    assert (result.error.code, result.error.message) == ("PROVIDER_ERROR", "[API Error: terminated]")
    assert "".join(d.content for d in only(events, p.MessageDelta)) == "A long answer that will "


NO_FINISH_REASON = Sse(gemini_reply("Cut off here.", chunk=5).events[:2])
"""A reply whose last chunk never came: the stream ends without a ``finishReason``."""


def _invalid_stream(run: Run) -> tuple[p.Error, p.Result]:
    """Gemini's InvalidStream: it prints a failed result (its line or ``-o json``'s error says why) and exits 0,
    which the reader reports as exit 1, never as a success."""
    assert run.returncode == 0, run.stderr
    events = converted(run.stdout, exit_code=1)
    error, result = events[-2:]
    assert isinstance(error, p.Error) and not error.recoverable
    assert isinstance(result, p.Result) and result.error.message == error.message
    return error, result


@pytest.mark.parametrize(
    ("reply", "message", "answer"),
    [
        (NO_FINISH_REASON, "Model stream ended without a finish reason.", "Cut off he"),
        (
            gemini_reply("Calling a tool.", finish="MALFORMED_FUNCTION_CALL"),
            "Model stream ended with malformed function call.",
            "Calling a tool.",
        ),
    ],
)
def test_a_reply_the_cli_cannot_use_is_the_providers_failure(
    tmp_path: Path, reply: Sse, message: str, answer: str
) -> None:
    """Whatever text came before it, a reply without a finish reason or with a malformed call fails the run."""
    for output in ("stream-json", "json"):
        error, result = _invalid_stream(run_gemini(tmp_path / output, [reply], output=output))
        assert (result.error.code, result.subtype, error.message, result.result) == (
            "PROVIDER_ERROR",
            "error",
            message,
            answer,
        )


@pytest.mark.parametrize(
    ("finish", "code", "subtype", "message"),
    [
        ("SAFETY", "PROVIDER_ERROR", "refusal", "The model response was blocked due to safety settings."),
        (
            "RECITATION",
            "PROVIDER_ERROR",
            "refusal",
            "The model response was blocked due to recitation/copyright filters.",
        ),
        (
            "MAX_TOKENS",
            "CONTEXT_LIMIT",
            "error",
            "Model response was truncated because it exceeded the token limit. "
            "Try using /compress to free up context space.",
        ),
    ],
)
def test_a_blocked_or_truncated_reply_fails_when_it_left_no_text(
    tmp_path: Path, finish: str, code: str, subtype: str, message: str
) -> None:
    """With no text the CLI names the ending (a refusal, the token limit); with text it reports a plain success,
    and prints nothing that tells the ending: neither does the reader."""
    for output in ("stream-json", "json"):
        error, result = _invalid_stream(
            run_gemini(tmp_path / output, [gemini_reply("", finish=finish)], output=output)
        )
        assert (result.error.code, result.subtype, error.message) == (code, subtype, message)
    answered = run_gemini(tmp_path / "text", [gemini_reply("Half an answer.", finish=finish)])
    assert answered.returncode == 0, answered.stderr
    result = one(converted(answered.stdout, exit_code=0), p.Result)
    assert (result.ok, result.subtype, result.result) == (True, "success", "Half an answer.")


@pytest.mark.parametrize(
    ("script", "exit_code", "subtype"),
    [
        (LOOK, 0, "success"),
        ([gemini_error(429)], 173, "error"),
        ([gemini_reply("", finish="SAFETY")], 1, "refusal"),
    ],
)
def test_wrap_runs_the_cli(tmp_path: Path, script: list[Reply], exit_code: int, subtype: str) -> None:
    """The CLI's own exit status, but for its InvalidStream: it exits 0 after a failed result, the wrap 1."""
    run = run_gemini(tmp_path, script, wrap=True)
    assert run.returncode == exit_code, run.stderr
    result = one(assert_valid_stream(run.stdout.splitlines(), exit_code), p.Result)
    assert (result.exit_code, result.subtype) == (exit_code, subtype)
    assert result.result == ("There is one file, notes.txt." if exit_code == 0 else p.UNSET)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_wrap_stops_the_shell_command_the_cli_started_detached(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """The CLI's shell tool runs its command in a session of its own, out of reach of a signal to the CLI's
    process group: stopping the wrap stops the command all the same."""
    home, work, pidfile = tmp_path / "home", tmp_path / "work", tmp_path / "pid"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS))
    work.mkdir()
    command = f"echo $$ > {pidfile}; exec sleep 300"
    script = [
        gemini_reply("Running it.", [("run_shell_command", {"command": command})]),
        gemini_reply("Done."),
    ]
    with FakeModelServer(script, aside=gemini_aside) as server:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "TMPDIR": str(tmp_path),
            "GEMINI_API_KEY": "gm-test-0123456789",
            "GOOGLE_GEMINI_BASE_URL": server.url,
            "GEMINI_CLI_NO_RELAUNCH": "true",
            "NO_COLOR": "1",
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        }
        gemini = [*gemini_command(), "-p", PROMPT, "-o", "stream-json", "--yolo", "-m", GEMINI_MODEL]
        wrap = subprocess.Popen(
            [sys.executable, "-m", "agentstream", "wrap", "--no-publish", "--", *gemini],
            cwd=work,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while not (pidfile.exists() and pidfile.read_text().strip()):
                assert time.monotonic() < deadline and wrap.poll() is None, "the CLI never ran the command"
                time.sleep(0.05)
            shell = int(pidfile.read_text())
            assert os.getsid(shell) == shell  # detached: its own session, not the CLI's group
            wrap.send_signal(signum)
            wrap.wait(timeout=30)
        finally:
            wrap.kill()
    bound = time.monotonic() + 5
    while _group_running(shell) and time.monotonic() < bound:
        time.sleep(0.05)
    survived = _group_running(shell)
    if survived:
        os.killpg(shell, signal.SIGKILL)
    assert not survived, "the shell command (or what it started) outlived the stopped CLI"


def _group_running(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (not counting those that exited, waiting to be reaped)."""
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
