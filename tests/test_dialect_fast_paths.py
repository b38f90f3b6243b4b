"""The typed path of the codex and gemini decoders: exactly the careful path's events, or it declines.

Each decoder reads its common lines with a typed msgspec decoder (``typed_lines``) and hands every line that
decoder rejects (an unknown field too: the typed decoder would skip it unchecked) to the careful path
(:class:`~agentstream.dialects.kit.Fields`). ``test_dialect_contract`` reads every example stream with one
field of one line broken both ways; here the same comparison runs over odd lines (duplicate keys, numbers
the careful path reads liberally, bad UTF-8 in a field no handler reads) and streams with several broken
lines, where a line that fails after losing a field is followed by a typed one.
"""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _dialect_kit import FIXTURES, SEEDS, line, mutants, objects
from agentstream import protocol as p
from agentstream.consumer import read
from agentstream.dialects import get_dialect, kit
from agentstream.dialects.kit import rfc3339

DIALECTS = ("codex", "gemini")
EXAMPLES = {
    "codex": sorted((FIXTURES / "codex").glob("*.ndjson")),
    "gemini": [SEEDS / "gemini.ndjson"],
}


def _events(data: bytes, dialect: str, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What the reader makes of ``data``, with fresh ids and the clock made steady so two reads compare."""
    counter = itertools.count()
    monkeypatch.setattr(p, "new_id", lambda prefix: f"{prefix}_{next(counter):016x}")
    monkeypatch.setattr(p, "now_ts", lambda: "2026-01-01T00:00:00.000Z")
    return [msgspec.to_builtins(event) for event in read(data, dialect)]


def assert_agree(dialect: str, lines: list[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    """The stream read with the typed decoder and without it gives the same events."""
    data = b"\n".join(lines) + b"\n"
    typed = _events(data, dialect, monkeypatch)
    decoder_class = type(get_dialect(dialect).decoder())
    with monkeypatch.context() as careful_only:
        careful_only.setattr(decoder_class, "typed_lines", None)
        careful = _events(data, dialect, careful_only)
    assert typed == careful, lines


def _accepted(dialect: str, raw: bytes) -> bool:
    typed = type(get_dialect(dialect).decoder()).typed_lines
    assert typed is not None
    try:
        typed.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return False
    return True


def _example_streams(dialect: str) -> list[list[bytes]]:
    return [[raw for raw in path.read_bytes().splitlines() if raw.strip()] for path in EXAMPLES[dialect]]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_most_example_lines_take_the_typed_path(dialect: str) -> None:
    lines = [raw for stream in _example_streams(dialect) for raw in stream]
    assert sum(_accepted(dialect, raw) for raw in lines) >= len(lines) // 2


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
        b'{"type":"message","content":"lost its role, then fails","delta":[]}',
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


@pytest.mark.parametrize("dialect", DIALECTS)
def test_odd_lines_agree(dialect: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Duplicate keys, numbers the careful path reads liberally, renamed types, broken JSON, bad UTF-8, and a
    line that loses a field then fails (what it lost is not reported with the next line's events)."""
    stream = _example_streams(dialect)[0]
    for odd in _ODD_LINES[dialect]:
        assert_agree(dialect, [stream[0], odd, *stream[1:]], monkeypatch)
    assert_agree(dialect, [stream[0], *_ODD_LINES[dialect]], monkeypatch)


@pytest.mark.parametrize("dialect", DIALECTS)
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


@pytest.mark.parametrize(
    ("value", "stamp"),
    [
        (1764240000123, "2025-11-27T10:40:00.123Z"),  # JavaScript's Date.now(): milliseconds
        (1764240000, "2025-11-27T10:40:00.000Z"),  # seconds, as Python's int(time.time())
        (1764240000.25, "2025-11-27T10:40:00.250Z"),  # Python's time.time()
        (99_999_999_999, "5138-11-16T09:46:39.000Z"),  # the last epoch number read as seconds
        (100_000_000_000, "1973-03-03T09:46:40.000Z"),  # the first read as milliseconds
        (-1, None),
        (float("nan"), None),
    ],
)
def test_an_epoch_number_is_read_as_seconds_or_milliseconds_by_its_size(
    value: float, stamp: str | None
) -> None:
    assert rfc3339(value) == stamp
