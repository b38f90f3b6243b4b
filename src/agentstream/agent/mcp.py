"""MCP servers as the agent's tools: stdio servers it starts and HTTP ones it reaches, offered as ``mcp__SERVER__TOOL``.

A client names servers in Claude Code's ``--mcp-config`` shape (``exec``, the Claude Agent SDK's
``mcp_servers``) or in ACP's ``mcpServers`` (``acp``). Each stdio server is started when the run starts,
in its own process group, with a small default environment (``HOME``, ``PATH``…, as MCP's own clients
give one) plus the variables it was configured with: not the agent's, which hold model API keys. Its
tools join the run's under the permission mode as ``execute`` tools. An ``http`` server is reached over MCP's
streamable HTTP at its URL, with the headers it was configured with. A server that cannot be started or
answered is ``failed`` (with why) and the run goes on without it; ``sse`` (the older HTTP transport) and
in-process (``sdk``) servers are not connected. See docs/agent.md.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, cast

from agentstream.agent.tools._base import Tool, ToolContext, ToolFailure, ToolOutcome, ToolSpec

if TYPE_CHECKING:
    import http.client

__all__ = ["McpServer", "McpTools", "servers_from_config"]

PROTOCOL_VERSION: Final = "2025-06-18"
CONNECTED_TRANSPORTS: Final = frozenset({"stdio", "http"})
"""The kinds of MCP server the agent connects to (streamable HTTP for ``http``); ``sse`` and ``sdk`` are not."""
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


class _Connection(ABC):
    """One server's JSON-RPC 2.0 requests, whatever carries them: each answer matched to its request by id,
    waited for no longer than asked, and given up (the server told) when the run is interrupted."""

    server: McpServer

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next_id = 0

    def request(
        self, method: str, params: dict[str, Any], timeout: float, cancel: threading.Event | None = None
    ) -> Any:
        done, slot = threading.Event(), cast("list[dict[str, Any]]", [])
        with self._lock:
            self._next_id += 1
            ident = self._next_id
        try:
            self._send_request(
                {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}, slot, done
            )
            waited = 0.0
            while not done.wait(0.05):
                waited += 0.05
                if cancel is not None and cancel.is_set():
                    self._give_up(ident)
                    self._tell_cancelled(ident)
                    raise McpError("interrupted")
                if waited >= timeout:
                    self._give_up(ident)
                    raise McpError(f"no answer to {method} in {timeout:g} s")
                gone = self._gone()
                if gone is not None and not done.is_set():
                    raise McpError(gone)
        finally:
            self._forget(ident)
        answer = slot[0]
        if "error" in answer:
            error = answer["error"] if isinstance(answer["error"], dict) else {}
            raise McpError(str(error.get("message") or "the server answered with an error"))
        return answer.get("result")

    @abstractmethod
    def _send_request(
        self, message: dict[str, Any], slot: list[dict[str, Any]], done: threading.Event
    ) -> None:
        """Send a request; its answer goes into ``slot`` and sets ``done`` (an answer with ``error`` for a
        failure to get one)."""

    @abstractmethod
    def notify(self, method: str, params: dict[str, Any] | None = None) -> None: ...

    def _give_up(self, ident: int) -> None:
        """Stop waiting for this request's answer (a transport with one exchange per request ends it)."""

    def _tell_cancelled(self, ident: int) -> None:
        """Tell the server the run no longer wants this request's answer."""
        self.notify("notifications/cancelled", {"requestId": ident, "reason": "interrupted"})

    def _forget(self, ident: int) -> None:
        """The request is over, answered or not."""

    def _gone(self) -> str | None:
        """Why no answer can come any more (the server exited), else ``None``."""
        return None

    @staticmethod
    def _server_request(message: dict[str, Any]) -> dict[str, Any]:
        """The answer to a request of the server's: a ping is answered, anything else this client does not offer."""
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        if message["method"] == "ping":
            answer["result"] = {}
        else:
            answer["error"] = {"code": -32601, "message": f"this client has no {message['method']}"}
        return answer

    @abstractmethod
    def close(self) -> None: ...


def _open_connection(server: McpServer, cwd: Path) -> _Connection:
    if server.transport == "http":
        return _HttpConnection(server)
    return _StdioConnection(server, cwd)


