"""Claude Code's project logs: ``~/.claude/projects/<project>/<session>.jsonl`` (decode-only).

Each record is one JSON line with ``type`` (``user``, ``assistant``, ``system``,
``summary``, ``file-history-snapshot`` and others), ``sessionId``, ``uuid`` /
``parentUuid``, ``timestamp``, ``cwd``, ``version``, ``isSidechain`` (true for a
subagent's records, inline or in ``<session>/subagents/agent-*.jsonl``) and,
on ``assistant`` records, ``requestId``. ``user`` and ``assistant`` records wrap
the same API ``message`` objects as ``claude -p --output-format stream-json``,
so they are decoded by :class:`~agentstream.dialects.claude.ClaudeDecoder`'s
own handlers; this module adds what a log differs in:

- no ``init`` line: the first record starts the session (its ``sessionId``, ``cwd``);
- time stamps come from each record's ``timestamp``, not from the reading;
- one API response is logged once per content block, each record repeating the
  message's ``usage``: a model call (message id + request id) is counted once;
- ``system`` records of a log have a ``content`` and ``level`` and often no
  ``subtype``; they become ``event`` ``claude.system.<subtype or "message">``;
- no ``result`` line: :meth:`ClaudeLogDecoder.outcome` decides how the session ended.
"""

from __future__ import annotations

from typing import Any

from agentstream import protocol as p
from agentstream.dialects._session_log import LogDialect, Outcome, SessionLogDecoder
from agentstream.dialects.claude import ClaudeDecoder
from agentstream.dialects.kit import Fields
from agentstream.errors import ErrorCode

PROVIDER = "anthropic"
"""Whose models Claude Code calls, named as the OpenTelemetry GenAI conventions name providers."""
INTERRUPT_MARK = "[Request interrupted by user"
"""How Claude Code logs a turn the user stopped (a user text that starts so)."""
_HOLD_LIMIT = 256
_RETRY_SUBTYPES = frozenset({"api_retry", "status"})
_ENVELOPE_KEYS = frozenset(
    {"type", "parentUuid", "logicalParentUuid", "uuid", "sessionId", "timestamp", "userType", "version"}
)


def call_key(message_id: object, request_id: object) -> tuple[str, str] | None:
    """The identity of one model call (``None`` when the record lacks either id, so it cannot be matched)."""
    if isinstance(message_id, str) and message_id and isinstance(request_id, str) and request_id:
        return message_id, request_id
    return None


