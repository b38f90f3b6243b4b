"""Running the official ACP TypeScript SDK's client and agent (tests/peers) against agentstream."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PEERS = Path(__file__).parent / "peers"
SDK = PEERS / "node_modules" / "@agentclientprotocol" / "sdk"
FAKE_CLI = Path(__file__).parent / "_fake_agent_cli.py"


def node() -> str:
    found = shutil.which("node")
    assert found, "node is missing: install Node.js (the ACP oracle is the official TypeScript SDK)"
    assert SDK.is_dir(), "the ACP TypeScript SDK is missing: cd tests/peers && npm install"
    return found


def agentstream(*args: str) -> list[str]:
    return [sys.executable, "-m", "agentstream", *args]


def acp_client(
    plan: dict[str, Any], agent: Sequence[str], env: Mapping[str, str], *, cwd: Path, timeout: float = 30
) -> list[dict[str, Any]]:
    """Drive ``agent`` with the SDK's client through ``plan``; what the client received, in order."""
    return acp_client_run(plan, agent, env, cwd=cwd, timeout=timeout)[0]


def acp_client_run(
    plan: dict[str, Any], agent: Sequence[str], env: Mapping[str, str], *, cwd: Path, timeout: float = 30
) -> tuple[list[dict[str, Any]], str]:
    """:func:`acp_client`, and what the agent said on stderr (the client passes it through)."""
    proc = subprocess.run(
        [node(), str(PEERS / "acp_client.mjs"), json.dumps(plan), "--", *agent],
        capture_output=True,
        env=dict(env),
        cwd=cwd,
        timeout=timeout,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert proc.returncode == 0 and lines and lines[-1]["kind"] == "exit", (
        proc.returncode,
        lines,
        proc.stderr.decode(),
    )
    return lines, proc.stderr.decode()


def rpc(ident: Any, method: str, params: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
    return message if params is None else {**message, "params": params}


def raw_acp(
    messages: list[dict[str, Any]], env: Mapping[str, str], cwd: Path
) -> tuple[list[dict[str, Any]], str]:
    """Send ``messages`` to ``agentstream acp`` (the demo agent) at once, then end its input; its answers, in
    order, and what it said on stderr."""
    data = "".join(json.dumps(m) + "\n" for m in messages).encode()
    agent = agentstream("acp", "--provider", "demo", "--no-publish")
    done = subprocess.run(agent, input=data, capture_output=True, env=dict(env), cwd=cwd, timeout=30)
    assert done.returncode == 0, done.stderr.decode()
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert all(a["jsonrpc"] == "2.0" and ("result" in a) != ("error" in a) for a in answers)
    return answers, done.stderr.decode()


def acp_agent(mode: str) -> list[str]:
    """The SDK-built scripted agent (tests/peers/acp_agent.mjs) in ``mode``."""
    return [node(), str(PEERS / "acp_agent.mjs"), mode]


def updates(received: list[dict[str, Any]], kind: str | None = None) -> list[dict[str, Any]]:
    found = [item["update"] for item in received if item["kind"] == "update"]
    return [u for u in found if kind is None or u["sessionUpdate"] == kind]


def of_kind(received: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [item for item in received if item["kind"] == kind]


def agent_text(received: list[dict[str, Any]]) -> str:
    return "".join(u["content"]["text"] for u in updates(received, "agent_message_chunk"))


def write_cassette(path: Path, calls: list[list[dict[str, Any]]]) -> Path:
    """A replay cassette (docs/agent.md): one line per model call."""
    lines = [
        {
            "cassette": 1,
            "provider": "openai",
            "model": "gpt-4.1-mini",
            "recorded_at": "2025-06-01T10:00:00.000Z",
        }
    ]
    usage = {
        "type": "usage",
        "input_tokens": 10,
        "output_tokens": 5,
        "cached_tokens": 0,
        "reasoning_tokens": 0,
    }
    for number, events in enumerate(calls, 1):
        if events and "error" in events[-1]:
            lines.append({"call": number, "events": events[:-1], "error": events[-1]["error"]})
            continue
        reason = "tool_calls" if any(e["type"] == "tool_call" for e in events) else "stop"
        lines.append({"call": number, "events": [*events, usage, {"type": "end", "reason": reason}]})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_call", "call_id": call_id, "name": name, "arguments": arguments}
