"""``agentstream acp`` driven by the official ACP TypeScript SDK's client (tests/peers/acp_client.mjs).

The model side is a replay cassette (or, for Claude, the loopback fake
Anthropic server behind the real ``agentstream-claude``); the tools run for real.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from _acp_support import (
    FAKE_CLI,
    acp_client,
    acp_client_run,
    agent_text,
    agentstream,
    of_kind,
    raw_acp,
    rpc,
    text,
    tool,
    updates,
    write_cassette,
)
from _agent_fakes import FakeModelServer, anthropic_env, anthropic_reply, exec_env


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path.resolve()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return exec_env(tmp_path / "home", AGENTSTREAM_BUS=f"sqlite:///{tmp_path / 'bus.sqlite3'}")


def own_agent(cassette: Path, *more: str) -> list[str]:
    return agentstream("acp", "--cassette", str(cassette), *more)


def test_text_turn_and_honest_capabilities(tmp_path: Path, work: Path, env: dict[str, str]) -> None:
    cassette = write_cassette(tmp_path / "c.ndjson", [[text("Hello "), text("from agentstream.")]])
    got = acp_client({"cwd": str(work), "prompts": ["hi"]}, own_agent(cassette), env, cwd=work)
    init = of_kind(got, "initialize")[0]["result"]
    assert init["protocolVersion"] == 1
    assert init["agentCapabilities"]["loadSession"] is True
    assert init["agentCapabilities"]["promptCapabilities"] == {
        "image": False,
        "audio": False,
        "embeddedContext": True,
    }
    assert agent_text(got) == "Hello from agentstream."
    assert of_kind(got, "stop") == [{"kind": "stop", "stopReason": "end_turn"}]
    assert of_kind(got, "permission") == []


def test_an_allowed_shell_call_runs_and_reports(tmp_path: Path, work: Path, env: dict[str, str]) -> None:
    calls = [
        [text("Running it."), tool("call_1", "shell", command="echo ran > ran.txt && echo done")],
        [text("It ran.")],
    ]
    cassette = write_cassette(tmp_path / "c.ndjson", calls)
    got = acp_client(
        {"cwd": str(work), "prompts": ["run"], "permission": "allow"}, own_agent(cassette), env, cwd=work
    )
    (asked,) = of_kind(got, "permission")
    assert asked["params"]["toolCall"]["toolCallId"] == "call_1"
    assert {o["kind"] for o in asked["params"]["options"]} == {"allow_once", "allow_always", "reject_once"}
    (announced,) = updates(got, "tool_call")
    assert announced["kind"] == "execute" and announced["status"] == "pending"
    assert announced["rawInput"] == {"command": "echo ran > ran.txt && echo done"}
    final = updates(got, "tool_call_update")[-1]
    assert final["status"] == "completed" and final["content"][0]["content"]["text"] == "done\n"
    assert (work / "ran.txt").read_text() == "ran\n"
    order = [item["kind"] if item["kind"] != "update" else item["update"]["sessionUpdate"] for item in got]
    assert order.index("tool_call") < order.index("permission") < order.index("tool_call_update")
    # allowed, it runs: in_progress at once, before any output; completed last
    running, *_, done = updates(got, "tool_call_update")
    assert running == {"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": "in_progress"}
    assert done["status"] == "completed"
    assert of_kind(got, "stop")[0]["stopReason"] == "end_turn"


def test_a_rejected_edit_does_not_run_and_shows_its_diff(
    tmp_path: Path, work: Path, env: dict[str, str]
) -> None:
    (work / "app.py").write_text("x = 1\n")
    calls = [
        [tool("call_e", "edit_file", path="app.py", old_string="x = 1", new_string="x = 2")],
        [text("Left it.")],
    ]
    cassette = write_cassette(tmp_path / "c.ndjson", calls)
    got = acp_client(
        {"cwd": str(work), "prompts": ["edit"], "permission": "reject"}, own_agent(cassette), env, cwd=work
    )
    (announced,) = updates(got, "tool_call")
    diff = {"type": "diff", "path": str(work / "app.py"), "oldText": "x = 1", "newText": "x = 2"}
    assert announced["kind"] == "edit" and announced["content"] == [diff]
    assert announced["locations"] == [{"path": str(work / "app.py")}]
    final = updates(got, "tool_call_update")[-1]
    assert final["status"] == "failed" and "permission denied" in final["content"][-1]["content"]["text"]
    assert (work / "app.py").read_text() == "x = 1\n"
    assert agent_text(got) == "Left it."


def in_full_mode(
    tmp_path: Path, work: Path, env: dict[str, str], calls: list[list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """One prompt to our agent replaying ``calls``, with every tool allowed."""
    cassette = write_cassette(tmp_path / "c.ndjson", calls)
    plan = {"cwd": str(work), "prompts": ["go"]}
    return acp_client(plan, own_agent(cassette, "--permission-mode", "full"), env, cwd=work)


def test_full_mode_asks_nothing(tmp_path: Path, work: Path, env: dict[str, str]) -> None:
    calls = [[tool("call_w", "write_file", path="new.txt", content="hello\n")], [text("Written.")]]
    got = in_full_mode(tmp_path, work, env, calls)
    assert of_kind(got, "permission") == []
    assert (work / "new.txt").read_text() == "hello\n"
    assert updates(got, "tool_call")[0]["content"] == [
        {"type": "diff", "path": str(work / "new.txt"), "oldText": None, "newText": "hello\n"}
    ]


def test_a_tool_command_starts_with_no_signal_blocked(
    tmp_path: Path, work: Path, env: dict[str, str]
) -> None:
    """A command run for a request must stop on the SIGTERM meant for it: no blocked mask is inherited."""
    calls = [[tool("call_1", "shell", command="grep SigBlk /proc/self/status")], [text("Seen.")]]
    got = in_full_mode(tmp_path, work, env, calls)
    output = updates(got, "tool_call_update")[-1]["content"][0]["content"]["text"]
    assert output.split() == ["SigBlk:", "0" * 16]


@pytest.mark.parametrize("cancel_by", ["notification", "request"])
def test_cancel_mid_tool_ends_the_turn_cancelled(
    tmp_path: Path, work: Path, env: dict[str, str], cancel_by: str
) -> None:
    """By ``session/cancel``, or by the SDK's cancellation of the prompt request itself (``$/cancel_request``)."""
    calls = [
        [tool("call_s", "shell", command="echo started; sleep 30; echo never > never.txt")],
        [text("unused")],
    ]
    cassette = write_cassette(tmp_path / "c.ndjson", calls)
    plan = {"cwd": str(work), "prompts": ["wait"], "cancelOn": "tool_call", "cancelBy": cancel_by}
    got = acp_client(plan, own_agent(cassette, "--permission-mode", "full"), env, cwd=work, timeout=20)
    assert of_kind(got, "cancel_sent")
    assert of_kind(got, "stop") == [{"kind": "stop", "stopReason": "cancelled"}]
    assert updates(got, "tool_call_update")[-1]["status"] == "failed"
    assert not (work / "never.txt").exists()


