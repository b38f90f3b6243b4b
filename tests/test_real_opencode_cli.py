"""The real opencode CLI (``opencode-ai`` in tests/peers) against a loopback OpenAI-compatible server.

opencode is pointed at :class:`FakeModelServer` through a provider of its own (``@ai-sdk/openai-compatible``,
which the binary bundles) in a throwaway ``opencode.json``, under a home of its own. It still reaches out at
start: the models.dev catalogue (turned off), and npm's registry for the config folder's plugin package,
pointed at a closed port so that the install fails at once and the run goes on without it. ``--title`` spares
the model call that names the session. Errors answer with ``retry-after-ms`` so that opencode's five retries
take milliseconds, not its back-off's minute. What ``opencode run --format json`` printed is then read by the
``opencode`` dialect, so that a change of opencode's output that the reader misreads fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from _acp_support import PEERS
from _agent_fakes import (
    FakeModelServer,
    Reply,
    Sse,
    agentstream,
    assert_valid_stream,
    closed_port,
    openai_error,
    openai_reply,
)
from _dialect_kit import one, only
from agentstream import protocol as p

OPENCODE = PEERS / "node_modules" / ".bin" / "opencode"
MODEL = "gpt-4.1-mini"
PROMPT = "what is here?"
FAST = {"retry-after-ms": "20"}
"""How long opencode waits before it tries a failed request again (it gives up after five retries)."""
pytestmark = pytest.mark.slow


def opencode() -> str:
    """The CLI; a missing one fails the test (CI installs it), it does not skip it."""
    assert OPENCODE.exists(), "opencode is missing: cd tests/peers && npm install"
    assert not OPENCODE.read_bytes().startswith(b"#!"), (
        "opencode-ai's postinstall did not run (its bin is still the placeholder script): cd tests/peers && npm install"
    )
    return str(OPENCODE)


@dataclass
class Run:
    returncode: int
    stdout: bytes
    stderr: str
    posts: list[Any]


def run_opencode(
    root: Path, script: Sequence[Reply], *args: str, wrap: bool = False, cost: dict[str, float] | None = None
) -> Run:
    """``opencode run --format json --title t ARGS PROMPT`` in ``root``'s work folder (which holds notes.txt)."""
    home, work = root / "home", root / "work"
    home.mkdir(parents=True, exist_ok=True)
    work.mkdir(exist_ok=True)
    (work / "notes.txt").write_text("remember the milk\n")
    command = [opencode(), "run", "--format", "json", "--title", "t", *args, PROMPT]
    if wrap:
        command = [sys.executable, "-m", "agentstream", "wrap", "--", *command]
    with FakeModelServer(script) as server:
        model: dict[str, Any] = {"name": "Fake", **({"cost": cost} if cost else {})}
        provider = {
            "npm": "@ai-sdk/openai-compatible",
            "options": {"baseURL": server.url + "/v1", "apiKey": "sk-fake-opencode-01"},
            "models": {MODEL: model},
        }
        config = {
            "autoupdate": False,
            "share": "disabled",
            "provider": {"fake": provider},
            "model": f"fake/{MODEL}",
        }
        (work / "opencode.json").write_text(json.dumps(config))
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(home),
            **{f"XDG_{kind}_HOME": str(home / kind.lower()) for kind in ("CONFIG", "DATA", "CACHE", "STATE")},
            "TMPDIR": str(root),
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_SHARE": "1",
            "npm_config_registry": f"http://127.0.0.1:{closed_port()}/",
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        }
        proc = subprocess.run(command, cwd=work, env=env, capture_output=True, timeout=90)
    return Run(proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace"), server.posts)


def converted(data: bytes, exit_code: int) -> list[p.AnyEvent]:
    """``convert`` of ``data``: quiet on stderr, the same with the dialect detected, valid with the CLI's exit
    code; ``validate`` agrees."""
    named, detected = agentstream("convert", "opencode", data), agentstream("convert", "auto", data)
    assert (named.returncode, named.stderr) == (0, b""), named.stderr.decode()
    assert detected.stdout == named.stdout
    validated = agentstream("validate", "opencode", data)
    assert validated.returncode == 0, validated.stdout.decode() + validated.stderr.decode()
    return assert_valid_stream(named.stdout.splitlines(), exit_code)


CALLS = [
    ("call_1", "bash", {"command": "echo hi", "description": "Say hi"}),
    ("call_2", "read", {"filePath": "notes.txt"}),
    ("call_3", "read", {"filePath": "missing.txt"}),
]
LOOK = [
    openai_reply("Let me look.", CALLS, reasoning="I should look around.", usage=(300, 40)),
    openai_reply("It says remember the milk.", usage=(420, 12), cached=300),
]
"""Three tool calls (one fails), then the answer."""


def test_a_plain_answer(tmp_path: Path) -> None:
    """opencode 1.18 prints no closing line: the step that stopped ends the run, with no ending made up."""
    run = run_opencode(tmp_path, [openai_reply("Hello from the fake.", usage=(20, 10))])
    assert run.returncode == 0, run.stderr
    assert [json.loads(line)["type"] for line in run.stdout.splitlines()] == [
        "step_start",
        "text",
        "step_finish",
    ]
    events = converted(run.stdout, 0)
    assert [e.type for e in events] == ["start", "message", "usage", "result"]
    result = one(events, p.Result)
    assert (result.ok, result.synthetic, result.result) == (True, p.UNSET, "Hello from the fake.")
    assert events[0].session_id == json.loads(run.stdout.splitlines()[0])["sessionID"]
    assert len(run.posts) == 1


def test_tools_run_and_pair_with_their_calls(tmp_path: Path) -> None:
    """opencode runs the calls itself; each prints once finished, a failed one as an error; ``--thinking``
    prints the reasoning. Cache reads count in the input, as the provider reported it."""
    run = run_opencode(tmp_path, LOOK, "--thinking")
    assert run.returncode == 0, run.stderr
    events = converted(run.stdout, 0)
    outcomes = {r.call_id: r for r in only(events, p.ToolResult)}
    assert {c.call_id: (c.name, c.arguments) for c in only(events, p.ToolCall)} == {
        cid: (name, arguments) for cid, name, arguments in CALLS
    }
    assert (outcomes["call_1"].status, outcomes["call_1"].output) == ("success", "hi\n")
    assert "remember the milk" in outcomes["call_2"].output
    assert outcomes["call_3"].status == "error" and outcomes["call_3"].error.startswith("File not found: ")
    assert [r.content for r in only(events, p.Reasoning)] == ["I should look around."]
    result = one(events, p.Result)
    assert (result.result, result.turn_count, sorted(result.tools_used)) == (
        "It says remember the milk.",
        2,
        ["bash", "read"],
    )
    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cached_tokens) == (720, 52, 300)


