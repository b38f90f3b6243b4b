"""``agentstream convert --to DIALECT`` of what a one-turn stream does not have: a session of several turns, and
lines of a type nobody knows. Real processes, outputs read back to canonical events and compared."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest

from _consumer_support import PYTHON, ROOT, assert_valid_stream, decode_output, run_cli
from _dialect_kit import decode as decode_lines
from agentstream import protocol as p
from agentstream.consumer import read
from agentstream.dialects import available_dialects, get_dialect

OTHER_DIALECTS = [d.name for d in available_dialects() if d.name != "canonical" and d.can_encode]


def _turn_one() -> list[p.BaseEvent]:
    """A turn that succeeds: a prompt, a tool call, the answer, usage."""
    return [
        p.Start(command="agent", cwd="/work", tools=["calc"]),
        p.Message(message_id="msg_1", role="user", content="what is 2+2?"),
        p.ToolCall(call_id="call_1", name="calc", arguments={"expr": "2+2"}),
        p.ToolResult(call_id="call_1", name="calc", status="success", output="4"),
        p.Message(message_id="msg_2", role="assistant", content="the first answer"),
        p.Usage(model="m", input_tokens=10, output_tokens=2),
        p.Result(
            ok=True,
            subtype="success",
            exit_code=0,
            turn_count=1,
            tools_used=["calc"],
            usage=p.UsageTotals(input_tokens=10, output_tokens=2),
            result="the first answer",
        ),
    ]


def _turn_two() -> list[p.BaseEvent]:
    """A turn that answers, then fails at its turn limit."""
    limit = p.ErrorInfo(code="MAX_TURNS", message="too many turns")
    return [
        p.Start(command="agent", cwd="/work", tools=["calc"]),
        p.Message(message_id="msg_3", role="assistant", content="the second answer"),
        p.Error(code=limit.code, message=limit.message, recoverable=False),
        p.Result(ok=False, subtype="max_turns", exit_code=3, error=limit),
    ]


def _stream(*turns: list[p.BaseEvent]) -> bytes:
    """The turns as one canonical session, stamped as a producer writes them."""
    sequencer = p.Sequencer("ses_two_turns")
    return b"".join(p.encode_line(sequencer.stamp(event)) for turn in turns for event in turn)


def _via(dialect: str, canonical: bytes) -> list[p.AnyEvent]:
    """``canonical`` converted to ``dialect`` and back, as two ``agentstream convert`` processes."""
    there = run_cli("convert", "--to", dialect, stdin=canonical)
    assert there.returncode == 0 and there.stderr == b"", there.stderr
    back = run_cli("convert", "--from", dialect, "--to", "canonical", stdin=there.stdout)
    assert back.returncode == 0, back.stderr
    return decode_output(back.stdout)


def _split(events: list[p.AnyEvent]) -> list[list[p.AnyEvent]]:
    """A session's turns, each from its start to its result."""
    turns: list[list[p.AnyEvent]] = []
    for event in events:
        if isinstance(event, p.Start):
            turns.append([])
        turns[-1].append(event)
    return turns


def _outline(turn: list[p.AnyEvent]) -> list[tuple[Any, ...]]:
    """What a turn says, without what a dialect makes up on the way (ids, stamps, running totals)."""
    out: list[tuple[Any, ...]] = []
    for event in turn:
        if isinstance(event, (p.Message, p.MessageDelta)):
            out.append((event.type, event.role, event.content))
        elif isinstance(event, (p.ToolCall, p.ToolResult)):
            out.append((event.type, event.name))
        elif isinstance(event, p.Error):
            out.append((event.type, event.code, event.recoverable))
        elif isinstance(event, p.Result):
            error = event.error.code if isinstance(event.error, p.ErrorInfo) else None
            out.append((event.type, event.ok, event.subtype, event.exit_code, error))
        else:
            out.append((event.type,))
    return out


@pytest.mark.parametrize("dialect", OTHER_DIALECTS)
def test_every_turn_of_a_session_is_written_and_reads_back_as_it_would_alone(dialect: str) -> None:
    """Two turns, the second failed: both come back, each as the same turn converted on its own would, and the
    session's outcome is the last turn's."""
    session = _via(dialect, _stream(_turn_one(), _turn_two()))
    first, second = _split(assert_valid_stream(session, turns=2))
    assert _outline(first) == _outline(_via(dialect, _stream(_turn_one())))
    assert _outline(second) == _outline(_via(dialect, _stream(_turn_two())))
    assert isinstance(first[-1], p.Result) and first[-1].ok
    assert isinstance(second[-1], p.Result) and not second[-1].ok and second[-1].exit_code != 0
    as_json = run_cli("convert", "--to", dialect, stdin=_stream(_turn_one(), _turn_two())).stdout
    (last,) = run_cli("convert", "--from", dialect, "-o", "json", stdin=as_json).stdout.splitlines()
    assert _outline([p.decode(last)]) == _outline(second[-1:])  # the last turn's result, not the first's


