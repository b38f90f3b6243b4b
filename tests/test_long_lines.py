"""Very long lines are read holding about twice their size, with exactly the events and errors of any line.

A line that grew across read chunks (``LongLine``) from ``LONG_LINE_BYTES`` on is parsed by the standard
library's parser after its bytes are let go, instead of by msgspec, which would hold a scratch copy as well.
Here the threshold is lowered to one byte and the input is fed a few bytes at a time, so that every line
takes that path, and the result is compared with the usual path's. The memory itself is measured in
``bench/bench_hotpath.py`` (peak RSS rows).
"""

from __future__ import annotations

import importlib
import io
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from _dialect_kit import FIXTURES, SEEDS
from agentstream import _lines
from agentstream import protocol as p
from agentstream.consumer import pipeline, read
from agentstream.dialects import base
from agentstream.errors import MalformedEventError
from agentstream.validate import validate_stream

validate = importlib.import_module(
    "agentstream.validate"
)  # the module (the package exports a function of its name)

_STAMPS = b'"v":1,"session_id":"s","seq":1,"ts":"2026-01-01T00:00:00.000Z"'
ODD_LINES = [
    b'{"type":"message",'
    + _STAMPS
    + b',"message_id":"m","role":"assistant","content":"a\\n\\"b\\" \\u00e9"}',
    b'{"type":"message",' + _STAMPS + b',"message_id":"m","role":"assistant","content":"\\ud83d\\ude00"}',
    b'{"type":"message",' + _STAMPS + b',"message_id":"m","role":"assistant","content":"\\ud800"}',
    b'{"type":"message",' + _STAMPS + b',"message_id":"m","content":"a","content":"b"}',
    b'{"type":"message",' + _STAMPS + b',"message_id":"m","content":"caf\xc3\xa9"}',
    b'{"type":"message",' + _STAMPS + b',"message_id":"m","content":"\xff"}',
    b'{"type":"message",' + _STAMPS + b',"message_id":7,"content":"a"}',
    b'{"type":"message",' + _STAMPS + b',"content":"a"}',
    b'{"type":"usage",' + _STAMPS + b',"model":"m","input_tokens":1e999,"output_tokens":1}',
    b'{"type":"usage",' + _STAMPS + b',"model":"m","input_tokens":NaN,"output_tokens":1}',
    b'{"type":"usage",' + _STAMPS + b',"model":"m","input_tokens":123456789012345678901234567890}',
    b'{"type":"usage",' + _STAMPS + b',"model":"m","input_tokens":2.0,"cost_usd":1.5e-400}',
    b'{"type":"tool_call",' + _STAMPS + b',"call_id":"c","name":"x","arguments":{"n":NaN}}',
    b'{"type":"tool_call",' + _STAMPS + b',"call_id":"c","name":"x","arguments":{"n":-Infinity}}',
    b'{"type":"tool_call",' + _STAMPS + b',"call_id":"c","name":"x","arguments":{"n":1e999,"m":-1E+400}}',
    b'{"type":"tool_call",' + _STAMPS + b',"call_id":"c","name":"x","arguments":{"n":1' + b"0" * 5000 + b"}}",
    b'{"type":"tool_result",'
    + _STAMPS
    + b',"call_id":"c","name":"x","status":"success","output":"'
    + b"\\\\" * 50
    + b'"}',
    b'{"type":"something_new",' + _STAMPS + b',"payload":{"deep":[1,2,{"x":null}]}}',
    b'{"type":"log",' + _STAMPS + b',"level":"info","message":"x"} trailing',
    b'\xef\xbb\xbf{"type":"log",' + _STAMPS + b',"level":"info","message":"x"}',
    b'{"type":"log",' + _STAMPS + b',"level":"info","message":"\x01"}',
    b"[1, 2, 3]",
    b'"just a string"',
    b"[" * 5000 + b"]" * 5000,
    b"{not json}",
]


