"""Locus ``exec --json-stream``: the ``CliStreamEvent`` envelope of ``@locusai/shared``.

Every line is ``{protocol: 1, type, sessionId, timestamp (epoch ms), payload}``.
Types: ``start``, ``text_delta``, ``thinking``, ``tool_started``,
``tool_completed``, ``status``, ``error`` (a ``ProtocolError`` with one of eight
codes) and ``done`` (always last, exactly once). A fatal error is immediately
followed by ``done``.

Canonical error codes outside Locus's eight travel as ``UNKNOWN`` with the
original code (and ``fix``, ``retry_in_ms``) under ``details.agentstream``, where
the original ``details`` move to ``details.details``; the decoder undoes this.

The rewritten CLI (0.21 on) writes the same type names flat, without the envelope
or ``protocol``: ``start {sessionId, timestamp (ISO)}``, ``status {state, elapsed}``,
``text_delta``/``thinking {content}``, ``tool_started {tool, params}``,
``tool_completed {tool, duration, summary, diff?}``, ``done {sessionId, stats}``
and ``error {message, retryable}``. It ends a failed run with that ``error`` alone
(no ``done``, exit status 0), so the decoder reads such an error as fatal. The
encoder writes the envelope, the shape with a schema.
"""

from __future__ import annotations

from typing import Any

from agentstream import protocol as p
from agentstream.dialects.kit import EventDecoder, EventEncoder, Fields, SimpleDialect, epoch_ms, identify
from agentstream.errors import ErrorCode

PROTOCOL = 1
LOCUS_CODES = frozenset(
    {
        "CLI_NOT_FOUND",
        "AUTH_EXPIRED",
        "NETWORK_TIMEOUT",
        "CONTEXT_LIMIT",
        "MALFORMED_EVENT",
        "PROCESS_CRASHED",
        "SESSION_NOT_FOUND",
        "UNKNOWN",
    }
)
LOCUS_TYPES = frozenset(
    {"start", "text_delta", "thinking", "tool_started", "tool_completed", "status", "error", "done"}
)
_FLAT = "flat "
"""Marks the line types of the rewritten CLI's flat lines in :attr:`LocusDecoder.identifying`."""
_EXTRAS = "agentstream"
_CARRIED_EXTRAS = ("code", "fix", "retry_in_ms")


