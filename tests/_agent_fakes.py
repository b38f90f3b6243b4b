"""Fake model servers on loopback that speak the providers' real streaming wire formats.

A :class:`FakeModelServer` answers every POST with the next scripted
:class:`Reply` — an SSE stream (:class:`Sse`, built by :func:`openai_reply`,
:func:`anthropic_reply` or :func:`gemini_reply`) or an HTTP error with a real error
body (:class:`Status`, built by :func:`openai_error` / :func:`anthropic_error` /
:func:`gemini_error`). A
stream can drop the connection or stall part-way, which is how the tests
reproduce network failures and long waits. Every request is recorded, so tests
can assert on what the official SDKs actually sent.

Also here: :func:`run_exec`, which runs the real ``agentstream exec`` command in
a subprocess with a clean environment, and :func:`assert_valid_stream`, which
checks a stream-json output with the project's validator.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agentstream import protocol as p
from agentstream.validate import Validator

OPENAI_MODEL = "gpt-4.1-mini"
ANTHROPIC_MODEL = "claude-sonnet-4-5"
GEMINI_MODEL = "gemini-2.5-flash"


# -- scripted replies -----------------------------------------------------------


@dataclass
class Sse:
    """A 200 text/event-stream reply, sent as chunked transfer encoding like the real APIs.

    ``drop_after``: close the socket after that many events (no final chunk), as a
    dropped connection does. ``stall_after``: stop sending after that many events
    and hold the connection open until the server shuts down. A number among the
    events is a pause of that many seconds (see :func:`paced`).
    """

    events: list[bytes | float]
    drop_after: int | None = None
    stall_after: int | None = None


@dataclass
class Status:
    """An error status with a JSON body; ``{authorization}`` in the body is replaced by the
    credential header the client sent, like a careless proxy that echoes it. A ``str`` body
    with another ``content_type`` is sent as it is (a proxy's HTML page)."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


Reply = Sse | Status


def _sse(data: Any, event: str | None = None, *, end: str = "\n\n") -> bytes:
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"{head}data: {payload}{end}".encode()


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] if text else []


ToolCallSpec = tuple[str, str, dict[str, Any] | str]
"""(call id, tool name, arguments); arguments given as a string are sent as they are (broken JSON)."""


def _arguments_text(arguments: dict[str, Any] | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def paced(events: Sequence[bytes], every: float, *, after: int = 0) -> list[bytes | float]:
    """``events`` with a pause of ``every`` seconds before each one past the first ``after``."""
    out: list[bytes | float] = []
    for number, event in enumerate(events):
        if number >= after:
            out.append(every)
        out.append(event)
    return out


def openai_reply(
    text: str = "",
    tool_calls: Sequence[ToolCallSpec] = (),
    *,
    reasoning: str = "",
    usage: tuple[int, int] = (20, 10),
    cached: int = 0,
    model: str = OPENAI_MODEL,
    chunk: int = 4,
    finish: str | None = None,
    **sse: Any,
) -> Sse:
    """A Chat Completions stream: content deltas, indexed tool-call deltas, finish, usage, [DONE].

    ``finish`` overrides the finish reason (``length``, ``content_filter``)."""
    base = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": model,
    }

    def chunk_event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _sse({**base, "choices": [choice]})

    events = [chunk_event({"role": "assistant", "content": ""})]
    events += [chunk_event({"reasoning_content": part}) for part in _chunks(reasoning, chunk)]
    events += [chunk_event({"content": part}) for part in _chunks(text, chunk)]
    for index, (call_id, name, arguments) in enumerate(tool_calls):
        opening = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        events.append(chunk_event({"tool_calls": [opening]}))
        for part in _chunks(_arguments_text(arguments), 7):
            events.append(chunk_event({"tool_calls": [{"index": index, "function": {"arguments": part}}]}))
    events.append(chunk_event({}, finish or ("tool_calls" if tool_calls else "stop")))
    prompt, completion = usage
    totals = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    events.append(_sse({**base, "choices": [], "usage": totals}))
    events.append(_sse("[DONE]"))
    return Sse(events, **sse)


