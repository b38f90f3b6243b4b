"""Helpers for the dialect tests: seed fixtures, decode/encode drivers, validity checks and strategies."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import strategies as st

from _strategies import ident, text
from agentstream import protocol as p
from agentstream.dialects import get_dialect
from agentstream.errors import MalformedEventError
from agentstream.validate import Validator

SEEDS = Path(__file__).resolve().parent / "fixtures" / "seeds"


def seed_lines(dialect: str) -> list[bytes]:
    """The seed's example lines for ``dialect``, one compact JSON object per line, in the seed's order."""
    return (SEEDS / f"{dialect}.ndjson").read_bytes().splitlines()


def seed_objects(dialect: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in seed_lines(dialect)]


def line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def decode_each(dialect: str, lines: Iterable[bytes], session_id: str | None = None) -> list[list[p.AnyEvent]]:
    """What one decoder emits for each line, in order; the last entry is what ``finish()`` flushed."""
    decoder = get_dialect(dialect).decoder(session_id)
    out: list[list[p.AnyEvent]] = []
    for raw in lines:
        events = decoder.decode_line(raw)
        assert events is not None, f"{dialect} decoder refused {raw!r}"
        out.append(events)
    out.append(decoder.finish())
    return out


def decode_all(dialect: str, lines: Iterable[bytes], session_id: str | None = None) -> list[p.AnyEvent]:
    return [event for chunk in decode_each(dialect, lines, session_id) for event in chunk]


def encode_all(dialect: str, events: Iterable[p.AnyEvent]) -> list[bytes]:
    encoder = get_dialect(dialect).encoder()
    lines = [encoded for event in events for encoded in encoder.encode(event)]
    return lines + encoder.finish()


def encode_objects(dialect: str, events: Iterable[p.AnyEvent]) -> list[dict[str, Any]]:
    return [json.loads(encoded) for encoded in encode_all(dialect, events)]


def round_trip(dialect: str, events: Sequence[p.AnyEvent]) -> list[p.AnyEvent]:
    """Canonical → dialect lines → canonical."""
    return decode_all(dialect, encode_all(dialect, events))


def without(obj: Any, keys: frozenset[str]) -> Any:
    """``obj`` with ``keys`` removed at every depth (ids and timestamps the comparison ignores)."""
    if isinstance(obj, dict):
        return {key: without(value, keys) for key, value in obj.items() if key not in keys}
    if isinstance(obj, list):
        return [without(item, keys) for item in obj]
    return obj


def stamped(events: Iterable[p.BaseEvent], session_id: str = "ses_seed") -> list[p.BaseEvent]:
    sequencer = p.Sequencer(session_id)
    return [sequencer.stamp(event) for event in events]


def assert_valid_events(events: Sequence[p.AnyEvent]) -> None:
    """Every known event re-decodes as valid protocol v1 (field types, literals), unchanged."""
    for number, event in enumerate(events, 1):
        if not isinstance(event, p.UnknownEvent):
            assert p.decode(p.encode(event)) == event, f"event {number} does not survive the canonical codec: {event}"


def assert_canonical(events: Sequence[p.AnyEvent]) -> None:
    """Valid events that also keep every stream invariant of protocol v1 (start first, pairing, one result …)."""
    assert_valid_events(events)
    checker = Validator()
    for number, event in enumerate(events, 1):
        checker.feed(event, number)
    assert checker.close() == [], checker.violations


def of_type(events: Iterable[p.AnyEvent], *kinds: type[p.BaseEvent]) -> list[Any]:
    return [event for event in events if isinstance(event, kinds)]


def realistic(events: list[p.BaseEvent]) -> list[p.BaseEvent]:
    """Make a generated session look like a Stream's: unique ids, and a ``result`` that agrees with the body."""
    _unique_ids(events)
    result = events[-1]
    assert isinstance(result, p.Result)
    totals = p.UsageTotals()
    tools: list[str] = []
    for event in events:
        if isinstance(event, p.Usage):
            totals.add(event)
        elif isinstance(event, p.ToolCall) and event.name not in tools:
            tools.append(event.name)
    result.usage, result.tools_used = totals, tools
    result.turn_count = len(of_type(events, p.Usage))
    return events


_ID_FIELDS = {
    p.ToolCall: ("call_id", True), p.ToolResult: ("call_id", False),
    p.MessageDelta: ("message_id", True), p.Message: ("message_id", False),
    p.ReasoningDelta: ("reasoning_id", True), p.Reasoning: ("reasoning_id", False),
}


def _unique_ids(events: list[p.BaseEvent]) -> None:
    """Generated ids may repeat; give every call, message and reasoning block its own (pairs keep sharing one)."""
    open_ids: dict[tuple[str, str], str] = {}
    for number, event in enumerate(events):
        spec = _ID_FIELDS.get(type(event))
        if spec is None:
            continue
        name, opens = spec
        key = (name, getattr(event, name))
        if opens:
            new = open_ids.setdefault(key, f"{key[1]}_{number}")
        else:
            new = open_ids.pop(key, f"{key[1]}_{number}")
        setattr(event, name, new)