class LocusDecoder(EventDecoder):
    dialect = "locus"
    command = "exec"
    identifying = identify(
        {
            **{kind: frozenset({"payload"}) for kind in LOCUS_TYPES},
            "thinking": frozenset({"payload", "payload.content"}),
            "tool_started": frozenset({"payload", "payload.tool"}),
            "tool_completed": frozenset({"payload", "payload.tool"}),
            "done": frozenset({"payload", "payload.success"}),
            **{_FLAT + kind: frozenset({"content"}) for kind in ("text_delta", "thinking")},
            _FLAT + "tool_started": frozenset({"tool"}),
            _FLAT + "tool_completed": frozenset({"tool"}),
            _FLAT + "error": frozenset({"message"}),
        }
    )

    def __init__(self, session_id: str | None = None) -> None:
        super().__init__(session_id)
        self._ts: str | None = None
        self._warned_protocol = False

    def decode_object(self, obj: dict[str, Any]) -> None:
        kind = obj.get("type")
        if not isinstance(kind, str) or kind not in LOCUS_TYPES:
            super().decode_object(obj)
            return
        rules_kind = self.rules_kind(obj)
        fields = self.fields(obj, f"locus '{kind}' line", rules_kind)
        self.checked(
            self._decode_envelope if rules_kind == kind else getattr(self, "on_flat_" + kind), fields
        )

    def rules_kind(self, obj: dict[str, Any]) -> str:
        """A line with neither the envelope's ``payload`` nor its ``protocol`` is one of the flat lines."""
        kind = super().rules_kind(obj)
        flat = kind in LOCUS_TYPES and "payload" not in obj and "protocol" not in obj
        return _FLAT + kind if flat else kind

    def _decode_envelope(self, envelope: Fields) -> None:
        payload = envelope.sub("payload")
        self.adopt_session(envelope.opt_text("sessionId"))
        self._ts = envelope.ts("timestamp")
        self._check_protocol(envelope.opt_integer("protocol"))
        getattr(self, "on_" + envelope.obj["type"])(payload)

    def _check_protocol(self, version: int | None) -> None:
        if version in (None, PROTOCOL) or self._warned_protocol:
            return
        self._warned_protocol = True
        self.emit(
            p.Log(
                level="warn", message=f"Locus protocol {version} is not {PROTOCOL}; decoding it as {PROTOCOL}"
            ),
            self._ts,
        )

    def on_start(self, f: Fields) -> None:
        command, cwd = f.text("command"), f.opt_text("cwd")
        model, provider = f.opt_text("model"), f.opt_text("provider")
        event = p.Start(command=command, cwd=cwd or "", model=model or p.UNSET, provider=provider or p.UNSET)
        self.emit(event, self._ts)

    def on_text_delta(self, f: Fields) -> None:
        self.chunk(f.text("content"), ts=self._ts)

    def on_thinking(self, f: Fields) -> None:
        content = f.opt_text("content")
        if content is None:
            self.emit(p.Status(status="thinking"), self._ts)
        else:
            self.chunk(content, ts=self._ts, reasoning=True)

    def on_tool_started(self, f: Fields) -> None:
        name, call_id, arguments = f.text("tool"), f.opt_text("toolId"), f.opt_mapping("parameters") or {}
        self.emit(
            p.ToolCall(call_id=self.tools.called(call_id, name), name=name, arguments=arguments), self._ts
        )

    def on_tool_completed(self, f: Fields) -> None:
        name, success, error = f.text("tool"), f.flag("success"), f.opt_text("error")
        call_id, duration = f.opt_text("toolId"), f.opt_number("duration")
        call_id, name = self.tools.finished(call_id, name)
        event = p.ToolResult(
            call_id=call_id,
            name=name,
            status="success" if success else "error",
            error=error if error is not None else p.UNSET,
            duration_ms=round(duration or 0),
        )
        self.emit(event, self._ts)

    def on_status(self, f: Fields) -> None:
        status, message = f.text("status"), f.opt_text("message")
        self.emit(p.Status(status=status, message=message if message is not None else p.UNSET), self._ts)

    def on_error(self, f: Fields) -> None:
        error = f.sub("error")
        code, message, recoverable = error.text("code"), error.text("message"), error.opt_flag("recoverable")
        details = error.obj.get("details", p.UNSET)
        extras = None
        if isinstance(details, dict) and isinstance(details.get(_EXTRAS), dict):
            extras = error.child(details, "details").sub(_EXTRAS)
            details = details.get("details", p.UNSET)
        fix, retry_in_ms = (
            (extras.opt_text("fix"), extras.opt_integer("retry_in_ms")) if extras else (None, None)
        )
        event = p.Error(
            code=(extras.opt_text("code") if extras else None) or code,
            message=message,
            recoverable=bool(recoverable),
            fix=fix if fix is not None else p.UNSET,
            retry_in_ms=retry_in_ms if retry_in_ms is not None else p.UNSET,
            details=details,
        )
        self.emit(event, self._ts)

    def on_done(self, f: Fields) -> None:
        exit_code, success = f.integer("exitCode"), f.flag("success")
        duration, tools_used = f.opt_number("duration"), f.opt_strings("toolsUsed")
        fields: dict[str, Any] = {"duration_ms": round(duration or 0)}
        if tools_used is not None:
            fields["tools_used"] = tools_used
        ok = success and exit_code == 0
        error = None if ok else self.fatal_info()
        # Locus sets success from exitCode; should they disagree, ok and exit_code must still agree.
        self.emit_result(ok=ok, exit_code=exit_code or (0 if ok else 1), ts=self._ts, error=error, **fields)

    # the flat lines of the rewritten CLI (0.21 on)

    def on_flat_start(self, f: Fields) -> None:
        self.adopt_session(f.opt_text("sessionId"))
        self.emit(p.Start(command=self.command), f.ts("timestamp"))

    def on_flat_status(self, f: Fields) -> None:
        self.emit(p.Status(status=f.text("state")))

    def on_flat_text_delta(self, f: Fields) -> None:
        self.chunk(f.text("content"))

    def on_flat_thinking(self, f: Fields) -> None:
        self.chunk(f.text("content"), reasoning=True)

    def on_flat_tool_started(self, f: Fields) -> None:
        name, arguments = f.text("tool"), f.opt_mapping("params") or {}
        self.emit(p.ToolCall(call_id=self.tools.called(None, name), name=name, arguments=arguments))

    def on_flat_tool_completed(self, f: Fields) -> None:
        call_id, name = self.tools.finished(None, f.text("tool"))
        summary, diff, duration = f.opt_text("summary"), f.opt_text("diff"), f.opt_number("duration")
        output = "\n".join(part for part in (summary, diff) if part)
        event = p.ToolResult(
            call_id=call_id,
            name=name,
            status="success",
            output=output or p.UNSET,
            duration_ms=round(duration or 0),
        )
        self.emit(event)

    def on_flat_error(self, f: Fields) -> None:
        message, retryable = f.text("message"), f.opt_flag("retryable")
        code, fix = _flat_error_code(message)
        event = p.Error(
            code=code,
            message=message,
            fix=fix or p.UNSET,
            details={"retryable": retryable} if retryable is not None else p.UNSET,
        )
        self.emit(event)

    def on_flat_done(self, f: Fields) -> None:
        stats = f.opt_sub("stats")
        duration = stats.opt_number("duration") if stats else None
        self.emit_result(ok=True, exit_code=0, duration_ms=round(duration or 0))