def anthropic_reply(
    text: str = "",
    tool_calls: Sequence[ToolCallSpec] = (),
    *,
    thinking: str = "",
    signature: str = "sig-fake-0001",
    usage: tuple[int, int] = (20, 10),
    cached: int = 0,
    model: str = ANTHROPIC_MODEL,
    chunk: int = 4,
    stop: str | None = None,
    cache_write: int = 0,
    input_at_end: bool = False,
    **sse: Any,
) -> Sse:
    """A Messages stream: message_start, content blocks with their deltas, message_delta, message_stop.

    ``stop`` overrides the stop reason; ``input_at_end`` gives the input tokens only in
    message_delta's usage (message_start says 0), as some compatible servers do.
    """
    prompt, completion = usage
    message = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 0 if input_at_end else prompt,
            "output_tokens": 1,
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": cache_write,
        },
    }
    events = [
        _sse({"type": "message_start", "message": message}, "message_start"),
        _sse({"type": "ping"}, "ping"),
    ]
    blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    if thinking:
        deltas = [{"type": "thinking_delta", "thinking": part} for part in _chunks(thinking, chunk)]
        blocks.append(
            (
                {"type": "thinking", "thinking": "", "signature": ""},
                [*deltas, {"type": "signature_delta", "signature": signature}],
            )
        )
    if text:
        blocks.append(
            (
                {"type": "text", "text": ""},
                [{"type": "text_delta", "text": part} for part in _chunks(text, chunk)],
            )
        )
    for call_id, name, arguments in tool_calls:
        parts = [
            {"type": "input_json_delta", "partial_json": part}
            for part in _chunks(_arguments_text(arguments), 7)
        ]
        blocks.append(({"type": "tool_use", "id": call_id, "name": name, "input": {}}, parts))
    for index, (start, deltas) in enumerate(blocks):
        events.append(
            _sse(
                {"type": "content_block_start", "index": index, "content_block": start}, "content_block_start"
            )
        )
        for delta in deltas:
            events.append(
                _sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")
            )
        events.append(_sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    ending = {"stop_reason": stop or ("tool_use" if tool_calls else "end_turn"), "stop_sequence": None}
    final_usage = {"output_tokens": completion, **({"input_tokens": prompt} if input_at_end else {})}
    events.append(_sse({"type": "message_delta", "delta": ending, "usage": final_usage}, "message_delta"))
    events.append(_sse({"type": "message_stop"}, "message_stop"))
    return Sse(events, **sse)


def responses_reply(
    text: str = "",
    tool_calls: Sequence[ToolCallSpec] = (),
    *,
    reasoning: str = "",
    usage: tuple[int, int] = (20, 10),
    cached: int = 0,
    reasoning_tokens: int = 0,
    model: str = OPENAI_MODEL,
    items: Sequence[dict[str, Any]] = (),
    failure: dict[str, Any] | None = None,
    response_id: str = "resp_fake",
    chunk: int = 4,
    **sse: Any,
) -> Sse:
    """A Responses API stream (``POST /v1/responses``, what Codex reads): ``response.created``, each
    output item added, streamed and done (a reasoning summary, the message, function calls, then
    ``items`` sent whole: a custom tool call, a web search), then ``response.completed`` with the
    usage, or ``response.failed`` with ``failure`` as its error."""
    events = [
        _sse(
            {
                "type": "response.created",
                "response": {"id": response_id, "model": model, "status": "in_progress"},
            },
            "response.created",
        )
    ]

    def item_events(
        index: int, opened: dict[str, Any], deltas: list[dict[str, Any]], done: dict[str, Any]
    ) -> None:
        events.append(
            _sse(
                {"type": "response.output_item.added", "output_index": index, "item": opened},
                "response.output_item.added",
            )
        )
        events.extend(
            _sse({**delta, "output_index": index, "item_id": opened["id"]}, delta["type"]) for delta in deltas
        )
        events.append(
            _sse(
                {"type": "response.output_item.done", "output_index": index, "item": done},
                "response.output_item.done",
            )
        )

    count = 0
    if reasoning:
        opened = {"type": "reasoning", "id": "rs_fake", "summary": []}
        part = [
            {
                "type": "response.reasoning_summary_part.added",
                "summary_index": 0,
                "part": {"type": "summary_text", "text": ""},
            }
        ]
        deltas = [
            {"type": "response.reasoning_summary_text.delta", "summary_index": 0, "delta": piece}
            for piece in _chunks(reasoning, chunk)
        ]
        item_events(
            count, opened, part + deltas, {**opened, "summary": [{"type": "summary_text", "text": reasoning}]}
        )
        count += 1
    if text:
        opened = {
            "type": "message",
            "id": "msg_fake",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        deltas = [
            {"type": "response.output_text.delta", "content_index": 0, "delta": piece}
            for piece in _chunks(text, chunk)
        ]
        done = {
            **opened,
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        item_events(count, opened, deltas, done)
        count += 1
    for call_id, name, arguments in tool_calls:
        body = _arguments_text(arguments)
        opened = {
            "type": "function_call",
            "id": f"fc_{call_id}",
            "call_id": call_id,
            "name": name,
            "arguments": "",
            "status": "in_progress",
        }
        deltas = [
            {"type": "response.function_call_arguments.delta", "delta": piece} for piece in _chunks(body, 7)
        ]
        item_events(count, opened, deltas, {**opened, "arguments": body, "status": "completed"})
        count += 1
    for item in items:
        item_events(count, item, [], item)
        count += 1
    prompt, completion = usage
    totals = {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": prompt + completion,
    }
    if failure is not None:
        failed = {"id": response_id, "model": model, "status": "failed", "error": failure}
        events.append(_sse({"type": "response.failed", "response": failed}, "response.failed"))
    else:
        completed = {"id": response_id, "model": model, "status": "completed", "usage": totals}
        events.append(_sse({"type": "response.completed", "response": completed}, "response.completed"))
    return Sse(events, **sse)


def gemini_reply(
    text: str = "",
    tool_calls: Sequence[tuple[str, dict[str, Any]]] = (),
    *,
    thinking: str = "",
    usage: tuple[int, int] = (20, 10),
    cached: int = 0,
    thoughts: int = 0,
    model: str = GEMINI_MODEL,
    chunk: int = 4,
    finish: str = "STOP",
    **sse: Any,
) -> Sse:
    """A ``streamGenerateContent?alt=sse`` stream of ``GenerateContentResponse`` chunks.

    Thought parts (``thought: true``) come first, then text, then one chunk per
    ``(name, args)`` function call, the last chunk carrying ``finishReason``. Like the
    real API, every chunk has ``usageMetadata`` (the prompt's count from the first, the
    candidates' only in the last) and events end in CRLF pairs.
    """
    prompt, completion = usage
    partial = {"promptTokenCount": prompt, "totalTokenCount": prompt}
    if cached:
        partial["cachedContentTokenCount"] = cached
    final = {**partial, "candidatesTokenCount": completion, "totalTokenCount": prompt + completion + thoughts}
    if thoughts:
        final["thoughtsTokenCount"] = thoughts
    parts: list[dict[str, Any]] = [{"text": piece, "thought": True} for piece in _chunks(thinking, chunk)]
    parts += [{"text": piece} for piece in _chunks(text, chunk)]
    parts += [{"functionCall": {"name": name, "args": args}} for name, args in tool_calls]
    parts = parts or [{"text": ""}]

    def chunk_event(part: dict[str, Any], last: bool) -> bytes:
        candidate: dict[str, Any] = {"content": {"parts": [part], "role": "model"}, "index": 0}
        if last:
            candidate["finishReason"] = finish
        body = {
            "candidates": [candidate],
            "usageMetadata": final if last else partial,
            "modelVersion": model,
            "responseId": "resp-fake-0001",
        }
        return _sse(body, end="\r\n\r\n")

    return Sse([chunk_event(part, n == len(parts) - 1) for n, part in enumerate(parts)], **sse)


def gemini_aside(path: str) -> Reply | None:
    """Gemini CLI's calls besides the conversation: ``countTokens``, and the one-shot ``generateContent`` of its
    model router and its checks, answered with JSON that fits each of their schemas."""
    if path.endswith(":countTokens"):
        return Status(200, {"totalTokens": 42})
    if ":generateContent" not in path:
        return None
    verdict = {
        "complexity_reasoning": "a direct request",
        "complexity_score": 10,
        "reasoning": "the model answered",
        "next_speaker": "user",
    }
    candidate = {
        "content": {"parts": [{"text": json.dumps(verdict)}], "role": "model"},
        "finishReason": "STOP",
    }
    usage = {"promptTokenCount": 5, "candidatesTokenCount": 3, "totalTokenCount": 8}
    return Status(
        200, {"candidates": [candidate], "usageMetadata": usage, "modelVersion": "gemini-2.5-flash-lite"}
    )


_GEMINI_ERRORS = {
    400: (
        "INVALID_ARGUMENT",
        "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
    ),
    401: ("UNAUTHENTICATED", "API key not valid. Please pass a valid API key."),
    429: ("RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."),
    500: (
        "INTERNAL",
        "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting",
    ),
}


def gemini_error(status: int, headers: Mapping[str, str] | None = None) -> Status:
    """A Google API error body: ``{"error": {code, message, status}}``."""
    kind, message = _GEMINI_ERRORS[status]
    return Status(
        status, {"error": {"code": status, "message": message, "status": kind}}, dict(headers or {})
    )


_OPENAI_ERRORS = {
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided: {authorization}."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests. Please try again in 20ms."),
    500: ("server_error", None, "The server had an error while processing your request."),
    400: (
        "invalid_request_error",
        "context_length_exceeded",
        "This model's maximum context length is 128000 tokens.",
    ),
}

_ANTHROPIC_ERRORS = {
    401: ("authentication_error", "invalid x-api-key: {authorization}"),
    429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
    500: ("api_error", "Internal server error"),
    529: ("overloaded_error", "Overloaded"),
    400: ("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"),
}


def openai_error(status: int, headers: Mapping[str, str] | None = None) -> Status:
    kind, code, message = _OPENAI_ERRORS[status]
    return Status(
        status,
        {"error": {"message": message, "type": kind, "param": None, "code": code}},
        dict(headers or {}),
    )


def anthropic_error(status: int, headers: Mapping[str, str] | None = None) -> Status:
    kind, message = _ANTHROPIC_ERRORS[status]
    body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_fake"}
    return Status(status, body, dict(headers or {}))


# -- the server -------------------------------------------------------------------


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class FakeModelServer:
    """A real HTTP/1.1 server on a free loopback port, answering POSTs from a script.

    ``ollama_models``: also answer ``GET /api/tags`` like a local Ollama with these models.
    ``aside``: answers a POST's path itself when it returns a reply (a client's side
    calls, such as Gemini CLI's routing, that a test does not script); still recorded.
    When the script runs out, the server answers 500 ``script exhausted`` so a
    test that makes more calls than it planned fails visibly.
    """

    def __init__(
        self,
        script: Iterable[Reply] = (),
        *,
        ollama_models: Sequence[str] | None = None,
        aside: Callable[[str], Reply | None] | None = None,
    ) -> None:
        self.script = list(script)
        self.ollama_models = ollama_models
        self.aside = aside
        self.requests: list[RecordedRequest] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self._httpd = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def posts(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == "POST"]

    def __enter__(self) -> FakeModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def next_reply(self) -> Reply:
        with self.lock:
            if self.script:
                return self.script.pop(0)
        return Status(500, {"error": {"message": "script exhausted", "type": "server_error"}})


class _QuietServer(ThreadingHTTPServer):
    """Clients that hang up (a killed process, a closed keep-alive connection) are normal here."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


def _handler_for(server: FakeModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _record(self, body: Any) -> None:
            with server.lock:
                server.requests.append(RecordedRequest(self.command, self.path, dict(self.headers), body))

        def do_GET(self) -> None:
            self._record(None)
            if server.ollama_models is not None and self.path == "/api/tags":
                models = [{"name": name, "model": name} for name in server.ollama_models]
                self._send_json(200, {"models": models}, {})
            else:
                self._send_json(404, {"error": "not found"}, {})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            self._record(json.loads(raw) if raw else None)
            reply = (server.aside and server.aside(self.path)) or server.next_reply()
            if isinstance(reply, Status):
                credential = self.headers.get("authorization") or self.headers.get("x-api-key") or ""
                body = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
                text = body.replace("{authorization}", credential)
                self._send_json(reply.status, text, reply.headers, reply.content_type)
            else:
                self._send_sse(reply)

        def _send_json(
            self, status: int, body: Any, headers: Mapping[str, str], content_type: str = "application/json"
        ) -> None:
            data = (body if isinstance(body, str) else json.dumps(body)).encode()
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _send_sse(self, reply: Sse) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.send_header(
                "request-id", f"req_fake_{len(server.requests):04d}"
            )  # as Anthropic's API names each
            self.end_headers()
            try:
                for number, event in enumerate(reply.events):
                    if number == reply.drop_after:
                        self._drop()
                        return
                    if number == reply.stall_after:
                        server.stop.wait(60)
                        self.close_connection = True
                        return
                    if isinstance(event, float):
                        if server.stop.wait(event):
                            return
                        continue
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                self.close_connection = True

        def _drop(self) -> None:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True

    return Handler


# -- running the command ----------------------------------------------------------


@dataclass
class ExecRun:
    """What a finished ``agentstream exec`` printed and returned."""

    returncode: int
    stdout: bytes
    stderr: str

    @property
    def lines(self) -> list[bytes]:
        return [line for line in self.stdout.splitlines() if line.strip()]

    @property
    def events(self) -> list[p.AnyEvent]:
        return [p.decode(line) for line in self.lines]

    def of_type(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]

    @property
    def result(self) -> p.Result:
        results = self.of_type("result")
        assert results, f"no result event; stderr:\n{self.stderr}"
        return results[-1]


def exec_env(home: Path, **extra: str) -> dict[str, str]:
    """A clean environment: no real keys, private state, tiny retry backoff, no Ollama."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "AGENTSTREAM_HOME": str(home / "state"),
        "ANTHROPIC_CONFIG_DIR": str(home / "anthropic-config"),
        "AGENTSTREAM_RETRY_BASE_MS": "5",
        "OLLAMA_HOST": f"127.0.0.1:{closed_port()}",
        "PYTHONUNBUFFERED": "1",
    }
    if "PYTHONPATH" in os.environ:  # the code under test, where it is not the installed copy
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    env.update(extra)
    return env


def openai_env(home: Path, server: FakeModelServer, **extra: str) -> dict[str, str]:
    return exec_env(
        home, **{"OPENAI_API_KEY": "sk-test-0123456789abcdef", "OPENAI_BASE_URL": server.url + "/v1", **extra}
    )


def anthropic_env(home: Path, server: FakeModelServer, **extra: str) -> dict[str, str]:
    return exec_env(
        home,
        **{"ANTHROPIC_API_KEY": "sk-ant-test-0123456789abcdef", "ANTHROPIC_BASE_URL": server.url, **extra},
    )


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def agentstream(command: str, dialect: str, data: bytes) -> subprocess.CompletedProcess[bytes]:
    """``agentstream COMMAND --from DIALECT -`` on ``data`` (what a CLI printed), as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "agentstream", command, "--from", dialect, "-"],
        input=data,
        capture_output=True,
        timeout=30,
    )


def exec_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "agentstream", "exec", *args]


def run_exec(
    args: Sequence[str], env: Mapping[str, str], *, cwd: Path, stdin: bytes | None = None, timeout: float = 30
) -> ExecRun:
    """Run ``agentstream exec ARGS`` to completion and capture everything."""
    proc = subprocess.run(
        exec_command(*args), input=stdin, capture_output=True, env=dict(env), cwd=cwd, timeout=timeout
    )
    return ExecRun(proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace"))


def start_exec(args: Sequence[str], env: Mapping[str, str], *, cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        exec_command(*args),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env),
        cwd=cwd,
    )


def finish(proc: subprocess.Popen[bytes], timeout: float = 30) -> ExecRun:
    out, err = proc.communicate(timeout=timeout)
    return ExecRun(proc.returncode, out, err.decode("utf-8", "replace"))


EnvFor = Callable[[Path, FakeModelServer], dict[str, str]]


def run_both_formats(
    script: Callable[[], list[Reply]], env_for: EnvFor, args: Sequence[str], *, home: Path, cwd: Path
) -> tuple[ExecRun, FakeModelServer]:
    """Run one scripted conversation twice at once, with stream-json and with json output.

    Checks what every scenario must satisfy: the stream-json output keeps every
    invariant, the json output is exactly one result object, both exit codes equal
    their ``result.exit_code``, and both runs end the same way. Returns the
    stream-json run and the server it talked to.
    """
    with FakeModelServer(script()) as lines_server, FakeModelServer(script()) as json_server:
        lines_proc = start_exec([*args, "-o", "stream-json"], env_for(home / "lines", lines_server), cwd=cwd)
        json_proc = start_exec([*args, "-o", "json"], env_for(home / "json", json_server), cwd=cwd)
        lines_run, json_run = finish(lines_proc), finish(json_proc)
    assert_valid_stream(lines_run.lines, lines_run.returncode)
    assert_json_object(json_run)
    same = ("ok", "subtype", "exit_code", "turn_count", "tools_used")
    assert [getattr(json_run.result, f) for f in same] == [getattr(lines_run.result, f) for f in same]
    return lines_run, lines_server


def assert_json_object(run: ExecRun) -> p.Result:
    """``--output-format json``: stdout is exactly one line, one result object, matching the exit code."""
    assert len(run.stdout.splitlines()) == 1, run.stdout[:500]
    result = p.decode(run.stdout)
    assert isinstance(result, p.Result), result
    assert result.exit_code == run.returncode, (result.exit_code, run.returncode, run.stderr)
    return result


class LiveExec:
    """A running ``agentstream exec`` whose stdout a test reads while it works (to time a signal)."""

    def __init__(self, args: Sequence[str], env: Mapping[str, str], *, cwd: Path) -> None:
        self.proc = start_exec(args, env, cwd=cwd)
        self.read = b""

    @property
    def lines(self) -> list[bytes]:
        return [line for line in self.read.split(b"\n")[:-1] if line]

    def wait_for(self, done: Callable[[list[bytes]], bool], timeout: float = 20) -> list[bytes]:
        """Read stdout until ``done(lines so far)`` holds."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while not done(self.lines):
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"timed out; read so far: {self.lines}"
            if select.select([fd], [], [], remaining)[0]:
                chunk = os.read(fd, 65536)
                assert chunk, f"stdout closed early; read so far: {self.lines}"
                self.read += chunk
        return self.lines

    def finish(self, timeout: float = 30) -> ExecRun:
        out, err = self.proc.communicate(timeout=timeout)
        return ExecRun(self.proc.returncode, self.read + out, err.decode("utf-8", "replace"))


# -- checking the output ----------------------------------------------------------


def assert_valid_stream(lines: Sequence[bytes], exit_code: int) -> list[p.AnyEvent]:
    """Every protocol invariant holds and the process exit code equals ``result.exit_code``."""
    validator = Validator(expect_exit=exit_code)
    events = []
    for number, line in enumerate(lines, 1):
        event = p.decode(line)
        events.append(event)
        validator.feed(event, number)
    violations = validator.close()
    assert not violations, "\n".join(map(str, violations))
    return events


def split_streams(lines: Sequence[bytes]) -> list[list[bytes]]:
    """Cut a concatenation of streams (one per stream-json input turn) at each result."""
    streams: list[list[bytes]] = [[]]
    for line in lines:
        streams[-1].append(line)
        if json.loads(line).get("type") == "result":
            streams.append([])
    return [s for s in streams if s]
