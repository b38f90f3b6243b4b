"""``wrap --two-way``: the real Claude Agent SDK drives ``agentstream-claude`` through the wrap.

The SDK is given a small shim script as its CLI; the shim runs
``agentstream wrap --two-way --from claude --to claude -- agentstream-claude``
with the SDK's flags, so every byte between the SDK and the agent crosses the
wrap: control requests and responses pass through verbatim, each turn's events
are re-emitted by the wrap. The agent talks to a loopback fake Anthropic server.
"""

from __future__ import annotations

import asyncio
import shlex
import stat
from pathlib import Path
from typing import Any

from claude_agent_sdk import (  # the test extra: pip install -e '.[test]'
    ClaudeAgentOptions,
    ClaudeSDKClient,
    PermissionResultDeny,
    ResultMessage,
    SystemMessage,
    query,
)

from _agent_fakes import FakeModelServer, anthropic_reply
from test_claude_sdk_driver import cli_path, options, texts, tool_results


def wrapped_cli(tmp_path: Path) -> str:
    """A cli_path for the SDK: the wrap in two-way mode around agentstream-claude, given the SDK's flags."""
    agent = cli_path()
    agentstream = str(Path(agent).with_name("agentstream"))
    shim = tmp_path / "wrapped-claude"
    wrap = [agentstream, "wrap", "--two-way", "--from", "claude", "--to", "claude", "--no-publish"]
    shim.write_text(f'#!/bin/sh\nexec {shlex.join(wrap)} -- {shlex.quote(agent)} "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return str(shim)


def test_query_through_the_wrap_gets_the_text_and_one_result(tmp_path: Path) -> None:
    with FakeModelServer([anthropic_reply("Hello through the wrap.")]) as server:
        opts = options(tmp_path, server, cli=wrapped_cli(tmp_path))
        messages = asyncio.run(_collect("say hello", opts))
    assert texts(messages) == ["Hello through the wrap."]
    results = [m for m in messages if isinstance(m, ResultMessage)]
    assert len(results) == 1 and results[0].subtype == "success" and not results[0].is_error
    assert results[0].result == "Hello through the wrap."
    statuses = [m.data for m in messages if isinstance(m, SystemMessage) and m.subtype == "status"]
    assert [s["status"] for s in statuses] == ["child_session"], "the child's own session is named"
    assert server.posts[0].body["messages"][0]["content"][0]["text"] == "say hello"


def test_can_use_tool_round_trip_through_the_wrap_honours_a_denial(tmp_path: Path) -> None:
    asked: list[tuple[str, dict[str, Any], str | None]] = []

    async def can_use_tool(name: str, arguments: dict[str, Any], context: Any) -> PermissionResultDeny:
        asked.append((name, arguments, context.tool_use_id))
        return PermissionResultDeny(message="not through this wrap")

    script = [
        anthropic_reply(tool_calls=[("toolu_09", "shell", {"command": "touch forbidden.txt"})]),
        anthropic_reply("Fine, I left it."),
    ]

    async def session(opts: ClaudeAgentOptions) -> list[Any]:
        async with ClaudeSDKClient(opts) as client:
            await client.query("please run it")
            return [m async for m in client.receive_response()]

    with FakeModelServer(script) as server:
        opts = options(
            tmp_path,
            server,
            cli=wrapped_cli(tmp_path),
            permission_mode="default",
            can_use_tool=can_use_tool,
        )
        messages = asyncio.run(session(opts))
    assert asked == [("shell", {"command": "touch forbidden.txt"}, "toolu_09")]
    assert not (tmp_path / "work" / "forbidden.txt").exists()
    denied = tool_results(server.posts[1].body)[0]
    assert denied["is_error"] and "not through this wrap" in denied["content"]
    final = [m for m in messages if isinstance(m, ResultMessage)]
    assert len(final) == 1 and final[0].result == "Fine, I left it."


def test_two_turns_on_one_client_through_the_wrap(tmp_path: Path) -> None:
    script = [anthropic_reply("First answer."), anthropic_reply("Second answer.")]

    async def session(opts: ClaudeAgentOptions) -> list[list[Any]]:
        turns = []
        async with ClaudeSDKClient(opts) as client:
            for prompt in ("first question", "second question"):
                await client.query(prompt)
                turns.append([m async for m in client.receive_response()])
        return turns

    with FakeModelServer(script) as server:
        turns = asyncio.run(session(options(tmp_path, server, cli=wrapped_cli(tmp_path))))
    assert [texts(turn) for turn in turns] == [["First answer."], ["Second answer."]]
    assert [sum(isinstance(m, ResultMessage) for m in turn) for turn in turns] == [1, 1]
    sessions = [next(m.session_id for m in turn if isinstance(m, ResultMessage)) for turn in turns]
    assert sessions[0] != sessions[1], "each turn is a stream of its own"


async def _collect(prompt: str, opts: ClaudeAgentOptions) -> list[Any]:
    return [message async for message in query(prompt=prompt, options=opts)]
