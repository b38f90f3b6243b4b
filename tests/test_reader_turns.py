"""Sessions of many turns, single JSON documents, and endings a reader makes up for a child that died.

Real child processes and real signals throughout; the peer shapes come from the fixtures and
/work/shared/reference (Claude Code's and Gemini CLI's ``--output-format json``).
"""

from __future__ import annotations

import io
import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from _consumer_support import PYTHON, agent_script, assert_valid_stream, decode_output, run_cli
from _dialect_kit import FIXTURES
from agentstream import protocol as p
from agentstream.consumer import read, spawn
from agentstream.transcript import Transcript
from agentstream.validate import validate_stream


def _valid(output: bytes) -> None:
    assert [str(v) for v in validate_stream(io.BytesIO(output))] == []


def _convert(data: bytes, dialect: str = "auto") -> bytes:
    from agentstream.cli.convert_cmd import convert

    out = io.BytesIO()
    convert(io.BytesIO(data), out, from_dialect=dialect)
    return out.getvalue()


# -- many turns -----------------------------------------------------------------------------------


def _claude_two_turns() -> bytes:
    """One Claude Code process, two user turns (stream-json input): one init, then two turns each ending in a result."""
    lines = (FIXTURES / "claude" / "partial-messages.ndjson").read_bytes().splitlines(keepends=True)
    init = [line for line in lines if b'"subtype":"init"' in line]
    turn = [line for line in lines if b'"subtype":"init"' not in line]
    assert init and turn[-1].startswith(b'{"type":"result"')
    return b"".join(init + turn + turn)


