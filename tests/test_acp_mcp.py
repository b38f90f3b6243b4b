"""MCP servers an ACP client gives in ``session/new``: the real Claude Code and Codex CLIs start them and use
their tools; an agent that cannot connect them says so; the command line carries no value a client gave."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from _acp_support import (
    acp_client,
    acp_client_run,
    agentstream,
    of_kind,
    raw_acp,
    rpc,
    text,
    tool,
    updates,
    write_cassette,
)
from _agent_fakes import FakeModelServer, anthropic_reply, exec_env, responses_reply
from _mcp_support import remote_server, requests
from agentstream.acp.agent import McpServer
from agentstream.acp.cli_agent import _claude_mcp, _codex_mcp
from test_real_claude_code import claude_code, claude_env
from test_real_codex_cli import MODEL, _codex_exec

PROBE = Path(__file__).parent / "_mcp_probe_server.py"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path.resolve()


def probe(log: Path, token: str) -> dict[str, Any]:
    """The probe server as ACP's ``mcpServers`` lists a stdio server."""
    return {
        "name": "probe",
        "command": sys.executable,
        "args": [str(PROBE), str(log)],
        "env": [{"name": "PROBE_TOKEN", "value": token}],
    }


def methods(log: Path) -> list[tuple[str, str | None]]:
    return [(entry["method"], entry["token"]) for entry in map(json.loads, log.read_text().splitlines())]


@pytest.mark.slow
def test_claude_code_starts_the_sessions_mcp_server_and_its_tool_runs_once_allowed(
    tmp_path: Path, work: Path
) -> None:
    log = tmp_path / "probe.jsonl"
    script = [
        anthropic_reply(tool_calls=[("toolu_mcp1", "mcp__probe__echo", {"text": "hi"})]),
        anthropic_reply("It said it heard me."),
    ]
    with FakeModelServer(script) as server:
        env = claude_env(tmp_path / "home", server)
        agent = agentstream("acp", "--cli", "claude", "--cli-path", claude_code(), "--no-publish")
        plan = {
            "cwd": str(work),
            "mcpServers": [probe(log, "tok-claude")],
            "prompts": ["use the probe"],
            "permission": "allow",
        }
        got = acp_client(plan, agent, env, cwd=work, timeout=90)
        answer = server.posts[-1].body["messages"][-1]
    (init,) = of_kind(got, "initialize")
    assert init["result"]["agentCapabilities"]["mcpCapabilities"] == {"http": True, "sse": True}
    (asked,) = of_kind(got, "permission")
    assert asked["params"]["toolCall"]["toolCallId"] == "toolu_mcp1"
    assert of_kind(got, "stop") == [{"kind": "stop", "stopReason": "end_turn"}]
    assert updates(got, "tool_call_update")[-1]["status"] == "completed"
    assert "probe heard: hi" in json.dumps(answer)  # what the server answered went back to the model
    assert ("tools/call", "tok-claude") in methods(log)  # started with the client's environment


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["stdio", "http"])
def test_codex_starts_the_sessions_mcp_server_with_its_environment(
    tmp_path: Path, work: Path, kind: str
) -> None:
    """A stdio server with its environment, or an http one (the MCP SDK's own) with the headers the client
    gave (in Codex's environment, not on its command line)."""
    log = tmp_path / "probe.jsonl"
    with contextlib.ExitStack() as stack:
        if kind == "stdio":
            server = probe(log, "tok-codex")
        else:
            url, log = stack.enter_context(remote_server(tmp_path, "--token", "tok-codex"))
            bearer = [{"name": "Authorization", "value": "Bearer tok-codex"}]
            server = {"type": "http", "name": "remote", "url": url, "headers": bearer}
        model = stack.enter_context(FakeModelServer([responses_reply("Nothing to do.")]))
        command, env = _codex_exec(model, tmp_path / "home", work, MODEL, [])
        options = command[command.index("--json") + 1 :]  # the fake provider's settings, as -- ARGS
        agent = agentstream("acp", "--cli", "codex", "--cli-path", command[0], "--no-publish", "--", *options)
        plan = {"cwd": str(work), "mcpServers": [server], "prompts": ["hello"]}
        got = acp_client(plan, agent, env, cwd=work, timeout=90)
        reached = methods(log) if kind == "stdio" else [(r["method"], "tok-codex") for r in requests(log)]
    (init,) = of_kind(got, "initialize")
    assert init["result"]["agentCapabilities"]["mcpCapabilities"] == {"http": True, "sse": False}
    assert of_kind(got, "stop") == [{"kind": "stop", "stopReason": "end_turn"}]
    assert reached[:1] == [("initialize", "tok-codex")]
    assert ("tools/list", "tok-codex") in reached  # past the token check: the header reached the server


