"""Shared by the dialect tests: fixtures, decode/encode drivers, validity checks and junk-input strategies.

Canonical-event strategies (sessions, delta runs, tool round trips) live in ``_strategies``.
"""

from __future__ import annotations

import copy
import io
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import strategies as st

from _strategies import json_trees, text
from agentstream import protocol as p
from agentstream.dialects import get_dialect
from agentstream.errors import MalformedEventError
from agentstream.validate import validate_stream

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "dialects"
SEEDS = FIXTURES.parent / "seeds"
STAMPS = frozenset({"v", "session_id", "seq", "ts", "synthetic"})

# -- fixtures -----------------------------------------------------------------------------


def _file_lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().splitlines() if line.strip()]


def fixture_lines(dialect: str, name: str) -> list[bytes]:
    """The non-blank lines of ``fixtures/dialects/<dialect>/<name>``."""
    return _file_lines(FIXTURES / dialect / name)


def seed_lines(dialect: str) -> list[bytes]:
    """The seed's example lines for ``dialect`` (``fixtures/seeds``), one compact JSON object per line, in order."""
    return _file_lines(SEEDS / f"{dialect}.ndjson")


def objects(lines: Iterable[bytes]) -> list[Any]:
    """Each line parsed as JSON: a blank or broken line fails the test."""
    return [msgspec.json.decode(line) for line in lines]


def seed_objects(dialect: str) -> list[dict[str, Any]]:
    return objects(seed_lines(dialect))


def fixture_objects(dialect: str) -> list[dict[str, Any]]:
    """Every JSON object line of every ``*.ndjson`` fixture of ``dialect`` (bases for mutants)."""
    found = []
    for path in sorted((FIXTURES / dialect).glob("*.ndjson")):
        found += [obj for obj in objects(_file_lines(path)) if isinstance(obj, dict)]
    return found


def line(obj: Any) -> bytes:
    """``obj`` as one compact JSON line (no newline)."""
    return msgspec.json.encode(obj)


# -- decoding and encoding ---------------------------------------------------------------


def decode_each(
    dialect: str, lines: Iterable[bytes], session_id: str | None = None
) -> list[list[p.AnyEvent]]:
    """What one decoder emits for each line, in order; the last entry is what ``finish()`` flushed.

    A line the decoder disowns fails the test.
    """
    decoder = get_dialect(dialect).decoder(session_id)
    out: list[list[p.AnyEvent]] = []
    for raw in lines:
        events = decoder.decode_line(raw)
        assert events is not None, f"the {dialect} decoder disowned {raw[:80]!r}"
        out.append(events)
    out.append(decoder.finish())
    return out


def decode(dialect: str, lines: Iterable[bytes], session_id: str | None = None) -> list[p.AnyEvent]:
    """Every line through one decoder of ``dialect``, then its ``finish()``."""
    return [event for chunk in decode_each(dialect, lines, session_id) for event in chunk]


def decode_separately(dialect: str, lines: Iterable[bytes]) -> list[list[p.AnyEvent]]:
    """Each line through a decoder of its own (for files of independent example lines)."""
    return [decode(dialect, [raw]) for raw in lines]


def decode_fixture(dialect: str, name: str, session_id: str | None = None) -> list[p.AnyEvent]:
    return decode(dialect, fixture_lines(dialect, name), session_id)


def encode(dialect: str, events: Iterable[p.AnyEvent], **options: Any) -> list[bytes]:
    """Every event through one encoder of ``dialect`` (``options`` go to the encoder), then its ``finish()``."""
    encoder = get_dialect(dialect).encoder(**options)
    return [encoded for event in events for encoded in encoder.encode(event)] + encoder.finish()


def encode_objects(dialect: str, events: Iterable[p.AnyEvent], **options: Any) -> list[dict[str, Any]]:
    return objects(encode(dialect, events, **options))


