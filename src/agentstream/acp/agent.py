"""What every agentstream ACP agent answers: ``initialize``, ``session/*`` and ``session/cancel``.

The engines differ (agentstream's own agent loop, or an agent CLI run headless
per prompt); :class:`AcpAgent` holds what they share: the sessions by id, the
prompt text, one prompt at a time per session, the ``stopReason`` or the
JSON-RPC error a turn's ``result`` becomes, and the ``session/request_permission``
round trip.
"""

from __future__ import annotations

import os
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import IO, Any, Final

from agentstream import protocol as p
from agentstream.acp.mapping import PROTOCOL_VERSION, UpdateMapper, stop_reason
from agentstream.acp.server import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PeerClosed,
    RpcError,
    RpcPeer,
    require,
)
from agentstream.agent.mcp import McpServer
from agentstream.errors import AgentstreamError, ErrorCode

__all__ = [
    "AcpAgent",
    "AcpSession",
    "McpServer",
    "NullSink",
    "PermissionAnswer",
    "mcp_servers",
    "prompt_text",
]

RESOURCE_NOT_FOUND: Final = -32002
"""ACP's error code for an unknown session."""
MAX_PROTOCOL_VERSION: Final = 65535
"""ACP's protocol version is a uint16."""

PERMISSION_OPTIONS: Final = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "allow_always", "name": "Always allow this tool", "kind": "allow_always"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
]


class NullSink:
    """Where a turn's Stream writes when ACP, not stdout, presents its events."""

    closed = False

    def write(self, data: bytes | bytearray) -> int:
        return len(data)

    def flush(self) -> None:
        """Nothing is kept."""


class PermissionAnswer:
    """What the client chose: ``allow`` (``always`` too, for the rest of the session), reject, or cancelled."""

    def __init__(
        self, allow: bool, *, always: bool = False, cancelled: bool = False, reason: str = ""
    ) -> None:
        self.allow, self.always, self.cancelled, self.reason = allow, always, cancelled, reason


class AcpSession(ABC):
    """One ACP session: runs prompts, one at a time, and stops the running one on cancel."""

    def __init__(self, agent: AcpAgent, session_id: str, cwd: str) -> None:
        self.agent = agent
        self.session_id = session_id
        self.cwd = cwd
        self.mapper = UpdateMapper(cwd)
        self.cancelled = threading.Event()
        self.busy = threading.Lock()

    @abstractmethod
    def run_prompt(self, text: str) -> p.Result:
        """Run one turn, presenting its events through :meth:`present`; its result."""

    @abstractmethod
    def cancel(self) -> None:
        """Stop the running turn (called from the reader thread)."""

    def present(self, event: p.AnyEvent) -> None:
        for update in self.mapper.updates(event):
            self.agent.update(self.session_id, update)

    def ask_permission(self, call_id: str, title: str | None = None) -> PermissionAnswer:
        """``session/request_permission`` about an announced tool call; a cancel stops the wait."""
        tool_call = self.mapper.tool_call_fields(call_id)
        if title:
            tool_call.setdefault("title", title)
        params = {"sessionId": self.session_id, "toolCall": tool_call, "options": PERMISSION_OPTIONS}
        try:
            answer = self.agent.peer.request("session/request_permission", params, cancel=self.cancelled)
        except PeerClosed:  # cancelled, or the client went away: either way nobody sees the turn go on
            why = (
                "the turn was cancelled"
                if self.cancelled.is_set()
                else "the client went away before answering"
            )
            return PermissionAnswer(False, cancelled=True, reason=why)
        except RpcError as exc:
            return PermissionAnswer(False, reason=f"the client could not be asked: {exc.message}")
        outcome = answer.get("outcome") if isinstance(answer, dict) else None
        if not isinstance(outcome, dict) or outcome.get("outcome") == "cancelled":
            return PermissionAnswer(False, cancelled=True, reason="the client cancelled the request")
        option = outcome.get("optionId")
        if option in ("allow", "allow_always"):
            # allowed: the call runs now (ACP's in_progress), not only once its first output arrives
            running = {"sessionUpdate": "tool_call_update", "toolCallId": tool_call["toolCallId"]}
            self.agent.update(self.session_id, {**running, "status": "in_progress"})
            return PermissionAnswer(True, always=option == "allow_always")
        return PermissionAnswer(False, reason="the user rejected it")


