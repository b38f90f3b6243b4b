"""Cursor CLI ``--print --output-format stream-json`` (``cursor-agent`` / ``agent``).

Lines: ``system``/``init``, ``user``, ``assistant`` (``message.content[].text``),
``tool_call`` ``started``/``completed`` (the tool is the one key of ``tool_call``:
``readToolCall``, ``writeToolCall``, … or ``function {name, arguments}``), the
undocumented top-level ``thinking`` ``delta``/``completed``, and a terminal
``result`` on success only. Cursor has no error line.

``assistant`` lines come in three forms. With ``--stream-partial-output`` a line
with ``timestamp_ms`` and no ``model_call_id`` is a delta; once a stream has shown
one, the other two forms (the flush before a tool call, with ``model_call_id``, and
the final flush, with neither) repeat text already sent and are skipped. Without
partial output every ``assistant`` line is a complete segment.
"""

from __future__ import annotations

from typing import Any

from agentstream import protocol as p
from agentstream.dialects.kit import (
    EventDecoder,
    EventEncoder,
    Fields,
    SimpleDialect,
    arguments_text,
    epoch_ms,
    failure_text,
    identify,
    json_or_text,
    parse_arguments,
    rfc3339,
    text_or_json,
)
from agentstream.errors import code_from_wording

_SUFFIX = "ToolCall"
_FUNCTION = "function"
# Tools Cursor names with their own ``<name>ToolCall`` key (documented or seen in real streams);
# any other tool is written in the generic ``function`` form.
_NAMED_TOOLS = frozenset(
    {"read", "write", "edit", "shell", "grep", "glob", "ls", "delete", "mcp", "webSearch"}
)
_ERROR_TEXT_KEYS = ("message", "errorMessage", "error", "reason")
_MCP = "mcp"
_MCP_PREFIX = "mcp__"
_DONE = frozenset({"success", "complete", "registered", "startSuccess", "saveSuccess", "discardSuccess"})
"""Outcomes (the one key of a completed call's ``result``) that say the tool did its work."""
_PENDING = frozenset({"approved", "async", "stillRunning"})
"""Outcomes that answer the call without the work being done yet: not a failure."""
_REFUSED = frozenset(
    {"rejected", "needsConfirmation", "permissionDenied", "readPermissionDenied", "writePermissionDenied"}
)
"""Outcomes of a call that was not allowed to run (headless Cursor cannot ask for a confirmation)."""
_CARRIED_SYSTEM = frozenset({"task_notification", "background_shell_timeout"})


def _text_of(f: Fields) -> str:
    """The text of a Cursor ``message``: its ``text`` content parts, in order."""
    if f.opt_list("content") is None:
        f.lose("content", "is missing (expected a list of content parts)")
    return "".join(part.text("text") for part in f.opt_subs("content") if part.obj.get("type") == "text")


def _tool_of(f: Fields) -> tuple[str, Fields]:
    """The tool's key inside ``tool_call`` and its object."""
    for key, value in f.obj.items():
        if isinstance(value, dict) and (key == _FUNCTION or key.endswith(_SUFFIX)):
            return key, f.child(value, key)
    f.fail("no '<name>ToolCall' or 'function' object inside 'tool_call'")


def _error_text(value: object) -> str:
    if isinstance(value, dict):
        for key in _ERROR_TEXT_KEYS:
            if isinstance(value.get(key), str):
                return value[key]
    return text_or_json(value)


