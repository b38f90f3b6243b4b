"""The C twins of the hot per-event steps (``agentstream._speedups``) answer exactly as their Python versions.

Each twin is compared with its Python version on generated input close to the edges (timestamps one
character off, blank lines of every shape, stamps one field off), and whole streams are validated and
read once with the C twins and once with the Python ones.
"""

from __future__ import annotations

import collections
import copy
import io
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _dialect_kit import FIXTURES
from _strategies import full_sessions, sessions
from agentstream import _accel, _lines, stream, transcript, validate
from agentstream import protocol as p
from agentstream._recent_ids import RecentIds
from agentstream.consumer import pipeline, read
from agentstream.dialects import claude, kit
from agentstream.dialects.claude import ClaudeDecoder, _PendingUsage
from agentstream.dialects.codex import CodexDecoder
from agentstream.dialects.gemini import GeminiDecoder
from agentstream.transcript import OPEN_TEXT_LIMIT, TALLY_KINDS, Tally, _OpenRun

speedups = _accel.speedups

# Each C twin, and the (module, name) bindings that hold it, with the Python version of each binding.
TWINS = {
    "count_lines": [
        (_lines, "count_lines", _lines._count_lines),
        (pipeline, "count_lines", _lines._count_lines),
    ],
    "has_blank_line": [(_lines, "has_blank_line", _lines._has_blank_line)],
    "split_lines": [(_lines, "split_lines", _lines._split_lines)],
    "now_ts": [(p, "now_ts", p._now_ts_py), (stream, "_now_ts", p._now_ts_py)],
    "is_timestamp": [],  # used only through the two below, and compared with protocol.is_timestamp here
    "events_timestamped": [(p, "events_timestamped", p._events_timestamped)],
    "stamps_in_order": [(validate, "_stamps_in_order", validate._stamps_in_order_py)],
    "feed_turn": [(validate, "_feed_turn", validate._feed_turn_py)],
    "accept_plain": [(pipeline, "_accept_plain", pipeline._accept_plain_py)],
    "stamp_line": [(stream, "_stamp_line", stream._stamp_line_py)],
    "tally_add": [(module, "tally_add", Tally.add) for module in (transcript, kit, pipeline, stream)],
    # a partial with the dialect's types; without it, decode_typed reads every typed line (None)
    "claude_deltas": [(claude, "_write_deltas", claude._write_deltas_py)],
    "claude_skim": [(ClaudeDecoder, "typed_skim", None)],
    "gemini_skim": [(GeminiDecoder, "typed_skim", None)],
    "codex_skim": [(CodexDecoder, "typed_skim", None)],
}


def test_the_extension_is_built_and_its_twins_are_in_use() -> None:
    """The README's install builds it wherever gcc and the Python headers are, as in CI."""
    assert speedups is not None, (
        "agentstream._speedups was not built, or is a build of another version (pip install -e . again), "
        "or AGENTSTREAM_PURE_PYTHON is set"
    )
    assert {name for name in dir(speedups) if not name.startswith("_")} == {*TWINS, "INTERFACE"}
    for name, bindings in TWINS.items():
        for module, attribute, _ in bindings:
            bound = getattr(module, attribute)
            assert getattr(bound, "func", bound) is getattr(speedups, name), f"{module.__name__}.{attribute}"


def test_a_build_of_another_interface_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    import agentstream._speedups as built

    monkeypatch.setattr(built, "INTERFACE", _accel.INTERFACE + 1)
    assert _accel._load() is None
    monkeypatch.setattr(built, "INTERFACE", _accel.INTERFACE)
    assert _accel._load() is built


def test_pure_python_keeps_the_twins_off() -> None:
    code = "from agentstream import _accel, validate; print(_accel.speedups, validate._feed_turn.__name__)"
    env = {**os.environ, "AGENTSTREAM_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["None", "_feed_turn_py"]


@contextmanager
def python_twins() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for bindings in TWINS.values():
            for module, attribute, python in bindings:
                patch.setattr(module, attribute, python)
        yield


# -- one function at a time -------------------------------------------------------------------------------

VALID_TIMESTAMPS = st.from_regex(p._TIMESTAMP, fullmatch=True).filter(str.isascii)
TIMESTAMP_CHARACTERS = "0123456789-:.TtZz+ x\n٢"


@st.composite
def near_timestamps(draw: st.DrawFn) -> str:
    """A timestamp with up to three characters replaced, inserted or removed."""
    text = list(draw(VALID_TIMESTAMPS))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(text)))
        how = draw(st.sampled_from(["replace", "insert", "remove"]))
        character = draw(st.sampled_from(TIMESTAMP_CHARACTERS))
        if how == "insert" or at == len(text):
            text.insert(at, character)
        elif how == "replace":
            text[at] = character
        else:
            del text[at]
    return "".join(text)


@settings(max_examples=1000, deadline=None)
@given(near_timestamps() | VALID_TIMESTAMPS | st.text(TIMESTAMP_CHARACTERS, max_size=40))
def test_a_timestamp_is_one_exactly_when_the_pattern_says_so(value: str) -> None:
    assert speedups.is_timestamp(value) is p.is_timestamp(value)


@pytest.mark.parametrize("value", [None, 1, b"2025-01-01T00:00:00Z", ["2025-01-01T00:00:00Z"]])
def test_what_is_not_a_string_is_not_a_timestamp(value: object) -> None:
    assert speedups.is_timestamp(value) is p.is_timestamp(value) is False


def test_the_clock_reads_as_the_python_version_reads_it() -> None:
    """Each C reading lies between the Python readings around it, in the same form, and a reading in the
    same millisecond is the same string object (the reader checks a block's times once per object)."""
    for _ in range(20_000):
        before, reading, after = p._now_ts_py(), speedups.now_ts(), p._now_ts_py()
        assert before <= reading <= after, (before, reading, after)
        assert p.is_timestamp(reading) and len(reading) == len("2026-01-01T00:00:00.000Z")
        first, second = speedups.now_ts(), speedups.now_ts()
        assert (first is second) == (first == second)


LINE_BYTES = st.lists(st.sampled_from([b"\n", b" ", b"\t", b"\r", b"{", b"a", b"\x00", b"\r\n"]), max_size=40)


@given(LINE_BYTES.map(b"".join), st.booleans())
def test_lines_and_blank_lines_are_found_as_the_python_versions_find_them(data: bytes, mutable: bool) -> None:
    block = bytearray(data) if mutable else data
    assert speedups.count_lines(block) == _lines._count_lines(block)
    assert speedups.has_blank_line(block) is _lines._has_blank_line(block)


@given(LINE_BYTES.map(b"".join), st.booleans(), st.integers(0, 45))
def test_a_block_is_split_into_lines_as_the_python_version_splits_it(
    data: bytes, mutable: bool, start: int
) -> None:
    block = bytearray(data) if mutable else data
    start = min(start, len(data))
    lines = speedups.split_lines(block, start)
    assert lines == _lines._split_lines(block, start) == data[start:].split(b"\n")
    assert all(type(line) is bytes for line in lines)


def test_the_framing_twins_refuse_what_is_not_bytes() -> None:
    with pytest.raises(TypeError):
        speedups.count_lines("text\n")
    with pytest.raises(TypeError):
        speedups.has_blank_line(None)
    with pytest.raises(TypeError):
        speedups.split_lines("text\n", 0)
    for start in (-1, 6):
        with pytest.raises(ValueError, match="outside"):
            speedups.split_lines(b"text\n", start)


@st.composite
def stamped_with_one_field_off(draw: st.DrawFn) -> list[p.AnyEvent]:
    """A valid session's events, some with a seq, session id, version or ts another value."""
    events: list[p.AnyEvent] = draw(sessions())
    for _ in range(draw(st.integers(0, 2))):
        event = draw(st.sampled_from(events))
        field = draw(st.sampled_from(["seq", "session_id", "v", "ts"]))
        value: object = {
            "seq": st.integers(-2, len(events) + 2) | st.just(2**70),
            "session_id": st.sampled_from(["", "ses_strategy", "ses_other"]),
            "v": st.integers(0, 3) | st.just(-(2**80)),
            "ts": near_timestamps(),
        }[field]
        setattr(event, field, draw(value))  # type: ignore[arg-type]
    return events


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stamped_with_one_field_off(),
    st.integers(-1, 2),
    st.sampled_from(["ses_strategy", "ses_other", None]),
    st.integers(0, 2),
)
def test_stamps_are_in_order_exactly_when_the_python_version_says_so(
    events: list[p.AnyEvent], start: int, session: str | None, version: int
) -> None:
    assert speedups.stamps_in_order(events, start, session, version) is validate._stamps_in_order_py(
        events, start, session, version
    )
    assert speedups.events_timestamped(events) is p._events_timestamped(events)


@pytest.mark.parametrize("start", [2**63 - 2, 2**63, 2**64 + 5])
def test_numbers_past_64_bits_are_left_to_the_careful_path(start: int) -> None:
    events = [p.Sequencer("s", next_seq=start + n).stamp(p.Status(status="busy")) for n in range(3)]
    assert speedups.stamps_in_order(events, start, "s", p.PROTOCOL_VERSION) is False
    assert speedups.stamps_in_order(events, 0, "s", 2**70) is False


def test_a_stream_whose_seq_nears_the_64_bit_limit_validates_as_in_python() -> None:
    """Its next blocks ask the stamps check about a seq past 64 bits: a verdict, not an OverflowError."""
    top = 2**63 - 1
    lines = [p.Start(command="c", cwd="/w"), p.Status(status="busy")]
    stamped = [p.Sequencer("s", next_seq=n).stamp(event) for n, event in zip([0, top], lines, strict=True)]
    data = b"".join(msgspec.json.encode(event) + b"\n" for event in stamped)
    data += b"".join(data.splitlines(keepends=True)[1:] * 2000)  # more blocks after the first
    with_c = _violations(data)
    with python_twins():
        assert _violations(data) == with_c
    assert with_c[0].rule == "seq"


def test_a_field_read_from_a_struct_without_its_slot_is_asked_for_by_name() -> None:
    """Events built in Python by any class with those attributes give the same verdict."""

    class Plain:
        def __init__(self, seq: int) -> None:
            self.v, self.session_id, self.seq, self.ts = p.PROTOCOL_VERSION, "s", seq, "2025-01-01T00:00:00Z"

    events = [Plain(0), Plain(1)]
    assert speedups.stamps_in_order(events, 0, "s", p.PROTOCOL_VERSION) is True
    assert speedups.stamps_in_order(events, 1, "s", p.PROTOCOL_VERSION) is False
    assert speedups.events_timestamped(events) is True
    with pytest.raises(AttributeError):
        speedups.events_timestamped([object()])


RECENT_LIMITS = st.sampled_from([10_000, 10_000, 10_000, 0, 1, 2])
"""How many closed ids a RecentIds keeps: usually its default, else so few that adding one forgets another."""
FEW_IDS = st.sampled_from(["a", "b", "c"])


def _events_of_few_ids(draw: st.DrawFn) -> list[p.AnyEvent]:
    """A full session's events, half their ids replaced by one of a few, so that ids meet again."""
    events: list[p.AnyEvent] = draw(full_sessions())
    for event in events:
        for name in ("message_id", "reasoning_id", "call_id"):
            if hasattr(event, name) and draw(st.booleans()):
                setattr(event, name, draw(FEW_IDS))
    return events


@st.composite
def accept_states(draw: st.DrawFn) -> tuple[list[p.AnyEvent], Tally, RecentIds[Any], RecentIds[Any], bool]:
    """A full session's events (shuffled, ids drawn from a few, a few times not ones), and a reader's state
    for them: runs and calls open or closed, runs whose text is near the tally's limit."""
    events = _events_of_few_ids(draw)
    events = draw(st.permutations(events)) if draw(st.booleans()) else events
    for event in events:
        if draw(st.integers(0, 9)) == 0:
            event.ts = draw(near_timestamps())
    tally = Tally(for_ending=True)
    closed_runs, closed_calls = RecentIds[Any](draw(RECENT_LIMITS)), RecentIds[Any](draw(RECENT_LIMITS))
    for reasoning in (False, True):
        for run_id in draw(st.lists(FEW_IDS, max_size=3)):
            size = draw(st.sampled_from([0, 5, OPEN_TEXT_LIMIT - 3, OPEN_TEXT_LIMIT, OPEN_TEXT_LIMIT + 9]))
            run = tally.open_runs[(reasoning, run_id)] = _OpenRun("assistant")
            run.size, run.parts = size, ["x" * min(size, 8)]
        for run_id in draw(st.lists(FEW_IDS, max_size=2)):
            closed_runs.add((reasoning, run_id))
    for call_id in draw(st.lists(FEW_IDS, max_size=2)):
        tally.open_calls[call_id] = "shell"
    for call_id in draw(st.lists(FEW_IDS, max_size=2)):
        closed_calls.add(call_id)
    return events, tally, closed_runs, closed_calls, p.events_timestamped(events)


