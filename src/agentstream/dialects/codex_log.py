"""Codex's rollout files: ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl`` (decode-only).

Every line is ``{timestamp, type, payload}`` with ``type`` one of
``session_meta`` (first: ``id``, ``cwd``, ``cli_version``…), ``turn_context``
(``model``, ``cwd`` for the turns that follow), ``response_item`` (the model's
history: ``message``, ``reasoning``, ``function_call`` /
``function_call_output``, ``custom_tool_call`` / ``custom_tool_call_output``,
``local_shell_call``, ``web_search_call``), ``event_msg`` (``token_count``,
``task_started`` / ``task_complete`` (with an ``error`` when the turn failed),
``turn_aborted``, ``error``, and ``user_message`` / ``agent_message`` /
``agent_reasoning`` / ``item_completed``, which repeat response items and are
not decoded twice), ``token_usage_record`` (one call's usage, which
``token_count`` repeats) and ``compacted``.

Usage: ``token_count`` carries the session's running ``total_token_usage`` and
the ``last_token_usage`` of one call, and is often written twice for one call;
:func:`usage_step` takes the growth of the total, so each call counts once.
Codex's ``input_tokens`` already include ``cached_input_tokens`` (and the newer
``cache_write_input_tokens``), and its ``output_tokens`` include
``reasoning_output_tokens`` — the canonical meanings.
"""

from __future__ import annotations

import re
from typing import Any

from agentstream import protocol as p
from agentstream.dialects._session_log import LogDialect, Outcome, SessionLogDecoder
from agentstream.dialects.codex import Tokens, _error_code, growth
from agentstream.dialects.kit import Fields, identify, parse_arguments, text_or_json

__all__ = ["DIALECT", "usage_step"]

PROVIDER = "openai"
"""Whose models Codex calls when its rollout does not name a ``model_provider`` (the GenAI conventions' name)."""
_REPEATED_EVENTS = frozenset(
    {
        "user_message",
        "agent_message",
        "agent_reasoning",
        "agent_reasoning_raw_content",
        "item_completed",
    }
)
"""``event_msg`` types that repeat a ``response_item`` of the same turn."""
_EXIT_LINE = re.compile(r"^(?:Process exited with code|Exit code:) (-?\d+)$", re.MULTILINE)
"""How Codex heads a command's output for the model (``exec_command``, ``shell_command``, ``apply_patch``)."""
_OUTPUT_MARK = "Output:\n"
_ROLES: dict[str, p.Role] = {
    "user": "user",
    "assistant": "assistant",
    "developer": "system",
    "system": "system",
}


def usage_step(previous: Tokens | None, info: object) -> tuple[Tokens | None, Tokens | None]:
    """(the new running total, the usage of the call(s) since ``previous``) for one ``token_count`` ``info``.

    A repeated event adds nothing; a total that shrank (a new session file resumed
    under another total) falls back to ``last_token_usage``. An event whose total cannot
    be read is lost whole and leaves ``previous`` as it was: counting its
    ``last_token_usage`` would count that call again in the next good total's growth.
    """
    if not isinstance(info, dict):
        return previous, None
    total = Tokens.read(info.get("total_token_usage"))
    if total is None:
        return previous, None
    step = growth(previous, total)
    if step is None:
        step = Tokens.read(info.get("last_token_usage")) or Tokens()
    return total, step if any(step) else None


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        item["text"] for item in content if isinstance(item, dict) and isinstance(item.get("text"), str)
    )


def _tool_output(output: object) -> tuple[str, bool]:
    """(text, failed) of a tool output: a string (often JSON ``{output, metadata: {exit_code}}``), or content items."""
    if isinstance(output, dict):
        text = _content_text(output.get("content")) if "content" in output else text_or_json(output)
        return text, output.get("success") is False
    if isinstance(output, list):
        return _content_text(output), False
    if not isinstance(output, str):
        return "", False
    if output.startswith("{"):
        try:
            parsed = p.JSON_DECODER.decode(output)
        except Exception:  # plain text that happens to start with a brace
            return output, False
        if isinstance(parsed, dict) and isinstance(parsed.get("output"), str):
            metadata = parsed.get("metadata")
            exit_code = metadata.get("exit_code") if isinstance(metadata, dict) else None
            return parsed["output"], isinstance(exit_code, int) and exit_code != 0
    return output, _exit_code(output) not in (None, 0)


