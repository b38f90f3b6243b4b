"""``agentstream exec`` beyond one provider call: the demo, cassettes, sessions, tools, input modes, selection."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from _agent_fakes import (
    FakeModelServer,
    LiveExec,
    assert_json_object,
    assert_valid_stream,
    exec_env,
    openai_env,
    openai_error,
    openai_reply,
    run_exec,
    split_streams,
)
from agentstream.agent.sessions import SessionStore


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("alpha\nbeta\n")
    (root / "GUIDE.md").write_text("# guide\n")
    return root


def store(home: Path) -> SessionStore:
    return SessionStore(home / "state" / "sessions.sqlite3")


def user_texts(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


# -- the main job on a fresh machine ------------------------------------------------


def test_demo_runs_from_an_empty_environment(tmp_path: Path, workspace: Path) -> None:
    """No keys, no Ollama, --provider demo: the bundled cassette plays, the tools really run here."""
    run = run_exec(["--provider", "demo", "What is in this directory?"], exec_env(tmp_path), cwd=workspace)
    events = assert_valid_stream(run.lines, run.returncode)
    assert run.returncode == 0 and run.stderr.strip() == ""
    assert events[0].provider == "demo"
    results = {e.name: e for e in run.of_type("tool_result")}
    assert set(results) == {"list_dir", "shell", "glob"}
    assert all(r.status == "success" for r in results.values())
    assert "notes.txt" in results["list_dir"].output
    assert results["shell"].output.strip() == str(workspace)
    assert results["glob"].output.strip() == "GUIDE.md"
    assert run.result.turn_count == 3 and "demo cassette" in run.result.result


@pytest.mark.parametrize("dialect", ["claude", "cursor"])
def test_json_in_a_dialect_is_that_cli_s_one_result_object(
    tmp_path: Path, workspace: Path, dialect: str
) -> None:
    """``claude -p --output-format json`` prints its result line alone; so does exec in that dialect."""
    from agentstream.dialects import detect_document

    run = run_exec(
        ["hi", "--provider", "demo", "--dialect", dialect, "-o", "json"], exec_env(tmp_path), cwd=workspace
    )
    assert run.returncode == 0, run.stderr
    (line,) = run.stdout.splitlines()
    document = json.loads(line)
    assert document["type"] == "result" and document["is_error"] is False
    assert "demo cassette" in document["result"] and run.stdout.endswith(b"\n")
    assert detect_document(document) == dialect  # what reads that CLI's JSON output reads ours
    refused = run_exec(
        ["hi", "--provider", "demo", "--dialect", "gemini", "-o", "json"], exec_env(tmp_path), cwd=workspace
    )
    assert refused.returncode == 2 and json.loads(refused.stdout)["v"] == 1  # gemini's JSON is another shape


@pytest.mark.parametrize("partial", [False, True], ids=["complete-messages", "partial-messages"])
def test_claude_s_dialect_has_stream_event_lines_only_with_include_partial_messages(
    tmp_path: Path, workspace: Path, partial: bool
) -> None:
    """As ``claude -p --output-format stream-json --verbose`` [``--include-partial-messages``]: ``stream_event``
    lines only with the flag; either way each model call's usage is in its ``assistant`` lines."""
    flags = ["--include-partial-messages"] if partial else []
    run = run_exec(
        ["hi", "--provider", "demo", "--dialect", "claude", *flags], exec_env(tmp_path), cwd=workspace
    )
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    assert any(line["type"] == "stream_event" for line in lines) is partial
    answers = [line["message"] for line in lines if line["type"] == "assistant"]
    assert answers and all("usage" in answer for answer in answers if answer["content"][0]["type"] == "text")


def test_demo_in_text_and_json_formats(tmp_path: Path, workspace: Path) -> None:
    text = run_exec(["hi", "--provider", "demo", "-o", "text"], exec_env(tmp_path), cwd=workspace)
    assert text.returncode == 0 and b"quick tour" in text.stdout and b'"type"' not in text.stdout
    assert "list_dir" in text.stderr  # tool calls go to stderr in text mode
    demo_json = run_exec(["hi", "--provider", "demo", "-o", "json"], exec_env(tmp_path), cwd=workspace)
    assert assert_json_object(demo_json).ok