def _tally_state(tally: Tally) -> object:
    runs = {key: (run.role, run.size, list(run.parts)) for key, run in tally.open_runs.items()}
    return runs, dict(tally.open_calls), tally.tools_used, tally.last_text, tally.turn_count, tally.usage


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(accept_states(), st.integers(0, 3), st.sampled_from([0, 7, 2**64]))
def test_ordinary_events_are_accepted_as_the_python_version_accepts_them(
    state: tuple[list[p.AnyEvent], Tally, RecentIds[Any], RecentIds[Any], bool], start: int, seq: int
) -> None:
    answers = []
    for accept in (speedups.accept_plain, pipeline._accept_plain_py):
        events, tally, closed_runs, closed_calls, times_fit = copy.deepcopy(state)
        out: list[p.AnyEvent] = []
        stop = accept(
            events,
            min(start, len(events)),
            out,
            tally,
            closed_runs,
            closed_calls,
            "ses_x",
            seq,
            times_fit,
            pipeline._ACCEPT_KINDS,
        )
        made_up = [event.ts for event in out if event.ts.encode() not in repr(state[0]).encode()]
        for event in out:
            if event.ts in made_up:
                event.ts = "<now>"  # read from the clock: the same on both sides but for the instant
        answers.append((stop, out, _tally_state(tally), list(closed_runs), list(closed_calls)))
    assert answers[0] == answers[1]


@st.composite
def turn_states(draw: st.DrawFn) -> tuple[list[p.AnyEvent], validate.Validator]:
    """A full session's events (ids drawn from a few), and a validator inside a turn that has seen some runs
    and calls open or close, its closed ids kept in RecentIds that may be tiny."""
    events = _events_of_few_ids(draw)
    checker = validate.Validator()
    checker._closed_calls = RecentIds(draw(RECENT_LIMITS))
    checker._closed_runs = {
        kind: RecentIds(draw(RECENT_LIMITS)) for kind in (p.MessageDelta, p.ReasoningDelta)
    }
    for kind in (p.MessageDelta, p.ReasoningDelta):
        for run_id in draw(st.lists(FEW_IDS, max_size=2)):
            checker._open_runs[kind][run_id] = 1
        for run_id in draw(st.lists(FEW_IDS, max_size=2)):
            checker._closed_runs[kind].add(run_id)
    for call_id in draw(st.lists(FEW_IDS, max_size=2)):
        checker._open_calls[call_id] = 1
    for call_id in draw(st.lists(FEW_IDS, max_size=2)):
        checker._closed_calls.add(call_id)
    return events, checker


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turn_states(), st.integers(0, 3))
def test_a_turn_is_checked_as_the_python_version_checks_it(
    state: tuple[list[p.AnyEvent], validate.Validator], start: int
) -> None:
    answers = []
    for twin in (speedups.feed_turn, validate._feed_turn_py):
        events, checker = copy.deepcopy(state)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(validate, "_feed_turn", twin)
            end = checker._feed_turn(events, min(start, len(events)), 10)
        runs = [
            (dict(checker._open_runs[kind]), list(checker._closed_runs[kind]))
            for kind in (p.MessageDelta, p.ReasoningDelta)
        ]
        answers.append(
            (
                end,
                checker.violations,
                checker.events,
                runs,
                dict(checker._open_calls),
                list(checker._closed_calls),
                checker.result is None,
                checker._pending_fatal,
            )
        )
    assert answers[0] == answers[1]


@pytest.mark.parametrize(
    "size", [0, OPEN_TEXT_LIMIT - 3, OPEN_TEXT_LIMIT - 2, OPEN_TEXT_LIMIT, OPEN_TEXT_LIMIT + 1]
)
@pytest.mark.parametrize("text", ["", "ab", "abc", "abcd"])
def test_a_run_near_the_tallys_limit_keeps_what_the_python_version_keeps(size: int, text: str) -> None:
    answers = []
    for accept in (speedups.accept_plain, pipeline._accept_plain_py):
        tally = Tally(for_ending=True)
        run = tally.open_runs[(False, "m")] = _OpenRun("assistant")
        run.size, run.parts = size, ["x"]
        events: list[p.AnyEvent] = [p.MessageDelta(message_id="m", content=text, ts="2026-01-01T00:00:00Z")]
        kinds = pipeline._ACCEPT_KINDS
        accept(events, 0, [], tally, RecentIds[Any](), RecentIds[Any](), "s", 0, True, kinds)
        answers.append(_tally_state(tally))
    assert answers[0] == answers[1]


@st.composite
def tallied_events(draw: st.DrawFn) -> tuple[Tally, list[p.AnyEvent]]:
    """A full session's events, ids drawn from a few, and a tally that has seen some of a stream already:
    runs open near the limit, calls open, tools used."""
    events = _events_of_few_ids(draw)
    tally = Tally(for_ending=draw(st.booleans()))
    for reasoning in (False, True):
        for run_id in draw(st.lists(FEW_IDS, max_size=3)):
            size = draw(st.sampled_from([0, 5, OPEN_TEXT_LIMIT - 3, OPEN_TEXT_LIMIT, OPEN_TEXT_LIMIT + 9]))
            run = tally.open_runs[(reasoning, run_id)] = _OpenRun(
                draw(st.sampled_from(["assistant", "user"]))
            )
            run.size, run.parts = size, ["x" * min(size, 8)]
    for call_id in draw(st.lists(FEW_IDS, max_size=2)):
        tally.open_calls[call_id] = "shell"
    for tool in draw(st.lists(st.sampled_from(["shell", "read", "edit"]), max_size=2, unique=True)):
        tally._tools.add(tool)
        tally.tools_used.append(tool)
    return tally, events


def _tallied(tally: Tally, events: list[p.AnyEvent], add: Any) -> object:
    """Every slot of the tally after ``add`` took each event, with the exception that stopped it."""
    failure = None
    try:
        for event in events:
            add(tally, event)
    except Exception as exc:  # what either twin raises is compared
        failure = type(exc), str(exc)
    state = {name: getattr(tally, name, "<unset>") for name in Tally.__slots__}
    if isinstance(state["open_runs"], dict):
        state["open_runs"] = {
            key: (run.role, run.size, list(run.parts), getattr(run, "sizes", None))
            if isinstance(run, _OpenRun)
            else run
            for key, run in state["open_runs"].items()
        }
    return state, failure


def _tallied_by_both(tally: Tally, events: list[p.AnyEvent]) -> tuple[object, object]:
    return (
        _tallied(copy.deepcopy(tally), copy.deepcopy(events), transcript.tally_add),
        _tallied(copy.deepcopy(tally), copy.deepcopy(events), Tally.add),
    )


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tallied_events())
def test_a_stream_is_tallied_as_the_python_version_tallies_it(state: tuple[Tally, list[p.AnyEvent]]) -> None:
    ours, python = _tallied_by_both(*state)
    assert ours == python


@pytest.mark.parametrize("for_ending", [False, True])
@pytest.mark.parametrize("extra", [-1, 0, 1, 2])
def test_the_last_text_is_cut_where_the_python_version_cuts_it(for_ending: bool, extra: int) -> None:
    text = "é" * (OPEN_TEXT_LIMIT + extra)
    events: list[p.AnyEvent] = [
        p.Message(message_id="m", role="assistant", content=text),
        p.Message(message_id="n", role="assistant", content=""),
    ]
    ours, python = _tallied_by_both(Tally(for_ending=for_ending), events)
    assert ours == python


def _delta(run_id: str, text: str) -> p.MessageDelta:
    return p.MessageDelta(
        message_id="".join([*run_id]), role="assistant", content=text
    )  # a new str each time


def test_a_run_found_before_is_not_used_once_its_tally_has_changed() -> None:
    """The C twin tells a run's next delta by its id's text while the tally's runs have not changed: a run
    closed and opened again, a run replaced, and two tallies with runs of one id each keep their own."""
    first, second = Tally(), Tally()
    for tally in (first, second):
        transcript.tally_add(tally, _delta("msg_1", "a"))
    transcript.tally_add(first, _delta("msg_1", "bc"))
    transcript.tally_add(second, _delta("msg_1", "d"))
    transcript.tally_add(first, _delta("msg_1", "e"))
    assert [first.open_runs[(False, "msg_1")].parts, second.open_runs[(False, "msg_1")].parts] == [
        ["a", "bc", "e"],
        ["a", "d"],
    ]
    transcript.tally_add(first, p.Message(message_id="msg_1", role="assistant", content="abce"))
    transcript.tally_add(first, _delta("msg_1", "f"))
    assert (first.open_runs[(False, "msg_1")].size, first.open_runs[(False, "msg_1")].parts) == (1, ["f"])
    replaced = first.open_runs[(False, "msg_1")] = _OpenRun("assistant")
    transcript.tally_add(first, _delta("msg_1", "gh"))
    assert (replaced.size, replaced.parts) == (2, ["gh"])
    transcript.tally_add(first, p.ReasoningDelta(reasoning_id="msg_1", content="r"))
    assert first.open_runs[(True, "msg_1")].parts == ["r"] and replaced.parts == ["gh"]


class _Odd(str):
    """A string of another class: the C twin leaves what it does not know to the Python version."""

    def __eq__(self, other: object) -> bool:
        return str(self) == other or other == "assistant"

    __hash__ = str.__hash__


_SIZE_SLOT: Any = vars(_OpenRun)["size"]


class _OtherRun(_OpenRun):
    """A run whose size is written through a property of its own (which a slot written directly would skip)."""

    __slots__ = ("sizes",)

    def __init__(self, role: p.Role) -> None:
        self.sizes: list[int] = []
        super().__init__(role)

    @property
    def size(self) -> int:
        return int(_SIZE_SLOT.__get__(self))

    @size.setter
    def size(self, value: int) -> None:
        self.sizes.append(value)
        _SIZE_SLOT.__set__(self, value)


class _CountingTally(Tally):
    __slots__ = ("seen",)

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    def add(self, event: p.AnyEvent) -> None:
        self.seen += 1
        super().add(event)


def _odd_tallies() -> list[tuple[str, Tally, list[p.AnyEvent]]]:
    """Tallies and events off the common shape: the C twin leaves most of them to the Python version."""
    cases: list[tuple[str, Tally, list[p.AnyEvent]]] = []
    delta = p.MessageDelta(message_id="m", content="more")
    other_run = Tally()
    other_run.open_runs[(False, "m")] = _OtherRun("assistant")
    cases.append(("a run of another class", other_run, [delta]))
    sizeless = Tally()
    run = sizeless.open_runs[(False, "m")] = _OpenRun("assistant")
    run.size = 2.0  # type: ignore[assignment]
    cases.append(("a size that is not an int", sizeless, [delta]))
    unset = Tally()
    del unset.tools_used
    cases.append(("a slot unset", unset, [p.ToolCall(call_id="c", name="shell", arguments={})]))
    runs_list = Tally()
    runs_list.open_runs = []  # type: ignore[assignment]
    cases.append(("open runs not a dict", runs_list, [p.Reasoning(reasoning_id="r", content="x")]))
    cases.append(
        ("a role of another class", Tally(), [p.Message(message_id="m", content="hi", role=_Odd("x"))])  # type: ignore[arg-type]
    )
    cases.append(("content not a str", Tally(), [p.Message(message_id="m", role="assistant", content=7)]))  # type: ignore[arg-type]
    cases.append(("content not a str, delta", Tally(), [delta, p.MessageDelta(message_id="m", content=None)]))  # type: ignore[arg-type]
    cases.append(("an unhashable name", Tally(), [p.ToolCall(call_id="c", name=["x"], arguments={})]))  # type: ignore[arg-type]
    limitless = Tally(for_ending=True)
    limitless._text_limit = "1"  # type: ignore[assignment]
    cases.append(
        ("a limit not an int", limitless, [p.Message(message_id="m", role="assistant", content="hi")])
    )
    cases.append(("a usage", Tally(), [p.Usage(model="m", input_tokens=3, output_tokens=4)] * 2))
    return cases


