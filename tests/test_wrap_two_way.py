"""``wrap --two-way``: the real Claude Agent SDK drives ``agentstream-claude`` through the wrap.

The SDK is given a small shim script as its CLI; the shim runs
``agentstream wrap --two-way --from claude --to claude -- agentstream-claude``
with the SDK's flags, so every byte between the SDK and the agent crosses the
wrap: control requests and responses pass through verbatim, each turn's events
are re-emitted by the wrap. The agent talks to a loopback fake Anthropic server.
"""

from __future__ import annotations

import asyncio
import json
import select
import shlex
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from claude_agent_sdk import (  # the test extra: pip install -e '.[test]'
    ClaudeAgentOptions,
    ClaudeSDKClient,
    PermissionResultDeny,
    ResultMessage,
    StreamEvent,
    SystemMessage,
    query,
)

from _agent_fakes import FakeModelServer, anthropic_reply
from test_claude_sdk_driver import (
    check_two_turns_on_one_client_then_resume,
    cli_path,
    client_turn,
    options,
    texts,
    tool_results,
)


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

    with FakeModelServer(script) as server:
        opts = options(
            tmp_path,
            server,
            cli=wrapped_cli(tmp_path),
            permission_mode="default",
            can_use_tool=can_use_tool,
        )
        messages = asyncio.run(client_turn("please run it", opts))
    assert asked == [("shell", {"command": "touch forbidden.txt"}, "toolu_09")]
    assert not (tmp_path / "work" / "forbidden.txt").exists()
    denied = tool_results(server.posts[1].body)[0]
    assert denied["is_error"] and "not through this wrap" in denied["content"]
    final = [m for m in messages if isinstance(m, ResultMessage)]
    assert len(final) == 1 and final[0].result == "Fine, I left it."


async def _collect(prompt: str, opts: ClaudeAgentOptions) -> list[Any]:
    return [message async for message in query(prompt=prompt, options=opts)]


def test_interrupt_through_the_wrap_ends_the_turn_with_one_result(tmp_path: Path) -> None:
    script = [anthropic_reply("A long answer that never finishes " * 20, stall_after=8)]

    async def session(opts: ClaudeAgentOptions) -> list[Any]:
        async with ClaudeSDKClient(opts) as client:
            await client.query("talk for a long time")
            seen: list[Any] = []
            stream = client.receive_response()
            async for message in stream:
                seen.append(message)
                if isinstance(message, StreamEvent) and message.event.get("type") == "content_block_delta":
                    break
            await client.interrupt()
            return seen + [m async for m in stream]

    with FakeModelServer(script) as server:
        opts = options(tmp_path, server, cli=wrapped_cli(tmp_path), include_partial_messages=True)
        messages = asyncio.run(session(opts))
    final = [m for m in messages if isinstance(m, ResultMessage)]
    assert len(final) == 1 and final[0].is_error and final[0].subtype == "error_during_execution"
    assert texts(messages) == [], "the answer the child discarded is no assistant message here either"


# -- the relay itself, with a scripted Claude-speaking child ----------------------

FAKE_CLAUDE = """
import json, sys, time

def say(line):
    sys.stdout.write(line if isinstance(line, str) else json.dumps(line) + "\\n")
    sys.stdout.flush()

INIT = {"type": "system", "subtype": "init", "session_id": "child-1", "tools": [], "model": "m"}
def text(words):
    return {"type": "assistant", "session_id": "child-1",
            "message": {"id": "msg_1", "role": "assistant", "model": "m",
                        "content": [{"type": "text", "text": words}]}}
RESULT = {"type": "result", "subtype": "success", "is_error": False, "result": "done",
          "session_id": "child-1", "num_turns": 1, "duration_ms": 1}
"""