_FLAT_FAILURES = (
    ("No prompt provided", ErrorCode.INVALID_INPUT, 'give the prompt: locus exec --json-stream "…"'),
    ("CLI not available", ErrorCode.CLI_NOT_FOUND, "install the provider's CLI, or choose another provider"),
    ("No sandbox configured", ErrorCode.INVALID_INPUT, "create the sandbox with `locus sandbox`"),
)
"""The failures the rewritten CLI words itself, told by their text (its ``error`` lines carry no code)."""


def _flat_error_code(message: str) -> tuple[str, str | None]:
    for words, code, fix in _FLAT_FAILURES:
        if words in message:
            return code, fix
    return ErrorCode.UNKNOWN, None


class LocusEncoder(EventEncoder):
    """Writes Locus lines with Locus's guarantees: ``start`` first, ``done`` last on every path (see
    :class:`EventEncoder`), and a failed run's ``done`` immediately after a fatal ``error`` — the one the
    stream had (held for it), else one made from the result's error."""

    fold_fatal = True

    def _line(self, event: p.BaseEvent, kind: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {
                "protocol": PROTOCOL,
                "type": kind,
                "sessionId": event.session_id or self.session_id,
                "timestamp": epoch_ms(event.ts),
                "payload": payload,
            }
        ]

    def on_start(self, event: p.Start) -> list[dict[str, Any]]:
        payload: dict[str, Any] = {"command": event.command}
        if event.model is not p.UNSET:
            payload["model"] = event.model
        if event.provider is not p.UNSET:
            payload["provider"] = event.provider
        if event.cwd:
            payload["cwd"] = event.cwd
        return self._line(event, "start", payload)

    def on_message(self, event: p.Message) -> list[dict[str, Any]]:
        if event.role != "assistant" or self.closes_deltas(event.message_id):
            return []
        return self._line(event, "text_delta", {"content": event.content})

    def on_message_delta(self, event: p.MessageDelta) -> list[dict[str, Any]]:
        if event.role != "assistant":
            return []
        self.wrote_delta(event.message_id)
        return self._line(event, "text_delta", {"content": event.content})

    def on_reasoning(self, event: p.Reasoning) -> list[dict[str, Any]]:
        if self.closes_deltas(event.reasoning_id):
            return []
        return self._line(event, "thinking", {"content": event.content})

    def on_reasoning_delta(self, event: p.ReasoningDelta) -> list[dict[str, Any]]:
        self.wrote_delta(event.reasoning_id)
        return self._line(event, "thinking", {"content": event.content})

    def on_tool_call(self, event: p.ToolCall) -> list[dict[str, Any]]:
        payload = {"tool": event.name, "toolId": event.call_id, "parameters": event.arguments}
        return self._line(event, "tool_started", payload)

    def on_tool_result(self, event: p.ToolResult) -> list[dict[str, Any]]:
        payload: dict[str, Any] = {
            "tool": event.name,
            "toolId": event.call_id,
            "success": event.status == "success",
        }
        if event.duration_ms:
            payload["duration"] = event.duration_ms
        if event.error is not p.UNSET:
            payload["error"] = event.error
        return self._line(event, "tool_completed", payload)

    def on_status(self, event: p.Status) -> list[dict[str, Any]]:
        payload: dict[str, Any] = {"status": event.status}
        if event.message is not p.UNSET:
            payload["message"] = event.message
        return self._line(event, "status", payload)

    def on_error(self, event: p.Error) -> list[dict[str, Any]]:
        code = event.code if event.code in LOCUS_CODES else ErrorCode.UNKNOWN
        extras = {
            key: value
            for key, value in (("code", event.code), ("fix", event.fix), ("retry_in_ms", event.retry_in_ms))
            if value is not p.UNSET and (key != "code" or value != code)
        }
        error: dict[str, Any] = {"code": code, "message": event.message}
        if extras:
            error["details"] = {_EXTRAS: extras}
            if event.details is not p.UNSET:
                error["details"]["details"] = event.details
        elif event.details is not p.UNSET:
            error["details"] = event.details
        error["recoverable"] = event.recoverable
        return self._line(event, "error", {"error": error})

    def on_result(self, event: p.Result) -> list[dict[str, Any]]:
        lines = []
        if self.held_fatal is not None:
            lines += self.on_error(self.held_fatal)
        elif not event.ok:
            failure = self.failure(event) or p.ErrorInfo(code=ErrorCode.UNKNOWN, message="the run failed")
            fatal = p.Error(
                code=failure.code,
                message=failure.message,
                fix=failure.fix,
                session_id=event.session_id,
                ts=event.ts,
            )
            lines += self.on_error(fatal)
        payload: dict[str, Any] = {
            "exitCode": event.exit_code,
            "duration": event.duration_ms,
            "toolsUsed": event.tools_used,
        }
        tokens = event.usage.input_tokens + event.usage.output_tokens
        if tokens:
            payload["tokensUsed"] = tokens
        payload["success"] = event.ok
        return lines + self._line(event, "done", payload)


