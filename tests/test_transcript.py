"""Transcript: text without duplicated deltas, paired tool calls, usage totals, errors, outcome."""

from __future__ import annotations

from _consumer_support import canonical_session
from agentstream import protocol as p
from agentstream.consumer import read
from agentstream.transcript import OPEN_TEXT_LIMIT, Tally, Transcript


def stamped(*events: p.BaseEvent) -> list[p.BaseEvent]:
    sequencer = p.Sequencer("ses_t")
    return [sequencer.stamp(e) for e in events]


def test_deltas_are_replaced_by_the_complete_message_not_added() -> None:
    t = Transcript.from_events(
        stamped(
            p.MessageDelta(message_id="m1", content="Hel"),
            p.MessageDelta(message_id="m1", content="lo"),
            p.Message(message_id="m1", role="assistant", content="Hello."),
        )
    )
    assert t.text == "Hello."
    assert [m.content for m in t.messages] == ["Hello."]


def test_deltas_stand_in_when_the_message_never_came() -> None:
    t = Transcript.from_events(
        stamped(
            p.Message(message_id="m0", role="assistant", content="First."),
            p.MessageDelta(message_id="m1", content="Cut "),
            p.MessageDelta(message_id="m1", content="off"),
        )
    )
    assert t.text == "Cut off"
    assert [(m.content, m.synthetic) for m in t.messages] == [("First.", p.UNSET), ("Cut off", True)]
    assert t.all_text == "First.\n\nCut off"


def test_interleaved_messages_keep_their_order() -> None:
    t = Transcript.from_events(
        stamped(
            p.MessageDelta(message_id="a", content="A1"),
            p.Message(message_id="u", role="user", content="question"),
            p.MessageDelta(message_id="a", content="A2"),
            p.Message(message_id="a", role="assistant", content="A1A2"),
            p.Message(message_id="b", role="assistant", content="B"),
        )
    )
    assert [(m.role, m.content) for m in t.messages] == [
        ("assistant", "A1A2"),
        ("user", "question"),
        ("assistant", "B"),
    ]
    assert t.text == "B"


def test_text_falls_back_to_the_result() -> None:
    t = Transcript.from_events(
        stamped(p.Result(ok=True, subtype="success", exit_code=0, result="from result"))
    )
    assert t.text == "from result"
    assert Transcript().text == ""


def test_tool_calls_pair_with_results_and_durations() -> None:
    call = p.ToolCall(call_id="c1", name="read", arguments={"path": "a"})
    call.ts = "2026-01-01T00:00:00.100Z"
    result = p.ToolResult(call_id="c1", name="read", status="success", output="text")
    result.ts = "2026-01-01T00:00:01.350Z"
    t = Transcript()
    for event in (
        call,
        p.ToolProgress(call_id="c1", content="reading"),
        result,
        p.ToolCall(call_id="c2", name="bash", arguments={"cmd": "ls"}),
        p.ToolResult(call_id="c3", name="grep", status="error", error="boom", duration_ms=7),
    ):
        t.add(event)
    first, second, third = t.tool_calls
    assert (first.paired, first.status, first.output, first.duration_ms, first.progress) == (
        True,
        "success",
        "text",
        1250,
        ["reading"],
    )
    assert (second.paired, second.status, second.arguments, second.duration_ms) == (
        False,
        "unpaired",
        {"cmd": "ls"},
        None,
    )
    assert (third.paired, third.name, third.arguments, third.error, third.duration_ms) == (
        False,
        "grep",
        None,
        "boom",
        7,
    )
    again = Transcript.from_events([call, p.ToolProgress(call_id="c1", content="reading"), result])
    assert again.tool_calls == [first] and again.tool_calls != [
        second
    ]  # compared by value, as a dataclass is
    assert repr(second) == (f"ToolCallRecord(call_id='c2', call={second.call!r}, result=None, progress=[])")


def test_usage_sums_events_unless_the_result_carries_totals() -> None:
    usages = [
        p.Usage(model="m", input_tokens=10, output_tokens=1),
        p.Usage(model="m", input_tokens=5, cost_usd=0.5),
    ]
    t = Transcript.from_events(stamped(*usages))
    assert (t.usage.input_tokens, t.usage.output_tokens, t.usage.cost_usd) == (15, 1, 0.5)
    t.add(p.Result(ok=True, subtype="success", exit_code=0, usage=p.UsageTotals(input_tokens=99)))
    assert t.usage.input_tokens == 99
    empty = Transcript.from_events(stamped(*usages, p.Result(ok=True, subtype="success", exit_code=0)))
    assert empty.usage.input_tokens == 15