@pytest.mark.parametrize(
    ("tally", "events"), [case[1:] for case in _odd_tallies()], ids=[c[0] for c in _odd_tallies()]
)
def test_a_tally_or_event_off_the_common_shape_is_tallied_as_in_python(
    tally: Tally, events: list[p.AnyEvent]
) -> None:
    ours, python = _tallied_by_both(tally, events)
    assert ours == python


def test_a_subclass_of_tally_is_tallied_by_its_own_add() -> None:
    tally = _CountingTally()
    transcript.tally_add(tally, p.ToolCall(call_id="c", name="shell", arguments={}))
    assert (tally.seen, tally.tools_used) == (1, ["shell"])


def test_tallying_refuses_arguments_of_the_wrong_kind() -> None:
    event = p.ToolCall(call_id="c", name="shell", arguments={})
    with pytest.raises(TypeError):
        speedups.tally_add(TALLY_KINDS, Tally())
    for kinds in [TALLY_KINDS[:-1], list(TALLY_KINDS), (*TALLY_KINDS[:2], "1", *TALLY_KINDS[3:])]:
        with pytest.raises(TypeError):
            speedups.tally_add(kinds, Tally(), event)
    with pytest.raises(TypeError):
        speedups.tally_add((Tally(), *TALLY_KINDS[1:]), Tally(), event)


FIXED_CLOCK = "2026-01-01T00:00:00.000Z"


class _OwnSequencer:
    """A sequencer of the caller's own, with no slots: the C twin reads and writes it through getattr."""

    def __init__(self, session_id: str, next_seq: int) -> None:
        self.session_id, self.next_seq = session_id, next_seq


def _stamped_line(
    stamp: Any,
    events: list[p.AnyEvent],
    to_fd: bool,
    kinds: tuple[Any, ...],
    take: Any = None,
    sequencer_class: Any = p.Sequencer,
) -> tuple[object, ...]:
    """What ``stamp`` made of each event in turn: the events, the buffer, the next seq, the tally, each answer
    (an error returned or raised is compared by its type and wording) and what it wrote. ``take`` stands for
    the descriptor: given the bytes of a write, it says how many went out (or raises, as a failed write)."""
    sequencer, buffer, tally, answers = sequencer_class("ses_s", 5), bytearray(b"old line"), Tally(), []
    writes: list[tuple[int, bytes]] = []

    def write(fd: int, data: bytearray) -> int:
        writes.append((fd, bytes(data)))
        return len(data) if take is None else int(take(data))

    for event in events:
        try:
            answer = stamp(event, sequencer, buffer, tally, 7 if to_fd else -1, (*kinds[:4], write))
        except Exception as exc:  # what either twin raises is compared
            answers.append(("raised", type(exc), str(exc)))
        else:
            answers.append(None if answer is None else ("returned", type(answer), str(answer)))
        answers.append(bytes(buffer))
    state = {name: getattr(tally, name) for name in ("open_calls", "tools_used", "last_text", "turn_count")}
    return answers, events, sequencer.next_seq, state, tally.usage, writes


def _stamped_by_both(
    events: list[p.AnyEvent],
    to_fd: bool,
    kinds: tuple[Any, ...],
    take: Any = None,
    sequencer_class: Any = p.Sequencer,
) -> tuple[tuple[object, ...], tuple[object, ...]]:
    return (
        _stamped_line(speedups.stamp_line, copy.deepcopy(events), to_fd, kinds, take, sequencer_class),
        _stamped_line(stream._stamp_line_py, copy.deepcopy(events), to_fd, kinds, take, sequencer_class),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(full_sessions(), st.booleans(), st.sampled_from([p.Sequencer, _OwnSequencer]), st.data())
def test_an_emitted_event_is_stamped_and_encoded_as_the_python_version_does_it(
    events: list[p.AnyEvent], to_fd: bool, sequencer_class: Any, data: st.DataObject
) -> None:
    for event in events:
        if data.draw(st.booleans()):
            event.ts = ""  # the clock's (fixed here, so that both sides read the same)
    kinds = (*stream._STAMP_KINDS[:3], lambda: FIXED_CLOCK)
    ours, python = _stamped_by_both(events, to_fd, kinds, sequencer_class=sequencer_class)
    assert ours == python
    assert len(ours[5]) == (len(events) if to_fd else 0)  # type: ignore[arg-type]


def _refuse_write(data: bytearray) -> int:
    raise BrokenPipeError(32, "Broken pipe")


@pytest.mark.parametrize(
    "take", [lambda data: len(data) // 2, lambda data: len(data) - 1, lambda data: 0, _refuse_write]
)
def test_a_line_the_descriptor_takes_part_of_or_refuses_is_told_as_the_python_version_tells_it(
    take: Any,
) -> None:
    """A partial write returns the bytes taken, for the stream to write the rest; a failed one raises. Either
    way the event has its seq and is counted, as one written whole is."""
    events: list[p.AnyEvent] = [
        p.ToolCall(call_id="c", name="shell", arguments={}, ts=FIXED_CLOCK),
        p.Message(message_id="m", role="assistant", content="done", ts=FIXED_CLOCK),
    ]
    ours, python = _stamped_by_both(events, True, stream._STAMP_KINDS, take)
    assert ours == python
    answers, _, next_seq, state, _, writes = ours
    assert next_seq == 7 and state["open_calls"] == {"c": "shell"}  # type: ignore[index]
    assert [fd for fd, _ in writes] == [7, 7] and all(line.endswith(b"\n") for _, line in writes)  # type: ignore[attr-defined]
    if take is _refuse_write:
        assert answers[0] == ("raised", BrokenPipeError, "[Errno 32] Broken pipe")  # type: ignore[index]
    else:
        assert answers[0] == ("returned", int, str(take(writes[0][1])))  # type: ignore[index]


def _refusing_encoder(error: Exception) -> Any:
    def encode_into(event: p.AnyEvent, buffer: bytearray) -> None:
        buffer[:] = b"half"
        raise error

    return encode_into


@pytest.mark.parametrize(
    "error",
    [TypeError("no"), UnicodeEncodeError("utf-8", "\udc80", 0, 1, "surrogates"), msgspec.EncodeError("x")],
)
def test_an_event_the_encoder_refuses_takes_no_seq_and_its_error_is_returned(error: Exception) -> None:
    kinds = (_refusing_encoder(error), *stream._STAMP_KINDS[1:])
    events: list[p.AnyEvent] = [p.ToolCall(call_id="c", name="shell", arguments={}, ts=FIXED_CLOCK)]
    ours, python = _stamped_by_both(events, True, kinds)
    assert ours == python
    assert ours[2] == 5 and ours[3]["open_calls"] == {} and ours[5] == []  # type: ignore[index]


def test_an_error_of_another_kind_from_the_encoder_is_raised() -> None:
    kinds = (_refusing_encoder(RuntimeError("broken")), *stream._STAMP_KINDS[1:])
    events: list[p.AnyEvent] = [p.MessageDelta(message_id="m", content="x", ts=FIXED_CLOCK)]
    ours, python = _stamped_by_both(events, False, kinds)
    assert ours == python
    assert ours[0][0] == ("raised", RuntimeError, "broken")  # type: ignore[index]


def test_a_stream_writes_a_surrogate_it_was_given_as_the_replacement_character() -> None:
    out = io.BytesIO()
    with stream.Stream("twins", out=out) as producer:
        producer.message("file \udc80.txt")
    lines = out.getvalue().splitlines()
    assert [p.decode(line).content for line in lines if b'"message"' in line] == ["file \ufffd.txt"]  # type: ignore[union-attr]
    assert [p.decode(line).seq for line in lines] == list(range(len(lines)))


def test_stamping_refuses_arguments_of_the_wrong_kind() -> None:
    good = (p.Usage(model="m"), p.Sequencer(), bytearray(), Tally(), -1, stream._STAMP_KINDS)
    assert speedups.stamp_line(*good) is None
    with pytest.raises(TypeError):
        speedups.stamp_line(*good[:5])
    wrong_ones = [
        (2, b""),
        (4, True),
        (4, "1"),
        (5, stream._STAMP_KINDS[:-1]),
        (5, list(stream._STAMP_KINDS)),
    ]
    for at, wrong in wrong_ones:
        with pytest.raises(TypeError):
            speedups.stamp_line(*good[:at], wrong, *good[at + 1 :])


def test_accepting_refuses_arguments_of_the_wrong_kind() -> None:
    good = ([], 0, [], Tally(), RecentIds[Any](), RecentIds[Any](), "s", 0, True, pipeline._ACCEPT_KINDS)
    assert speedups.accept_plain(*good) == (0, 0)
    with pytest.raises(TypeError):
        speedups.accept_plain(*good[:9])
    for at, wrong in [(0, ()), (2, None), (4, set()), (7, "0"), (9, pipeline._ACCEPT_KINDS[:-1])]:
        with pytest.raises(TypeError):
            speedups.accept_plain(*good[:at], wrong, *good[at + 1 :])


# -- whole streams -----------------------------------------------------------------------------------------


@st.composite
def damaged_streams(draw: st.DrawFn) -> bytes:
    """A valid session's NDJSON with a few lines dropped, repeated, swapped, blanked, joined or edited."""
    lines = [msgspec.json.encode(event) for event in draw(full_sessions())]
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(lines) - 1))
        how = draw(st.sampled_from(["drop", "repeat", "swap", "blank", "join", "seq", "ts", "garbage"]))
        if how == "drop" and len(lines) > 1:
            del lines[at]
        elif how == "repeat":
            lines.insert(at, lines[at])
        elif how == "swap" and at + 1 < len(lines):
            lines[at], lines[at + 1] = lines[at + 1], lines[at]
        elif how == "blank":
            lines.insert(at, draw(st.sampled_from([b"", b" ", b"\t\r"])))
        elif how == "join" and at + 1 < len(lines):
            lines[at : at + 2] = [lines[at] + lines[at + 1]]
        elif how == "seq":
            lines[at] = lines[at].replace(b'"seq":', b'"seq":1', 1)
        elif how == "ts":
            lines[at] = lines[at].replace(b'"ts":"2', b'"ts":"x', 1)
        elif how == "garbage":
            lines[at] = lines[at][: draw(st.integers(0, len(lines[at])))]
    return b"".join(line + b"\n" for line in lines)


def _violations(data: bytes) -> list[validate.Violation]:
    return list(validate.validate_stream(io.BytesIO(data)))


def _read(data: bytes) -> list[dict[str, object]]:
    """The events read, without what the reader makes up afresh each time (a ts, a duration, a session id)."""
    events = []
    for event in read(io.BytesIO(data)):
        fields = msgspec.to_builtins(event)
        for clock_read in ("ts", "duration_ms"):
            fields.pop(clock_read, None)
        if fields["session_id"].encode() not in data:
            fields["session_id"] = "<made up>"
        events.append(fields)
    return events


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged_streams())
def test_validating_and_reading_a_stream_give_the_same_with_either_twin(data: bytes) -> None:
    with_c = _violations(data), _read(data)
    with python_twins():
        assert (_violations(data), _read(data)) == with_c


def test_a_turn_fed_at_once_stops_at_its_result() -> None:
    """What follows a result in the same block goes through the ordering rules, with either twin."""
    events = [
        p.Start(command="exec", cwd="/w"),
        p.MessageDelta(message_id="m", content="a"),
        p.Message(message_id="m", role="assistant", content="a"),
        p.Result(ok=True, subtype="success", exit_code=0),
        p.MessageDelta(message_id="n", content="late"),
        p.Result(ok=True, subtype="success", exit_code=0),
    ]
    data = b"".join(msgspec.json.encode(event) + b"\n" for event in map(p.Sequencer("s").stamp, events))
    with_c = [(v.line, v.rule) for v in _violations(data)]
    with python_twins():
        assert [(v.line, v.rule) for v in _violations(data)] == with_c
    assert with_c == [(5, "result-last"), (6, "result-last"), (6, "result-last")]


