"""AG-UI (Agent User Interaction protocol) events, as NDJSON or as SSE ``data:`` frames.

Lines: ``RUN_STARTED`` … ``RUN_FINISHED`` / ``RUN_ERROR`` around text messages
(``TEXT_MESSAGE_START`` / ``CONTENT`` / ``END`` or ``TEXT_MESSAGE_CHUNK``), tool
calls (``TOOL_CALL_START`` / ``ARGS`` / ``END`` or ``TOOL_CALL_CHUNK``, then
``TOOL_CALL_RESULT``), reasoning (``REASONING_*``, and the deprecated
``THINKING_*``), steps (``STEP_STARTED`` / ``STEP_FINISHED``), state
(``STATE_SNAPSHOT`` / ``STATE_DELTA`` / ``MESSAGES_SNAPSHOT``), activity,
subagent, ``CUSTOM`` and ``RAW`` events. Field names are camelCase; ``timestamp``
is epoch milliseconds.

The decoder reads both framings: a line is a JSON object, or an SSE ``data:``
line (``event:``/``id:``/``retry:`` lines, comments and blank lines are skipped).
The encoder writes NDJSON; ``AguiDialect().encoder(sse=True)`` writes SSE frames
as AG-UI's own ``EventEncoder`` does. Canonical events AG-UI has no event for
travel as ``CUSTOM`` events named ``agentstream.<type>``, and details AG-UI
events lack (tool status, step failure, result totals) in their ``metadata``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentstream import protocol as p
from agentstream.dialects.kit import (
    DialectEncoder,
    EventDecoder,
    EventEncoder,
    Fields,
    SimpleDialect,
    arguments_text,
    encode_object,
    epoch_ms,
    event_data,
    event_from_data,
    identify,
    malformed,
    parse_arguments,
    text_or_json,
)
from agentstream.errors import ErrorCode, MalformedEventError

CUSTOM_PREFIX = "agentstream."
"""``CUSTOM`` events with this name prefix carry a canonical event AG-UI has no event for."""
_GENERIC = frozenset(
    {
        "STATE_SNAPSHOT",
        "STATE_DELTA",
        "MESSAGES_SNAPSHOT",
        "ACTIVITY_SNAPSHOT",
        "ACTIVITY_DELTA",
        "RAW",
        "REASONING_ENCRYPTED_VALUE",
        "SUBAGENT_STARTED",
        "SUBAGENT_FINISHED",
        "SUBAGENT_ERROR",
    }
)
"""AG-UI events that become a canonical ``event`` named ``agui.<type in lower case>``."""
_QUIET = frozenset(
    {"REASONING_START", "REASONING_END", "REASONING_MESSAGE_START", "THINKING_START", "THINKING_END"}
)
"""Boundaries that carry nothing of their own (the content and end events do)."""
_AGUI_TYPES = (
    _GENERIC
    | _QUIET
    | frozenset(
        {
            "RUN_STARTED",
            "RUN_FINISHED",
            "RUN_ERROR",
            "STEP_STARTED",
            "STEP_FINISHED",
            "CUSTOM",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "TEXT_MESSAGE_CHUNK",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_CHUNK",
            "TOOL_CALL_RESULT",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_END",
            "REASONING_MESSAGE_CHUNK",
            "THINKING_TEXT_MESSAGE_START",
            "THINKING_TEXT_MESSAGE_CONTENT",
            "THINKING_TEXT_MESSAGE_END",
        }
    )
)
_CHUNKS = ("TEXT_MESSAGE_CHUNK", "TOOL_CALL_CHUNK", "REASONING_MESSAGE_CHUNK")
_ROLES: dict[str, p.Role] = {
    "developer": "system",
    "system": "system",
    "user": "user",
    "assistant": "assistant",
}
_TOOL_STATUSES = frozenset({"success", "error", "denied", "cancelled"})
_STATE_EVENTS = {
    "agui.state_snapshot": ("STATE_SNAPSHOT", "snapshot"),
    "agui.state_delta": ("STATE_DELTA", "delta"),
}
_SSE_FIELDS = (b"event", b"id", b"retry")


def _metadata(f: Fields) -> Fields:
    """An event's ``metadata`` (where our encoder puts what AG-UI has no field for); empty when absent."""
    return f.opt_sub("metadata") or f.child({}, "metadata")


