"""Shared by the claude, codex, opencode, amp and agui dialect tests: fixtures, decoding, round trips, strategies."""

from __future__ import annotations

import copy
import io
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import msgspec
from _strategies import ident, json_scalar, name, small_int, text, tool_calls
from hypothesis import strategies as st

from agentstream import protocol as p
from agentstream.dialects import get_dialect
from agentstream.errors import MalformedEventError
from agentstream.validate import validate_stream

FIXTURES = Path(__file__).parent / "fixtures" / "dialects"
STAMPS = frozenset({"v", "session_id", "seq", "ts", "synthetic"})


def violations(events: Iterable[p.AnyEvent]) -> list[str]:
    """What the protocol's validator finds wrong with a decoded stream (nothing, for a valid one)."""
    data = b"".join(p.encode_line(event) for event in events)
    return [str(violation) for violation in validate_stream(io.BytesIO(data))]


def fixture_lines(dialect: str, name: str) -> list[bytes]:
    """The non-blank lines of ``fixtures/dialects/<dialect>/<name>``."""
    return [line for line in (FIXTURES / dialect / name).read_bytes().splitlines() if line.strip()]


def decode(dialect: str, lines: Iterable[bytes], session_id: str | None = None) -> list[p.AnyEvent]:
    """Every line through one decoder of ``dialect``, then its ``finish()``; a line it disowns fails the test."""
    decoder = get_dialect(dialect).decoder(session_id)
    out: list[p.AnyEvent] = []
    for line in lines:
        events = decoder.decode_line(line)
        assert events is not None, f"the {dialect} decoder disowned {line[:80]!r}"
        out += events
    return out + decoder.finish()


def decode_fixture(dialect: str, name: str, session_id: str | None = None) -> list[p.AnyEvent]:
    return decode(dialect, fixture_lines(dialect, name), session_id)


def decode_each(dialect: str, name: str) -> list[list[p.AnyEvent]]:
    """Each line of a fixture through a decoder of its own (for files of independent example lines)."""
    return [decode(dialect, [line]) for line in fixture_lines(dialect, name)]


def encode(dialect: str, events: Iterable[p.AnyEvent], **options: Any) -> list[bytes]:
    encoder = get_dialect(dialect).encoder(**options)
    return [line for event in events for line in encoder.encode(event)] + encoder.finish()


def objects(lines: Iterable[bytes]) -> list[dict[str, Any]]:
    return [msgspec.json.decode(line) for line in lines if line.strip()]


def round_trip(dialect: str, events: list[p.BaseEvent], **options: Any) -> list[p.AnyEvent]:
    """Canonical -> dialect lines -> canonical."""
    return decode(dialect, encode(dialect, events, **options))


def fields(event: p.AnyEvent) -> dict[str, Any]:
    """An event's content: every field but the stamps (unknown events: the raw object)."""
    if isinstance(event, p.UnknownEvent):
        return {"type": event.type, "raw": event.raw}
    return {k: v for k, v in msgspec.to_builtins(event).items() if k not in STAMPS}


def only(events: Iterable[p.AnyEvent], kind: type[p.BaseEvent]) -> list[Any]:
    return [event for event in events if isinstance(event, kind)]


def one(events: Iterable[p.AnyEvent], kind: type[p.BaseEvent]) -> Any:
    found = only(events, kind)
    assert len(found) == 1, f"expected one {kind.__name__}, got {len(found)}"
    return found[0]


def project(events: Iterable[p.AnyEvent], keep: Callable[[dict[str, Any]], dict[str, Any] | None]) -> list[dict]:
    """What a dialect keeps of each event (``keep`` returns ``None`` for what it drops)."""
    kept = (keep(fields(event)) for event in events)
    return [item for item in kept if item is not None]


def assert_only_malformed(dialect: str, obj: object) -> None:
    """A junk object may be rejected, but only as a MalformedEventError, and never crash the decoder."""
    decoder = get_dialect(dialect).decoder()
    line = msgspec.json.encode(obj)
    try:
        decoder.decode_line(line)
    except MalformedEventError as exc:
        assert exc.message
    decoder.finish()


def tool_names(events: Iterable[p.AnyEvent]) -> list[str]:
    """Distinct tool names in call order, as ``result.tools_used`` lists them."""
    names: list[str] = []
    for event in only(events, p.ToolCall):
        if event.name not in names:
            names.append(event.name)
    return names


# -- strategies -------------------------------------------------------------------------