@pytest.mark.parametrize(
    ("name", "data", "dialect"),
    [
        ("claude", _claude_two_turns(), "claude"),
        ("agui", (FIXTURES / "agui" / "run.ndjson").read_bytes() * 2, "agui"),
        # three example runs, the middle one only a failed result right after a result: two turns
        ("acai seed", (FIXTURES.parent / "seeds" / "acai.ndjson").read_bytes(), "acai"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 30 else "",
)
def test_a_session_of_many_turns_reads_and_converts_completely(name: str, data: bytes, dialect: str) -> None:
    turns = 2
    for chosen in (dialect, "auto"):
        events = assert_valid_stream(read(data, chosen), turns=turns)
        transcript = Transcript.from_events(events)
        assert len(transcript.turns) == turns
        assert [t.result is not None for t in transcript.turns] == [True] * turns
        assert (
            transcript.result is transcript.turns[-1].result and transcript.start is transcript.turns[0].start
        )
        _valid(_convert(data, chosen))
    one = assert_valid_stream(read(data, dialect, turns="one"), turns=1)
    assert one[-1].synthetic is not True


def test_two_turns_with_a_real_child_over_stdin(tmp_path: Path) -> None:
    """spawn(turns="many"): the child answers each line of stdin with a turn; the session ends at its EOF."""
    script = tmp_path / "two_way.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            from agentstream import protocol as p
            sequencer = p.Sequencer("ses_two_way")
            def say(event):
                sys.stdout.buffer.write(p.encode_line(sequencer.stamp(event)))
                sys.stdout.flush()
            for line in sys.stdin:
                say(p.Start(command="two-way"))
                say(p.Message(message_id=p.new_id("msg"), role="assistant", content="echo " + line.strip()))
                say(p.Result(ok=True, subtype="success", exit_code=0))
            """
        )
    )
    with spawn([PYTHON, str(script)], "canonical", stdin=subprocess.PIPE, turns="many") as child:
        child.start()
        assert child.proc is not None and child.proc.stdin is not None
        child.proc.stdin.write(b"one\ntwo\n")
        child.proc.stdin.close()  # the caller ends the session by closing the child's input
        events = list(child)
    assert_valid_stream(events, turns=2)
    texts = [e.content for e in events if isinstance(e, p.Message)]
    assert texts == ["echo one", "echo two"]


# -- single JSON documents (a CLI's --output-format json) ----------------------------------------------

GEMINI_OK = {
    "session_id": "c1e5b8f2-1a2b-4c3d-9e8f-0a1b2c3d4e5f",
    "response": "The answer is 4.",
    "stats": {
        "models": {
            "gemini-2.5-pro": {
                "api": {"totalRequests": 1, "totalErrors": 0, "totalLatencyMs": 1200},
                "tokens": {
                    "input": 10,
                    "prompt": 12,
                    "candidates": 7,
                    "total": 19,
                    "cached": 2,
                    "thoughts": 0,
                    "tool": 0,
                },
            }
        },
        "tools": {"totalCalls": 0, "totalSuccess": 0, "totalFail": 0, "totalDurationMs": 0, "byName": {}},
        "files": {"totalLinesAdded": 0, "totalLinesRemoved": 0},
    },
}
GEMINI_INVALID_STREAM = {**GEMINI_OK, "response": "", "error": {"type": "INVALID_STREAM", "message": "empty"}}
CLAUDE_RESULT = {
    "type": "result",
    "subtype": "success",
    "is_error": False,
    "duration_ms": 29039,
    "duration_api_ms": 29535,
    "num_turns": 6,
    "result": "Task completed successfully!",
    "session_id": "dc93aac8-fe7f-4d4a-83ef-2bd2c070444e",
    "total_cost_usd": 0.1351093,
    "usage": {"input_tokens": 29, "cache_read_input_tokens": 112686, "output_tokens": 656},
}


@pytest.mark.parametrize(
    ("document", "text", "ok"),
    [
        (GEMINI_OK, "The answer is 4.", True),
        (CLAUDE_RESULT, "Task completed successfully!", True),
        (GEMINI_INVALID_STREAM, None, False),
    ],
    ids=["gemini", "claude", "gemini-invalid-stream"],
)
@pytest.mark.parametrize("indent", [None, 2], ids=["compact", "pretty"])
def test_a_single_json_document_is_read_whole(
    document: dict[str, object], text: str | None, ok: bool, indent: int | None, tmp_path: Path
) -> None:
    data = (json.dumps(document, indent=indent) + "\n").encode()
    events = assert_valid_stream(read(data))
    result = events[-1]
    assert isinstance(result, p.Result) and result.ok is ok and result.synthetic is not True
    assert not any(isinstance(e, p.Error) and e.code == "MALFORMED_EVENT" for e in events)
    if text is not None:
        assert Transcript.from_events(events).text == text
    # wrap: the run's own outcome, from a real child printing the document
    child = agent_script(tmp_path, "")  # only to get a script path beside it
    printer = Path(child[1])
    printer.write_text(f"import sys\nsys.stdout.write({data.decode()!r})\n")
    wrapped = run_cli("wrap", "--", PYTHON, str(printer))
    out = decode_output(wrapped.stdout)
    assert wrapped.returncode == (0 if ok else out[-1].exit_code), wrapped.stderr.decode()
    assert out[-1].ok is ok  # type: ignore[union-attr]
    if text is not None:
        assert out[-1].result == text  # type: ignore[union-attr]


# -- a child killed mid tool call ---------------------------------------------------------------------

MID_TOOL_CALL = """
from agentstream import protocol as p
stream.message_delta("looking", message_id="m1")
stream.emit(p.ToolCall(call_id="call_1", name="shell", arguments={"cmd": "sleep 60"}))
stream.emit(p.ToolProgress(call_id="call_1", content="started"))
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_child_sigkilled_mid_tool_call_ends_whole_in_spawn_and_wrap(tmp_path: Path) -> None:
    argv = agent_script(tmp_path, MID_TOOL_CALL)
    with spawn(argv) as child:
        events = assert_valid_stream(child)
    made_up = [e for e in events if e.synthetic is True]
    assert [e.type for e in made_up] == ["tool_result", "message", "error", "result"]
    assert made_up[0].status == "cancelled" and made_up[1].content == "looking"  # type: ignore[attr-defined]
    assert made_up[2].code == "PROCESS_CRASHED" and made_up[3].exit_code == 137  # type: ignore[attr-defined]
    wrapped = run_cli("wrap", "--", *argv)
    _valid(wrapped.stdout)
    assert wrapped.returncode == decode_output(wrapped.stdout)[-1].exit_code == 137  # type: ignore[union-attr]


# -- outcome coherence, view labels -----------------------------------------------------------------------


@pytest.mark.parametrize(("exit_code", "ok"), [(256, False), (-1, False), (256, True), (0, False), (3, True)])
def test_an_incoherent_result_is_made_coherent_by_every_reader(
    exit_code: int, ok: bool, tmp_path: Path
) -> None:
    """Out of 0–255, or ok disagreeing with exit_code: readers report a failure with exit status 1..255."""
    sequencer = p.Sequencer("s")
    lines = [
        p.encode_line(sequencer.stamp(p.Start(command="x"))),
        p.encode_line(sequencer.stamp(p.Result(ok=ok, subtype="x", exit_code=exit_code))),
    ]
    data = b"".join(lines)
    result = list(read(data))[-1]
    assert isinstance(result, p.Result) and result.ok is False and 1 <= result.exit_code <= 255
    assert result.exit_code == (exit_code if 0 < exit_code <= 255 else 1)
    _valid(_convert(data))
    path = tmp_path / "run.ndjson"
    path.write_bytes(data)
    assert run_cli("view", str(path)).returncode == result.exit_code
    if not 0 <= exit_code <= 255:
        assert "exit-code" in run_cli("validate", str(path)).stdout.decode()


def test_view_says_retrying_only_when_a_retry_is_announced(tmp_path: Path) -> None:
    sequencer = p.Sequencer("s")
    events = [
        p.Start(command="x"),
        p.Error(code="RATE_LIMITED", message="slow", recoverable=True, retry_in_ms=1500),
        p.Error(code="TOOL_FAILED", message="odd", recoverable=True),
        p.Result(ok=True, subtype="success", exit_code=0),
    ]
    path = tmp_path / "run.ndjson"
    path.write_bytes(b"".join(p.encode_line(sequencer.stamp(e)) for e in events))
    err = run_cli("view", "--color", "never", str(path)).stderr.decode()
    assert "retrying in 1.5s RATE_LIMITED" in err
    assert "warning TOOL_FAILED" in err and "retrying TOOL_FAILED" not in err


def test_validate_reports_a_gap_once_and_a_skipped_line_not_as_a_gap(tmp_path: Path) -> None:
    sequencer = p.Sequencer("s")
    start = p.encode_line(sequencer.stamp(p.Start(command="x")))
    logs = [p.encode_line(sequencer.stamp(p.Log(level="info", message=str(n)))) for n in range(6)]
    end = p.encode_line(sequencer.stamp(p.Result(ok=True, subtype="success", exit_code=0)))
    # seq 1, a bad line standing for seq 2, seq 3, then a gap (4..5 missing), seq 6 and the result at 7
    broken = start + logs[0] + b"garbage with seq 2\n" + logs[2] + logs[5] + end
    rules = [(v.line, v.rule) for v in validate_stream(io.BytesIO(broken))]
    assert rules == [(3, "malformed"), (5, "seq")]
    many = tmp_path / "junk.txt"
    many.write_bytes(b"junk\n" * 500)
    done = run_cli("validate", "--max-violations", "10", str(many))
    out = done.stdout.decode().splitlines()
    assert len(out) == 11 and out[-1].startswith("… 492 more violations")
    as_json = run_cli("validate", "--json", "--max-violations", "3", str(many)).stdout.decode().splitlines()
    assert len(as_json) == 4 and json.loads(as_json[-1])["violations"] == 502


def test_schema_requires_the_stamps() -> None:
    schema = p.json_schema()
    for name, definition in schema["$defs"].items():
        if "type" in definition.get("properties", {}):
            assert {"v", "session_id", "seq", "ts"} <= set(definition["required"]), name
    shipped = json.loads(
        (Path(__file__).resolve().parent.parent / "docs" / "protocol.schema.json").read_text()
    )
    assert shipped == json.loads(json.dumps(schema))


def test_a_result_right_after_a_result_opens_no_turn() -> None:
    """Claude Code's spurious second result (after a background task) is counted, not read as a turn."""
    data = (FIXTURES / "claude" / "results.ndjson").read_bytes()  # four result lines in a row
    reader = read(data, "claude")
    events = assert_valid_stream(reader, turns=1)
    assert events[-1].synthetic is not True
    reports, count = reader.after_end
    # each stray result, and the fatal error Claude's decoder puts before a failed one, is kept aside
    assert count == len(reports) >= 3
    assert sum("second result" in r.message for r in reports) == 3  # type: ignore[attr-defined]
