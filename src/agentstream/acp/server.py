"""JSON-RPC 2.0 over newline-delimited JSON, as ACP frames it on stdio: one peer, either side.

:class:`RpcPeer` reads lines on its own thread. A request is answered on a
thread of its own (``session/prompt`` runs for minutes, and ``session/cancel``
must still get through meanwhile); a notification is handled on the reader
thread, at once; a response wakes the :meth:`RpcPeer.request` waiting for it.
Writes go through one lock, a whole line at a time, so a notification never
splits a response.

Threads rather than asyncio because the agent loop, its interrupt and its
permission hook are synchronous (see :mod:`agentstream.agent.interrupt`).
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Callable
from typing import IO, Any, Final, Protocol

import msgspec

from agentstream import protocol as p
from agentstream._signals import start_thread

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PeerClosed",
    "RpcError",
    "RpcPeer",
    "Writer",
]

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
CANCEL_REQUEST: Final = "$/cancel_request"


class RpcError(Exception):
    """A JSON-RPC error: raised by a handler to answer with it, or by :meth:`RpcPeer.request` on receiving one."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class PeerClosed(Exception):
    """The other side closed the connection (or was stopped) before answering."""


class Writer(Protocol):
    def write(self, data: bytes) -> object: ...


Handler = Callable[[dict[str, Any]], Any]


class _Waiting:
    __slots__ = ("answered", "error", "result")

    def __init__(self) -> None:
        self.answered = threading.Event()
        self.result: Any = None
        self.error: RpcError | PeerClosed | None = None


