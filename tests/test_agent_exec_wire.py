"""``agentstream exec`` against fake model servers speaking the real OpenAI and Anthropic stream formats.

Every scenario runs the real command in a subprocess, with the official SDK
talking to a loopback server, twice at once (stream-json and json output): the
stream keeps every protocol invariant, json is one object, and the exit code is
``result.exit_code`` (see ``run_both_formats``).
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from _agent_fakes import (
    ANTHROPIC_MODEL,
    OPENAI_MODEL,
    ExecRun,
    FakeModelServer,
    LiveExec,
    Reply,
    Sse,
    Status,
    anthropic_env,
    anthropic_error,
    anthropic_reply,
    assert_json_object,
    assert_valid_stream,
    openai_env,
    openai_error,
    openai_reply,
    run_both_formats,
)
from _consumer_support import helper_threads
from agentstream.agent.pricing import cost_usd
from agentstream.agent.sessions import SessionStore


@dataclass(frozen=True)
class Wire:
    """One provider's wire format: how to script it, configure exec for it, and read its requests."""

    name: str
    reply: Callable[..., Sse]
    error: Callable[..., Status]
    env: Callable[..., dict[str, str]]
    model: str

    def tool_results(self, body: dict[str, Any]) -> dict[str, str]:
        """call id → the tool output this request sent back to the model."""
        if self.name == "openai":
            return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}
        blocks = [
            b
            for m in body["messages"]
            if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"]
        ]
        return {b["tool_use_id"]: b["content"] for b in blocks if b["type"] == "tool_result"}

    def offered_tools(self, body: dict[str, Any]) -> list[str]:
        if self.name == "openai":
            return [t["function"]["name"] for t in body.get("tools", [])]
        return [t["name"] for t in body.get("tools", [])]


OPENAI = Wire("openai", openai_reply, openai_error, openai_env, OPENAI_MODEL)
ANTHROPIC = Wire("anthropic", anthropic_reply, anthropic_error, anthropic_env, ANTHROPIC_MODEL)


@pytest.fixture(params=[OPENAI, ANTHROPIC], ids=lambda wire: wire.name)
def wire(request: pytest.FixtureRequest) -> Wire:
    return request.param  # type: ignore[no-any-return]


def make_workspace(root: Path) -> Path:
    root.mkdir()
    (root / "notes.txt").write_text("alpha\nbeta\n")
    return root


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return make_workspace(tmp_path / "ws")


# -- the scenarios, run concurrently --------------------------------------------------
#
# Each exec process spends most of its time importing its SDK, so the scenarios
# below run side by side (a few at a time) the first time a test asks for one;
# each test then checks its own run.


@dataclass(frozen=True)
class Scenario:
    replies: Callable[[Wire], list[Reply]]
    args: tuple[str, ...] = ()
    env: Callable[[Wire], dict[str, str]] = lambda wire: {}


SECRET = "opaque-credential-7f3a9c2e41d8"


THOUGHT = "The user wants the notes; read the file first."


def _thinking_replies(wire: Wire) -> list[Reply]:
    read = [("toolu_1" if wire is ANTHROPIC else "call_1", "read_file", {"path": "notes.txt"})]
    if wire is ANTHROPIC:
        first = anthropic_reply("Reading.", read, thinking=THOUGHT, signature="sig-abc")
    else:
        first = openai_reply("Reading.", read, reasoning=THOUGHT)
    return [first, wire.reply("Done.")]


PARALLEL = [("call_1", "read_file", {"path": "notes.txt"}), ("call_2", "list_dir", {"path": "."})]

SCENARIOS: dict[str, Scenario] = {
    "plain_text": Scenario(lambda w: [w.reply("Hello there, friend.", usage=(1200, 30))]),
    "tool_round_trip": Scenario(
        lambda w: [
            w.reply("Let me read it.", [("call_a", "read_file", {"path": "notes.txt"})]),
            w.reply("It says alpha."),
        ]
    ),
    "parallel_tool_calls": Scenario(lambda w: [w.reply("", PARALLEL), w.reply("Both done.")]),
    "thinking": Scenario(_thinking_replies, ("--thinking-budget", "2048")),
    "rate_limit_then_success": Scenario(
        lambda w: [w.error(429, {"retry-after-ms": "30"}), w.reply("Made it.")]
    ),
    "server_errors_are_retried_then_fatal": Scenario(
        lambda w: [w.error(500)] * 3, env=lambda w: {"AGENTSTREAM_MAX_RETRIES": "2"}
    ),
    "bad_credentials_are_fatal_and_never_leak": Scenario(
        lambda w: [w.error(401)],
        env=lambda w: {"OPENAI_API_KEY" if w is OPENAI else "ANTHROPIC_API_KEY": SECRET},
    ),
    "dropped_connection_is_retried": Scenario(
        lambda w: [w.reply("Some partial answer that breaks", drop_after=5), w.reply("The full answer.")]
    ),
    "context_limit_is_fatal": Scenario(lambda w: [w.error(400)]),
    "max_turns": Scenario(
        lambda w: [w.reply("", [(f"call_{n}", "list_dir", {})]) for n in range(5)], ("--max-turns", "2")
    ),
}

