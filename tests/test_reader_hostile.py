"""Readers on hostile input: whatever comes in, what the reader gives out is a valid session.

Classes of defect covered here, each by a property or a sweep rather than one example:
random lines in every dialect converted (output must validate), a stream cut at every
line, every renderer on random event sequences (unknown events with canonical names
included), nesting too deep to parse, and memory that stays flat on endless bad input.
"""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _consumer_support import canonical_session
from _dialect_kit import FIXTURES, SEEDS, junk_values
from _strategies import full_sessions, json_values, text
from agentstream import protocol as p
from agentstream.cli.convert_cmd import convert
from agentstream.consumer import read
from agentstream.dialects import DIALECT_NAMES, get_dialect
from agentstream.render import OUTPUT_FORMATS, make_sink
from agentstream.validate import validate_stream

DIALECTS = [name for name in DIALECT_NAMES if name != "canonical"]
WRITABLE = [name for name in DIALECTS if get_dialect(name).can_encode]
"""Dialects that can be written (session logs are read only)."""


def dialect_lines(dialect: str) -> list[bytes]:
    """Every non-blank line of every fixture and seed of ``dialect``."""
    folder = FIXTURES / dialect
    paths = sorted([*folder.glob("*.ndjson"), *folder.glob("*.jsonl")]) if folder.is_dir() else []
    seed = SEEDS / f"{dialect}.ndjson"
    if seed.exists():
        paths.append(seed)
    return [line for path in paths for line in path.read_bytes().splitlines() if line.strip()]


def converted(data: bytes, dialect: str = "auto") -> bytes:
    out = io.BytesIO()
    convert(io.BytesIO(data), out, from_dialect=dialect)
    return out.getvalue()


def violations_of(output: bytes) -> list[str]:
    return [str(v) for v in validate_stream(io.BytesIO(output))]


HOSTILE_LINES = [
    b'{"type":"result"}',
    b'{"type":"start"}',
    b'{"type":"tool_result","call_id":"x"}',
    b'{"type":"message_delta","message_id":"m","content":"x","v":1,"seq":3,"session_id":"other","ts":"no"}',
    b'{"type":"result","v":1,"seq":0,"session_id":"foreign","ts":"2020-01-01T00:00:00Z","ok":true,'
    b'"subtype":"success","exit_code":0}',
    b'{"type":"start","v":1,"seq":7,"session_id":"foreign","ts":"2020-01-01T00:00:00Z","command":"x"}',
    b'{"type":"error","v":1,"seq":1,"session_id":"s","ts":"2020-01-01T00:00:00Z","code":"X","message":"m"}',
    b'{"type":"result","v":1,"seq":2,"session_id":"s","ts":"2020-01-01T00:00:00Z","ok":false,'
    b'"subtype":"error","exit_code":256}',
    b"[" * 100_000,
    b"not json",
    b"\xff\xfe",
    b"{",
    b"[",
    b"}",
    b"",
]


@st.composite
def hostile_inputs(draw: st.DrawFn, dialect: str) -> bytes:
    """Real lines of the dialect (and of others), shuffled, cut, repeated, mixed with junk and canonical names."""
    own = dialect_lines(dialect)
    other = dialect_lines(draw(st.sampled_from(DIALECTS)))
    line = st.one_of(
        st.sampled_from(own),
        st.sampled_from(other),
        st.sampled_from(HOSTILE_LINES),
        st.builds(
            msgspec.json.encode, st.dictionaries(st.sampled_from(["type", "v", "seq", "ts"]), junk_values)
        ),
        st.builds(msgspec.json.encode, json_values),
        text.map(str.encode),
    )
    lines = draw(st.lists(line, max_size=25))
    data = b"\n".join(lines)
    if draw(st.booleans()):
        data += b"\n"
    return data


@pytest.mark.parametrize("dialect", [*DIALECTS, "canonical", "auto"])
@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_convert_output_always_validates(dialect: str, data: st.DataObject) -> None:
    """Random input read as each dialect (and auto-detected): `convert` writes a stream `validate` accepts."""
    source = data.draw(hostile_inputs(dialect if dialect in DIALECTS else "claude"))
    output = converted(source, dialect)
    assert violations_of(output) == [], output.decode("utf-8", "replace")[:3000]