def test_errors_and_outcome() -> None:
    t = Transcript()
    assert t.outcome is None
    t.add(p.Error(code="RATE_LIMITED", message="slow down", recoverable=True, retry_in_ms=500))
    t.add(p.Error(code="AUTH_EXPIRED", message="log in"))
    t.add(
        p.Result(
            ok=False, subtype="error", exit_code=1, error=p.ErrorInfo(code="AUTH_EXPIRED", message="log in")
        )
    )
    assert [e.code for e in t.errors] == ["RATE_LIMITED", "AUTH_EXPIRED"]
    assert t.outcome is not None
    assert (t.outcome.ok, t.outcome.exit_code, t.outcome.subtype, t.outcome.error.code) == (  # type: ignore[union-attr]
        False,
        1,
        "error",
        "AUTH_EXPIRED",
    )


def test_a_whole_stream_from_the_reader() -> None:
    t = Transcript.from_events(read(canonical_session()))
    assert t.text == "4" and t.start is not None and t.start.command == "fake-agent"
    assert [(c.name, c.status) for c in t.tool_calls] == [("calc", "success")]
    assert t.outcome is not None and t.outcome.ok
    assert t.tally.tools_used == ["calc"] and t.tally.turn_count == 1


def test_reasoning_blocks() -> None:
    t = Transcript.from_events(
        stamped(
            p.ReasoningDelta(reasoning_id="r1", content="think"),
            p.Reasoning(reasoning_id="r1", content="thinking done"),
            p.ReasoningDelta(reasoning_id="r2", content="half"),
        )
    )
    assert t.reasoning == ["thinking done", "half"]


def test_tally_counts_each_tool_once() -> None:
    tally = Tally()
    for name in ("a", "b", "a"):
        tally.add(p.ToolCall(call_id=name, name=name))
    tally.add(p.Message(message_id="x", role="user", content="not the assistant"))
    assert tally.tools_used == ["a", "b"] and tally.last_text is None


def test_an_open_run_keeps_its_first_mebibyte_and_marks_the_cut() -> None:
    """What a made-up ending closes a run with: its text up to the limit, then "…" if anything was dropped."""
    tally = Tally()
    for _ in range(OPEN_TEXT_LIMIT // 1000 + 2):  # the limit falls inside a delta
        tally.add(p.MessageDelta(message_id="m", content="x" * 1000))
    assert tally.open_runs[(False, "m")].text == "x" * OPEN_TEXT_LIMIT + "…"
    tally.add(p.ReasoningDelta(reasoning_id="r", content="y" * OPEN_TEXT_LIMIT))  # exactly the limit: whole
    assert tally.open_runs[(True, "r")].text == "y" * OPEN_TEXT_LIMIT
    tally.add(p.ReasoningDelta(reasoning_id="r", content="z"))  # one more: cut, and marked
    assert tally.open_runs[(True, "r")].text == "y" * OPEN_TEXT_LIMIT + "…"
    tally.add(p.MessageDelta(message_id="n", content="a"))
    tally.add(p.MessageDelta(message_id="n", content="b"))
    assert tally.open_runs[(False, "n")].text == "ab"


def test_a_tally_for_an_ending_keeps_a_mebibyte_of_the_last_text_and_marks_the_cut() -> None:
    """A made-up result holds no more than that of a huge last message; a producer's own tally keeps it whole."""
    huge, exact = "x" * (OPEN_TEXT_LIMIT + 1), "y" * OPEN_TEXT_LIMIT
    for_ending, whole = Tally(for_ending=True), Tally()
    for tally in (for_ending, whole):
        tally.add(p.Message(message_id="a", role="assistant", content=huge))
    assert for_ending.last_text == "x" * OPEN_TEXT_LIMIT + "…" and whole.last_text == huge
    for_ending.add(p.Message(message_id="b", role="assistant", content=exact))  # exactly the limit: whole
    assert for_ending.last_text == exact