@pytest.mark.parametrize(
    ("dialect", "opening", "ending"),
    [
        ("claude", {"type": "system", "subtype": "init"}, {"type": "result"}),
        ("amp", {"type": "system", "subtype": "init"}, {"type": "result"}),
        ("cursor", {"type": "system", "subtype": "init"}, {"type": "result"}),
        ("gemini", {"type": "init"}, {"type": "result"}),
        ("acai", {"type": "init"}, {"type": "result"}),
        ("agui", {"type": "RUN_STARTED"}, {"type": "RUN_FINISHED"}),
        ("locus", {"type": "start"}, {"type": "done"}),
        ("joelclaw", {"type": "start"}, {"ok": True}),
        ("codex", {"type": "thread.started"}, {"type": "turn.completed"}),
        ("opencode", {"type": "step_start"}, {"type": "done"}),
    ],
)
def test_each_turn_opens_and_ends_the_way_the_dialect_does(
    dialect: str, opening: dict[str, str], ending: dict[str, Any]
) -> None:
    """Three turns that succeed: three openings and three endings, alternating (Claude Code writes an init and a
    result per turn of a stream-json session; ``codex exec resume`` the thread, then the turn)."""
    written = run_cli("convert", "--to", dialect, stdin=_stream(_turn_one(), _turn_one(), _turn_one())).stdout
    lines = [msgspec.json.decode(line) for line in written.splitlines()]
    edges = [
        "open" if opening.items() <= line.items() else "end"
        for line in lines
        if opening.items() <= line.items() or ending.items() <= line.items()
    ]
    assert edges == ["open", "end"] * 3


def _written(dialect: str, events: list[p.BaseEvent]) -> bytes:
    """``events``, stamped, through one encoder of ``dialect`` and its ``finish()``, as NDJSON."""
    sequencer = p.Sequencer("ses_cut")
    encoder = get_dialect(dialect).encoder()
    lines = [line for event in events for line in encoder.encode(sequencer.stamp(event))] + encoder.finish()
    return b"".join(line + b"\n" for line in lines)


@pytest.mark.parametrize("dialect", OTHER_DIALECTS)
def test_an_encoder_ends_a_turn_cut_short_after_an_earlier_turn(dialect: str) -> None:
    """The encoder's own made-up ending (``finish``) for a stream that stops inside its second turn: the same as
    for that turn alone, cut short the same way."""
    cut = _turn_two()[:2]
    written = _written(dialect, [*_turn_one(), *cut])
    first, second = _split(assert_valid_stream(read(written, dialect), turns=2))
    assert isinstance(first[-1], p.Result) and first[-1].ok
    assert isinstance(second[-1], p.Result) and not second[-1].ok
    assert _outline(second) == _outline(list(read(_written(dialect, cut), dialect)))
    # the ending is in the dialect's own lines, not one the reader made up for them
    assert sum(isinstance(e, p.Result) for e in decode_lines(dialect, written.splitlines())) == 2


# -- lines of a type nobody knows ---------------------------------------------------------------------------

CLAUDE_WITH_AN_UNKNOWN_LINE = (
    b'{"type":"system","subtype":"init","cwd":"/p","session_id":"s-1","tools":["Bash"],"mcp_servers":[],'
    b'"model":"claude-sonnet-4-5","permissionMode":"default","apiKeySource":"none","uuid":"u1"}\n'
    b'{"type":"brand_new","data":1,"session_id":"s-1"}\n'
    b'{"type":"result","subtype":"success","is_error":false,"duration_ms":5,"num_turns":1,"result":"done",'
    b'"session_id":"s-1"}\n'
)


def _kept(output: bytes, dialect: str) -> list[tuple[str, dict[str, Any]]]:
    """The ``brand_new`` line as ``output`` (in ``dialect``) carries it back: the event's name and data, less the
    time it was read."""
    events = assert_valid_stream(read(output, dialect))
    return [
        (event.name, {key: value for key, value in event.data.items() if key != "ts"})
        for event in events
        if isinstance(event, p.GenericEvent) and event.name == "brand_new"
    ]


@pytest.mark.parametrize("dialect", ["claude", "agui", "joelclaw"])  # the dialects with a line for an `event`
def test_convert_keeps_an_unknown_line_as_wrap_does(dialect: str, tmp_path: Path) -> None:
    """The same line, converted and relayed by wrap: the same ``event`` in the output."""
    source = tmp_path / "claude.ndjson"
    source.write_bytes(CLAUDE_WITH_AN_UNKNOWN_LINE)
    converted = run_cli("convert", "--from", "claude", "--to", dialect, str(source))
    assert converted.returncode == 0, converted.stderr
    wrap = ["wrap", "--no-publish", "--from", "claude", "--to", dialect, "--", "cat", str(source)]
    wrapped = subprocess.run(
        [PYTHON, "-m", "agentstream", *wrap],
        capture_output=True,
        timeout=30,
        cwd=ROOT,
    )
    assert wrapped.returncode == 0, wrapped.stderr
    kept = _kept(converted.stdout, dialect)
    assert kept == [("brand_new", {"type": "brand_new", "data": 1, "session_id": "s-1", "v": 1, "seq": 1})]
    assert kept == _kept(wrapped.stdout, dialect)