def round_trip(dialect: str, events: Sequence[p.AnyEvent], **options: Any) -> list[p.AnyEvent]:
    """Canonical -> dialect lines -> canonical."""
    return decode(dialect, encode(dialect, events, **options))


# -- looking at events --------------------------------------------------------------------


def failed_call_text(result: dict[str, Any]) -> str:
    """The one text a dialect without separate fields writes for a canonical ``tool_result`` object that did not
    succeed: its error, then on the next line its output (each left out when empty or missing)."""
    return "\n".join(text for text in (result.get("error"), result.get("output")) if text)


def only(events: Iterable[p.BaseEvent | p.UnknownEvent], *kinds: type[p.BaseEvent]) -> list[Any]:
    return [event for event in events if isinstance(event, kinds)]


def one(events: Iterable[p.BaseEvent | p.UnknownEvent], kind: type[p.BaseEvent]) -> Any:
    found = only(events, kind)
    assert len(found) == 1, f"expected one {kind.__name__}, got {len(found)}"
    return found[0]


def tool_names(events: Iterable[p.BaseEvent | p.UnknownEvent]) -> list[str]:
    """Distinct tool names in call order, as ``result.tools_used`` lists them."""
    names: list[str] = []
    for event in only(events, p.ToolCall):
        if event.name not in names:
            names.append(event.name)
    return names


def _content(event: p.AnyEvent) -> dict[str, Any]:
    """An event's content: every field but the stamps (unknown events: the raw object)."""
    if isinstance(event, p.UnknownEvent):
        return {"type": event.type, "raw": event.raw}
    return {k: v for k, v in msgspec.to_builtins(event).items() if k not in STAMPS}


def project(
    events: Iterable[p.AnyEvent], keep: Callable[[dict[str, Any]], dict[str, Any] | None]
) -> list[dict]:
    """What a dialect keeps of each event (``keep`` returns ``None`` for what it drops)."""
    kept = (keep(_content(event)) for event in events)
    return [item for item in kept if item is not None]


def without(obj: Any, keys: frozenset[str]) -> Any:
    """``obj`` with ``keys`` removed at every depth (ids and timestamps the comparison ignores)."""
    if isinstance(obj, dict):
        return {key: without(value, keys) for key, value in obj.items() if key not in keys}
    if isinstance(obj, list):
        return [without(item, keys) for item in obj]
    return obj


def merged(items: list[tuple[Any, ...]], kind: str) -> list[tuple[Any, ...]]:
    """Join adjacent ``(kind, text)`` items: dialects without message boundaries run such texts together."""
    out: list[tuple[Any, ...]] = []
    for item in items:
        if item[0] == kind and out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + item[1])
        else:
            out.append(item)
    return out


def realistic(events: list[p.BaseEvent]) -> list[p.BaseEvent]:
    """Make a generated session's ``result`` agree with its body, as a Stream's does (usage, tools, turns)."""
    result = events[-1]
    assert isinstance(result, p.Result)
    totals = p.UsageTotals()
    for usage in only(events, p.Usage):
        totals.add(usage)
    result.usage, result.tools_used = totals, tool_names(events)
    result.turn_count = len(only(events, p.Usage))
    return events


# -- validity -----------------------------------------------------------------------------


def codec_problems(events: Iterable[p.AnyEvent]) -> list[str]:
    """Known events that do not come back unchanged through the canonical codec (wrong field types or literals)."""
    return [
        f"event {number} does not survive the canonical codec: {event}"
        for number, event in enumerate(events, 1)
        if not isinstance(event, p.UnknownEvent) and p.decode(p.encode(event)) != event
    ]


def violations(events: Sequence[p.AnyEvent]) -> list[str]:
    """Everything wrong with a decoded stream as protocol v1 (nothing, for a valid one): the codec check above,
    then every rule of the validator (start first, pairing, one result …)."""
    data = b"".join(p.encode_line(event) for event in events)
    return codec_problems(events) + [str(violation) for violation in validate_stream(io.BytesIO(data))]