Ran = tuple[ExecRun, FakeModelServer]
Runs = dict[tuple[str, str], Future[Ran]]


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    """Every selected scenario, started at once on a small pool (in test order); tests wait for their own."""
    wanted = {
        (item.callspec.params["wire"], item.originalname.removeprefix("test_")): None
        for item in request.session.items
        if item.module is sys.modules[__name__] and item.originalname.removeprefix("test_") in SCENARIOS
    }
    homes = {
        key: tmp_path_factory.mktemp(f"{key[0].name}-{key[1]}") for key in wanted
    }  # mktemp is not thread-safe
    with ThreadPoolExecutor(max_workers=3) as pool:
        yield {(wire.name, name): pool.submit(_run, wire, name, homes[wire, name]) for wire, name in wanted}


def _run(wire: Wire, name: str, home: Path) -> Ran:
    scenario = SCENARIOS[name]
    extra = scenario.env(wire)
    return run_both_formats(
        lambda: scenario.replies(wire),
        lambda root, server: wire.env(root, server, **extra),
        ["do it", *scenario.args],
        home=home,
        cwd=make_workspace(home / "ws"),
    )


def ran(runs: Runs, wire: Wire, name: str) -> Ran:
    return runs[wire.name, name].result(timeout=120)


def kinds(run: ExecRun, kind: str) -> list[Any]:
    return run.of_type(kind)


def test_plain_text(wire: Wire, runs: Runs) -> None:
    run, server = ran(runs, wire, "plain_text")
    assert run.returncode == 0
    (message,) = kinds(run, "message")
    assert message.content == "Hello there, friend."
    assert "".join(d.content for d in kinds(run, "message_delta")) == message.content
    (usage,) = kinds(run, "usage")
    assert (usage.model, usage.input_tokens, usage.output_tokens) == (wire.model, 1200, 30)
    assert usage.cost_usd == cost_usd(wire.model, input_tokens=1200, output_tokens=30)
    result = run.result
    assert (result.result, result.turn_count, result.usage.input_tokens) == ("Hello there, friend.", 1, 1200)
    start = run.events[0]
    assert (start.provider, start.model) == (wire.name, wire.model)
    (post,) = server.posts
    body = post.body
    assert body["model"] == wire.model and body["stream"] is True
    assert wire.offered_tools(body) == start.tools
    if wire is OPENAI:
        assert body["stream_options"] == {"include_usage": True}
        assert body["messages"][0]["role"] == "system"
    else:
        assert "careful software agent" in body["system"]


def test_tool_round_trip(wire: Wire, runs: Runs) -> None:
    run, server = ran(runs, wire, "tool_round_trip")
    (call,) = kinds(run, "tool_call")
    (result,) = kinds(run, "tool_result")
    assert (call.call_id, call.name, call.arguments) == ("call_a", "read_file", {"path": "notes.txt"})
    assert result.status == "success" and "alpha" in result.output
    assert "alpha" in wire.tool_results(server.posts[1].body)["call_a"]
    assert (run.result.turn_count, run.result.tools_used, run.result.result) == (
        2,
        ["read_file"],
        "It says alpha.",
    )


def test_parallel_tool_calls(wire: Wire, runs: Runs) -> None:
    run, server = ran(runs, wire, "parallel_tool_calls")
    order = [(e.type, e.call_id) for e in run.events if e.type in ("tool_call", "tool_result")]
    assert order == [
        ("tool_call", "call_1"),
        ("tool_result", "call_1"),
        ("tool_call", "call_2"),
        ("tool_result", "call_2"),
    ]
    sent = wire.tool_results(server.posts[1].body)
    assert list(sent) == ["call_1", "call_2"]
    assert "beta" in sent["call_1"] and "notes.txt" in sent["call_2"]
    if wire is ANTHROPIC:  # both results travel in one user turn, as the Messages API requires
        last_user = server.posts[1].body["messages"][-1]
        assert [b["type"] for b in last_user["content"]] == ["tool_result", "tool_result"]


def test_thinking(wire: Wire, runs: Runs) -> None:
    run, server = ran(runs, wire, "thinking")
    thought = THOUGHT
    (reasoning,) = kinds(run, "reasoning")
    assert reasoning.content == thought
    assert "".join(d.content for d in kinds(run, "reasoning_delta")) == thought
    body = server.posts[1].body
    if wire is ANTHROPIC:
        assert server.posts[0].body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
        assistant = body["messages"][1]
        assert assistant["content"][0] == {"type": "thinking", "thinking": thought, "signature": "sig-abc"}
    else:  # OpenAI-compatible servers stream reasoning but do not take it back
        assert thought not in str(body["messages"])


def test_rate_limit_then_success(wire: Wire, runs: Runs) -> None:
    run, server = ran(runs, wire, "rate_limit_then_success")
    (error,) = kinds(run, "error")
    assert (error.code, error.recoverable, error.retry_in_ms) == ("RATE_LIMITED", True, 30)
    assert run.returncode == 0 and run.result.result == "Made it."
    assert len(server.posts) == 2