class LocusDialect(SimpleDialect):
    name = "locus"
    exact_exit_code = True
    summary = "Locus exec --json-stream (the CliStreamEvent envelope, or the flat lines of 0.21 on)"
    decoder_class = LocusDecoder
    encoder_class = LocusEncoder

    def sniff(self, obj: dict[str, Any]) -> float:
        kind = obj.get("type")
        if not isinstance(kind, str) or kind not in LOCUS_TYPES:
            return 0.0
        if not isinstance(obj.get("payload"), dict):
            return _sniff_flat(kind, obj)
        if obj.get("protocol") == PROTOCOL and "sessionId" in obj:
            return 1.0
        return 0.8


def _sniff_flat(kind: str, obj: dict[str, Any]) -> float:
    """How sure a line is one of the rewritten CLI's: by the fields each of its types always has."""
    if "protocol" in obj or "payload" in obj:
        return 0.0
    if kind == "start" and isinstance(obj.get("sessionId"), str) and isinstance(obj.get("timestamp"), str):
        return 0.9 if len(obj) == 3 else 0.6
    if kind == "done" and isinstance(obj.get("stats"), dict) and "sessionId" in obj:
        return 0.9
    if kind == "status" and "state" in obj and "elapsed" in obj:
        return 0.8
    if kind == "error" and isinstance(obj.get("retryable"), bool) and isinstance(obj.get("message"), str):
        return 0.7
    if kind == "tool_completed" and "summary" in obj:
        return 0.6
    return 0.0


DIALECT = LocusDialect()