class CursorDecoder(EventDecoder):
    dialect = "cursor"
    command = "cursor-agent"
    identifying = identify(
        {
            "system": frozenset({"subtype"}),
            "assistant": frozenset(
                {"timestamp_ms", "model_call_id"}
            ),  # they tell a delta from a complete message
            "thinking": frozenset({"subtype"}),
            "tool_call": frozenset(
                {"subtype", "call_id", "tool_call", "tool_call.function", "tool_call.function.name"}
                | {f"tool_call.{name}{_SUFFIX}" for name in _NAMED_TOOLS}
            ),
            "result": frozenset({"is_error"}),
        }
    )

    def __init__(self, session_id: str | None = None) -> None:
        super().__init__(session_id)
        self._partial = False
        """True once a streaming delta was seen: later flush forms repeat text already sent."""

    def decode_object(self, obj: dict[str, Any]) -> None:
        """Every Cursor line names the session; the first one seen names the stream's."""
        session_id = obj.get("session_id")
        self.adopt_session(session_id if isinstance(session_id, str) else None)
        super().decode_object(obj)

    def _moment(self, stamp: float | None) -> str | None:
        """A line's ``timestamp_ms`` as its time, which also stamps the events of later lines that carry none (a
        ``log`` warning, a ``user`` or ``result`` line), so the stream's times do not jump to the clock's and back.
        """
        ts = rfc3339(stamp) if stamp is not None else None
        if ts is not None:
            self.line_ts = ts
        return ts

    def on_system(self, f: Fields) -> None:
        subtype = f.opt_text("subtype")
        if subtype in _CARRIED_SYSTEM:
            self._carry(subtype or "", f)
            return
        if subtype != "init":
            self.pass_through("system", f.obj)
            return
        cwd, model = f.opt_text("cwd"), f.opt_text("model")
        self.emit(p.Start(command=self.command, cwd=cwd or "", model=model or p.UNSET))

    def _carry(self, name: str, f: Fields) -> None:
        """A line with no canonical counterpart, kept whole as an ``event`` named ``cursor.<name>``."""
        data = {key: value for key, value in f.obj.items() if key not in ("type", "session_id")}
        self.emit(
            p.GenericEvent(name=f"cursor.{name}", data=data), self._moment(f.opt_number("timestamp_ms"))
        )

    def on_interaction_query(self, f: Fields) -> None:
        """A question the agent put to the client (a shell command to allow, a plan to accept …), and its answer."""
        self._carry("interaction_query", f)

    def on_retry(self, f: Fields) -> None:
        self._progress_status(f"retry_{f.opt_text('subtype') or 'starting'}", f)

    def on_connection(self, f: Fields) -> None:
        self._progress_status(f.opt_text("subtype") or "reconnecting", f)

    def _progress_status(self, status: str, f: Fields) -> None:
        """Cursor retrying a model call or reconnecting: the run goes on, so a ``status``."""
        attempt = f.opt_integer("attempt")
        message = f"attempt {attempt}" if attempt is not None else p.UNSET
        self.emit(p.Status(status=status, message=message), self._moment(f.opt_number("timestamp_ms")))

    def on_user(self, f: Fields) -> None:
        content = _text_of(f.sub("message"))
        self.emit(p.Message(message_id=p.new_id("msg"), role="user", content=content))

    def on_assistant(self, f: Fields) -> None:
        content = _text_of(f.sub("message"))
        stamp, model_call = f.opt_number("timestamp_ms"), f.opt_text("model_call_id")
        ts = self._moment(stamp)
        if stamp is not None and model_call is None:
            self._partial = True
            self.chunk(content, ts=ts)
        elif self._partial:
            self.close_run()
        else:
            self.emit(p.Message(message_id=p.new_id("msg"), role="assistant", content=content), ts)

    def on_thinking(self, f: Fields) -> None:
        subtype, ts = f.text("subtype"), self._moment(f.opt_number("timestamp_ms"))
        if subtype == "delta":
            self.chunk(f.opt_text("text") or "", ts=ts, reasoning=True)
        elif subtype == "completed":
            self.close_run()
        else:
            self.pass_through("thinking", f.obj)

    def on_tool_call(self, f: Fields) -> None:
        subtype, call_id = f.text("subtype"), f.opt_text("call_id")
        if subtype not in ("started", "completed"):
            self.pass_through("tool_call", f.obj)  # a stage of a call this reader does not know
            return
        call = f.sub("tool_call")
        key, tool = _tool_of(call)
        ts = self._moment(f.opt_number("timestamp_ms"))
        if key == _FUNCTION:
            name = tool.text("name")
            arguments, problem = parse_arguments(tool.obj.get("arguments"), tool, "arguments")
        else:
            name, arguments, problem = key.removesuffix(_SUFFIX), tool.opt_mapping("args") or {}, None
            if name == _MCP:
                name = _mcp_name(arguments)
        if subtype == "started":
            self.warn_arguments(tool, problem, ts)
            self.emit(
                p.ToolCall(call_id=self.tools.called(call_id, name), name=name, arguments=arguments), ts
            )
            return
        outcome = tool.opt_mapping("result")
        if outcome is None and key == _FUNCTION:
            outcome = call.opt_mapping(
                "result"
            )  # the undocumented generic form may carry it beside ``function``
        call_id, name = self.tools.finished(call_id, name)
        result = p.ToolResult(call_id=call_id, name=name, status="success")
        if outcome:
            _read_outcome(result, outcome)
        self.emit(result, ts)

    def on_result(self, f: Fields) -> None:
        is_error = bool(f.opt_flag("is_error"))
        subtype, text = f.opt_text("subtype"), f.opt_text("result")
        duration, usage = f.opt_integer("duration_ms") or 0, f.opt_sub("usage")
        fields: dict[str, Any] = {"duration_ms": duration, "result": text if text is not None else p.UNSET}
        if subtype is not None:
            fields["subtype"] = subtype
        if usage is not None:
            fields["usage"] = _usage(usage)
        info = None
        if is_error:
            message = text or "cursor-agent reported an error"
            info = p.ErrorInfo(code=code_from_wording(message), message=message)
        self.emit_result(ok=not is_error, exit_code=1 if is_error else 0, error=info, **fields)


