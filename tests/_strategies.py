"""Hypothesis strategies for canonical events, shared by the dialect round-trip tests."""

from __future__ import annotations

from hypothesis import strategies as st

from agentstream import protocol as p

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)
ident = st.from_regex(r"[a-z]{3}_[0-9a-f]{8}", fullmatch=True)
name = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,15}", fullmatch=True)
json_scalar = st.none() | st.booleans() | st.integers(-(2**31), 2**31) | text
arguments = st.dictionaries(name, json_scalar, max_size=4)
small_int = st.integers(0, 10**6)


def messages(roles: tuple[str, ...] = ("user", "assistant")) -> st.SearchStrategy[p.Message]:
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
errors = st.builds(p.Error, code=st.sampled_from(["RATE_LIMITED", "UNKNOWN"]), message=text, recoverable=st.just(True))
steps = st.builds(p.Step, name=name, status=st.sampled_from(["started", "completed", "failed"]))
logs = st.builds(p.Log, level=st.sampled_from(["info", "warn", "error"]), message=text)


@st.composite
def tool_round_trips(draw: st.DrawFn) -> list[p.BaseEvent]:
    """A tool_call and its tool_result, sharing the id and name."""
    call = draw(tool_calls)
    result = draw(tool_results)
    result.call_id, result.name = call.call_id, call.name
    return [call, result]


@st.composite
def sessions(draw: st.DrawFn, middle: st.SearchStrategy[list[p.BaseEvent]] | None = None) -> list[p.BaseEvent]:
    """A whole, valid canonical session: start, some body events, result — stamped."""
    body_item = middle if middle is not None else st.one_of(
        messages().map(lambda m: [m]), tool_round_trips(), reasonings.map(lambda r: [r]), usages.map(lambda u: [u])
    )
    body = [event for chunk in draw(st.lists(body_item, max_size=6)) for event in chunk]
    ok = draw(st.booleans())
    result = p.Result(ok=ok, subtype="success" if ok else "error", exit_code=0 if ok else 1, duration_ms=draw(small_int))
    events = [p.Start(command="exec", cwd="/work", model="m1"), *body, result]
    sequencer = p.Sequencer("ses_strategy")
    return [sequencer.stamp(event) for event in events]