CLAUDE_STREAMS = {
    path.name: [line for line in path.read_bytes().splitlines() if line.strip()]
    for path in [*sorted((FIXTURES / "claude").glob("*.ndjson")), FIXTURES / "amp" / "stream-json.ndjson"]
}


def _read_steadily(data: bytes, dialect: str) -> list[object]:
    """The events read, with made-up ids and the clock steady, so that two reads compare."""
    counter = iter(range(1 << 30))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(p, "new_id", lambda prefix: f"{prefix}_{next(counter):016x}")
        patch.setattr(p, "now_ts", lambda: "2026-01-01T00:00:00.000Z")
        return [msgspec.to_builtins(event) for event in read(data, dialect)]


def _shuffled(lines: list[bytes], data: st.DataObject, replace: Callable[[bytes], bytes]) -> bytes:
    """The stream with up to four of its lines dropped, repeated, moved or replaced."""
    lines = list(lines)
    for _ in range(data.draw(st.integers(0, 4))):
        at = data.draw(st.integers(0, len(lines) - 1))
        how = data.draw(st.sampled_from(["drop", "repeat", "move", "replace"]))
        if how == "drop" and len(lines) > 1:
            del lines[at]
        elif how == "repeat":
            lines.insert(data.draw(st.integers(0, len(lines))), lines[at])
        elif how == "move":
            lines.insert(data.draw(st.integers(0, len(lines))), lines.pop(at))
        else:
            lines[at] = replace(lines[at])
    return b"\n".join(lines) + b"\n"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(CLAUDE_STREAMS)), st.data())
def test_claude_streams_read_the_same_with_either_twin(name: str, data: st.DataObject) -> None:
    """Deltas of open runs are read in C; lines dropped, repeated or moved leave runs and blocks in every state
    the C twin must hand back to decode_typed (no block started, another kind, a closed run, a turn not started)."""
    stream = _shuffled(
        CLAUDE_STREAMS[name],
        data,
        lambda line: re.sub(rb'"(text|thinking)":"(?:[^"\\]|\\.)*"', rb'"\1":""', line, count=1),
    )
    dialect = "amp" if name == "stream-json.ndjson" else "claude"
    with_c = _read_steadily(stream, dialect)
    with python_twins():
        assert _read_steadily(stream, dialect) == with_c


def test_the_realistic_claude_session_reads_the_same_with_either_twin() -> None:
    stream = (Path(__file__).parents[1] / "bench" / "claude-code-2.1.332.ndjson").read_bytes()
    with_c = _read_steadily(stream, "claude")
    with python_twins():
        assert _read_steadily(stream, "claude") == with_c
    assert sum(event["type"] == "message_delta" for event in with_c) >= 5  # type: ignore[index]


class _Stamped(ClaudeDecoder):
    """A dialect that stamps its events its own way."""

    def _stamp(self, event: p.Event, ts: str | None) -> None:
        super()._stamp(event, ts)


def test_a_subclass_that_changes_a_skimmed_step_reads_every_line_itself() -> None:
    assert ClaudeDecoder.typed_skim is not None
    assert _Stamped.typed_skim is None


_CLAUDE_LINES = st.builds(
    lambda kind, index, text: msgspec.json.encode(
        {
            "type": "stream_event",
            "event": {
                "type": "content_block_delta",
                "index": index,
                "delta": {
                    "type": kind,
                    {"text_delta": "text", "thinking_delta": "thinking"}.get(kind, "x"): text,
                },
            },
        }
    ),
    st.sampled_from(["text_delta", "thinking_delta", "input_json_delta", "signature_delta"]),
    st.integers(0, 2),
    st.sampled_from(["", "hi", "é"]),
) | st.sampled_from(
    [
        b'{"type":"stream_event","event":{"type":"content_block_stop","index":0}}',
        b'{"type":"stream_event","event":{"type":"content_block_stop","index":1},"uuid":"u"}',
        b'{"type":"stream_event","event":{"type":"content_block_stop","index":2}}',
        b'{"type":"stream_event","event":{"type":"content_block_start","index":1,"content_block":{"type":"text"}}}',
        b'{"type":"stream_event","event":{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"t","name":"Bash","input":{}}}}',
        b'{"type":"stream_event","event":{"type":"message_stop"}}',
        b'{"type":"stream_event","event":{"type":"message_stop"},"session_id":"s"}',
        b'{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta"}}}',
        b'{"type":"system","subtype":"status","status":"requesting"}',
        b'{"type":"system","subtype":"status","status":null,"message":"m","uuid":"u"}',
        b'{"type":"system","subtype":"status","status":""}',
        b'{"type":"system","subtype":"thinking_tokens","estimated_tokens":3,"estimated_tokens_delta":1,"uuid":"u"}',
        b'{"type":"system","subtype":"thinking_tokens","status":null,"message":"m"}',
        b"not json",
    ]
)


@st.composite
def claude_states(draw: st.DrawFn) -> dict[str, Any]:
    """What a Claude decoder holds between lines, in every combination the skim tests: mostly a current message
    whose blocks have open runs (the skimmed case), with any one part of it missing or different."""
    ids = st.sampled_from(["blk_a", "blk_b", "blk_c"])
    blocks = draw(
        st.dictionaries(st.integers(0, 2), st.tuples(st.sampled_from(["text", "thinking"]), ids), max_size=3)
    )
    runs = st.tuples(st.sampled_from(["assistant", "user"]), st.sampled_from([None, "2026-01-01T00:00:00Z"]))
    named = {
        (kind == "thinking" if draw(st.integers(0, 4)) else kind != "thinking", run_id): draw(runs)
        for kind, run_id in blocks.values()
        if draw(st.integers(0, 4))
    }
    return {
        "started": draw(st.integers(0, 4)) > 0,
        "lost": draw(st.sampled_from([[]] * 4 + [[(("stream_event", "x"), "x was lost")]])),
        "current": draw(st.sampled_from(["msg_a"] * 4 + [None, "msg_b"])),
        "streams": {"msg_a": blocks} if draw(st.integers(0, 4)) else {},
        "named": named,
        "line_ts": draw(st.sampled_from([None, "", "2026-02-02T00:00:00Z"])),
        "clock": draw(st.sampled_from(["", "2026-03-03T00:00:00Z"])),
        "turn_ended": draw(st.booleans()),
        "fatal": draw(st.booleans()),
        "chunk_run": draw(st.integers(0, 4)) == 0,
        "usage": draw(st.sampled_from([None] * 4 + ["msg_a", "msg_b"])),
    }


def _claude_decoder(state: dict[str, Any]) -> ClaudeDecoder:
    decoder = ClaudeDecoder(session_id="ses_x")
    decoder._startup = None
    decoder.started, decoder._lost, decoder._current = state["started"], list(state["lost"]), state["current"]
    decoder._streams = {message: dict(blocks) for message, blocks in state["streams"].items()}
    decoder._named = {
        (reasoning, run_id): kit._Run(reasoning, role, run_id, ts, ["before"])
        for (reasoning, run_id), (role, ts) in state["named"].items()
    }
    decoder.line_ts, decoder._clock, decoder.turn_ended = (
        state["line_ts"],
        state["clock"],
        state["turn_ended"],
    )
    decoder.last_fatal = p.Error(code="x", message="x", recoverable=False) if state["fatal"] else None
    if state["chunk_run"]:  # a run of chunk() deltas, which the next other event closes
        decoder._run = kit._Run(False, "assistant", "run_x", None, ["open"])
    if state.get("usage"):  # an API message's usage not out yet
        decoder._usage = _PendingUsage(state["usage"], "claude-x", {"output_tokens": 3}, True)
    return decoder


def _decoder_state(decoder: ClaudeDecoder) -> object:
    runs = {key: (run.role, run.ts, list(run.parts)) for key, run in decoder._named.items()}
    events = [
        msgspec.json.encode(event) for event in decoder.drain()
    ]  # as written: the order of data's keys too
    return (
        events,
        runs,
        decoder._streams,
        decoder._current,
        decoder._usage,
        decoder._stopped,
        decoder.started,
        decoder.last_fatal,
        decoder.turn_ended,
        decoder.sequencer.next_seq,
        decoder._run is None,
    )


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(claude_states(), st.lists(_CLAUDE_LINES, min_size=1, max_size=6))
def test_the_claude_skim_leaves_a_decoder_as_decode_typed_does(
    state: dict[str, Any], lines: list[bytes]
) -> None:
    """Line by line from any state: skimmed in C, or each typed line handed to decode_typed."""
    _assert_skim_agrees(state, lines)


@pytest.mark.parametrize("turn_ended", [False, True])
@pytest.mark.parametrize("fatal", [False, True])
@pytest.mark.parametrize("run_ts", [None, "2026-01-01T00:00:00Z"])
@pytest.mark.parametrize("text", ["", "hi"])
def test_a_skimmed_delta_of_an_open_run_is_what_decode_typed_makes_of_it(
    turn_ended: bool, fatal: bool, run_ts: str | None, text: str
) -> None:
    state = {
        "started": True,
        "lost": [],
        "current": "msg_a",
        "streams": {"msg_a": {0: ("text", "blk_a")}},
        "named": {(False, "blk_a"): ("assistant", run_ts)},
        "line_ts": None,
        "clock": "",
        "turn_ended": turn_ended,
        "fatal": fatal,
        "chunk_run": False,
    }
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}
    _assert_skim_agrees(state, [msgspec.json.encode({"type": "stream_event", "event": delta})])


def _assert_skim_agrees(
    state: dict[str, Any],
    lines: list[bytes],
    decoder_class: type[kit.EventDecoder] = ClaudeDecoder,
    make: Any = None,
    state_of: Any = None,
) -> None:
    """The lines read as _read_run reads them, with the skim and without: the same lines left to the careful
    path, and the same decoder afterwards (a Claude decoder unless told: the class, its maker from a state,
    and what of it is compared)."""
    make, state_of = make or _claude_decoder, state_of or _decoder_state
    decode = decoder_class.typed_lines.decode  # type: ignore[union-attr]
    answers = []
    for skim in (decoder_class.typed_skim, None):
        counter = iter(range(1 << 30))
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(p, "new_id", lambda prefix, made=counter: f"{prefix}_{next(made):016x}")
            patch.setattr(p, "now_ts", lambda: "2026-01-01T00:00:00.000Z")
            decoder, index, refused = make(state), 0, []
            while index < len(lines):
                if skim is not None:
                    index, line = skim(decoder, lines, index, decode)
                    if line is None:
                        break
                else:
                    try:
                        line = decode(lines[index])
                    except Exception:  # as _read_run: msgspec also raises UnicodeDecodeError
                        line = kit.UNDECODED
                if line is kit.UNDECODED:
                    refused.append(index)  # the careful path reads it, or says why not
                else:
                    decoder.decode_typed(line)
                index += 1
            answers.append((refused, state_of(decoder)))
    assert answers[0] == answers[1]


# -- Claude's delta lines read without msgspec ---------------------------------------------------------------

_OPEN_BLOCKS = {
    "started": True,
    "lost": [],
    "current": "msg_a",
    "streams": {"msg_a": {0: ("text", "blk_a"), 1: ("thinking", "blk_b"), 2: ("text", "blk_c")}},
    "named": {(False, "blk_a"): ("assistant", None), (True, "blk_b"): ("assistant", None)},
    "line_ts": None,
    "clock": "",
    "turn_ended": False,
    "fatal": False,
    "chunk_run": False,
}
"""A message whose blocks 0 and 1 have open runs: a delta line for either is read all the way in C."""


