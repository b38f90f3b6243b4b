"""The invariant checker: does a stream keep every promise of protocol v1?

It works incrementally, one event at a time, holding only what later lines
can still violate (open tool calls, open delta runs), so memory stays flat
however long the stream is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from operator import attrgetter
from typing import IO, TYPE_CHECKING, Any, NamedTuple

from agentstream import protocol as p
from agentstream._accel import speedups
from agentstream._lines import (
    LONG_LINE_BYTES,
    Block,
    Line,
    LineTooLong,
    iter_blocks,
    iter_lines,
    one_value_per_line,
    split_block,
)
from agentstream._recent_ids import RecentIds
from agentstream.errors import ErrorCode, MalformedEventError

if TYPE_CHECKING:
    from agentstream.consumer import Reader

__all__ = ["RULES", "Validator", "Violation", "validate_decoded", "validate_items", "validate_stream"]

RULES: dict[str, str] = {
    "malformed": "every line is one JSON object that is a valid event",
    "invalid-utf8": "lines are UTF-8",
    "truncated": "the last line ends with a newline",
    "too-long": "lines fit the configured limit (off by default)",
    "version": "v is a protocol version this reader knows",
    "timestamp": "ts is an RFC 3339 date-time",
    "start-first": "start is the first event, exactly once per turn",
    "result-last": "exactly one result per turn; after it only the next turn's start",
    "seq": "seq counts 0, 1, 2 … with no gap or repeat (a skipped bad line may take one)",
    "session": "one session_id throughout (a later turn may begin a stream of its own: new session_id, seq 0)",
    "tool-pairing": "every tool_call has exactly one later tool_result with its call_id",
    "delta-closed": "a message (or reasoning) with the same id closes each delta run",
    "fatal-error": "a fatal error is immediately followed by a failed result whose error repeats its code",
    "ok-exit": "result.ok is true exactly when result.exit_code is 0",
    "exit-code": "result.exit_code is an exit status (0–255) and equals the process exit code",
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
    ``seq`` and ``session_id`` were made up by the decoder. Memory holds the
    open tool calls and delta runs, plus the last 10,000 closed ids of each kind;
    :attr:`violations` grows until a caller takes them (:meth:`take`), as the
    streaming functions here do, so a long bad stream costs no memory either.

    A session of many turns is several start … result runs in a row: each later turn either goes
    on in the same session (``seq`` counting on) or is a stream of its own (a new session id, ``seq``
    from 0), as agentstream's two-way producers write them (see docs/protocol.md).
    """

    def __init__(
        self, *, expect_exit: int | None = None, check_stamps: bool = True, exact_exit: bool = True
    ) -> None:
        self.expect_exit = expect_exit
        self.check_stamps = check_stamps
        self.exact_exit = exact_exit
        """False for a dialect whose result carries only success or failure: only that is compared."""
        self.violations: list[Violation] = []
        self.count = 0
        """Violations found so far, including those already taken."""
        self.turns = 0
        self.events = 0
        self._skipped = 0
        """Bad lines since the last event: each may have carried the seq the next event skips."""
        self.result: p.Result | None = None
        self._result_line = 0
        self._next_seq = 0
        self._session_id: str | None = None
        self._pending_fatal = 0
        self._fatal_code = ""
        self._seen_start = False
        self._open_calls: dict[str, int] = {}
        self._closed_calls: RecentIds[str] = RecentIds()
        # Open delta runs and closed ids, for messages and for reasoning.
        self._open_runs: dict[type, dict[str, int]] = {p.MessageDelta: {}, p.ReasoningDelta: {}}
        self._closed_runs: dict[type, RecentIds[str]] = {
            p.MessageDelta: RecentIds(),
            p.ReasoningDelta: RecentIds(),
        }

    def report(self, line: int, rule: str, message: str) -> None:
        self.violations.append(Violation(line, rule, message))
        self.count += 1

    def take(self) -> list[Violation]:
        """The violations found since the last call (and forget them)."""
        taken, self.violations = self.violations, []
        return taken

    def skip_line(self) -> None:
        """A line that is not an event was reported: its seq, if it had one, is not a second violation."""
        self._skipped += 1

    def feed(self, event: p.AnyEvent, line: int) -> None:
        if self.check_stamps:
            self._check_stamps(event, line)
        self._check_rules(event, line)

    def feed_block(self, events: list[p.AnyEvent], first_line: int) -> None:
        """Feed consecutive events from consecutive lines; same verdicts as :meth:`feed`, less work per event.

        Stamps are checked for the whole block at once. Inside a turn, events go through a tight loop
        (:meth:`_feed_turn`); from a turn's result (or a fatal error) to the next turn's start, where the
        ordering rules apply, one at a time the careful way.
        """
        if not events:
            return
        if self.events == 0:
            self.feed(events[0], first_line)
            events, first_line = events[1:], first_line + 1
        if not self._stamps_in_order(events):
            for offset, event in enumerate(events):
                self.feed(event, first_line + offset)
            return
        self._next_seq += len(events)
        index = 0
        while index < len(events):
            if self.result is None and not self._pending_fatal:
                index = self._feed_turn(events, index, first_line)
            else:
                self._check_rules(events[index], first_line + index)
                index += 1

    def _feed_turn(self, events: list[p.AnyEvent], start: int, first_line: int) -> int:
        """The events of an open turn from ``events[start]``, up to a result or a fatal error; where it stopped.

        An event that breaks no rule and cannot end the turn (a delta, a complete message, a tool call or
        result that pairs) is recorded in a step or two; the others go through their check.
        """
        runs, closed = self._open_runs, self._closed_runs
        state = (
            runs[p.MessageDelta],
            runs[p.ReasoningDelta],
            closed[p.MessageDelta],
            closed[p.ReasoningDelta],
            self._open_calls,
            self._closed_calls,
        )
        end = _feed_turn(self, events, start, first_line, state, _TURN_KINDS, _CHECKS)
        self.events += end - start
        return end

    def _stamps_in_order(self, events: list[p.AnyEvent]) -> bool:
        if not self.check_stamps or not events:
            return True
        return _stamps_in_order(events, self._next_seq, self._session_id, p.PROTOCOL_VERSION)

    def _check_rules(self, event: p.AnyEvent, line: int) -> None:
        first = self.events == 0
        self.events += 1
        if self.result is not None and type(event) is p.Start:
            self.result = None  # the next turn of a session: ids are the turn's own
            self._seen_start = False
            self._closed_calls = RecentIds()
            self._closed_runs = {p.MessageDelta: RecentIds(), p.ReasoningDelta: RecentIds()}
        elif self.result is not None:
            self.report(line, "result-last", f"'{event.type}' after the result (line {self._result_line})")
        if self._pending_fatal and not isinstance(event, p.Result):
            self.report(
                self._pending_fatal, "fatal-error", f"fatal error followed by '{event.type}', not result"
            )
            self._pending_fatal = 0
        if first and not isinstance(event, p.Start):
            self.report(line, "start-first", f"the first event is '{event.type}', not start")
        check = _CHECKS.get(type(event))
        if check is not None:
            check(self, event, line)

    def _check_stamps(self, event: p.AnyEvent, line: int) -> None:
        if self.result is not None and type(event) is p.Start and self._begins_a_stream(event):
            self._session_id, self._next_seq = event.session_id, 0
        seq, expected = event.seq, self._next_seq
        if seq != expected and not (expected < seq <= expected + self._skipped):
            self.report(line, "seq", f"seq {seq}, expected {expected}")
        self._skipped = 0
        self._next_seq = seq + 1 if seq >= 0 else expected + 1
        if not p.is_timestamp(event.ts):
            self.report(line, "timestamp", f"ts {event.ts!r} is not an RFC 3339 date-time")
        if self._session_id is None:
            self._session_id = event.session_id
            if not event.session_id:
                self.report(line, "session", "empty session_id")
        elif event.session_id != self._session_id:
            self.report(line, "session", f"session_id {event.session_id!r}, expected {self._session_id!r}")
        if event.v != p.PROTOCOL_VERSION:
            self.report(line, "version", f"v {event.v} is not {p.PROTOCOL_VERSION}")

    def _begins_a_stream(self, start: p.Start) -> bool:
        """A turn's start may also begin a stream of its own: a new ``session_id``, ``seq`` from 0."""
        return start.session_id != self._session_id and start.seq == 0 and bool(start.session_id)

    def _on_start(self, event: p.Start, line: int) -> None:
        if self._seen_start:
            self.report(line, "start-first", "a second start")
        self._seen_start = True

    def _on_tool_call(self, event: p.ToolCall, line: int) -> None:
        if event.call_id in self._open_calls or event.call_id in self._closed_calls:
            self.report(line, "tool-pairing", f"call_id {event.call_id!r} used twice")
        self._open_calls[event.call_id] = line

    def _on_tool_progress(self, event: p.ToolProgress, line: int) -> None:
        if event.call_id not in self._open_calls:
            self.report(line, "tool-pairing", f"tool_progress for {event.call_id!r}, which is not running")

    def _on_permission_request(self, event: p.PermissionRequest, line: int) -> None:
        """A request asks about a call that is running; its ``tool_result`` is the answer (tool-pairing)."""
        if event.call_id not in self._open_calls:
            self.report(
                line,
                "permission-pairing",
                f"permission_request for {event.call_id!r}, which is not an open tool_call",
            )

    def _on_tool_result(self, event: p.ToolResult, line: int) -> None:
        if self._open_calls.pop(event.call_id, None) is None:
            again = "a second" if event.call_id in self._closed_calls else "a"
            self.report(
                line, "tool-pairing", f"{again} tool_result for {event.call_id!r} without an open tool_call"
            )
        self._closed_calls.add(event.call_id)

    def _on_delta(self, event: p.MessageDelta | p.ReasoningDelta, line: int) -> None:
        kind = type(event)
        run_id = event.message_id if isinstance(event, p.MessageDelta) else event.reasoning_id
        if run_id in self._closed_runs[kind]:
            self.report(line, "delta-closed", f"delta for {run_id!r} after its complete event")
        self._open_runs[kind].setdefault(run_id, line)

    def _on_complete(self, event: p.Message | p.Reasoning, line: int) -> None:
        if isinstance(event, p.Message):
            kind: type = p.MessageDelta
            run_id = event.message_id
        else:
            kind, run_id = p.ReasoningDelta, event.reasoning_id
        self._open_runs[kind].pop(run_id, None)
        self._closed_runs[kind].add(run_id)

    def _on_error(self, event: p.Error, line: int) -> None:
        if not event.recoverable:
            self._pending_fatal, self._fatal_code = line, event.code

    def _on_result(self, event: p.Result, line: int) -> None:
        if self.result is not None:
            self.report(line, "result-last", "a second result")
            return
        self.result, self._result_line = event, line
        self.turns += 1
        if self._pending_fatal:
            self._check_fatal_outcome(event, line)
        self._pending_fatal = 0
        if not 0 <= event.exit_code <= 255:
            self.report(line, "exit-code", f"exit_code {event.exit_code} is not an exit status (0–255)")
        if event.ok != (event.exit_code == 0):
            self.report(line, "ok-exit", f"ok is {str(event.ok).lower()} but exit_code is {event.exit_code}")
        for call_id, call_line in self._open_calls.items():
            self.report(call_line, "tool-pairing", f"tool_call {call_id!r} has no tool_result")
        self._open_calls.clear()
        for runs in self._open_runs.values():
            for run_id, delta_line in runs.items():
                self.report(
                    delta_line, "delta-closed", f"deltas of {run_id!r} never closed by a complete event"
                )
            runs.clear()

    def _check_fatal_outcome(self, event: p.Result, line: int) -> None:
        """A run a fatal error ended cannot have succeeded, and its result says why it failed."""
        fatal, code = self._pending_fatal, self._fatal_code
        if event.ok:
            self.report(line, "fatal-error", f"result says ok after the fatal error {code} (line {fatal})")
        elif isinstance(event.error, p.UnsetType) or event.error.code != code:
            said = "no error" if isinstance(event.error, p.UnsetType) else f"error {event.error.code}"
            self.report(
                line, "fatal-error", f"result has {said}, not the fatal error's {code} (line {fatal})"
            )

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
        if expected is not None and self.result is not None:
            said = self.result.exit_code
            if self.exact_exit and said != expected:
                self.report(0, "exit-code", f"process exited {expected} but result.exit_code is {said}")
            elif (said == 0) != (expected == 0):
                outcome = "success" if said == 0 else "failure"
                self.report(
                    0, "exit-code", f"process exited {expected} but the stream's result is a {outcome}"
                )
        return self.violations


