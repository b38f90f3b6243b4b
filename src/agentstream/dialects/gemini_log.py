"""Gemini CLI's chat logs: ``~/.gemini/tmp/<project>/chats/session-*.jsonl`` (decode-only).

The JSONL form is appended to as the session runs: a first metadata record
(``sessionId``, ``projectHash``, ``startTime``, ``lastUpdated``, ``kind``), then
message records (``id``, ``timestamp``, ``type`` — ``user``, ``gemini``,
``info``, ``warning``, ``error`` — and ``content``; ``gemini`` ones also
``model``, ``thoughts``, ``tokens`` and ``toolCalls``), ``{"$set": {...}}``
metadata updates and ``{"$rewindTo": id}`` rewinds. A message is re-appended
whole each time it grows (its tokens arrive, its tool calls finish): the
decoder emits only what is new in each copy, so every call, result and usage
appears once. The older JSON form (one ``ConversationRecord`` with a
``messages`` array) is read when it is on one line; ``agentstream usage``
also reads it pretty-printed.

A rewind does not take back what was already said (or billed): it becomes an
``event`` ``gemini.rewind``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from agentstream import protocol as p
from agentstream.dialects._session_log import LogDialect, Outcome, SessionLogDecoder
from agentstream.dialects.kit import Fields, rfc3339, text_or_json
from agentstream.errors import ErrorCode

__all__ = ["DIALECT", "GeminiTokens", "parts_text"]

_FINISHED = {"success": "success", "error": "error", "cancelled": "cancelled"}
_LOG_LEVELS: dict[str, p.LogLevel] = {"info": "info", "warning": "warn"}


class GeminiTokens(NamedTuple):
    """A message's ``tokens`` in canonical terms: input counts cached ones, output counts thoughts."""

    input: int
    output: int
    cached: int
    reasoning: int

    @classmethod
    def read(cls, value: object) -> GeminiTokens | None:
        if not isinstance(value, dict):
            return None

        def count(key: str) -> int:
            n = value.get(key)
            return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else 0

        thoughts = count("thoughts")
        tokens = cls(count("input") + count("tool"), count("output") + thoughts, count("cached"), thoughts)
        return tokens if any(tokens) else None


def parts_text(content: object) -> str:
    """A ``PartListUnion`` (a string, a part, or a list of them) as text; non-text parts are left out."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return content["text"] if isinstance(content.get("text"), str) else ""
    if isinstance(content, list):
        return "".join(parts_text(part) for part in content)
    return ""


def _result_text(call: dict[str, Any]) -> str:
    """A tool call's output: its ``functionResponse`` parts, else the display text Gemini showed."""
    texts = []
    result = call.get("result")
    for part in result if isinstance(result, list) else [result]:
        response = part.get("functionResponse") if isinstance(part, dict) else None
        body = response.get("response") if isinstance(response, dict) else None
        if isinstance(body, dict):
            value = body.get("output", body.get("error", body))
            texts.append(value if isinstance(value, str) else text_or_json(value))
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            texts.append(part["text"])
    if texts:
        return "\n".join(texts)
    display = call.get("resultDisplay")
    return display if isinstance(display, str) else ""


class _Seen:
    """What already went out for one message id."""

    __slots__ = ("calls", "results", "text", "thoughts", "tokens")

    def __init__(self) -> None:
        self.text = False
        self.thoughts = 0
        self.tokens = False
        self.calls: set[str] = set()
        self.results: set[str] = set()