def test_a_cancel_sent_right_after_the_prompt_cancels_it_before_any_tool_runs(
    tmp_path: Path, work: Path, env: dict[str, str]
) -> None:
    """The cancel can be read before the prompt's turn begins: it must not be forgotten when the turn starts."""
    calls = [[tool("call_s", "shell", command="echo ran > ran.txt")], [text("unused")]]
    cassette = write_cassette(tmp_path / "c.ndjson", calls)
    plan = {"cwd": str(work), "prompts": ["go"], "cancelOn": "sent"}
    got = acp_client(plan, own_agent(cassette, "--permission-mode", "full"), env, cwd=work)
    assert of_kind(got, "stop") == [{"kind": "stop", "stopReason": "cancelled"}]
    assert not (work / "ran.txt").exists()


def test_cancel_while_asking_permission(tmp_path: Path, work: Path, env: dict[str, str]) -> None:
    calls = [[tool("call_p", "shell", command="touch nope.txt")], [text("unused")]]
    cassette = write_cassette(tmp_path / "c.ndjson", calls)
    plan = {"cwd": str(work), "prompts": ["go"], "cancelOn": "permission"}
    got = acp_client(plan, own_agent(cassette), env, cwd=work)
    assert of_kind(got, "stop") == [{"kind": "stop", "stopReason": "cancelled"}]
    assert not (work / "nope.txt").exists()