@st.composite
def json_strings(draw: st.DrawFn, text: st.SearchStrategy[str]) -> bytes:
    """``text`` as a JSON string, each character written raw or escaped in any of the ways JSON allows, or once
    in a while in a way it does not (a raw control character, a lone surrogate, a bad escape, invalid UTF-8)."""
    out = bytearray(b'"')
    for character in draw(text):
        code = ord(character)
        how = draw(st.sampled_from(["raw"] * 12 + ["u", "U", "short", "odd"]))
        if how == "odd":
            out += draw(
                st.sampled_from([b"\\x", b"\\u12", b"\\ud800", b"\\udc00x", b"\x01", b"\xff", b"\xc3", b"\\"])
            )
        elif how == "short" and character in '"\\/\b\f\n\r\t':
            out += b"\\" + b'"\\/bfnrt'['"\\/\b\f\n\r\t'.index(character)].to_bytes(1, "big")
        elif how in ("u", "U") or code < 0x20 or character in '"\\':
            units = [code] if code < 0x10000 else [0xD800 + ((code - 0x10000) >> 10), 0xDC00 + (code & 0x3FF)]
            out += b"".join((f"\\u{unit:04x}" if how != "U" else f"\\u{unit:04X}").encode() for unit in units)
        else:
            out += character.encode("utf-8", "surrogatepass")
    return bytes(out + b'"')


_ANY_VALUES = st.sampled_from([b"null", b"true", b"false", b"1", b"-2.5", b"[]", b'{"a":1}', b"nul", b'"x'])


_USUAL = st.sampled_from([True] * 3 + [False])
"""Three in four lines are as Claude Code writes them."""
_TEXTS = st.text(st.characters(codec="utf-8") | st.sampled_from('"\\/\b\n\t\x00\x1f\x7fé€😀'), max_size=12)
_ODD_NUMBERS = [b"2", b"9", b"01", b"-0", b"-1", b"1.0", b"1e0", b"2.", b"9" * 18, b"9223372036854775808"]
_Members = list[tuple[bytes, Any]]
"""A JSON object's members as written: each key, and its value as bytes or as the members of an object."""


def _written(members: _Members) -> bytes:
    return (
        b"{"
        + b",".join(key + b":" + (_written(v) if isinstance(v, list) else v) for key, v in members)
        + b"}"
    )


def _one_step_away(draw: st.DrawFn, *objects: _Members) -> None:
    """Once in a while, an object's members swapped, repeated, dropped, joined by an unknown key or escaped."""
    for members in objects:
        how = draw(st.sampled_from(["swap", "repeat", "drop", "unknown", "escaped key"]))
        if draw(_USUAL) or draw(_USUAL):
            continue
        at = draw(st.integers(0, len(members) - 1))
        if how == "swap" and len(members) > 1:
            members[0], members[at] = members[at], members[0]
        elif how == "repeat":
            members.append(members[at])
        elif how == "drop":
            del members[at]
        elif how == "unknown":  # a key of its own, or one that only starts as a known one does
            members.insert(at, (draw(st.sampled_from([b'"extra"', members[at][0][:-2] + b'x"'])), b"null"))
        elif how == "escaped key" and members:
            key = members[at][0]
            members[at] = (b'"\\u%04x%s' % (key[1], key[2:]), members[at][1])


def _damaged(draw: st.DrawFn, line: _Members) -> bytes:
    """The line written, and once in a while a byte of it added, cut or replaced, or whitespace put in."""
    data = bytearray(_written(line))
    for _ in range(draw(st.integers(0, 3)) // 3):
        at = draw(st.integers(0, len(data)))
        how = draw(st.sampled_from(["space", "cut", "byte", "trail"]))
        if how == "space":
            data[at:at] = draw(st.sampled_from([b" ", b"\t", b"\r", b"\n"]))
        elif how == "cut" and at < len(data):
            del data[at]
        elif how == "byte":
            data[at:at] = draw(st.sampled_from([b"\xff", b"\x00", b",", b"}", b'"']))
        else:
            data += draw(st.sampled_from([b" ", b"x", b"{}", b"\r"]))
    return bytes(data)


def _stamps(draw: st.DrawFn, keys: list[bytes]) -> _Members:
    """Some of a line's fields that nothing reads (ids), with values of any kind."""
    return [
        (key, draw(json_strings(st.text(max_size=6)) | _ANY_VALUES))
        for key in draw(st.lists(st.sampled_from(keys), max_size=4))
    ]


@st.composite
def near_delta_lines(draw: st.DrawFn) -> bytes:
    """A content_block_delta line of Claude Code's, in its compact form or one step away from it: keys moved,
    repeated, unknown or escaped, values of other kinds, numbers of every form, whitespace, a byte cut or
    added. Every one of them is read either by the scan in C or by msgspec, with the same outcome."""
    kind = draw(st.sampled_from(["text_delta", "thinking_delta"]))
    if not draw(_USUAL):
        kind = draw(st.sampled_from(["input_json_delta", "signature_delta", "citations_delta"]))
    field = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "partial_json"}.get(
        kind, "signature"
    )
    value = draw(json_strings(_TEXTS)) if draw(_USUAL) else draw(_ANY_VALUES)
    delta = [(b'"type"', b'"%s"' % kind.encode())] + (
        [(b'"%s"' % field.encode(), value)] if draw(_USUAL) else []
    )
    index = draw(st.sampled_from([b"0", b"1"]))
    if not draw(_USUAL):
        index = draw(st.sampled_from([*_ODD_NUMBERS, b'"1"', b"null"]))
    event = [(b'"type"', b'"content_block_delta"'), (b'"index"', index), (b'"delta"', delta)]
    line = [(b'"type"', b'"stream_event"'), (b'"event"', event), *_stamps(draw, _STREAM_STAMPS)]
    _one_step_away(draw, line, event, delta)
    return _damaged(draw, line)


_STREAM_STAMPS = [
    b'"session_id"',
    b'"parent_tool_use_id"',
    b'"uuid"',
    b'"ttft_ms"',
    b'"api_message_id"',
    b'"thinking_display"',
]
"""The fields of a stream_event line that nothing reads."""


@st.composite
def near_stops_and_starts(draw: st.DrawFn) -> bytes:
    """A block's stop, a tool_use block's start or a message's stop, in Claude Code's compact form or one step
    away from it, as above (an input other than ``{}``, a block of another type)."""
    index = draw(st.sampled_from([b"0", b"1", b"2", b"3"]))
    if not draw(_USUAL):
        index = draw(st.sampled_from([*_ODD_NUMBERS, b'"1"', b"null"]))
    kind = draw(st.sampled_from(["block stop", "tool_use start", "message stop"]))
    block: _Members = []
    if kind == "block stop":
        event = [(b'"type"', b'"content_block_stop"'), (b'"index"', index)]
    elif kind == "tool_use start":
        block_type = b'"tool_use"' if draw(_USUAL) else draw(st.sampled_from([b'"text"', b'"tool_usE"']))
        tool_input = b"{}" if draw(_USUAL) else draw(_ANY_VALUES | st.sampled_from([b"{ }", b"{}}", b"{"]))
        block = [(b'"type"', block_type), (b'"id"', draw(json_strings(_TEXTS))), (b'"name"', b'"Bash"')]
        block += [(b'"input"', tool_input), *_stamps(draw, [b'"caller"'])]
        event = [(b'"type"', b'"content_block_start"'), (b'"index"', index), (b'"content_block"', block)]
    else:
        event = [(b'"type"', b'"message_stop"')]
    line = [(b'"type"', b'"stream_event"'), (b'"event"', event), *_stamps(draw, _STREAM_STAMPS)]
    _one_step_away(draw, line, event, *([block] if block else []))
    return _damaged(draw, line)


@st.composite
def near_system_lines(draw: st.DrawFn) -> bytes:
    """A ``thinking_tokens`` or ``status`` system line in its compact form or one step away from it, as above."""
    subtype = draw(st.sampled_from([b"thinking_tokens", b"status"]))
    if not draw(_USUAL) and not draw(_USUAL):
        subtype = draw(st.sampled_from([b"init", b"statu", b"Status"]))
    line = [(b'"type"', b'"system"'), (b'"subtype"', b'"%s"' % subtype)]
    for key in (b'"estimated_tokens"', b'"estimated_tokens_delta"', b'"status"', b'"message"'):
        counted = b"tokens" in key
        if draw(_USUAL) == (counted == (subtype != b"status")):  # what a line of its subtype usually holds
            other = draw(json_strings(_TEXTS) | _ANY_VALUES | st.sampled_from(_ODD_NUMBERS))
            if draw(_USUAL):
                other = draw(
                    st.sampled_from([b"0", b"1", b"42", b"123456"]) if counted else json_strings(_TEXTS)
                )
            line.append((key, other))
    line += _stamps(draw, [b'"session_id"', b'"uuid"'])
    _one_step_away(draw, line)
    return _damaged(draw, line)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(near_delta_lines(), min_size=1, max_size=4))
def test_a_delta_line_reads_the_same_in_any_form(lines: list[bytes]) -> None:
    """The scan reads the compact form Claude Code writes and leaves every other form to msgspec: either way,
    the decoder ends as decode_typed leaves it."""
    _assert_skim_agrees(_OPEN_BLOCKS, lines)


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ("plain", b'"plain"'),
        ("é€😀 and ascii", '"é€😀 and ascii"'.encode()),
        ('a "quoted" \\ path/x\n\tb\r\x08\x0c', b'"a \\"quoted\\" \\\\ path\\/x\\n\\tb\\r\\b\\f"'),
        ("é😀\x00", b'"\\u00e9\\ud83d\\ude00\\u0000"'),
        ("x" * 600 + "\n", b'"' + b"x" * 600 + b'\\n"'),  # longer than the scan's buffer on the stack
    ],
)
def test_a_delta_in_the_compact_form_is_scanned_to_its_text(text: str, written: bytes) -> None:
    """The compact form itself: the text the run gets is the text the line holds."""
    line = (
        b'{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%s}},"session_id":"s","parent_tool_use_id":null,"uuid":"u"}'
        % written
    )
    assert msgspec.json.decode(line)["event"]["delta"]["text"] == text
    decoder = _claude_decoder(_OPEN_BLOCKS)
    assert ClaudeDecoder.typed_skim(decoder, [line], 0, ClaudeDecoder.typed_lines.decode) == (1, None)  # type: ignore[misc, union-attr]
    assert decoder._named[(False, "blk_a")].parts == ["before", text]
    _assert_skim_agrees(_OPEN_BLOCKS, [line])


_COMPACT = (
    b'{"type":"stream_event","event":{"type":"content_block_delta","index":%s,"delta":{"type":"%s_delta",'
    b'"%s":%s}},"%s":%s}'
)
_DELTA_FIELDS = {
    b"text": b"text",
    b"thinking": b"thinking",
    b"signature": b"signature",
    b"input_json": b"partial_json",
}


@pytest.mark.parametrize("kind", list(_DELTA_FIELDS))
@pytest.mark.parametrize(
    ("index", "text", "key", "other"),
    [
        *[
            (index, b'"a"', b"uuid", b'"s"')
            for index in [b"1", b"01", b"00", b"-0", b"-1", b"1.0", b"1e0", b"1 "]
        ],
        *[(b"9" * digits, b'"a"', b"uuid", b'"s"') for digits in (18, 19)],
        *[(b"1" + b"0" * digits, b'"a"', b"uuid", b'"s"') for digits in (17, 18, 19)],
        *[
            (b"1", text, b"uuid", b'"s"')
            for text in [b'"a\x01"', b'"a\xff"', b'"\xc3"', b'"\\ud800"', b'"\\x"']
        ],
        *[
            (b"1", text, b"uuid", b'"s"')
            for text in [b'"\\u12"', b'"a\\"', b"null", b"1", b'"\\ud83d\\ude00"']
        ],
        *[
            (b"1", b'"a"', b"uuid", other)
            for other in [b'"\x01"', b'"\xff"', b"1", b"nul", b"[]", b"true", b"false"]
        ],
        *[
            (b"1", b'"a"', key, b'"s"')
            for key in [b"session_id", b"uuix", b"uui", b"uuidx", b"extra", b"index"]
        ],
    ],
)
def test_a_delta_one_token_away_from_the_compact_form_reads_as_msgspec_reads_it(
    kind: bytes, index: bytes, text: bytes, key: bytes, other: bytes
) -> None:
    """Each token of the compact form, in the forms nearest to it: those the scan must leave to msgspec (a
    leading zero, a number past 64 bits, a control character, invalid UTF-8, a surrogate escape, an unknown
    key) and those it reads (a string, null, true or false where nothing is read)."""
    line = _COMPACT % (index, kind, _DELTA_FIELDS[kind], text, key, other)
    _assert_skim_agrees(_OPEN_BLOCKS, [line])
    _assert_skim_agrees(_OPEN_BLOCKS, [line + b" "])


