"""What a grant (``--allowedTools``, a client's hook, a permission decision) lets run, and what the stream says."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any, Final

import pytest
from claude_agent_sdk import HookMatcher, ResultMessage

from _agent_fakes import FakeModelServer, anthropic_reply, exec_command, exec_env, run_exec
from test_claude_sdk_driver import client_turn, options, tool_results


def cassette(tmp_path: Path, calls: list[tuple[str, dict[str, Any]]]) -> str:
    """A recorded conversation: one tool call per model call, then "done"."""
    lines = [
        {"cassette": 1, "provider": "openai", "model": "gpt-test", "recorded_at": "2025-06-01T10:00:00.000Z"}
    ]
    usage = {
        "type": "usage",
        "input_tokens": 1,
        "output_tokens": 1,
        "cached_tokens": 0,
        "reasoning_tokens": 0,
    }
    for number, (name, arguments) in enumerate(calls, 1):
        call = {"type": "tool_call", "call_id": f"c{number}", "name": name, "arguments": arguments}
        lines.append({"call": number, "events": [call, usage, {"type": "end", "reason": "tool_calls"}]})
    done = [{"type": "text", "text": "done"}, usage, {"type": "end", "reason": "stop"}]
    lines.append({"call": len(calls) + 1, "events": done})
    path = tmp_path / "calls.cassette.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def results(stdout: bytes) -> list[dict[str, Any]]:
    return [event for line in stdout.splitlines() if (event := json.loads(line))["type"] == "tool_result"]


def test_allowed_tools_run_in_default_mode_and_the_rest_is_denied_naming_that_mode(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    calls = [("write_file", {"path": "made.txt", "content": "hi\n"}), ("shell", {"command": "touch ran"})]
    default = ["--permission-mode", "default", "--no-publish"]
    run = run_exec(
        ["go", "--cassette", cassette(tmp_path, calls), *default, "--allowedTools", "write_file"],
        exec_env(tmp_path / "home"),
        cwd=work,
    )
    assert run.returncode == 0, run.stderr
    written, shell = results(run.stdout)
    assert written["status"] == "success" and (work / "made.txt").read_text() == "hi\n"
    assert shell["status"] == "denied" and not (work / "ran").exists()
    assert "permission mode default" in shell["error"] and "read-only" not in shell["error"]


def test_default_mode_without_a_grant_offers_only_reads_and_names_its_mode(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    write = [("write_file", {"path": "x", "content": ""})]
    run = run_exec(
        ["go", "--cassette", cassette(tmp_path, write), "--permission-mode", "default", "--no-publish"],
        exec_env(tmp_path / "home"),
        cwd=work,
    )
    assert run.events[0].tools == ["read_file", "list_dir", "glob", "grep"]
    (denied,) = results(run.stdout)
    assert denied["status"] == "denied" and "permission mode default" in denied["error"]
    assert not (work / "x").exists()


def test_a_hook_allow_runs_shell_without_a_permission_prompt(tmp_path: Path) -> None:
    """The Claude Agent SDK's plain setup (hooks; no ``can_use_tool``, no ``permission_mode``): a hook's allow
    runs the call; a call no one allows is denied in Claude Code's words."""

    async def allow(data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}

    script = [
        anthropic_reply(tool_calls=[("toolu_1", "shell", {"command": "echo ran > made.txt"})]),
        anthropic_reply(tool_calls=[("toolu_2", "write_file", {"path": "w.txt", "content": "x"})]),
        anthropic_reply("Done."),
    ]
    with FakeModelServer(script) as server:
        opts = options(tmp_path, server, hooks={"PreToolUse": [HookMatcher(matcher="Bash", hooks=[allow])]})
        messages = asyncio.run(client_turn("go", opts))
    assert (tmp_path / "work" / "made.txt").read_text() == "ran\n"
    assert not (tmp_path / "work" / "w.txt").exists()
    denied = tool_results(server.posts[2].body)[-1]
    assert denied["is_error"]
    assert denied["content"].endswith(
        "Claude requested permissions to use Write, but you haven't granted it yet."
    )
    assert [m.subtype for m in messages if isinstance(m, ResultMessage)] == ["success"]