def test_a_client_that_leaves_while_asked_for_a_permission_gets_no_further_model_call(
    tmp_path: Path, work: Path, env: dict[str, str]
) -> None:
    """Nobody is left to see the turn: the unanswered request ends it, rather than a denial it goes on after."""
    calls = [[tool("call_p", "shell", command="touch nope.txt")], [text("billed for nothing")]]
    cassette = write_cassette(tmp_path / "c.ndjson", calls)
    plan = {"cwd": str(work), "prompts": ["go"], "permission": "leave"}
    got = acp_client(plan, own_agent(cassette), env, cwd=work)
    assert of_kind(got, "permission")
    assert "billed for nothing" not in agent_text(got)
    assert of_kind(got, "stop") == [{"kind": "stop", "stopReason": "cancelled"}]
    assert not (work / "nope.txt").exists()


def test_two_prompts_then_load_replays_the_session(tmp_path: Path, work: Path, env: dict[str, str]) -> None:
    calls = [
        [text("First answer.")],
        [tool("call_r", "read_file", path="notes.txt")],
        [text("Second answer.")],
    ]
    cassette = write_cassette(tmp_path / "c.ndjson", calls)
    (work / "notes.txt").write_text("remember me\n")
    got = acp_client({"cwd": str(work), "prompts": ["one", "two"]}, own_agent(cassette), env, cwd=work)
    assert [s["stopReason"] for s in of_kind(got, "stop")] == ["end_turn", "end_turn"]
    assert agent_text(got) == "First answer.Second answer."
    assert of_kind(got, "permission") == []  # reads run by themselves
    session_id = of_kind(got, "session")[0]["sessionId"]

    later = write_cassette(tmp_path / "later.ndjson", [[text("Third answer.")]])
    plan = {"cwd": str(work), "load": session_id, "prompts": ["three"]}
    loaded = acp_client(plan, own_agent(later), env, cwd=work)
    replay = [
        item for item in loaded[: loaded.index(of_kind(loaded, "loaded")[0])] if item["kind"] == "update"
    ]
    kinds = [item["update"]["sessionUpdate"] for item in replay]
    assert kinds == [
        "user_message_chunk",
        "agent_message_chunk",
        "user_message_chunk",
        "tool_call",
        "tool_call_update",
        "agent_message_chunk",
    ]
    assert replay[0]["update"]["content"]["text"] == "one"
    assert (
        replay[4]["update"]["status"] == "completed"
        and "remember me" in replay[4]["update"]["content"][0]["content"]["text"]
    )
    chunks = [item["update"] for item in replay if item["update"]["sessionUpdate"].endswith("_chunk")]
    message_ids = [chunk["messageId"] for chunk in chunks]
    assert all(message_ids) and len(set(message_ids)) == len(chunks)  # each replayed message its own
    assert all(item["sessionId"] == session_id for item in replay)
    assert of_kind(loaded, "stop")[0]["stopReason"] == "end_turn"


def test_load_of_an_unknown_session_is_a_clear_error(tmp_path: Path, work: Path, env: dict[str, str]) -> None:
    cassette = write_cassette(tmp_path / "c.ndjson", [[text("x")]])
    got = acp_client({"cwd": str(work), "load": "ses_missing0000"}, own_agent(cassette), env, cwd=work)
    (failure,) = of_kind(got, "connection_error")
    assert "no session" in failure["message"]


def test_a_provider_error_is_a_jsonrpc_error_with_the_canonical_code(
    tmp_path: Path, work: Path, env: dict[str, str]
) -> None:
    error = {"error": {"code": "AUTH_EXPIRED", "message": "the key was revoked", "recoverable": False}}
    cassette = write_cassette(tmp_path / "c.ndjson", [[error]])
    got = acp_client({"cwd": str(work), "prompts": ["hi"]}, own_agent(cassette), env, cwd=work)
    (failure,) = of_kind(got, "error")
    assert failure["data"]["code"] == "AUTH_EXPIRED" and "revoked" in failure["message"]