@pytest.mark.parametrize("kind", list(_DELTA_FIELDS))
def test_a_compact_delta_cut_short_or_a_byte_short_reads_as_msgspec_reads_it(kind: bytes) -> None:
    """Whatever the scan stops at: every prefix of the line, and the line with any one byte missing."""
    line = _COMPACT % (b"1", kind, _DELTA_FIELDS[kind], b'"a\\n\xc3\xa9"', b"uuid", b"null")
    for at in range(len(line)):
        _assert_skim_agrees(_OPEN_BLOCKS, [line[:at]])
        _assert_skim_agrees(_OPEN_BLOCKS, [line[:at] + line[at + 1 :]])


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"a","index":0}}',
        b'{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}},"event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"b"}}}',
        b'{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"},"delta":{"type":"text_delta","text":"b"}}}',
        b'{"type":"stream_event","event":{"type":"content_block_delta","index":0,"index":1,"delta":{"type":"text_delta","text":"a"}}}',
        b'{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a","text":"b"}}}',
        b'{"type":"stream_event","uuid":"u","uuid":null,"event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}}',
        b'{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"s","signature":1}}}',
        b'{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","x":1}}}',
    ],
)
def test_a_delta_line_with_a_key_twice_or_out_of_its_object_reads_as_msgspec_reads_it(line: bytes) -> None:
    _assert_skim_agrees(_OPEN_BLOCKS, [line])


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    claude_states() | st.just(_OPEN_BLOCKS),
    st.lists(near_system_lines() | near_delta_lines(), min_size=1, max_size=4),
)
def test_a_system_line_reads_the_same_in_any_form(state: dict[str, Any], lines: list[bytes]) -> None:
    """A thinking_tokens or status line: its event made in C once the turn is under way (nothing lost on the
    line, no chunk() run to close first), by decode_typed otherwise; the same events and decoder either way."""
    _assert_skim_agrees(state, lines)


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    claude_states() | st.just(_OPEN_BLOCKS),
    st.lists(near_stops_and_starts() | near_delta_lines(), min_size=1, max_size=5),
)
def test_a_stop_or_a_tool_use_start_reads_the_same_in_any_form(
    state: dict[str, Any], lines: list[bytes]
) -> None:
    """A block's stop forgets a block whose run is closed, a message's stop forgets the message once its usage
    is out, a tool_use start does nothing: in C; closing a run or flushing usage is decode_typed's."""
    _assert_skim_agrees(state, lines)


_THINKING_TOKENS = b'{"type":"system","subtype":"thinking_tokens","estimated_tokens":%s,"%s":%s,"uuid":"u"}'


@pytest.mark.parametrize(
    ("tokens", "key", "value"),
    [
        *[
            (tokens, b"estimated_tokens_delta", b"1")
            for tokens in [b"0", b"-0", b"-7", b"01", b"1.0", b"1e3"]
        ],
        *[(tokens, b"estimated_tokens_delta", b"1") for tokens in [b"9" * 18, b"9" * 19, b"-" + b"9" * 19]],
        *[
            (tokens, b"estimated_tokens_delta", b"1")
            for tokens in [b'"x"', b"null", b"true", b"[]", b"{}", b"-"]
        ],
        *[
            (b"1", key, value)
            for key in (b"status", b"message")
            for value in [b'"s"', b"null", b"1", b"true"]
        ],
        *[(b"1", key, b"1") for key in [b"session_id", b"estimated_tokens", b"subtype", b"estimated_tokenz"]],
    ],
)
def test_a_thinking_tokens_line_one_token_away_from_the_compact_form_reads_as_msgspec_reads_it(
    tokens: bytes, key: bytes, value: bytes
) -> None:
    line = _THINKING_TOKENS % (tokens, key, value)
    for state in (_OPEN_BLOCKS, {**_OPEN_BLOCKS, "chunk_run": True}):
        _assert_skim_agrees(state, [line])
        _assert_skim_agrees(state, [line + b"\n"])


def test_a_compact_thinking_tokens_line_cut_short_or_a_byte_short_reads_as_msgspec_reads_it() -> None:
    line = _THINKING_TOKENS % (b"12", b"status", b'"\xc3\xa9\\n"')
    for at in range(len(line)):
        _assert_skim_agrees(_OPEN_BLOCKS, [line[:at]])
        _assert_skim_agrees(_OPEN_BLOCKS, [line[:at] + line[at + 1 :]])
    decoder = _claude_decoder(_OPEN_BLOCKS)
    assert ClaudeDecoder.typed_skim(decoder, [line], 0, ClaudeDecoder.typed_lines.decode) == (1, None)  # type: ignore[misc, union-attr]
    (event,) = decoder.drain()
    assert isinstance(event, p.GenericEvent)
    assert (event.name, event.data, event.seq) == (
        "claude.system.thinking_tokens",
        {"estimated_tokens": 12, "status": "é\n"},
        0,
    )


_STOPS_AND_STARTS = {
    "block stop": b'{"type":"stream_event","event":{"type":"content_block_stop","index":2},"session_id":"s","parent_tool_use_id":null,"uuid":"u","api_message_id":"msg_a"}',
    "tool_use start": b'{"type":"stream_event","event":{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_1","name":"Bash","input":{},"caller":null}},"session_id":"s","uuid":"u"}',
    "message stop": b'{"type":"stream_event","event":{"type":"message_stop"},"session_id":"s","parent_tool_use_id":null,"uuid":"u"}',
    "status": b'{"type":"system","subtype":"status","status":"requesting","session_id":"s","uuid":"u"}',
}
"""Compact lines as Claude Code writes them that _OPEN_BLOCKS lets the skim read whole."""


@pytest.mark.parametrize("kind", list(_STOPS_AND_STARTS))
def test_a_compact_stop_start_or_status_line_cut_short_or_a_byte_short_reads_as_msgspec_reads_it(
    kind: str,
) -> None:
    line = _STOPS_AND_STARTS[kind]
    for at in range(len(line)):
        _assert_skim_agrees(_OPEN_BLOCKS, [line[:at]])
        _assert_skim_agrees(_OPEN_BLOCKS, [line[:at] + line[at + 1 :]])


@pytest.mark.parametrize("kind", list(_STOPS_AND_STARTS))
def test_a_compact_line_that_needs_no_python_step_is_read_in_c(kind: str) -> None:
    """The lines the scan is for are read whole in C: the skim goes past them."""
    decoder = _claude_decoder(_OPEN_BLOCKS)
    skimmed = ClaudeDecoder.typed_skim(
        decoder, [_STOPS_AND_STARTS[kind]], 0, ClaudeDecoder.typed_lines.decode
    )  # type: ignore[misc, union-attr]
    assert skimmed == (1, None)
    _assert_skim_agrees(_OPEN_BLOCKS, [_STOPS_AND_STARTS[kind]])


@pytest.mark.parametrize(
    ("state", "line"),
    [
        # the stop of a block whose run is open: decode_typed closes the run
        (_OPEN_BLOCKS, _STOPS_AND_STARTS["block stop"].replace(b'"index":2', b'"index":1')),
        # a message whose usage is still to go out: decode_typed flushes it
        ({**_OPEN_BLOCKS, "usage": "msg_a"}, _STOPS_AND_STARTS["message stop"]),
        ({**_OPEN_BLOCKS, "usage": "msg_b"}, _STOPS_AND_STARTS["message stop"]),
        # a status whose event closes a chunk() run first, or whose line lost a field
        ({**_OPEN_BLOCKS, "chunk_run": True}, _STOPS_AND_STARTS["status"]),
        ({**_OPEN_BLOCKS, "lost": [(("system", "x"), "x was lost")]}, _STOPS_AND_STARTS["status"]),
        # no current message
        ({**_OPEN_BLOCKS, "current": None}, _STOPS_AND_STARTS["block stop"]),
    ],
)
def test_a_compact_line_whose_step_needs_python_is_handed_on_typed(
    state: dict[str, Any], line: bytes
) -> None:
    decoder = _claude_decoder(state)
    index, typed = ClaudeDecoder.typed_skim(decoder, [line], 0, ClaudeDecoder.typed_lines.decode)  # type: ignore[misc, union-attr]
    assert index == 0
    assert typed == ClaudeDecoder.typed_lines.decode(line)  # type: ignore[union-attr]
    _assert_skim_agrees(state, [line])


_STATUS = b'{"type":"system","subtype":"status","status":%s,"%s":%s,"uuid":"u"}'


@pytest.mark.parametrize(
    ("status", "key", "value"),
    [
        *[(status, b"session_id", b'"s"') for status in [b'"requesting"', b'""', b"null", b'"\\u00e9"']],
        *[(status, b"session_id", b'"s"') for status in [b"1", b"true", b"[]", b'"\\ud800"', b'"a\x01"']],
        *[(b'"requesting"', b"message", value) for value in [b'"m"', b'""', b"null", b"1", b"false", b"{}"]],
        *[(b'"requesting"', key, b"1") for key in [b"estimated_tokens", b"estimated_tokens_delta", b"statu"]],
        *[(b'"requesting"', key, b"null") for key in [b"subtype", b"status", b"type", b"extra"]],
    ],
)
def test_a_status_line_one_token_away_from_the_compact_form_reads_as_msgspec_reads_it(
    status: bytes, key: bytes, value: bytes
) -> None:
    line = _STATUS % (status, key, value)
    for state in (_OPEN_BLOCKS, {**_OPEN_BLOCKS, "chunk_run": True}, {**_OPEN_BLOCKS, "started": False}):
        _assert_skim_agrees(state, [line])
        _assert_skim_agrees(state, [line + b"\n"])


@pytest.mark.parametrize(
    "event",
    [
        b'{"type":"content_block_start","content_block":{"type":"tool_use","id":"t","input":{}}}',
        b'{"type":"content_block_start","index":1}',
        b'{"type":"content_block_start","index":1,"index":2,"content_block":{"type":"tool_use","input":{}}}',
        b'{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","input":{},"input":{}}}',
        b'{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","input":{}},"index":1}',
        b'{"type":"content_block_stop"}',
        b'{"type":"content_block_stop","index":1,"index":2}',
        b'{"type":"message_stop","index":1}',
    ],
)
def test_a_stop_or_start_missing_a_member_or_with_one_twice_reads_as_msgspec_reads_it(event: bytes) -> None:
    _assert_skim_agrees(_OPEN_BLOCKS, [b'{"type":"stream_event","event":%s,"uuid":"u"}' % event])


def test_a_message_stop_without_a_current_message_forgets_the_blocks_it_kept_under_no_id() -> None:
    """As ``_streams.pop(_current or "", None)``: blocks kept under the empty id go too."""
    state = {**_OPEN_BLOCKS, "current": None, "streams": {"": {0: ("text", "blk_a")}, "msg_a": {}}}
    _assert_skim_agrees(state, [_STOPS_AND_STARTS["message stop"]])


@pytest.mark.parametrize(
    "special",
    [b'\\"', b"\\\\", b"\\n", b"\\u00e9", b"\x01", b"\x1f", b"\x7f", b"\xc3\xa9", b"\xff", b" ", b"!"],
)
def test_a_string_is_scanned_the_same_whatever_the_place_of_a_byte_that_is_not_plain(special: bytes) -> None:
    """The scan reads plain bytes eight at a time: an escape, a control character or a byte past ASCII is found
    at every place in and across those eight-byte words."""
    for at in range(20):
        text = b"a" * at + special + b"b" * (19 - at)
        line = _COMPACT % (b"0", b"text", b"text", b'"%s"' % text, b"uuid", b'"%s"' % text)
        _assert_skim_agrees(_OPEN_BLOCKS, [line])


