"""``exec``'s agent and remote MCP servers, against servers made with the official MCP SDK.

The server (``_mcp_http_server.py``) is the Python SDK's own app on a loopback port: streamable HTTP answering
with event streams or, with ``--json``, plain JSON, or (``--sse``) the older SSE transport; the model is a
loopback fake speaking OpenAI's wire format.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from _agent_fakes import FakeModelServer, LiveExec, assert_valid_stream, openai_env, openai_reply, run_exec
from _bus_fixtures import free_port
from _mcp_support import remote_server, requests

TOKEN = "tok-remote-0123456789"


def config(url: str, token: str = TOKEN, transport: str = "http") -> str:
    server = {"type": transport, "url": url, "headers": {"Authorization": f"Bearer {token}"}}
    return json.dumps({"mcpServers": {"remote": server}})


@pytest.mark.parametrize("answers", ["event-stream", "json"])
def test_a_remote_servers_tool_runs_in_its_session_which_ends_with_the_run(
    tmp_path: Path, answers: str
) -> None:
    script = [openai_reply("", [("call_add", "mcp__remote__add", {"a": 2, "b": 3})]), openai_reply("Five.")]
    options = ["--token", TOKEN, *(["--json"] if answers == "json" else [])]
    with remote_server(tmp_path, *options) as (url, log), FakeModelServer(script) as model:
        run = run_exec(
            ["add them", "--mcp-config", config(url), "--permission-mode", "full", "--no-publish"],
            openai_env(tmp_path / "home", model),
            cwd=tmp_path,
        )
        tools_offered = [tool["function"]["name"] for tool in model.posts[0].body["tools"]]
    assert run.returncode == 0, run.stderr
    assert_valid_stream(run.lines, 0)
    assert {"mcp__remote__add", "mcp__remote__wait"} <= set(tools_offered)
    (result,) = run.of_type("tool_result")
    assert (result.call_id, result.status, result.output) == ("call_add", "success", "the sum is 5")
    got = requests(log)
    assert [(r["http"], r["method"]) for r in got] == [
        ("POST", "initialize"),
        ("POST", "notifications/initialized"),
        ("POST", "tools/list"),
        ("POST", "tools/call"),
        ("DELETE", None),  # the session ends with the run
    ]
    session = got[-1]["session"]
    assert got[0]["session"] is None and session and all(r["session"] == session for r in got[1:])
    assert got[0]["version"] is None and {r["version"] for r in got[1:]} == {"2025-06-18"}
    assert TOKEN not in run.stdout.decode() + run.stderr  # the header's token stays between agent and server


def test_a_servers_tool_runs_over_the_older_sse_transport_and_its_stream_ends_with_the_run(
    tmp_path: Path,
) -> None:
    """The stream a GET opens names where to POST (with the session in its query); answers come on the stream."""
    script = [openai_reply("", [("call_add", "mcp__remote__add", {"a": 20, "b": 22})]), openai_reply("42.")]
    with remote_server(tmp_path, "--sse", "--token", TOKEN) as (url, log), FakeModelServer(script) as model:
        run = run_exec(
            [
                "add them",
                "--mcp-config",
                config(url, transport="sse"),
                "--permission-mode",
                "full",
                "--no-publish",
            ],
            openai_env(tmp_path / "home", model),
            cwd=tmp_path,
        )
    assert run.returncode == 0, run.stderr
    assert_valid_stream(run.lines, 0)
    (result,) = run.of_type("tool_result")
    assert (result.status, result.output) == ("success", "the sum is 42")
    got = requests(log)
    assert (got[0]["http"], got[0]["path"]) == ("GET", "/sse")
    assert [(r["http"], r["path"], r["method"]) for r in got[1:]] == [
        ("POST", "/messages/", method)
        for method in ("initialize", "notifications/initialized", "tools/list", "tools/call")
    ]
    assert TOKEN not in run.stdout.decode() + run.stderr


def test_a_remote_server_that_refuses_the_token_is_named_with_why_and_the_run_goes_on(tmp_path: Path) -> None:
    with (
        remote_server(tmp_path, "--token", TOKEN) as (url, _),
        FakeModelServer([openai_reply("Fine.")]) as model,
    ):
        run = run_exec(
            ["hi", "--mcp-config", config(url, token="tok-wrong-9876"), "--no-publish"],
            openai_env(tmp_path / "home", model),
            cwd=tmp_path,
        )
    assert run.returncode == 0 and run.result.result == "Fine."
    assert (
        "agentstream exec: warning: MCP server remote not connected: HTTP 401 Unauthorized: a bearer token is "
        "needed, not ***" in run.stderr.splitlines()
    )
    assert "tok-wrong-9876" not in run.stderr + run.stdout.decode()


def test_a_remote_server_nobody_answers_at_is_named_with_why(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    with FakeModelServer([openai_reply("Fine.")]) as model:
        run = run_exec(
            ["hi", "--mcp-config", config(url), "--no-publish"],
            openai_env(tmp_path / "home", model),
            cwd=tmp_path,
        )
    assert run.returncode == 0
    assert (
        "agentstream exec: warning: MCP server remote not connected: cannot reach it: Connection refused"
        in (run.stderr.splitlines())
    )


def test_a_signal_stops_a_remote_tool_call_at_once_and_ends_its_session(tmp_path: Path) -> None:
    """The server learns the run is gone the way MCP says a client leaves: its session is deleted."""
    script = [openai_reply("", [("call_wait", "mcp__remote__wait", {})])]
    with remote_server(tmp_path, "--token", TOKEN) as (url, log), FakeModelServer(script) as model:
        live = LiveExec(
            ["wait", "--mcp-config", config(url), "--permission-mode", "full", "--no-publish"],
            openai_env(tmp_path / "home", model),
            cwd=tmp_path,
        )
        live.wait_for(lambda lines: any(b'"tool_call"' in line for line in lines))
        deadline = time.monotonic() + 20
        while not any(r["method"] == "tools/call" for r in requests(log)):
            assert time.monotonic() < deadline, "the call never reached the server"
            time.sleep(0.05)
        began = time.monotonic()
        live.proc.send_signal(signal.SIGINT)
        run = live.finish()
        took = time.monotonic() - began
    assert took < 5, f"the interrupt took {took:.1f} s"
    assert run.returncode == 130 and run.result.error.code == "INTERRUPTED"
    (result,) = run.of_type("tool_result")
    assert result.status == "cancelled"
    assert_valid_stream(run.lines, run.returncode)
    assert [r["http"] for r in requests(log)][-1] == "DELETE"


def test_a_redirect_to_another_path_of_the_same_server_is_followed(tmp_path: Path) -> None:
    """``/mcp/`` redirected to ``/mcp`` (307), as the SDK's app does: followed once, then used from there on."""
    script = [openai_reply("", [("call_add", "mcp__remote__add", {"a": 1, "b": 1})]), openai_reply("Two.")]
    with remote_server(tmp_path) as (url, log), FakeModelServer(script) as model:
        run = run_exec(
            ["add", "--mcp-config", config(url + "/"), "--permission-mode", "full", "--no-publish"],
            openai_env(tmp_path / "home", model),
            cwd=tmp_path,
        )
    assert run.returncode == 0, run.stderr
    assert [result.output for result in run.of_type("tool_result")] == ["the sum is 2"]
    paths = [r["path"] for r in requests(log)]
    assert paths[0] == "/mcp/" and set(paths[1:]) == {"/mcp"}