def long_streams() -> Iterator[tuple[str, str, bytes]]:
    """Long streams with tool calls, delta runs and errors open at many points: ours, and real fixtures."""

    def body(s: object) -> None:
        from agentstream.stream import Stream

        assert isinstance(s, Stream)
        for turn in range(3):
            s.message_delta("thinking about ", message_id=f"m{turn}")
            s.message_delta("it", message_id=f"m{turn}")
            s.reasoning_delta("hmm", reasoning_id=f"r{turn}")
            s.reasoning("hmm", reasoning_id=f"r{turn}")
            s.emit(p.ToolCall(call_id=f"c{turn}", name="shell", arguments={"cmd": "ls"}))
            s.emit(p.ToolProgress(call_id=f"c{turn}", content="a\n"))
            s.error("RATE_LIMITED", "slow down", retry_in_ms=10)
            s.emit(p.ToolResult(call_id=f"c{turn}", name="shell", status="success", output="a"))
            s.message("thinking about it", message_id=f"m{turn}")
            s.record_usage("m", input_tokens=3, output_tokens=4)

    yield "ours", "canonical", canonical_session(body)
    for dialect, name in [
        ("claude", "partial-messages.ndjson"),
        ("claude", "session-2.0.76.ndjson"),
        ("codex", "items.ndjson"),
        ("agui", "run.ndjson"),
        ("opencode", "run.ndjson"),
        ("amp", "stream-json.ndjson"),
    ]:
        yield f"{dialect}:{name}", dialect, (FIXTURES / dialect / name).read_bytes()
    for dialect in ("gemini", "locus", "acai", "cursor", "joelclaw"):
        yield f"{dialect}:seed", dialect, (SEEDS / f"{dialect}.ndjson").read_bytes()


@pytest.mark.parametrize(("label", "dialect", "data"), list(long_streams()), ids=lambda v: str(v)[:30])
def test_a_stream_cut_at_any_line_converts_to_a_valid_stream(label: str, dialect: str, data: bytes) -> None:
    """Cut after every line and in the middle of every line: the made-up ending closes all that is open."""
    lines = data.splitlines(keepends=True)
    cuts = [sum(map(len, lines[:n])) for n in range(len(lines) + 1)]
    cuts += [cut + len(lines[n]) // 2 for n, cut in enumerate(cuts[:-1])]
    for cut in cuts:
        for chosen in (dialect, "auto"):
            output = converted(data[:cut], chosen)
            problems = violations_of(output)
            assert problems == [], f"{label} cut at byte {cut} ({chosen}): {problems}"
    assert len(cuts) >= 2 * len(lines)


# -- renderers ---------------------------------------------------------------------------------

unknown_events = st.builds(
    lambda kind, raw: p.UnknownEvent(type=kind, raw={**raw, "type": kind}),
    st.sampled_from(sorted(p.EVENT_TYPES)) | text,
    st.dictionaries(st.sampled_from(["seq", "v", "ts", "session_id", "provider", "content"]), junk_values),
)


@st.composite
def event_sequences(draw: st.DrawFn) -> list[p.AnyEvent]:
    """A valid session with unknown events (of canonical names too) put anywhere, then maybe cut short."""
    events: list[p.AnyEvent] = list(draw(full_sessions()))
    for _ in range(draw(st.integers(0, 4))):
        events.insert(draw(st.integers(0, len(events))), draw(unknown_events))
    return events[: draw(st.integers(0, len(events)))]


class _Collect:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes | bytearray) -> None:
        self.data += data


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(events=event_sequences(), target=st.sampled_from([*OUTPUT_FORMATS, *(f"to:{d}" for d in WRITABLE)]))
def test_every_renderer_takes_every_event_class(events: list[p.AnyEvent], target: str) -> None:
    """text, json, stream-json and each dialect's encoder: any event sequence renders without raising."""
    out = _Collect()
    err = io.StringIO()
    if target.startswith("to:"):
        sink = make_sink("stream-json", out, dialect=target[3:])
    else:
        sink = make_sink(target, out, err=err, color=False)  # type: ignore[arg-type]
    for event in events:
        sink.emit(event)
    sink.close()
    if target == "stream-json":
        assert out.data.count(b"\n") == len(events)