optional_text = st.none() | text
json_value = st.recursive(json_scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(name, inner, max_size=3),
                          max_leaves=6)


def _unset(value: Any) -> Any:
    return p.UNSET if value is None else value


@st.composite
def delta_runs(draw: st.DrawFn, reasoning: bool = False) -> list[p.BaseEvent]:
    """Preview chunks and the complete event that closes them (its content is the chunks joined)."""
    chunks = draw(st.lists(text.filter(bool), min_size=1, max_size=3))
    run_id = draw(ident)
    if reasoning:
        return [*(p.ReasoningDelta(reasoning_id=run_id, content=c) for c in chunks),
                p.Reasoning(reasoning_id=run_id, content="".join(chunks))]
    role = draw(st.sampled_from(["assistant", "user", "system"]))
    return [*(p.MessageDelta(message_id=run_id, role=role, content=c) for c in chunks),
            p.Message(message_id=run_id, role=role, content="".join(chunks))]


@st.composite
def tool_runs(draw: st.DrawFn) -> list[p.BaseEvent]:
    """A call, maybe some progress, and its result (any status, output and error each optional)."""
    call = draw(tool_calls)
    progress = [p.ToolProgress(call_id=call.call_id, content=c) for c in draw(st.lists(text, max_size=2))]
    result = p.ToolResult(
        call_id=call.call_id,
        name=call.name,
        status=draw(st.sampled_from(["success", "error", "denied", "cancelled"])),
        output=_unset(draw(optional_text)),
        error=_unset(draw(optional_text)),
        duration_ms=draw(small_int),
        truncated=_unset(draw(st.none() | st.booleans())),
    )
    return [call, *progress, result]


@st.composite
def usage_events(draw: st.DrawFn) -> p.Usage:
    prompt = draw(small_int)
    return p.Usage(
        model=draw(name),
        input_tokens=prompt,
        output_tokens=draw(small_int),
        cached_tokens=draw(st.integers(0, prompt)),
        reasoning_tokens=draw(small_int),
        cost_usd=_unset(draw(st.none() | st.integers(1, 10**6).map(lambda n: n / 1000))),
    )