def test_the_cost_opencode_works_out(tmp_path: Path) -> None:
    reply = openai_reply("Priced.", usage=(1000, 100), cached=400)
    run = run_opencode(tmp_path, [reply], cost={"input": 2, "output": 8, "cache_read": 0.5})
    assert run.returncode == 0, run.stderr
    usage = one(converted(run.stdout, 0), p.Result).usage
    assert (usage.input_tokens, usage.cached_tokens, usage.cost_usd) == (1000, 400, pytest.approx(0.0022))


def test_an_answer_cut_at_the_output_limit_ends_the_run(tmp_path: Path) -> None:
    """A step that finished for ``length`` is the run's last: opencode exits 0 and prints no error."""
    run = run_opencode(tmp_path, [openai_reply("Cut off becau", finish="length")])
    assert run.returncode == 0, run.stderr
    result = one(converted(run.stdout, 0), p.Result)
    assert (result.ok, result.synthetic, result.result) == (True, p.UNSET, "Cut off becau")


def test_a_rejected_permission_ends_the_run_after_its_step(tmp_path: Path) -> None:
    """A read outside the folder asks for permission, which ``run`` turns down (saying so on stderr only);
    opencode then stops after the step that finished for ``tool-calls``, and exits 0."""
    script = [openai_reply("", [("call_1", "read", {"filePath": "/etc/hostname"})])]
    run = run_opencode(tmp_path, script)
    assert run.returncode == 0, run.stderr
    assert "auto-rejecting" in run.stderr and len(run.posts) == 1
    events = converted(run.stdout, 0)
    (outcome,) = only(events, p.ToolResult)
    assert outcome.error == "The user rejected permission to use this specific tool call."
    assert one(events, p.Result).ok


@pytest.mark.parametrize(
    ("status", "code", "requests"),
    [(401, "AUTH_EXPIRED", 1), (429, "RATE_LIMITED", 6), (500, "PROVIDER_ERROR", 6)],
)
def test_an_api_error_fails_the_run(tmp_path: Path, status: int, code: str, requests: int) -> None:
    """opencode retries a 429 or 5xx five times, then prints the error alone and exits 1."""
    run = run_opencode(tmp_path, [openai_error(status, FAST)] * requests)
    assert run.returncode == 1, run.stderr
    assert len(run.posts) == requests
    (line,) = [json.loads(line) for line in run.stdout.splitlines()]
    assert (line["type"], line["error"]["data"]["statusCode"]) == ("error", status)
    result = one(converted(run.stdout, 1), p.Result)
    assert (result.ok, result.error.code, result.exit_code) == (False, code, 1)


