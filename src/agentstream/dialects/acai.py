"""acai ``instruct --streaming-json``: OpenAI Responses-style items, one per line.

Lines: ``init`` (session id, cwd, tools), ``message`` (any role, always complete),
``reasoning`` (summary segments), ``function_call`` (arguments as a JSON string),
``function_call_output`` and a closing ``result`` with summed usage. acai has no
timestamps, no deltas and no error line: a failure is the ``result``'s ``error``
string.
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
    identify,
    parse_arguments,
)
from agentstream.errors import ErrorCode

_SUMMARY_SEPARATOR = "\n\n"
# Later acai versions add result.exit_code: 1 agent error, 2 API error, 3 input error.
_CODE_FOR_EXIT = {2: ErrorCode.PROVIDER_ERROR, 3: ErrorCode.INVALID_INPUT}


class AcaiDecoder(EventDecoder):
    dialect = "acai"
    command = "acai instruct"
    identifying = identify(
        {
            "function_call": frozenset({"call_id", "name"}),
            "function_call_output": frozenset({"call_id"}),
            "result": frozenset({"success"}),
        }
    )

    def on_init(self, f: Fields) -> None:
        session_id = f.text("session_id")
        event = p.Start(command=self.command, cwd=f.opt_text("cwd") or "", tools=f.opt_strings("tools") or [])
        self.adopt_session(session_id)
        self.emit(event)

    def on_message(self, f: Fields) -> None:
        role, content = self.role_of(f), f.text("content")
        self.emit(p.Message(message_id=f.opt_text("id") or p.new_id("msg"), role=role, content=content))

    def role_of(self, f: Fields) -> p.Role:
        """A ``message``'s role; a dialect with roles of its own beyond the canonical four maps them here."""
        return f.role("role")

    def on_reasoning(self, f: Fields) -> None:
        reasoning_id = f.opt_text("id") or p.new_id("rsn")
        self.emit(p.Reasoning(reasoning_id=reasoning_id, content=_SUMMARY_SEPARATOR.join(self.segments(f))))

    def segments(self, f: Fields) -> list[str]:
        """The text of a ``reasoning`` item, in parts (joined with a blank line): its summary segments."""
        return segment_texts(f, "summary")

    def on_function_call(self, f: Fields) -> None:
        call_id, name = f.text("call_id"), f.text("name")
        arguments, problem = parse_arguments(f.obj.get("arguments"), f, "arguments")
        self.warn_arguments(f, problem, None)
        self.emit(p.ToolCall(call_id=self.tools.called(call_id, name), name=name, arguments=arguments))

    def on_function_call_output(self, f: Fields) -> None:
        call_id, output = f.text("call_id"), f.opt_text("output") or ""
        call_id, name = self.tools.finished(call_id, None)
        self.emit(p.ToolResult(call_id=call_id, name=name, status="success", output=output))

    def on_result(self, f: Fields) -> None:
        ok = f.flag("success")
        exit_code = 0 if ok else f.opt_integer("exit_code") or 1
        usage_fields = f.opt_sub("usage")
        usage = usage_totals(usage_fields) if usage_fields is not None else self.tally.usage
        error = None
        if not ok:
            message = f.opt_text("error") or "acai reported a failure without a message"
            error = p.ErrorInfo(code=_CODE_FOR_EXIT.get(exit_code, ErrorCode.UNKNOWN), message=message)
        self.emit_result(
            ok=ok,
            exit_code=exit_code,
            error=error,
            subtype=f.opt_text("subtype") or ("success" if ok else "error"),
            duration_ms=f.opt_integer("duration_ms") or 0,
            turn_count=f.opt_integer("turn_count") or 0,
            usage=usage,
        )


def segment_texts(f: Fields, key: str) -> list[str]:
    """The segments of the list under ``key``: strings, or Responses API ``{"type": ..., "text": ...}`` parts.

    Anything else is left out (and reported).
    """
    texts = []
    for item in f.opt_list(key) or []:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, dict) and isinstance(item.get("text"), str):
            texts.append(item["text"])
        else:
            f.lose(key, "must hold strings or objects with a string 'text'")
    return texts


def usage_totals(f: Fields) -> p.UsageTotals:
    """A Responses API ``usage`` object (the ``*_details`` hold the cached and reasoning parts) as totals."""
    cached = f.opt_sub("input_tokens_details")
    reasoning = f.opt_sub("output_tokens_details")
    return p.UsageTotals(
        input_tokens=f.opt_integer("input_tokens") or 0,
        output_tokens=f.opt_integer("output_tokens") or 0,
        cached_tokens=(cached.opt_integer("cached_tokens") if cached else None) or 0,
        reasoning_tokens=(reasoning.opt_integer("reasoning_tokens") if reasoning else None) or 0,
    )


class AcaiEncoder(EventEncoder):
    fold_fatal = True

    def on_start(self, event: p.Start) -> list[dict[str, Any]]:
        return [
            {"type": "init", "session_id": event.session_id, "cwd": event.cwd, "tools": list(event.tools)}
        ]

    def on_message(self, event: p.Message) -> list[dict[str, Any]]:
        return [{"type": "message", "role": event.role, "content": event.content, "id": event.message_id}]

    def on_reasoning(self, event: p.Reasoning) -> list[dict[str, Any]]:
        return [{"type": "reasoning", "id": event.reasoning_id, "summary": [event.content]}]

    def on_tool_call(self, event: p.ToolCall) -> list[dict[str, Any]]:
        return [
            {
                "type": "function_call",
                "id": item_id(event.call_id),
                "call_id": event.call_id,
                "name": event.name,
                "arguments": arguments_text(event.arguments),
            }
        ]

    def on_tool_result(self, event: p.ToolResult) -> list[dict[str, Any]]:
        output = event.output if event.output is not p.UNSET else event.error
        text = output if isinstance(output, str) else ""
        return [{"type": "function_call_output", "call_id": event.call_id, "output": text}]

    def on_result(self, event: p.Result) -> list[dict[str, Any]]:
        line: dict[str, Any] = {"type": "result", "success": event.ok, "subtype": event.subtype}
        failure = self.failure(event)
        if not event.ok:
            line["error"] = failure.message if failure is not None else "the run failed"
        line.update(
            duration_ms=event.duration_ms, turn_count=event.turn_count, usage=usage_object(event.usage)
        )
        return [line]


def usage_object(usage: p.UsageTotals) -> dict[str, Any]:
    """The inverse of :func:`usage_totals`."""
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def item_id(call_id: str) -> str:
    """acai's own item id for a function call (``fc_…``), derived from the call id."""
    return "fc_" + call_id.removeprefix("call_")


class AcaiDialect(SimpleDialect):
    name = "acai"
    summary = "acai instruct --streaming-json (Responses-style items)"
    decoder_class = AcaiDecoder
    encoder_class = AcaiEncoder

    def sniff(self, obj: dict[str, Any]) -> float:
        kind = obj.get("type")
        if "v" in obj or "seq" in obj or "timestamp" in obj:
            return 0.0
        if kind == "init" and isinstance(obj.get("session_id"), str) and "cwd" in obj and "tools" in obj:
            return 0.95
        if kind == "function_call" and isinstance(obj.get("arguments"), str) and "call_id" in obj:
            return 0.8
        if kind == "reasoning" and isinstance(obj.get("summary"), list):
            return 0.7
        if kind == "result" and isinstance(obj.get("success"), bool) and "turn_count" in obj:
            return 0.8
        return 0.0


DIALECT = AcaiDialect()