# -- Gemini's answer chunks ----------------------------------------------------------------------------------

GEMINI_STREAMS = {
    path.name: path.read_bytes().splitlines()
    for path in [*sorted((FIXTURES / "gemini").glob("*.ndjson")), FIXTURES.parent / "seeds" / "gemini.ndjson"]
}

_STAMPS = [
    "2025-11-01T12:00:00.430Z",  # canonical
    "2024-02-29T23:59:59.999Z",  # a leap day
    "2023-02-29T10:00:00.000Z",  # not a day
    "1900-02-29T10:00:00.000Z",
    "2000-02-29T10:00:00.000Z",
    "2025-04-31T10:00:00.000Z",
    "2025-13-01T10:00:00.000Z",
    "0000-01-01T00:00:00.000Z",
    "2025-11-01T24:00:00.000Z",
    "2025-11-01T12:60:00.000Z",
    "2025-11-01T12:00:60.000Z",
    "2025-11-01T12:00:00.43Z",  # not canonical: parsed, then written canonically
    "2025-11-01T12:00:00.430+00:00",
    "2025-11-01 12:00:00.430Z",
    "2025-11-01T12:00:00.430z",
    "2025-11-01T12:00:00.4٣0Z",
]
_CHUNK = b'{"type":"message","timestamp":"%s","role":"assistant","content":%s,"delta":true}'
_CONTENTS = [
    b'""',
    b'"hi"',
    b'"\xc3\xa9"',
    b'"a\\nb\\"c"',
    b'"\\ud83d\\ude00"',
    b'"\\udc80"',
    b'"\xff"',
    b'"tab\tin"',
]

_GEMINI_LINES = st.builds(
    lambda stamp, content: _CHUNK % (stamp.encode(), content),
    st.just(_STAMPS[0]) | st.sampled_from(_STAMPS),  # usually canonical, then any
    st.just(b'"hi"') | st.sampled_from(_CONTENTS),
) | st.sampled_from(
    [
        _CHUNK.replace(b'"assistant"', b'"user"') % (_STAMPS[0].encode(), b'"hi"'),
        _CHUNK.replace(b"true}", b"false}") % (_STAMPS[0].encode(), b'"hi"'),
        _CHUNK.replace(b',"delta":true', b"") % (_STAMPS[0].encode(), b'"hi"'),
        _CHUNK.replace(b"true}", b"true} ") % (_STAMPS[0].encode(), b'"hi"'),
        _CHUNK.replace(b"true}", b"true}}") % (_STAMPS[0].encode(), b'"hi"'),
        _CHUNK.replace(b'"role":"assistant",', b"") % (_STAMPS[0].encode(), b'"hi"'),
        b'{"type":"message","role":"assistant","timestamp":"2025-11-01T12:00:00.430Z","content":"x","delta":true}',
        b'{"type":"message","timestamp":null,"role":"assistant","content":"x","delta":true}',
        b'{"type":"message","timestamp":"2025-11-01T12:00:00.430Z","role":"assistant","content":"x","delta":true,"x":1}',
        b'{"type":"error","timestamp":"2025-11-01T12:00:03.000Z","severity":"error","message":"boom"}',
        b"not json",
    ]
)
_TOOL_USE = b'{"type":"tool_use","timestamp":"%s","tool_name":"ls","tool_id":"%s"%s}'
_TOOL_RESULT = b'{"type":"tool_result","timestamp":"%s","tool_id":"%s","status":"%s"%s}'
_TOOL_STAMPS = st.just(_STAMPS[0]) | st.sampled_from([_STAMPS[1], _STAMPS[2], _STAMPS[11], _STAMPS[12]])
_GEMINI_TOOL_LINES = (
    st.builds(
        lambda stamp, call_id, rest: _TOOL_USE % (stamp.encode(), call_id, rest),
        _TOOL_STAMPS,
        st.sampled_from([b"t1", b"t2", b"t3", b""]),
        st.sampled_from([b',"parameters":{}', b',"parameters":{"p":[1]}', b',"parameters":null', b""]),
    )
    | st.builds(
        lambda stamp, call_id, status, rest: _TOOL_RESULT % (stamp.encode(), call_id, status, rest),
        _TOOL_STAMPS,
        st.sampled_from([b"t1", b"t2", b"t3", b""]),
        st.sampled_from([b"success", b"error"]),
        st.sampled_from(
            [
                b',"output":"o\\n"',
                b',"output":""',
                b',"output":null',
                b"",
                b',"error":{"type":"x","message":"no"}',
                b',"output":"o","error":{"message":"Operation cancelled by user"}',
            ]
        ),
    )
    | st.sampled_from(
        [
            _TOOL_USE.replace(b'"timestamp":"%s",', b"") % (b"t1", b""),
            _TOOL_USE.replace(b'"%s","tool_name"', b'null,"tool_name"') % (b"t1", b""),
            _TOOL_USE % (_STAMPS[0].encode(), b"t1", b',"parameters":[]'),
            _TOOL_USE % (_STAMPS[0].encode(), b"t1", b',"x":1'),
        ]
    )
)


@st.composite
def gemini_states(draw: st.DrawFn) -> dict[str, Any]:
    """A Gemini decoder anywhere a chunk may find it: an error line held, the reply under way or not, the turn
    started or not, a field lost, a run of either kind and role open, or none."""

    def usually(usual: Any, *unusual: Any) -> Any:
        """The state a chunk is read in, one time in four something else (so that each is met alone)."""
        return draw(st.sampled_from(unusual)) if draw(st.integers(0, 3)) == 0 else usual

    reasoning, role = usually(False, True), usually("assistant", "user")
    return {
        "open_calls": draw(st.dictionaries(st.sampled_from(["t1", "t2", ""]), st.sampled_from(["ls", ""]))),
        "held": usually(False, True),
        "in_reply": usually(True, False),
        "started": usually(True, False),
        "lost": usually(False, True),
        "run": usually((reasoning, role, usually(None, "2025-01-01T00:00:01.000Z")), None),
        "line_ts": draw(st.none() | st.just("2025-01-01T00:00:00.000Z")),
        "fatal": draw(st.booleans()),
        "turn_ended": draw(st.booleans()),
    }


def _gemini_decoder(state: dict[str, Any]) -> GeminiDecoder:
    decoder = GeminiDecoder(session_id="ses_g")
    decoder.started, decoder._in_reply, decoder.line_ts = (
        state["started"],
        state["in_reply"],
        state["line_ts"],
    )
    decoder._lost = [(("message", "x"), "x was lost")] if state["lost"] else []
    for call_id, name in state.get("open_calls", {}).items():
        decoder.tools.called(call_id, name)
        decoder.tally.open_calls[call_id] = name
    decoder._held = ("held", "2025-01-01T00:00:00.000Z") if state["held"] else None
    decoder.last_fatal = p.Error(code="x", message="x", recoverable=False) if state["fatal"] else None
    decoder.turn_ended = state.get("turn_ended", False)
    if state["run"] is not None:
        reasoning, role, ts = state["run"]
        decoder._run = kit._Run(reasoning, role, "run_g", ts, ["before"])
    return decoder


def _gemini_state(decoder: GeminiDecoder) -> object:
    run = decoder._run
    return (
        [msgspec.json.encode(event) for event in decoder.drain()],
        None if run is None else (run.reasoning, run.role, run.run_id, run.ts, list(run.parts)),
        decoder._answer,
        decoder._in_reply,
        decoder._replies,
        decoder._held,
        decoder.line_ts,
        decoder.started,
        decoder.last_fatal,
        decoder.turn_ended,
        decoder.sequencer.next_seq,
        decoder.tools.unanswered(),
        _tally_state(decoder.tally),
    )


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gemini_states(), st.lists(_GEMINI_LINES | _GEMINI_TOOL_LINES, min_size=1, max_size=6))
def test_the_gemini_skim_leaves_a_decoder_as_decode_typed_does(
    state: dict[str, Any], lines: list[bytes]
) -> None:
    _assert_skim_agrees(state, lines, GeminiDecoder, _gemini_decoder, _gemini_state)


_READING = {
    "held": False,
    "in_reply": True,
    "started": True,
    "lost": False,
    "run": (False, "assistant", None),
    "line_ts": None,
    "fatal": False,
}
"""A decoder in the middle of the answer: a chunk continues its open text run."""


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gemini_states(),
    st.integers(0, 3),
    st.lists(_GEMINI_TOOL_LINES | _GEMINI_LINES, min_size=1, max_size=8),
)
def test_the_gemini_skim_reads_tool_lines_as_decode_typed_does(
    state: dict[str, Any], run_left_open: int, lines: list[bytes]
) -> None:
    """Calls and results from a decoder with no run open (three times in four), calls open or not, results
    paired or not, of either outcome, with and without output, among chunks and lines of other kinds."""
    state = state if run_left_open == 0 else {**state, "run": None}
    _assert_skim_agrees(state, lines, GeminiDecoder, _gemini_decoder, _gemini_state)


def test_tool_lines_of_a_decoder_whose_calls_are_kept_otherwise_are_read_as_decode_typed_reads_them() -> None:
    """Calls kept in a mapping of another kind are left to the Python steps, which use its own methods."""

    def with_ordered_calls(state: dict[str, Any]) -> GeminiDecoder:
        decoder = _gemini_decoder(state)
        decoder.tools._open = collections.OrderedDict(decoder.tools._open)
        return decoder

    stamp = _STAMPS[0].encode()
    lines = [
        _TOOL_RESULT % (stamp, b"t1", b"success", b',"output":"o"'),
        _TOOL_USE % (stamp, b"t3", b""),
        _TOOL_USE % (stamp, b"t4", b""),
        _TOOL_RESULT % (stamp, b"t3", b"success", b""),
    ]
    state = {**_READING, "run": None, "open_calls": {"t1": "ls", "t2": "cat"}}
    _assert_skim_agrees(state, lines, GeminiDecoder, with_ordered_calls, _gemini_state)


class _Asked(str):
    """A call's name that notes, each time it is asked whether it is true, whether its call is still open."""

    calls: dict[str, str]
    seen: list[bool]

    def __bool__(self) -> bool:
        self.seen.append("t1" in self.calls)
        return True


def test_a_results_call_is_forgotten_before_its_name_is_asked_whether_it_is_true() -> None:
    """As ``dict.pop`` then ``or`` do it: what the name's own truth may do sees the call already gone."""
    seen: list[list[bool]] = []

    def asking(state: dict[str, Any]) -> GeminiDecoder:
        decoder = _gemini_decoder(state)
        name = decoder.tools._open["t1"] = _Asked("ls")
        name.calls, name.seen = decoder.tools._open, []
        seen.append(name.seen)
        return decoder

    def events(decoder: GeminiDecoder) -> object:
        return [(e.call_id, str(e.name), e.seq) for e in decoder.drain()], decoder.tools.unanswered()  # type: ignore[attr-defined]

    lines = [_TOOL_RESULT % (_STAMPS[0].encode(), b"t1", b"success", b',"output":"o"')]
    _assert_skim_agrees({**_READING, "run": None}, lines, GeminiDecoder, asking, events)
    assert seen == [[False], [False]]


def test_tool_lines_after_no_open_run_are_read_in_c() -> None:
    decoder = _gemini_decoder({**_READING, "run": None, "in_reply": False})
    stamp = _STAMPS[0].encode()
    lines = [
        _TOOL_USE % (stamp, b"t1", b',"parameters":{"p":1}'),
        _TOOL_USE % (stamp, b"t2", b""),
        _TOOL_RESULT % (stamp, b"t1", b"success", b',"output":"o"'),
        _TOOL_RESULT % (stamp, b"t2", b"error", b""),
        b"not json",
    ]
    assert GeminiDecoder.typed_skim is not None
    index, line = GeminiDecoder.typed_skim(decoder, lines, 0, GeminiDecoder.typed_lines.decode)  # type: ignore[union-attr]
    assert (index, line) == (4, kit.UNDECODED)
    events = decoder.drain()
    assert [(type(e).__name__, e.call_id, e.seq) for e in events] == [  # type: ignore[attr-defined]
        ("ToolCall", "t1", 0),
        ("ToolCall", "t2", 1),
        ("ToolResult", "t1", 2),
        ("ToolResult", "t2", 3),
    ]
    assert (decoder._replies, decoder._in_reply, decoder.tools.unanswered()) == (1, False, [])