class AcpAgent(ABC):
    """The ACP methods; subclasses make the sessions."""

    name = "agentstream"

    def __init__(self) -> None:
        self.sessions: dict[str, AcpSession] = {}
        self.peer: RpcPeer
        self.initialized = False
        """Set by the first successful ``initialize``, before its answer is written."""

    def serve(self, source: IO[bytes], sink: Any) -> int:
        """Answer the client on ``source``/``sink`` until it closes the connection; 0."""
        self.peer = RpcPeer(
            source,
            sink,
            requests={
                "initialize": self.initialize,
                "authenticate": lambda params: {},
                "session/new": self.new_session,
                "session/load": self.load_session,
                "session/prompt": self.prompt,
            },
            notifications={"session/cancel": self.cancel},
            on_bad_line=_warn_bad_line,
            admit=self._admit,
            cancellable={"session/prompt": self.cancel},
        )
        self.peer.serve()
        for session in self.sessions.values():
            session.cancel()
        self.peer.join_workers(timeout=10.0)
        return 0

    def update(self, session_id: str, update: dict[str, Any]) -> None:
        self.peer.notify("session/update", {"sessionId": session_id, "update": update})

    # -- methods -------------------------------------------------------------------

    def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        from agentstream._version import __version__

        version = require(params, "protocolVersion", int)
        if not 0 <= version <= MAX_PROTOCOL_VERSION:
            raise RpcError(
                INVALID_PARAMS,
                f"protocolVersion must be 0 to {MAX_PROTOCOL_VERSION}, not {version}",
                {"param": "protocolVersion"},
            )
        self.initialized = True
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": self.can_load,
                "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
                "mcpCapabilities": {
                    "http": "http" in self.mcp_transports,
                    "sse": "sse" in self.mcp_transports,
                },
            },
            "authMethods": [],
            "agentInfo": {"name": self.name, "title": self.title, "version": __version__},
        }

    def new_session(self, params: dict[str, Any]) -> dict[str, Any]:
        cwd = _cwd(params)
        servers = self._connectable(mcp_servers(params))
        session = self._guarded(lambda: self.make_session(cwd, None, servers))
        self.sessions[session.session_id] = session
        return {"sessionId": session.session_id}

    def load_session(self, params: dict[str, Any]) -> dict[str, Any]:
        cwd = _cwd(params)
        session_id = require(params, "sessionId", str)
        if not self.can_load:
            raise RpcError(INVALID_PARAMS, "this agent cannot load sessions (loadSession is false)")
        open_session = self.sessions.get(session_id)
        if open_session is not None and open_session.busy.locked():
            raise RpcError(
                INVALID_PARAMS,
                f"session {session_id!r} is running a prompt on this connection; cancel it first",
                {"sessionId": session_id},
            )
        servers = self._connectable(mcp_servers(params))
        session = self._guarded(lambda: self.make_session(cwd, session_id, servers), session_id)
        for update in self.history(session):
            self.update(session.session_id, update)
        self.sessions[session.session_id] = session
        return {}

    def prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._session(params)
        text = prompt_text(require(params, "prompt", list))
        if not session.busy.acquire(blocking=False):
            raise RpcError(INVALID_PARAMS, "a prompt is already running in this session; cancel it first")
        try:
            session.mapper.begin_turn()
            result = session.run_prompt(text)
        finally:
            session.busy.release()
        reason = stop_reason(result)
        if session.cancelled.is_set() and not result.ok:
            reason = "cancelled"
        if reason is None:
            info = result.error if isinstance(result.error, p.ErrorInfo) else None
            data: dict[str, Any] = {
                "code": info.code if info else ErrorCode.UNKNOWN,
                "exit_code": result.exit_code,
            }
            if info is not None and isinstance(info.fix, str):
                data["fix"] = info.fix
            raise RpcError(
                INTERNAL_ERROR, info.message if info else f"the turn failed ({result.subtype})", data
            )
        return {"stopReason": reason}

    def cancel(self, params: dict[str, Any]) -> None:
        session = self.sessions.get(params.get("sessionId", ""))
        if session is not None:
            session.cancelled.set()
            session.cancel()

    # -- what subclasses provide ----------------------------------------------------

    title = "agentstream"
    can_load = True
    mcp_transports: frozenset[str] = frozenset()
    """The MCP transports whose servers this agent's sessions connect to (``initialize`` says which)."""

    @abstractmethod
    def make_session(self, cwd: str, session_id: str | None, servers: list[McpServer]) -> AcpSession:
        """A new session, or the stored one with this id (raise AgentstreamError when there is none), connected
        to ``servers``."""

    def close(self) -> None:
        """Release what the sessions hold (model clients); the connection has ended."""

    def history(self, session: AcpSession) -> list[dict[str, Any]]:
        """The updates that replay a loaded session's conversation."""
        return []

    # -- helpers ---------------------------------------------------------------------

    def _admit(self, method: str, params: Any) -> None:
        """ACP: nothing but ``initialize`` until it has succeeded (-32600, as the official SDK's agents answer).

        A prompt to an idle session forgets an earlier cancel here, where requests and notifications are read
        in order: a ``session/cancel`` sent right after the prompt then cancels it, even before it starts.
        """
        if not self.initialized and method != "initialize":
            raise RpcError(
                INVALID_REQUEST,
                f"{method} before initialize: the connection is not initialized yet",
                {"fix": "send initialize first and wait for its answer", "method": method},
            )
        if method == "session/prompt" and isinstance(params, dict):
            session = self.sessions.get(params.get("sessionId"))  # type: ignore[arg-type]
            if session is not None and not session.busy.locked():
                session.cancelled.clear()

    def _connectable(self, servers: list[McpServer]) -> list[McpServer]:
        """The servers this agent connects to; the others are named on stderr, where editors log an agent's
        complaints (refusing the session would leave the user with no agent at all)."""
        left_out = [server for server in servers if server.transport not in self.mcp_transports]
        if left_out:
            names = ", ".join(f"{server.name} ({server.transport})" for server in left_out)
            sys.stderr.write(f"agentstream acp: {self.name} does not connect to these MCP servers: {names}\n")
            sys.stderr.flush()
        return [server for server in servers if server.transport in self.mcp_transports]

    def _session(self, params: dict[str, Any]) -> AcpSession:
        session_id = require(params, "sessionId", str)
        session = self.sessions.get(session_id)
        if session is None:
            raise RpcError(
                RESOURCE_NOT_FOUND, f"no session {session_id!r} on this connection", {"sessionId": session_id}
            )
        return session

    @staticmethod
    def _guarded(make: Callable[[], AcpSession], session_id: str | None = None) -> AcpSession:
        try:
            return make()
        except AgentstreamError as exc:
            data: dict[str, Any] = {"code": exc.code, **({"fix": exc.fix} if exc.fix else {})}
            code = INVALID_PARAMS
            if exc.code == ErrorCode.SESSION_NOT_FOUND:
                code, data["sessionId"] = RESOURCE_NOT_FOUND, session_id
            raise RpcError(code, exc.message, data) from None


