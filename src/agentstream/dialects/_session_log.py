"""What the decoders of on-disk session logs share: the log's own timestamps, and an ending decided from the log.

A session log (Claude Code's project logs, Codex's rollout files, Gemini CLI's
chat logs) is written while a person works and has no terminal line: the last
record of a finished session is simply its last message. So these decoders
decide the outcome themselves at end of input, from the last records (see
``docs/dialects.md``), and emit a real ``result`` for a session that ended —
which the reader then does not report as a truncated stream. Only a log that
stops mid-turn (a call without its result, a prompt without a reply) ends with
a ``synthetic`` ``NOT_FINISHED`` error and result: the session was still
running, or was killed.

Decode-only: writing these formats is out of scope, so :class:`LogDialect`'s
encoder (the kit's decode-only :class:`SimpleDialect`) raises a
:class:`~agentstream.errors.UsageError` that says so.
"""

from __future__ import annotations

from typing import ClassVar, Literal, NamedTuple

import msgspec

from agentstream import protocol as p
from agentstream.dialects.kit import EventDecoder, SimpleDialect, epoch_ms, rfc3339
from agentstream.errors import ErrorCode, ExitCode

__all__ = ["LogDialect", "Outcome", "SessionLogDecoder"]

OutcomeKind = Literal["done", "interrupted", "failed", "open"]


class Outcome(NamedTuple):
    """How a session ended, as far as its log shows."""

    kind: OutcomeKind
    message: str = ""
    code: str = ErrorCode.UNKNOWN


class SessionLogDecoder(EventDecoder):
    """An :class:`EventDecoder` for a log: each record's own time stamps its events (the kit's
    :attr:`EventDecoder.line_ts`), and :meth:`finish` ends the session.

    Subclasses call :meth:`note_time` with each record's timestamp before decoding it,
    and implement :meth:`outcome`.
    """

    log_noun: ClassVar[str] = "log"

    def __init__(self, session_id: str | None = None) -> None:
        super().__init__(session_id)
        self.first_ts: str | None = None

    def note_time(self, value: object) -> None:
        """The current record's timestamp (kept until a record brings another)."""
        ts = rfc3339(value)
        if ts is not None:
            self.line_ts = ts
            if self.first_ts is None:
                self.first_ts = ts

    def outcome(self) -> Outcome:
        """How the session ended, decided from the records read (called once, at end of input)."""
        raise NotImplementedError

    def duration_ms(self) -> int:
        if self.first_ts is None or self.line_ts is None:
            return 0
        return max(epoch_ms(self.line_ts) - epoch_ms(self.first_ts), 0)

    def end_session(self) -> None:
        """Emit the session's ending: a result for one that ended, a synthetic failure for one cut mid-turn."""
        if not self.started:
            return  # an empty log: the reader says so
        ending = self.outcome()
        duration = self.duration_ms()
        if ending.kind == "open":
            self.close_open_calls(f"the {self.log_noun} ends before the tool's result")
            info = p.ErrorInfo(code=ErrorCode.NOT_FINISHED, message=ending.message)
            error = p.Error(code=info.code, message=info.message, recoverable=False, synthetic=True)
            self.emit(error)
            result = self._result(False, "error", ExitCode.ERROR, duration, info)
            result.synthetic = True
            self.emit(result)
            return
        self.close_open_calls("the session ended before the tool's result")
        if ending.kind == "done":
            self.emit(self._result(True, "success", ExitCode.OK, duration, None))
            return
        interrupted = ending.kind == "interrupted"
        code = ErrorCode.INTERRUPTED if interrupted else ending.code
        info = p.ErrorInfo(code=code, message=ending.message)
        if self.last_fatal is None:
            self.emit(p.Error(code=code, message=ending.message, recoverable=False))
        subtype, exit_code = ("interrupted", ExitCode.SIGINT) if interrupted else ("error", ExitCode.ERROR)
        self.emit(self._result(False, subtype, exit_code, duration, info))

    def _result(
        self, ok: bool, subtype: str, exit_code: int, duration: int, error: p.ErrorInfo | None
    ) -> p.Result:
        tally = self.tally
        return p.Result(
            ok=ok,
            subtype=subtype,
            exit_code=int(exit_code),
            duration_ms=duration,
            turn_count=tally.turn_count,
            tools_used=list(tally.tools_used),
            usage=msgspec.structs.replace(tally.usage),
            result=tally.last_text if tally.last_text is not None else p.UNSET,
            error=error if error is not None else p.UNSET,
        )


class LogDialect(SimpleDialect):
    """A session-log dialect: read, never written (the kit's :meth:`SimpleDialect.encoder` refuses, with a fix)."""

    can_encode = False