def _content_text(value: object) -> str:
    """A tool result's ``content``: a string, or content parts whose text is joined (others become a marker)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        return text_or_json(value) if value is not None else ""
    parts = []
    for part in value:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
        else:
            parts.append(f"[{part.get('type', 'part') if isinstance(part, dict) else 'part'}]")
    return "\n".join(parts)


class _ToolCall:
    __slots__ = ("args", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.args: list[str] = []


class AguiDecoder(EventDecoder):
    dialect = "agui"
    command = "agui"
    identifying = identify(
        {
            **dict.fromkeys(
                ("TEXT_MESSAGE_START", "TEXT_MESSAGE_END", "REASONING_MESSAGE_END"), frozenset({"messageId"})
            ),
            # a content line's delta is the whole event
            **dict.fromkeys(
                ("TEXT_MESSAGE_CONTENT", "REASONING_MESSAGE_CONTENT"), frozenset({"messageId", "delta"})
            ),
            **dict.fromkeys(
                ("TOOL_CALL_START", "TOOL_CALL_END", "TOOL_CALL_RESULT"), frozenset({"toolCallId"})
            ),
            "TOOL_CALL_ARGS": frozenset({"toolCallId", "delta"}),
            "RUN_FINISHED": frozenset({"outcome.type"}),  # interrupted, cancelled or done
            **dict.fromkeys(
                ("THINKING_TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CHUNK", "REASONING_MESSAGE_CHUNK"),
                frozenset({"delta"}),
            ),
        }
    )

    def __init__(self, session_id: str | None = None) -> None:
        super().__init__(session_id)
        self._roles: dict[str, p.Role] = {}
        self._calls: dict[str, _ToolCall] = {}
        """Tool calls between START and END (their arguments still arriving)."""
        self._chunk: dict[str, str] = {}
        """The message, tool call or reasoning message a ``*_CHUNK`` run is writing, by chunk type."""
        self._thinking: str | None = None
        self._data: list[bytes | bytearray] = []

    # -- framing ---------------------------------------------------------------------

    def decode_line(self, line: bytes | bytearray) -> list[p.AnyEvent] | None:
        text = line.strip()
        if not text or text.startswith(b":"):
            return self._end_of_frame() if not text else []
        if text.startswith(b"{"):
            return super().decode_line(text)
        field, _, value = text.partition(b":")
        if field in _SSE_FIELDS:
            return []
        if field != b"data":
            return None
        self._data.append(value[1:] if value.startswith(b" ") else value)
        try:
            obj = msgspec.json.decode(b"\n".join(self._data))
        except msgspec.DecodeError:
            return []  # a payload split over several data: lines; the rest follows
        self._data = []
        if not isinstance(obj, dict):
            raise malformed("agui SSE frame: the data is not a JSON object")
        self.decode_object(obj)
        return self.drain()

    def _end_of_frame(self) -> list[p.AnyEvent]:
        data, self._data = self._data, []
        if data:
            preview = b"\n".join(data)[:80].decode("utf-8", "replace")
            raise malformed(f"agui SSE frame: its data is not valid JSON: {preview!r}")
        return []

    # -- dispatch ----------------------------------------------------------------------

    def handler_name(self, kind: str) -> str:
        if kind in _GENERIC:
            return "on_generic"
        if kind in _QUIET:
            return "on_quiet"
        return "on_" + kind.lower()

    def decode_object(self, obj: dict[str, Any]) -> None:
        kind = obj.get("type")
        for chunk_kind in _CHUNKS:
            if chunk_kind in self._chunk and kind != chunk_kind:
                self._close_chunk(chunk_kind)
        super().decode_object(obj)

    def finish(self) -> list[p.AnyEvent]:
        try:
            self._end_of_frame()
        except MalformedEventError as exc:  # the input ended inside an SSE frame
            self.emit(p.Error(code=ErrorCode.MALFORMED_EVENT, message=exc.message, recoverable=True))
        self._close_open()
        return super().finish()

    def _close_open(self) -> None:
        """Before the run ends: chunk runs end, tool calls whose arguments never ended are made, then answered."""
        for chunk_kind in list(self._chunk):
            self._close_chunk(chunk_kind)
        for call_id in list(self._calls):
            self._make_call(call_id, None)
        self.close_named_runs()
        self.close_open_calls("the run ended without the tool's result")

    # -- run ----------------------------------------------------------------------------

    def on_run_started(self, f: Fields) -> None:
        run_id, parent = f.text("runId"), f.opt_text("parentRunId")
        f.text("threadId")
        meta = _metadata(f)
        self.adopt_session(run_id)
        start = p.Start(
            command=meta.opt_text("command") or self.command,
            cwd=meta.opt_text("cwd") or "",
            tools=meta.opt_strings("tools") or _input_tools(f),
            parent_session_id=parent if parent is not None else p.UNSET,
        )
        for field in ("model", "provider"):
            value = meta.opt_text(field)
            if value is not None:
                setattr(start, field, value)
        self.emit(start, f.ts("timestamp"))

    def on_run_finished(self, f: Fields) -> None:
        ts, meta, outcome = f.ts("timestamp"), _metadata(f), f.opt_sub("outcome")
        outcome_type = (
            outcome.choice("type", ("success", "interrupt", "cancelled"), "success") if outcome else "success"
        )
        entries = _usage_entries(f)
        self._close_open()
        if not self.tally.turn_count and "usage" not in meta.obj:  # our own runs carry their usage events
            for usage in entries:
                self.emit(usage, ts)
        if outcome_type == "interrupt":
            assert outcome is not None
            self.emit(p.GenericEvent(name="agui.interrupt", data=outcome.opt_list("interrupts") or []), ts)
        error = None
        if outcome_type == "cancelled":
            error = p.ErrorInfo(code=ErrorCode.INTERRUPTED, message="the run was cancelled")
            self.emit(p.Error(code=error.code, message=error.message, recoverable=False), ts)
        value = f.obj.get("result")
        result = self._result(
            meta,
            entries,
            ok=error is None,
            error=error,
            subtype="interrupted" if error else "interrupt" if outcome_type == "interrupt" else "success",
        )
        if value is not None:
            result.result = text_or_json(value)
        self.emit(result, ts)

    def on_run_error(self, f: Fields) -> None:
        ts, message, code, meta = f.ts("timestamp"), f.text("message"), f.opt_text("code"), _metadata(f)
        entries = _usage_entries(f)
        self._close_open()
        error = p.ErrorInfo(code=code or ErrorCode.UNKNOWN, message=message)
        self.emit(p.Error(code=error.code, message=message, recoverable=False), ts)
        result = self._result(meta, entries, ok=False, error=error, subtype="error")
        text = meta.opt_text("result")
        if text is not None:
            result.result = text
        self.emit(result, ts)

    def _result(
        self, meta: Fields, entries: list[p.Usage], *, ok: bool, error: p.ErrorInfo | None, subtype: str
    ) -> p.Result:
        """The result, with what our own encoder put in ``metadata`` when it is there."""
        totals = _totals(meta.opt_mapping("usage"))
        if totals is None:
            totals = p.UsageTotals()
            for usage in entries or []:
                totals.add(usage)
            if not entries:
                totals = msgspec.structs.replace(self.tally.usage)
        exit_code = meta.opt_integer("exit_code") or (0 if ok else 1)
        if error is not None and error.code == ErrorCode.INTERRUPTED and exit_code == 1:
            exit_code = 130
        turns = meta.opt_integer("turn_count")
        return p.Result(
            ok=ok,
            subtype=meta.opt_text("subtype") or subtype,
            exit_code=0 if ok else exit_code or 1,
            duration_ms=meta.opt_integer("duration_ms") or 0,
            turn_count=turns if turns is not None else self.tally.turn_count,
            tools_used=list(self.tally.tools_used),
            usage=totals,
            error=error if error is not None else p.UNSET,
        )

    # -- steps and generic events ---------------------------------------------------------

    def on_step_started(self, f: Fields) -> None:
        self.emit(p.Step(name=f.text("stepName"), status="started"), f.ts("timestamp"))

    def on_step_finished(self, f: Fields) -> None:
        name, meta = f.text("stepName"), _metadata(f)
        step = p.Step(name=name, status="failed" if meta.opt_text("status") == "failed" else "completed")
        error, duration = meta.opt_text("error"), meta.opt_integer("duration_ms")
        if error is not None:
            step.error = error
        if duration is not None:
            step.duration_ms = duration
        if meta.opt_flag("synthetic"):
            step.synthetic = True
        self.emit(step, f.ts("timestamp"))

    def on_custom(self, f: Fields) -> None:
        name, value = f.text("name"), f.obj.get("value")
        event = (
            event_from_data(name.removeprefix(CUSTOM_PREFIX), value)
            if name.startswith(CUSTOM_PREFIX)
            else None
        )
        if event is None or isinstance(event, (p.Start, p.Result)):
            event = p.GenericEvent(name=name, data=value)
        self.emit(event, f.ts("timestamp"))

    def on_generic(self, f: Fields) -> None:
        kind = f.text("type")
        data: Any
        if kind == "STATE_SNAPSHOT":
            data = f.obj.get("snapshot")
        elif kind == "STATE_DELTA":
            data = f.opt_list("delta") or []
        elif kind == "MESSAGES_SNAPSHOT":
            data = f.opt_list("messages") or []
        else:
            data = {key: value for key, value in f.obj.items() if key not in ("type", "timestamp")}
        self.emit(p.GenericEvent(name=f"agui.{kind.lower()}", data=data), f.ts("timestamp"))

    def on_quiet(self, f: Fields) -> None:
        """Start/end boundaries of reasoning: the content and end events say everything."""

    # -- text ------------------------------------------------------------------------------

    def on_text_message_start(self, f: Fields) -> None:
        self._roles[f.text("messageId")] = _ROLES.get(f.opt_text("role") or "assistant", "assistant")

    def on_text_message_content(self, f: Fields) -> None:
        message_id, delta = f.text("messageId"), f.text("delta")
        if delta:
            self.delta(message_id, delta, ts=f.ts("timestamp"), role=self._roles.get(message_id, "assistant"))

    def on_text_message_end(self, f: Fields) -> None:
        message_id, content = f.text("messageId"), _metadata(f).opt_text("content")
        self.complete(
            message_id, content, ts=f.ts("timestamp"), role=self._roles.pop(message_id, "assistant")
        )

    def on_text_message_chunk(self, f: Fields) -> None:
        message_id, delta, role = f.opt_text("messageId"), f.opt_text("delta"), f.opt_text("role")
        message_id = self._chunk_id("TEXT_MESSAGE_CHUNK", message_id, "msg")
        if role is not None:
            self._roles[message_id] = _ROLES.get(role, "assistant")
        if delta:
            self.delta(message_id, delta, ts=f.ts("timestamp"), role=self._roles.get(message_id, "assistant"))

    def _chunk_id(self, chunk_kind: str, given: str | None, prefix: str) -> str:
        """The id a chunk writes to: a new id ends the run before it; none continues it (or starts one)."""
        current = self._chunk.get(chunk_kind)
        if given is not None and current is not None and given != current:
            self._close_chunk(chunk_kind)
            current = None
        if current is None:
            current = self._chunk[chunk_kind] = given or p.new_id(prefix)
        return current

    def _close_chunk(self, chunk_kind: str) -> None:
        run_id = self._chunk.pop(chunk_kind)
        if chunk_kind == "TEXT_MESSAGE_CHUNK":
            self.complete(run_id, role=self._roles.pop(run_id, "assistant"))
        elif chunk_kind == "REASONING_MESSAGE_CHUNK":
            self.complete(run_id, reasoning=True)
        else:
            self._make_call(run_id, None)

    # -- reasoning -------------------------------------------------------------------------

    def on_reasoning_message_content(self, f: Fields) -> None:
        message_id, delta = f.text("messageId"), f.text("delta")
        if delta:
            self.delta(message_id, delta, ts=f.ts("timestamp"), reasoning=True)

    def on_reasoning_message_end(self, f: Fields) -> None:
        message_id, content = f.text("messageId"), _metadata(f).opt_text("content")
        self.complete(message_id, content, ts=f.ts("timestamp"), reasoning=True)

    def on_reasoning_message_chunk(self, f: Fields) -> None:
        message_id = self._chunk_id("REASONING_MESSAGE_CHUNK", f.opt_text("messageId"), "rsn")
        delta = f.opt_text("delta")
        if delta:
            self.delta(message_id, delta, ts=f.ts("timestamp"), reasoning=True)

    def on_thinking_text_message_start(self, f: Fields) -> None:
        self._thinking = p.new_id("rsn")

    def on_thinking_text_message_content(self, f: Fields) -> None:
        delta = f.text("delta")
        if self._thinking is None:
            self._thinking = p.new_id("rsn")
        if delta:
            self.delta(self._thinking, delta, ts=f.ts("timestamp"), reasoning=True)

    def on_thinking_text_message_end(self, f: Fields) -> None:
        thinking, self._thinking = self._thinking or p.new_id("rsn"), None
        self.complete(thinking, ts=f.ts("timestamp"), reasoning=True)

    # -- tools -----------------------------------------------------------------------------

    def on_tool_call_start(self, f: Fields) -> None:
        self._calls[f.text("toolCallId")] = _ToolCall(f.text("toolCallName"))

    def on_tool_call_args(self, f: Fields) -> None:
        call_id, delta = f.text("toolCallId"), f.text("delta")
        self._calls.setdefault(call_id, _ToolCall("unknown")).args.append(delta)

    def on_tool_call_end(self, f: Fields) -> None:
        self._make_call(f.text("toolCallId"), f.ts("timestamp"))

    def on_tool_call_chunk(self, f: Fields) -> None:
        call_id, name, delta = f.opt_text("toolCallId"), f.opt_text("toolCallName"), f.opt_text("delta")
        call_id = self._chunk_id("TOOL_CALL_CHUNK", call_id, "call")
        call = self._calls.setdefault(call_id, _ToolCall(name or "unknown"))
        if name is not None:
            call.name = name
        if delta:
            call.args.append(delta)

    def _make_call(self, call_id: str, ts: str | None) -> None:
        call = self._calls.pop(call_id, None) or _ToolCall("unknown")
        text = "".join(call.args)
        fields = Fields({"args": text}, f"agui tool call {call_id!r}")
        arguments, problem = parse_arguments(text or None, fields, "args")
        self.warn_arguments(fields, problem, ts)
        self.emit(
            p.ToolCall(call_id=self.tools.called(call_id, call.name), name=call.name, arguments=arguments), ts
        )

    def on_tool_call_result(self, f: Fields) -> None:
        call_id, ts, meta = f.text("toolCallId"), f.ts("timestamp"), _metadata(f)
        content = _content_text(f.obj.get("content"))
        if call_id in self._calls:
            self._make_call(call_id, ts)
        call_id, name = self.tools.finished(call_id, None)
        result = p.ToolResult(call_id=call_id, name=name, status="success", output=content)
        _apply_tool_metadata(result, meta, content)
        self.emit(result, ts)


def _apply_tool_metadata(result: p.ToolResult, meta: Fields, content: str) -> None:
    """What our encoder put in a ``TOOL_CALL_RESULT``'s metadata: status, error, duration, truncation."""
    status = meta.opt_text("status")
    if status in _TOOL_STATUSES:
        result.status = status  # type: ignore[assignment]
    if "error" in meta.obj:
        error = meta.obj["error"]
        result.error = error if isinstance(error, str) else p.UNSET
    elif result.status != "success":  # the content is the error
        result.error, result.output = content, p.UNSET
    duration, truncated = meta.opt_integer("duration_ms"), meta.opt_flag("truncated")
    if duration is not None:
        result.duration_ms = duration
    if truncated is not None:
        result.truncated = truncated