def test_the_demo_answers_every_turn_of_a_two_way_session(tmp_path: Path, workspace: Path) -> None:
    """The demo cassette holds one user turn: each turn plays it again, its tools for real, ids its own."""
    turns = [{"type": "message", "role": "user", "content": f"turn {n}"} for n in (1, 2, 3)]
    stdin = "".join(json.dumps(t) + "\n" for t in turns).encode()
    run = run_exec(
        ["--provider", "demo", "--input-format", "stream-json"],
        exec_env(tmp_path),
        cwd=workspace,
        stdin=stdin,
    )
    assert run.returncode == 0, run.stderr
    streams = [assert_valid_stream(s, 0) for s in split_streams(run.lines)]
    assert len(streams) == 3
    whole = subprocess.run(
        [sys.executable, "-m", "agentstream", "validate", "--expect-exit", "0", "-"],
        input=b"".join(line + b"\n" for line in run.lines),
        capture_output=True,
    )
    assert whole.returncode == 0, (
        whole.stdout + whole.stderr
    )  # the session as written is one valid stream too
    for events in streams:
        results = [e for e in events if e.type == "tool_result"]
        assert [r.name for r in results] == ["list_dir", "shell", "glob"]
        assert all(r.status == "success" for r in results)
        assert events[-1].ok and "demo cassette" in events[-1].result
    call_ids = [e.call_id for events in streams for e in events if e.type == "tool_call"]
    assert len(call_ids) == len(set(call_ids)) == 9
    root = streams[0][0].session_id
    messages = store(tmp_path).load(root).messages
    assert [m["content"] for m in messages if m["role"] == "user"] == ["turn 1", "turn 2", "turn 3"]
    resumed = run_exec(["--provider", "demo", "--resume", root, "turn 4"], exec_env(tmp_path), cwd=workspace)
    assert_valid_stream(resumed.lines, 0)
    assert [e.call_id for e in resumed.of_type("tool_call")] == [f"call_demo_0{n}_4" for n in (1, 2, 3)]


@pytest.mark.parametrize("output", ["stream-json", "json", "text"])
def test_no_provider_is_a_failure_never_a_demo(tmp_path: Path, workspace: Path, output: str) -> None:
    """Nothing configured: NO_PROVIDER, exit 2, ok false, and the fix names every way out."""
    run = run_exec(["What is in this directory?", "-o", output], exec_env(tmp_path), cwd=workspace)
    assert run.returncode == 2, run.stderr
    assert b"quick tour" not in run.stdout and "quick tour" not in run.stderr
    if output == "text":
        assert "NO_PROVIDER" in run.stderr and "--provider demo" in run.stderr
        return
    result = assert_json_object(run) if output == "json" else run.result
    if output == "stream-json":
        assert_valid_stream(run.lines, run.returncode)
        assert not run.of_type("tool_call")
    assert (result.ok, result.exit_code, result.error.code) == (False, 2, "NO_PROVIDER")
    for way in (
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "--base-url",
        "Ollama",
        "--cassette",
        "--provider demo",
    ):
        assert way in result.error.fix


def test_replay_without_a_cassette_is_a_usage_error(tmp_path: Path, workspace: Path) -> None:
    run = run_exec(["go", "--provider", "replay"], exec_env(tmp_path), cwd=workspace)
    assert_valid_stream(run.lines, run.returncode)
    assert (run.returncode, run.result.error.code) == (2, "INVALID_INPUT")
    assert "--provider demo" in run.result.error.fix


# -- cassettes ---------------------------------------------------------------------------


VOLATILE = {
    "session_id",
    "ts",
    "message_id",
    "reasoning_id",
    "duration_ms",
    "next_actions",
    "provider",
    "retry_in_ms",
}
"""What differs between two runs: ids, times, the jittered backoff, the session (and start.provider: replay)."""


def comparable(events: list[Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in msgspec.to_builtins(e).items() if k not in VOLATILE} for e in events]


