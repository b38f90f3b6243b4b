"""Accumulate a stream into what a program wants once it has read it.

``Transcript.from_events(read("run.ndjson"))`` gives the final assistant text
(preview deltas and complete messages counted once), every tool call paired
with its result and duration, usage totals, the errors seen and the outcome.

:class:`Tally` is the constant-memory part of it (usage, turns, tools used,
the last assistant text): the reader uses it alone to fill a result it has to
make up for a stream that never finished.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from functools import partial
from typing import Any, NamedTuple

from msgspec import UnsetType

from agentstream import protocol as p
from agentstream._accel import speedups

__all__ = ["Outcome", "Tally", "ToolCallRecord", "Transcript", "has_usage"]


OPEN_TEXT_LIMIT = 1 << 20
"""Characters of text an ending made up carries, from an open delta run or as the last assistant text of its
``result`` (beyond: cut, and marked with "…"). A made-up ending holds no more than that of a huge message."""


class _OpenRun:
    """A delta run with no complete event yet: enough to close it truthfully."""

    __slots__ = ("parts", "role", "size")

    def __init__(self, role: p.Role) -> None:
        self.role = role
        self.parts: list[str] = []
        self.size = 0

    @property
    def text(self) -> str:
        joined = "".join(self.parts)
        return joined if self.size <= OPEN_TEXT_LIMIT else joined + "…"


class Tally:
    """Running totals of a stream, and the work still open in it: what an ending (made up or not) reports.

    Totals (usage, turns, tools used, the last assistant text) take constant
    memory; the open tool calls and delta runs are held until they close, so a
    made-up ending can close each of them (see :mod:`agentstream.ending`).
    """

    __slots__ = (
        "_text_limit",
        "_tools",
        "last_text",
        "open_calls",
        "open_runs",
        "tools_used",
        "turn_count",
        "usage",
    )

    def __init__(self, *, for_ending: bool = False) -> None:
        """``for_ending``: the tally is only there for an ending made up, whose last text is cut at
        :data:`OPEN_TEXT_LIMIT` (it is not kept whole while the rest of the stream is read)."""
        self._text_limit = OPEN_TEXT_LIMIT if for_ending else None
        self.usage = p.UsageTotals()
        self.turn_count = 0
        self.tools_used: list[str] = []
        self.last_text: str | None = None
        self._tools: set[str] = set()
        self.open_calls: dict[str, str] = {}
        """call_id -> tool name, for calls without a result yet."""
        self.open_runs: dict[tuple[bool, str], _OpenRun] = {}
        """(is reasoning, id) -> the run's text so far, for delta runs without their complete event."""

    def add(self, event: p.AnyEvent) -> None:
        kind = type(event)  # exact type checks: this runs for every event the reader and the producer pass on
        if kind is _MESSAGE_DELTA:
            key = (False, event.message_id)  # type: ignore[union-attr]
        elif kind is _REASONING_DELTA:
            key = (True, event.reasoning_id)  # type: ignore[union-attr]
        else:
            if kind is p.Usage:
                self.usage.add(event)  # type: ignore[arg-type]
                self.turn_count += 1
            elif kind is p.ToolCall:
                name = event.name  # type: ignore[union-attr]
                self.open_calls[event.call_id] = name  # type: ignore[union-attr]
                if name not in self._tools:
                    self._tools.add(name)
                    self.tools_used.append(name)
            elif kind is p.ToolResult:
                self.open_calls.pop(event.call_id, None)  # type: ignore[union-attr]
            elif kind is p.Message:
                if self.open_runs:
                    self.open_runs.pop((False, event.message_id), None)  # type: ignore[union-attr]
                text = event.content  # type: ignore[union-attr]
                if event.role == "assistant" and text:  # type: ignore[union-attr]  # empty: a discarded partial turn
                    limit = self._text_limit
                    self.last_text = text if limit is None or len(text) <= limit else text[:limit] + "…"
            elif kind is p.Reasoning:
                self.open_runs.pop((True, event.reasoning_id), None)  # type: ignore[union-attr]
            return
        run = self.open_runs.get(key)  # a delta: the commonest event, so its steps take the fewest lookups
        if run is None:
            role = event.role if kind is _MESSAGE_DELTA else "assistant"  # type: ignore[union-attr]
            run = self.open_runs[key] = _OpenRun(role)
        size, text = run.size, event.content  # type: ignore[union-attr]
        run.size = size + len(text)  # every character, kept or not: what tells that the text was cut
        if size < _OPEN_TEXT_LIMIT:  # past it, the run's text is cut (and marked)
            run.parts.append(text if run.size <= _OPEN_TEXT_LIMIT else text[: _OPEN_TEXT_LIMIT - size])

    @property
    def has_open_work(self) -> bool:
        return bool(self.open_calls or self.open_runs)