@pytest.fixture
def every_line_is_long(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Lower the threshold to one byte; what is returned counts the lines the long-line path parsed."""
    for module in (_lines, pipeline, validate):
        monkeypatch.setattr(module, "LONG_LINE_BYTES", 1)
    parsed: list[int] = []
    parse = _lines.parse_long_line

    def counting(line: _lines.LongLine, finish: Any) -> Any:
        parsed.append(len(line))
        return parse(line, finish)

    for module in (p, base):  # the modules that read long lines
        monkeypatch.setattr(module, "parse_long_line", counting)
    return parsed


def _decoded(line: bytes | bytearray) -> tuple[str, Any]:
    try:
        return "event", p.decode(line)
    except MalformedEventError as exc:
        return "error", exc.message


@pytest.mark.parametrize("raw", ODD_LINES, ids=range(len(ODD_LINES)))
def test_a_long_line_decodes_as_any_other(raw: bytes, every_line_is_long: list[int]) -> None:
    usual = _decoded(raw)
    long_line = _lines.LongLine(raw)
    assert _decoded(long_line) == usual
    assert every_line_is_long == [len(raw)]
    # Emptied when it was read the long way, whole again when the usual path had to read it.
    assert long_line in (b"", raw)
    if raw is ODD_LINES[0]:
        assert long_line == b""


def test_a_line_of_the_caller_is_never_emptied(every_line_is_long: list[int]) -> None:
    mine = bytearray(ODD_LINES[0])
    assert isinstance(p.decode(mine), p.Message)
    assert mine == ODD_LINES[0] and every_line_is_long == []


def _trickle(data: bytes, size: int = 7) -> Iterator[bytes]:
    """``data`` a few bytes at a time: every line grows across chunks."""
    return (data[start : start + size] for start in range(0, len(data), size))


def _events(
    source: Any, dialect: str, monkeypatch: pytest.MonkeyPatch, max_line_bytes: int | None = None
) -> list[Any]:
    counter = itertools.count()
    with monkeypatch.context() as steady:
        steady.setattr(p, "new_id", lambda prefix: f"{prefix}_{next(counter):016x}")
        steady.setattr(p, "now_ts", lambda: "2026-01-01T00:00:00.000Z")
        reader = read(source, dialect, max_line_bytes=max_line_bytes)
        # As bytes: a NaN read from the input compares equal to itself.
        return [msgspec.json.encode(event) for event in reader]


def _streams() -> list[tuple[str, Path]]:
    found = [
        (dialect, path)
        for dialect in ("claude", "codex", "opencode", "amp")
        for path in sorted((FIXTURES / dialect).glob("*.ndjson"))
    ]
    return [*found, ("gemini", SEEDS / "gemini.ndjson"), ("cursor", SEEDS / "cursor.ndjson")]


@pytest.mark.parametrize(("dialect", "path"), _streams(), ids=lambda value: getattr(value, "stem", value))
def test_streams_of_long_lines_read_as_usual(
    dialect: str, path: Path, monkeypatch: pytest.MonkeyPatch, every_line_is_long: list[int]
) -> None:
    data = path.read_bytes()
    junk = (
        b'{"type":"assistant","message":7}\n\xff\xfe\n{"type":"user"}\nnot json\n[1, 2]\n'
        b'{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t",'
        b'"content":"x\\n\\u00e9","n":NaN}]}}\n'
    )
    for stream in (data, junk + data, data.replace(b"\n", b"\n" + junk, 1)):
        with monkeypatch.context() as usual:
            for module in (_lines, pipeline):
                usual.setattr(module, "LONG_LINE_BYTES", 1 << 60)
            expected = _events(stream, dialect, usual)
        assert _events(_trickle(stream), dialect, monkeypatch) == expected, path.name
        # With a line limit, lines are framed one by one (LineSplitter): those are handed over too.
        parsed = len(every_line_is_long)
        assert _events(_trickle(stream), dialect, monkeypatch, max_line_bytes=1 << 30) == expected, path.name
        assert len(every_line_is_long) > parsed, "no line framed one by one took the long-line path"
    assert every_line_is_long, "no line took the long-line path"


def _canonical_stream() -> bytes:
    """A healthy canonical stream with every common event, from the claude fixture read by agentstream."""
    return b"".join(p.encode_line(event) for event in read(FIXTURES / "claude" / "stream-events.ndjson"))


def test_validate_finds_the_same_in_long_lines(every_line_is_long: list[int]) -> None:
    good = _canonical_stream()
    lines = good.splitlines(keepends=True)
    for stream in (
        good,
        b"".join(lines[:2]) + ODD_LINES[6] + b"\n" + b"".join(lines[2:]),
        b"".join(lines[:3]) + b'{"type":"log"\xff}\n' + b"".join(lines[4:]),
        b"".join(lines[:-1]),
    ):
        usual = [tuple(v) for v in validate_stream(io.BytesIO(stream))]
        long_way = [tuple(v) for v in validate_stream(_ChunkedFile(stream))]
        assert long_way == usual
    assert every_line_is_long


class _ChunkedFile(io.RawIOBase):
    """A file that gives a few bytes per read, as a slow pipe does."""

    def __init__(self, data: bytes) -> None:
        self._chunks = _trickle(data)

    def readable(self) -> bool:
        return True

    def read1(self, size: int = -1) -> bytes:
        return next(self._chunks, b"")


def test_a_canonical_stream_of_long_lines_reads_as_usual(
    monkeypatch: pytest.MonkeyPatch, every_line_is_long: list[int]
) -> None:
    good = _canonical_stream()
    lines = good.splitlines(keepends=True)
    for stream in (
        good,
        b"".join(lines[:3]) + ODD_LINES[6] + b"\n" + ODD_LINES[13] + b"\n" + b"".join(lines[3:]),
    ):
        with monkeypatch.context() as usual:
            for module in (_lines, pipeline):
                usual.setattr(module, "LONG_LINE_BYTES", 1 << 60)
            expected = _events(stream, "canonical", usual)
        assert _events(_trickle(stream), "canonical", monkeypatch) == expected
    assert every_line_is_long
