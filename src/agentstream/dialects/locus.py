"""Locus ``exec --json-stream``: the ``CliStreamEvent`` envelope of ``@locusai/shared``.

Every line is ``{protocol: 1, type, sessionId, timestamp (epoch ms), payload}``.
Types: ``start``, ``text_delta``, ``thinking``, ``tool_started``,
``tool_completed``, ``status``, ``error`` (a ``ProtocolError`` with one of eight
codes) and ``done`` (always last, exactly once). A fatal error is immediately
followed by ``done``.

Canonical error codes outside Locus's eight travel as ``UNKNOWN`` with the
original code (and ``fix``, ``retry_in_ms``) under ``details.agentstream``, where
the original ``details`` move to ``details.details``; the decoder undoes this.
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
_EXTRAS = "agentstream"
_CARRIED_EXTRAS = ("code", "fix", "retry_in_ms")


class LocusDecoder(EventDecoder):
    dialect = "locus"
    command = "exec"
    identifying = identify(
        {
            "*": frozenset({"payload"}),
            "thinking": frozenset({"payload.content"}),
            "tool_started": frozenset({"payload.tool"}),
            "tool_completed": frozenset({"payload.tool"}),
            "done": frozenset({"payload.success"}),
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
        self.checked(self._decode_envelope, self.fields(obj, f"locus '{kind}' line", kind))

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
    summary = "Locus exec --json-stream (CliStreamEvent envelope)"
    decoder_class = LocusDecoder
    encoder_class = LocusEncoder

    def sniff(self, obj: dict[str, Any]) -> float:
        kind = obj.get("type")
        if not isinstance(kind, str) or kind not in LOCUS_TYPES or not isinstance(obj.get("payload"), dict):
            return 0.0
        if obj.get("protocol") == PROTOCOL and "sessionId" in obj:
            return 1.0
        return 0.8


DIALECT = LocusDialect()