_MESSAGE_DELTA, _REASONING_DELTA, _OPEN_TEXT_LIMIT = p.MessageDelta, p.ReasoningDelta, OPEN_TEXT_LIMIT
"""Module globals for :meth:`Tally.add`, one lookup each: deltas are most of a stream's events."""

TALLY_KINDS = (
    Tally,
    _OpenRun,
    OPEN_TEXT_LIMIT,
    p.MessageDelta,
    p.ReasoningDelta,
    p.Message,
    p.Reasoning,
    p.ToolCall,
    p.ToolResult,
    p.Usage,
)
"""What the C twin of :meth:`Tally.add` reads a tally and its events by."""

tally_add: Callable[[Tally, p.AnyEvent], None] = (
    partial(speedups.tally_add, TALLY_KINDS) if speedups else Tally.add
)
"""``Tally.add(tally, event)``, in C when built: every event a stream carries is tallied (by the reader, the
decoder and the encoder it goes through, the producer), and this step is a good part of each one's cost."""


class Outcome(NamedTuple):
    """How the run ended, from its ``result``."""

    ok: bool
    exit_code: int
    subtype: str
    error: p.ErrorInfo | None


class ToolCallRecord:
    """One tool call and its result. Either side may be missing in a stream that broke off.

    A plain class that compares and prints as a dataclass would: a dataclass is made
    by compiling its methods at import, a cost every reader's start would pay.
    """

    def __init__(
        self,
        call_id: str,
        call: p.ToolCall | None = None,
        result: p.ToolResult | None = None,
        progress: list[str] | None = None,
    ) -> None:
        self.call_id = call_id
        self.call = call
        self.result = result
        self.progress: list[str] = [] if progress is None else progress

    def _fields(self) -> tuple[str, p.ToolCall | None, p.ToolResult | None, list[str]]:
        return self.call_id, self.call, self.result, self.progress

    def __eq__(self, other: object) -> bool:
        if type(other) is not ToolCallRecord:
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable, and equal by value

    def __repr__(self) -> str:
        call_id, call, result, progress = self._fields()
        return f"ToolCallRecord(call_id={call_id!r}, call={call!r}, result={result!r}, progress={progress!r})"

    @property
    def paired(self) -> bool:
        return self.call is not None and self.result is not None

    @property
    def name(self) -> str:
        source = self.call or self.result
        return source.name if source is not None else ""

    @property
    def arguments(self) -> dict[str, Any] | None:
        """``None`` when only the result was seen."""
        return self.call.arguments if self.call is not None else None

    @property
    def status(self) -> str:
        """The result's status, or ``"unpaired"`` when the call never got one."""
        return self.result.status if self.result is not None else "unpaired"

    @property
    def output(self) -> str | None:
        return _set_or_none(self.result.output) if self.result is not None else None

    @property
    def error(self) -> str | None:
        return _set_or_none(self.result.error) if self.result is not None else None

    @property
    def duration_ms(self) -> int | None:
        """The result's own duration, else the time between the two events' stamps."""
        if self.result is None:
            return None
        if self.result.duration_ms or self.call is None:
            return self.result.duration_ms
        return _ms_between(self.call.ts, self.result.ts)


class _Block:
    """One message (or reasoning block): its deltas until the complete event arrives."""

    __slots__ = ("final", "key", "parts", "role")

    def __init__(self, key: str, role: p.Role) -> None:
        self.key, self.role = key, role
        self.parts: list[str] = []
        self.final: p.Message | p.Reasoning | None = None

    @property
    def text(self) -> str:
        return self.final.content if self.final is not None else "".join(self.parts)


class _Blocks:
    """Blocks in order of first appearance; a complete event replaces its deltas, never adds to them."""

    def __init__(self) -> None:
        self.entries: list[_Block] = []
        self._open: dict[str, _Block] = {}

    def delta(self, key: str, role: p.Role, content: str) -> None:
        block = self._open.get(key)
        if block is None:
            block = self._open[key] = _Block(key, role)
            self.entries.append(block)
        block.parts.append(content)

    def complete(self, key: str, role: p.Role, event: p.Message | p.Reasoning) -> None:
        block = self._open.pop(key, None)
        if block is None:
            block = _Block(key, role)
            self.entries.append(block)
        block.final = event
        block.parts = []


