"""The invariant checker: does a stream keep every promise of protocol v1?

It works incrementally, one event at a time, holding only what later lines
can still violate (open tool calls, open delta runs), so memory stays flat
however long the stream is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, NamedTuple

from agentstream import protocol as p
from agentstream._lines import Line, LineTooLong, iter_lines
from agentstream.errors import MalformedEventError

__all__ = ["RULES", "Validator", "Violation", "validate_stream"]

RULES: dict[str, str] = {
    "malformed": "every line is one JSON object that is a valid event",
    "invalid-utf8": "lines are UTF-8",
    "truncated": "the last line ends with a newline",
    "too-long": "lines fit the configured limit (off by default)",
    "version": "v is a protocol version this reader knows",
    "start-first": "start is the first event, exactly once",
    "result-last": "exactly one result, and nothing after it",
    "seq": "seq counts 0, 1, 2 … with no gap or repeat",
    "session": "one session_id throughout",
    "tool-pairing": "every tool_call has exactly one later tool_result with its call_id",
    "delta-closed": "a message (or reasoning) with the same id closes each delta run",
    "fatal-error": "a fatal error is immediately followed by result",
    "ok-exit": "result.ok is true exactly when result.exit_code is 0",
    "exit-code": "the process exit code equals result.exit_code",
}


class Violation(NamedTuple):
    line: int
    """1-based input line (0 when the violation is about the stream as a whole)."""
    rule: str
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line else "stream"
        return f"{where}: {self.rule}: {self.message}"


class Validator:
    """Feed events in order with :meth:`feed`; :meth:`close` adds what only the end can tell.

    ``check_stamps`` is off for streams decoded from another dialect, whose
    ``seq`` and ``session_id`` were made up by the decoder.
    """

    def __init__(self, *, expect_exit: int | None = None, check_stamps: bool = True) -> None:
        self.expect_exit = expect_exit
        self.check_stamps = check_stamps
        self.violations: list[Violation] = []
        self.events = 0
        self.result: p.Result | None = None
        self._result_line = 0
        self._next_seq = 0
        self._session_id: str | None = None
        self._open_calls: dict[str, int] = {}
        self._closed_calls: set[str] = set()
        self._open_deltas: dict[str, int] = {}
        self._closed_ids: set[str] = set()
        self._pending_fatal: int = 0
        self._last_line = 0

    def report(self, line: int, rule: str, message: str) -> None:
        self.violations.append(Violation(line, rule, message))

    def feed(self, event: p.AnyEvent, line: int) -> None:
        self._last_line = line
        first = self.events == 0
        self.events += 1
        if self.result is not None:
            self.report(line, "result-last", f"'{event.type}' after the result (line {self._result_line})")
        if self._pending_fatal and not isinstance(event, p.Result):
            self.report(self._pending_fatal, "fatal-error", f"fatal error followed by '{event.type}', not result")
            self._pending_fatal = 0
        if self.check_stamps:
            self._check_stamps(event, line)
        if first and not isinstance(event, p.Start):
            self.report(line, "start-first", f"the first event is '{event.type}', not start")
        check = _CHECKS.get(type(event))
        if check is not None:
            check(self, event, line)

    def _check_stamps(self, event: p.AnyEvent, line: int) -> None:
        seq = event.seq
        if seq != self._next_seq:
            self.report(line, "seq", f"seq {seq}, expected {self._next_seq}")
        self._next_seq = seq + 1 if seq >= 0 else self._next_seq + 1
        if self._session_id is None:
            self._session_id = event.session_id
            if not event.session_id:
                self.report(line, "session", "empty session_id")
        elif event.session_id != self._session_id:
            self.report(line, "session", f"session_id {event.session_id!r}, expected {self._session_id!r}")
        if not isinstance(event, p.UnknownEvent) and event.v != p.PROTOCOL_VERSION:
            self.report(line, "version", f"v {event.v} is not {p.PROTOCOL_VERSION}")

    def _on_start(self, event: p.Start, line: int) -> None:
        if self.events > 1:
            self.report(line, "start-first", "a second start")

    def _on_tool_call(self, event: p.ToolCall, line: int) -> None:
        if event.call_id in self._open_calls or event.call_id in self._closed_calls:
            self.report(line, "tool-pairing", f"call_id {event.call_id!r} used twice")
        self._open_calls[event.call_id] = line

    def _on_tool_progress(self, event: p.ToolProgress, line: int) -> None:
        if event.call_id not in self._open_calls:
            self.report(line, "tool-pairing", f"tool_progress for {event.call_id!r}, which is not running")

    def _on_tool_result(self, event: p.ToolResult, line: int) -> None:
        if self._open_calls.pop(event.call_id, None) is None:
            again = "a second" if event.call_id in self._closed_calls else "a"
            self.report(line, "tool-pairing", f"{again} tool_result for {event.call_id!r} without an open tool_call")
        self._closed_calls.add(event.call_id)

    def _on_delta(self, event: p.MessageDelta | p.ReasoningDelta, line: int) -> None:
        key = _delta_key(event)
        if key in self._closed_ids:
            self.report(line, "delta-closed", f"delta for {key[2:]!r} after its complete event")
        self._open_deltas.setdefault(key, line)

    def _on_complete(self, event: p.Message | p.Reasoning, line: int) -> None:
        key = _delta_key(event)
        self._open_deltas.pop(key, None)
        self._closed_ids.add(key)

    def _on_error(self, event: p.Error, line: int) -> None:
        if not event.recoverable:
            self._pending_fatal = line

    def _on_result(self, event: p.Result, line: int) -> None:
        if self.result is not None:
            self.report(line, "result-last", "a second result")
            return
        self.result, self._result_line = event, line
        self._pending_fatal = 0
        if event.ok != (event.exit_code == 0):
            self.report(line, "ok-exit", f"ok is {str(event.ok).lower()} but exit_code is {event.exit_code}")
        for call_id, call_line in self._open_calls.items():
            self.report(call_line, "tool-pairing", f"tool_call {call_id!r} has no tool_result")
        for key, delta_line in self._open_deltas.items():
            self.report(delta_line, "delta-closed", f"deltas of {key[2:]!r} never closed by a complete event")
        self._open_calls.clear()
        self._open_deltas.clear()

    def close(self, *, exit_code: int | None = None) -> list[Violation]:
        """Finish: report what the end of input reveals. ``exit_code`` overrides ``expect_exit``."""
        if self._pending_fatal:
            self.report(self._pending_fatal, "fatal-error", "fatal error is not followed by result")
            self._pending_fatal = 0
        if self.events == 0:
            self.report(0, "start-first", "the stream has no events")
        if self.result is None:
            self.report(0, "result-last", "the stream has no result (the producer died or was cut off)")
        expected = exit_code if exit_code is not None else self.expect_exit
        if expected is not None and self.result is not None and self.result.exit_code != expected:
            self.report(0, "exit-code", f"process exited {expected} but result.exit_code is {self.result.exit_code}")
        return self.violations


def _delta_key(event: p.MessageDelta | p.ReasoningDelta | p.Message | p.Reasoning) -> str:
    if isinstance(event, (p.MessageDelta, p.Message)):
        return "m:" + event.message_id
    return "r:" + event.reasoning_id


_CHECKS = {
    p.Start: Validator._on_start,
    p.ToolCall: Validator._on_tool_call,
    p.ToolProgress: Validator._on_tool_progress,
    p.ToolResult: Validator._on_tool_result,
    p.MessageDelta: Validator._on_delta,
    p.ReasoningDelta: Validator._on_delta,
    p.Message: Validator._on_complete,
    p.Reasoning: Validator._on_complete,
    p.Error: Validator._on_error,
    p.Result: Validator._on_result,
}


def validate_stream(
    source: IO[bytes],
    *,
    expect_exit: int | None = None,
    max_line_bytes: int | None = None,
    validator: Validator | None = None,
) -> Iterator[Violation]:
    """Check a canonical NDJSON byte stream, yielding violations as soon as they are found."""
    checker = validator or Validator(expect_exit=expect_exit)
    reported = 0
    for item in iter_lines(source, max_line_bytes=max_line_bytes):
        if isinstance(item, LineTooLong):
            checker.report(item.number, "too-long", str(item))
        else:
            _check_line(checker, item)
        if len(checker.violations) > reported:
            yield from checker.violations[reported:]
            reported = len(checker.violations)
    checker.close()
    yield from checker.violations[reported:]


def _check_line(checker: Validator, line: Line) -> None:
    if not line.terminated:
        checker.report(line.number, "truncated", "the last line has no newline (the stream was cut off)")
    if not line.data.strip():
        return
    try:
        event = p.decode(line.data)
    except MalformedEventError as exc:
        utf8_error = _utf8_error(line.data) if not isinstance(exc.__cause__, UnicodeDecodeError) else exc.__cause__
        if utf8_error is not None:
            checker.report(line.number, "invalid-utf8", str(utf8_error))
        else:
            checker.report(line.number, "malformed", f"{exc.message}: {_preview(line.data)}")
        return
    checker.feed(event, line.number)


def _utf8_error(data: bytes) -> UnicodeDecodeError | None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc
    return None


def _preview(data: bytes, limit: int = 80) -> str:
    text = data[:limit].decode("utf-8", "replace")
    return repr(text + ("…" if len(data) > limit else ""))