def test_the_session_is_published_to_the_bus(tmp_path: Path, work: Path, env: dict[str, str]) -> None:
    cassette = write_cassette(tmp_path / "c.ndjson", [[text("On the bus.")]])
    got = acp_client({"cwd": str(work), "prompts": ["hi"]}, own_agent(cassette), env, cwd=work)
    session_id = of_kind(got, "session")[0]["sessionId"]
    follow = subprocess.run(agentstream("follow", session_id), capture_output=True, env=env, timeout=20)
    events = [json.loads(line) for line in follow.stdout.splitlines()]
    assert events[0]["type"] == "start" and events[-1]["type"] == "result"
    assert any(e["type"] == "message" and e["content"] == "On the bus." for e in events)


def test_the_demo_answers_every_prompt_of_a_session(tmp_path: Path, work: Path, env: dict[str, str]) -> None:
    """The bundled demo holds one user turn; each prompt plays it again, with tool call ids of its own."""
    agent = agentstream("acp", "--provider", "demo", "--permission-mode", "full", "--no-publish")
    got = acp_client({"cwd": str(work), "prompts": ["one", "two", "three"]}, agent, env, cwd=work)
    assert [s["stopReason"] for s in of_kind(got, "stop")] == ["end_turn"] * 3
    ids = [u["toolCallId"] for u in updates(got, "tool_call")]
    assert len(ids) == 9 and len(set(ids)) == 9
    assert agent_text(got).count("quick tour") == 3


# -- what the official client never sends: JSON-RPC the agent must refuse --------------------------

INITIALIZE = {"protocolVersion": 1, "clientCapabilities": {}}


def raw_answers(messages: list[dict[str, Any]], env: dict[str, str], cwd: Path) -> list[dict[str, Any]]:
    """Send ``messages`` to ``agentstream acp`` at once, then end its input; its answers, in order."""
    return raw_acp(messages, env, cwd)[0]


@pytest.mark.parametrize(
    ("params", "why"),
    [
        ([1], "the params of initialize must be an object, not an array"),
        ("hello", "the params of initialize must be an object, not a string"),
        (1, "the params of initialize must be an object, not an integer"),
        (None, "protocolVersion must be an integer"),
        ({}, "protocolVersion must be an integer"),
        ({"protocolVersion": "1"}, "protocolVersion must be an integer"),
        ({"protocolVersion": -1}, "protocolVersion must be 0 to 65535"),
    ],
    ids=["array", "string", "number", "absent", "no-version", "string-version", "negative-version"],
)
def test_initialize_without_an_object_of_params_is_invalid_params(
    work: Path, env: dict[str, str], params: Any, why: str
) -> None:
    (answer,) = raw_answers([rpc(1, "initialize", params)], env, work)
    assert answer["id"] == 1 and answer["error"]["code"] == -32602
    assert why in answer["error"]["message"]


@pytest.mark.parametrize("ident", [{"n": 1}, [1], True], ids=["object", "array", "boolean"])
def test_a_request_id_that_is_not_a_string_number_or_null_is_an_invalid_request(
    work: Path, env: dict[str, str], ident: Any
) -> None:
    bad, good = raw_answers(
        [rpc(ident, "initialize", INITIALIZE), rpc("init", "initialize", INITIALIZE)], env, work
    )
    assert bad["id"] is None and bad["error"]["code"] == -32600 and "id" in bad["error"]["message"]
    assert good["id"] == "init" and good["result"]["protocolVersion"] == 1  # the connection goes on


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("session/new", {"cwd": "/tmp", "mcpServers": []}),
        ("session/load", {"sessionId": "ses_x", "cwd": "/tmp", "mcpServers": []}),
        ("session/prompt", {"sessionId": "ses_x", "prompt": [{"type": "text", "text": "hi"}]}),
        ("authenticate", {"methodId": "none"}),
    ],
)
def test_a_session_method_before_initialize_is_refused(
    work: Path, env: dict[str, str], method: str, params: dict[str, Any]
) -> None:
    """Refused in the order requests arrive: an initialize right behind it does not let it through."""
    early, init = raw_answers([rpc(1, method, params), rpc(2, "initialize", INITIALIZE)], env, work)
    assert early["id"] == 1 and early["error"]["code"] == -32600
    assert f"{method} before initialize" in early["error"]["message"]
    assert early["error"]["data"]["fix"]
    assert init["id"] == 2 and init["result"]["protocolVersion"] == 1


# -- agent CLIs as ACP agents -------------------------------------------------------------------


