"""Hypothesis strategies for canonical events, shared by the dialect round-trip tests."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from hypothesis import strategies as st

from agentstream import protocol as p

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)
optional_text = st.none() | text
ident = st.from_regex(r"[a-z]{3}_[0-9a-f]{8}", fullmatch=True)
name = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,15}", fullmatch=True)
json_scalar = st.none() | st.booleans() | st.integers(-(2**31), 2**31) | text
arguments = st.dictionaries(name, json_scalar, max_size=4)
small_int = st.integers(0, 10**6)


def json_trees(
    leaves: st.SearchStrategy[Any], keys: st.SearchStrategy[str], max_leaves: int = 6, max_size: int = 3
) -> st.SearchStrategy[Any]:
    """``leaves`` nested in lists and in objects keyed by ``keys``."""
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=max_size) | st.dictionaries(keys, inner, max_size=max_size),
        max_leaves=max_leaves,
    )


json_values = json_trees(
    json_scalar | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False), text
)
"""Any JSON value that survives encoding unchanged (event data, for instance)."""


def unset(value: Any) -> Any:
    """``None`` drawn for an optional field means the field is absent."""
    return p.UNSET if value is None else value


def messages(roles: tuple[p.Role, ...] = ("user", "assistant")) -> st.SearchStrategy[p.Message]:
    return st.builds(p.Message, message_id=ident, role=st.sampled_from(roles), content=text)


tool_calls = st.builds(p.ToolCall, call_id=ident, name=name, arguments=arguments)
tool_results = st.builds(
    p.ToolResult,
    call_id=ident,
    name=name,
    status=st.sampled_from(["success", "error"]),
    output=text,
    duration_ms=small_int,
)
reasonings = st.builds(p.Reasoning, reasoning_id=ident, content=text)
usages = st.builds(p.Usage, model=name, input_tokens=small_int, output_tokens=small_int)
errors = st.builds(
    p.Error, code=st.sampled_from(["RATE_LIMITED", "UNKNOWN"]), message=text, recoverable=st.just(True)
)
steps = st.builds(p.Step, name=name, status=st.sampled_from(["started", "completed", "failed"]))
logs = st.builds(p.Log, level=st.sampled_from(["info", "warn", "error"]), message=text)


@st.composite
def tool_round_trips(
    draw: st.DrawFn,
    results: st.SearchStrategy[p.ToolResult] = tool_results,
    updates: st.SearchStrategy[Sequence[str]] = st.just(()),
) -> list[p.BaseEvent]:
    """A tool_call, a tool_progress per drawn update, and its tool_result, all sharing the call's id (and name)."""
    call = draw(tool_calls)
    result = draw(results)
    result.call_id, result.name = call.call_id, call.name
    return [call, *(p.ToolProgress(call_id=call.call_id, content=update) for update in draw(updates)), result]


@st.composite
def delta_runs(
    draw: st.DrawFn, reasoning: bool = False, roles: tuple[p.Role, ...] = ("assistant", "user", "system")
) -> list[p.BaseEvent]:
    """Preview chunks and the complete event that closes them (its content is the chunks joined)."""
    chunks = draw(st.lists(text.filter(bool), min_size=1, max_size=4))
    run_id = draw(ident)
    if reasoning:
        return [
            *(p.ReasoningDelta(reasoning_id=run_id, content=chunk) for chunk in chunks),
            p.Reasoning(reasoning_id=run_id, content="".join(chunks)),
        ]
    role = draw(st.sampled_from(roles))
    return [
        *(p.MessageDelta(message_id=run_id, role=role, content=chunk) for chunk in chunks),
        p.Message(message_id=run_id, role=role, content="".join(chunks)),
    ]


def stamped(events: Iterable[p.BaseEvent], session_id: str = "ses_seed") -> list[p.BaseEvent]:
    """The events as one producer writes them: one session id, contiguous seq, timestamps."""
    sequencer = p.Sequencer(session_id)
    return [sequencer.stamp(event) for event in events]


plain_starts = st.builds(p.Start, command=st.just("exec"), cwd=st.just("/work"), model=st.just("m1"))


@st.composite
def plain_endings(draw: st.DrawFn) -> list[p.BaseEvent]:
    """A result that succeeded or failed, and nothing else."""
    ok = draw(st.booleans())
    return [
        p.Result(
            ok=ok, subtype="success" if ok else "error", exit_code=0 if ok else 1, duration_ms=draw(small_int)
        )
    ]


_ID_FIELDS = ("message_id", "reasoning_id", "call_id")


