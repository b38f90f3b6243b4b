"""The real Claude Agent SDK drives ``agentstream-claude`` as its CLI, against a loopback Anthropic server.

No mocks in between: the SDK spawns the real console script, speaks Claude Code's
stream-json and control protocol to it over pipes, and the agent calls the
official ``anthropic`` SDK, which talks to :class:`FakeModelServer`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import (  # the test extra: pip install -e '.[test]'
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    HookMatcher,
    PermissionResultAllow,
    PermissionResultDeny,
    PermissionUpdate,
    ResultMessage,
    StreamEvent,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
    query,
)
from claude_agent_sdk.types import PermissionRuleValue

from _agent_fakes import ANTHROPIC_MODEL, FakeModelServer, anthropic_env, anthropic_error, anthropic_reply
from _mcp_support import remote_server, requests

PROBE = Path(__file__).parent / "_mcp_probe_server.py"


def cli_path() -> str:
    found = shutil.which("agentstream-claude", path=str(Path(sys.executable).parent))
    assert found, "the agentstream-claude console script is missing: pip install -e '.[test]'"
    return found


def options(tmp_path: Path, server: FakeModelServer, **more: Any) -> ClaudeAgentOptions:
    workspace = tmp_path / "work"
    workspace.mkdir(exist_ok=True)
    env = anthropic_env(tmp_path / "home", server, AGENTSTREAM_RETRY_BASE_MS="5")
    return ClaudeAgentOptions(cli_path=more.pop("cli", cli_path()), cwd=str(workspace), env=env, **more)


def texts(messages: list[Any]) -> list[str]:
    return [
        b.text
        for m in messages
        if isinstance(m, AssistantMessage)
        for b in m.content
        if isinstance(b, TextBlock)
    ]


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        block
        for message in body["messages"]
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_result"
    ]


async def collect(prompt: str, opts: ClaudeAgentOptions) -> list[Any]:
    return [message async for message in query(prompt=prompt, options=opts)]


async def client_turn(prompt: str, opts: ClaudeAgentOptions) -> list[Any]:
    """One turn on a ``ClaudeSDKClient`` (the SDK's two-way client, which can answer ``can_use_tool``)."""
    async with ClaudeSDKClient(opts) as client:
        await client.query(prompt)
        return [message async for message in client.receive_response()]


def test_tool_round_trip_with_bypass_permissions(tmp_path: Path) -> None:
    script = [
        anthropic_reply(tool_calls=[("toolu_01", "shell", {"command": "echo made > made.txt && echo ok"})]),
        anthropic_reply("The file is made."),
    ]
    with FakeModelServer(script) as server:
        opts = options(tmp_path, server, permission_mode="bypassPermissions")
        messages = asyncio.run(collect("make a file", opts))
    uses = [
        b
        for m in messages
        if isinstance(m, AssistantMessage)
        for b in m.content
        if isinstance(b, ToolUseBlock)
    ]
    assert [(u.name, u.id) for u in uses] == [("shell", "toolu_01")]
    results = [
        b for m in messages if isinstance(m, UserMessage) for b in m.content if isinstance(b, ToolResultBlock)
    ]
    assert results[0].tool_use_id == "toolu_01" and "ok" in str(results[0].content)
    assert results[0].is_error is False, "said, as Claude Code says it, not left out"
    assert (tmp_path / "work" / "made.txt").read_text() == "made\n"
    init = next(m for m in messages if isinstance(m, SystemMessage) and m.subtype == "init")
    assert init.data["permissionMode"] == "bypassPermissions", "init says the mode the session runs in"
    final = [m for m in messages if isinstance(m, ResultMessage)]
    assert len(final) == 1 and final[0].result == "The file is made."
    assert tool_results(server.posts[1].body)[0]["content"].startswith("ok")


def test_can_use_tool_is_asked_and_a_denial_is_honoured(tmp_path: Path) -> None:
    asked: list[tuple[str, dict[str, Any], str | None]] = []

    async def can_use_tool(name: str, arguments: dict[str, Any], context: Any) -> PermissionResultDeny:
        asked.append((name, arguments, context.tool_use_id))
        return PermissionResultDeny(message="not on my machine")

    script = [
        anthropic_reply(tool_calls=[("toolu_02", "shell", {"command": "touch forbidden.txt"})]),
        anthropic_reply("Understood, I did not run it."),
    ]

    with FakeModelServer(script) as server:
        opts = options(tmp_path, server, permission_mode="default", can_use_tool=can_use_tool)
        messages = asyncio.run(client_turn("please run it", opts))
    assert asked == [("shell", {"command": "touch forbidden.txt"}, "toolu_02")]
    assert not (tmp_path / "work" / "forbidden.txt").exists()
    denied = tool_results(server.posts[1].body)[0]
    assert denied["is_error"] and "not on my machine" in denied["content"]
    final = [m for m in messages if isinstance(m, ResultMessage)]
    assert len(final) == 1 and final[0].result == "Understood, I did not run it."
    assert final[0].permission_denials == [
        {"tool_name": "shell", "tool_use_id": "toolu_02", "tool_input": {"command": "touch forbidden.txt"}}
    ]


def test_interrupt_ends_a_streaming_turn_with_a_result_quickly(tmp_path: Path) -> None:
    script = [anthropic_reply("A long answer that never finishes " * 20, stall_after=8)]

    async def session(opts: ClaudeAgentOptions) -> tuple[list[Any], float]:
        async with ClaudeSDKClient(opts) as client:
            await client.query("talk for a long time")
            seen: list[Any] = []
            stream: AsyncIterator[Any] = client.receive_response()
            async for message in stream:
                seen.append(message)
                if isinstance(message, StreamEvent) and message.event.get("type") == "content_block_delta":
                    break
            began = time.monotonic()
            await client.interrupt()
            seen += [m async for m in stream]
            return seen, time.monotonic() - began

    with FakeModelServer(script) as server:
        opts = options(tmp_path, server, include_partial_messages=True)
        messages, took = asyncio.run(session(opts))
    final = [m for m in messages if isinstance(m, ResultMessage)]
    assert len(final) == 1 and final[0].is_error and final[0].subtype == "error_during_execution"
    assert took < 5, f"the interrupt took {took:.1f}s"
    assert texts(messages) == [], "the discarded answer is no assistant message (and no empty text block)"


def user_texts(body: dict[str, Any]) -> list[str]:
    """The text of every user block of a request, tool results included, in order."""
    return [
        block["text"] if block["type"] == "text" else block["content"]
        for message in body["messages"]
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
    ]


def test_after_an_interrupt_the_next_query_tells_the_model_the_last_request_was_stopped(
    tmp_path: Path,
) -> None:
    """As Claude Code does: the next turn on the client reads the stopped prompt, then that the user stopped it,
    then the new prompt (not the two prompts as one request, which the model would take up again); a call
    stopped while it ran has its result first, and the note says the stop came during tool use."""
    script = [
        anthropic_reply("A long answer that never finishes " * 20, stall_after=8),
        anthropic_reply(tool_calls=[("toolu_1", "shell", {"command": "sleep 30"})]),
        anthropic_reply("Third answer."),
    ]

    async def session(opts: ClaudeAgentOptions) -> list[list[Any]]:
        turns = []
        async with ClaudeSDKClient(opts) as client:
            for prompt, stop_at in (("talk at length", StreamEvent), ("wait a while", ToolUseBlock)):
                await client.query(prompt)
                seen: list[Any] = []
                stream: AsyncIterator[Any] = client.receive_response()
                async for message in stream:
                    seen.append(message)
                    said = message.content if isinstance(message, AssistantMessage) else [message]
                    if any(isinstance(part, stop_at) for part in said):
                        break
                await client.interrupt()
                turns.append(seen + [m async for m in stream])
            await client.query("something else")
            turns.append([m async for m in client.receive_response()])
        return turns

    with FakeModelServer(script) as server:
        opts = options(tmp_path, server, permission_mode="bypassPermissions", include_partial_messages=True)
        turns = asyncio.run(asyncio.wait_for(session(opts), timeout=60))
    results = [m for turn in turns for m in turn if isinstance(m, ResultMessage)]
    assert [(r.subtype, r.is_error) for r in results] == [
        ("error_during_execution", True),
        ("error_during_execution", True),
        ("success", False),
    ]
    said = user_texts(server.posts[2].body)
    assert said[:2] == ["talk at length", "[Request interrupted by user]"]
    assert said[2] == "wait a while" and said[3].startswith("the run stopped before this tool call finished")
    assert said[4:] == ["[Request interrupted by user for tool use]", "something else"]


@pytest.mark.parametrize(
    ("status", "category"), [(401, "authentication_failed"), (429, "rate_limit"), (500, "server_error")]
)
def test_a_failed_api_call_is_an_assistant_message_with_its_error_category(
    tmp_path: Path, status: int, category: str
) -> None:
    """As from Claude Code: a turn whose model call fails for good ends with an ``AssistantMessage`` whose
    ``error`` says what kind of failure it was (which the SDK's users test to tell a bad key from an overload)
    and whose text says why, then its error ``ResultMessage``; the client's next query is answered."""
    script = [anthropic_reply("First."), anthropic_error(status), anthropic_reply("Third.")]
    with FakeModelServer(script) as server:
        opts = options(tmp_path, server)
        opts.env["AGENTSTREAM_MAX_RETRIES"] = "0"
        turns = turns_on_one_client(opts, "one", "two", "three")
    failed = [m for m in turns[1] if not isinstance(m, SystemMessage)]
    assert [type(m).__name__ for m in failed] == ["AssistantMessage", "ResultMessage"]
    said, result = failed
    assert (
        said.error == category and texts([said]) == [result.errors[0]] and str(status) in said.content[0].text
    )
    assert (result.subtype, result.is_error) == ("error_during_execution", True)
    assert [texts(turn) for turn in (turns[0], turns[2])] == [["First."], ["Third."]]
    assert [m.error for turn in (turns[0], turns[2]) for m in turn if isinstance(m, AssistantMessage)] == [
        None,
        None,
    ]


def test_a_denial_that_interrupts_is_noted_for_the_next_query(tmp_path: Path) -> None:
    """``PermissionResultDeny(interrupt=True)`` stops the turn; the next query's request says so after the denied
    call's result, as Claude Code's does."""

    async def deny(name: str, arguments: dict[str, Any], context: Any) -> PermissionResultDeny:
        return PermissionResultDeny(message="stop everything", interrupt=True)

    script = [
        anthropic_reply(tool_calls=[("toolu_1", "shell", {"command": "touch x.txt"})]),
        anthropic_reply("Stopped, as asked."),
    ]
    with FakeModelServer(script) as server:
        opts = options(tmp_path, server, permission_mode="default", can_use_tool=deny)
        turns = turns_on_one_client(opts, "touch it", "and now?")
    assert [[m.subtype for m in turn if isinstance(m, ResultMessage)] for turn in turns] == [
        ["error_during_execution"],
        ["success"],
    ]
    assert user_texts(server.posts[1].body) == [
        "touch it",
        "denied: permission denied: stop everything",
        "[Request interrupted by user for tool use]",
        "and now?",
    ]


@pytest.mark.parametrize("partial", [False, True], ids=["complete-messages", "partial-messages"])
def test_each_assistant_message_has_its_calls_usage_and_stream_events_come_only_when_asked(
    tmp_path: Path, partial: bool
) -> None:
    """As from Claude Code: every ``AssistantMessage`` of a model call has that call's usage, under the call's one
    message id (so that a client counting each id once counts each call once, to the result's usage), and
    ``StreamEvent``s come only with ``include_partial_messages``, one API message per call, its usage in its
    ``message_delta``."""
    script = [
        anthropic_reply("Let me look.", [("toolu_1", "shell", {"command": "echo hi"})], usage=(100, 7)),
        anthropic_reply("It said hi.", usage=(130, 5)),
    ]
    with FakeModelServer(script) as server:
        opts = options(
            tmp_path, server, permission_mode="bypassPermissions", include_partial_messages=partial
        )
        messages = asyncio.run(collect("say hi", opts))
    assistants = [m for m in messages if isinstance(m, AssistantMessage)]
    assert [[type(b).__name__ for b in m.content] for m in assistants] == [
        ["TextBlock"],
        ["ToolUseBlock"],
        ["TextBlock"],
    ]
    said, called, answered = assistants
    assert said.message_id == called.message_id != answered.message_id
    assert [(m.usage["input_tokens"], m.usage["output_tokens"]) if m.usage else None for m in assistants] == [
        (100, 7),
        (100, 7),
        (130, 5),
    ]
    result = next(m for m in messages if isinstance(m, ResultMessage))
    per_call = {m.message_id: m.usage for m in assistants if m.usage}
    assert (
        result.usage and sum(u["output_tokens"] for u in per_call.values()) == result.usage["output_tokens"]
    )
    events = [m.event for m in messages if isinstance(m, StreamEvent)]
    if not partial:
        assert events == []
        return
    assert [e["type"] for e in events].count("message_start") == 2
    ends = [e["usage"] for e in events if e["type"] == "message_delta" and "usage" in e]
    assert [(u["input_tokens"], u["output_tokens"]) for u in ends] == [(100, 7), (130, 5)]


def test_can_use_tool_is_asked_when_no_permission_mode_is_given(tmp_path: Path) -> None:
    """The SDK sends ``--permission-prompt-tool stdio`` and no ``--permission-mode``: Claude Code's default asks."""
    asked: list[str] = []

    async def can_use_tool(name: str, arguments: dict[str, Any], context: Any) -> PermissionResultDeny:
        asked.append(name)
        return PermissionResultDeny(message="ask me first")

    script = [
        anthropic_reply(tool_calls=[("toolu_03", "shell", {"command": "echo no > ran.txt"})]),
        anthropic_reply("I did not run it."),
    ]
    with FakeModelServer(script) as server:
        opts = options(tmp_path, server, can_use_tool=can_use_tool)
        assert opts.permission_mode is None
        messages = asyncio.run(client_turn("run it", opts))
    assert asked == ["shell"]
    assert not (tmp_path / "work" / "ran.txt").exists()
    init = next(m for m in messages if isinstance(m, SystemMessage) and m.subtype == "init")
    assert init.data["permissionMode"] == "default"
    denied = tool_results(server.posts[1].body)[0]
    assert denied["is_error"] and "ask me first" in denied["content"]


def test_an_extra_args_value_is_the_flags_not_a_turn_of_its_own(tmp_path: Path) -> None:
    """``extra_args={"flag": "value"}`` arrives as ``--flag value``: the value is no prompt to answer."""
    with FakeModelServer([anthropic_reply("The one answer.")]) as server:
        opts = options(tmp_path, server, extra_args={"future-flag": "some-value"})
        messages = asyncio.run(client_turn("the real question", opts))
    assert texts(messages) == ["The one answer."]
    prompts = [post.body["messages"][0]["content"][0]["text"] for post in server.posts]
    assert prompts == ["the real question"]


def test_two_turns_on_one_client_are_one_priced_session_a_later_run_resumes(tmp_path: Path) -> None:
    """As with Claude Code: each turn answers its own prompt with the earlier turns in the model's history,
    ``total_cost_usd`` is the session's running total, and the session id on each turn's messages is the
    conversation's: resuming from the latest result's ``session_id`` continues it."""
    check_two_turns_on_one_client_then_resume(tmp_path)


def turns_on_one_client(opts: ClaudeAgentOptions, *prompts: str) -> list[list[Any]]:
    """Each prompt a turn on one ``ClaudeSDKClient``: every turn's messages, its result last."""

    async def session() -> list[list[Any]]:
        turns = []
        async with ClaudeSDKClient(opts) as client:
            for prompt in prompts:
                await client.query(prompt)
                turns.append([message async for message in client.receive_response()])
        return turns

    return asyncio.run(session())


def check_two_turns_on_one_client_then_resume(tmp_path: Path, **cli: str) -> None:
    """Two priced turns on one client, then ``resume=`` the last result's ``session_id`` (through ``cli``, if
    given): one session checked for what each of its parts must do."""
    priced = {"usage": (100_000, 1_000)}
    script = [
        anthropic_reply("First answer.", **priced),
        anthropic_reply("Second answer.", **priced),
        anthropic_reply("Third."),
    ]

    with FakeModelServer(script) as server:
        turns = turns_on_one_client(options(tmp_path, server, **cli), "first question", "second question")
        results = [m for turn in turns for m in turn if isinstance(m, ResultMessage)]
        ids = [r.session_id for r in results]
        assert len(ids) == 2 and ids[0] == ids[1], f"the two turns' session ids: {ids}"
        resumed = asyncio.run(collect("third question", options(tmp_path, server, resume=ids[-1], **cli)))
    assert [texts(turn) for turn in turns] == [["First answer."], ["Second answer."]], "turn answers"
    assert [sum(isinstance(m, ResultMessage) for m in turn) for turn in turns] == [1, 1], "results per turn"
    second = json.dumps(server.posts[1].body["messages"])
    assert "first question" in second and "First answer." in second and "second question" in second, (
        "the second turn's request lacks the first turn"
    )
    assert_cost_is_the_sessions_and_usage_the_turns(results)
    result = next(m for m in resumed if isinstance(m, ResultMessage))
    assert (result.subtype, result.session_id) == ("success", ids[0]), "the resumed run's result"
    history = json.dumps(server.posts[2].body["messages"])
    assert "first question" in history and "Second answer." in history and "third question" in history, (
        "the resumed run's request lacks the earlier turns"
    )


def test_a_pre_tool_use_hook_decides_before_the_permission_mode(tmp_path: Path) -> None:
    """Hooks registered at ``initialize`` are run (``hook_callback``) before each call they match: a denial holds
    even under ``bypassPermissions``; an allow may edit the input; a matcher for another tool is not asked."""
    seen: list[tuple[str, str, dict[str, Any], str | None]] = []

    def hook(verdict: str) -> Any:
        async def run(data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
            seen.append((verdict, data["tool_name"], data["tool_input"], tool_use_id))
            assert data["hook_event_name"] == "PreToolUse" and data["permission_mode"] == "bypassPermissions"
            if verdict == "deny":
                output = {"permissionDecision": "deny", "permissionDecisionReason": "no deletions here"}
            else:
                output = {
                    "permissionDecision": "allow",
                    "updatedInput": {"command": "echo edited > made.txt"},
                }
            return {"hookSpecificOutput": {"hookEventName": "PreToolUse", **output}}

        return run

    script = [
        anthropic_reply(tool_calls=[("toolu_1", "shell", {"command": "rm -rf important"})]),
        anthropic_reply(tool_calls=[("toolu_2", "shell", {"command": "echo original > made.txt"})]),
        anthropic_reply("Done."),
    ]
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "important").mkdir()
    decisions = iter(["deny", "allow"])

    async def decide(data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
        return await hook(next(decisions))(data, tool_use_id, context)

    hooks = {
        "PreToolUse": [
            HookMatcher(matcher="Bash", hooks=[decide]),
            HookMatcher(matcher="Write|Edit", hooks=[hook("deny")]),
        ]
    }
    with FakeModelServer(script) as server:
        opts = options(tmp_path, server, permission_mode="bypassPermissions", hooks=hooks)
        messages = asyncio.run(client_turn("tidy up", opts))
    assert [(verdict, name, tool_use_id) for verdict, name, _, tool_use_id in seen] == [
        ("deny", "Bash", "toolu_1"),
        ("allow", "Bash", "toolu_2"),
    ]
    assert (tmp_path / "work" / "important").is_dir(), "a denied call ran"
    assert (tmp_path / "work" / "made.txt").read_text() == "edited\n", "the hook's edited input was not used"
    denied = tool_results(server.posts[1].body)[0]
    assert denied["is_error"] and "no deletions here" in denied["content"]
    assert [m.subtype for m in messages if isinstance(m, ResultMessage)] == ["success"]


def test_mcp_status_and_setting_the_model_back_to_the_default(tmp_path: Path) -> None:
    script = [anthropic_reply("One."), anthropic_reply("Two."), anthropic_reply("Three.")]

    async def session(opts: ClaudeAgentOptions) -> dict[str, Any]:
        async with ClaudeSDKClient(opts) as client:
            status = await client.get_mcp_status()
            for model in ("claude-other", None, "unchanged"):
                if model != "unchanged":
                    await client.set_model(model)
                await client.query("hello")
                _ = [m async for m in client.receive_response()]
        return dict(status)

    with FakeModelServer(script) as server:
        status = asyncio.run(session(options(tmp_path, server, model="claude-first")))
    assert status == {"mcpServers": []}
    assert [post.body["model"] for post in server.posts] == ["claude-other", "claude-first", "claude-first"]


def test_the_sdks_mcp_servers_are_started_and_their_tools_run_and_those_that_cannot_be_say_why(
    tmp_path: Path,
) -> None:
    """A stdio server (``mcp_servers``) is started with its environment and its tool runs as
    ``mcp__probe__echo``; an http one (the MCP SDK's own server) is reached with its headers and its tool runs
    as ``mcp__remote__add``, and an sse one over the older transport as ``mcp__docs__add``; ``init`` and
    ``get_mcp_status`` list each server with its status, as Claude Code does; one that cannot start is
    ``failed`` with the reason, and the run goes on."""
    log = tmp_path / "probe.jsonl"
    servers: dict[str, Any] = {
        "probe": {
            "command": sys.executable,
            "args": [str(PROBE), str(log)],
            "env": {"PROBE_TOKEN": "tok-s3cret"},
        },
        "gone": {"command": str(tmp_path / "no-such-server")},
    }
    said: list[str] = []
    script = [
        anthropic_reply(
            tool_calls=[
                ("toolu_m", "mcp__probe__echo", {"text": "hi"}),
                ("toolu_r", "mcp__remote__add", {"a": 4, "b": 5}),
                ("toolu_d", "mcp__docs__add", {"a": 1, "b": 1}),
            ]
        ),
        anthropic_reply("It heard me."),
    ]

    async def session(opts: ClaudeAgentOptions) -> tuple[dict[str, Any], list[Any]]:
        async with ClaudeSDKClient(opts) as client:
            status = await client.get_mcp_status()
            await client.query("use the probe")
            return dict(status), [m async for m in client.receive_response()]

    (tmp_path / "remote").mkdir()
    (tmp_path / "docs").mkdir()
    with (
        remote_server(tmp_path / "remote", "--token", "tok-r3mote") as (url, remote_log),
        remote_server(tmp_path / "docs", "--sse", "--token", "h3d-d0cs") as (docs_url, docs_log),
        FakeModelServer(script) as server,
    ):
        servers["remote"] = {"type": "http", "url": url, "headers": {"Authorization": "Bearer tok-r3mote"}}
        servers["docs"] = {"type": "sse", "url": docs_url, "headers": {"Authorization": "Bearer h3d-d0cs"}}
        opts = options(
            tmp_path, server, mcp_servers=servers, permission_mode="bypassPermissions", stderr=said.append
        )
        status, messages = asyncio.run(session(opts))
        answered = tool_results(server.posts[1].body)
    by_name = {s["name"]: s for s in status["mcpServers"]}
    assert [(s["name"], s["status"]) for s in status["mcpServers"]] == [
        ("probe", "connected"),
        ("gone", "failed"),
        ("remote", "connected"),
        ("docs", "connected"),
    ]
    assert by_name["probe"]["tools"] == [{"name": "mcp__probe__echo"}, {"name": "mcp__probe__wait"}]
    assert by_name["remote"]["tools"] == [{"name": "mcp__remote__add"}, {"name": "mcp__remote__wait"}]
    assert by_name["docs"]["tools"] == [{"name": "mcp__docs__add"}, {"name": "mcp__docs__wait"}]
    assert "cannot start" in by_name["gone"]["error"]
    (init,) = [m for m in messages if isinstance(m, SystemMessage) and m.subtype == "init"]
    assert init.data["mcp_servers"] == [
        {"name": "probe", "status": "connected"},
        {"name": "gone", "status": "failed"},
        {"name": "remote", "status": "connected"},
        {"name": "docs", "status": "connected"},
    ]
    assert {"mcp__probe__echo", "mcp__remote__add", "mcp__docs__add"} <= set(init.data["tools"])
    assert [(a["content"], a["is_error"]) for a in answered] == [
        ("probe heard: hi", False),
        ("the sum is 9", False),
        ("the sum is 2", False),
    ]
    assert texts(messages) == ["It heard me."]
    calls = [json.loads(line) for line in log.read_text().splitlines() if '"tools/call"' in line]
    assert calls == [{"method": "tools/call", "token": "tok-s3cret", "arguments": {"text": "hi"}}]
    for server_log in (remote_log, docs_log):
        assert [r["method"] for r in requests(server_log) if r["method"] == "tools/call"] == ["tools/call"]
    assert [line for line in said if "not connected" in line] == [
        f"agentstream exec: warning: MCP server gone not connected: cannot start "
        f"'{tmp_path / 'no-such-server'}': No such file or directory",
    ]
    assert not any("s3cret" in line or "h3d" in line or "r3mote" in line for line in said)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_an_interrupt_stops_a_running_mcp_tool_call_at_once(tmp_path: Path, transport: str) -> None:
    """The call stops at once; an http server is told (``notifications/cancelled``) that its answer is not
    wanted, in the session that goes on."""
    log = tmp_path / "probe.jsonl"
    script = [anthropic_reply(tool_calls=[("toolu_w", f"mcp__{transport}__wait", {})])]

    def called() -> bool:
        if transport == "http":
            return any(r["method"] == "tools/call" for r in requests(log))
        return log.exists() and "tools/call" in log.read_text()

    async def session(opts: ClaudeAgentOptions) -> tuple[list[Any], float]:
        async with ClaudeSDKClient(opts) as client:
            await client.query("wait for it")
            for _ in range(600):  # until the server has the call (30 s at most)
                if called():
                    break
                await asyncio.sleep(0.05)
            began = time.monotonic()
            await client.interrupt()
            messages = [m async for m in client.receive_response()]
            took = time.monotonic() - began
            for _ in range(200):  # the server is told in the background (10 s at most)
                if transport == "stdio" or any(
                    r["method"] == "notifications/cancelled" for r in requests(log)
                ):
                    break
                await asyncio.sleep(0.05)
            return messages, took

    with contextlib.ExitStack() as stack:
        if transport == "http":
            url, log = stack.enter_context(remote_server(tmp_path))
            servers: dict[str, Any] = {"http": {"type": "http", "url": url}}
        else:
            servers = {"stdio": {"command": sys.executable, "args": [str(PROBE), str(log)]}}
        server = stack.enter_context(FakeModelServer(script))
        opts = options(tmp_path, server, mcp_servers=servers, permission_mode="bypassPermissions")
        messages, took = asyncio.run(asyncio.wait_for(session(opts), 60))
        told = transport == "http" and [r["method"] for r in requests(log)]
    final = [m for m in messages if isinstance(m, ResultMessage)]
    assert len(final) == 1 and final[0].subtype == "error_during_execution"
    assert took < 5, f"the interrupt took {took:.1f}s"
    if told:
        assert told.index("notifications/cancelled") > told.index("tools/call")


def test_an_allow_that_adds_a_rule_is_not_asked_again(tmp_path: Path) -> None:
    """``PermissionResultAllow(updated_permissions=[addRules …])``, the SDK's "always allow": the next call of that
    tool runs without a ``can_use_tool``."""
    asked: list[str] = []

    async def can_use_tool(name: str, arguments: dict[str, Any], context: Any) -> PermissionResultAllow:
        asked.append(arguments["command"])
        rule = PermissionRuleValue(tool_name="Bash")
        always = PermissionUpdate(type="addRules", rules=[rule], behavior="allow", destination="session")
        return PermissionResultAllow(updated_permissions=[always])

    script = [
        anthropic_reply(tool_calls=[("toolu_1", "shell", {"command": "echo one"})]),
        anthropic_reply(tool_calls=[("toolu_2", "shell", {"command": "echo two"})]),
        anthropic_reply("Both ran."),
    ]
    with FakeModelServer(script) as server:
        opts = options(tmp_path, server, permission_mode="default", can_use_tool=can_use_tool)
        messages = asyncio.run(client_turn("run both", opts))
    assert asked == ["echo one"]
    assert [r["content"].split()[0] for r in tool_results(server.posts[2].body)] == ["one", "two"]
    assert [m.subtype for m in messages if isinstance(m, ResultMessage)] == ["success"]


def test_query_gets_the_text_and_one_result_and_a_fork_of_its_session_leaves_it_as_it_was(
    tmp_path: Path,
) -> None:
    """``query()`` gets the model's text and one result; resumed with ``fork_session``, its session goes on under a
    new id, and resumed without, it goes on under its own id with none of the fork's turn."""
    script = [
        anthropic_reply("Hello from the fake model."),
        anthropic_reply("Answer in the fork."),
        anthropic_reply("Answer in the original."),
    ]

    def session_of(messages: list[Any]) -> str:
        return next(m.session_id for m in messages if isinstance(m, ResultMessage))

    with FakeModelServer(script) as server:
        messages = asyncio.run(collect("say hello", options(tmp_path, server)))
        assert texts(messages) == ["Hello from the fake model."]
        results = [m for m in messages if isinstance(m, ResultMessage)]
        assert len(results) == 1 and results[0].subtype == "success" and not results[0].is_error
        assert results[0].result == "Hello from the fake model."
        init = next(m for m in messages if isinstance(m, SystemMessage) and m.subtype == "init")
        assert init.data["claude_code_version"] == "2.1.0"
        assert not any(isinstance(m, StreamEvent) for m in messages), (
            "partials only with include_partial_messages"
        )
        assert server.posts[0].body["messages"][0]["content"][0]["text"] == "say hello"

        first = session_of(messages)
        forked = asyncio.run(
            collect("question in the fork", options(tmp_path, server, resume=first, fork_session=True))
        )
        original = asyncio.run(collect("question in the original", options(tmp_path, server, resume=first)))
    assert session_of(forked) != first and session_of(original) == first, "the fork's and the original's ids"
    in_fork, in_original = (json.dumps(post.body["messages"]) for post in server.posts[1:])
    assert "say hello" in in_fork and "say hello" in in_original, "a resumed session lacks the first turn"
    assert "question in the fork" not in in_original, "the fork's turn went into the original session"


def test_max_budget_usd_stops_the_run_once_its_calls_cost_that_much(tmp_path: Path) -> None:
    """100,000 prompt tokens of Claude Sonnet cost $0.30: a $0.10 budget stops the agent after that call (its tool
    call still answered), as Claude Code does, with ``error_max_budget_usd``."""
    script = [
        anthropic_reply(tool_calls=[("toolu_1", "shell", {"command": "echo one"})], usage=(100_000, 1_000)),
        anthropic_reply("never asked for"),
    ]
    with FakeModelServer(script) as server:
        opts = options(tmp_path, server, permission_mode="bypassPermissions", max_budget_usd=0.10)
        messages = asyncio.run(client_turn("spend", opts))
    result = next(m for m in messages if isinstance(m, ResultMessage))
    assert (result.subtype, result.is_error) == ("error_max_budget_usd", True)
    assert result.total_cost_usd is not None and result.total_cost_usd >= 0.10
    assert len(server.posts) == 1, "the agent went on past its budget"


def test_a_hook_that_fails_gives_no_decision_and_the_call_goes_on(tmp_path: Path) -> None:
    """A hook callback that raises is, as in Claude Code by default, no opinion: the permission mode decides."""

    async def broken(data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
        raise RuntimeError("the hook's own bug")

    script = [
        anthropic_reply(tool_calls=[("toolu_1", "shell", {"command": "echo ran > ran.txt"})]),
        anthropic_reply("Done."),
    ]
    said: list[str] = []
    with FakeModelServer(script) as server:
        opts = options(
            tmp_path,
            server,
            permission_mode="bypassPermissions",
            hooks={"PreToolUse": [HookMatcher(matcher=None, hooks=[broken])]},
            stderr=said.append,
        )
        messages = asyncio.run(client_turn("go", opts))
    assert (tmp_path / "work" / "ran.txt").read_text() == "ran\n"
    assert any("a hook gave no decision about shell" in line for line in said), said
    assert [m.subtype for m in messages if isinstance(m, ResultMessage)] == ["success"]


def assert_cost_is_the_sessions_and_usage_the_turns(results: list[ResultMessage]) -> None:
    """Claude Code's ``total_cost_usd`` and ``modelUsage`` are the session's running totals (``modelUsage`` per
    model, with its cost); its ``usage``, the turn's own calls."""
    assert len(results) == 2 and results[0].total_cost_usd is not None and results[0].total_cost_usd > 0
    assert results[1].total_cost_usd == pytest.approx(2 * results[0].total_cost_usd)
    assert [r.usage["input_tokens"] if r.usage else None for r in results] == [100_000, 100_000]
    for turns, result in enumerate(results, start=1):
        assert result.model_usage is not None and list(result.model_usage) == [ANTHROPIC_MODEL]
        figures = result.model_usage[ANTHROPIC_MODEL]
        assert (figures["inputTokens"], figures["outputTokens"]) == (turns * 100_000, turns * 1_000)
        assert (figures["cacheReadInputTokens"], figures["cacheCreationInputTokens"]) == (0, 0)
        assert figures["costUSD"] == pytest.approx(result.total_cost_usd)
        assert "contextWindow" not in figures, "what the events do not say is left out, not made up"


def test_the_sdk_cannot_switch_a_session_to_bypass_permissions_unless_it_was_allowed(tmp_path: Path) -> None:
    """``set_permission_mode("bypassPermissions")`` is refused, as Claude Code refuses it, in a session neither
    started in that mode nor given ``--allow-dangerously-skip-permissions`` (the SDK's ``extra_args``)."""

    async def switch(opts: ClaudeAgentOptions) -> str | None:
        async with ClaudeSDKClient(opts) as client:
            try:
                await client.set_permission_mode("bypassPermissions")
            except Exception as exc:  # the SDK raises the control error's message
                return str(exc)
        return None

    with FakeModelServer([]) as server:
        refused = asyncio.run(switch(options(tmp_path, server, permission_mode="default")))
        allowed_opts = options(
            tmp_path,
            server,
            permission_mode="default",
            extra_args={"allow-dangerously-skip-permissions": None},
        )
        allowed = asyncio.run(switch(allowed_opts))
    assert refused is not None and "cannot switch to bypassPermissions" in refused, refused
    assert allowed is None