class RpcPeer:
    """One JSON-RPC connection over a pair of byte streams.

    ``requests`` and ``notifications`` map method names to handlers that take the
    ``params`` object; a request handler returns the ``result`` or raises
    :class:`RpcError`. ``on_bad_line`` hears of every line that is not a
    JSON-RPC message (the client reports them; the agent answers parse errors).
    """

    def __init__(
        self,
        source: IO[bytes],
        sink: Writer,
        *,
        requests: dict[str, Handler] | None = None,
        notifications: dict[str, Handler] | None = None,
        on_bad_line: Callable[[bytes, str], None] | None = None,
        on_message: Callable[[], None] | None = None,
        admit: Callable[[str, Any], None] | None = None,
        cancellable: dict[str, Handler] | None = None,
        label: str = "agentstream acp",
    ) -> None:
        self.source, self.sink = source, sink
        self.requests = requests or {}
        self.notifications = notifications or {}
        self.on_bad_line = on_bad_line
        self.on_message = on_message
        """Called for every message received (the client's idle timer)."""
        self.admit = admit
        """Called with a request's method and params on the reading thread, in the order requests arrive (before
        its handler runs on a thread of its own); raises RpcError to refuse it."""
        self.cancellable = cancellable or {}
        """Method -> what cancels a running request of it (given its params), on ``$/cancel_request``."""
        self.label = label
        self.closed = threading.Event()
        self._ids = itertools.count(1)
        self._waiting: dict[int, _Waiting] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._workers: list[threading.Thread] = []
        self._running: dict[tuple[type, Any], tuple[str, dict[str, Any]]] = {}
        """The requests being handled, by id (its type too: 1 and "1" are two ids), for ``$/cancel_request``."""

    # -- sending -----------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        """One message on one line; quietly dropped once the other side is gone."""
        line = p.JSON_ENCODER.encode({"jsonrpc": "2.0", **message}) + b"\n"
        with self._write_lock:
            try:
                self.sink.write(line)
                flush = getattr(self.sink, "flush", None)
                if flush is not None:
                    flush()
            except (BrokenPipeError, ValueError, OSError):
                self.closed.set()

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.send({"method": method, "params": params})

    def request(self, method: str, params: dict[str, Any], *, cancel: threading.Event | None = None) -> Any:
        """Send a request and wait for its result; raises RpcError, or PeerClosed when the connection ends.

        ``cancel`` stops the wait early (raises PeerClosed); a late answer is then dropped.
        """
        ident = next(self._ids)
        waiting = _Waiting()
        with self._lock:
            if self.closed.is_set():
                raise PeerClosed(f"{self.label}: the connection is closed")
            self._waiting[ident] = waiting
        self.send({"id": ident, "method": method, "params": params})
        try:
            while not waiting.answered.wait(0.05):
                if cancel is not None and cancel.is_set():
                    raise PeerClosed(f"{self.label}: stopped waiting for the answer to {method}")
        finally:
            with self._lock:
                self._waiting.pop(ident, None)
        if waiting.error is not None:
            raise waiting.error
        return waiting.result

    # -- receiving ---------------------------------------------------------------

    def serve(self) -> None:
        """Read and dispatch until the input ends; then fail whatever still waits for an answer."""
        try:
            for line in self.source:
                if line.strip():
                    self._dispatch(line)
        except (OSError, ValueError):
            pass  # the input went away: the same as its end
        finally:
            self.close()

    def start(self) -> threading.Thread:
        return start_thread(threading.Thread(target=self.serve, name="agentstream-acp-reader", daemon=True))

    def close(self) -> None:
        with self._lock:
            self.closed.set()
            waiting, self._waiting = list(self._waiting.values()), {}
        for item in waiting:
            item.error = PeerClosed(f"{self.label}: the connection closed before the answer came")
            item.answered.set()

    def join_workers(self, timeout: float) -> None:
        for worker in list(self._workers):
            worker.join(timeout)

    def _dispatch(self, line: bytes) -> None:
        try:
            try:
                message = p.JSON_DECODER.decode(line)
            except UnicodeDecodeError:  # a bad byte inside a string: the message is kept, the byte is U+FFFD
                message = p.JSON_DECODER.decode(line.decode("utf-8", "replace").encode())
        except (msgspec.DecodeError, RecursionError) as exc:
            self._bad(line, f"not JSON: {exc}", PARSE_ERROR, None)
            return
        if not isinstance(message, dict):
            self._bad(line, "not a JSON-RPC message (not an object)", INVALID_REQUEST, None)
            return
        if self.on_message is not None:
            self.on_message()
        method, ident = message.get("method"), message.get("id")
        if isinstance(method, str):
            params = message.get("params")
            params = {} if params is None else params  # null is taken as absent, as the ACP SDKs take it
            if "id" not in message:
                if method == CANCEL_REQUEST:
                    self._cancel_request(params)
                else:
                    self._serve_notification(line, method, params)
            elif _is_id(ident):
                self._serve_request(ident, method, params)
            else:
                self._bad(line, "the request's id is not a string, a number or null", INVALID_REQUEST, None)
        elif "method" in message:
            reason = "the method is not a string"
            self._bad(line, reason, INVALID_REQUEST, ident if _is_id(ident) else None)
        elif type(ident) is int and ("result" in message or "error" in message):
            self._answer(ident, message)
        elif "id" in message or "result" in message or "error" in message:
            # Shaped as a response (an error the peer sends about a line of ours, say): never answered, or
            # two peers that each answer the other's complaints would trade them for ever.
            if self.on_bad_line is not None:
                self.on_bad_line(line, "a response to no request of ours")
        else:
            self._bad(line, "not a JSON-RPC request, notification or response", INVALID_REQUEST, None)

    def _bad(self, line: bytes, reason: str, code: int, ident: Any) -> None:
        if self.on_bad_line is not None:
            self.on_bad_line(line, reason)
        if self.requests:  # a server says so, as JSON-RPC asks
            self.send({"id": ident, "error": {"code": code, "message": reason}})

    def _answer(self, ident: int, message: dict[str, Any]) -> None:
        with self._lock:
            waiting = self._waiting.get(ident)
        if waiting is None:
            return
        error = message.get("error")
        if "error" in message:
            if isinstance(error, dict):
                code, text = error.get("code"), error.get("message")
                waiting.error = RpcError(
                    code if isinstance(code, int) else INTERNAL_ERROR,
                    text if isinstance(text, str) else "error",
                    error.get("data"),
                )
            else:
                waiting.error = RpcError(INTERNAL_ERROR, "an error response without an error object")
        else:
            waiting.result = message.get("result")
        waiting.answered.set()

    def _serve_notification(self, line: bytes, method: str, params: Any) -> None:
        handler = self.notifications.get(method)
        if handler is None:
            return  # JSON-RPC: notifications are never answered, unknown ones are ignored
        if not isinstance(params, dict):  # never answered either: only reported
            if self.on_bad_line is not None:
                self.on_bad_line(line, f"the params of {method} must be an object, not {_json_kind(params)}")
            return
        try:
            handler(params)
        except Exception as exc:  # a handler bug costs one notification, never the connection
            sys.stderr.write(f"{self.label}: {method} failed: {exc}\n")

    def _serve_request(self, ident: Any, method: str, params: Any) -> None:
        """Refuse the request at once (on this thread, so in arrival order) or start its handler."""
        handler = self.requests.get(method)
        try:
            if self.admit is not None:
                self.admit(method, params)
            if handler is None:
                raise RpcError(METHOD_NOT_FOUND, f"unknown method {method!r}")
            if not isinstance(params, dict):
                raise RpcError(
                    INVALID_PARAMS, f"the params of {method} must be an object, not {_json_kind(params)}"
                )
        except RpcError as exc:
            self.send({"id": ident, "error": exc.to_json()})
            return
        if method in self.cancellable:
            with self._lock:
                self._running[(type(ident), ident)] = (method, params)
        worker = threading.Thread(
            target=self._run_request, args=(ident, handler, params), name=f"acp-{method}", daemon=True
        )
        self._workers = [w for w in self._workers if w.is_alive()] + [worker]
        worker.start()  # not start_thread: a handler may start processes (tools), which would inherit the mask

    def _cancel_request(self, params: Any) -> None:
        """JSON-RPC cancellation (ACP's ``$/cancel_request``): a running request that can stop early does.

        It then answers as its method says a cancelled call does (a prompt: ``stopReason: cancelled``);
        a request already answered, unknown, or that cannot be cancelled is left alone, as the protocol allows.
        """
        ident = params.get("requestId") if isinstance(params, dict) else None
        if not _is_id(ident):
            return
        with self._lock:
            running = self._running.get((type(ident), ident))
        if running is None:
            return
        method, request_params = running
        try:
            self.cancellable[method](request_params)
        except Exception as exc:  # a canceller bug costs the cancel, never the connection
            sys.stderr.write(f"{self.label}: cancelling {method} failed: {exc}\n")

    def _run_request(self, ident: Any, handler: Handler, params: dict[str, Any]) -> None:
        try:
            result = handler(params)
            answer: dict[str, Any] = {"result": result if result is not None else {}}
        except RpcError as exc:
            answer = {"error": exc.to_json()}
        except Exception as exc:
            answer = {"error": {"code": INTERNAL_ERROR, "message": f"{type(exc).__name__}: {exc}"}}
        with self._lock:  # answered from here on: a late cancel finds nothing to stop
            self._running.pop((type(ident), ident), None)
        self.send({"id": ident, **answer})


_JSON_TYPES: Final[dict[type, str]] = {
    str: "a string",
    int: "an integer",
    float: "a number",
    list: "an array",
    dict: "an object",
    bool: "a boolean",
}


def require(params: dict[str, Any], key: str, kind: type) -> Any:
    """A required parameter of the right JSON type, or an Invalid params error naming it."""
    value = params.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise RpcError(INVALID_PARAMS, f"{key} must be {_JSON_TYPES[kind]}", {"param": key})
    return value


def _is_id(value: Any) -> bool:
    """JSON-RPC 2.0's request id: a string, a number or null (never an object, an array or a boolean)."""
    return value is None or isinstance(value, str | float) or type(value) is int


def _json_kind(value: Any) -> str:
    return _JSON_TYPES.get(type(value), "null")