def test_record_then_replay_reproduces_the_run(tmp_path: Path, workspace: Path) -> None:
    cassette = tmp_path / "run.cassette.jsonl"
    script = [
        openai_reply("Reading.", [("call_1", "read_file", {"path": "notes.txt"})], reasoning="Look first."),
        openai_error(429, {"retry-after-ms": "10"}),
        openai_reply("Half an ans", drop_after=4),
        openai_reply("It says alpha and beta.", usage=(90, 12)),
    ]
    with FakeModelServer(script) as server:
        live = run_exec(
            ["read my notes", "--record", str(cassette)], openai_env(tmp_path, server), cwd=workspace
        )
    assert live.returncode == 0 and len(server.posts) == 4
    header = json.loads(cassette.read_text().splitlines()[0])
    assert (header["cassette"], header["provider"], header["model"]) == (1, "openai", "gpt-4.1-mini")
    replay = run_exec(["read my notes", "--cassette", str(cassette)], exec_env(tmp_path), cwd=workspace)
    assert_valid_stream(replay.lines, replay.returncode)
    assert replay.events[0].provider == "replay" and replay.events[0].model == "gpt-4.1-mini"
    assert comparable(replay.events) == comparable(live.events)
    waits = [
        [e.retry_in_ms for e in run.of_type("error") if e.code == "RATE_LIMITED"] for run in (live, replay)
    ]
    assert waits == [[10], [10]]  # the server's retry-after is kept in the cassette
    assert [e.type for e in live.events].count(
        "error"
    ) == 2  # the retry and the dropped stream were replayed too


def test_a_cassette_that_runs_out_fails_cleanly(tmp_path: Path, workspace: Path) -> None:
    cassette = tmp_path / "short.jsonl"
    cassette.write_text(
        '{"cassette":1,"provider":"openai","model":"m"}\n'
        '{"call":1,"events":[{"type":"tool_call","call_id":"c1","name":"list_dir"},{"type":"end","reason":"tool_calls"}]}\n'
    )
    run = run_exec(["go", "--cassette", str(cassette)], exec_env(tmp_path), cwd=workspace)
    assert_valid_stream(run.lines, run.returncode)
    assert run.returncode == 1 and "no model turn left" in run.result.error.message


def test_a_broken_cassette_is_a_usage_error(tmp_path: Path, workspace: Path) -> None:
    cassette = tmp_path / "bad.jsonl"
    cassette.write_text('{"cassette":1,"provider":"openai","model":"m"}\n{"call":"one"}\n')
    run = run_exec(["go", "--cassette", str(cassette)], exec_env(tmp_path), cwd=workspace)
    assert_valid_stream(run.lines, run.returncode)
    assert run.returncode == 2 and run.result.error.code == "INVALID_INPUT"
    assert "docs/agent.md" in (run.result.error.fix or "")


def test_a_stalled_model_times_out_and_is_retried(tmp_path: Path, workspace: Path) -> None:
    script = [openai_reply("Never finis", stall_after=3), openai_reply("Again stuck", stall_after=3)]
    with FakeModelServer(script) as server:
        env = openai_env(tmp_path, server, AGENTSTREAM_MAX_RETRIES="1")
        run = run_exec(["go", "--timeout", "0.5"], env, cwd=workspace)
    assert_valid_stream(run.lines, run.returncode)
    errors = run.of_type("error")
    assert [(e.code, e.recoverable) for e in errors] == [
        ("NETWORK_TIMEOUT", True),
        ("NETWORK_TIMEOUT", False),
    ]
    assert "timed out" in errors[0].message and run.returncode == 1 and len(server.posts) == 2


# -- sessions --------------------------------------------------------------------------


def test_resume_and_continue_send_the_earlier_conversation(tmp_path: Path, workspace: Path) -> None:
    script = [openai_reply("First answer."), openai_reply("Second answer."), openai_reply("Third answer.")]
    with FakeModelServer(script) as server:
        env = openai_env(tmp_path, server)
        first = run_exec(["first question"], env, cwd=workspace)
        session_id = first.events[0].session_id
        second = run_exec(["second question", "--resume", session_id], env, cwd=workspace)
        third = run_exec(["third question", "--continue"], env, cwd=workspace)
    for run in (first, second, third):
        assert_valid_stream(run.lines, run.returncode)
    assert user_texts(server.posts[1].body) == ["first question", "second question"]
    assert user_texts(server.posts[2].body) == ["first question", "second question", "third question"]
    assistant = [m["content"] for m in server.posts[2].body["messages"] if m["role"] == "assistant"]
    assert assistant == ["First answer.", "Second answer."]
    # Later runs are their own streams, pointing back at the session they continue.
    assert second.events[0].session_id != session_id and second.events[0].parent_session_id == session_id
    assert third.events[0].parent_session_id == session_id
    from agentstream.envelope import fill

    resume = third.result.next_actions[0]
    assert fill(resume, prompt="fourth question") == [
        "agentstream",
        "exec",
        "--resume",
        session_id,
        "fourth question",
    ]
    record = store(tmp_path).load(session_id)
    assert (record.status, record.turn_count, len(record.messages)) == ("completed", 3, 6)
    assert record.usage["input_tokens"] == 60