class Transcript:
    """Everything a stream said, folded as it arrives: call :meth:`add` per event.

    A session of many turns (a ``start`` after a ``result`` opens the next) is
    folded whole here, and turn by turn in :attr:`turns`: ``start`` is the
    first turn's, ``result`` and ``outcome`` the last one's.
    """

    def __init__(self) -> None:
        self.start: p.Start | None = None
        self.result: p.Result | None = None
        self.errors: list[p.Error] = []
        self.events = 0
        self.tally = Tally()
        self._messages = _Blocks()
        self._reasoning = _Blocks()
        self._calls: dict[str, ToolCallRecord] = {}
        self._turns: list[Transcript] | None = []
        """Per-turn transcripts (``None`` in a transcript that is itself one turn)."""

    @property
    def turns(self) -> list[Transcript]:
        """One transcript per turn, in order (a single-turn stream has one: itself folded alone)."""
        return list(self._turns) if self._turns is not None else [self]

    @classmethod
    def from_events(cls, events: Iterable[p.AnyEvent]) -> Transcript:
        transcript = cls()
        for event in events:
            transcript.add(event)
        return transcript

    def add(self, event: p.AnyEvent) -> None:
        if self._turns is not None:
            if not self._turns or (type(event) is p.Start and self._turns[-1].result is not None):
                turn = Transcript()
                turn._turns = None
                self._turns.append(turn)
            self._turns[-1].add(event)
        self.events += 1
        self.tally.add(event)
        if isinstance(event, p.MessageDelta):
            self._messages.delta(event.message_id, event.role, event.content)
        elif isinstance(event, p.Message):
            self._messages.complete(event.message_id, event.role, event)
        elif isinstance(event, p.ReasoningDelta):
            self._reasoning.delta(event.reasoning_id, "assistant", event.content)
        elif isinstance(event, p.Reasoning):
            self._reasoning.complete(event.reasoning_id, "assistant", event)
        elif isinstance(event, (p.ToolCall, p.ToolResult, p.ToolProgress)):
            self._add_tool_event(event)
        elif isinstance(event, p.Error):
            self.errors.append(event)
        elif isinstance(event, p.Start):
            self.start = self.start or event
        elif isinstance(event, p.Result):
            self.result = event

    def _add_tool_event(self, event: p.ToolCall | p.ToolResult | p.ToolProgress) -> None:
        record = self._calls.get(event.call_id)
        if record is None:
            record = self._calls[event.call_id] = ToolCallRecord(event.call_id)
        if isinstance(event, p.ToolCall):
            record.call = event
        elif isinstance(event, p.ToolResult):
            record.result = event
        else:
            record.progress.append(event.content)

    @property
    def messages(self) -> list[p.Message]:
        """Complete messages in order; a delta run never closed becomes a ``synthetic`` message."""
        out: list[p.Message] = []
        for block in self._messages.entries:
            if isinstance(block.final, p.Message):
                out.append(block.final)
            else:
                out.append(
                    p.Message(message_id=block.key, role=block.role, content=block.text, synthetic=True)
                )
        return out

    @property
    def reasoning(self) -> list[str]:
        return [block.text for block in self._reasoning.entries]

    @property
    def text(self) -> str:
        """The final assistant text: the last assistant message (or its deltas), else ``result.result``."""
        for block in reversed(self._messages.entries):
            if block.role == "assistant":
                return block.text
        if self.result is not None and isinstance(self.result.result, str):
            return self.result.result
        return ""

    @property
    def all_text(self) -> str:
        """Every assistant message in order, one paragraph each."""
        return "\n\n".join(block.text for block in self._messages.entries if block.role == "assistant")

    @property
    def tool_calls(self) -> list[ToolCallRecord]:
        """In order of first appearance; check ``paired`` / ``status == "unpaired"`` for broken ones."""
        return list(self._calls.values())

    @property
    def usage(self) -> p.UsageTotals:
        """The result's totals when it carries any, else the sum of the ``usage`` events."""
        if self.result is not None and has_usage(self.result.usage):
            return self.result.usage
        return self.tally.usage

    @property
    def outcome(self) -> Outcome | None:
        """``None`` until the result has arrived."""
        if self.result is None:
            return None
        error = self.result.error if isinstance(self.result.error, p.ErrorInfo) else None
        return Outcome(self.result.ok, self.result.exit_code, self.result.subtype, error)


def has_usage(totals: p.UsageTotals) -> bool:
    """Whether totals carry anything (a result with all zeros usually means "not reported")."""
    return any(
        (totals.input_tokens, totals.output_tokens, totals.cached_tokens, totals.reasoning_tokens)
    ) or isinstance(totals.cost_usd, float)


def _set_or_none(value: str | UnsetType) -> str | None:
    return value if isinstance(value, str) else None


def _ms_between(earlier: str, later: str) -> int | None:
    try:
        start = datetime.fromisoformat(earlier.replace("Z", "+00:00"))
        end = datetime.fromisoformat(later.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0, int((end - start).total_seconds() * 1000))