class _StdioConnection(_Connection):
    """A server started for the run: one message per line on its stdin and stdout."""

    def __init__(self, server: McpServer, cwd: Path) -> None:
        super().__init__()
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
        self._waiting: dict[int, tuple[threading.Event, list[Any]]] = {}
        self.stderr_tail: deque[str] = deque(maxlen=5)
        threading.Thread(target=self._read, name=f"mcp-{server.name}", daemon=True).start()
        threading.Thread(target=self._read_stderr, name=f"mcp-{server.name}-err", daemon=True).start()

    def _send_request(
        self, message: dict[str, Any], slot: list[dict[str, Any]], done: threading.Event
    ) -> None:
        with self._lock:
            self._waiting[message["id"]] = (done, slot)
        self._send(message)

    def _forget(self, ident: int) -> None:
        with self._lock:
            self._waiting.pop(ident, None)

    def _gone(self) -> str | None:
        return self._exited() if self.proc.poll() is not None else None

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
            if "method" in message and "id" in message:
                try:
                    self._send(self._server_request(message))
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


class _HttpConnection(_Connection):
    """A server at a URL, over MCP's streamable HTTP: each message POSTed there, each answer coming back as
    JSON or as an event stream (which may carry the server's own requests before it). The session the server
    opens at ``initialize`` is named in every later request, and ended when the run ends."""

    def __init__(self, server: McpServer) -> None:
        import urllib.parse

        super().__init__()
        self.server = server
        self._url = urllib.parse.urlsplit(server.url)
        if self._url.scheme not in ("http", "https") or not self._url.hostname:
            raise McpError("its url is not an http:// or https:// address")
        self._target = (self._url.path or "/") + (f"?{self._url.query}" if self._url.query else "")
        self._session: str | None = None
        self._version: str | None = None
        self._exchanges: dict[int, http.client.HTTPConnection] = {}
        self._telling: list[threading.Thread] = []
        """Cancellations on their way, which the session's end waits for (briefly)."""

    def _http(self, timeout: float) -> http.client.HTTPConnection:
        import http.client  # here: the agent's start-up does not pay for it without an HTTP server

        host, port = self._url.hostname or "", self._url.port
        if self._url.scheme == "https":
            import ssl

            return http.client.HTTPSConnection(
                host, port, timeout=timeout, context=ssl.create_default_context()
            )
        return http.client.HTTPConnection(host, port, timeout=timeout)

    def _headers(self) -> dict[str, str]:
        headers = {
            **dict(self.server.headers),
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if self._session is not None:
            headers["Mcp-Session-Id"] = self._session
        if self._version is not None:
            headers["MCP-Protocol-Version"] = self._version
        return headers

    def _post(
        self, connection: http.client.HTTPConnection, message: dict[str, Any]
    ) -> http.client.HTTPResponse:
        body = json.dumps(message).encode()
        for _ in range(
            2
        ):  # a redirect to another path of the same server (``/mcp`` to ``/mcp/``) is followed
            try:
                connection.request("POST", self._target, body, self._headers())
                response = connection.getresponse()
            except ValueError:  # http.client refuses a header value with a line break in it
                raise McpError("a header its config gives cannot be sent (it holds a line break)") from None
            except OSError as exc:
                raise McpError(f"cannot reach it: {exc.strerror or exc}") from None
            if response.status not in (307, 308) or not self._moved(response.getheader("Location") or ""):
                break
            response.read()
        if response.status == 404 and self._session is not None:
            raise McpError("it no longer knows this run's session (it restarted or ended it)")
        if response.status >= 300:
            said = self._unsecret(_printable(response.read(300).decode("utf-8", "replace")))
            raise McpError(f"HTTP {response.status} {response.reason}" + (f": {said}" if said else ""))
        return response

    def _unsecret(self, text: str) -> str:
        """``text`` (the server's words, which go to stderr and the stream) without the values of the headers
        the config gives it: a server that echoes the token it refused must not publish it."""
        for _, value in self.server.headers:
            for secret in (value, value.partition(" ")[2]):  # "Bearer TOKEN": the token on its own too
                if len(secret) >= 4:
                    text = text.replace(secret, "***")
        return text

    def _moved(self, location: str) -> bool:
        """Take a redirect to ``location`` when it is on the same server (its headers may hold a token that is
        not another server's to see)."""
        import urllib.parse

        moved = urllib.parse.urlsplit(urllib.parse.urljoin(self.server.url, location))
        if (moved.scheme, moved.netloc) != (self._url.scheme, self._url.netloc):
            return False
        self._target = (moved.path or "/") + (f"?{moved.query}" if moved.query else "")
        return True

    def _send_request(
        self, message: dict[str, Any], slot: list[dict[str, Any]], done: threading.Event
    ) -> None:
        connection = self._http(_HTTP_READ_TIMEOUT_S)
        with self._lock:
            self._exchanges[message["id"]] = connection

        def exchange() -> None:
            try:
                answer = self._answer(connection, message)
            except McpError as exc:
                answer = {"error": {"message": str(exc)}}
            except Exception as exc:  # this thread is the only one that can say why no answer came
                answer = {"error": {"message": f"the answer broke off ({type(exc).__name__}: {exc})"}}
            finally:
                connection.close()
            if message["method"] == "initialize" and isinstance(answer.get("result"), dict):
                version = answer["result"].get("protocolVersion")
                self._version = version if isinstance(version, str) and version.isprintable() else None
            slot.append(answer)
            done.set()

        threading.Thread(target=exchange, name=f"mcp-{self.server.name}-{message['id']}", daemon=True).start()

    def _answer(self, connection: http.client.HTTPConnection, message: dict[str, Any]) -> dict[str, Any]:
        response = self._post(connection, message)
        if message["method"] == "initialize":
            session = response.getheader("Mcp-Session-Id")
            self._session = session if session and session.isprintable() else None
        kind = (response.getheader("Content-Type") or "").split(";")[0].strip().lower()
        if kind == "text/event-stream":
            for sent in _event_stream(response):
                answer = self._take(sent, message["id"])
                if answer is not None:
                    return answer
            raise McpError(f"its event stream ended with no answer to {message['method']}")
        if kind == "application/json":
            try:
                sent = json.loads(response.read())
            except ValueError:
                raise McpError("it answered with JSON that cannot be read") from None
            answer = self._take(sent, message["id"])
            if answer is not None:
                return answer
        raise McpError(
            f"it sent no answer to {message['method']} (HTTP {response.status}, {kind or 'no body'})"
        )

    def _take(self, sent: Any, ident: int) -> dict[str, Any] | None:
        """The answer to request ``ident`` among the messages of one event or body; the server's own requests
        among them are answered on the way."""
        for message in sent if isinstance(sent, list) else [sent]:
            if not isinstance(message, dict):
                continue
            if "method" in message and "id" in message:
                try:
                    self._deliver(self._server_request(message))
                except McpError:
                    pass  # a server that cannot take the answer to its ping still answers ours
            elif message.get("id") == ident and ("result" in message or "error" in message):
                return message
        return None

    def _deliver(self, message: dict[str, Any]) -> None:
        """POST a message that has no answer (a notification, an answer to the server)."""
        connection = self._http(_HTTP_QUICK_TIMEOUT_S)
        try:
            self._post(connection, message).read()
        finally:
            connection.close()

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        self._deliver(
            {"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})}
        )

    def _tell_cancelled(self, ident: int) -> None:
        """In the background: a server that hangs must not hold up the interrupt for the post's timeout."""

        def tell() -> None:
            try:
                _Connection._tell_cancelled(self, ident)
            except McpError:
                pass  # it finds out when it writes the answer nobody reads

        telling = threading.Thread(target=tell, name=f"mcp-{self.server.name}-cancel", daemon=True)
        telling.start()
        self._telling.append(telling)

    def _give_up(self, ident: int) -> None:
        with self._lock:
            connection = self._exchanges.get(ident)
        sock = connection.sock if connection is not None else None
        if sock is not None:
            import socket

            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the exchange's read
            except OSError:
                pass

    def _forget(self, ident: int) -> None:
        with self._lock:
            self._exchanges.pop(ident, None)

    def close(self) -> None:
        """End the session the server opened (a server that keeps none, or is gone, is left as it is)."""
        with self._lock:
            exchanges = list(self._exchanges)
        for ident in exchanges:
            self._give_up(ident)
        for telling in self._telling:
            telling.join(_HTTP_QUICK_TIMEOUT_S)
        if self._session is None:
            return
        import http.client

        connection = self._http(_HTTP_QUICK_TIMEOUT_S)
        try:
            connection.request("DELETE", self._target, headers=self._headers())
            connection.getresponse().read()
        except (OSError, ValueError, http.client.HTTPException):
            pass
        finally:
            connection.close()
        self._session = None


_HTTP_READ_TIMEOUT_S: Final = 600.0
"""How long an HTTP exchange may wait on one read before it is given up (the caller's own deadline is shorter)."""
_HTTP_QUICK_TIMEOUT_S: Final = 5.0
"""For a notification, an answer to the server, and the session's end."""


def _event_stream(response: http.client.HTTPResponse) -> Iterator[Any]:
    """The JSON of each event of a server-sent event stream (events that are not JSON are skipped)."""
    data: list[str] = []
    while True:
        raw = response.readline(_SSE_LINE_LIMIT)
        if not raw:
            return
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line:
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            continue
        if data:
            try:
                yield json.loads("\n".join(data))
            except ValueError:
                pass
            data = []


_SSE_LINE_LIMIT: Final = 64 * 1024 * 1024
"""The longest event line read (a tool's answer can be long; a line past this is cut, and its event dropped)."""


def _printable(text: str) -> str:
    """Server text for a message: one line, control characters gone, short."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())[:200]


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
        if server.transport not in CONNECTED_TRANSPORTS:
            return None, [], f"agentstream's agent does not connect to {server.transport} MCP servers"
        try:
            connection = _open_connection(server, cwd)
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