def fake_cli(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"fake-{kind}"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_CLI}" {kind} "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize(("kind", "first_id"), [("gemini", "gemini-session-1"), ("codex", "codex-thread-1")])
def test_a_cli_continues_its_own_session(
    tmp_path: Path, work: Path, env: dict[str, str], kind: str, first_id: str
) -> None:
    """Prompts that look like options stay prompts (an option parser would take ``--fix`` for one)."""
    agent = agentstream("acp", "--cli", kind, "--cli-path", str(fake_cli(tmp_path, kind)))
    got = acp_client({"cwd": str(work), "prompts": ["--fix", "-v"]}, agent, env, cwd=work)
    assert [s["stopReason"] for s in of_kind(got, "stop")] == ["end_turn", "end_turn"]
    assert agent_text(got) == f"fresh sessionresumed {first_id}"
    assert of_kind(got, "initialize")[0]["result"]["agentCapabilities"]["loadSession"] is False


def test_a_cli_tool_call_maps_with_kind_and_location(tmp_path: Path, work: Path, env: dict[str, str]) -> None:
    agent = agentstream("acp", "--cli", "gemini", "--cli-path", str(fake_cli(tmp_path, "gemini")))
    got = acp_client({"cwd": str(work), "prompts": ["use a tool"]}, agent, env, cwd=work)
    (announced,) = updates(got, "tool_call")
    assert announced["kind"] == "read" and announced["locations"] == [{"path": "/w/notes.txt"}]
    assert updates(got, "tool_call_update")[-1]["status"] == "completed"


def test_a_cli_that_takes_no_mcp_servers_from_agentstream_says_which_it_leaves_out(
    tmp_path: Path, work: Path, env: dict[str, str]
) -> None:
    """Gemini CLI's headless mode takes MCP servers from its settings only: the session goes on without the
    editor's, and stderr (which editors log) names them."""
    agent = agentstream("acp", "--cli", "gemini", "--cli-path", str(fake_cli(tmp_path, "gemini")))
    servers = [
        {"name": "files", "command": "/opt/mcp-files", "args": [], "env": []},
        {"type": "http", "name": "web", "url": "https://mcp.example/", "headers": []},
    ]
    plan = {"cwd": str(work), "mcpServers": servers, "prompts": ["hello"]}
    got, stderr = acp_client_run(plan, agent, env, cwd=work)
    (init,) = of_kind(got, "initialize")
    assert init["result"]["agentCapabilities"]["mcpCapabilities"] == {"http": False, "sse": False}
    assert agent_text(got) == "fresh session"
    assert (
        "agentstream acp: gemini does not connect to these MCP servers: files (stdio), web (http)" in stderr
    )


def test_a_cli_turn_presents_the_agent_side_only(tmp_path: Path, work: Path, env: dict[str, str]) -> None:
    """Gemini CLI echoes the prompt as a user message: the editor shows its own prompt already, so no
    ``user_message_chunk`` repeats it."""
    agent = agentstream("acp", "--cli", "gemini", "--cli-path", str(fake_cli(tmp_path, "gemini")))
    got = acp_client({"cwd": str(work), "prompts": ["hello there"]}, agent, env, cwd=work)
    assert [u["sessionUpdate"] for u in updates(got)] == ["agent_message_chunk"]
    assert agent_text(got) == "fresh session"


def test_a_cli_that_numbers_its_items_afresh_each_run_gives_each_turn_new_ids(
    tmp_path: Path, work: Path, env: dict[str, str]
) -> None:
    """Codex calls the first item of every ``exec`` run ``item_0``; the second turn's tool call must not be
    taken for the first one's (an editor updates the call it already shows), nor its message for the first's.
    The options after ``--`` reach every run, the resumed ones too (Codex takes them before ``resume`` only)."""
    agent = agentstream(
        "acp", "--cli", "codex", "--cli-path", str(fake_cli(tmp_path, "codex")), "--", "-m", "m1"
    )
    got = acp_client({"cwd": str(work), "prompts": ["use a tool", "a tool again"]}, agent, env, cwd=work)
    assert [s["stopReason"] for s in of_kind(got, "stop")] == ["end_turn", "end_turn"]
    calls = [u["toolCallId"] for u in updates(got, "tool_call")]
    assert len(calls) == 2 and len(set(calls)) == 2
    assert [u["toolCallId"] for u in updates(got, "tool_call_update")] == calls
    assert len({u["messageId"] for u in updates(got, "agent_message_chunk")}) == 2
    assert agent_text(got) == "fresh sessionresumed codex-thread-1"