_CHECKS: dict[type[p.AnyEvent], Callable[[Validator, Any, int], None]] = {
    # Keyed by exact class, so each check gets the event class it is written for.
    p.Start: Validator._on_start,
    p.ToolCall: Validator._on_tool_call,
    p.ToolProgress: Validator._on_tool_progress,
    p.ToolResult: Validator._on_tool_result,
    p.PermissionRequest: Validator._on_permission_request,
    p.MessageDelta: Validator._on_delta,
    p.ReasoningDelta: Validator._on_delta,
    p.Message: Validator._on_complete,
    p.Reasoning: Validator._on_complete,
    p.Error: Validator._on_error,
    p.Result: Validator._on_result,
}


_TURN_KINDS = (p.MessageDelta, p.ReasoningDelta, p.Message, p.Reasoning, p.ToolCall, p.ToolResult)
"""The events :func:`_feed_turn` records itself when they break no rule, in the order it takes them."""

_TurnState = tuple[
    dict[str, int], dict[str, int], RecentIds[str], RecentIds[str], dict[str, int], RecentIds[str]
]
"""In this order: open message runs, open reasoning runs, closed message runs, closed reasoning runs, open
tool calls, closed tool calls."""


def _feed_turn_py(
    checker: Validator,
    events: list[p.AnyEvent],
    start: int,
    first_line: int,
    state: _TurnState,
    kinds: tuple[type, ...],
    checks: dict[type[p.AnyEvent], Callable[[Validator, Any, int], None]],
) -> int:
    """:meth:`Validator._feed_turn`'s loop: the index after the last event it took.

    What an event's check would record when it reports nothing, done here without the call; an event
    that breaks a rule (or may end the turn) goes to its check, which says why.
    """
    open_messages, open_reasoning, closed_messages, closed_reasoning, open_calls, closed_calls = state
    message_delta, reasoning_delta, message, reasoning, tool_call, tool_result = kinds
    for index in range(start, len(events)):
        event: Any = events[index]
        kind = type(event)
        if kind is message_delta or kind is reasoning_delta:
            run_id = event.message_id if kind is message_delta else event.reasoning_id
            open_runs = open_messages if kind is message_delta else open_reasoning
            if run_id in open_runs:
                continue
            if run_id not in (closed_messages if kind is message_delta else closed_reasoning):
                open_runs[run_id] = first_line + index
                continue
        elif kind is message or kind is reasoning:
            run_id = event.message_id if kind is message else event.reasoning_id
            (open_messages if kind is message else open_reasoning).pop(run_id, None)
            (closed_messages if kind is message else closed_reasoning).add(run_id)
            continue
        elif kind is tool_call:
            if event.call_id not in open_calls and event.call_id not in closed_calls:
                open_calls[event.call_id] = first_line + index
                continue
        elif kind is tool_result and event.call_id in open_calls:
            del open_calls[event.call_id]
            closed_calls.add(event.call_id)
            continue
        check = checks.get(kind)
        if check is not None:
            check(checker, event, first_line + index)
            if checker.result is not None or checker._pending_fatal:
                return index + 1
    return len(events)