def test_server_errors_are_retried_then_fatal(wire: Wire, runs: Runs) -> None:
    run, server = ran(runs, wire, "server_errors_are_retried_then_fatal")
    errors = kinds(run, "error")
    assert [(e.code, e.recoverable) for e in errors] == [("PROVIDER_ERROR", True)] * 2 + [
        ("PROVIDER_ERROR", False)
    ]
    assert all(isinstance(e.retry_in_ms, int) and e.retry_in_ms >= 0 for e in errors[:2])
    assert "gave up after 3 attempts" in errors[-1].message
    assert (run.returncode, run.result.subtype, run.result.error.code) == (1, "error", "PROVIDER_ERROR")
    assert len(server.posts) == 3


def test_bad_credentials_are_fatal_and_never_leak(wire: Wire, runs: Runs) -> None:
    """The fake server echoes the credential header into its error body; no event may carry it."""
    run, server = ran(runs, wire, "bad_credentials_are_fatal_and_never_leak")
    secret = SECRET
    assert secret in str(server.posts[0].headers)  # the key really went out, and came back in the body
    (error,) = kinds(run, "error")
    assert (error.code, error.recoverable) == ("AUTH_EXPIRED", False)
    assert "[redacted" in error.message
    assert secret.encode() not in run.stdout and secret not in run.stderr
    assert run.returncode == 1 and len(server.posts) == 1


def test_dropped_connection_is_retried(wire: Wire, runs: Runs) -> None:
    run, server = ran(runs, wire, "dropped_connection_is_retried")
    (error,) = kinds(run, "error")
    assert (error.code, error.recoverable) == ("NETWORK_TIMEOUT", True)
    discarded, final = kinds(run, "message")
    assert discarded.content == ""  # the partial run is closed as discarded, never as a complete answer
    partial = [d.content for d in kinds(run, "message_delta") if d.message_id == discarded.message_id]
    assert partial and "".join(partial) in "Some partial answer that breaks"
    assert final.content == "The full answer." and final.message_id != discarded.message_id
    assert run.result.result == "The full answer." and run.returncode == 0
    assert len(server.posts) == 2


def test_context_limit_is_fatal(wire: Wire, runs: Runs) -> None:
    run, server = ran(runs, wire, "context_limit_is_fatal")
    (error,) = kinds(run, "error")
    assert (error.code, error.recoverable, run.returncode) == ("CONTEXT_LIMIT", False, 1)
    assert len(server.posts) == 1


def test_max_turns(wire: Wire, runs: Runs) -> None:
    run, server = ran(runs, wire, "max_turns")
    assert (run.returncode, run.result.subtype, run.result.error.code) == (3, "max_turns", "MAX_TURNS")
    assert run.result.turn_count == 2 and len(server.posts) == 2
    assert len(kinds(run, "tool_result")) == 2


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_during_a_stalled_stream(wire: Wire, tmp_path: Path, workspace: Path, signum: int) -> None:
    """The model stalls mid-answer; a real signal ends the run with 128+N, keeping usage and the session."""
    script = [
        wire.reply("Looking.", [("call_1", "list_dir", {})], usage=(500, 7)),
        wire.reply("I am still thinking about this", stall_after=4),
    ]
    with FakeModelServer(script) as server, FakeModelServer(list(script)) as json_server:
        live = LiveExec(["do it", "-o", "stream-json"], wire.env(tmp_path / "lines", server), cwd=workspace)
        quiet = LiveExec(["do it", "-o", "json"], wire.env(tmp_path / "json", json_server), cwd=workspace)

        def stalled(lines: list[bytes]) -> bool:
            deltas = [line for line in lines if b'"message_delta"' in line]
            return len(server.posts) == 2 and len({d.split(b'"message_id":')[1][:22] for d in deltas}) == 2

        live.wait_for(stalled)
        while len(json_server.posts) < 2:
            assert quiet.proc.poll() is None
            time.sleep(0.01)
        threads = helper_threads(live.proc.pid)
        live.proc.send_signal(signum)
        quiet.proc.send_signal(signum)
        run, json_run = live.finish(), quiet.finish()
    assert run.returncode == 128 + signum
    assert threads and all(threads.values()), f"threads that can take exec's signals: {threads}"
    events = assert_valid_stream(run.lines, run.returncode)
    assert (run.result.subtype, run.result.error.code) == ("interrupted", "INTERRUPTED")
    assert run.result.usage.input_tokens == 500  # the first call's usage survived the interrupt
    messages = [e for e in events if e.type == "message"]
    assert [m.content for m in messages] == ["Looking.", ""]  # the stalled partial answer is discarded
    assert [e.status for e in events if e.type == "step"][-1] == "failed"
    assert assert_json_object(json_run).subtype == "interrupted"
    record = SessionStore(tmp_path / "lines" / "state" / "sessions.sqlite3").load(events[0].session_id)
    assert record.status == "interrupted"
    assert [m["role"] for m in record.messages] == ["user", "assistant", "tool", "user"]
    assert record.messages[-1]["content"] == "[Request interrupted by user]", (
        "stopped in a model call, not a tool"
    )