def test_claude_codes_command_line_holds_no_value_the_client_gave() -> None:
    """Any local user can read a command line: every value goes through Claude Code's environment."""
    servers = [
        McpServer("files", "stdio", command="/opt/mcp", args=("--token", "s3cret"), env=(("KEY", "k3y"),)),
        McpServer(
            "web", "http", url="https://mcp.example/?auth=u4l", headers=(("Authorization", "Bearer h3d"),)
        ),
    ]
    options, env = _claude_mcp(servers)
    assert options[0] == "--mcp-config" and len(options) == 2
    for value in ("/opt/mcp", "s3cret", "k3y", "u4l", "h3d"):
        assert value not in options[1]
    config = json.loads(options[1])["mcpServers"]
    expand = lambda ref: env[ref[2:-1]]  # noqa: E731  # what Claude Code does with ${NAME}
    assert expand(config["files"]["command"]) == "/opt/mcp"
    assert [expand(arg) for arg in config["files"]["args"]] == ["--token", "s3cret"]
    assert {name: expand(ref) for name, ref in config["files"]["env"].items()} == {"KEY": "k3y"}
    assert config["web"]["type"] == "http" and expand(config["web"]["url"]).endswith("u4l")
    assert expand(config["web"]["headers"]["Authorization"]) == "Bearer h3d"


def test_codex_gets_environments_through_its_own_and_refuses_names_its_overrides_cannot_hold(
    capfd: pytest.CaptureFixture[str],
) -> None:
    servers = [
        McpServer("one", "stdio", command="a", env=(("TOKEN", "first"),)),
        McpServer("two", "stdio", command="b", args=("x",), env=(("TOKEN", "second"), ("OTHER", "o"))),
        McpServer("has.dot", "stdio", command="c"),
        McpServer(
            "web", "http", url="https://mcp.example/", headers=(("Authorization", "Bearer h3d"), ("X-A", "b"))
        ),
    ]
    options, env = _codex_mcp(servers)
    assert env == {
        "TOKEN": "first",
        "OTHER": "o",
        "AGENTSTREAM_MCP_HEADER_2": "Bearer h3d",
        "AGENTSTREAM_MCP_HEADER_3": "b",
    }
    assert options == [
        *("-c", 'mcp_servers.one.command="a"', "-c", "mcp_servers.one.args=[]"),
        *("-c", 'mcp_servers.one.env_vars=["TOKEN"]'),
        *("-c", 'mcp_servers.two.command="b"', "-c", 'mcp_servers.two.args=["x"]'),
        *("-c", 'mcp_servers.two.env_vars=["OTHER"]', "-c", 'mcp_servers.two.env={"TOKEN" = "second"}'),
        *("-c", 'mcp_servers.web.url="https://mcp.example/"'),
        *(
            "-c",
            'mcp_servers.web.env_http_headers={"Authorization" = "AGENTSTREAM_MCP_HEADER_2", "X-A" = '
            '"AGENTSTREAM_MCP_HEADER_3"}',
        ),
    ]
    assert not any("h3d" in option for option in options)
    assert "'has.dot'" in capfd.readouterr().err