def _stamps_in_order_py(
    events: list[p.AnyEvent], next_seq: int, session_id: str | None, version: int
) -> bool:
    """Whether ``events`` carry ``seq`` from ``next_seq`` on, this session and version, and a timestamp each."""
    return (
        list(map(_seq_of, events)) == list(range(next_seq, next_seq + len(events)))
        and set(map(_session_of, events)) == {session_id}
        and set(map(_version_of, events)) == {version}
        and p.are_timestamps(map(_ts_of, events))
    )


_seq_of = attrgetter("seq")
_ts_of = attrgetter("ts")
_session_of = attrgetter("session_id")
_version_of = attrgetter("v")

_feed_turn: Callable[..., int] = speedups.feed_turn if speedups else _feed_turn_py
_stamps_in_order: Callable[[list[p.AnyEvent], int, str | None, int], bool] = (
    speedups.stamps_in_order if speedups else _stamps_in_order_py
)


def validate_stream(
    source: IO[bytes],
    *,
    expect_exit: int | None = None,
    max_line_bytes: int | None = None,
    validator: Validator | None = None,
) -> Iterator[Violation]:
    """Check a canonical NDJSON byte stream, yielding violations as soon as they are found.

    Runs of well-formed lines are decoded in one call (``decode_lines``); a
    run with any bad line is checked again line by line to name the culprit.
    """
    items = iter_lines(source, max_line_bytes=max_line_bytes) if max_line_bytes else iter_blocks(source)
    return validate_items(items, validator or Validator(expect_exit=expect_exit))