def assert_sniff_is_total(dialect: str, obj: Any) -> None:
    """Detection looks at any first line a reader meets: it must answer, never raise."""
    assert 0.0 <= get_dialect(dialect).sniff(obj) <= 1.0


def assert_junk_handled(dialect: str, junk_objects: Sequence[Any]) -> None:
    """Sniff each object, then decode them all through one decoder: a line may be rejected, but only as a
    MalformedEventError that names the dialect; what does come out are valid events, and ``finish()`` never fails."""
    decoder = get_dialect(dialect).decoder()
    out: list[p.AnyEvent] = []
    for obj in junk_objects:
        assert_sniff_is_total(dialect, obj)
        try:
            out += decoder.decode_line(line(obj)) or []
        except MalformedEventError as exc:
            assert exc.message.startswith(dialect), exc.message
    out += decoder.finish()
    assert not codec_problems(out)


def assert_field_lost(dialect: str, raw: bytes, problem: str) -> list[p.AnyEvent]:
    """``raw`` decodes (the field of the wrong kind is lost, not the line) with one warning matching ``problem``."""
    events = decode(dialect, [raw])
    warnings = [e.message for e in only(events, p.Log) if "the field was ignored" in e.message]
    assert len(warnings) == 1 and re.search(problem, warnings[0]), warnings
    assert warnings[0].startswith(dialect)
    return events


# -- junk ---------------------------------------------------------------------------------

FIELD_NAMES = [
    "subtype",
    "message",
    "content",
    "id",
    "model",
    "usage",
    "session_id",
    "uuid",
    "event",
    "index",
    "delta",
    "text",
    "thinking",
    "tool_use_id",
    "is_error",
    "result",
    "errors",
    "num_turns",
    "duration_ms",
    "item",
    "items",
    "thread_id",
    "error",
    "part",
    "sessionID",
    "timestamp",
    "tokens",
    "state",
    "callID",
    "tool",
    "messageId",
    "toolCallId",
    "toolCallName",
    "runId",
    "threadId",
    "stepName",
    "name",
    "value",
    "metadata",
    "outcome",
    "snapshot",
    "role",
    "input",
    "tools",
    "status",
    "exit_code",
    "aggregated_output",
    "command",
    "changes",
    "server",
    "arguments",
    "rate_limit_info",
    "content_block",
    "type",
    "cache",
    "time",
    "output",
    "reason",
    "rejected",
    "data",
    "statusCode",
    "api_error_status",
    "total_cost_usd",
    "permission_denials",
]
"""Keys of the dialects' own vocabulary, so that junk reaches deep into the decoders."""

WORDS = [
    "text",
    "thinking",
    "tool_use",
    "tool_result",
    "server_tool_use",
    "image",
    "init",
    "api_retry",
    "status",
    "message_start",
    "content_block_start",
    "content_block_delta",
    "message_delta",
    "message_stop",
    "text_delta",
    "thinking_delta",
    "agent_message",
    "reasoning",
    "command_execution",
    "file_change",
    "mcp_tool_call",
    "web_search",
    "todo_list",
    "error",
    "completed",
    "failed",
    "declined",
    "in_progress",
    "success",
    "interrupt",
    "cancelled",
    "step-start",
    "step-finish",
    "tool",
    "running",
    "user",
    "assistant",
    "developer",
    "T-1",
    "error_max_turns",
    "aborted_streaming",
    "agentstream.status",
    "agentstream.usage",
    "agui.state_delta",
]
"""String values of the dialects' own vocabulary (types, subtypes, statuses)."""

junk_keys = st.sampled_from(FIELD_NAMES) | text
junk_values = json_trees(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text | st.sampled_from(WORDS),
    junk_keys,
    max_leaves=8,
    max_size=4,
)
"""Any JSON value (huge numbers and infinities too), with the dialects' keys and words mixed in."""