def _fake_child(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "fake_claude.py"
    script.write_text(FAKE_CLAUDE + textwrap.dedent(body))
    return script


def _two_way(script: Path, *options: str) -> subprocess.Popen[bytes]:
    argv = [str(Path(cli_path()).with_name("agentstream")), "wrap", "--two-way", "--from", "claude"]
    argv += ["--to", "claude", "--no-publish", *options, "--", sys.executable, str(script)]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    return subprocess.Popen(argv, bufsize=0, **pipes)  # unbuffered: select() sees every line


def _line(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> bytes:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "the wrap held a line back"
    return proc.stdout.readline()


def test_control_lines_pass_through_verbatim_and_at_once_in_both_directions(tmp_path: Path) -> None:
    request = '{"type":"control_request",  "request_id":"r1", "request":{"subtype":"can_use_tool"}}\n'
    script = _fake_child(
        tmp_path,
        f"""
        say({request!r})
        answer = json.loads(sys.stdin.readline())  # the client's answer, through the wrap's stdin
        say(INIT)
        say(text("the answer was " + answer["response"]["subtype"]))
        say({{"type": "keep_alive"}})
        say(RESULT)
        sys.stdin.read()  # the session goes on until the client closes it
        """,
    )
    proc = _two_way(script)
    assert proc.stdin is not None and proc.stdout is not None
    assert _line(proc) == request.encode(), "the control line is written unchanged before the child goes on"
    proc.stdin.write(b'{"type":"control_response","response":{"subtype":"success","request_id":"r1"}}\n')
    proc.stdin.flush()
    turn = [_line(proc) for _ in range(5)]  # init, child_session, assistant, keep_alive, result
    assert b'{"type": "keep_alive"}\n' in turn, "unchanged (it may overtake a message the reader still holds)"
    events = [json.loads(line) for line in turn if line != b'{"type": "keep_alive"}\n']
    assert [e["type"] for e in events] == ["system", "system", "assistant", "result"]
    assert events[2]["message"]["content"][0]["text"] == "the answer was success"
    assert events[3]["subtype"] == "success" and events[3]["session_id"] == events[0]["session_id"]
    assert events[0]["session_id"] == "child-1", (
        "the turn's lines name the child's session, the one to resume"
    )
    proc.stdin.close()
    assert proc.wait(timeout=20) == 0 and proc.stdout.read() == b""


def test_session_state_lines_pass_through_unchanged_where_the_child_wrote_them(tmp_path: Path) -> None:
    """Claude Code's ``session_state_changed`` lines (the Claude Agent SDK closes the child's stdin at ``idle``):
    the ``running`` before a turn's ``init`` and the ``idle`` after its result go out as they came, in their
    place, even when the result and the ``idle`` arrive in one piece, and not held until a next turn."""
    state = '{"type":"system","subtype":"session_state_changed","state":"%s","sdk_host_only":true}\n'
    script = _fake_child(
        tmp_path,
        f"""
        say({state % "running"!r})
        say(INIT)
        say(text("hello"))
        say(json.dumps(RESULT) + "\\n" + {state % "idle"!r})  # one write: one piece for the wrap to read
        sys.stdin.read()
        """,
    )
    proc = _two_way(script)
    assert proc.stdin is not None and proc.stdout is not None
    turn = [
        _line(proc, timeout=10) for _ in range(6)
    ]  # running, init, child_session, assistant, result, idle
    assert turn[0] == (state % "running").encode() and turn[-1] == (state % "idle").encode()
    assert [json.loads(line)["type"] for line in turn[1:-1]] == ["system", "system", "assistant", "result"]
    proc.stdin.close()
    assert proc.wait(timeout=20) == 0 and proc.stdout.read() == b""


def test_a_stall_inside_a_turn_ends_it_stalled_but_silence_between_turns_is_waiting(tmp_path: Path) -> None:
    script = _fake_child(
        tmp_path,
        """
        time.sleep(1.5)  # no turn open: waiting for the client is not a stall
        say(INIT)
        say(text("working"))
        time.sleep(60)  # inside a turn: a stall
        """,
    )
    proc = _two_way(script, "--stall-timeout", "0.5", "--grace", "0.5")
    out, err = proc.communicate(timeout=30)
    events = [json.loads(line) for line in out.splitlines()]
    assert proc.returncode == 124, err.decode()
    assert [e["type"] for e in events] == ["system", "system", "assistant", "result"]
    assert events[-1]["is_error"] and events[-1]["errors"] == [
        "the child printed nothing for 0.5s and was stopped"
    ]


def test_a_turn_whose_result_lacks_the_running_totals_keeps_them(tmp_path: Path) -> None:
    """The child's second result says neither ``total_cost_usd`` nor ``modelUsage``: that turn adds nothing known,
    and the third turn's share is what they grew by since the first, so the session's totals stay the child's."""
    script = _fake_child(
        tmp_path,
        """
        def used(tokens, cost):
            return {"total_cost_usd": cost, "modelUsage": {"m": {"inputTokens": tokens, "outputTokens": 1,
                    "cacheReadInputTokens": 0, "cacheCreationInputTokens": 0, "costUSD": cost}}}
        for totals in (used(10, 0.25), {}, used(30, 0.75)):
            say(INIT)
            say(text("turn"))
            say({**RESULT, **totals})
        """,
    )
    proc = _two_way(script)
    out, err = proc.communicate(b"", timeout=30)
    results = [json.loads(line) for line in out.splitlines() if json.loads(line)["type"] == "result"]
    assert proc.returncode == 0, err.decode()
    assert [r.get("total_cost_usd") for r in results] == [0.25, 0.25, 0.75]
    assert [r.get("modelUsage", {}).get("m", {}).get("inputTokens") for r in results] == [10, 10, 30]


def test_a_session_without_a_turn_writes_nothing_and_exits_0(tmp_path: Path) -> None:
    proc = _two_way(_fake_child(tmp_path, "sys.stdin.read()\n"))
    out, err = proc.communicate(b"", timeout=30)
    assert (proc.returncode, out) == (0, b""), err.decode()


def test_two_way_needs_claude_on_both_sides() -> None:
    argv = [str(Path(cli_path()).with_name("agentstream")), "wrap", "--two-way", "--", "true"]
    done = subprocess.run(argv, capture_output=True, timeout=30)
    assert done.returncode == 2
    assert "--two-way relays Claude's control protocol" in done.stderr.decode()


def test_sigterm_between_turns_ends_the_session_with_an_interrupted_turn(tmp_path: Path) -> None:
    script = _fake_child(
        tmp_path,
        """
        import signal
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # a child that exits cleanly when asked
        say(INIT)
        say(RESULT)
        sys.stdin.read()
        """,
    )
    proc = _two_way(script)
    first = [json.loads(_line(proc)) for _ in range(3)]
    assert [e["type"] for e in first] == ["system", "system", "result"] and not first[-1]["is_error"]
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    rest = [json.loads(line) for line in out.splitlines()]
    assert proc.returncode == 143, err.decode()
    assert [e["type"] for e in rest] == ["system", "result"]
    assert rest[-1]["is_error"] and "interrupted by SIGTERM" in rest[-1]["errors"][0]


def test_a_signal_as_the_session_hands_the_signals_back_keeps_the_last_turns_code(tmp_path: Path) -> None:
    """The session over, a signal landing the moment the command line's handler is back must not add a turn
    or change the exit code: the last turn's result stands."""
    script = _fake_child(tmp_path, "say(INIT)\nsay(RESULT)\n")
    wrap = ["wrap", "--two-way", "--from", "claude", "--to", "claude", "--no-publish"]
    driver = f"""
import signal, sys
from agentstream import _signals
from agentstream.cli import entry
restore = _signals.SignalHandlers.restore
def restore_then_signal(self, *args):
    restore(self, *args)
    if getattr(self.handler, "__qualname__", "") == "_Forwarder._on_signal":
        signal.raise_signal(signal.SIGTERM)
_signals.SignalHandlers.restore = restore_then_signal
sys.argv = ["agentstream", *{[*wrap, "--", sys.executable, str(script)]!r}]
entry()
"""
    done = subprocess.run(
        [sys.executable, "-c", driver], stdin=subprocess.DEVNULL, capture_output=True, timeout=30
    )
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0, done.stderr.decode()
    assert [e["type"] for e in events] == ["system", "system", "result"] and not events[-1]["is_error"]


def test_each_turns_init_says_the_childs_permission_mode_model_and_tools(tmp_path: Path) -> None:
    """The SDK reads the session's mode and model from ``init``: through the wrap they are the child's, as the
    client set them (options at start, ``set_permission_mode`` and ``set_model`` between turns), not the wrap's
    defaults."""
    script = [anthropic_reply("One."), anthropic_reply("Two.")]

    async def session(opts: ClaudeAgentOptions) -> list[dict[str, Any]]:
        inits = []
        async with ClaudeSDKClient(opts) as client:
            for mode, model in ((None, None), ("acceptEdits", "claude-other")):
                if mode is not None:
                    await client.set_permission_mode(mode)
                    await client.set_model(model)
                await client.query("hello")
                messages = [m async for m in client.receive_response()]
                inits += [m.data for m in messages if isinstance(m, SystemMessage) and m.subtype == "init"]
        return inits

    with FakeModelServer(script) as server:
        opts = options(
            tmp_path,
            server,
            cli=wrapped_cli(tmp_path),
            permission_mode="bypassPermissions",
            model="claude-first",
        )
        inits = asyncio.run(session(opts))
    assert [(i["permissionMode"], i.get("model")) for i in inits] == [
        ("bypassPermissions", "claude-first"),
        ("acceptEdits", "claude-other"),
    ]
    assert "shell" in inits[0]["tools"] and inits[0]["cwd"] == str(tmp_path / "work")


def test_two_turns_through_the_wrap_are_one_priced_session_a_later_run_resumes(tmp_path: Path) -> None:
    """The SDK's way to go on later: ``resume=`` the ``session_id`` of a ``ResultMessage``. It reaches the child as
    ``--resume`` through the shim, so the id must be the child's conversation, on every turn, as Claude Code's is;
    each turn gets its own answer and one result, and ``total_cost_usd`` is the session's running total."""
    check_two_turns_on_one_client_then_resume(tmp_path, cli=wrapped_cli(tmp_path))