def validate_items(items: Iterable[Block | Line | LineTooLong], checker: Validator) -> Iterator[Violation]:
    """:func:`validate_stream` over already framed input (so a caller can wrap the framing, e.g. for progress)."""
    for item in items:
        if isinstance(item, Block):
            _check_block(checker, item)
        elif isinstance(item, LineTooLong):
            checker.report(item.number, "too-long", str(item))
            checker.skip_line()
        else:
            _check_line(checker, item.number, item.data, item.terminated)
        if checker.violations:
            yield from checker.take()
    checker.close()
    yield from checker.take()


_READER_CODES = {
    ErrorCode.MALFORMED_EVENT: "malformed",
    ErrorCode.INVALID_UTF8: "invalid-utf8",
    ErrorCode.LINE_TOO_LONG: "too-long",
}


def validate_decoded(reader: Reader, checker: Validator | None = None) -> Iterator[Violation]:
    """Check a stream read from another dialect: the promises its producer made, not our stamps.

    The reader heals what it can (a made-up ``start`` or ``result``, an error
    for a bad line) and marks what it made up as synthetic; each such repair is
    the violation it stands for.
    """
    checker = checker or Validator(check_stamps=False)
    for event in reader:
        line = reader.line_number
        if event.synthetic is True and not _start_made_by_design(reader, event):
            _report_repair(checker, event, line)
        checker.feed(event, line)
        if checker.violations:
            yield from checker.take()
    after, count = reader.after_end
    for event in after:
        where = (
            event.details.get("line", 0)
            if isinstance(event, p.Error) and isinstance(event.details, dict)
            else 0
        )
        checker.report(
            where, "result-last", f"after the last result: {getattr(event, 'message', event.type)}"
        )
    if count > len(after):
        checker.report(0, "result-last", f"{count - len(after)} more bad lines after the last result")
    checker.close()
    yield from checker.take()


