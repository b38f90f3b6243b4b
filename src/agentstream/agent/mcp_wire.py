"""How the agent's MCP client carries JSON-RPC 2.0 to a server: one request loop, three transports.

* ``stdio``: a server started for the run, in its own process group, with a small default environment
  (``HOME``, ``PATH``…, as MCP's own clients give one) plus the variables it was configured with (not the
  agent's, which hold model API keys); one message per line.
* ``http``: MCP's streamable HTTP (2025-03-26 on): each message POSTed to the server's URL, each answer
  coming back as JSON or as an event stream; the session the server opens travels in a header.
* ``sse``: MCP's older HTTP transport (2024-11-05): an event stream opened with GET says where to POST
  messages, and carries the answers.

The headers a server was configured with (a token, say) go to that server only, and never into an error.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

if TYPE_CHECKING:
    import http.client

    from agentstream.agent.mcp import McpServer

__all__ = ["CONNECTED_TRANSPORTS", "PROTOCOL_VERSION", "Connection", "McpError", "open_connection"]

PROTOCOL_VERSION: Final = "2025-06-18"
CONNECTED_TRANSPORTS: Final = frozenset({"stdio", "http", "sse"})
"""The kinds of MCP server the agent connects to (in-process ``sdk`` servers are the SDK's own)."""
DEFAULT_ENV: Final = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR")


class McpError(Exception):
    """A server that did not answer, or answered a request with an error."""


class Connection(ABC):
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


def open_connection(server: McpServer, cwd: Path, start_timeout: float) -> Connection:
    """The connection to ``server`` (started, or reached), ready for its ``initialize``."""
    if server.transport == "http":
        return _HttpConnection(server)
    if server.transport == "sse":
        return _SseConnection(server, start_timeout)
    return _StdioConnection(server, cwd)


class _Answered(Connection):
    """A transport whose answers all come on one channel the connection reads: each wakes its request."""

    def __init__(self) -> None:
        super().__init__()
        self._waiting: dict[int, tuple[threading.Event, list[Any]]] = {}

    def _send_request(
        self, message: dict[str, Any], slot: list[dict[str, Any]], done: threading.Event
    ) -> None:
        with self._lock:
            self._waiting[message["id"]] = (done, slot)
        self._send(message)

    def _forget(self, ident: int) -> None:
        with self._lock:
            self._waiting.pop(ident, None)

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        self._send(_notification(method, params))

    @abstractmethod
    def _send(self, message: dict[str, Any]) -> None: ...

    def _arrived(self, message: Any) -> bool:
        """A message from the server: an answer wakes its request, a request of the server's is answered.
        False when that answer cannot be sent (the server is gone)."""
        if not isinstance(message, dict):
            return True
        if "method" in message and "id" in message:
            try:
                self._send(self._server_request(message))
            except McpError:
                return False
            return True
        with self._lock:
            waiting = self._waiting.get(message.get("id"))  # type: ignore[arg-type]
        if waiting is not None:
            waiting[1].append(message)
            waiting[0].set()
        return True


class _StdioConnection(_Answered):
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
        self.stderr_tail: deque[str] = deque(maxlen=5)
        threading.Thread(target=self._read, name=f"mcp-{server.name}", daemon=True).start()
        threading.Thread(target=self._read_stderr, name=f"mcp-{server.name}-err", daemon=True).start()

    def _gone(self) -> str | None:
        return self._exited() if self.proc.poll() is not None else None

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
            if not self._arrived(message):
                return

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


class _Web(Connection):
    """What both HTTP transports do: reach the server's host with the headers it was configured with, never
    send them to another host, and never repeat them in an error."""

    def __init__(self, server: McpServer) -> None:
        import urllib.parse

        super().__init__()
        self.server = server
        self._url = urllib.parse.urlsplit(server.url)
        if self._url.scheme not in ("http", "https") or not self._url.hostname:
            raise McpError("its url is not an http:// or https:// address")
        self._target = _target_of(self._url)
        self._telling: list[threading.Thread] = []
        """Cancellations on their way, which the end of the session waits for (briefly)."""

    def _http(self, timeout: float | None) -> http.client.HTTPConnection:
        import http.client  # here: the agent's start-up does not pay for it without an HTTP server

        host, port = self._url.hostname or "", self._url.port
        if self._url.scheme == "https":
            import ssl

            return http.client.HTTPSConnection(
                host, port, timeout=timeout, context=ssl.create_default_context()
            )
        return http.client.HTTPConnection(host, port, timeout=timeout)

    def _on_this_server(self, location: str) -> str | None:
        """The request target of ``location`` (a URL, maybe relative to the server's), when it is on the same
        server: its headers may hold a token that is not another server's to see."""
        import urllib.parse

        moved = urllib.parse.urlsplit(urllib.parse.urljoin(self.server.url, location))
        if (moved.scheme, moved.netloc) != (self._url.scheme, self._url.netloc):
            return None
        return _target_of(moved)

    def _exchange(
        self,
        connection: http.client.HTTPConnection,
        method: str,
        target: str,
        body: bytes | None,
        headers: dict[str, str],
    ) -> http.client.HTTPResponse:
        """One request, a redirect to another path of the same server followed (``/mcp`` to ``/mcp/``); an
        answer of 300 or more is an :class:`McpError` with the server's words."""
        for _ in range(2):
            try:
                connection.request(method, target, body, headers)
                response = connection.getresponse()
            except ValueError:  # http.client refuses a header value with a line break in it
                raise McpError("a header its config gives cannot be sent (it holds a line break)") from None
            except OSError as exc:
                raise McpError(f"cannot reach it: {exc.strerror or exc}") from None
            if response.status not in (307, 308):
                break
            moved = self._on_this_server(response.getheader("Location") or "")
            if moved is None:
                break
            response.read()
            target = self._moved_to(moved)
        if response.status >= 300:
            self._refused(response)
        return response

    def _moved_to(self, target: str) -> str:
        """Where a redirect says to go from now on."""
        return target

    def _tell_cancelled(self, ident: int) -> None:
        """In the background: a server that hangs must not hold up the interrupt for the post's timeout."""

        def tell() -> None:
            try:
                Connection._tell_cancelled(self, ident)
            except McpError:
                pass  # it finds out when it writes the answer nobody reads

        telling = threading.Thread(target=tell, name=f"mcp-{self.server.name}-cancel", daemon=True)
        telling.start()
        self._telling.append(telling)

    def _told(self) -> None:
        """Let the cancellations on their way arrive before the session ends (each waits a few seconds at most)."""
        for telling in self._telling:
            telling.join(_HTTP_QUICK_TIMEOUT_S)

    def _refused(self, response: http.client.HTTPResponse) -> None:
        said = self._unsecret(_printable(response.read(300).decode("utf-8", "replace")))
        raise McpError(f"HTTP {response.status} {response.reason}" + (f": {said}" if said else ""))

    def _unsecret(self, text: str) -> str:
        """``text`` (the server's words, which go to stderr and the stream) without the values of the headers
        the config gives it: a server that echoes the token it refused must not publish it."""
        for _, value in self.server.headers:
            for secret in (value, value.partition(" ")[2]):  # "Bearer TOKEN": the token on its own too
                if len(secret) >= 4:
                    text = text.replace(secret, "***")
        return text


def _target_of(url: Any) -> str:
    """A split URL's request target: its path (``/`` for none) and query."""
    return (url.path or "/") + (f"?{url.query}" if url.query else "")


class _HttpConnection(_Web):
    """A server at a URL, over MCP's streamable HTTP: each message POSTed there, each answer coming back as
    JSON or as an event stream (which may carry the server's own requests before it). The session the server
    opens at ``initialize`` is named in every later request, and ended when the run ends."""

    def __init__(self, server: McpServer) -> None:
        super().__init__(server)
        self._session: str | None = None
        self._version: str | None = None
        self._exchanges: dict[int, http.client.HTTPConnection] = {}

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

    def _moved_to(self, target: str) -> str:
        self._target = target
        return target

    def _refused(self, response: http.client.HTTPResponse) -> None:
        if response.status == 404 and self._session is not None:
            raise McpError("it no longer knows this run's session (it restarted or ended it)")
        super()._refused(response)

    def _post(
        self, connection: http.client.HTTPConnection, message: dict[str, Any]
    ) -> http.client.HTTPResponse:
        return self._exchange(connection, "POST", self._target, json.dumps(message).encode(), self._headers())

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
            for _, data in _event_stream(response):
                try:
                    sent = json.loads(data)
                except ValueError:
                    continue
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
        self._deliver(_notification(method, params))

    def _give_up(self, ident: int) -> None:
        with self._lock:
            connection = self._exchanges.get(ident)
        _cut(connection)

    def _forget(self, ident: int) -> None:
        with self._lock:
            self._exchanges.pop(ident, None)

    def close(self) -> None:
        """End the session the server opened (a server that keeps none, or is gone, is left as it is)."""
        with self._lock:
            exchanges = list(self._exchanges)
        for ident in exchanges:
            self._give_up(ident)
        self._told()
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


class _SseConnection(_Web, _Answered):
    """A server over MCP's older HTTP transport: the event stream a GET opens first names, in an ``endpoint``
    event, where to POST messages (a path of the same server), then carries every answer as a ``message``
    event. The stream is the session: it is closed when the run ends."""

    def __init__(self, server: McpServer, start_timeout: float) -> None:
        super().__init__(server)
        self._stream = self._http(None)  # the stream stays open as long as the run: no read timeout
        headers = {**dict(server.headers), "Accept": "text/event-stream"}
        try:
            response = self._exchange(self._stream, "GET", self._target, None, headers)
        except McpError:
            self._stream.close()
            raise
        kind = (response.getheader("Content-Type") or "").split(";")[0].strip().lower()
        if kind != "text/event-stream":
            self._stream.close()
            raise McpError(f"it answered the stream's GET with {kind or 'no body'}, not an event stream")
        self._endpoint: str | None = None
        self._ended: str | None = None
        self._found = threading.Event()
        threading.Thread(target=self._read, args=(response,), name=f"mcp-{server.name}", daemon=True).start()
        if not self._found.wait(start_timeout) or self._endpoint is None:
            self.close()
            raise McpError(self._ended or f"its event stream named no endpoint in {start_timeout:g} s")

    def _read(self, response: http.client.HTTPResponse) -> None:
        try:
            for event, data in _event_stream(response):
                if event == "endpoint" and self._endpoint is None:
                    self._endpoint = self._on_this_server(data.strip())
                    if self._endpoint is None:
                        self._ended = "its endpoint is on another server (its headers are not that server's)"
                        return
                    self._found.set()
                elif event in ("message", ""):
                    try:
                        message = json.loads(data)
                    except ValueError:
                        continue
                    if not self._arrived(message):
                        return
            self._ended = "its event stream ended"
        except Exception as exc:  # this thread is the only one that can say why the stream stopped
            self._ended = f"its event stream broke off ({type(exc).__name__}: {exc})"
        finally:
            self._found.set()

    def _gone(self) -> str | None:
        return self._ended

    def _send(self, message: dict[str, Any]) -> None:
        assert self._endpoint is not None, "connected once the stream named its endpoint"
        connection = self._http(_HTTP_QUICK_TIMEOUT_S)
        headers = {**dict(self.server.headers), "Content-Type": "application/json"}
        try:
            self._exchange(connection, "POST", self._endpoint, json.dumps(message).encode(), headers).read()
        finally:
            connection.close()

    def close(self) -> None:
        """End the session: the stream is closed (after the cancellations on their way)."""
        self._told()
        _cut(self._stream)
        self._stream.close()


def _notification(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})}


