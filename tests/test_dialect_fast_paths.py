"""The typed fast path of the codex and gemini decoders: exactly the careful path's events, or it declines.

Each decoder reads its hot line types with a typed msgspec decoder and hands every line that decoder rejects
(an unknown field too: the typed decoder would skip it unchecked) to the careful path
(:class:`~agentstream.dialects.kit.Fields`). Here both run in lockstep over the
examples, over every single-field breakage of them and over random mutants: for every line, the same events
(fields and order) or the same error.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _dialect_kit import FIXTURES, SEEDS, WRONG_VALUES, line, mutants, objects
from agentstream import protocol as p
from agentstream.dialects import codex, gemini, get_dialect, kit
from agentstream.dialects.base import DialectDecoder
from agentstream.dialects.kit import rfc3339

HOT: dict[str, Callable[[bytes], Any]] = {"codex": codex._typed_line, "gemini": gemini._typed_line}
"""Each dialect's typed decoder of its hot lines."""
EXAMPLES = {
    "codex": sorted((FIXTURES / "codex").glob("*.ndjson")),
    "gemini": [SEEDS / "gemini.ndjson"],
}
ODD_VALUES: tuple[Any, ...] = (
    *WRONG_VALUES,
    "12",
    " 7 ",
    "0.5",
    2.0,
    2**63,
    -(2**63),
    -(2**63) - 1,
    1_700_000_000_000,
    "2026-01-01T10:00:00+02:00",
    "assistant",
    "error",
    "failed",
    "declined",
)
"""Values the careful path reads liberally (numeric strings, floats, epoch numbers) or rejects, and edge values."""

Outcome = list[dict[str, Any]] | tuple[str, str] | None