def test_interrupted_tool_call_then_resume(tmp_path: Path, workspace: Path) -> None:
    """SIGTERM while a shell command runs: the call is cancelled, and a resume sends it back closed."""
    script = [
        openai_reply("", [("call_sleep", "shell", {"command": "echo started; sleep 30"})]),
        openai_reply("Resumed."),
    ]
    with FakeModelServer(script) as server:
        env = openai_env(tmp_path, server)
        live = LiveExec(["wait a while"], env, cwd=workspace)
        live.wait_for(
            lambda lines: any(b'"tool_progress"' in line for line in lines)
        )  # the command is running
        live.proc.send_signal(signal.SIGTERM)
        run = live.finish()
        session_id = run.events[0].session_id
        assert store(tmp_path).load(session_id).status == "interrupted"
        resumed = run_exec(["go on", "--resume", session_id], env, cwd=workspace)
    assert_valid_stream(run.lines, run.returncode)
    assert run.returncode == 143 and run.result.subtype == "interrupted"
    (result,) = run.of_type("tool_result")
    assert result.status == "cancelled"
    sent = [m for m in server.posts[1].body["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in sent] == ["call_sleep"] and "stopped" in sent[0]["content"]
    assert resumed.returncode == 0 and resumed.result.result == "Resumed."


def test_resume_of_an_unknown_session_is_a_valid_failed_stream(tmp_path: Path, workspace: Path) -> None:
    run = run_exec(["go", "--resume", "ses_nothing_here"], exec_env(tmp_path), cwd=workspace)
    assert_valid_stream(run.lines, run.returncode)
    assert run.returncode == 1 and run.result.error.code == "SESSION_NOT_FOUND"


def test_session_id_names_a_new_session(tmp_path: Path, workspace: Path) -> None:
    with FakeModelServer([openai_reply("ok")]) as server:
        env = openai_env(tmp_path, server)
        run = run_exec(["go", "--session-id", "ses_mine_0001"], env, cwd=workspace)
        again = run_exec(["go", "--session-id", "ses_mine_0001"], env, cwd=workspace)
    assert run.events[0].session_id == "ses_mine_0001" and run.returncode == 0
    assert again.returncode == 2 and "--resume ses_mine_0001" in again.result.error.fix
    assert len(server.posts) == 1


# -- tools and permissions ------------------------------------------------------------------


def offered(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


_LONG = "x" * 60
_COLLIDING_SERVER = f"""
import json, sys
TOOLS = ["a.b", "a_b", "a_b_2", "{_LONG}1", "{_LONG}2"]
for raw in sys.stdin:
    request = json.loads(raw)
    method, params = request.get("method"), request.get("params") or {{}}
    if "id" not in request:
        continue
    if method == "initialize":
        result = {{"protocolVersion": params["protocolVersion"], "capabilities": {{"tools": {{}}}},
                  "serverInfo": {{"name": "twins", "version": "1"}}}}
    elif method == "tools/list":
        result = {{"tools": [{{"name": name, "inputSchema": {{"type": "object"}}}} for name in TOOLS]}}
    else:
        result = {{"content": [{{"type": "text", "text": "ran " + params["name"]}}]}}
    print(json.dumps({{"jsonrpc": "2.0", "id": request["id"], "result": result}}), flush=True)
"""
"""A stdio MCP server whose tool names are one once made safe for a model API (``a.b`` and ``a_b``), or share
their first 64 characters: each call answers with the name of the tool it reached."""


def test_mcp_tools_whose_safe_names_collide_are_each_offered_under_a_name_of_their_own(
    tmp_path: Path, workspace: Path
) -> None:
    server_file = tmp_path / "twins.py"
    server_file.write_text(_COLLIDING_SERVER)
    config = json.dumps({"mcpServers": {"s": {"command": sys.executable, "args": [str(server_file)]}}})
    long_base = f"mcp__s__{_LONG}"[:64]
    names = ["mcp__s__a_b", "mcp__s__a_b_2", "mcp__s__a_b_2_2", long_base, long_base[:62] + "_2"]
    script = [
        openai_reply("", [(f"call_{n}", name, {}) for n, name in enumerate(names)]),
        openai_reply("done"),
    ]
    with FakeModelServer(script) as server:
        run = run_exec(
            ["go", "--mcp-config", config, "--permission-mode", "full", "--no-publish"],
            openai_env(tmp_path, server),
            cwd=workspace,
        )
    assert run.returncode == 0, run.stderr
    assert offered(server.posts[0].body)[-5:] == names
    reached = {result.call_id: result.output for result in run.of_type("tool_result")}
    assert reached == {
        f"call_{n}": f"ran {tool}" for n, tool in enumerate(["a.b", "a_b", "a_b_2", f"{_LONG}1", f"{_LONG}2"])
    }
    assert run.stderr.splitlines() == [
        "agentstream exec: warning: MCP tool 'a_b' of server s is offered as mcp__s__a_b_2: its name, made safe "
        "for the model's API, is another tool's",
        "agentstream exec: warning: MCP tool 'a_b_2' of server s is offered as mcp__s__a_b_2_2: its name, made "
        "safe for the model's API, is another tool's",
        f"agentstream exec: warning: MCP tool '{_LONG}2' of server s is offered as {long_base[:62]}_2: its name, "
        "made safe for the model's API, is another tool's",
    ]


def test_tools_allow_list_reaches_the_model(tmp_path: Path, workspace: Path) -> None:
    with FakeModelServer([openai_reply("ok")]) as server:
        run = run_exec(["go", "--tools", "read_file,grep"], openai_env(tmp_path, server), cwd=workspace)
    assert offered(server.posts[0].body) == ["read_file", "grep"] == run.events[0].tools


def test_read_only_mode_offers_no_write_tools_and_denies_them(tmp_path: Path, workspace: Path) -> None:
    script = [openai_reply("", [("call_1", "shell", {"command": "touch x"})]), openai_reply("Could not.")]
    with FakeModelServer(script) as server:
        run = run_exec(["go", "--permission-mode", "read-only"], openai_env(tmp_path, server), cwd=workspace)
    assert_valid_stream(run.lines, run.returncode)
    assert offered(server.posts[0].body) == ["read_file", "list_dir", "glob", "grep"]
    (result,) = run.of_type("tool_result")
    assert result.status == "denied" and not (workspace / "x").exists()
    assert run.returncode == 0  # a denied tool is the model's problem, not the run's


def test_a_tool_failure_is_not_fatal(tmp_path: Path, workspace: Path) -> None:
    script = [
        openai_reply("", [("call_1", "read_file", {"path": "missing.txt"})]),
        openai_reply("No such file."),
    ]
    with FakeModelServer(script) as server:
        run = run_exec(["go"], openai_env(tmp_path, server), cwd=workspace)
    (result,) = run.of_type("tool_result")
    assert result.status == "error" and run.returncode == 0
    tool_message = next(m for m in server.posts[1].body["messages"] if m["role"] == "tool")
    assert tool_message["content"].startswith("error:")


def test_unknown_tool_in_allow_list_is_a_usage_error(tmp_path: Path, workspace: Path) -> None:
    run = run_exec(["go", "--provider", "demo", "--tools", "teleport"], exec_env(tmp_path), cwd=workspace)
    assert_valid_stream(run.lines, run.returncode)
    assert run.returncode == 2 and "teleport" in run.result.error.message


# -- input and output modes -----------------------------------------------------------------


def test_no_deltas_gives_only_complete_messages(tmp_path: Path, workspace: Path) -> None:
    with FakeModelServer([openai_reply("Whole answer.", reasoning="hmm")]) as server:
        run = run_exec(["go", "--no-deltas"], openai_env(tmp_path, server), cwd=workspace)
    kinds = [e.type for e in run.events]
    assert "message_delta" not in kinds and "reasoning_delta" not in kinds
    assert [e.content for e in run.of_type("message")] == ["Whole answer."]
    assert [e.content for e in run.of_type("reasoning")] == ["hmm"]


def test_prompt_from_stdin(tmp_path: Path, workspace: Path) -> None:
    with FakeModelServer([openai_reply("ok")]) as server:
        run = run_exec(["-"], openai_env(tmp_path, server), cwd=workspace, stdin=b"a question from a pipe\n")
    assert run.returncode == 0 and user_texts(server.posts[0].body) == ["a question from a pipe\n"]


def test_missing_prompt_is_a_valid_failed_stream(tmp_path: Path, workspace: Path) -> None:
    run = run_exec([], exec_env(tmp_path), cwd=workspace)
    assert_valid_stream(run.lines, run.returncode)
    assert run.returncode == 2 and run.result.error.fix


def test_stream_json_input_runs_one_stream_per_turn(tmp_path: Path, workspace: Path) -> None:
    turns = [
        {"type": "message", "role": "user", "content": "first turn"},
        {"type": "control_request", "request": {}},
        {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": "second turn"}]}},
    ]
    stdin = "".join(json.dumps(t) + "\n" for t in turns).encode()
    with FakeModelServer([openai_reply("One."), openai_reply("Two.")]) as server:
        run = run_exec(
            ["--input-format", "stream-json"], openai_env(tmp_path, server), cwd=workspace, stdin=stdin
        )
    streams = split_streams(run.lines)
    assert len(streams) == 3
    first, bad, second = (
        assert_valid_stream(s, s_exit) for s, s_exit in zip(streams, (0, 2, 0), strict=False)
    )
    assert bad[-1].error.code == "INVALID_INPUT" and "not a user message" in bad[-1].error.message
    assert first[-1].result == "One." and second[-1].result == "Two."
    root = first[0].session_id
    assert bad[0].parent_session_id == root and second[0].parent_session_id == root
    assert user_texts(server.posts[1].body) == ["first turn", "second turn"]
    assert run.returncode == 0  # the last turn's exit code
    assert store(tmp_path).load(root).turn_count == 2


def test_stream_json_input_exit_code_is_the_last_turns(tmp_path: Path, workspace: Path) -> None:
    stdin = b'{"type":"message","role":"user","content":"hi"}\nnot json\n'
    with FakeModelServer([openai_reply("Hello.")]) as server:
        run = run_exec(
            ["--input-format", "stream-json", "-o", "json"],
            openai_env(tmp_path, server),
            cwd=workspace,
            stdin=stdin,
        )
    results = [json.loads(line) for line in run.lines]
    assert [r["exit_code"] for r in results] == [0, 2]
    assert run.returncode == 2


# -- provider selection -------------------------------------------------------------------


def test_a_local_ollama_is_used_when_it_answers(tmp_path: Path, workspace: Path) -> None:
    with FakeModelServer(
        [openai_reply("From llama.", model="llama3.2:latest")], ollama_models=["llama3.2:latest"]
    ) as server:
        env = exec_env(tmp_path, OLLAMA_HOST=f"127.0.0.1:{server.port}")
        run = run_exec(["go"], env, cwd=workspace)
    assert_valid_stream(run.lines, run.returncode)
    assert (run.events[0].provider, run.events[0].model) == ("ollama", "llama3.2:latest")
    assert (
        server.posts[0].path == "/v1/chat/completions" and server.posts[0].body["model"] == "llama3.2:latest"
    )
    (usage,) = run.of_type("usage")
    assert usage.cost_usd is msgspec.UNSET  # a local model has no price
    assert "demo" not in run.stderr


def test_an_explicit_provider_wins_over_the_environment(tmp_path: Path, workspace: Path) -> None:
    with FakeModelServer([openai_reply("via openai")]) as server:
        env = openai_env(tmp_path, server, ANTHROPIC_API_KEY="sk-ant-unused-000000000")
        run = run_exec(["go", "--provider", "openai"], env, cwd=workspace)
    assert run.events[0].provider == "openai" and run.result.result == "via openai"


def test_an_explicit_provider_without_a_key_fails_cleanly(tmp_path: Path, workspace: Path) -> None:
    run = run_exec(["go", "--provider", "anthropic", "-o", "json"], exec_env(tmp_path), cwd=workspace)
    result = assert_json_object(run)
    assert (result.exit_code, result.error.code) == (
        1,
        "AUTH_EXPIRED",
    ) and "ANTHROPIC_API_KEY" in result.error.fix


def test_exec_help_does_not_import_the_sdks() -> None:
    code = (
        "import sys\nfrom agentstream.cli import main\n"
        "try:\n    main(['exec', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('openai', 'anthropic', 'httpx2') if m in sys.modules), file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert "--input-format" in proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize(("provider", "module"), [("openai", "openai"), ("anthropic", "anthropic")])
def test_a_missing_model_sdk_names_the_extra_to_install(
    tmp_path: Path, workspace: Path, provider: str, module: str
) -> None:
    """The core install has no model SDK: a provider that needs one fails with exit 2 and the pip command."""
    blocked = tmp_path / "blocked"
    (blocked / module).mkdir(parents=True)
    (blocked / module / "__init__.py").write_text(
        f"raise ModuleNotFoundError(\"No module named '{module}'\")\n"
    )
    keys = {"OPENAI_API_KEY": "sk-test-00000000", "ANTHROPIC_API_KEY": "sk-ant-test-00000000"}
    env = exec_env(tmp_path, PYTHONPATH=str(blocked), **keys)
    run = run_exec(["go", "--provider", provider], env, cwd=workspace)
    assert_valid_stream(run.lines, run.returncode)
    assert (run.returncode, run.result.error.code) == (2, "MISSING_DEPENDENCY"), run.stderr
    assert run.result.error.fix == "pip install 'agentstream[agent]'"
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("dialect", ["canonical", "claude"])
def test_content_the_model_will_not_see_is_said_on_stderr(
    tmp_path: Path, workspace: Path, dialect: str
) -> None:
    """Only text reaches the model: a turn with an image is run on its text, and stderr says the image was not
    sent (the stream stays the chosen format alone)."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    content = [{"type": "text", "text": "what is in this picture?"}, image]
    if dialect == "claude":
        turn = {"type": "user", "message": {"role": "user", "content": content}}
    else:
        turn = {"type": "message", "role": "user", "content": content}
    run = run_exec(
        ["--provider", "demo", "--input-format", "stream-json", "--dialect", dialect],
        exec_env(tmp_path),
        cwd=workspace,
        stdin=(json.dumps(turn) + "\n").encode(),
    )
    assert run.returncode == 0, run.stderr
    assert "stdin line 1: image content is not sent to the model (only text is)" in run.stderr


def test_mcp_configs_are_read_as_text_or_files_and_what_cannot_be_used_is_said(
    tmp_path: Path, workspace: Path
) -> None:
    """Claude Code's --mcp-config, as text or as a file: a server that cannot start is named with why, and a
    value that cannot be read is said to be so without being echoed (it may hold a token); the run goes on."""
    config_file = tmp_path / "mcp.json"
    config_file.write_text(
        json.dumps({"mcpServers": {"files": {"command": "./x", "env": {"T": "tok-f1le"}}}})
    )
    configs = [
        json.dumps({"mcpServers": {"probe": {"command": "./y", "args": ["--token", "tok-t3xt"]}}}),
        str(config_file),
        '{"mcpServers": "tok-br0ken',
        json.dumps({"servers": {}}),
        json.dumps({"mcpServers": {"odd": {"type": "stdio"}}}),
    ]
    run = run_exec(
        ["--provider", "demo", *[arg for value in configs for arg in ("--mcp-config", value)], "hi"],
        exec_env(tmp_path),
        cwd=workspace,
    )
    assert run.returncode == 0
    assert run.stderr.splitlines() == [
        "agentstream exec: warning: --mcp-config value 3: neither a JSON object nor a readable file of one "
        "(JSONDecodeError)",
        "agentstream exec: warning: --mcp-config value 4: no mcpServers object",
        "agentstream exec: warning: --mcp-config value 5: server 'odd' is not a server description",
        "agentstream exec: warning: MCP server probe not connected: cannot start './y': No such file or directory",
        "agentstream exec: warning: MCP server files not connected: cannot start './x': No such file or directory",
    ]
    assert "tok-" not in run.stderr
