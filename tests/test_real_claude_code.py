"""The real Claude Code CLI (``@anthropic-ai/claude-code`` in tests/peers) against a loopback Anthropic server.

What agentstream makes of what Claude Code itself writes: its stream-json (with and without partial
messages), its ``--output-format json`` document, the session log it keeps under ``~/.claude/projects``,
an API failure, and ``agentstream wrap`` around it through an interrupt. The server's replies all carry
the message id ``msg_fake``, as servers behind ``ANTHROPIC_BASE_URL`` that number every reply alike do.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from claude_agent_sdk import (  # the test extra: pip install -e '.[test]'
    AssistantMessage,
    ClaudeAgentOptions,
    PermissionResultDeny,
    ResultMessage,
    StreamEvent,
    SystemMessage,
    TextBlock,
    query,
)

from _acp_support import PEERS
from _agent_fakes import (
    ANTHROPIC_MODEL,
    FakeModelServer,
    Reply,
    anthropic_error,
    anthropic_reply,
    assert_valid_stream,
)
from agentstream import protocol as p
from agentstream.consumer import read
from agentstream.dialects.claude import ClaudeDecoder
from test_claude_sdk_driver import turns_on_one_client
from test_usage import ccusage, envelope

CLAUDE = PEERS / "node_modules" / ".bin" / "claude"
ANSWER = "The command printed hi."
WRAP = [sys.executable, "-m", "agentstream", "wrap", "--"]
PARTIAL = "--include-partial-messages"
STREAM_JSON = ("--output-format", "stream-json", "--verbose")
pytestmark = pytest.mark.slow


def claude_code() -> str:
    assert CLAUDE.exists(), "Claude Code is missing: cd tests/peers && npm install"
    return str(CLAUDE)


def claude_env(home: Path, server: FakeModelServer, **extra: str) -> dict[str, str]:
    """Claude Code on the fake server only: no telemetry, update checks or other traffic, its state in ``home``."""
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": server.url,
        "ANTHROPIC_API_KEY": "sk-ant-test-0000",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        **extra,
    }


def tool_turn() -> list[Reply]:
    """One turn of two model calls: thinking, a word and a Bash call; then the answer."""
    call = ("toolu_01A", "Bash", {"command": "echo hi", "description": "say hi"})
    return [anthropic_reply("Let me look.", [call], thinking="I should run echo."), anthropic_reply(ANSWER)]


def run_claude(
    tmp_path: Path, script: Sequence[Reply], *flags: str, **env: str
) -> tuple[subprocess.CompletedProcess[bytes], Path]:
    """``claude -p`` in a fresh home and working directory; what it did, and its home."""
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir(parents=True)
    with FakeModelServer(script) as server:
        done = subprocess.run(
            [claude_code(), "-p", "run echo hi", "--allowedTools", "Bash", *flags],
            env=claude_env(home, server, **env),
            cwd=work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
        )
    return done, home


def read_valid(data: bytes, exit_code: int, dialect: str = "auto") -> list[p.AnyEvent]:
    """What agentstream reads from ``data``, checked against every protocol invariant and ``exit_code``."""
    with read(io.BytesIO(data), dialect) as reader:
        events = list(reader)
    return assert_valid_stream([p.encode_line(event).rstrip(b"\n") for event in events], exit_code)


def conversation(events: Sequence[p.AnyEvent]) -> list[tuple[str, ...]]:
    """The conversation the events tell, as comparable tuples."""
    told: list[tuple[str, ...]] = []
    for event in events:
        if isinstance(event, (p.Message, p.Reasoning)):
            told.append((event.type, event.content))
        elif isinstance(event, p.ToolCall):
            told.append(("tool_call", event.call_id, event.name, event.arguments["command"]))
        elif isinstance(event, p.ToolResult):
            told.append(("tool_result", event.call_id, event.status, str(event.output)))
    return told


TOLD = [
    ("reasoning", "I should run echo."),
    ("message", "Let me look."),
    ("tool_call", "toolu_01A", "Bash", "echo hi"),
    ("tool_result", "toolu_01A", "success", "hi"),
    ("message", ANSWER),
]


@pytest.mark.parametrize("partial", [True, False], ids=["partial-messages", "complete-messages"])
def test_a_tool_using_turn_reads_as_claude_code_ran_it(tmp_path: Path, partial: bool) -> None:
    flags = ["--output-format", "stream-json", "--verbose"]
    done, _ = run_claude(tmp_path, tool_turn(), *flags, *([PARTIAL] if partial else []))
    assert done.returncode == 0, done.stderr.decode()
    events = read_valid(done.stdout, 0)
    assert conversation(events) == TOLD
    start, result = events[0], events[-1]
    assert isinstance(start, p.Start) and isinstance(result, p.Result)
    assert start.cwd == str(tmp_path / "work") and start.permission_mode == "default"
    assert "Bash" in start.tools and start.model
    assert result.ok and result.exit_code == 0 and result.result == ANSWER
    assert (result.usage.input_tokens, result.usage.output_tokens) == (40, 20)  # two calls of 20 in, 10 out
    assert isinstance(result.usage.cost_usd, float) and result.usage.cost_usd > 0
    # Nothing lost or misplaced: no warnings, no deltas of a message already complete.
    assert not [e for e in events if isinstance(e, p.Log) and e.level == "warn"]
    assert not [e for e in events if isinstance(e, p.GenericEvent) and e.name.startswith("foreign.")]
    messages = [e.message_id for e in events if isinstance(e, p.Message)]
    assert len(set(messages)) == len(messages) == 2  # one message id from the server, two messages
    if partial:
        streamed = "".join(e.content for e in events if isinstance(e, p.MessageDelta))
        assert streamed == "Let me look." + ANSWER
    # The fast path keeps up with the CLI: every message line this version writes is one it reads typed.
    typed = ClaudeDecoder.typed_lines
    assert typed is not None
    hot = [
        raw
        for raw in done.stdout.splitlines()
        if json.loads(raw)["type"] in ("stream_event", "assistant", "user")
    ]
    assert hot and [raw for raw in hot if not _decodes(typed, raw)] == []


def _decodes(decoder: msgspec.json.Decoder[object], raw: bytes) -> bool:
    try:
        decoder.decode(raw)
    except msgspec.ValidationError:
        return False
    return True


def test_the_session_log_claude_code_keeps_reads_as_the_same_conversation(tmp_path: Path) -> None:
    done, home = run_claude(tmp_path, tool_turn(), "--output-format", "stream-json", "--verbose")
    assert done.returncode == 0, done.stderr.decode()
    (log,) = (home / ".claude" / "projects").glob("*/*.jsonl")
    stream = read_valid(done.stdout, 0)
    logged = read_valid(log.read_bytes(), 0)
    assert logged[0].type == "start" and isinstance(logged[0], p.Start)
    assert logged[0].cwd == str(tmp_path / "work")  # from the first record that says, not from bookkeeping
    assert logged[0].session_id == stream[0].session_id
    assert conversation(logged) == [("message", "run echo hi"), *TOLD]
    result = logged[-1]
    assert isinstance(result, p.Result) and result.ok and result.result == ANSWER
    # Claude Code's own bookkeeping records are kept whole, each at its record's time (not the reading's).
    kept = [e for e in logged if isinstance(e, p.UnknownEvent) and "timestamp" in e.raw]
    assert kept and all(e.ts == e.raw["timestamp"] for e in kept)


def test_claude_codes_single_json_document_reads_as_one_turn(tmp_path: Path) -> None:
    done, _ = run_claude(tmp_path, [anthropic_reply("Hello there.")], "--output-format", "json")
    assert done.returncode == 0, done.stderr.decode()
    events = read_valid(done.stdout, 0)
    result = events[-1]
    assert isinstance(result, p.Result) and result.ok and result.result == "Hello there."
    assert (result.usage.input_tokens, result.usage.output_tokens) == (20, 10)


def test_a_rejected_api_key_ends_the_turn_with_its_own_error(tmp_path: Path) -> None:
    done, _ = run_claude(
        tmp_path,
        [anthropic_error(401)],
        "--output-format",
        "stream-json",
        "--verbose",
        CLAUDE_CODE_MAX_RETRIES="0",
    )
    assert done.returncode == 1, done.stderr.decode()
    events = read_valid(done.stdout, 1)
    errors = [e for e in events if isinstance(e, p.Error)]
    assert [(e.code, e.recoverable) for e in errors] == [("AUTH_EXPIRED", False)]
    result = events[-1]
    assert isinstance(result, p.Result) and not result.ok and result.exit_code == 1
    assert result.error is not p.UNSET and result.error.code == "AUTH_EXPIRED"


def test_wrap_ends_claude_codes_stream_well_on_an_interrupt(tmp_path: Path) -> None:
    """SIGINT to ``agentstream wrap`` mid-answer (the server stalls): the stream ends interrupted, exit 130."""
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    stalled = anthropic_reply("A long answer that never finishes arriving.", stall_after=8)
    with FakeModelServer([stalled]) as server:
        wrap = subprocess.Popen(
            [*WRAP, claude_code(), "-p", "hi", "--output-format", "stream-json", "--verbose", PARTIAL],
            env={**claude_env(home, server), "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
            cwd=work,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert wrap.stdout is not None
        lines: list[bytes] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = wrap.stdout.readline()
            assert line, wrap.stderr.read().decode() if wrap.stderr else ""
            lines.append(line)
            if b'"type":"message_delta"' in line:
                break
        wrap.send_signal(signal.SIGINT)
        lines += wrap.stdout.readlines()  # through the reader's buffer (communicate() would skip it)
        wrap.wait(timeout=30)
    assert wrap.returncode == 130, wrap.stderr.read().decode() if wrap.stderr else ""
    events = assert_valid_stream([line.rstrip(b"\n") for line in lines], 130)
    result = events[-1]
    assert isinstance(result, p.Result) and result.subtype == "interrupted" and result.exit_code == 130
    assert any(isinstance(e, p.MessageDelta) for e in events)


def two_way_shim(tmp_path: Path) -> str:
    """A ``cli_path`` for the Claude Agent SDK: ``wrap --two-way`` around Claude Code, given the SDK's flags."""
    shim = tmp_path / "wrapped-claude"
    wrap = [*WRAP[:-1], "--two-way", "--from", "claude", "--to", "claude", "--no-publish", "--"]
    shim.write_text(f'#!/bin/sh\nexec {shlex.join(wrap)} {shlex.quote(claude_code())} "$@"\n')
    shim.chmod(0o755)
    return str(shim)