@pytest.mark.parametrize("kind", ["gemini", "codex"])
def test_cancel_interrupts_a_cli_with_sigint(
    tmp_path: Path, work: Path, env: dict[str, str], kind: str
) -> None:
    agent = agentstream("acp", "--cli", kind, "--cli-path", str(fake_cli(tmp_path, kind)))
    plan = {"cwd": str(work), "prompts": ["sleep now"], "cancelOn": "message"}
    got = acp_client(plan, agent, env, cwd=work, timeout=20)
    assert of_kind(got, "stop") == [{"kind": "stop", "stopReason": "cancelled"}]


def test_a_cli_that_crashes_fails_the_prompt_with_what_it_said(
    tmp_path: Path, work: Path, env: dict[str, str]
) -> None:
    """The editor shows the JSON-RPC error, not the agent's stderr: the crash's reason is in the message."""
    agent = agentstream("acp", "--cli", "gemini", "--cli-path", str(fake_cli(tmp_path, "gemini")))
    got = acp_client({"cwd": str(work), "prompts": ["crash now", "hello"]}, agent, env, cwd=work)
    (error,) = of_kind(got, "error")
    assert error["code"] == -32603 and error["data"]["code"] == "PROCESS_CRASHED"
    assert error["message"].endswith("its stderr ends: Error: the configuration file is broken")
    assert of_kind(got, "stop") == [{"kind": "stop", "stopReason": "end_turn"}]


def test_a_missing_cli_fails_with_a_fix(tmp_path: Path, env: dict[str, str]) -> None:
    proc = subprocess.run(
        agentstream("acp", "--cli", "gemini", "--cli-path", str(tmp_path / "nope")),
        capture_output=True,
        env=env,
        timeout=20,
    )
    assert proc.returncode == 127 and proc.stdout == b""
    assert b"CLI_NOT_FOUND" in proc.stderr and b"--cli-path" in proc.stderr


def claude_cli() -> str:
    import shutil

    found = shutil.which("agentstream-claude", path=str(Path(sys.executable).parent))
    assert found, "the agentstream-claude console script is missing: pip install -e '.[test]'"
    return found


def test_claude_permission_allowed_and_the_session_continued(tmp_path: Path, work: Path) -> None:
    script = [
        anthropic_reply(tool_calls=[("toolu_01", "shell", {"command": "touch made.txt && echo made"})]),
        anthropic_reply("Finished."),
        anthropic_reply("Still here."),
    ]
    with FakeModelServer(script) as server:
        env = anthropic_env(tmp_path / "home", server, AGENTSTREAM_RETRY_BASE_MS="5")
        agent = agentstream("acp", "--cli", "claude", "--cli-path", claude_cli(), "--no-publish")
        plan = {"cwd": str(work), "prompts": ["make it", "and then"], "permission": "allow"}
        got = acp_client(plan, agent, env, cwd=work)
        last_request = server.posts[-1].body
    (asked,) = of_kind(got, "permission")
    assert asked["params"]["toolCall"]["toolCallId"] == "toolu_01"
    assert asked["params"]["toolCall"]["kind"] == "execute"
    assert (work / "made.txt").exists()
    assert [s["stopReason"] for s in of_kind(got, "stop")] == ["end_turn", "end_turn"]
    assert agent_text(got) == "Finished.Still here."
    # the second prompt resumed Claude's session: the model saw the first turn again
    assert "make it" in json.dumps(last_request["messages"])


def test_claude_permission_rejected_does_not_run(tmp_path: Path, work: Path) -> None:
    script = [
        anthropic_reply(tool_calls=[("toolu_02", "shell", {"command": "touch made.txt"})]),
        anthropic_reply("I did not run it."),
    ]
    with FakeModelServer(script) as server:
        env = anthropic_env(tmp_path / "home", server, AGENTSTREAM_RETRY_BASE_MS="5")
        agent = agentstream("acp", "--cli", "claude", "--cli-path", claude_cli(), "--no-publish")
        got = acp_client(
            {"cwd": str(work), "prompts": ["make it"], "permission": "reject"}, agent, env, cwd=work
        )
    assert len(of_kind(got, "permission")) == 1
    assert not (work / "made.txt").exists()
    assert updates(got, "tool_call_update")[-1]["status"] == "failed"
    assert of_kind(got, "stop")[0]["stopReason"] == "end_turn"