def _start_made_by_design(reader: Reader, event: p.AnyEvent) -> bool:
    """A made-up start in a dialect without a start line is how that dialect is read, not a repair."""
    if not isinstance(event, p.Start) or reader.dialect is None:
        return False
    from agentstream.dialects import get_dialect

    return not get_dialect(reader.dialect).has_start_line


def _report_repair(checker: Validator, event: p.AnyEvent, line: int) -> None:
    if isinstance(event, p.Start):
        if not checker.turns:  # later turns of a dialect without a start per turn are not missing one
            checker.report(line, "start-first", "the stream has no start event (the reader made one up)")
    elif isinstance(event, p.Result):
        checker.report(line, "result-last", "the stream has no terminal event (the reader made one up)")
    elif isinstance(event, p.ToolResult):
        checker.report(
            line, "tool-pairing", f"tool_call {event.call_id!r} got no result (the reader closed it)"
        )
    elif isinstance(event, (p.Message, p.Reasoning)):
        checker.report(line, "delta-closed", "a delta run was never closed (the reader closed it)")
    elif isinstance(event, p.Error) and event.code in _READER_CODES:
        where = event.details.get("line", line) if isinstance(event.details, dict) else line
        checker.report(where, _READER_CODES[event.code], event.message)


def _check_block(checker: Validator, block: Block) -> None:
    events = None
    if len(block.data) < LONG_LINE_BYTES:  # a very long line is read on its own, holding it once (LongLine)
        try:
            events = p.decode_lines(block.data)
        except MalformedEventError:
            pass
    if events is not None and one_value_per_line(block.data, block.line_count, len(events)):
        checker.feed_block(events, block.first)
        return
    # A bad line somewhere in the block: go line by line (a huge line is not copied again).
    for number, line in enumerate(split_block(block.data), start=block.first):
        _check_line(checker, number, line, True)


def _check_line(
    checker: Validator, number: int, data: bytes | bytearray | memoryview, terminated: bool
) -> None:
    """One line, given as its parts so that a block's lines can be checked as views without a copy."""
    if not terminated:
        checker.report(number, "truncated", "the last line has no newline (the stream was cut off)")
    if len(data) < 64 and not bytes(data).strip():
        return  # a blank line
    try:
        event = p.decode(data)
    except MalformedEventError as exc:
        utf8_error = (
            _utf8_error(bytes(data)) if not isinstance(exc.__cause__, UnicodeDecodeError) else exc.__cause__
        )
        if utf8_error is not None:
            checker.report(number, "invalid-utf8", str(utf8_error))
        else:
            checker.report(number, "malformed", f"{exc.message}: {_preview(data)}")
        checker.skip_line()
        return
    checker.feed(event, number)


def _utf8_error(data: bytes) -> UnicodeDecodeError | None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc
    return None


def _preview(data: bytes | bytearray | memoryview, limit: int = 80) -> str:
    text = bytes(data[:limit]).decode("utf-8", "replace")
    return repr(text + ("…" if len(data) > limit else ""))