def test_the_sdk_drives_claude_code_through_wrap_two_way(tmp_path: Path) -> None:
    """The Claude Agent SDK, with the wrap around Claude Code as its CLI: two turns on one client, a tool call
    the client denies, every turn one clean ``init`` … ``ResultMessage``, as without the wrap."""
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    shim = two_way_shim(tmp_path)
    denied = ("toolu_01A", "Bash", {"command": "touch forbidden.txt"})
    script = [
        anthropic_reply("Let me look.", [denied]),
        anthropic_reply("Fine, I left it."),
        anthropic_reply("Two."),
    ]
    asked: list[str] = []

    async def can_use_tool(name: str, arguments: dict[str, Any], context: Any) -> PermissionResultDeny:
        asked.append(name)
        return PermissionResultDeny(message="not here")

    with FakeModelServer(script) as server:
        env = {**claude_env(home, server), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        options = ClaudeAgentOptions(cli_path=shim, cwd=str(work), env=env, can_use_tool=can_use_tool)
        turns = turns_on_one_client(options, "touch a file", "and now?")
    assert asked == ["Bash"] and not (work / "forbidden.txt").exists()
    said = [
        [
            b.text
            for m in turn
            if isinstance(m, AssistantMessage)
            for b in m.content
            if isinstance(b, TextBlock)
        ]
        for turn in turns
    ]
    assert said == [["Let me look.", "Fine, I left it."], ["Two."]]
    for turn in turns:
        inits = [m for m in turn if isinstance(m, SystemMessage) and m.subtype == "init"]
        results = [m for m in turn if isinstance(m, ResultMessage)]
        assert len(inits) == 1 and inits[0].data["model"] and len(results) == 1 and turn[-1] is results[0]
        assert results[0].subtype == "success" and not results[0].is_error
        assert not [m for m in turn if isinstance(m, SystemMessage) and m.subtype == "agentstream_event"]
    first, second = (turn[-1] for turn in turns)
    assert first.session_id == second.session_id  # Claude Code's own session, which a later run resumes
    assert first.total_cost_usd is not None and second.total_cost_usd is not None
    assert second.total_cost_usd > first.total_cost_usd  # the session's running cost, as Claude Code gives it


def test_an_sdk_query_with_can_use_tool_through_the_wrap_ends_at_its_result(tmp_path: Path) -> None:
    """``query()`` with ``can_use_tool`` keeps Claude Code's stdin open until Claude Code says its session is
    ``idle`` (the line after the result): through the wrap that line comes at once, so the query ends there
    (held for a next turn that never comes, the SDK would wait out its ten-minute ceiling)."""
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    asked: list[str] = []

    async def can_use_tool(name: str, arguments: dict[str, Any], context: Any) -> PermissionResultDeny:
        asked.append(name)
        return PermissionResultDeny(message="not here")

    async def prompt() -> AsyncIterator[dict[str, Any]]:
        yield {"type": "user", "message": {"role": "user", "content": "touch a file"}}

    async def run(options: ClaudeAgentOptions) -> list[Any]:
        return [message async for message in query(prompt=prompt(), options=options)]

    denied = ("toolu_01A", "Bash", {"command": "touch forbidden.txt"})
    with FakeModelServer([anthropic_reply(tool_calls=[denied]), anthropic_reply("Left it.")]) as server:
        env = {**claude_env(home, server), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        options = ClaudeAgentOptions(
            cli_path=two_way_shim(tmp_path), cwd=str(work), env=env, can_use_tool=can_use_tool
        )
        messages = asyncio.run(asyncio.wait_for(run(options), timeout=60))
    assert asked == ["Bash"] and not (work / "forbidden.txt").exists()
    results = [m for m in messages if isinstance(m, ResultMessage)]
    assert len(results) == 1 and messages[-1] is results[0] and results[0].result == "Left it."


def test_the_sdk_gets_claude_codes_api_error_category_through_the_wrap(tmp_path: Path) -> None:
    """A rejected key: the SDK's ``AssistantMessage.error`` and text, and its result's error, through the wrap as
    from Claude Code itself."""

    def session(cli: str, name: str) -> list[Any]:
        home, work = tmp_path / name / "home", tmp_path / name / "work"
        work.mkdir(parents=True)
        with FakeModelServer([anthropic_error(401)]) as server:
            env = {**claude_env(home, server, CLAUDE_CODE_MAX_RETRIES="0")}
            env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
            (turn,) = turns_on_one_client(ClaudeAgentOptions(cli_path=cli, cwd=str(work), env=env), "hello")
        return turn

    def told(turn: list[Any]) -> list[tuple[Any, ...]]:
        return [
            (m.error, [b.text for b in m.content if isinstance(b, TextBlock)])
            if isinstance(m, AssistantMessage)
            else (m.is_error, m.result)
            for m in turn
            if isinstance(m, (AssistantMessage, ResultMessage))
        ]

    direct = told(session(claude_code(), "direct"))
    assert direct[0][0] == "authentication_failed" and direct[-1][0] is True
    assert told(session(two_way_shim(tmp_path), "wrapped")) == direct


MODEL_FACTS = ("contextWindow", "maxOutputTokens", "webSearchRequests")
"""What Claude Code's ``modelUsage`` entries say of a model besides its tokens and cost."""


@pytest.mark.parametrize("partial", [False, True], ids=["complete-messages", "partial-messages"])
def test_the_sdk_gets_from_the_wrap_what_it_gets_from_claude_code(tmp_path: Path, partial: bool) -> None:
    """The Claude Agent SDK with Claude Code as its CLI, and with ``wrap --two-way`` around it, with and without
    ``include_partial_messages``: the same messages (no ``StreamEvent`` the client did not ask for), each
    ``AssistantMessage`` with its call's usage, and the result's ``modelUsage`` with Claude Code's
    ``contextWindow``, ``maxOutputTokens`` and ``webSearchRequests``."""
    call = ("toolu_01A", "Bash", {"command": "echo hi", "description": "say hi"})

    def session(cli: str, name: str) -> list[Any]:
        home, work = tmp_path / name / "home", tmp_path / name / "work"
        work.mkdir(parents=True)
        with FakeModelServer([anthropic_reply("Let me look.", [call]), anthropic_reply(ANSWER)]) as server:
            env = {**claude_env(home, server), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
            options = ClaudeAgentOptions(
                cli_path=cli,
                cwd=str(work),
                env=env,
                model=ANTHROPIC_MODEL,  # the model the server answers as: Claude Code's modelUsage names it
                allowed_tools=["Bash"],
                include_partial_messages=partial,
            )
            (turn,) = turns_on_one_client(options, "run echo hi")
        return turn

    def told(turn: list[Any]) -> list[tuple[Any, ...]]:
        """The messages but the system ones (the wrap names the child's session in one), usage figures apart."""
        return [
            (
                type(m).__name__,
                [type(b).__name__ for b in m.content] if isinstance(m, AssistantMessage) else None,
            )
            for m in turn
            if not isinstance(m, (SystemMessage, StreamEvent))
        ]

    def usage(turn: list[Any]) -> list[Any]:
        """Each assistant message's usage: the whole of it without partial messages (Claude Code's own line's
        figures, passed on); with them, the input (the wrap's output count is the call's final one, not Claude
        Code's placeholder)."""
        found = [m.usage for m in turn if isinstance(m, AssistantMessage)]
        return (
            found if not partial else [u and (u["input_tokens"], u["cache_read_input_tokens"]) for u in found]
        )

    def streamed(turn: list[Any]) -> tuple[int, str]:
        """How many API messages were streamed, and the text their deltas said."""
        events = [m.event for m in turn if isinstance(m, StreamEvent)]
        text = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
        return [e["type"] for e in events].count("message_start"), text

    def facts(turn: list[Any]) -> dict[str, Any]:
        (result,) = [m for m in turn if isinstance(m, ResultMessage)]
        return {
            model: {key: figures.get(key) for key in MODEL_FACTS}
            for model, figures in result.model_usage.items()
        }

    direct, wrapped = session(claude_code(), "direct"), session(two_way_shim(tmp_path), "wrapped")
    assert told(wrapped) == told(direct)
    assert usage(wrapped) == usage(direct) and None not in usage(direct)
    assert streamed(wrapped) == streamed(direct) == ((2, "Let me look." + ANSWER) if partial else (0, ""))
    assert facts(wrapped) == facts(direct) and None not in facts(direct)[ANTHROPIC_MODEL].values()


def test_agentstream_usage_and_ccusage_count_the_log_as_claude_code_billed_it(tmp_path: Path) -> None:
    """The log of a turn of two model calls (one logged as three records, one per content block): each call
    counted once, by ``agentstream usage`` and by ccusage alike, to what Claude Code's own result says."""
    done, home = run_claude(tmp_path, tool_turn(), "--output-format", "stream-json", "--verbose")
    assert done.returncode == 0, done.stderr.decode()
    billed = read_valid(done.stdout, 0)[-1]
    assert isinstance(billed, p.Result)
    config = home / ".claude"
    ours = envelope(str(config / "projects"), "--cli", "claude")["result"]["totals"]
    theirs = ccusage(config)["totals"]
    assert (ours["calls"], ours["input_tokens"], ours["output_tokens"]) == (2, 40, 20)
    assert (theirs["inputTokens"], theirs["outputTokens"]) == (40, 20)
    assert (billed.usage.input_tokens, billed.usage.output_tokens) == (40, 20)


def test_usage_counts_a_wrapped_claude_code_run_once_and_by_the_model_it_used(tmp_path: Path) -> None:
    """``agentstream wrap`` of Claude Code records the run on the bus while Claude Code logs the same calls:
    ``usage`` counts them once (from the log, per call). Without the log, the run itself is counted, under the
    model its calls used (the wrap's own ``start`` names none)."""
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    env = {
        "AGENTSTREAM_BUS": f"sqlite:///{tmp_path / 'bus.sqlite3'}",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    with FakeModelServer(tool_turn()) as server:
        env = {**claude_env(home, server), **env}
        done = subprocess.run(
            [*WRAP, claude_code(), "-p", "run echo hi", "--allowedTools", "Bash", *STREAM_JSON],
            env=env,
            cwd=work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr.decode()
    events = assert_valid_stream(done.stdout.splitlines(), 0)
    (child,) = [e.message for e in events if isinstance(e, p.Status) and e.status == "child_session"]

    def groups(by: str) -> dict[str, tuple[int, int, int]]:
        found = envelope("--by", by, env=env)["result"]["groups"]
        return {g["key"]: (g["calls"], g["input_tokens"], g["output_tokens"]) for g in found}

    assert groups("session") == {f"claude:{child}": (2, 40, 20)}
    shutil.rmtree(home / ".claude" / "projects")
    (run,) = groups("session")
    assert run.startswith("agentstream:") and groups("session")[run] == (1, 40, 20)
    assert groups("model") == {ANTHROPIC_MODEL: (1, 40, 20)}