def test_a_context_overflow_is_compacted_and_still_fails_the_run(tmp_path: Path) -> None:
    """opencode reports the overflow, summarises the chat, adds a note of its own (a user message) and answers:
    the run exits 1 for the error it reported."""
    script = [
        openai_error(400),
        openai_reply("Summary.", usage=(80, 8)),
        openai_reply("Answer.", usage=(90, 9)),
    ]
    run = run_opencode(tmp_path, script)
    assert run.returncode == 1, run.stderr
    events = converted(run.stdout, 1)
    (error,) = only(events, p.Error)
    assert (error.code, error.recoverable) == ("CONTEXT_LIMIT", True)
    roles = [(m.role, m.content[:8]) for m in only(events, p.Message)]
    assert roles == [("assistant", "Summary."), ("user", "The prev"), ("assistant", "Answer.")]
    result = one(events, p.Result)
    assert (result.result, result.error.code) == ("Answer.", "CONTEXT_LIMIT")


def test_a_dropped_stream_is_tried_again(tmp_path: Path) -> None:
    """A stream cut off part-way is retried (after two seconds); the text it had sent is never printed."""
    cut = Sse(openai_reply("A long answer that will be cut off.", chunk=5).events, drop_after=4)
    run = run_opencode(tmp_path, [cut, openai_reply("Whole answer.")])
    assert run.returncode == 0, run.stderr
    events = converted(run.stdout, 0)
    assert [m.content for m in only(events, p.Message)] == ["Whole answer."]
    assert len(run.posts) == 2


def test_continued_runs_read_as_runs_of_their_own(tmp_path: Path) -> None:
    """``--continue`` carries on the session: the model sees the earlier turns. Each run's output reads alone, and
    appended (of one session or of two) each still reads as its own run, though opencode 1.18 prints no ``done``."""
    first = run_opencode(tmp_path, [openai_reply("First.", usage=(100, 5))])
    session = json.loads(first.stdout.splitlines()[0])["sessionID"]
    second = run_opencode(tmp_path, [openai_reply("Second.", usage=(150, 6))], "--continue")
    third = run_opencode(tmp_path / "other", [openai_reply("Other.", usage=(10, 1))])
    assert (first.returncode, second.returncode, third.returncode) == (0, 0, 0), second.stderr
    assert {json.loads(line)["sessionID"] for line in second.stdout.splitlines()} == {session}
    sent = [(m["role"], m["content"]) for m in second.posts[0].body["messages"][1:]]
    quoted = f'"{PROMPT}"'  # opencode quotes a message argument that holds a space
    assert sent == [("user", quoted), ("assistant", "First."), ("user", quoted)]
    assert one(converted(second.stdout, 0), p.Result).usage.input_tokens == 150

    appended = agentstream("convert", "opencode", first.stdout + second.stdout + third.stdout).stdout
    events = assert_valid_stream(appended.splitlines(), 0)
    results = [(r.result, r.turn_count, r.usage.input_tokens) for r in only(events, p.Result)]
    assert results == [("First.", 1, 100), ("Second.", 1, 150), ("Other.", 1, 10)]


@pytest.mark.parametrize(("script", "exit_code"), [(LOOK, 0), ([openai_error(401)], 1)])
def test_wrap_runs_the_cli(tmp_path: Path, script: list[Reply], exit_code: int) -> None:
    """The wrap's stream names opencode's own session (``--session`` resumes it), which opencode prints on every
    line and sends the model server, though it prints no start line, and the model its ``--model`` asks for."""
    run = run_opencode(tmp_path, script, "--model", f"fake/{MODEL}", wrap=True)
    assert run.returncode == exit_code, run.stderr
    events = assert_valid_stream(run.stdout.splitlines(), exit_code)
    # opencode prints no model: the wrap's usage names the one its --model asked for, not "unknown"
    assert {usage.model for usage in only(events, p.Usage)} == ({MODEL} if exit_code == 0 else set())
    result = one(events, p.Result)
    assert result.exit_code == exit_code and result.synthetic is p.UNSET
    (child,) = [e for e in events if isinstance(e, p.Status) and e.status == "child_session"]
    assert child.message == run.posts[0].headers["x-session-id"] != result.session_id
    if exit_code:
        assert result.error.code == "AUTH_EXPIRED"
    else:
        assert result.result == "It says remember the milk."
