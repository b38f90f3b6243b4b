"""Dialect detection: from the first lines, through junk, with a fallback that says so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from _consumer_support import assert_valid_stream, canonical_session, is_synthetic
from agentstream import protocol as p
from agentstream.consumer import DETECT_LINES, read
from agentstream.consumer.pipeline import DETECT_NOISE_LINES
from agentstream.dialects import DIALECT_NAMES
from agentstream.errors import ErrorCode

FIXTURES = Path(__file__).parent / "fixtures"


def _dialect_of(path: Path) -> str | None:
    for name in (path.stem, path.parent.name):
        if name in DIALECT_NAMES:
            return name
    return None


def dialect_fixtures() -> list[tuple[str, Path]]:
    """Every NDJSON fixture of a dialect (``fixtures/**/NAME.ndjson`` or ``fixtures/NAME/*.ndjson``)."""
    found = []
    for path in sorted([*FIXTURES.rglob("*.ndjson"), *FIXTURES.rglob("*.jsonl")]):
        name = _dialect_of(path)
        if name is not None:
            found.append((name, path))
    return found


def _canonical_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("canonical") / "canonical.ndjson"
    path.write_bytes(canonical_session())
    return path


CASES = [("canonical", None), *dialect_fixtures()]


def _path(case: tuple[str, Path | None], tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    name, path = case
    return name, path if path is not None else _canonical_fixture(tmp_path_factory)


@pytest.mark.parametrize("case", CASES, ids=[f"{n}:{p.name if p else 'generated'}" for n, p in CASES])
def test_detects_the_dialect_of_each_fixture(
    case: tuple[str, Path | None], tmp_path_factory: pytest.TempPathFactory
) -> None:
    name, path = _path(case, tmp_path_factory)
    reader = read(path)
    events = assert_valid_stream(reader, turns=None)
    assert reader.dialect == name
    assert not any(isinstance(e, p.Error) and e.code == ErrorCode.UNKNOWN_DIALECT for e in events)


@pytest.mark.parametrize("case", CASES, ids=[f"{n}:{p.name if p else 'generated'}" for n, p in CASES])
def test_junk_before_the_first_event_does_not_break_detection(
    case: tuple[str, Path | None], tmp_path_factory: pytest.TempPathFactory
) -> None:
    name, path = _path(case, tmp_path_factory)
    warnings = b"".join(b"npm WARN deprecated package-%d@1.0.0\n" % n for n in range(DETECT_LINES + 4))
    junk = b"[SandboxDebug] seccomp ready\nMCP issues detected. Run /mcp list for status.\n\n" + warnings
    reader = read(junk + path.read_bytes())
    events = assert_valid_stream(reader, turns=None)
    assert reader.dialect == name
    reports = [e for e in events if isinstance(e, p.Error) and e.code == "MALFORMED_EVENT"]
    assert [e.details["line"] for e in reports[:2]] == [1, 2]
    assert reports[0].details["preview"] == "[SandboxDebug] seccomp ready"
    clean = [e for e in read(path) if not is_synthetic(e)]
    assert [e.type for e in events if not is_synthetic(e)] == [e.type for e in clean]


@pytest.mark.parametrize("case", CASES, ids=[f"{n}:{p.name if p else 'generated'}" for n, p in CASES])
def test_each_fixture_reads_as_a_whole_stream_with_its_dialect_forced(
    case: tuple[str, Path | None], tmp_path_factory: pytest.TempPathFactory
) -> None:
    name, path = _path(case, tmp_path_factory)
    reader = read(path, dialect=name)
    events = assert_valid_stream(reader, turns=None)
    assert reader.dialect == name and len(events) >= 2


def test_nothing_recognisable_falls_back_to_canonical_and_says_so() -> None:
    data = b"".join(b'{"kind":"tick","n":%d}\n' % i for i in range(12))
    reader = read(data)
    events = assert_valid_stream(reader, turns=None)
    assert reader.dialect == "canonical"
    codes = [e.code for e in events if isinstance(e, p.Error)]
    assert codes[0] == ErrorCode.UNKNOWN_DIALECT
    assert codes[1:-1] == ["MALFORMED_EVENT"] * 12
    assert codes[-1] == "STREAM_TRUNCATED"
    unknown = events[1]
    assert isinstance(unknown, p.Error) and unknown.recoverable and "--from" in str(unknown.fix)


def test_a_stream_of_nothing_but_noise_settles_after_the_noise_limit() -> None:
    """Noise does not count toward the detection window, but it cannot hold the reader back for ever."""
    pulled = 0

    def chunks() -> Iterator[bytes]:
        nonlocal pulled
        while True:
            pulled += 1
            yield b"still compiling...\n"

    events = iter(read(chunks()))
    first_events = [next(events), next(events)]
    assert pulled == DETECT_NOISE_LINES
    assert first_events[1].type == "error" and first_events[1].code == ErrorCode.UNKNOWN_DIALECT  # type: ignore[union-attr]


def test_claude_json_output_with_verbose_on_one_line_is_recognised() -> None:
    """``claude -p --output-format json --verbose`` writes the whole run as one JSON array on one line."""
    lines = (FIXTURES / "dialects" / "claude" / "session-2.0.76.ndjson").read_bytes().splitlines()
    document = b"[" + b",".join(line for line in lines if line.strip()) + b"]\n"
    reader = read(document)
    events = assert_valid_stream(reader, turns=None)
    assert reader.dialect == "claude"
    assert [e.type for e in events] == [
        e.type for e in read(FIXTURES / "dialects" / "claude" / "session-2.0.76.ndjson")
    ]


def test_ag_ui_over_sse_is_recognised_through_its_data_lines() -> None:
    """SSE puts each event after ``data:``, with comments and ``event:`` lines around it."""
    reader = read(FIXTURES / "dialects" / "agui" / "run.sse")
    events = assert_valid_stream(reader, turns=None)
    assert reader.dialect == "agui"
    assert [e.type for e in events] == ["start", "message_delta", "message", "error", "result"]
    assert not any(is_synthetic(e) for e in events)
    error = events[3]
    assert isinstance(error, p.Error) and error.code == "PROVIDER_ERROR"


def test_forcing_a_dialect_skips_detection() -> None:
    reader = read(canonical_session(), dialect="canonical")
    assert reader.dialect == "canonical"
    assert_valid_stream(reader, turns=None)


def test_unknown_forced_dialect_is_a_usage_error() -> None:
    from agentstream.errors import UnknownDialectError

    with pytest.raises(UnknownDialectError):
        read(b"", dialect="no-such-dialect")


def test_detection_does_not_wait_for_more_lines_than_it_needs() -> None:
    """On a live pipe the first event comes out as soon as the first line decides the dialect."""
    lines = canonical_session().splitlines(keepends=True)
    pulled = []

    def chunks() -> Iterator[bytes]:
        for line in lines:
            pulled.append(line)
            yield line

    events = iter(read(chunks()))
    first = next(events)
    assert isinstance(first, p.Start) and len(pulled) == 1


def test_a_whole_json_document_no_dialect_knows_is_read_as_canonical_and_says_so() -> None:
    reader = read(b'{\n  "answer": 42,\n  "by": "nobody"\n}\n')
    events = assert_valid_stream(reader, turns=None)
    assert reader.dialect == "canonical"
    unknown = [e for e in events if isinstance(e, p.Error) and e.code == ErrorCode.UNKNOWN_DIALECT]
    assert [e.message for e in unknown] == [
        "no known dialect matches the JSON document of lines 1–4; read as canonical"
    ]