def _exit_code(output: str) -> int | None:
    """The exit code in the head of a command's output text (before ``Output:``; the command's own text
    could say anything), as Codex writes it since its output stopped being JSON."""
    head, mark, _ = output.partition(_OUTPUT_MARK)
    found = _EXIT_LINE.search(head) if mark else None
    return int(found[1]) if found else None


class CodexLogDecoder(SessionLogDecoder):
    dialect = "codex-log"
    command = "codex"
    log_noun = "Codex rollout"
    identifying = identify(
        {
            "*": ["payload"],
            "response_item": ["payload.type", "payload.call_id"],
            "event_msg": ["payload.type"],
        }
    )
    """Every record's content is its ``payload``; an item's or an event's own ``type`` says what it is, and a
    tool call's ``call_id`` is what pairs it with its output."""

    def __init__(self, session_id: str | None = None) -> None:
        super().__init__(session_id)
        self.model = "unknown"
        self._total: Tokens | None = None
        self._turn_open = False
        self._last = Outcome("open", "the Codex rollout has no conversation")

    def handler_name(self, kind: str) -> str:
        return "on_" + kind

    def decode_object(self, obj: dict[str, Any]) -> None:
        self.note_time(obj.get("timestamp"))
        super().decode_object(obj)

    def finish(self) -> list[p.AnyEvent]:
        self.end_session()
        return super().finish()

    def on_session_meta(self, f: Fields) -> None:
        meta = f.sub("payload")
        self.adopt_session(meta.opt_text("id"))
        provider = meta.opt_text("model_provider") or PROVIDER
        self.emit(p.Start(command=self.command, cwd=meta.opt_text("cwd") or "", provider=provider))

    def on_turn_context(self, f: Fields) -> None:
        context = f.sub("payload")
        model = context.opt_text("model")
        if model:
            self.model = model
        data = {key: context.obj[key] for key in ("model", "cwd", "effort") if key in context.obj}
        self.emit(p.GenericEvent(name="codex.turn_context", data=data))

    def on_compacted(self, f: Fields) -> None:
        self.emit(
            p.GenericEvent(name="codex.compacted", data={"message": f.sub("payload").opt_text("message")})
        )

    # -- response items: the model's history -------------------------------------------

    def on_response_item(self, f: Fields) -> None:
        item = f.sub("payload")
        kind = item.text("type")
        handler = getattr(self, f"_item_{kind}", None)
        if handler is None:
            self.pass_through(f"response_item.{kind}", f.obj)
            return
        handler(item)

    def _item_message(self, item: Fields) -> None:
        role = _ROLES.get(item.text("role"), "system")
        text = _content_text(item.obj.get("content"))
        self.emit(p.Message(message_id=item.opt_text("id") or p.new_id("msg"), role=role, content=text))
        self._last = Outcome("done") if role == "assistant" else self._last

    def _item_reasoning(self, item: Fields) -> None:
        """Reasoning the model showed; an item whose summary is an empty list showed none (it is encrypted)."""
        summary = item.opt_list("summary")
        text = _content_text(summary) or _content_text(item.opt_list("content"))
        if text or summary != []:
            self.emit(p.Reasoning(reasoning_id=item.opt_text("id") or p.new_id("rsn"), content=text))

    def _call(self, call_id: str | None, name: str, arguments: dict[str, Any]) -> None:
        self.emit(p.ToolCall(call_id=self.tools.called(call_id, name), name=name, arguments=arguments))

    def _item_function_call(self, item: Fields) -> None:
        arguments, problem = parse_arguments(item.obj.get("arguments"), item, "arguments")
        self.warn_arguments(item, problem, None)
        self._call(item.opt_text("call_id"), item.text("name"), arguments)

    def _item_custom_tool_call(self, item: Fields) -> None:
        self._call(item.opt_text("call_id"), item.text("name"), {"input": item.opt_text("input") or ""})

    def _item_local_shell_call(self, item: Fields) -> None:
        action = item.opt_mapping("action") or {}
        self._call(item.opt_text("call_id") or item.opt_text("id"), "local_shell", action)

    def _item_web_search_call(self, item: Fields) -> None:
        call_id = self.tools.called(item.opt_text("id"), "web_search")
        self.emit(p.ToolCall(call_id=call_id, name="web_search", arguments=item.opt_mapping("action") or {}))
        failed = item.opt_text("status") == "failed"
        self.tools.finished(call_id, "web_search")
        self.emit(
            p.ToolResult(
                call_id=call_id,
                name="web_search",
                status="error" if failed else "success",
                error="the search failed" if failed else p.UNSET,
            )
        )

    def _output(self, item: Fields) -> None:
        text, failed = _tool_output(item.obj.get("output"))
        call_id, name = self.tools.finished(item.text("call_id"), None)
        if failed:
            self.emit(
                p.ToolResult(call_id=call_id, name=name, status="error", output=text, error=text or "failed")
            )
        else:
            self.emit(p.ToolResult(call_id=call_id, name=name, status="success", output=text))

    _item_function_call_output = _output
    _item_custom_tool_call_output = _output

    # -- events: usage and turn boundaries -----------------------------------------------

    def on_event_msg(self, f: Fields) -> None:
        event = f.sub("payload")
        kind = event.text("type")
        if kind in _REPEATED_EVENTS:
            return
        if kind == "token_count":
            info = event.obj.get("info")
            if isinstance(info, dict) and Tokens.read(info.get("total_token_usage")) is None:
                event.child(info, "info").lose(
                    "total_token_usage", "cannot be read as a running total of token counts"
                )
            self._total, step = usage_step(self._total, info)
            if step is not None:
                self.emit(step.usage(self.model))
        elif kind in ("task_started", "turn_started"):
            self._turn_open = True
            if (
                self._last.kind == "failed"
            ):  # a later turn: the failure is the earlier turn's, and not the end
                self.emit(p.Error(code=self._last.code, message=self._last.message, recoverable=True))
        elif kind in ("task_complete", "turn_complete"):
            self._turn_open = False
            self._last = self._completed(event.opt_sub("error"))
        elif kind == "turn_aborted":
            self._turn_open = False
            reason = event.opt_text("reason") or "interrupted"
            self._last = Outcome("interrupted", f"the turn was aborted ({reason})")
        elif kind == "error":
            message = event.opt_text("message") or "error"
            self.emit(p.Error(code=_error_code(message), message=message, recoverable=True))
        else:
            self.pass_through(f"event_msg.{kind}", f.obj)

    @staticmethod
    def _completed(error: Fields | None) -> Outcome:
        """A turn that completed with an ``error`` (an API failure Codex stopped retrying) failed."""
        if error is None:
            return Outcome("done")
        message = error.opt_text("message") or "the turn failed"
        return Outcome("failed", message, _error_code(message))

    def on_token_usage_record(self, f: Fields) -> None:
        """One call's usage, which the ``token_count`` event that follows it repeats in its running total."""

    def outcome(self) -> Outcome:
        if self.tools.unanswered():
            return Outcome("open", "the Codex rollout ends while a tool call waits for its result")
        if self._turn_open:
            return Outcome("open", "the Codex rollout ends in the middle of a turn")
        return self._last


_LINE_TYPES = frozenset({"response_item", "event_msg", "turn_context", "compacted"})


class CodexLogDialect(LogDialect):
    name = "codex-log"
    summary = "Codex rollout files ($CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl)"
    decoder_class = CodexLogDecoder

    def sniff(self, obj: dict[str, Any]) -> float:
        if "v" in obj or "seq" in obj or not isinstance(obj.get("payload"), dict) or "timestamp" not in obj:
            return 0.0
        kind = obj.get("type")
        if kind == "session_meta":
            return 1.0
        return 0.9 if isinstance(kind, str) and kind in _LINE_TYPES else 0.0


DIALECT = CodexLogDialect()