@pytest.fixture(autouse=True)
def _steady_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fresh ids and the clock replaced by a counter and a constant, so two runs can be compared exactly."""
    monkeypatch.setattr(p, "now_ts", lambda: "2026-01-01T00:00:00.000Z")


def _decode(decode: Callable[[bytes], list[p.AnyEvent] | None], raw: bytes) -> Outcome:
    try:
        events = decode(raw)
    except Exception as exc:  # the reader reports it as a malformed line: the wording must agree too
        return type(exc).__name__, str(exc)
    return None if events is None else [msgspec.to_builtins(event) for event in events]


def _run(
    dialect: str, lines: Sequence[bytes], *, careful: bool, monkeypatch: pytest.MonkeyPatch
) -> list[Outcome]:
    """What one decoder gives for each line, then for ``finish()``; ``careful`` skips the typed decoding."""
    counter = itertools.count()
    monkeypatch.setattr(p, "new_id", lambda prefix: f"{prefix}_{next(counter):016x}")
    decoder = get_dialect(dialect).decoder("ses_fixed")
    decode = (lambda raw: DialectDecoder.decode_line(decoder, raw)) if careful else decoder.decode_line
    return [*(_decode(decode, raw) for raw in lines), _decode(lambda _: decoder.finish(), b"")]


def assert_agree(dialect: str, lines: Sequence[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _run(dialect, lines, careful=False, monkeypatch=monkeypatch)
    careful = _run(dialect, lines, careful=True, monkeypatch=monkeypatch)
    for index, (got, want) in enumerate(zip(fast, careful, strict=True)):
        assert got == want, (index, lines[index] if index < len(lines) else "finish()")


def _accepted(dialect: str, raw: bytes) -> bool:
    try:
        HOT[dialect](raw)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return False
    return True


def _example_streams(dialect: str) -> list[list[bytes]]:
    return [[raw for raw in path.read_bytes().splitlines() if raw.strip()] for path in EXAMPLES[dialect]]


def _breakages(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``obj`` with one field at any depth deleted or set to each of :data:`ODD_VALUES`."""

    def paths(value: Any, prefix: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
        items = (
            value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        )
        for key, inner in items:
            yield (*prefix, key)
            yield from paths(inner, (*prefix, key))

    for path in paths(obj, ()):
        for value in (None, *ODD_VALUES, "delete"):
            broken = copy.deepcopy(obj)
            parent = broken
            for step in path[:-1]:
                parent = parent[step]
            if value == "delete":
                del parent[path[-1]]
            else:
                parent[path[-1]] = value
            yield broken


@pytest.mark.parametrize("dialect", sorted(HOT))
def test_the_examples_take_the_fast_path_and_agree(dialect: str, monkeypatch: pytest.MonkeyPatch) -> None:
    streams = _example_streams(dialect)
    accepted = [raw for stream in streams for raw in stream if _accepted(dialect, raw)]
    assert len(accepted) >= 5  # the fast path is really taken, not only the fallback
    for stream in streams:
        assert_agree(dialect, stream, monkeypatch)


@pytest.mark.parametrize("dialect", sorted(HOT))
def test_every_single_breakage_of_an_example_line_agrees(
    dialect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each line of each example, broken one field at a time, in its own stream (the lines around it kept)."""
    broken_lines = 0
    for stream in _example_streams(dialect):
        for index, obj in enumerate(objects(stream)):
            for broken in _breakages(obj):
                assert_agree(dialect, [*stream[:index], line(broken), *stream[index + 1 :]], monkeypatch)
                broken_lines += 1
    assert broken_lines > 500


_ODD_LINES = {
    "codex": [
        b'{"type":"item.completed","item":{"id":"a","type":"agent_message","text":"x","text":"y"}}',
        b'{"type":"item.completed","type":"item.started","item":{"id":"a","type":"reasoning","text":"x"}}',
        b'{"type":"item.completed","item":{"id":"a","type":"reasoning","type":"agent_message","text":"x"}}',
        b'{"type":"item.completed","item":{"id":"c","type":"command_execution","exit_code":2.0,"status":"failed"}}',
        b'{"type":"item.completed","item":{"id":"c","type":"command_execution","exit_code":"2"}}',
        b'{"type":"item.completed","item":{"id":"c","type":"command_execution","exit_code":1e400}}',
        b'{"type":"item.completed","item":{"id":"c","item_type":"command_execution","exit_code":0}}',
        b'{"type":"item.completed","item":{"id":"c","type":"command_execution","item_type":"x","exit_code":0}}',
        b'{"type":"item.updated","item":{"id":"c","type":"command_execution","aggregated_output":"\\u00e9\\ud800"}}',
        b'{"type":"item.completed","item":{"id":"m","type":"assistant_message","text":"old name"}}',
        b'{"type":"item.started","item":{"id":"t","type":"mcp_tool_call","tool":"t","arguments":"{\\"a\\":1}"}}',
        b'{"type":"item.started","item":{"id":"t","type":"mcp_tool_call","tool":"t","arguments":"not json"}}',
        b'{"type":"item.completed","item":{"id":"t","type":"mcp_tool_call","tool":"t","error":{"message":null}}}',
        b'{"type":"item.completed","item":{"id":"t","type":"mcp_tool_call","tool":"t","error":{}}}',
        b'{"type":"item.completed","item":{"id":"t","type":"mcp_tool_call","tool":"t","result":'
        b'{"content":[{"text":"a"},"b",{"text":2}],"structured_content":{"k":[1]}},"status":"completed"}}',
        b'{"type":"item.completed","item":{"id":"t","type":"mcp_tool_call","tool":"t","result":'
        b'{"content":[],"structured_content":{"k":[1]}}}}',
        b'{"type":"turn.started","extra":{"deep":[1,2,3]}}',
        b'{"type":"turn.started","extra":"\xff"}',
        b'{"type":"turn.started","extra":1e999}',
        b'{"type":"item.completed","item":{"id":"a","type":"reasoning","text":"x","\xff":1}}',
        b'{"type":"item.completed","item":{"id":"f","type":"file_change","changes":[{"path":1e999}]}}',
        b'{"type":"item.completed","item":{"id":"f","type":"file_change","changes":[{"path":"\xff"}]}}',
        b'{"type":"turn.started"} ',
        b'{"type":"item.completed","item":null}',
        b'{"item":{"id":"a","type":"reasoning","text":"x"}}',
        b'["item.completed"]',
        b'{"type":"item.completed","item":{"id":"a","type":"reasoning","text":"x"}',
        b'{"type":"item.completed","item":{"id":"a","type":"reasoning","text":"\xff"}}',
    ],
    "gemini": [
        b'{"type":"message","role":"assistant","content":"a","content":"b","delta":true}',
        b'{"type":"message","role":"assistant","content":"a","delta":1}',
        b'{"type":"message","role":"robot","content":"a","delta":true}',
        b'{"type":"message","role":"assistant","content":"a","delta":true,"timestamp":1700000000000}',
        b'{"type":"message","role":"assistant","content":"a","delta":true,"timestamp":"yesterday"}',
        b'{"type":"message","role":"assistant","content":"a","delta":null,"timestamp":null}',
        b'{"type":"tool_use","tool_name":"t","tool_id":"c1","parameters":[]}',
        b'{"type":"tool_use","tool_name":"t","tool_id":"c1","parameters":null}',
        b'{"type":"tool_use","tool_name":"t","tool_id":"c1","parameters":{"n":1e999}}',
        b'{"type":"tool_use","tool_name":"t","tool_id":"c1","parameters":{"n":"\xff"}}',
        b'{"type":"message","role":"assistant","content":"a","delta":true,"extra":"\xff"}',
        b'{"type":"message","role":"assistant","content":"a","delta":true,"extra":-1e999}',
        b'{"type":"message","role":"assistant","content":"a","delta":true,"extra":[[[[]]]]}',
        b'{"type":"tool_result","tool_id":"c1","status":"ok","output":"x"}',
        b'{"type":"tool_result","tool_id":"c1","status":"error","error":{"type":"Error","message":"m"}}',
        b'{"type":"tool_result","tool_id":"c1","status":"error","error":{"type":null,"message":"m"}}',
        b'{"type":"tool_result","tool_id":"c1","status":"error","error":{"type":"E"}}',
        b'{"type":"tool_result","tool_id":"c1","status":"error","error":"boom"}',
        b'{"type":"error","severity":"error","message":"held"}',
        b'{"type":"message","role":"user","content":"after a held error"}',
        b'{"type":"message","role":"assistant","content":"a","delta":true}',
        b'{"type":"message","role":"assistant","content":"\xff","delta":true}',
    ],
}


@pytest.mark.parametrize("dialect", sorted(HOT))
def test_odd_lines_agree(dialect: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Duplicate keys, numbers the careful path reads liberally, renamed types, broken JSON and bad UTF-8."""
    stream = _example_streams(dialect)[0]
    for odd in _ODD_LINES[dialect]:
        assert_agree(dialect, [stream[0], odd, *stream[1:]], monkeypatch)
    assert_agree(dialect, [stream[0], *_ODD_LINES[dialect]], monkeypatch)


@pytest.mark.parametrize("dialect", sorted(HOT))
@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_mutants_agree(dialect: str, data: st.DataObject, monkeypatch: pytest.MonkeyPatch) -> None:
    """Example streams with up to three lines replaced by mutants (one to three fields deleted or junk)."""
    stream = list(data.draw(st.sampled_from(_example_streams(dialect))))
    bases = objects(stream)
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(0, len(stream) - 1))
        stream[index] = line(data.draw(mutants(bases)))
    assert_agree(dialect, stream, monkeypatch)


_STAMPS = (
    "2026-01-01T00:00:00.000Z",
    "2024-02-29T23:59:59.999Z",
    "2023-02-29T10:00:00.000Z",
    "2026-12-31T23:59:60.000Z",
    "0001-01-01T00:00:00.000Z",
    "9999-12-31T23:59:59.999Z",
    "2026-01-01T24:00:00.000Z",
)


@given(
    base=st.sampled_from(_STAMPS),
    edits=st.lists(st.tuples(st.integers(0, 23), st.sampled_from("0123456789-:TZ.+ x")), max_size=3),
)
def test_a_stamp_passes_through_as_written_only_when_it_reads_back_as_itself(
    base: str, edits: list[tuple[int, str]]
) -> None:
    """The timestamp shortcut (a cached check of the minute) agrees with parsing and formatting each stamp."""
    chars = list(base)
    for index, char in edits:
        chars[index] = char
    text = "".join(chars)
    moment = kit._parse_iso(text)
    assert rfc3339(text) == (kit._format(moment) if moment is not None else None)
