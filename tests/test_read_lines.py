"""Line framing for the reader: the incremental splitter, chunk seams, huge lines, limits."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from _consumer_support import assert_valid_stream, canonical_session
from agentstream import protocol as p
from agentstream._lines import UTF8_BOM, BlockSplitter, Line, LineSplitter, LineTooLong, iter_lines
from agentstream.consumer import read


def split_all(data: bytes, cuts: list[int], limit: int | None = None) -> list[Line | LineTooLong]:
    splitter = LineSplitter(max_line_bytes=limit)
    out: list[Line | LineTooLong] = []
    last = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        out += splitter.feed(data[last:cut])
        last = cut
    return out + splitter.close()


@given(
    st.binary(max_size=300).map(lambda b: b.replace(b"\r", b"")),
    st.lists(st.integers(0, 300)),
    st.sampled_from([b"", UTF8_BOM, UTF8_BOM[:2]]),
)
def test_splitter_matches_blocking_framing_at_any_chunk_seams(
    data: bytes, cuts: list[int], head: bytes
) -> None:
    data = head + data
    cuts = [c for c in cuts if c <= len(data)]
    assert split_all(data, cuts) == list(iter_lines(io.BytesIO(data)))


@given(st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=8), st.integers(1, 30))
def test_splitter_limit_agrees_with_blocking_framing(lines: list[bytes], limit: int) -> None:
    data = b"".join(line + b"\n" for line in lines)
    got = split_all(data, list(range(0, len(data), 7)), limit)
    want = list(iter_lines(io.BytesIO(data), max_line_bytes=limit))
    assert [type(x) for x in got] == [type(x) for x in want]
    assert [x.number for x in got] == [x.number for x in want]
    assert [x.data for x in got if isinstance(x, Line)] == [x.data for x in want if isinstance(x, Line)]


@given(st.binary(max_size=300), st.lists(st.integers(0, 300)), st.sampled_from([b"", UTF8_BOM, UTF8_BOM[:2]]))
def test_block_splitter_gives_back_the_input_in_whole_lines(
    data: bytes, cuts: list[int], head: bytes
) -> None:
    data = head + data
    splitter = BlockSplitter()
    blocks, last = [], 0
    for cut in [*sorted({c for c in cuts if c <= len(data)}), len(data)]:
        blocks.append(splitter.feed(data[last:cut]))
        last = cut
    tail = splitter.close()
    assert all(block == b"" or block.endswith(b"\n") for block in blocks)
    assert b"".join(blocks) + tail == data.removeprefix(UTF8_BOM)
    assert b"\n" not in tail


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 4096])
def test_a_byte_order_mark_before_the_first_line_is_dropped_wherever_the_chunks_are_cut(
    chunk_size: int,
) -> None:
    """Windows tools start a file with one; the first line (the one naming the session) must still be read."""
    data = UTF8_BOM + b'{"type":"thread.started","thread_id":"th-1"}\n' + UTF8_BOM + b"x\n"
    chunks = [data[i : i + chunk_size] for i in range(0, len(data), chunk_size)]
    splitter = LineSplitter()
    lines = [item for chunk in chunks for item in splitter.feed(chunk)] + splitter.close()
    assert [line.data for line in lines if isinstance(line, Line)] == [
        b'{"type":"thread.started","thread_id":"th-1"}',
        UTF8_BOM + b"x",  # only the input's first bytes can be a byte order mark
    ]
    assert [
        line.data for line in iter_lines(io.BytesIO(data), max_line_bytes=100) if isinstance(line, Line)
    ] == [
        b'{"type":"thread.started","thread_id":"th-1"}',
        UTF8_BOM + b"x",
    ]
    events = list(read(chunks, "auto"))
    assert [e.type for e in events[:1]] == ["start"] and events[0].session_id == "th-1"
    assert not [
        e for e in events if isinstance(e, p.Error) and e.code == "MALFORMED_EVENT" and e.details["line"] == 1
    ]


def test_the_first_bytes_of_a_byte_order_mark_that_never_finishes_are_data() -> None:
    splitter, blocks = LineSplitter(), BlockSplitter()
    assert splitter.feed(UTF8_BOM[:2]) == [] and blocks.feed(UTF8_BOM[:2]) == b""
    assert splitter.close() == [Line(1, UTF8_BOM[:2], False)]
    assert blocks.close() == UTF8_BOM[:2]


def test_a_text_file_object_can_be_read_with_no_other_reference_to_it(tmp_path: Path) -> None:
    """The reader reads the object's ``buffer``; the object, collected, would close it mid-read."""
    path = tmp_path / "run.ndjson"
    path.write_bytes(canonical_session())
    assert [e.type for e in read(open(path))][-1] == "result"  # noqa: SIM115  # the point: nothing else holds it