def test_claude_cancel_uses_the_control_protocol(tmp_path: Path, work: Path) -> None:
    script = [anthropic_reply(tool_calls=[("toolu_02", "shell", {"command": "echo started; sleep 30"})])]
    with FakeModelServer(script) as server:
        env = anthropic_env(tmp_path / "home", server, AGENTSTREAM_RETRY_BASE_MS="5")
        agent = agentstream(
            "acp", "--cli", "claude", "--cli-path", claude_cli(), "--permission-mode", "full", "--no-publish"
        )
        got = acp_client(
            {"cwd": str(work), "prompts": ["wait"], "cancelOn": "tool_start"},
            agent,
            env,
            cwd=work,
            timeout=20,
        )
    assert of_kind(got, "stop") == [{"kind": "stop", "stopReason": "cancelled"}]


def test_chunks_name_their_message_and_tool_calls_their_tool(
    tmp_path: Path, work: Path, env: dict[str, str]
) -> None:
    """``messageId`` tells two messages apart (the deltas of one share it); ``name`` is the tool's own name."""
    calls = [[text("Looking."), tool("call_l", "list_dir", path=".")], [text("Done looking.")]]
    got = in_full_mode(tmp_path, work, env, calls)
    chunks = updates(got, "agent_message_chunk")
    by_message: dict[str, str] = {}
    for chunk in chunks:
        by_message[chunk["messageId"]] = by_message.get(chunk["messageId"], "") + chunk["content"]["text"]
    assert list(by_message.values()) == ["Looking.", "Done looking."]
    (call,) = updates(got, "tool_call")
    assert call["name"] == "list_dir" and call["title"].startswith("list_dir")


def test_a_failed_tool_call_replays_with_its_error_once(
    tmp_path: Path, work: Path, env: dict[str, str]
) -> None:
    calls = [[tool("call_m", "read_file", path="missing.txt")], [text("No such file.")]]
    got = in_full_mode(tmp_path, work, env, calls)
    live = updates(got, "tool_call_update")[-1]
    session_id = of_kind(got, "session")[0]["sessionId"]
    later = write_cassette(tmp_path / "later.ndjson", [[text("unused")]])
    loaded = acp_client({"cwd": str(work), "load": session_id}, own_agent(later), env, cwd=work)
    replayed = updates(loaded, "tool_call_update")[-1]
    assert live["status"] == replayed["status"] == "failed"
    shown = replayed["content"][0]["content"]["text"]
    assert "missing.txt" in shown and not shown.startswith("error\n")


@pytest.mark.parametrize(
    ("cwd", "why"),
    [(".", "cwd must be an absolute path, not '.'"), ("/no/such/dir", "cwd /no/such/dir is not a directory")],
)
def test_a_session_cwd_must_be_an_existing_absolute_path(
    work: Path, env: dict[str, str], cwd: str, why: str
) -> None:
    _, new, load = raw_answers(
        [
            rpc(1, "initialize", INITIALIZE),
            rpc(2, "session/new", {"cwd": cwd, "mcpServers": []}),
            rpc(3, "session/load", {"sessionId": "ses_x", "cwd": cwd, "mcpServers": []}),
        ],
        env,
        work,
    )
    for answer in (new, load):
        assert answer["error"]["code"] == -32602 and answer["error"]["message"] == why
        assert answer["error"]["data"]["param"] == "cwd" and answer["error"]["data"]["fix"]


def test_an_unknown_session_to_load_is_named_in_the_error(work: Path, env: dict[str, str]) -> None:
    _, load = raw_answers(
        [
            rpc(1, "initialize", INITIALIZE),
            rpc(2, "session/load", {"sessionId": "ses_missing0000", "cwd": str(work), "mcpServers": []}),
        ],
        env,
        work,
    )
    assert load["error"]["code"] == -32002
    data = load["error"]["data"]
    assert (data["code"], data["sessionId"]) == ("SESSION_NOT_FOUND", "ses_missing0000")