@pytest.mark.parametrize("kind", ["stdio", "http", "sse"])
def test_the_own_agent_runs_a_servers_tool_once_allowed(tmp_path: Path, work: Path, kind: str) -> None:
    """A stdio server it starts, or an http or sse one (the MCP SDK's own) it reaches with the headers the
    client gave."""
    log = tmp_path / "probe.jsonl"
    name, answer = (
        ("mcp__probe__echo", "probe heard: hi") if kind == "stdio" else ("mcp__remote__add", "the sum is 3")
    )
    arguments = {"text": "hi"} if kind == "stdio" else {"a": 1, "b": 2}
    calls = [[tool("call_m", name, **arguments)], [text("It heard.")]]
    cassette = write_cassette(tmp_path / "c.ndjson", calls)
    with contextlib.ExitStack() as stack:
        if kind == "stdio":
            server = probe(log, "tok-own")
        else:
            options = ["--token", "tok-own", *(["--sse"] if kind == "sse" else [])]
            url, log = stack.enter_context(remote_server(tmp_path, *options))
            bearer = [{"name": "Authorization", "value": "Bearer tok-own"}]
            server = {"type": kind, "name": "remote", "url": url, "headers": bearer}
        plan = {
            "cwd": str(work),
            "mcpServers": [server],
            "prompts": ["use the server"],
            "permission": "allow",
        }
        agent = agentstream("acp", "--cassette", str(cassette), "--no-publish")
        env = exec_env(tmp_path / "home")
        got, stderr = acp_client_run(plan, agent, env, cwd=work, timeout=60)
        reached = methods(log) if kind == "stdio" else [(r["method"], None) for r in requests(log)]
    (init,) = of_kind(got, "initialize")
    assert init["result"]["agentCapabilities"]["mcpCapabilities"] == {"http": True, "sse": True}
    (asked,) = of_kind(got, "permission")
    assert asked["params"]["toolCall"]["toolCallId"] == "call_m"
    done = updates(got, "tool_call_update")[-1]
    assert done["status"] == "completed" and done["content"][0]["content"]["text"] == answer
    assert ("tools/call", "tok-own" if kind == "stdio" else None) in reached
    assert "tok-own" not in stderr


@pytest.mark.parametrize(
    ("server", "why"),
    [
        ("probe", "mcpServers[0]: an MCP server must be an object"),
        ({"command": "x"}, "mcpServers[0]: name must be a non-empty string"),
        ({"name": "p"}, "mcpServers[0]: command must be a non-empty string"),
        ({"name": "p", "command": "x", "args": "-v"}, "mcpServers[0]: args must be a list of strings"),
        (
            {"name": "p", "command": "x", "env": {"A": "b"}},
            "mcpServers[0]: env must be a list of {name, value}",
        ),
        ({"name": "p", "type": "ws", "url": "ws://h"}, "mcpServers[0]: type must be http or sse"),
        (
            {"name": "p", "type": "http", "url": "ftp://h"},
            "mcpServers[0]: url must be an http:// or https://",
        ),
    ],
    ids=["not-object", "no-name", "no-command", "args-text", "env-object", "unknown-type", "bad-url"],
)
def test_an_mcp_server_that_cannot_be_started_as_described_is_invalid_params(
    tmp_path: Path, server: Any, why: str
) -> None:
    answers, _ = raw_acp(
        [
            rpc(1, "initialize", {"protocolVersion": 1}),
            rpc(2, "session/new", {"cwd": str(tmp_path), "mcpServers": [server]}),
        ],
        exec_env(tmp_path / "home"),
        tmp_path,
    )
    error = answers[1]["error"]
    assert error["code"] == -32602 and error["message"].startswith(why)
    assert error["data"] == {"param": "mcpServers[0]"}
