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
from agentstream.dialects.kit import Fields, identify, text_or_json
from agentstream.errors import ErrorCode, MalformedEventError

__all__ = ["DIALECT", "GeminiTokens", "parts_text"]

PROVIDER = "gcp.gemini"
"""Whose models Gemini CLI calls, named as the OpenTelemetry GenAI conventions name providers."""
_FINISHED = {"success": "success", "error": "error", "cancelled": "cancelled"}
_STATUSES = ("validating", "scheduled", "awaiting_approval", "executing", *_FINISHED)
"""Every ``ToolCallStatus`` Gemini CLI records; the last three mean the call is over."""
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


def _function_responses_only(content: object) -> bool:
    """Whether a ``PartListUnion`` is one or more ``functionResponse`` parts and nothing else."""
    parts = content if isinstance(content, list) else [content]
    return bool(parts) and all(isinstance(part, dict) and "functionResponse" in part for part in parts)


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
    identifying = identify(
        {
            "": [
                *("sessionId", "$set", "$rewindTo"),
                *("$set.messages.*.id", "$set.messages.*.type", "messages.*.id", "messages.*.type"),
            ],
            "*": ["id"],
            "user": ["content.*.functionResponse"],
            "gemini": [
                *("thoughts", "thoughts.*", "toolCalls", "toolCalls.*"),
                *("toolCalls.*.id", "toolCalls.*.name", "toolCalls.*.status"),
            ],
        }
    )
    """An untyped record is metadata, an update or a rewind by the key it has, which must then be of its kind;
    a message record is known by its ``id`` (its copies are matched by it) and ``type``, also inside the
    ``messages`` that a ``$set`` (or the older one-record form) carries; a ``user`` record of
    ``functionResponse`` parts is the tool responses, not a message. A reply's thoughts and tool calls
    are events of their own, each call known by its id, name and status (as Claude's content blocks are)."""

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
        record = self.fields(obj, f"{self.dialect} record", "")
        if "sessionId" in obj:
            self._metadata(record)
        elif "$set" in obj:
            update = record.sub("$set")
            self._messages(update.opt_list("messages") or [])
            rest = {key: value for key, value in update.obj.items() if key not in ("messages", "lastUpdated")}
            if rest:
                self.emit(p.GenericEvent(name="gemini.metadata", data=rest))
        elif "$rewindTo" in obj:
            self.emit(p.GenericEvent(name="gemini.rewind", data={"to": record.text("$rewindTo")}))
        else:
            self.pass_through("gemini.record", obj)

    def _metadata(self, record: Fields) -> None:
        session_id = record.text("sessionId")
        self.note_time(record.obj.get("startTime"))
        if not self.started:
            self.adopt_session(session_id)
            self.emit(p.Start(command=self.command, provider=PROVIDER))
        self._messages(
            record.opt_list("messages") or []
        )  # the older form: the whole conversation in one record

    def _messages(self, messages: list[Any]) -> None:
        """The messages a record carries; one that cannot be read is reported as a malformed record and
        skipped, so the others (and the record holding them) are kept."""
        for message in messages:
            if not isinstance(message, dict):
                continue
            try:
                self.decode_object(message)
            except MalformedEventError as exc:
                fix = exc.fix if exc.fix is not None else p.UNSET
                self.emit(p.Error(code=exc.code, message=exc.message, recoverable=True, fix=fix))

    def _state(self, f: Fields) -> _Seen:
        message_id = f.text("id")
        seen = self._seen.get(message_id)
        if seen is None:
            seen = self._seen[message_id] = _Seen()
        return seen

    def on_user(self, f: Fields) -> None:
        """A record of tool responses alone (Gemini's next request) is no message: its calls' results said it."""
        seen = self._state(f)
        if seen.text:
            return
        seen.text = True
        text = self._text(f)
        if not text and _function_responses_only(f.obj.get("content")):
            return
        self.emit(p.Message(message_id=f.text("id"), role="user", content=text))
        self._last = Outcome("open", "the Gemini chat log ends before the model's reply")

    def on_gemini(self, f: Fields) -> None:
        seen = self._state(f)
        message_id = f.text("id")
        model = f.opt_text("model") or "unknown"
        thoughts = f.opt_subs("thoughts")
        for index, thought in enumerate(thoughts[seen.thoughts :], start=seen.thoughts):
            parts = (thought.opt_text("subject"), thought.opt_text("description"))
            text = "\n".join(part for part in parts if part)
            self.emit(p.Reasoning(reasoning_id=f"{message_id}#thought{index}", content=text))
        seen.thoughts = max(seen.thoughts, len(thoughts))
        text, calls = self._text(f), f.opt_subs("toolCalls")
        # A reply of tool calls alone needs no message, and its first copy, written before the calls are known,
        # has an empty ``content``: only text (or content that could not be read) makes one.
        if not seen.text and (text or not (calls or f.obj.get("content") == "")):
            seen.text = True
            self.emit(p.Message(message_id=message_id, role="assistant", content=text))
        for call in calls:
            self._tool_call(call, seen)
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

    def _text(self, f: Fields) -> str:
        """A message's ``content`` as text; content of another kind is lost (reported), not the message."""
        content = f.obj.get("content")
        if not isinstance(content, (str, dict, list)):
            f.lose("content", "must be text or parts" if content is not None else "is missing")
        return parts_text(content)

    def _tool_call(self, call: Fields, seen: _Seen) -> None:
        """The call is made when its reply is (the message's time); the call's own ``timestamp`` is written
        when it finishes, and is its result's time."""
        call_id, name = call.text("id"), call.text("name")
        status = call.choice("status", _STATUSES, "executing")
        if call_id not in seen.calls:
            seen.calls.add(call_id)
            self.emit(
                p.ToolCall(
                    call_id=self.tools.called(call_id, name),
                    name=name,
                    arguments=call.opt_mapping("args") or {},
                )
            )
        finished = _FINISHED.get(status)
        if finished is None or call_id in seen.results:
            return
        seen.results.add(call_id)
        self.tools.finished(call_id, name)
        text, ts = _result_text(call.obj), call.ts("timestamp")
        if finished == "success":
            self.emit(p.ToolResult(call_id=call_id, name=name, status="success", output=text), ts)
        else:
            error = text or ("cancelled" if finished == "cancelled" else "the tool failed")
            self.emit(p.ToolResult(call_id=call_id, name=name, status=finished, error=error), ts)  # type: ignore[arg-type]
            if finished == "cancelled":
                self._last = Outcome("interrupted", f"the call to {name} was cancelled")

    def on_info(self, f: Fields) -> None:
        self._log(f, "info")

    def on_warning(self, f: Fields) -> None:
        self._log(f, "warning")

    def _log(self, f: Fields, kind: str) -> None:
        seen = self._state(f)
        if not seen.text:
            seen.text = True
            self.emit(p.Log(level=_LOG_LEVELS[kind], message=self._text(f)))

    def on_error(self, f: Fields) -> None:
        seen = self._state(f)
        if seen.text:
            return
        seen.text = True
        message = self._text(f) or "error"
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
            isinstance(kind, str)
            and kind in _MESSAGE_TYPES
            and isinstance(obj.get("id"), str)
            and "timestamp" in obj
            and "content" in obj
        ):
            return 0.8 if kind == "gemini" else 0.6
        if "$rewindTo" in obj or isinstance(obj.get("$set"), dict):
            return 0.6
        return 0.0


DIALECT = GeminiLogDialect()