def _read_outcome(result: p.ToolResult, outcome: dict[str, Any]) -> None:
    """A completed call's ``result``: one key naming the outcome (``success``, ``rejected``, ``fileNotFound``, …),
    holding its details. A shell command that ran but exited non-zero failed, as a shell would say."""
    kind, details = next(iter(outcome.items())) if len(outcome) == 1 else ("error", outcome)
    if kind in _DONE or kind in _PENDING:
        result.output = text_or_json(details)
        exit_code = details.get("exitCode") if isinstance(details, dict) else None
        if type(exit_code) is int and exit_code != 0:
            result.status, result.error = "error", f"exit code {exit_code}"
    elif kind in _REFUSED:
        result.status, result.error = "denied", _error_text(details) if details else kind
    else:
        result.status = "error"
        result.error = _error_text(details) if kind == "error" else f"{kind}: {_error_text(details)}"


def _mcp_name(arguments: dict[str, Any]) -> str:
    """An MCP call as ``mcp__<server>__<tool>``, the name MCP tools go by elsewhere (``mcp`` when it names none)."""
    server, tool = arguments.get("providerIdentifier"), arguments.get("toolName")
    if isinstance(server, str) and isinstance(tool, str) and server and tool:
        return f"{_MCP_PREFIX}{server}__{tool}"
    return _MCP


def _usage(f: Fields) -> p.UsageTotals:
    """The camelCase ``usage`` block later Cursor builds put on ``result`` (undocumented)."""
    written = f.opt_integer("cacheWriteTokens")
    return p.UsageTotals(
        input_tokens=f.opt_integer("inputTokens") or 0,
        output_tokens=f.opt_integer("outputTokens") or 0,
        cached_tokens=f.opt_integer("cacheReadTokens") or 0,
        cache_write_tokens=written if written else p.UNSET,
    )