def test_splitter_crlf_split_across_chunks_and_partial_tail() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b'{"a":1}\r') == []
    assert splitter.feed(b'\n{"b"') == [Line(1, b'{"a":1}', True)]
    assert splitter.close() == [Line(2, b'{"b"', False)]
    assert splitter.close() == []


def test_splitter_over_limit_line_reports_its_size_and_goes_on() -> None:
    splitter = LineSplitter(max_line_bytes=10)
    items = splitter.feed(b"x" * 25) + splitter.feed(b"y" * 5 + b"\nok\n")
    assert len(items) == 2 and isinstance(items[0], LineTooLong)
    assert (items[0].number, items[0].size, items[0].limit) == (1, 30, 10)
    assert items[1] == Line(2, b"ok", True)


_BIG_LINE_SCRIPT = """
import json, sys
from agentstream import protocol as p
from agentstream.consumer import read

path, size = sys.argv[1], int(sys.argv[2])
start = p.Start(command="big", session_id="ses_big", seq=0)
with open(path, "wb") as out:
    out.write(p.encode_line(start))
    out.write(b'{"type":"tool_result","v":1,"session_id":"ses_big","seq":1,"ts":"","call_id":"c1",'
              b'"name":"read_file","status":"success","output":"')
    for _ in range(size >> 20):
        out.write(b"x" * (1 << 20))
    out.write(b'"}\\n')
events = list(read(path))
print(json.dumps({
    "types": [e.type for e in events],
    "seqs": [e.seq for e in events],
    "output": [len(e.output) for e in events if isinstance(e, p.ToolResult)],
    "end": events[-1].error.code,
}))
"""


def test_a_100_mb_line_goes_through_read(tmp_path: Path) -> None:
    """No line cap by default: a 100 MB tool result is decoded whole.

    Run in its own process, so that the 100 MB does not stay in this test run's memory.
    """
    size = 100 << 20
    done = subprocess.run(
        [sys.executable, "-c", _BIG_LINE_SCRIPT, str(tmp_path / "big.ndjson"), str(size)],
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["output"] == [size]
    # the result's call was never seen: the reader makes it up, so the pair stays together
    assert summary["types"] == ["start", "tool_call", "tool_result", "error", "result"]
    assert summary["seqs"] == [0, 1, 2, 3, 4]
    assert summary["end"] == "STREAM_TRUNCATED"


def test_a_long_line_through_chunks(tmp_path: Path) -> None:
    content = "y" * (3 << 20)
    data = canonical_session(lambda s: s.message(content))
    chunks = [data[i : i + 4096] for i in range(0, len(data), 4096)]
    events = assert_valid_stream(read(chunks))
    assert [e.content for e in events if isinstance(e, p.Message)] == [content]


@pytest.mark.parametrize("as_chunks", [False, True])
def test_max_line_bytes_turns_long_lines_into_recoverable_errors(as_chunks: bool) -> None:
    data = canonical_session(lambda s: (s.message("z" * 5000), s.message("short")))
    source = [data[i : i + 100] for i in range(0, len(data), 100)] if as_chunks else io.BytesIO(data)
    events = assert_valid_stream(read(source, max_line_bytes=1000))
    errors = [e for e in events if isinstance(e, p.Error)]
    assert [e.code for e in errors] == ["LINE_TOO_LONG"]
    assert errors[0].recoverable and errors[0].details["line"] == 2 and errors[0].details["size"] > 5000
    assert [e.content for e in events if isinstance(e, p.Message)] == ["short"]
    assert events[-1].ok  # type: ignore[union-attr]