@pytest.mark.parametrize("stamp", _STAMPS)
@pytest.mark.parametrize("content", _CONTENTS)
def test_a_chunk_continuing_the_open_run_is_what_decode_typed_makes_of_it(stamp: str, content: bytes) -> None:
    lines = [_CHUNK % (stamp.encode(), content)] * 2
    _assert_skim_agrees({**_READING, "fatal": True}, lines, GeminiDecoder, _gemini_decoder, _gemini_state)


def test_a_compact_chunk_of_the_open_run_is_read_in_c() -> None:
    decoder = _gemini_decoder(_READING)
    lines = [_CHUNK % (stamp.encode(), b'"hi"') for stamp in _STAMPS[:2]] + [b"not json"]
    assert GeminiDecoder.typed_skim is not None
    index, line = GeminiDecoder.typed_skim(decoder, lines, 0, GeminiDecoder.typed_lines.decode)  # type: ignore[union-attr]
    assert (index, line) == (2, kit.UNDECODED)
    assert [event.ts for event in decoder.drain()] == _STAMPS[:2]


class _Replying(GeminiDecoder):
    """A dialect that counts replies its own way."""

    def _replied(self, by_the_model: bool) -> None:
        super()._replied(by_the_model)


@pytest.mark.parametrize("decoder_class", [ClaudeDecoder, GeminiDecoder, CodexDecoder])
def test_a_skim_refuses_a_line_index_outside_its_lines_and_kinds_of_another_length(
    decoder_class: type[kit.EventDecoder],
) -> None:
    skim: Any = decoder_class.typed_skim
    decode = decoder_class.typed_lines.decode  # type: ignore[union-attr]
    decoder, lines = decoder_class(), [b"{}", b"{}"]
    for index in (-1, 3):
        with pytest.raises(IndexError, match=f"index {index} is not one of the lines'"):
            skim(decoder, lines, index, decode)
    assert skim(decoder, lines, 2, decode) == (2, None)  # past the last line: nothing left to read
    with pytest.raises(TypeError, match=r"_skim\(kinds, decoder, lines, index, decode\)"):
        skim.func((*skim.args[0], None), decoder, lines, 0, decode)


def test_a_gemini_subclass_that_changes_a_skimmed_step_reads_every_line_itself() -> None:
    assert GeminiDecoder.typed_skim is not None
    assert _Replying.typed_skim is None


# -- Codex's command items -----------------------------------------------------------------------------------

CODEX_STREAMS = {
    path.name: path.read_bytes().splitlines()
    for path in [*sorted((FIXTURES / "codex").glob("*.ndjson")), FIXTURES.parent / "seeds" / "codex.ndjson"]
    if path.exists()
}


def _command_line(phase: str, item_id: str = "item_1", **fields: Any) -> bytes:
    item = {"id": item_id, "type": "command_execution", "command": "ls", **fields}
    return msgspec.json.encode({"type": f"item.{phase}", "item": item})


_CODEX_LINES = st.sampled_from(
    [
        _command_line("started", aggregated_output="", exit_code=None, status="in_progress"),
        _command_line("updated", aggregated_output="a\n"),
        _command_line("updated", aggregated_output="a\nb\n"),
        _command_line("updated", aggregated_output="a"),  # shorter than what went out
        _command_line("updated", aggregated_output=""),
        _command_line("updated", aggregated_output=None),
        _command_line("completed", aggregated_output="a\nb\n", exit_code=0, status="completed"),
        _command_line("completed", aggregated_output="", exit_code=0, status="failed"),
        _command_line("completed", aggregated_output="x", exit_code=2, status="failed"),
        _command_line("completed", aggregated_output="x", exit_code=-1),
        _command_line("completed", aggregated_output=None, exit_code=None, status="completed"),
        _command_line("completed", aggregated_output="", exit_code=1, status="declined"),
        _command_line("completed", command=None, exit_code=0),
        _command_line("started", item_id="item_2", command=""),
        _command_line("completed", item_id="item_2", exit_code=0),
        _command_line("started", item_id=""),  # no id: ToolPairs makes one
        _command_line("started", status="in_progress", extra=1),  # an unknown field: the careful path
        _command_line("completed", exit_code=2**63),  # out of range: the careful path
        b'{"type":"item.started","item":{"id":"item_3","type":"mcp_tool_call","server":"s","tool":"t"}}',
        b'{"type":"item.completed","item":{"id":"item_4","type":"agent_message","text":"done"}}',
        b'{"type":"item.completed","item":{"id":"item_4","type":"agent_message","text":null}}',
        b'{"type":"item.completed","item":{"id":"item_4","type":"agent_message"}}',
        b'{"type":"item.updated","item":{"id":"item_4","type":"agent_message","text":"do"}}',
        b'{"type":"item.completed","item":{"id":"item_5","type":"reasoning","text":"thought"}}',
        b'{"type":"item.updated","item":{"id":"item_5","type":"reasoning","text":"thinking"}}',
        b'{"type":"item.completed","item":{"id":"item_6","type":"assistant_message","text":"old name"}}',
        b'{"type":"item.completed","item":{"id":"item_4","type":"agent_message","text":"x","extra":1}}',
        b'{"type":"turn.started"}',
        b'{"type":"turn.completed","usage":{"input_tokens":5,"output_tokens":2}}',
        b'{"type":"error","message":"Reconnecting... 1/5 in 200ms"}',
        b"not json",
    ]
)


@st.composite
def codex_states(draw: st.DrawFn) -> dict[str, Any]:
    """A Codex decoder anywhere a command line may find it: an error held, a delta run open, the turn started
    or not, a field lost, the command shown so far (or another tool's pairs of another kind), or none."""

    def usually(usual: Any, *unusual: Any) -> Any:
        return draw(st.sampled_from(unusual)) if draw(st.integers(0, 3)) == 0 else usual

    return {
        "held": usually(False, True),
        "run": usually(False, True),
        "started": usually(True, False),
        "lost": usually(False, True),
        "shown": usually({}, {"item_1": 0}, {"item_1": 2}, {"item_1": 5}),
        "open": usually({}, {"item_1": "command_execution"}, {"item_1": ""}),
        "texts": usually({}, {"item_4": "do"}, {"item_5": "thinking"}),
        "named": usually(
            {}, {(False, "item_4"): "assistant"}, {(False, "item_4"): "user"}, {(True, "item_5"): ""}
        ),
        "line_ts": draw(st.none() | st.just("2025-01-01T00:00:00.000Z")),
        "clock": draw(st.sampled_from(["", "2025-01-02T00:00:00.000Z"])),
        "fatal": draw(st.booleans()),
        "turn_ended": draw(st.booleans()),
    }


def _codex_decoder(state: dict[str, Any]) -> CodexDecoder:
    decoder = CodexDecoder(session_id="ses_x")
    decoder.started, decoder.line_ts, decoder._clock = state["started"], state["line_ts"], state["clock"]
    decoder._lost = [(("item.started", "x"), "x was lost")] if state["lost"] else []
    decoder._held = p.Error(code="x", message="held", recoverable=True) if state["held"] else None
    decoder.last_fatal = p.Error(code="x", message="x", recoverable=False) if state["fatal"] else None
    decoder.turn_ended = state["turn_ended"]
    decoder._shown = dict(state["shown"])
    decoder.tools._open = dict(state["open"])
    decoder._texts = dict(state.get("texts", {}))
    for (reasoning, run_id), role in state.get("named", {}).items():
        decoder._named[(reasoning, run_id)] = kit._Run(reasoning, role or "assistant", run_id, None, ["d"])
    if state["run"]:
        decoder._run = kit._Run(False, "assistant", "run_x", None, ["open"])
    return decoder


def _codex_state(decoder: CodexDecoder) -> object:
    return (
        [msgspec.json.encode(event) for event in decoder.drain()],
        decoder._shown,
        decoder.tools._open,
        decoder._texts,
        sorted(decoder._named),
        decoder._last_text,
        decoder._held,
        decoder._run is None,
        decoder.line_ts,
        decoder.started,
        decoder.last_fatal,
        decoder.turn_ended,
        decoder.tally.open_calls,
        decoder.tally.tools_used,
        decoder.sequencer.next_seq,
    )


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(codex_states(), st.lists(_CODEX_LINES, min_size=1, max_size=8))
def test_the_codex_skim_leaves_a_decoder_as_decode_typed_does(
    state: dict[str, Any], lines: list[bytes]
) -> None:
    _assert_skim_agrees(state, lines, CodexDecoder, _codex_decoder, _codex_state)


def test_command_lines_are_read_in_c_up_to_the_first_other_line() -> None:
    decoder = _codex_decoder(
        {
            "held": False,
            "run": False,
            "started": True,
            "lost": False,
            "shown": {},
            "open": {},
            "line_ts": None,
        }
        | {"clock": "2025-01-02T00:00:00.000Z", "fatal": False, "turn_ended": False}
    )
    lines = [
        _command_line("started", aggregated_output=""),
        _command_line("updated", aggregated_output="a\n"),
        _command_line("completed", aggregated_output="a\nb\n", exit_code=3, status="failed"),
        b'{"type":"turn.started"}',
    ]
    assert CodexDecoder.typed_skim is not None
    index, line = CodexDecoder.typed_skim(decoder, lines, 0, CodexDecoder.typed_lines.decode)  # type: ignore[union-attr]
    assert index == 3 and type(line).__name__ == "_TurnStarted"
    events = decoder.drain()
    assert [(event.type, event.seq) for event in events] == [
        ("tool_call", 0),
        ("tool_progress", 1),
        ("tool_result", 2),
    ]
    assert (events[1].content, events[2].status, events[2].output, events[2].error) == (  # type: ignore[attr-defined]
        "a\n",
        "error",
        "a\nb\n",
        "exit code 3",
    )
    assert {event.ts for event in events} == {"2025-01-02T00:00:00.000Z"}
    assert decoder._shown == {} and decoder.tools._open == {}


class _OwnTools(CodexDecoder):
    """A dialect that makes tool events its own way."""

    def _tool_events(self, *args: Any) -> None:
        super()._tool_events(*args)


def test_a_codex_subclass_that_changes_a_skimmed_step_reads_every_line_itself() -> None:
    assert CodexDecoder.typed_skim is not None
    assert _OwnTools.typed_skim is None


# -- the skims on whole streams --------------------------------------------------------------------------------

SKIMMED_STREAMS = {
    "gemini": (GEMINI_STREAMS, _GEMINI_LINES),
    "codex": (CODEX_STREAMS, _CODEX_LINES),
}
"""Per dialect with a skim: its fixtures, and lines to put in them."""


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(
        [(dialect, name) for dialect, (streams, _) in SKIMMED_STREAMS.items() for name in streams]
    ),
    st.data(),
)
def test_streams_a_skim_reads_read_the_same_with_either_twin(
    which: tuple[str, str], data: st.DataObject
) -> None:
    """Gemini's chunks and Codex's command and text items are read in C; lines dropped, repeated, moved or
    replaced leave the decoder in the states the C twin must hand back to decode_typed (an error held, a reply
    or turn not under way, an item never started)."""
    dialect, name = which
    streams, lines = SKIMMED_STREAMS[dialect]
    stream = _shuffled(streams[name], data, lambda line: data.draw(lines))
    with_c = _read_steadily(stream, dialect)
    with python_twins():
        assert _read_steadily(stream, dialect) == with_c


@pytest.mark.parametrize(
    ("dialect", "kind", "least"),
    [("gemini", "message_delta", 100), ("gemini", "tool_result", 20), ("codex", "tool_progress", 20)],
)
def test_the_realistic_session_reads_the_same_with_either_twin(dialect: str, kind: str, least: int) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
    try:
        import realistic
    finally:
        sys.path.pop(0)
    stream = realistic.generate(dialect, seed=3, size=256 << 10)
    with_c = _read_steadily(stream, dialect)
    with python_twins():
        assert _read_steadily(stream, dialect) == with_c
    assert sum(event["type"] == kind for event in with_c) >= least  # type: ignore[index]
