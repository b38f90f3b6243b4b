"""MCP servers as the agent's tools: stdio servers started for a run, their tools offered as ``mcp__SERVER__TOOL``.

A client names servers in Claude Code's ``--mcp-config`` shape (``exec``, the Claude Agent SDK's
``mcp_servers``) or in ACP's ``mcpServers`` (``acp``). Each stdio server is started when the run starts,
in its own process group, with a small default environment (``HOME``, ``PATH``…, as MCP's own clients
give one) plus the variables it was configured with: not the agent's, which hold model API keys. Its
tools join the run's under the permission mode as ``execute`` tools. A server that cannot be started or
answered is ``failed`` (with why) and the run goes on without it; http, sse and in-process (``sdk``)
servers are not connected. See docs/agent.md.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, cast

from agentstream.agent.tools._base import Tool, ToolContext, ToolFailure, ToolOutcome, ToolSpec

__all__ = ["McpServer", "McpTools", "servers_from_config"]

PROTOCOL_VERSION: Final = "2025-06-18"
TOOL_PREFIX: Final = "mcp__"
"""How the tools of MCP servers are named (``mcp__SERVER__TOOL``), as in Claude Code."""
DEFAULT_ENV: Final = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR")
_TOOL_NAME_CHARS: Final = re.compile(r"[^A-Za-z0-9_-]")
_TOOL_NAME_LIMIT: Final = 64
"""The longest tool name the model APIs take."""


@dataclass(frozen=True)
class McpServer:
    """An MCP server a client asks the agent to connect to."""

    name: str
    transport: Literal["stdio", "http", "sse", "sdk"]
    command: str = ""
    """stdio: the program to start, with ``args`` and ``env`` (added to a small default environment)."""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str = ""
    """http and sse: where the server is, and the ``headers`` to send it."""
    headers: tuple[tuple[str, str], ...] = ()


def servers_from_config(configs: Sequence[str] | None) -> tuple[list[McpServer], list[str]]:
    """The servers ``--mcp-config`` values name (JSON text, or a file of it, in the shape of Claude Code's
    ``.mcp.json``), and what could not be read, each problem without the value (it may hold a token)."""
    servers: dict[str, McpServer] = {}
    problems: list[str] = []
    for number, value in enumerate(configs or (), start=1):
        where = f"--mcp-config value {number}"
        try:
            text = value if value.lstrip().startswith("{") else Path(value).read_text(encoding="utf-8")
            config = json.loads(text)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            problems.append(
                f"{where}: neither a JSON object nor a readable file of one ({type(exc).__name__})"
            )
            continue
        entries = config.get("mcpServers") if isinstance(config, dict) else None
        if not isinstance(entries, dict):
            problems.append(f"{where}: no mcpServers object")
            continue
        for name, entry in entries.items():
            server = _claude_entry(name, entry)
            if server is None:
                problems.append(f"{where}: server {name!r} is not a server description")
            elif name not in servers:
                servers[name] = server
    return list(servers.values()), problems


def _claude_entry(name: str, entry: Any) -> McpServer | None:
    if not isinstance(entry, dict):
        return None
    transport = entry.get("type", "stdio")
    if transport in ("http", "sse"):
        url, headers = entry.get("url"), entry.get("headers") or {}
        if not isinstance(url, str) or not isinstance(headers, dict):
            return None
        return McpServer(
            name, transport, url=url, headers=tuple((str(k), str(v)) for k, v in headers.items())
        )
    if transport == "sdk":
        return McpServer(name, "sdk")
    command, args, env = entry.get("command"), entry.get("args") or [], entry.get("env") or {}
    if transport != "stdio" or not isinstance(command, str) or not command:
        return None
    if not isinstance(args, list) or not isinstance(env, dict):
        return None
    return McpServer(
        name,
        "stdio",
        command=command,
        args=tuple(map(str, args)),
        env=tuple((str(k), str(v)) for k, v in env.items()),
    )


class McpError(Exception):
    """A server that did not answer, or answered a request with an error."""


class _Connection:
    """One stdio server: JSON-RPC 2.0, one message per line, answers matched to requests by id."""

    def __init__(self, server: McpServer, cwd: Path) -> None:
        self.server = server
        env = {name: os.environ[name] for name in DEFAULT_ENV if name in os.environ}
        self.proc = subprocess.Popen(
            [server.command, *server.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env={**env, **dict(server.env)},
            start_new_session=True,  # its own group: stopping it stops what it started
        )
        self._lock = threading.Lock()
        self._next_id = 0
        self._waiting: dict[int, tuple[threading.Event, list[Any]]] = {}
        self.stderr_tail: deque[str] = deque(maxlen=5)
        threading.Thread(target=self._read, name=f"mcp-{server.name}", daemon=True).start()
        threading.Thread(target=self._read_stderr, name=f"mcp-{server.name}-err", daemon=True).start()

    def request(
        self, method: str, params: dict[str, Any], timeout: float, cancel: threading.Event | None = None
    ) -> Any:
        done, slot = threading.Event(), cast("list[dict[str, Any]]", [])
        with self._lock:
            self._next_id += 1
            ident = self._next_id
            self._waiting[ident] = (done, slot)
        try:
            self._send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
            waited = 0.0
            while not done.wait(0.05):
                waited += 0.05
                if cancel is not None and cancel.is_set():
                    self.notify("notifications/cancelled", {"requestId": ident, "reason": "interrupted"})
                    raise McpError("interrupted")
                if waited >= timeout:
                    raise McpError(f"no answer to {method} in {timeout:g} s")
                if self.proc.poll() is not None and not done.is_set():
                    raise McpError(self._exited())
        finally:
            with self._lock:
                self._waiting.pop(ident, None)
        answer = slot[0]
        if "error" in answer:
            error = answer["error"] if isinstance(answer["error"], dict) else {}
            raise McpError(str(error.get("message") or "the server answered with an error"))
        return answer.get("result")

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        self._send({"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})})

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            with self._lock:
                self.proc.stdin.write(json.dumps(message).encode() + b"\n")
                self.proc.stdin.flush()
        except (OSError, ValueError) as exc:
            raise McpError(
                self._exited() if self.proc.poll() is not None else f"cannot write to it: {exc}"
            ) from None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                message = json.loads(raw)
            except ValueError:
                continue  # not JSON-RPC: a server that prints on stdout; its messages still get through
            if not isinstance(message, dict):
                continue
            if "method" in message and "id" in message:  # a request of the server's: we offer nothing
                answer = {"jsonrpc": "2.0", "id": message["id"]}
                if message["method"] == "ping":
                    answer["result"] = {}
                else:
                    answer["error"] = {"code": -32601, "message": f"this client has no {message['method']}"}
                try:
                    self._send(answer)
                except McpError:
                    return
                continue
            with self._lock:
                waiting = self._waiting.get(message.get("id"))  # type: ignore[arg-type]
            if waiting is not None:
                waiting[1].append(message)
                waiting[0].set()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").strip()
            if line:
                self.stderr_tail.append(line[:300])

    def _exited(self) -> str:
        said = f"; its stderr ends: {self.stderr_tail[-1]}" if self.stderr_tail else ""
        return f"it exited with status {self.proc.poll()}{said}"

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=1)
        except (OSError, subprocess.TimeoutExpired):
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(self.proc.pid, sig)
                    self.proc.wait(timeout=2)
                    break
                except (OSError, subprocess.TimeoutExpired):
                    continue


@dataclass
class _Status:
    name: str
    status: Literal["connected", "failed"]
    error: str = ""
    tools: tuple[str, ...] = ()

    def as_claude(self) -> dict[str, Any]:
        """As Claude Code's ``mcp_status`` answer describes a server."""
        out: dict[str, Any] = {"name": self.name, "status": self.status}
        if self.error:
            out["error"] = self.error
        if self.tools:
            out["tools"] = [{"name": name} for name in self.tools]
        return out