# -- strategies ----------------------------------------------------------------------


@st.composite
def streamed_messages(draw: st.DrawFn) -> list[p.BaseEvent]:
    """An assistant message streamed as deltas, closed by its complete message (the canonical rule)."""
    chunks = draw(st.lists(text.filter(bool), min_size=1, max_size=4))
    message_id = draw(ident)
    deltas: list[p.BaseEvent] = [p.MessageDelta(message_id=message_id, content=chunk) for chunk in chunks]
    return [*deltas, p.Message(message_id=message_id, role="assistant", content="".join(chunks))]


@st.composite
def streamed_reasonings(draw: st.DrawFn) -> list[p.BaseEvent]:
    chunks = draw(st.lists(text.filter(bool), min_size=1, max_size=4))
    reasoning_id = draw(ident)
    deltas: list[p.BaseEvent] = [p.ReasoningDelta(reasoning_id=reasoning_id, content=chunk) for chunk in chunks]
    return [*deltas, p.Reasoning(reasoning_id=reasoning_id, content="".join(chunks))]


short_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | short_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(short_text, inner, max_size=3),
    max_leaves=6,
)
WRONG_VALUES: tuple[Any, ...] = (None, True, "x", "", -1, 1.5, 2**70, [], {}, ["x"], {"x": 1})
"""Values of every JSON type (and out-of-range numbers) that the sweep puts in each field."""


def fields(keys: Sequence[str], nested: dict[str, st.SearchStrategy[Any]] | None = None) -> st.SearchStrategy[dict[str, Any]]:
    """Objects whose known ``keys`` are each absent or hold any JSON value; ``nested`` keys may also hold
    the given (usually object) strategy, so junk reaches the inner fields too."""
    optional: dict[str, st.SearchStrategy[Any]] = {key: json_values for key in keys}
    for key, inner in (nested or {}).items():
        optional[key] = inner | json_values
    return st.fixed_dictionaries({}, optional=optional)


def junk(kinds: Sequence[str], keys: Sequence[str], nested: dict[str, st.SearchStrategy[Any]] | None = None
         ) -> st.SearchStrategy[dict[str, Any]]:
    """Lines of the dialect's own types whose fields are missing or hold values of any type."""
    return st.tuples(st.sampled_from(list(kinds)), fields(keys, nested)).map(lambda pair: {"type": pair[0], **pair[1]})


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into nested objects and lists, the containers themselves included."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    paths = []
    for key, inner in items:
        paths.append((*prefix, key))
        paths += _paths(inner, (*prefix, key))
    return paths


@st.composite
def broken(draw: st.DrawFn, bases: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A valid line with one or two fields (at any depth) deleted or replaced by a value of any type."""
    obj = copy.deepcopy(draw(st.sampled_from(list(bases))))
    for _ in range(draw(st.integers(1, 2))):
        paths = _paths(obj)
        if not paths:
            break
        *parents, key = draw(st.sampled_from(paths))
        parent = obj
        for step in parents:
            parent = parent[step]
        if draw(st.booleans()):
            del parent[key]
        else:
            parent[key] = draw(json_values)
    return obj


def every_breakage(bases: Sequence[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    """Each base line with one field (at any depth) deleted, or set to each of :data:`WRONG_VALUES`."""
    for base in bases:
        for *parents, key in _paths(base):
            for value in (_DELETE, *WRONG_VALUES):
                obj = copy.deepcopy(base)
                parent = obj
                for step in parents:
                    parent = parent[step]
                if value is _DELETE:
                    del parent[key]
                else:
                    parent[key] = value
                yield obj


_DELETE = object()


def feed_junk(dialect: str, objects: Sequence[dict[str, Any]]) -> list[p.AnyEvent]:
    """Sniff and decode junk; the only exception allowed is MalformedEventError. Returns what came out."""
    decoder = get_dialect(dialect).decoder()
    out: list[p.AnyEvent] = []
    for obj in objects:
        assert 0.0 <= get_dialect(dialect).sniff(obj) <= 1.0
        try:
            out += decoder.decode_line(msgspec.json.encode(obj)) or []
        except MalformedEventError as exc:
            assert exc.message.startswith(dialect), exc.message
    return out + decoder.finish()


def merged(items: list[tuple[Any, ...]], kind: str) -> list[tuple[Any, ...]]:
    """Join adjacent ``(kind, text)`` items: dialects without message boundaries run such texts together."""
    out: list[tuple[Any, ...]] = []
    for item in items:
        if item[0] == kind and out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + item[1])
        else:
            out.append(item)
    return out


def assert_breakage_handled(dialect: str, bases: Sequence[dict[str, Any]]) -> None:
    """Every single-field breakage of every base line decodes to valid events or raises MalformedEventError."""
    broken_lines = list(every_breakage(bases))
    assert len(broken_lines) > 100
    for obj in broken_lines:
        assert_valid_events(feed_junk(dialect, [obj]))