def test_view_and_convert_to_text_survive_another_dialect(tmp_path: Path) -> None:
    """`view --from claude` on a canonical file: unknown events with canonical names render, no traceback."""
    stream = tmp_path / "canonical.ndjson"
    stream.write_bytes(canonical_session() + b'{"type":"result"}\n')
    for argv in (["view", "--from", "claude"], ["convert", "--from", "claude", "-o", "text"]):
        done = subprocess.run(
            [sys.executable, "-m", "agentstream", *argv, str(stream)], capture_output=True, timeout=60
        )
        assert b"Traceback" not in done.stderr, done.stderr.decode()
        assert done.returncode in (0, 1), done.stderr.decode()


# -- nesting too deep, memory bounded by the longest line ------------------------------------------


def test_json_nested_too_deep_is_one_malformed_line_and_reading_goes_on() -> None:
    deep = b"[" * 100_000 + b"\n"
    for data in (deep + canonical_session(), canonical_session()[:200] + deep):
        events = list(read(data))
        assert any(isinstance(e, p.Error) and e.code == "MALFORMED_EVENT" for e in events)
        assert isinstance(events[-1], p.Result)
        assert violations_of(converted(data)) == []
    problems = [v.rule for v in validate_stream(io.BytesIO(deep + canonical_session()))]
    assert problems[0] == "malformed"


_PEAK = """
import sys
from agentstream.cli import main
sys.argv = ["agentstream", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1], file=sys.stderr)
"""


def _peak_kib(argv: list[str], path: Path) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, *argv, str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=300,
    )
    return int(done.stderr.decode().split()[-1])


@pytest.mark.parametrize(
    "argv",
    [
        ["convert", "--from", "claude", "--no-progress"],
        ["convert", "--from", "amp", "--no-progress"],
        ["convert", "--from", "locus", "--no-progress"],
        ["convert", "--no-progress"],
        ["validate", "-q"],
    ],
    ids=lambda argv: " ".join(argv[:3]),
)
def test_memory_does_not_grow_with_bad_input(argv: list[str], tmp_path: Path) -> None:
    """Lines that never bring a start (junk, lines waiting for init): 10x the input, about the same peak."""
    small, large = tmp_path / "small", tmp_path / "large"
    line = b'not json, and no init line either {"type":"system","subtype":"hook_started"}\n'
    hook = b'{"type":"system","subtype":"hook_started","uuid":"u","session_id":"s"}\n'
    small.write_bytes((line + hook) * 2_000)
    large.write_bytes((line + hook) * 20_000)
    grown = _peak_kib(argv, large) - _peak_kib(argv, small)
    # Holding a report per line (the defect) costs about 1 KiB a line: 36 MiB here.
    assert grown < 4 * 1024, f"peak grew by {grown} KiB for 10x the input"


@pytest.mark.parametrize("target", ["canonical", "claude"])
def test_one_huge_line_costs_about_twice_its_size(target: str, tmp_path: Path) -> None:
    """A 40 MB tool result: the line is framed in place and written without a joined copy, so the peak above
    start-up stays near the line itself plus the text decoded from it (it was three times the line)."""
    huge, small = tmp_path / "huge", tmp_path / "small"
    init = b'{"type":"system","subtype":"init","session_id":"s","tools":[]}\n'
    result = b'{"type":"result","subtype":"success","is_error":false}\n'
    size = 40_000_000
    huge.write_bytes(
        init
        + b'{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1",'
        + b'"content":"'
        + b"x" * size
        + b'"}]}}\n'
        + result
    )
    small.write_bytes(init + result)
    argv = ["convert", "--from", "claude", "--to", target, "--no-progress"]
    grown = (_peak_kib(argv, huge) - _peak_kib(argv, small)) * 1024
    assert grown < 2.5 * size, f"peak grew by {grown / size:.2f}x the line"
