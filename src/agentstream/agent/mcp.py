"""MCP servers as the agent's tools: the servers a client names, connected, their tools offered as ``mcp__SERVER__TOOL``.

A client names servers in Claude Code's ``--mcp-config`` shape (``exec``, the Claude Agent SDK's
``mcp_servers``) or in ACP's ``mcpServers`` (``acp``). They are connected when the run starts (how each
transport carries the messages: :mod:`agentstream.agent.mcp_wire`), and their tools join the run's under
the permission mode as ``execute`` tools. A server that cannot be started or answered is ``failed`` (with
why) and the run goes on without it; in-process (``sdk``) servers are not connected. See docs/agent.md.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from agentstream.agent.mcp_wire import (
    CONNECTED_TRANSPORTS,
    PROTOCOL_VERSION,
    Connection,
    McpError,
    open_connection,
)
from agentstream.agent.tools._base import Tool, ToolContext, ToolFailure, ToolOutcome, ToolSpec

__all__ = ["CONNECTED_TRANSPORTS", "McpServer", "McpTools", "servers_from_config"]

TOOL_PREFIX: Final = "mcp__"
"""How the tools of MCP servers are named (``mcp__SERVER__TOOL``), as in Claude Code."""
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
        self._connections: list[Connection] = []
        taken: set[str] = set()
        servers = list(servers)
        results: list[tuple[Connection | None, list[dict[str, Any]], str]] = [(None, [], "")] * len(servers)

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
    def _connect(server: McpServer, cwd: Path) -> tuple[Connection | None, list[dict[str, Any]], str]:
        from agentstream.agent.loop import env_int

        start_timeout = float(env_int("AGENTSTREAM_MCP_TIMEOUT", 30))  # to start and list its tools
        if server.transport not in CONNECTED_TRANSPORTS:
            return None, [], f"agentstream's agent does not connect to {server.transport} MCP servers"
        try:
            connection = open_connection(server, cwd, start_timeout)
        except OSError as exc:
            return None, [], f"cannot start {server.command!r}: {exc.strerror or exc}"
        except McpError as exc:
            return None, [], str(exc)
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

    def _tool(self, connection: Connection, listed: dict[str, Any], taken: set[str]) -> Tool:
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
