"""The validator: every rule fires on a stream that breaks it, and only then."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentstream import protocol as p
from agentstream.validate import RULES, Validator, validate_stream


def stream(*events: p.BaseEvent, session: str = "s1") -> bytes:
    sequencer = p.Sequencer(session)
    return b"".join(p.encode_line(sequencer.stamp(e)) for e in events)


def start() -> p.Start:
    return p.Start(command="t")


def ok() -> p.Result:
    return p.Result(ok=True, subtype="success", exit_code=0)


def rules(data: bytes, **kwargs: object) -> list[str]:
    return [v.rule for v in validate_stream(io.BytesIO(data), **kwargs)]  # type: ignore[arg-type]


def test_a_valid_stream_has_no_violations() -> None:
    data = stream(
        start(),
        p.MessageDelta(message_id="m", content="a"),
        p.Message(message_id="m", role="assistant", content="a"),
        p.ToolCall(call_id="c", name="x"),
        p.ToolProgress(call_id="c", content="..."),
        p.ToolResult(call_id="c", name="x", status="success"),
        p.Error(code="RATE_LIMITED", message="later", recoverable=True),
        ok(),
    )
    assert rules(data, expect_exit=0) == []


def test_a_later_turn_goes_on_in_its_session_or_begins_a_stream_of_its_own() -> None:
    turn = (start(), p.Message(message_id="m", role="assistant", content="a"), ok())
    going_on = stream(*turn, *turn)
    own_streams = stream(*turn) + stream(*turn, session="s2")
    assert rules(going_on, expect_exit=0) == rules(own_streams, expect_exit=0) == []
    restarted_seq = stream(*turn) + stream(*turn)  # the same session, seq from 0 again
    counting_on = going_on.replace(b'"session_id":"s1","seq":3', b'"session_id":"s2","seq":3', 1)
    assert b'"s2","seq":3' in counting_on
    assert rules(restarted_seq) == ["seq"]
    assert rules(counting_on)[0] == "session"
    mid_turn = stream(*turn[:2]) + stream(turn[2], session="s2")  # only a turn's start may begin a stream
    assert "session" in rules(mid_turn)


def test_a_fatal_error_then_a_result_that_repeats_it_is_valid() -> None:
    data = stream(
        start(),
        p.Error(code="X", message="m"),
        p.Result(ok=False, subtype="error", exit_code=1, error=p.ErrorInfo(code="X", message="m")),
    )
    assert rules(data, expect_exit=1) == []


BROKEN = {
    "start-first": stream(p.Status(status="x"), ok()),
    "start-first/again": stream(start(), p.Status(status="x"), start(), ok()),
    "result-last": stream(start(), ok(), p.Status(status="late")),
    "tool-pairing": stream(start(), p.ToolCall(call_id="c", name="x"), ok()),
    # In a later turn of a session, after the checks that follow a result.
    "tool-pairing/later-turn": stream(
        start(), ok(), start(), p.ToolResult(call_id="c", name="x", status="success"), ok()
    ),
    "delta-closed/later-turn": stream(
        start(), ok(), start(), p.MessageDelta(message_id="m", content="a"), ok(), start(), ok()
    ),
    "fatal-error/later-turn": stream(
        start(), ok(), start(), p.Error(code="X", message="m"), p.Status(status="oops"), ok()
    ),
    "fatal-error/says-ok": stream(start(), p.Error(code="X", message="m"), ok()),
    "fatal-error/other-code": stream(
        start(),
        p.Error(code="X", message="m"),
        p.Result(ok=False, subtype="error", exit_code=1, error=p.ErrorInfo(code="Y", message="n")),
    ),
    "fatal-error/no-error": stream(
        start(), p.Error(code="X", message="m"), p.Result(ok=False, subtype="error", exit_code=1)
    ),
    "delta-closed": stream(start(), p.MessageDelta(message_id="m", content="a"), ok()),
    "fatal-error": stream(start(), p.Error(code="X", message="m"), p.Status(status="oops"), ok()),
    "ok-exit": stream(start(), p.Result(ok=True, subtype="success", exit_code=1)),
    "version": stream(start(), ok()).replace(b'"v":1', b'"v":2', 1),
    "seq": stream(start(), p.Status(status="x"), ok()).replace(b'"seq":1', b'"seq":7'),
    "session": stream(start(), ok()).replace(b'"session_id":"s1","seq":1', b'"session_id":"s2","seq":1'),
    "malformed": stream(start()) + b"[SandboxDebug] hello\n",
    "invalid-utf8": stream(start()) + b'{"type":"log","level":"info","message":"\xff"}\n',
    "truncated": stream(start(), ok())[:-1],
    "timestamp": stream(start(), ok()).replace(b'"ts":"', b'"ts":"yesterday ', 1),
    # Digits of another script are digits to a Unicode regex, not to RFC 3339.
    "timestamp/other-digits": re.sub(rb'"ts":"\d{4}', '"ts":"٢٠٢٦'.encode(), stream(start(), ok()), count=1),
    "exit-code": stream(start(), p.Result(ok=False, subtype="error", exit_code=256)),
}


@pytest.mark.parametrize("rule", sorted(BROKEN))
def test_each_rule_catches_its_break(rule: str) -> None:
    assert rule.split("/")[0] in rules(BROKEN[rule])


def test_every_rule_is_exercised() -> None:
    assert set(RULES) - {rule.split("/")[0] for rule in BROKEN} == {"too-long"}


def test_block_and_line_paths_agree() -> None:
    """The batched path must give the same verdicts as feeding one event at a time."""
    for data in BROKEN.values():
        one_by_one = Validator()
        for number, raw in enumerate(data.splitlines(), start=1):
            try:
                one_by_one.feed(p.decode(raw), number)
            except Exception:
                one_by_one.report(number, "malformed", "")
        one_by_one.close()
        batched = list(validate_stream(io.BytesIO(data if data.endswith(b"\n") else data + b"\n")))
        assert {(v.line, v.rule) for v in batched} >= {
            (v.line, v.rule) for v in one_by_one.violations if v.rule != "malformed"
        }


def test_exit_code_and_line_limit() -> None:
    data = stream(start(), ok())
    assert rules(data, expect_exit=3) == ["exit-code"]
    assert "too-long" in rules(data, max_line_bytes=10)


def test_second_tool_result_and_missing_result() -> None:
    data = stream(
        start(),
        p.ToolCall(call_id="c", name="x"),
        p.ToolResult(call_id="c", name="x", status="success"),
        p.ToolResult(call_id="c", name="x", status="success"),
    )
    found = list(validate_stream(io.BytesIO(data)))
    assert [v.rule for v in found] == ["tool-pairing", "result-last"]
    assert found[0].line == 4 and "a second tool_result" in found[0].message


def test_violations_name_the_line() -> None:
    data = stream(start()) + b"oops\n"
    first = next(iter(validate_stream(io.BytesIO(data))))
    assert first.line == 2 and "oops" in first.message


@pytest.mark.parametrize(
    "blank", [b"\n", b"   \n", b"\r\n", b"\t \r\n"], ids=["empty", "spaces", "cr", "mixed"]
)
@pytest.mark.parametrize("where", ["first", "later"])
def test_two_events_on_one_line_are_malformed_even_beside_a_blank_line(blank: bytes, where: str) -> None:
    """A blank line (skipped) must not let a line of two events pass as two lines of one."""
    lines = stream(
        start(),
        p.Message(message_id="a", role="assistant", content="a"),
        p.Message(message_id="b", role="user", content="b"),
        ok(),
    )
    first, second, third, last = lines.splitlines(keepends=True)
    two_on_one = second.rstrip(b"\n") + b" " + third
    data = blank + first + two_on_one + last if where == "first" else first + two_on_one + blank + last
    found = list(validate_stream(io.BytesIO(data)))
    line = 3 if where == "first" else 2
    assert (found[0].line, found[0].rule) == (line, "malformed") and "trailing characters" in found[0].message
    assert [v.rule for v in validate_stream(io.BytesIO(blank + lines))] == []  # a blank line alone is allowed


def run_cli(*args: str, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "agentstream", "validate", *args], input=data, capture_output=True, timeout=120
    )


def test_cli_exit_codes(tmp_path: Path) -> None:
    good = tmp_path / "good.ndjson"
    good.write_bytes(stream(start(), ok()))
    assert run_cli(str(good)).returncode == 0
    bad = run_cli("-", data=stream(start()))
    assert bad.returncode == 1 and b"result-last" in bad.stdout
    assert run_cli(str(good), "--expect-exit", "4").returncode == 1
    missing = run_cli(str(tmp_path / "nope"))
    assert missing.returncode == 2 and b"no such file" in missing.stderr and missing.stdout == b""
    assert run_cli("--bogus").returncode == 2


def test_cli_survives_a_100_mb_line_with_flat_memory(tmp_path: Path) -> None:
    big = tmp_path / "big.ndjson"
    with big.open("wb") as f:
        f.write(stream(start()))
        f.write(
            b'{"type":"log","v":1,"session_id":"s1","seq":1,"ts":"2026-01-01T00:00:00Z","level":"info","message":"'
        )
        chunk = b"x" * (1 << 20)
        for _ in range(100):
            f.write(chunk)
        f.write(b'"}\n')
        f.write(b"not json at all\n")
        f.write(stream(ok())[:-1].replace(b'"seq":0', b'"seq":2'))
    code = (
        "import sys;"
        f"sys.argv=['agentstream','validate',{str(big)!r}];"
        "from agentstream.cli import main; rc=main();"
        # VmHWM is this process's own peak RSS (ru_maxrss would include the forking test runner's).
        "print(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1], file=sys.stderr);"
        "sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == 1
    lines = proc.stdout.decode().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("line 3: malformed: not valid JSON") and "'not json at all'" in lines[0]
    assert lines[1] == "line 4: truncated: the last line has no newline (the stream was cut off)"
    peak_kib = int(proc.stderr.decode().split()[-1])
    assert peak_kib < 300 * 1024, f"peak RSS {peak_kib} KiB: more than the line and its decoded text"


def test_validator_is_incremental() -> None:
    validator = Validator()
    validator.feed(p.Sequencer("s").stamp(p.Status(status="x")), 1)
    assert [v.rule for v in validator.violations] == ["start-first"]


FIXTURES = Path(__file__).resolve().parent / "fixtures"


def test_cli_detects_a_dialect_and_checks_its_promises(tmp_path: Path) -> None:
    gemini = tmp_path / "gemini.ndjson"
    gemini.write_bytes(
        b'{"type":"init","timestamp":"2025-01-01T00:00:00.000Z","session_id":"s","model":"gemini-pro"}\n'
        b'{"type":"tool_use","timestamp":"2025-01-01T00:00:01.000Z","tool_name":"ls","tool_id":"t1","parameters":{}}\n'
        b'{"type":"tool_result","timestamp":"2025-01-01T00:00:02.000Z","tool_id":"t1","status":"success","output":"a"}\n'
        b'{"type":"result","timestamp":"2025-01-01T00:00:03.000Z","status":"success"}\n'
    )
    good = run_cli(str(gemini), "--json")
    assert good.returncode == 0, good.stdout
    assert json.loads(good.stdout.splitlines()[-1])["dialect"] == "gemini"
    cut = tmp_path / "cut.ndjson"
    cut.write_bytes(b"".join(gemini.read_bytes().splitlines(keepends=True)[:2]))
    broken = run_cli(str(cut))
    assert broken.returncode == 1
    assert b"result-last: the stream has no terminal event" in broken.stdout
    assert b"tool-pairing" in broken.stdout


def test_expect_exit_holds_a_dialect_without_exact_statuses_to_success_or_failure(tmp_path: Path) -> None:
    """Gemini's result says the turn limit was hit (its CLI exits 53); agentstream writing it exits 3."""
    gemini = tmp_path / "gemini.ndjson"
    gemini.write_bytes(
        b'{"type":"init","timestamp":"2025-01-01T00:00:00.000Z","session_id":"s","model":"gemini-pro"}\n'
        b'{"type":"result","timestamp":"2025-01-01T00:00:03.000Z","status":"error",'
        b'"error":{"type":"FatalTurnLimitedError","message":"turn limit"}}\n'
    )
    assert run_cli(str(gemini), "--expect-exit", "3").returncode == 0
    wrong = run_cli(str(gemini), "--expect-exit", "0")
    assert wrong.returncode == 1
    assert b"exit-code: process exited 0 but the stream's result is a failure" in wrong.stdout
    canonical = tmp_path / "canonical.ndjson"
    canonical.write_bytes(stream(start(), p.Result(ok=False, subtype="error", exit_code=53)))
    assert run_cli(str(canonical), "--expect-exit", "53").returncode == 0
    # Canonical carries the status itself: it must be the process's.
    assert run_cli(str(canonical), "--expect-exit", "3").returncode == 1


def test_cli_reads_a_forced_dialect_from_a_pipe() -> None:
    claude = (FIXTURES / "dialects" / "claude" / "partial-messages.ndjson").read_bytes()
    checked = run_cli("--from", "claude", "-", data=claude)
    assert checked.returncode == 0, checked.stdout
    assert run_cli("--from", "nonsense", "-", data=claude).returncode == 2