def _cut(connection: http.client.HTTPConnection | None) -> None:
    """Wake whatever reads ``connection`` (a thread blocked on its socket) by shutting the socket down."""
    sock = connection.sock if connection is not None else None
    if sock is not None:
        import socket

        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


_HTTP_READ_TIMEOUT_S: Final = 600.0
"""How long an HTTP exchange may wait on one read before it is given up (the caller's own deadline is shorter)."""
_HTTP_QUICK_TIMEOUT_S: Final = 5.0
"""For a notification, an answer to the server, and the session's end."""


def _event_stream(response: http.client.HTTPResponse) -> Iterator[tuple[str, str]]:
    """Each event of a server-sent event stream: its type (``""`` when it names none) and its data."""
    event, data = "", cast("list[str]", [])
    while True:
        raw = response.readline(_SSE_LINE_LIMIT)
        if not raw:
            return
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line:
            field, _, value = line.partition(":")
            if field == "data":
                data.append(value.removeprefix(" "))
            elif field == "event":
                event = value.removeprefix(" ")
            continue
        if data:
            yield event, "\n".join(data)
        event, data = "", []


_SSE_LINE_LIMIT: Final = 64 * 1024 * 1024
"""The longest event line read (a tool's answer can be long; a line past this is cut, and its event dropped)."""


def _printable(text: str) -> str:
    """Server text for a message: one line, control characters gone, short."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())[:200]