class ClaudeLogDecoder(SessionLogDecoder, ClaudeDecoder):
    dialect = "claude-log"
    command = "claude"
    log_noun = "Claude Code log"
    typed_lines = None  # every record goes through decode_object: times, request ids and the outcome

    def __init__(self, session_id: str | None = None) -> None:
        super().__init__(session_id)
        self._startup = None  # a log has no init line to wait for
        self._request_id: object = None
        self._pending_key: tuple[str, str] | None = None
        self._counted: set[tuple[str, str]] = set()
        self._last: Outcome = Outcome("open", "the Claude Code log has no conversation")
        self._pending_ts: str | None = None
        self._before_start: list[dict[str, Any]] = []
        """Records before the first one that names the session (a file-history snapshot, a summary)."""

    def decode_object(self, obj: dict[str, Any]) -> None:
        kind = obj.get("type")
        if not self.started and isinstance(kind, str):  # a record without a type is rejected, never held
            # Bookkeeping records (queue operations, request shapes …) name the session but not its directory:
            # the session starts at the first conversation record, or the first that says where it ran.
            if kind not in _LOG_TYPES and "cwd" not in obj and len(self._before_start) < _HOLD_LIMIT:
                self._before_start.append(obj)
                return
            self.checked(self._begin, obj)
        self._decode_record(obj)

    def _decode_record(self, obj: dict[str, Any]) -> None:
        self.note_time(obj.get("timestamp"))
        self._request_id = obj.get("requestId")
        super().decode_object(obj)
        if obj.get("isSidechain") is not True:
            self._note_outcome(obj)

    def _begin(self, obj: dict[str, Any]) -> None:
        """Start the session from the first conversation record (or the first that names it), then decode the
        records held for it. A ``sessionId`` or ``cwd`` of the wrong kind is lost, not the session."""
        kind = obj.get("type")
        record = self.fields(obj, f"{self.dialect} '{kind}' line", kind if isinstance(kind, str) else "")
        held, self._before_start = self._before_start, []
        session_id = record.opt_text("sessionId")
        if session_id is None:  # a log of bookkeeping records only: the first of them that names it
            session_id = next((r["sessionId"] for r in held if isinstance(r.get("sessionId"), str)), None)
        self.adopt_session(session_id)
        for earlier in (*held, obj):  # the session began with its earliest record
            self.note_time(earlier.get("timestamp"))
            if self.line_ts is not None:
                break
        self.emit(p.Start(command=self.command, cwd=record.opt_text("cwd") or "", provider=PROVIDER))
        for earlier in held:
            self._decode_record(earlier)

    def finish(self) -> list[p.AnyEvent]:
        if not self.started and self._before_start:
            self.checked(self._begin, {})
        self._flush_usage()
        self.close_named_runs()
        self.end_session()
        return super().finish()

    # -- one usage per model call ------------------------------------------------------

    def _note_usage(
        self, message_id: str, model: str | None, figures: dict[str, int], *, streamed: bool
    ) -> None:
        key = call_key(message_id, self._request_id)
        if key is not None and key in self._counted:
            return  # another content block (or a resumed session's copy) of a call already counted
        super()._note_usage(message_id, model, figures, streamed=streamed)
        pending = self._usage
        if pending is not None and pending.message_id == message_id:
            self._pending_key, self._pending_ts = key, self.line_ts

    def _flush_usage(self) -> None:
        if self._pending_key is not None and self._usage is not None and self._usage.figures:
            self._counted.add(self._pending_key)
        self._pending_key = None
        now, self.line_ts = self.line_ts, self._pending_ts or self.line_ts
        super()._flush_usage()  # stamped with the time of the call's own record
        self.line_ts = now

    # -- records a log has and a stream does not ---------------------------------------

    def on_system(self, f: Fields) -> None:
        subtype = f.opt_text("subtype")
        if subtype in _RETRY_SUBTYPES:
            super().on_system(f)
            return
        data = {key: value for key, value in f.obj.items() if key not in _ENVELOPE_KEYS}
        self.emit(p.GenericEvent(name=f"claude.system.{subtype or 'message'}", data=data))

    # -- the ending ------------------------------------------------------------------------

    def _note_outcome(self, obj: dict[str, Any]) -> None:
        kind, message = obj.get("type"), obj.get("message")
        if not isinstance(message, dict):
            return
        if kind == "assistant":
            if obj.get("isApiErrorMessage") is True or message.get("model") == "<synthetic>":
                self._last = Outcome(
                    "failed", _text(message) or "the API request failed", ErrorCode.PROVIDER_ERROR
                )
            else:
                self._last = Outcome("done")
        elif kind == "user":
            text = _text(message)
            if text.startswith(INTERRUPT_MARK):
                self._last = Outcome("interrupted", "the user interrupted the request")
            elif obj.get("isMeta") is not True:
                self._last = Outcome("open", "the Claude Code log ends before the model's reply")

    def outcome(self) -> Outcome:
        if self.tools.unanswered():
            return Outcome("open", "the Claude Code log ends while a tool call waits for its result")
        return self._last


def _text(message: dict[str, Any]) -> str:
    """The text of a message's content (a string, or its text blocks joined)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            block["text"]
            for block in content
            if isinstance(block, dict) and isinstance(block.get("text"), str)
        )
    return ""


_LOG_TYPES = frozenset({"user", "assistant", "system"})


class ClaudeLogDialect(LogDialect):
    name = "claude-log"
    summary = "Claude Code session logs (~/.claude/projects/<project>/<session>.jsonl)"
    decoder_class = ClaudeLogDecoder

    def sniff(self, obj: dict[str, Any]) -> float:
        if "v" in obj or "seq" in obj:
            return 0.0
        kind = obj.get("type")
        if not isinstance(kind, str):
            return 0.0
        if kind in _LOG_TYPES and "parentUuid" in obj and isinstance(obj.get("sessionId"), str):
            return 1.0
        if kind == "summary" and "leafUuid" in obj:
            return 0.9
        if kind == "file-history-snapshot" and "messageId" in obj:
            return 0.9
        return 0.0


DIALECT = ClaudeLogDialect()