def _input_tools(f: Fields) -> list[str]:
    run_input = f.opt_sub("input")
    tools = run_input.opt_list("tools") if run_input is not None else None
    return [
        tool["name"] for tool in tools or [] if isinstance(tool, dict) and isinstance(tool.get("name"), str)
    ]


def _usage_entries(f: Fields) -> list[p.Usage]:
    """``RUN_FINISHED``/``RUN_ERROR`` usage: one ``TokenUsage`` per provider and model."""
    return [
        p.Usage(
            model=entry.opt_text("model") or "unknown",
            input_tokens=entry.opt_integer("inputTokens") or 0,
            output_tokens=entry.opt_integer("outputTokens") or 0,
            cached_tokens=entry.opt_integer("cachedInputTokens") or 0,
            reasoning_tokens=entry.opt_integer("reasoningTokens") or 0,
        )
        for entry in f.opt_subs("usage")
    ]


def _totals(data: dict[str, Any] | None) -> p.UsageTotals | None:
    if data is None:
        return None
    try:
        return msgspec.convert(data, p.UsageTotals)
    except msgspec.ValidationError:
        return None


# -- encoding ----------------------------------------------------------------------------


class AguiEncoder(EventEncoder):
    """Canonical events as AG-UI events; ``sse=True`` frames each as ``data: …`` plus a blank line.

    It keeps AG-UI's ordering rules: every text message, reasoning message, tool
    call and step is closed before ``RUN_FINISHED``, a step is finished only while
    active, and ``TEXT_MESSAGE_START`` never repeats an active id.
    """

    fold_fatal = True

    def __init__(self, *, sse: bool = False) -> None:
        super().__init__()
        self.sse = sse
        self._text: dict[str, str] = {}
        """Open text messages -> their text so far."""
        self._reasoning: dict[str, str] = {}
        self._steps: list[str] = []
        self._models: dict[str, p.UsageTotals] = {}
        self._run_id = ""
        self._runs: dict[str, int] = {}
        """Runs started so far per session id: each run of a session gets an id of its own."""

    def end_turn(self) -> None:
        """``RUN_FINISHED`` and ``RUN_ERROR`` end the run and what was open in it; the next run starts clean."""
        super().end_turn()
        self._text.clear()
        self._reasoning.clear()
        self._steps.clear()
        self._models = {}

    def encode(self, event: p.AnyEvent) -> list[bytes]:
        return self._frame(super().encode(event))

    def finish(self) -> list[bytes]:
        return self._frame(super().finish())

    def _frame(self, lines: list[bytes]) -> list[bytes]:
        if not self.sse:
            return lines
        return [framed for line in lines for framed in (b"data: " + line, b"")]

    def _event(self, event: p.BaseEvent, kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "timestamp": epoch_ms(event.ts), **fields}

    def _custom(self, event: p.BaseEvent) -> list[dict[str, Any]]:
        return [self._event(event, "CUSTOM", name=CUSTOM_PREFIX + event.type, value=event_data(event))]

    # run

    def on_start(self, event: p.Start) -> list[dict[str, Any]]:
        meta: dict[str, Any] = {"command": event.command, "cwd": event.cwd, "tools": list(event.tools)}
        for field in ("model", "provider"):
            if getattr(event, field) is not p.UNSET:
                meta[field] = getattr(event, field)
        line = self._event(event, "RUN_STARTED", threadId=event.session_id, runId=self._next_run_id(event))
        if event.parent_session_id is not p.UNSET:
            line["parentRunId"] = event.parent_session_id
        line["metadata"] = meta
        return [line]

    def _next_run_id(self, start: p.Start) -> str:
        """The session id for a session's first run (the thread), then ``<session id>.<n>`` for its n-th:
        AG-UI clients tell runs apart by ``runId``."""
        session = start.session_id
        count = self._runs[session] = self._runs.get(session, 0) + 1
        self._run_id = session if count == 1 else f"{session}.{count}"
        return self._run_id

    def on_result(self, event: p.Result) -> list[dict[str, Any]]:
        meta: dict[str, Any] = {
            "subtype": event.subtype,
            "duration_ms": event.duration_ms,
            "turn_count": event.turn_count,
            "usage": msgspec.to_builtins(event.usage),
        }
        if event.ok:  # RUN_ERROR may come at any time; RUN_FINISHED only once everything is closed
            lines = self._close_all(event)
            line = self._event(event, "RUN_FINISHED", threadId=event.session_id, runId=self._run_id)
            if event.result is not p.UNSET:
                line["result"] = event.result
            usage = self._token_usage(event.usage)
            if usage:
                line["usage"] = usage
            line["metadata"] = meta
            return [*lines, line]
        failure = self.failure(event)
        meta["exit_code"] = event.exit_code
        if event.result is not p.UNSET:
            meta["result"] = event.result
        message = failure.message if failure is not None else f"the run failed ({event.subtype})"
        code = failure.code if failure is not None else ErrorCode.UNKNOWN
        return [self._event(event, "RUN_ERROR", message=message, code=code, metadata=meta)]

    def _token_usage(self, totals: p.UsageTotals) -> list[dict[str, Any]]:
        """``RUN_FINISHED.usage``: one entry per model the stream reported, else the totals."""
        per_model = self._models or ({"": totals} if totals.input_tokens or totals.output_tokens else {})
        entries = []
        for model, usage in per_model.items():
            entry: dict[str, Any] = {"model": model} if model else {}
            entry.update(
                inputTokens=usage.input_tokens,
                outputTokens=usage.output_tokens,
                totalTokens=usage.input_tokens + usage.output_tokens,
                reasoningTokens=usage.reasoning_tokens,
                cachedInputTokens=usage.cached_tokens,
            )
            entries.append(entry)
        return entries

    def _close_all(self, event: p.BaseEvent) -> list[dict[str, Any]]:
        """AG-UI rejects ``RUN_FINISHED`` while a message, reasoning message or step is open.

        The closing events are made up, and say so (``metadata.synthetic``).
        """
        made_up = {"synthetic": True}
        lines = [
            self._event(event, "TEXT_MESSAGE_END", messageId=message_id, metadata=made_up)
            for message_id in self._text
        ]
        for reasoning_id in self._reasoning:
            lines += [
                self._event(event, "REASONING_MESSAGE_END", messageId=reasoning_id, metadata=made_up),
                self._event(event, "REASONING_END", messageId=reasoning_id),
            ]
        lines += [
            self._event(event, "STEP_FINISHED", stepName=name, metadata=made_up)
            for name in reversed(self._steps)
        ]
        self._text.clear()
        self._reasoning.clear()
        self._steps.clear()
        return lines

    # text and reasoning

    def on_message_delta(self, event: p.MessageDelta) -> list[dict[str, Any]]:
        if event.role == "tool":
            return self._custom(event)
        lines = []
        if event.message_id not in self._text:
            self._text[event.message_id] = ""
            lines.append(
                self._event(event, "TEXT_MESSAGE_START", messageId=event.message_id, role=event.role)
            )
        if event.content:
            self._text[event.message_id] += event.content
            lines.append(
                self._event(event, "TEXT_MESSAGE_CONTENT", messageId=event.message_id, delta=event.content)
            )
        return lines

    def on_message(self, event: p.Message) -> list[dict[str, Any]]:
        if event.role == "tool":
            return self._custom(event)
        start = self.on_message_delta(
            p.MessageDelta(message_id=event.message_id, role=event.role, content="", ts=event.ts)
        )
        sent = self._text.pop(event.message_id)
        return [*start, *self._finish_text(event, "TEXT_MESSAGE", event.message_id, sent, event.content)]

    def _finish_text(
        self, event: p.BaseEvent, prefix: str, block_id: str, sent: str, content: str
    ) -> list[dict[str, Any]]:
        """The rest of the text as one more delta, then the end (carrying the full text when it differs)."""
        lines = []
        end = self._event(event, f"{prefix}_END", messageId=block_id)
        if content.startswith(sent):
            if content[len(sent) :]:
                lines.append(
                    self._event(event, f"{prefix}_CONTENT", messageId=block_id, delta=content[len(sent) :])
                )
        else:
            end["metadata"] = {"content": content}
        return [*lines, end]

    def on_reasoning_delta(self, event: p.ReasoningDelta) -> list[dict[str, Any]]:
        lines = []
        if event.reasoning_id not in self._reasoning:
            self._reasoning[event.reasoning_id] = ""
            lines += [
                self._event(event, "REASONING_START", messageId=event.reasoning_id),
                self._event(event, "REASONING_MESSAGE_START", messageId=event.reasoning_id, role="reasoning"),
            ]
        if event.content:
            self._reasoning[event.reasoning_id] += event.content
            lines.append(
                self._event(
                    event, "REASONING_MESSAGE_CONTENT", messageId=event.reasoning_id, delta=event.content
                )
            )
        return lines

    def on_reasoning(self, event: p.Reasoning) -> list[dict[str, Any]]:
        start = self.on_reasoning_delta(
            p.ReasoningDelta(reasoning_id=event.reasoning_id, content="", ts=event.ts)
        )
        sent = self._reasoning.pop(event.reasoning_id)
        end = self._finish_text(event, "REASONING_MESSAGE", event.reasoning_id, sent, event.content)
        return [*start, *end, self._event(event, "REASONING_END", messageId=event.reasoning_id)]

    # tools

    def on_tool_call(self, event: p.ToolCall) -> list[dict[str, Any]]:
        return [
            self._event(event, "TOOL_CALL_START", toolCallId=event.call_id, toolCallName=event.name),
            self._event(
                event, "TOOL_CALL_ARGS", toolCallId=event.call_id, delta=arguments_text(event.arguments)
            ),
            self._event(event, "TOOL_CALL_END", toolCallId=event.call_id),
        ]

    def on_tool_result(self, event: p.ToolResult) -> list[dict[str, Any]]:
        output = event.output if event.output is not p.UNSET else None
        error = event.error if event.error is not p.UNSET else None
        meta: dict[str, Any] = {}
        content = output or ""
        if event.status != "success":
            meta["status"] = event.status
            if output is None and error is not None:
                content = error
            else:
                meta["error"] = error
        elif error is not None:
            meta["error"] = error
        if event.duration_ms:
            meta["duration_ms"] = event.duration_ms
        if event.truncated is not p.UNSET:
            meta["truncated"] = event.truncated
        line = self._event(
            event,
            "TOOL_CALL_RESULT",
            messageId=self.made_up_id("msg"),
            toolCallId=event.call_id,
            content=content,
            role="tool",
        )
        if meta:
            line["metadata"] = meta
        return [line]

    # steps, state and everything else

    def on_step(self, event: p.Step) -> list[dict[str, Any]]:
        active = event.name in self._steps
        if event.status == "started" and not active:
            self._steps.append(event.name)
            return [self._event(event, "STEP_STARTED", stepName=event.name)]
        if event.status == "started" or not active:
            return self._custom(event)
        self._steps.remove(event.name)
        line = self._event(event, "STEP_FINISHED", stepName=event.name)
        meta = {key: value for key, value in event_data(event).items() if key in ("error", "duration_ms")}
        if event.status == "failed":
            meta["status"] = "failed"
        if meta:
            line["metadata"] = meta
        return [line]

    def on_event(self, event: p.GenericEvent) -> list[dict[str, Any]]:
        state = _STATE_EVENTS.get(event.name)
        if state is not None and (event.name != "agui.state_delta" or isinstance(event.data, list)):
            kind, field = state
            return [self._event(event, kind, **{field: event.data})]
        return [self._event(event, "CUSTOM", name=event.name, value=event.data)]

    def on_usage(self, event: p.Usage) -> list[dict[str, Any]]:
        self._models.setdefault(event.model, p.UsageTotals()).add(event)
        return self._custom(event)

    on_status = _custom
    on_log = _custom
    on_progress = _custom
    on_tool_progress = _custom
    on_error = _custom


class AguiDialect(SimpleDialect):
    name = "agui"
    exact_exit_code = True
    summary = "AG-UI events (NDJSON; SSE data: frames are read too)"
    decoder_class = AguiDecoder
    encoder_class = AguiEncoder

    def sniff(self, obj: dict[str, Any]) -> float:
        kind = obj.get("type")
        if "v" in obj or "seq" in obj or not isinstance(kind, str) or kind not in _AGUI_TYPES:
            return 0.0
        return 1.0 if kind == "RUN_STARTED" and "runId" in obj else 0.8

    def encoder(self, *, sse: bool = False) -> DialectEncoder:
        """NDJSON by default (what ``agentstream convert --to agui`` writes); ``sse=True`` for SSE frames."""
        return AguiEncoder(sse=sse)


def encode_sse(event: dict[str, Any]) -> bytes:
    """One AG-UI event as an SSE frame, exactly as AG-UI's ``EventEncoder`` writes it."""
    return b"data: " + encode_object(event) + b"\n\n"


DIALECT = AguiDialect()