def _renumbered(chunk: list[p.BaseEvent], index: int) -> list[p.BaseEvent]:
    """Drawn ids may repeat across chunks: suffix each with its chunk's index (a run's events keep sharing one)."""
    for event in chunk:
        for field in _ID_FIELDS:
            if hasattr(event, field):
                setattr(event, field, f"{getattr(event, field)}_{index}")
    return chunk


@st.composite
def sessions(
    draw: st.DrawFn,
    middle: st.SearchStrategy[list[p.BaseEvent]] | None = None,
    starts: st.SearchStrategy[p.Start] = plain_starts,
    endings: st.SearchStrategy[list[p.BaseEvent]] = plain_endings(),
) -> list[p.BaseEvent]:
    """A whole, valid canonical session, stamped: a start, chunks of ``middle`` (each a valid run), the ending."""
    body_item: st.SearchStrategy[list[p.BaseEvent]] = (
        middle
        if middle is not None
        else st.one_of(
            messages().map(lambda m: [m]),
            tool_round_trips(),
            reasonings.map(lambda r: [r]),
            usages.map(lambda u: [u]),
        )
    )
    chunks = draw(st.lists(body_item, max_size=6))
    body = [event for index, chunk in enumerate(chunks) for event in _renumbered(chunk, index)]
    return stamped([draw(starts), *body, *draw(endings)], session_id="ses_strategy")


# -- the full variety: every body event, every field, every way to end ---------------------------

any_tool_results = st.builds(
    p.ToolResult,
    call_id=ident,
    name=name,
    status=st.sampled_from(["success", "error", "denied", "cancelled"]),
    output=optional_text.map(unset),
    error=optional_text.map(unset),
    duration_ms=small_int,
    truncated=(st.none() | st.booleans()).map(unset),
)


@st.composite
def any_usages(draw: st.DrawFn) -> p.Usage:
    prompt, output = draw(small_int), draw(small_int)
    return p.Usage(
        model=draw(name),
        input_tokens=prompt,
        output_tokens=output,
        cached_tokens=draw(st.integers(0, prompt)),
        reasoning_tokens=draw(st.integers(0, output)),  # the part of the output spent reasoning
        cost_usd=unset(draw(st.none() | st.integers(1, 10**6).map(lambda n: n / 1000))),
    )


def _single(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[list[p.BaseEvent]]:
    return strategy.map(lambda event: [event])


everything: st.SearchStrategy[list[p.BaseEvent]] = st.one_of(
    _single(messages(("user", "assistant", "system", "tool"))),
    delta_runs(),
    delta_runs(reasoning=True),
    _single(reasonings),
    tool_round_trips(any_tool_results, st.lists(text, max_size=2)),
    _single(any_usages()),
    _single(st.builds(p.Status, status=name, message=optional_text.map(unset))),
    _single(st.builds(p.GenericEvent, name=name, data=json_values)),
    _single(logs),
    _single(steps),
    _single(
        st.builds(
            p.Progress,
            name=name,
            current=st.none().map(unset) | small_int.map(float),
            total=st.none().map(unset) | small_int.map(float),
        )
    ),
    _single(
        st.builds(
            p.Error,
            code=st.sampled_from(["RATE_LIMITED", "UNKNOWN", "PROVIDER_ERROR", "TOOL_FAILED"]),
            message=text,
            recoverable=st.just(True),
            retry_in_ms=st.none().map(unset) | small_int,
        )
    ),
)
"""Any body event of a canonical session (deltas, tool calls and their results in valid runs)."""

any_starts = st.builds(
    p.Start,
    command=st.just("exec"),
    cwd=text,
    model=name,
    provider=(st.none() | name).map(unset),
    tools=st.lists(name, max_size=3),
)


@st.composite
def any_endings(draw: st.DrawFn) -> list[p.BaseEvent]:
    """A result of any subtype with any figures; a failed one maybe after the fatal error it names."""
    ok = draw(st.booleans())
    totals = p.UsageTotals(input_tokens=draw(small_int), output_tokens=draw(small_int))
    result = p.Result(
        ok=ok,
        subtype="success" if ok else draw(st.sampled_from(["error", "max_turns"])),
        exit_code=0 if ok else 1,
        duration_ms=draw(small_int),
        turn_count=draw(st.integers(0, 50)),
        usage=totals,
        result=unset(draw(optional_text)),
    )
    if result.subtype == "max_turns":
        result.exit_code = 3
    failure = None if ok else draw(st.none() | text.filter(bool))
    if failure is None:
        return [result]
    result.error = p.ErrorInfo(code="UNKNOWN", message=failure)
    return [p.Error(code="UNKNOWN", message=failure, recoverable=False), result]


def full_sessions() -> st.SearchStrategy[list[p.BaseEvent]]:
    """Sessions that use every event, field and ending protocol v1 has."""
    return sessions(everything, starts=any_starts, endings=any_endings())