WRONG_VALUES: tuple[Any, ...] = (None, True, "x", "", -1, 1.5, 2**70, [], {}, ["x"], {"x": 1})
"""Values of every JSON type (and out-of-range numbers) that the sweep puts in each field."""


def fields(
    keys: Sequence[str], nested: dict[str, st.SearchStrategy[Any]] | None = None
) -> st.SearchStrategy[dict[str, Any]]:
    """Objects whose known ``keys`` are each absent or hold any junk value; ``nested`` keys may also hold
    the given (usually object) strategy, so junk reaches the inner fields too."""
    optional: dict[str, st.SearchStrategy[Any]] = dict.fromkeys(keys, junk_values)
    for key, inner in (nested or {}).items():
        optional[key] = inner | junk_values
    return st.fixed_dictionaries({}, optional=optional)


def junk(
    kinds: Sequence[str], keys: Sequence[str] = (), nested: dict[str, st.SearchStrategy[Any]] | None = None
) -> st.SearchStrategy[dict[str, Any]]:
    """Lines of the dialect's own ``kinds``: up to eight vocabulary keys holding junk, and the known ``keys``
    (and ``nested`` shapes, see :func:`fields`) each missing or holding a value of any type."""
    return st.builds(
        lambda kind, extra, known: {**extra, **known, "type": kind},
        st.sampled_from(list(kinds)),
        st.dictionaries(junk_keys, junk_values, max_size=8),
        fields(keys, nested),
    )


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into nested objects and lists, the containers themselves included."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    paths = []
    for key, inner in items:
        paths.append((*prefix, key))
        paths += _paths(inner, (*prefix, key))
    return paths


def _parent(obj: Any, path: tuple[Any, ...]) -> tuple[Any, Any]:
    """The container that holds the end of ``path``, and its key there."""
    *parents, key = path
    for step in parents:
        obj = obj[step]
    return obj, key


@st.composite
def mutants(draw: st.DrawFn, bases: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A valid line with one to three fields (at any depth) deleted or replaced by junk."""
    obj = copy.deepcopy(draw(st.sampled_from(list(bases))))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(obj)
        if not paths:
            break
        parent, key = _parent(obj, draw(st.sampled_from(paths)))
        if draw(st.booleans()):
            del parent[key]
        else:
            parent[key] = draw(junk_values)
    return obj


_DELETE = object()


def every_breakage(bases: Sequence[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    """Each base line with one field (at any depth) deleted, or set to each of :data:`WRONG_VALUES`."""
    for base in bases:
        for path in _paths(base):
            for value in (_DELETE, *WRONG_VALUES):
                obj = copy.deepcopy(base)
                parent, key = _parent(obj, path)
                if value is _DELETE:
                    del parent[key]
                else:
                    parent[key] = value
                yield obj


def assert_breakage_handled(dialect: str, bases: Sequence[dict[str, Any]]) -> None:
    """Every single-field breakage of every base line decodes to valid events or raises MalformedEventError."""
    broken_lines = list(every_breakage(bases))
    assert len(broken_lines) > 100
    for obj in broken_lines:
        assert_junk_handled(dialect, [obj])


def response_items(
    events: Iterable[p.BaseEvent | p.UnknownEvent], *, timed: bool = False
) -> list[tuple[Any, ...]]:
    """What the Responses-style dialects (acai, cake) carry: messages of every role, reasoning, tool calls and
    their outputs (with each event's time, for a dialect whose lines carry one)."""
    kept: list[tuple[Any, ...]] = []
    for event in events:
        if isinstance(event, p.Message):
            item: tuple[Any, ...] = ("message", event.message_id, event.role, event.content)
        elif isinstance(event, p.Reasoning):
            item = ("reasoning", event.reasoning_id, event.content)
        elif isinstance(event, p.ToolCall):
            item = ("call", event.call_id, event.name, event.arguments)
        elif isinstance(event, p.ToolResult):
            item = ("output", event.call_id, event.name, event.output)
        else:
            continue
        kept.append((*item, event.ts) if timed else item)
    return kept
