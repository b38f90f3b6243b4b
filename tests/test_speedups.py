"""The C twins of the hot per-event steps (``agentstream._speedups``) answer exactly as their Python versions.

Each twin is compared with its Python version on generated input close to the edges (timestamps one
character off, blank lines of every shape, stamps one field off), and whole streams are validated and
read once with the C twins and once with the Python ones.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _strategies import full_sessions, sessions
from agentstream import _accel, _lines, validate
from agentstream import protocol as p
from agentstream.consumer import pipeline, read

speedups = _accel.speedups

# Each C twin, and the (module, name) bindings that hold it, with the Python version of each binding.
TWINS = {
    "count_lines": [
        (_lines, "count_lines", _lines._count_lines),
        (pipeline, "count_lines", _lines._count_lines),
    ],
    "has_blank_line": [(_lines, "has_blank_line", _lines._has_blank_line)],
    "is_timestamp": [],  # used only through the two below, and compared with protocol.is_timestamp here
    "events_timestamped": [(p, "events_timestamped", p._events_timestamped)],
    "stamps_in_order": [(validate, "_stamps_in_order", validate._stamps_in_order_py)],
    "feed_turn": [(validate, "_feed_turn", validate._feed_turn_py)],
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
            assert getattr(module, attribute) is getattr(speedups, name), f"{module.__name__}.{attribute}"


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


LINE_BYTES = st.lists(st.sampled_from([b"\n", b" ", b"\t", b"\r", b"{", b"a", b"\x00", b"\r\n"]), max_size=40)


@given(LINE_BYTES.map(b"".join), st.booleans())
def test_lines_and_blank_lines_are_found_as_the_python_versions_find_them(data: bytes, mutable: bool) -> None:
    block = bytearray(data) if mutable else data
    assert speedups.count_lines(block) == _lines._count_lines(block)
    assert speedups.has_blank_line(block) is _lines._has_blank_line(block)


def test_the_framing_twins_refuse_what_is_not_bytes() -> None:
    with pytest.raises(TypeError):
        speedups.count_lines("text\n")
    with pytest.raises(TypeError):
        speedups.has_blank_line(None)


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