def test_arguments_a_decision_edited_are_recorded_in_the_stream(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    args = ["--cassette", cassette(tmp_path, [("shell", {"command": "echo asked"})]), "--no-publish"]
    args += [
        "--input-format",
        "stream-json",
        "--permission-prompt-tool",
        "stdio",
        "--permission-mode",
        "default",
    ]
    proc = subprocess.Popen(
        exec_command(*args, "--heartbeat", "0"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=exec_env(tmp_path / "home"),
        cwd=work,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b'{"type":"message","role":"user","content":"go"}\n')
    proc.stdin.flush()
    events = []
    for line in proc.stdout:
        event = json.loads(line)
        events.append(event)
        if event["type"] == "permission_request":
            answer = {"type": "permission_decision", "call_id": event["call_id"], "decision": "allow"}
            answer["arguments"] = {"command": "echo edited"}
            proc.stdin.write(json.dumps(answer).encode() + b"\n")
            proc.stdin.flush()
        if event["type"] == "result":
            proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    kinds = [event["type"] for event in events]
    (log,) = [event for event in events if event["type"] == "log"]
    assert kinds.index("permission_request") < kinds.index("log") < kinds.index("tool_result")
    assert (
        log["message"]
        == 'shell runs with the arguments the permission decision gave: {"command":"echo edited"}'
    )
    (result,) = [event for event in events if event["type"] == "tool_result"]
    assert result["output"] == "edited\n"


def two_way(
    tmp_path: Path, calls: list[tuple[str, dict[str, Any]]], lines: list[dict[str, Any]], *argv: str
) -> bytes:
    """``exec --input-format stream-json`` replaying ``calls`` in ``tmp_path/work``, fed ``lines``; its stdout."""
    (tmp_path / "work").mkdir()
    done = subprocess.run(
        exec_command(
            "--cassette", cassette(tmp_path, calls), "--no-publish", "--input-format", "stream-json", *argv
        ),
        input="".join(json.dumps(line) + "\n" for line in lines).encode(),
        capture_output=True,
        env=exec_env(tmp_path / "home"),
        cwd=tmp_path / "work",
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


GO: Final = {"type": "message", "role": "user", "content": "go"}


@pytest.mark.parametrize(
    ("first", "then", "offered", "written"),
    [("full", "workspace-write", True, False), ("plan", "full", True, True), ("full", "plan", False, False)],
    ids=["kept-in-the-workspace", "widened", "made-read-only"],
)
def test_a_mode_changed_mid_session_is_the_whole_mode_offers_and_paths_included(
    tmp_path: Path, first: str, then: str, offered: bool, written: bool
) -> None:
    """As if the session had started in the new mode: the tools offered and where they may write change too,
    not only what runs without asking."""
    outside = tmp_path / "outside.txt"
    calls = [("write_file", {"path": str(outside), "content": "x\n"})]
    settings = {"type": "settings", "permission_mode": then}
    allowed = ["--allow-dangerously-skip-permissions"] if then == "full" else []
    stdout = two_way(tmp_path, calls, [settings, GO], "--permission-mode", first, *allowed)
    start = next(json.loads(line) for line in stdout.splitlines() if b'"type":"start"' in line)
    assert ("write_file" in start["tools"]) is offered
    (result,) = results(stdout)
    assert (result["status"] == "success") is written and outside.exists() is written


@pytest.mark.parametrize("then", ["full", "bypassPermissions"])
def test_a_session_not_started_unasked_cannot_be_switched_to_it(tmp_path: Path, then: str) -> None:
    """As Claude Code refuses it: a mode that runs every call unasked only for a session started in one, or
    allowed to enter one (--allow-dangerously-skip-permissions). The refusal is said; the mode stays."""
    outside = tmp_path / "outside.txt"
    calls = [("write_file", {"path": str(outside), "content": "x\n"})]
    settings = {"type": "settings", "permission_mode": then}
    stdout = two_way(tmp_path, calls, [settings, GO], "--permission-mode", "plan")
    assert f"cannot switch to {then}".encode() in stdout and b"--allow-dangerously-skip-permissions" in stdout
    (result,) = results(stdout)
    assert result["status"] != "success" and not outside.exists()


@pytest.mark.parametrize("mode", ["dontAsk", "plan"])
def test_modes_that_never_ask_deny_without_a_permission_request(tmp_path: Path, mode: str) -> None:
    """dontAsk denies what was not granted beforehand; plan only reads: asking would mean nothing."""
    calls = [("shell", {"command": "touch ran"})]
    stdout = two_way(tmp_path, calls, [GO], "--permission-mode", mode, "--permission-prompt-tool", "stdio")
    assert b'"type":"permission_request"' not in stdout
    (result,) = results(stdout)
    assert result["status"] == "denied" and f"permission mode {mode}" in result["error"]
    assert not (tmp_path / "work" / "ran").exists()