def _content(text: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": text}]


class CursorEncoder(EventEncoder):
    """Writes Cursor lines. Deltas use the ``--stream-partial-output`` form (``timestamp_ms``, no
    ``model_call_id``) and the complete message after them the flush form (with ``model_call_id``),
    which readers skip and which marks where the message ended. Once a delta went out, a complete
    message without deltas goes out as one delta plus its flush, because a reader that follows
    Cursor's rules would skip a lone complete form as a repeat."""

    fold_fatal = True

    def __init__(self) -> None:
        super().__init__()
        self._partial = False
        self._texts: list[str] = []
        self._tools: dict[str, tuple[str, dict[str, Any]]] = {}

    def end_turn(self) -> None:
        """The next result's text is the next turn's; the partial-output form stays, as the decoder keeps it."""
        super().end_turn()
        self._texts = []
        self._tools.clear()

    def on_start(self, event: p.Start) -> list[dict[str, Any]]:
        line: dict[str, Any] = {
            "type": "system",
            "subtype": "init",
            "apiKeySource": "login",
            "cwd": event.cwd,
            "session_id": event.session_id,
        }
        if event.model is not p.UNSET:
            line["model"] = event.model
        line["permissionMode"] = "default"
        return [line]

    def _message(self, role: str, text: str) -> dict[str, Any]:
        return {
            "type": role,
            "message": {"role": role, "content": _content(text)},
            "session_id": self.session_id,
        }

    def _delta(self, event: p.BaseEvent, text: str) -> dict[str, Any]:
        self._partial = True
        return {**self._message("assistant", text), "timestamp_ms": epoch_ms(event.ts)}

    def on_message(self, event: p.Message) -> list[dict[str, Any]]:
        if event.role == "user":
            return [self._message("user", event.content)]
        if event.role != "assistant":
            return []
        self._texts.append(event.content)
        if self.closes_deltas(event.message_id):
            return [self._flush(event)]
        if self._partial:
            return [self._delta(event, event.content), self._flush(event)]
        return [self._message("assistant", event.content)]

    def _flush(self, event: p.Message) -> dict[str, Any]:
        """The flush form Cursor writes after a run of deltas: readers skip it, and it ends the run."""
        return {
            **self._message("assistant", event.content),
            "model_call_id": event.message_id,
            "timestamp_ms": epoch_ms(event.ts),
        }

    def on_message_delta(self, event: p.MessageDelta) -> list[dict[str, Any]]:
        if event.role != "assistant":
            return []
        self.wrote_delta(event.message_id)
        return [self._delta(event, event.content)]

    def _thinking(self, event: p.BaseEvent, subtype: str, text: str | None = None) -> dict[str, Any]:
        line: dict[str, Any] = {"type": "thinking", "subtype": subtype}
        if text is not None:
            line["text"] = text
        line.update(session_id=self.session_id, timestamp_ms=epoch_ms(event.ts))
        return line

    def on_reasoning_delta(self, event: p.ReasoningDelta) -> list[dict[str, Any]]:
        self.wrote_delta(event.reasoning_id)
        return [self._thinking(event, "delta", event.content)]

    def on_reasoning(self, event: p.Reasoning) -> list[dict[str, Any]]:
        lines = (
            [] if self.closes_deltas(event.reasoning_id) else [self._thinking(event, "delta", event.content)]
        )
        return [*lines, self._thinking(event, "completed")]

    def _tool_line(self, subtype: str, call_id: str, tool: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "tool_call",
            "subtype": subtype,
            "call_id": call_id,
            "tool_call": tool,
            "session_id": self.session_id,
        }

    def on_tool_call(self, event: p.ToolCall) -> list[dict[str, Any]]:
        spec: dict[str, Any]
        if event.name in _NAMED_TOOLS or _mcp_name(event.arguments) == event.name != _MCP:
            key = (_MCP if event.name.startswith(_MCP_PREFIX) else event.name) + _SUFFIX
            spec = {"args": event.arguments}
        else:
            key, spec = _FUNCTION, {"name": event.name, "arguments": arguments_text(event.arguments)}
        self._tools[event.call_id] = (key, spec)
        return [self._tool_line("started", event.call_id, {key: spec})]

    def on_tool_result(self, event: p.ToolResult) -> list[dict[str, Any]]:
        key, spec = self._tools.pop(event.call_id, (_FUNCTION, {"name": event.name, "arguments": "{}"}))
        if event.status != "success":
            kind, field = ("rejected", "reason") if event.status == "denied" else ("error", "message")
            spec = {**spec, "result": {kind: {field: failure_text(event) or event.status}}}
        elif event.output is not p.UNSET:
            spec = {**spec, "result": {"success": json_or_text(event.output)}}
        return [self._tool_line("completed", event.call_id, {key: spec})]

    def on_result(self, event: p.Result) -> list[dict[str, Any]]:
        failure = self.failure(event)
        if event.result is not p.UNSET:
            text = event.result
        elif failure is not None and not event.ok:
            text = failure.message
        else:
            text = "".join(self._texts)
        line: dict[str, Any] = {
            "type": "result",
            "subtype": event.subtype,
            "duration_ms": event.duration_ms,
            "duration_api_ms": event.duration_ms,
            "is_error": not event.ok,
            "result": text,
            "session_id": self.session_id,
        }
        usage = event.usage
        if usage.input_tokens or usage.output_tokens or usage.cached_tokens:
            line["usage"] = {
                "inputTokens": usage.input_tokens,
                "outputTokens": usage.output_tokens,
                "cacheReadTokens": usage.cached_tokens,
            }
            if usage.cache_write_tokens is not p.UNSET:
                line["usage"]["cacheWriteTokens"] = usage.cache_write_tokens
        return [line]


class CursorDialect(SimpleDialect):
    name = "cursor"
    json_output_is_result_line = True
    summary = "Cursor CLI --output-format stream-json"
    decoder_class = CursorDecoder
    encoder_class = CursorEncoder

    def sniff(self, obj: dict[str, Any]) -> float:
        kind = obj.get("type")
        if kind == "system" and obj.get("subtype") == "init":
            return _init_score(obj)
        if (
            kind == "tool_call"
            and obj.get("subtype") in ("started", "completed")
            and isinstance(obj.get("tool_call"), dict)
        ):
            return 0.9
        if kind == "thinking" and obj.get("subtype") in ("delta", "completed") and "v" not in obj:
            return 0.6
        if kind == "result" and _json_output_result(obj):
            return 0.8
        if kind in ("interaction_query", "retry", "connection") and isinstance(obj.get("session_id"), str):
            return 0.7
        return 0.0


def _init_score(obj: dict[str, Any]) -> float:
    """A ``system/init`` line. Claude Code's and Amp's look the same and carry ``tools`` and ``mcp_servers``,
    which Cursor's may carry too (its docs say they may be added), so those do not tell them apart: Cursor's
    ``apiKeySource`` values (``env``, ``flag``, ``login``; Claude Code writes ``none``, ``ANTHROPIC_API_KEY``,
    ``user`` …) do, above Claude's score for the same shape, unless the line has a field only Claude Code writes.
    """
    if not _CLAUDE_INIT_KEYS.isdisjoint(obj.keys()):
        return 0.0
    source = obj.get("apiKeySource")
    cursor_key = isinstance(source, str) and source in _API_KEY_SOURCES
    if "tools" in obj or "mcp_servers" in obj:
        return 0.95 if cursor_key else 0.0
    return 0.9 if cursor_key or "permissionMode" in obj else 0.0


_API_KEY_SOURCES = frozenset({"env", "flag", "login"})
_CLAUDE_INIT_KEYS = frozenset(
    {"claude_code_version", "uuid", "slash_commands", "output_style", "agents", "skills", "plugins"}
)
"""Fields of Claude Code's ``system/init`` that Cursor's has never had."""


def _json_output_result(obj: dict[str, Any]) -> bool:
    """The line ``--output-format json`` prints alone: Claude Code's and Amp's results count turns, and have
    neither Cursor's ``request_id`` and ``duration_api_ms`` nor its camelCase ``usage``."""
    if not isinstance(obj.get("is_error"), bool) or "num_turns" in obj:
        return False
    usage = obj.get("usage")
    return (
        "request_id" in obj
        or "duration_api_ms" in obj
        or (isinstance(usage, dict) and "inputTokens" in usage)
    )


DIALECT = CursorDialect()