class GeminiLogDecoder(SessionLogDecoder):
    dialect = "gemini-log"
    command = "gemini"
    log_noun = "Gemini chat log"

    def __init__(self, session_id: str | None = None) -> None:
        super().__init__(session_id)
        self._seen: dict[str, _Seen] = {}
        self._last = Outcome("open", "the Gemini chat log has no conversation")

    def finish(self) -> list[p.AnyEvent]:
        self.end_session()
        return super().finish()

    def decode_object(self, obj: dict[str, Any]) -> None:
        self.note_time(obj.get("timestamp"))
        super().decode_object(obj)

    def decode_untyped(self, obj: dict[str, Any]) -> None:
        """Metadata, ``$set`` and ``$rewindTo`` records (and the older one-record form) have no ``type``."""
        if isinstance(obj.get("sessionId"), str) and "projectHash" in obj:
            self._metadata(obj)
        elif isinstance(obj.get("$set"), dict):
            update = obj["$set"]
            messages = update.get("messages")
            if isinstance(messages, list):
                self._messages(messages)
            rest = {key: value for key, value in update.items() if key not in ("messages", "lastUpdated")}
            if rest:
                self.emit(p.GenericEvent(name="gemini.metadata", data=rest))
        elif isinstance(obj.get("$rewindTo"), str):
            self.emit(p.GenericEvent(name="gemini.rewind", data={"to": obj["$rewindTo"]}))
        else:
            self.pass_through("gemini.record", obj)

    def _metadata(self, obj: dict[str, Any]) -> None:
        self.note_time(obj.get("startTime"))
        if not self.started:
            self.adopt_session(obj["sessionId"])
            self.emit(p.Start(command=self.command))
        messages = obj.get("messages")
        if isinstance(messages, list):  # the older form: the whole conversation in one record
            self._messages(messages)

    def _messages(self, messages: list[Any]) -> None:
        for message in messages:
            if isinstance(message, dict):
                self.decode_object(message)

    def _state(self, f: Fields) -> _Seen:
        message_id = f.text("id")
        seen = self._seen.get(message_id)
        if seen is None:
            seen = self._seen[message_id] = _Seen()
        return seen

    def on_user(self, f: Fields) -> None:
        seen = self._state(f)
        if seen.text:
            return
        seen.text = True
        text = parts_text(f.obj.get("content"))
        self.emit(p.Message(message_id=f.text("id"), role="user", content=text))
        self._last = Outcome("open", "the Gemini chat log ends before the model's reply")

    def on_gemini(self, f: Fields) -> None:
        seen = self._state(f)
        message_id = f.text("id")
        model = f.opt_text("model") or "unknown"
        thoughts = f.opt_list("thoughts") or []
        for index, thought in enumerate(thoughts[seen.thoughts :], start=seen.thoughts):
            if isinstance(thought, dict):
                subject, description = thought.get("subject"), thought.get("description")
                text = "\n".join(part for part in (subject, description) if isinstance(part, str) and part)
                self.emit(p.Reasoning(reasoning_id=f"{message_id}#thought{index}", content=text))
        seen.thoughts = max(seen.thoughts, len(thoughts))
        text = parts_text(f.obj.get("content"))
        if text and not seen.text:
            seen.text = True
            self.emit(p.Message(message_id=message_id, role="assistant", content=text))
        for call in f.opt_list("toolCalls") or []:
            if isinstance(call, dict):
                self._tool_call(Fields(call, "toolCalls[]", f), seen)
        tokens = GeminiTokens.read(f.obj.get("tokens"))
        if tokens is not None and not seen.tokens:
            seen.tokens = True
            self.emit(
                p.Usage(
                    model=model,
                    input_tokens=tokens.input,
                    output_tokens=tokens.output,
                    cached_tokens=tokens.cached,
                    reasoning_tokens=tokens.reasoning,
                )
            )
        self._last = Outcome("done")

    def _tool_call(self, call: Fields, seen: _Seen) -> None:
        call_id, name = call.text("id"), call.text("name")
        if call_id not in seen.calls:
            seen.calls.add(call_id)
            self.emit(
                p.ToolCall(
                    call_id=self.tools.called(call_id, name),
                    name=name,
                    arguments=call.opt_mapping("args") or {},
                ),
                rfc3339(call.obj.get("timestamp")),
            )
        status = _FINISHED.get(call.opt_text("status") or "")
        if status is None or call_id in seen.results:
            return
        seen.results.add(call_id)
        self.tools.finished(call_id, name)
        text = _result_text(call.obj)
        if status == "success":
            self.emit(p.ToolResult(call_id=call_id, name=name, status="success", output=text))
        else:
            error = text or ("cancelled" if status == "cancelled" else "the tool failed")
            self.emit(p.ToolResult(call_id=call_id, name=name, status=status, error=error))  # type: ignore[arg-type]
            if status == "cancelled":
                self._last = Outcome("interrupted", f"the call to {name} was cancelled")

    def on_info(self, f: Fields) -> None:
        self._log(f, "info")

    def on_warning(self, f: Fields) -> None:
        self._log(f, "warning")

    def _log(self, f: Fields, kind: str) -> None:
        seen = self._state(f)
        if not seen.text:
            seen.text = True
            self.emit(p.Log(level=_LOG_LEVELS[kind], message=parts_text(f.obj.get("content"))))

    def on_error(self, f: Fields) -> None:
        seen = self._state(f)
        if seen.text:
            return
        seen.text = True
        message = parts_text(f.obj.get("content")) or "error"
        self.emit(p.Error(code=ErrorCode.UNKNOWN, message=message, recoverable=True))
        self._last = Outcome("failed", message)

    def outcome(self) -> Outcome:
        if self.tools.unanswered():
            return Outcome("open", "the Gemini chat log ends while a tool call waits for its result")
        return self._last


_MESSAGE_TYPES = frozenset({"user", "gemini", "info", "warning", "error"})


class GeminiLogDialect(LogDialect):
    name = "gemini-log"
    summary = "Gemini CLI chat logs (~/.gemini/tmp/<project>/chats/session-*.jsonl, or one-line .json)"
    decoder_class = GeminiLogDecoder

    def sniff(self, obj: dict[str, Any]) -> float:
        if "v" in obj or "seq" in obj:
            return 0.0
        if isinstance(obj.get("sessionId"), str) and isinstance(obj.get("projectHash"), str):
            return 1.0
        kind = obj.get("type")
        if (
            kind in _MESSAGE_TYPES
            and isinstance(obj.get("id"), str)
            and "timestamp" in obj
            and "content" in obj
        ):
            return 0.8 if kind == "gemini" else 0.6
        if "$rewindTo" in obj or isinstance(obj.get("$set"), dict):
            return 0.6
        return 0.0


DIALECT = GeminiLogDialect()