class McpTools:
    """The MCP servers of one run: started together, their tools, and stopped at the end."""

    def __init__(self, servers: Iterable[McpServer], cwd: Path) -> None:
        self.statuses: list[_Status] = []
        self.tools: list[Tool] = []
        self.renamed: list[tuple[str, str, str]] = []
        """(server, tool, name offered) of each tool whose name, made safe, another tool already had."""
        self._connections: list[_Connection] = []
        taken: set[str] = set()
        servers = list(servers)
        results: list[tuple[_Connection | None, list[dict[str, Any]], str]] = [(None, [], "")] * len(servers)

        def connect(index: int, server: McpServer) -> None:
            results[index] = self._connect(server, cwd)

        threads = [threading.Thread(target=connect, args=item, daemon=True) for item in enumerate(servers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for server, (connection, tools, error) in zip(servers, results, strict=True):
            if connection is None:
                self.statuses.append(_Status(server.name, "failed", error))
                continue
            self._connections.append(connection)
            offered = [self._tool(connection, tool, taken) for tool in tools]
            self.tools += offered
            self.statuses.append(_Status(server.name, "connected", tools=tuple(t.spec.name for t in offered)))

    @staticmethod
    def _connect(server: McpServer, cwd: Path) -> tuple[_Connection | None, list[dict[str, Any]], str]:
        from agentstream.agent.loop import env_int

        start_timeout = float(env_int("AGENTSTREAM_MCP_TIMEOUT", 30))  # to start and list its tools
        if server.transport != "stdio":
            return None, [], f"agentstream's agent connects only to stdio MCP servers, not {server.transport}"
        try:
            connection = _Connection(server, cwd)
        except OSError as exc:
            return None, [], f"cannot start {server.command!r}: {exc.strerror or exc}"
        try:
            from agentstream._version import __version__

            hello = {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "agentstream", "version": __version__},
            }
            connection.request("initialize", hello, start_timeout)
            connection.notify("notifications/initialized")
            tools: list[dict[str, Any]] = []
            cursor: str | None = None
            while True:
                page = connection.request("tools/list", {"cursor": cursor} if cursor else {}, start_timeout)
                listed = page.get("tools") if isinstance(page, dict) else None
                tools += [
                    tool
                    for tool in listed or []
                    if isinstance(tool, dict) and isinstance(tool.get("name"), str)
                ]
                cursor = page.get("nextCursor") if isinstance(page, dict) else None
                if not isinstance(cursor, str) or not cursor:
                    return connection, tools, ""
        except McpError as exc:
            connection.close()
            return None, [], str(exc)

    def _tool(self, connection: _Connection, listed: dict[str, Any], taken: set[str]) -> Tool:
        server, name = connection.server.name, listed["name"]
        offered = _offered_name(server, name, taken)
        if offered != _safe_name(server, name):
            self.renamed.append((server, name, offered))
        schema = listed.get("inputSchema")
        spec = ToolSpec(
            offered,
            str(listed.get("description") or f"{name} of the MCP server {server}"),
            schema if isinstance(schema, dict) and schema.get("type") == "object" else {"type": "object"},
            "execute",
        )

        def call(ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
            if not isinstance(arguments, dict):
                raise ToolFailure(
                    f"{offered} takes a JSON object of arguments, got {type(arguments).__name__}"
                )
            try:
                result = connection.request(
                    "tools/call", {"name": name, "arguments": arguments}, ctx.shell_timeout_s, ctx.interrupt
                )
            except McpError as exc:
                if str(exc) == "interrupted":
                    return ToolOutcome("cancelled", error="interrupted")
                raise ToolFailure(f"{offered}: {exc}") from None
            text = _text_of(result)
            if isinstance(result, dict) and result.get("isError") is True:
                raise ToolFailure(
                    f"{offered} failed: {text[:300] or 'the server said it failed'}", output=text
                )
            return ToolOutcome("success", text)

        return Tool(spec, call, raw_arguments=True)

    def close(self) -> None:
        for connection in self._connections:
            connection.close()
        self._connections.clear()


def _safe_name(server: str, tool: str) -> str:
    """``mcp__SERVER__TOOL`` in the characters the model APIs take, and no longer than they take."""
    return _TOOL_NAME_CHARS.sub("_", f"{TOOL_PREFIX}{server}__{tool}")[:_TOOL_NAME_LIMIT]


def _offered_name(server: str, tool: str, taken: set[str]) -> str:
    """The tool's safe name, unless another tool of the run has it already (``a.b`` and ``a_b`` are both
    ``a_b``; two long names may share their first 64 characters): then that name with ``_2``, ``_3``…, so
    that every tool stays callable (a model API refuses two tools of one name)."""
    wanted = offered = _safe_name(server, tool)
    number = 1
    while offered in taken:
        number += 1
        suffix = f"_{number}"
        offered = wanted[: _TOOL_NAME_LIMIT - len(suffix)] + suffix
    taken.add(offered)
    return offered


def _text_of(result: Any) -> str:
    """A ``tools/call`` result as the model reads it: its text blocks, and what the other blocks are."""
    blocks = result.get("content") if isinstance(result, dict) else None
    parts: list[str] = []
    for block in blocks if isinstance(blocks, list) else []:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind == "resource" and isinstance(block.get("resource"), dict):
            resource = block["resource"]
            parts.append(
                resource["text"]
                if isinstance(resource.get("text"), str)
                else f"[resource {resource.get('uri')}]"
            )
        elif kind in ("image", "audio", "resource_link"):
            parts.append(f"[{kind} {block.get('mimeType') or block.get('uri') or ''}]".replace(" ]", "]"))
    if not parts and isinstance(result, dict) and "structuredContent" in result:
        parts.append(json.dumps(result["structuredContent"]))
    return "\n".join(parts)