def _single(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[list[p.BaseEvent]]:
    return strategy.map(lambda event: [event])


everything: st.SearchStrategy[list[p.BaseEvent]] = st.one_of(
    _single(st.builds(p.Message, message_id=ident, role=st.sampled_from(["user", "assistant", "system", "tool"]),
                      content=text)),
    delta_runs(),
    delta_runs(reasoning=True),
    _single(st.builds(p.Reasoning, reasoning_id=ident, content=text)),
    tool_runs(),
    _single(usage_events()),
    _single(st.builds(p.Status, status=name, message=optional_text.map(_unset))),
    _single(st.builds(p.GenericEvent, name=name, data=json_value)),
    _single(st.builds(p.Log, level=st.sampled_from(["info", "warn", "error"]), message=text)),
    _single(st.builds(p.Step, name=name, status=st.sampled_from(["started", "completed", "failed"]))),
    _single(st.builds(p.Progress, name=name, current=st.none().map(_unset) | small_int.map(float),
                      total=st.none().map(_unset) | small_int.map(float))),
    _single(st.builds(p.Error, code=st.sampled_from(["RATE_LIMITED", "UNKNOWN", "PROVIDER_ERROR", "TOOL_FAILED"]),
                      message=text, recoverable=st.just(True),
                      retry_in_ms=st.none().map(_unset) | small_int)),
)
"""Any body event of a canonical session (deltas, tool calls and their results in valid runs)."""

_ID_FIELDS = {"message_id": "msg", "reasoning_id": "rsn", "call_id": "call"}


def _renumber(chunk: list[p.BaseEvent], index: int) -> list[p.BaseEvent]:
    """Ids unique per chunk, so that two chunks never share one by chance."""
    for event in chunk:
        for field, prefix in _ID_FIELDS.items():
            if hasattr(event, field):
                setattr(event, field, f"{prefix}_{index:04d}")
    return chunk


@st.composite
def sessions(draw: st.DrawFn, body: st.SearchStrategy[list[p.BaseEvent]] = everything) -> list[p.BaseEvent]:
    """A whole stamped canonical session: start, body, then a result (a failed one maybe after a fatal error)."""
    chunks = draw(st.lists(body, max_size=6))
    events: list[p.BaseEvent] = [p.Start(command="exec", cwd=draw(text), model=draw(name),
                                         provider=_unset(draw(st.none() | name)),
                                         tools=draw(st.lists(name, max_size=3)))]
    events += [event for index, chunk in enumerate(chunks) for event in _renumber(chunk, index)]
    ok = draw(st.booleans())
    totals = p.UsageTotals(input_tokens=draw(small_int), output_tokens=draw(small_int))
    result = p.Result(ok=ok, subtype="success" if ok else draw(st.sampled_from(["error", "max_turns"])),
                      exit_code=0 if ok else 1, duration_ms=draw(small_int), turn_count=draw(st.integers(0, 50)),
                      usage=totals, result=_unset(draw(optional_text)))
    if not ok:
        if result.subtype == "max_turns":
            result.exit_code = 3
        failure = draw(st.none() | text.filter(bool))
        if failure is not None:
            events.append(p.Error(code="UNKNOWN", message=failure, recoverable=False))
            result.error = p.ErrorInfo(code="UNKNOWN", message=failure)
    events.append(result)
    sequencer = p.Sequencer("ses_roundtrip")
    return [sequencer.stamp(event) for event in events]


def _fixture_objects(dialect: str) -> list[dict[str, Any]]:
    found = []
    for path in sorted((FIXTURES / dialect).glob("*.ndjson")):
        found += [obj for obj in objects(path.read_bytes().splitlines()) if isinstance(obj, dict)]
    return found


@st.composite
def mutants(draw: st.DrawFn, dialect: str) -> dict[str, Any]:
    """A real fixture line of ``dialect`` with one to three fields deleted or replaced by junk, at any depth."""
    obj = copy.deepcopy(draw(st.sampled_from(_fixture_objects(dialect))))
    for _ in range(draw(st.integers(1, 3))):
        node: Any = obj
        while True:
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            key = draw(st.sampled_from(keys))
            child = node[key]
            if isinstance(child, (dict, list)) and child and draw(st.booleans()):
                node = child
                continue
            if draw(st.booleans()):
                del node[key]
            else:
                node[key] = draw(_junk_value)
            break
    return obj


def junk(types: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects of the dialect's own ``type``s with fields missing, of the wrong type, or nested junk.

    Keys and string values come mostly from the dialects' own vocabulary, so that the
    junk reaches deep into the decoders rather than failing at the first field.
    """
    return st.builds(lambda kind, rest: {**rest, "type": kind}, st.sampled_from(types),
                     st.dictionaries(_keys, _junk_value, max_size=8))


FIELD_NAMES = [
    "subtype", "message", "content", "id", "model", "usage", "session_id", "uuid", "event", "index", "delta",
    "text", "thinking", "tool_use_id", "is_error", "result", "errors", "num_turns", "duration_ms", "item", "items",
    "thread_id", "error", "part", "sessionID", "timestamp", "tokens", "state", "callID", "tool", "messageId",
    "toolCallId", "toolCallName", "runId", "threadId", "stepName", "name", "value", "metadata", "outcome",
    "snapshot", "role", "input", "tools", "status", "exit_code", "aggregated_output", "command", "changes",
    "server", "arguments", "rate_limit_info", "content_block", "type", "cache", "time", "output", "reason",
    "rejected", "data", "statusCode", "api_error_status", "total_cost_usd", "permission_denials",
]
_keys = st.sampled_from(FIELD_NAMES) | name
_leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text | st.deferred(lambda: st.sampled_from(WORDS))
_junk_value = st.recursive(_leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=4),
                           max_leaves=8)

WORDS = [
    "text", "thinking", "tool_use", "tool_result", "server_tool_use", "image", "init", "api_retry", "status",
    "message_start", "content_block_start", "content_block_delta", "message_delta", "message_stop", "text_delta",
    "thinking_delta", "agent_message", "reasoning", "command_execution", "file_change", "mcp_tool_call",
    "web_search", "todo_list", "error", "completed", "failed", "declined", "in_progress", "success", "interrupt",
    "cancelled", "step-start", "step-finish", "tool", "running", "user", "assistant", "developer", "T-1",
    "error_max_turns", "aborted_streaming", "agentstream.status", "agentstream.usage", "agui.state_delta",
]


def assert_sniff_is_total(dialect: str, obj: dict[str, Any]) -> None:
    """Detection looks at any first line a reader meets: it must answer, never raise."""
    score = get_dialect(dialect).sniff(obj)
    assert 0.0 <= score <= 1.0