def _cwd(params: dict[str, Any]) -> str:
    """The session's working directory: ACP requires an absolute path, and it must exist here."""
    cwd = require(params, "cwd", str)
    if not os.path.isabs(cwd):
        raise RpcError(
            INVALID_PARAMS,
            f"cwd must be an absolute path, not {cwd!r}",
            {"param": "cwd", "fix": "send the workspace's absolute path"},
        )
    if not os.path.isdir(cwd):
        raise RpcError(
            INVALID_PARAMS,
            f"cwd {cwd} is not a directory",
            {"param": "cwd", "fix": "send an existing directory of the machine the agent runs on"},
        )
    return cwd


def mcp_servers(params: dict[str, Any]) -> list[McpServer]:
    """ACP's ``mcpServers`` of ``session/new`` or ``session/load`` (none when absent), each checked for what its
    transport needs: a server the agent cannot start as described is a clear error, not a silent gap."""
    servers = params.get("mcpServers", [])
    if not isinstance(servers, list):
        raise RpcError(INVALID_PARAMS, "mcpServers must be a list", {"param": "mcpServers"})
    return [_mcp_server(item, f"mcpServers[{index}]") for index, item in enumerate(servers)]


def _mcp_server(item: Any, where: str) -> McpServer:
    def bad(why: str) -> RpcError:
        return RpcError(INVALID_PARAMS, f"{where}: {why}", {"param": where})

    if not isinstance(item, dict):
        raise bad("an MCP server must be an object")
    name, transport = item.get("name"), item.get("type", "stdio")
    if not isinstance(name, str) or not name:
        raise bad("name must be a non-empty string")
    if transport not in ("stdio", "http", "sse"):
        raise bad(f"type must be http or sse (or absent, for stdio), not {transport!r}")

    def pairs(key: str) -> tuple[tuple[str, str], ...]:
        value = item.get(key, [])
        if not isinstance(value, list) or not all(
            isinstance(pair, dict)
            and isinstance(pair.get("name"), str)
            and isinstance(pair.get("value"), str)
            for pair in value
        ):
            raise bad(f"{key} must be a list of {{name, value}} strings")
        return tuple((pair["name"], pair["value"]) for pair in value)

    if transport == "stdio":
        command, args = item.get("command"), item.get("args", [])
        if not isinstance(command, str) or not command:
            raise bad("command must be a non-empty string")
        if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
            raise bad("args must be a list of strings")
        return McpServer(name, "stdio", command=command, args=tuple(args), env=pairs("env"))
    url = item.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise bad("url must be an http:// or https:// address")
    return McpServer(name, transport, url=url, headers=pairs("headers"))


def prompt_text(blocks: list[Any]) -> str:
    """The prompt's text: text blocks as they are, resource links as their URI, embedded text resources inline."""
    parts = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind == "resource_link" and isinstance(block.get("uri"), str):
            parts.append(f"@{block['uri']}")
        elif kind == "resource" and isinstance(block.get("resource"), dict):
            resource = block["resource"]
            if isinstance(resource.get("text"), str):
                parts.append(f"Context from {resource.get('uri', 'the editor')}:\n{resource['text']}")
    text = "\n\n".join(parts)
    if not text.strip():
        raise RpcError(INVALID_PARAMS, "the prompt has no text (send text, resource_link or resource blocks)")
    return text


def _warn_bad_line(line: bytes, reason: str) -> None:
    sys.stderr.write(f"agentstream acp: ignored a line from the client: {reason}\n")
    sys.stderr.flush()
