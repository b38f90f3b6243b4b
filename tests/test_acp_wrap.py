"""``wrap --from acp`` and ``spawn(..., dialect="acp")`` against an ACP agent built with the official SDK.

tests/peers/acp_agent.mjs is scripted per mode: a normal turn, a permission
request, a cancel, max turns, a JSON-RPC error, a crash, a hang and garbage.
Every stream must validate and end in one result whose exit code is the process's.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from _acp_support import acp_agent, agentstream
from _agent_fakes import ExecRun, assert_valid_stream, exec_env
from agentstream import protocol as p
from agentstream.consumer import spawn


def wrap(tmp_path: Path, mode: str, *options: str) -> ExecRun:
    env = exec_env(tmp_path / "home")
    command = agentstream(
        "wrap", "--no-publish", "--from", "acp", "-p", "hello there", *options, "--", *acp_agent(mode)
    )
    proc = subprocess.run(command, capture_output=True, env=env, cwd=tmp_path, timeout=30)
    run = ExecRun(proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace"))
    assert_valid_stream(run.lines, run.returncode)
    return run


def test_a_turn_becomes_the_canonical_stream(tmp_path: Path) -> None:
    run = wrap(tmp_path, "text")
    assert run.returncode == 0 and run.result.ok
    types = [e.type for e in run.events]
    assert types[0] == "start" and types[-1] == "result"
    (child,) = [e for e in run.of_type("status") if e.status == "child_session"]
    assert child.message == "fake-acp-session-1"
    messages = [e.content for e in run.of_type("message")]
    assert messages == ["You said: hello there", "All done."]
    assert [e.content for e in run.of_type("reasoning")] == ["thinking about it"]
    (call,), (result,) = run.of_type("tool_call"), run.of_type("tool_result")
    assert (call.call_id, call.name, call.arguments) == ("tc-1", "Read notes.txt", {"path": "notes.txt"})
    assert (result.call_id, result.status, result.output) == ("tc-1", "success", "the notes")
    (plan,) = [e for e in run.of_type("progress") if e.name == "plan"]
    assert (plan.current, plan.total) == (1, 2) and "[x] read the file" in str(plan.message)
    assert run.result.result == "All done."


@pytest.mark.parametrize(
    ("mode", "status", "says"),
    [("full", "success", "Removed it."), ("default", "error", "I did not remove it.")],
)
def test_permission_requests_are_answered_by_the_mode(
    tmp_path: Path, mode: str, status: str, says: str
) -> None:
    run = wrap(tmp_path, "permission", "--permission-mode", mode)
    (request,) = run.of_type("permission_request")
    assert request.call_id == "tc-2" and request.arguments == {"command": "rm -rf build"}
    (result,) = run.of_type("tool_result")
    assert result.status == status
    assert run.of_type("message")[-1].content == says and run.returncode == 0


@pytest.mark.parametrize(
    ("mode", "code", "error", "exit_code"),
    [
        ("max_turns", "MAX_TURNS", "max_turns", 3),
        ("error", "RATE_LIMITED", "error", 1),
        ("garbage", "MALFORMED_EVENT", "error", 1),
        ("future", "MALFORMED_EVENT", "error", 1),  # ACP: a client given a version it lacks disconnects
        ("crash", "PROCESS_CRASHED", "error", 3),
    ],
)
def test_failures_end_the_stream_well_formed(
    tmp_path: Path, mode: str, code: str, error: str, exit_code: int
) -> None:
    run = wrap(tmp_path, mode)
    assert run.returncode == exit_code and not run.result.ok and run.result.subtype == error
    assert isinstance(run.result.error, p.ErrorInfo) and run.result.error.code == code
    calls = {e.call_id for e in run.of_type("tool_call")}
    assert calls == {e.call_id for e in run.of_type("tool_result")}  # an open call still gets its result


def test_a_new_message_id_starts_a_new_message(tmp_path: Path) -> None:
    run = wrap(tmp_path, "messages")
    assert [e.content for e in run.of_type("message")] == ["first message.", "second message."]
    (said,) = [e for e in run.of_type("log") if "content block" in e.message]  # once, for two images
    assert said.level == "warn" and "'image'" in said.message


def test_updates_of_another_session_are_not_this_turns(tmp_path: Path) -> None:
    run = wrap(tmp_path, "sessions")
    assert [e.content for e in run.of_type("message")] == ["mine"]


def test_garbage_lines_are_reported_and_lose_nothing(tmp_path: Path) -> None:
    run = wrap(tmp_path, "garbage")
    bad = [e for e in run.of_type("error") if e.recoverable]
    assert bad and "this is not json" in bad[0].message


def test_a_banner_line_before_an_agentstream_agent_starts_no_exchange_of_errors(tmp_path: Path) -> None:
    """Both sides agentstream: the client's parse error about the banner is answered by nothing, so the
    banner is reported once (answering each other's errors once made thousands of reports in a turn)."""
    agent = f"echo starting agent v1.0; exec {sys.executable} -m agentstream acp --provider demo"
    command = agentstream("wrap", "--no-publish", "--from", "acp", "-p", "hi", "--", "sh", "-c", agent)
    done = subprocess.run(
        command, capture_output=True, env=exec_env(tmp_path / "home"), cwd=tmp_path, timeout=60
    )
    assert done.returncode == 0, done.stderr
    (banner,) = [e for e in map(p.decode, done.stdout.splitlines()) if isinstance(e, p.Error)]
    assert banner.code == "MALFORMED_EVENT" and "starting agent v1.0" in banner.message


def test_a_hung_agent_is_stopped_after_the_idle_timeout(tmp_path: Path) -> None:
    run = wrap(tmp_path, "hang", "--idle-timeout", "3")  # room for node to start on a loaded machine
    assert (
        run.returncode == 124
        and isinstance(run.result.error, p.ErrorInfo)
        and run.result.error.code == "TIMEOUT"
    )
    assert run.of_type("message")[0].content == "thinking forever"


def test_sigint_to_wrap_cancels_the_acp_turn(tmp_path: Path) -> None:
    env = exec_env(tmp_path / "home")
    command = agentstream("wrap", "--no-publish", "--from", "acp", "-p", "hi", "--", *acp_agent("cancel"))
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if b'"message_delta"' in line:
            proc.send_signal(signal.SIGINT)
    proc.wait(timeout=20)
    run = ExecRun(proc.returncode, b"".join(lines), "")
    assert_valid_stream(run.lines, run.returncode)
    assert run.returncode == 130 == run.result.exit_code and run.result.subtype == "interrupted"


def test_a_tool_calls_output_from_an_earlier_update_is_its_result(tmp_path: Path) -> None:
    """ACP: an update without ``content`` leaves the call's content as it was, so the output stays."""
    run = wrap(tmp_path, "streamed")
    (result,) = run.of_type("tool_result")
    assert (result.call_id, result.status, result.output) == ("tc-4", "success", "compiled 3 files")


def test_a_permission_asked_after_the_cancel_is_answered_cancelled(tmp_path: Path) -> None:
    """ACP: once the client sent ``session/cancel`` it answers every permission request ``cancelled``, whatever
    the mode would have chosen."""
    env = exec_env(tmp_path / "home")
    command = agentstream(
        "wrap",
        "--no-publish",
        "--from",
        "acp",
        "-p",
        "hi",
        "--permission-mode",
        "full",
        "--",
        *acp_agent("late_ask"),
    )
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if b'"message_delta"' in line and len(lines) < 4:
            proc.send_signal(signal.SIGINT)
    proc.wait(timeout=20)
    run = ExecRun(proc.returncode, b"".join(lines), "")
    assert_valid_stream(run.lines, run.returncode)
    assert run.of_type("message")[-1].content == "asked after the cancel: cancelled"
    assert run.returncode == 130


def test_spawn_with_the_acp_dialect(tmp_path: Path) -> None:
    with spawn(acp_agent("cancel"), dialect="acp", prompt="stop me", cwd=str(tmp_path)) as child:
        events = []
        for event in child:
            events.append(event)
            if isinstance(event, p.MessageDelta):
                child.cancel(signal.SIGINT)  # session/cancel; the agent answers stopReason "cancelled"
    result = events[-1]
    assert isinstance(result, p.Result) and result.subtype == "interrupted" and result.exit_code == 130
    assert isinstance(events[0], p.Start) and events[0].session_id == "fake-acp-session-1"


def test_wrap_from_acp_needs_a_prompt(tmp_path: Path) -> None:
    proc = subprocess.run(
        agentstream("wrap", "--from", "acp", "--", "true"),
        capture_output=True,
        env=exec_env(tmp_path / "home"),
        timeout=20,
    )
    assert proc.returncode == 2 and b"needs a prompt" in proc.stderr


def test_spawn_options_an_acp_agent_cannot_use_are_accepted_but_a_misspelt_one_is_a_type_error() -> None:
    """One call serves any dialect (``stdin``, ``turns`` … mean nothing to ACP), but a typo is not dropped silently."""
    child = spawn(["agent"], dialect="acp", prompt="hi", stdin=None, turns="many", stall_timeout_s=5.0)
    assert child.prompt == "hi"  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="permision_mode"):
        spawn(["agent"], dialect="acp", prompt="hi", permision_mode="bypassPermissions")
