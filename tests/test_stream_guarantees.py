"""The producer's guarantees, each checked on a real producer process.

Every test reads the process's real stdout and checks it with the validator,
including that the process exit code equals ``result.exit_code``.
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentstream.validate import Validator, validate_stream
from conftest import (
    exit_after,
    python_script,
    signal_twice_with_stdout_unread,
    start_python,
    wait_until_stdout_is_full,
)

HEADER = """
import os, sys, time
from agentstream.stream import Stream
"""


def check(stdout: bytes, exit_code: int) -> list[dict]:
    """Assert that ``stdout`` is a valid stream whose result matches ``exit_code``; return its events."""
    violations = list(validate_stream(io.BytesIO(stdout), validator=Validator(expect_exit=exit_code)))
    assert violations == [], violations
    return [json.loads(line) for line in stdout.splitlines()]


def run(tmp_path: Path, body: str, *, timeout: float = 20) -> tuple[int, list[dict], bytes]:
    proc = start_python(python_script(tmp_path, HEADER + body))
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, check(out, proc.returncode), err


def test_normal_return_ends_with_success(tmp_path: Path) -> None:
    code, events, _ = run(
        tmp_path,
        """
with Stream("job") as s:
    s.message("hello")
""",
    )
    assert code == 0
    assert [e["type"] for e in events] == ["start", "message", "result"]
    assert events[-1]["ok"] is True and events[-1]["result"] == "hello"


def test_exception_gives_fatal_error_then_result(tmp_path: Path) -> None:
    code, events, err = run(
        tmp_path,
        """
with Stream("job") as s:
    s.status("working")
    raise ValueError("boom")
""",
    )
    assert code == 1
    assert [e["type"] for e in events][-2:] == ["error", "result"]
    assert events[-2]["code"] == "EXCEPTION" and "boom" in events[-2]["message"]
    assert events[-2]["recoverable"] is False
    assert b"ValueError: boom" in err  # the traceback goes to stderr, not stdout


def test_error_before_anything_else_still_starts_first(tmp_path: Path) -> None:
    code, events, _ = run(
        tmp_path,
        """
with Stream("job") as s:
    raise RuntimeError("first thing")
""",
    )
    assert code == 1
    assert [e["type"] for e in events] == ["start", "error", "result"]


@pytest.mark.parametrize("status", [0, 3, 42])
def test_sys_exit_status_becomes_the_result_exit_code(tmp_path: Path, status: int) -> None:
    code, events, _ = run(
        tmp_path,
        f"""
with Stream("job") as s:
    sys.exit({status})
""",
    )
    assert code == status == events[-1]["exit_code"]
    assert events[-1]["ok"] is (status == 0)


def test_fail_exits_with_its_code(tmp_path: Path) -> None:
    code, events, _ = run(
        tmp_path,
        """
with Stream("job") as s:
    s.fail("AUTH_EXPIRED", "token expired", fix="log in again", exit_code=7)
""",
    )
    assert code == 7
    assert [e["type"] for e in events] == ["start", "error", "result"]
    assert events[-1]["error"] == {"code": "AUTH_EXPIRED", "message": "token expired", "fix": "log in again"}


def read_until(proc: subprocess.Popen[bytes], marker: bytes) -> bytes:
    """Read stdout lines until one contains ``marker``; return all read so far."""
    assert proc.stdout is not None
    seen = b""
    while marker not in seen:
        line = proc.stdout.readline()
        assert line, f"stream ended before {marker!r}: {seen!r}"
        seen += line
    return seen


@pytest.mark.parametrize(
    ("signum", "expected"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]
)
def test_signals_end_the_stream_with_their_exit_code(tmp_path: Path, signum: int, expected: int) -> None:
    proc = start_python(
        python_script(
            tmp_path,
            HEADER
            + """
with Stream("job") as s:
    with s.tool_call("sleep", {"seconds": 30}):
        s.status("ready")
        time.sleep(30)
""",
        )
    )
    head = read_until(proc, b'"ready"')
    proc.send_signal(signum)
    rest, _ = proc.communicate(timeout=10)
    events = check(head + rest, proc.returncode)
    assert proc.returncode == expected
    assert events[-3]["type"] == "tool_result" and events[-3]["status"] == "cancelled"
    assert events[-2]["code"] == "INTERRUPTED" and events[-1]["subtype"] == "interrupted"


def test_second_signal_does_not_wait_for_slow_cleanup(tmp_path: Path) -> None:
    proc = start_python(
        python_script(
            tmp_path,
            HEADER
            + """
with Stream("job") as s:
    try:
        s.status("ready")
        time.sleep(30)
    finally:
        s.status("cleaning up")
        time.sleep(30)
""",
        )
    )
    head = read_until(proc, b'"ready"')
    proc.send_signal(signal.SIGTERM)
    head += read_until(proc, b"cleaning up")
    began = time.monotonic()
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=10)
    assert time.monotonic() - began < 10
    events = check(head + rest, proc.returncode)
    assert proc.returncode == 143  # the first signal decides the outcome
    assert events[-1]["subtype"] == "interrupted"


def test_a_second_signal_ends_a_producer_whose_stdout_is_not_read(tmp_path: Path) -> None:
    """Stuck writing to a full pipe, the first signal waits for the line; the second stops waiting."""
    script = (
        HEADER
        + """
with Stream("job") as s:
    for _ in range(100_000):
        s.message_delta("x" * 200, message_id="m1")
"""
    )
    code, err = signal_twice_with_stdout_unread(start_python(python_script(tmp_path, script)))
    assert code == 130, err
    assert b"stdout is not being read" in err and b"Traceback" not in err


def test_a_second_signal_ends_a_producer_whose_ending_is_stuck_on_an_unread_stdout(tmp_path: Path) -> None:
    """The first signal unwinds the run; its cleanup fills the pipe; the second signal stops waiting."""
    script = (
        HEADER
        + """
with Stream("job") as s:
    try:
        s.status("ready")  # inside: a signal as it is written is raised right after it
        time.sleep(30)
    finally:
        for _ in range(100_000):
            s.message_delta("x" * 200, message_id="m1")
"""
    )
    proc = start_python(python_script(tmp_path, script))
    read_until(proc, b'"ready"')
    proc.send_signal(signal.SIGTERM)
    wait_until_stdout_is_full(proc)
    proc.send_signal(signal.SIGINT)
    code, err = exit_after(proc)
    assert code == 143, err  # the first signal's code
    assert b"stdout is not being read" in err and b"Traceback" not in err


def test_closed_stdout_exits_quietly_with_documented_code(tmp_path: Path) -> None:
    script = python_script(
        tmp_path,
        HEADER
        + """
with Stream("job") as s:
    for i in range(100000):
        s.status("tick", str(i))
""",
    )
    proc = subprocess.Popen(
        f"{sys.executable} {script} | head -1",
        shell=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        executable="/bin/bash",
    )
    out, err = proc.communicate(timeout=30)
    assert out.count(b"\n") == 1 and b'"type":"start"' in out
    assert b"Traceback" not in err and b"BrokenPipe" not in err
    status = subprocess.run(
        ["bash", "-c", f"{sys.executable} {script} | head -1 >/dev/null; echo ${{PIPESTATUS[0]}}"],
        capture_output=True,
        timeout=30,
    )
    assert status.stdout.strip() == b"141"


def test_stray_prints_go_to_stderr(tmp_path: Path) -> None:
    code, events, err = run(
        tmp_path,
        """
import subprocess
with Stream("job") as s:
    print("a stray print")
    os.write(1, b"a raw write to fd 1\\n")
    subprocess.run(["echo", "a child process"])
    s.message("done")
""",
    )
    assert code == 0
    assert [e["type"] for e in events] == ["start", "message", "result"]
    assert b"a stray print" in err and b"a raw write" in err and b"a child process" in err


def test_unfinished_stream_outside_with_is_closed_at_exit(tmp_path: Path) -> None:
    code, events, _ = run(
        tmp_path,
        """
s = Stream("job").start()
s.message("forgot to finish")
""",
    )
    assert code == 1
    assert events[-2]["code"] == "NOT_FINISHED" and events[-1]["exit_code"] == 1


def test_each_event_is_readable_before_the_producer_goes_on(tmp_path: Path) -> None:
    proc = start_python(
        python_script(
            tmp_path,
            HEADER
            + """
with Stream("job") as s:
    for i in range(3):
        s.status("waiting", str(i))
        sys.stdin.readline()
""",
        ),
        stdin=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdout.readline()  # start
    for i in range(3):
        line = proc.stdout.readline()  # would block forever if the event sat in a buffer
        assert json.loads(line)["message"] == str(i)
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0 and b'"type":"result"' in out


@pytest.mark.parametrize("fail", [False, True])
def test_json_format_prints_exactly_one_object(tmp_path: Path, fail: bool) -> None:
    proc = start_python(
        python_script(
            tmp_path,
            HEADER
            + f"""
with Stream("job", output_format="json") as s:
    s.message("the answer")
    if {fail}:
        raise RuntimeError("broken")
""",
        )
    )
    out, _ = proc.communicate(timeout=20)
    lines = out.splitlines()
    assert len(lines) == 1
    obj = json.loads(lines[0])
    assert obj["type"] == "result" and obj["exit_code"] == proc.returncode == (1 if fail else 0)
    assert obj["result"] == "the answer"


def test_text_format_keeps_stdout_for_the_answer(tmp_path: Path) -> None:
    proc = start_python(
        python_script(
            tmp_path,
            HEADER
            + """
with Stream("job", output_format="text") as s:
    with s.tool_call("ls", {}) as call:
        call.succeed("a b")
    s.message_delta("Hel", message_id="m1")
    s.message_delta("lo", message_id="m1")
    s.message("Hello", message_id="m1")
""",
        ),
        env={"NO_COLOR": "1"},
    )
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert out == b"Hello\n"
    assert b"\xe2\x86\x92 ls" in err and b"\x1b[" not in err


def test_finish_is_idempotent() -> None:
    buffer = io.BytesIO()
    with Stream_for(buffer) as s:
        first = s.finish(ok=False, exit_code=5)
        second = s.finish()
    assert first is second
    events = [json.loads(line) for line in buffer.getvalue().splitlines()]
    assert [e["type"] for e in events] == ["start", "result"] and events[-1]["exit_code"] == 5


def Stream_for(buffer: io.BytesIO):
    from agentstream.stream import Stream

    return Stream("job", out=buffer)


def test_signal_during_the_tool_call_write_still_gets_a_result(tmp_path: Path) -> None:
    """An observer runs inside the write path, so the signal it raises is held until the line is whole."""
    code, events, _ = run(
        tmp_path,
        """
import signal
with Stream("job") as s:
    s.observe(lambda e: e.type == "tool_call" and os.kill(os.getpid(), signal.SIGTERM))
    with s.tool_call("slow", {}):
        time.sleep(30)
""",
    )
    assert code == 143
    assert [e["type"] for e in events] == ["start", "tool_call", "tool_result", "error", "result"]
    assert events[2]["status"] == "cancelled"


def test_streams_one_after_another_in_one_process(tmp_path: Path) -> None:
    proc = start_python(
        python_script(
            tmp_path,
            HEADER
            + """
import signal
for turn in range(2):
    with Stream("turn") as s:
        s.message(f"answer {turn}")
    handler = signal.getsignal(signal.SIGTERM)
    assert getattr(handler, "__self__", None) is None, "the stream's handler is handed back between streams"
""",
        )
    )
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err.decode()
    lines = out.splitlines()
    assert len(lines) == 6 and b"answer 0" in lines[1] and b"answer 1" in lines[4]
    assert b"answer" not in err
    for half in (lines[:3], lines[3:]):
        check(b"\n".join(half) + b"\n", 0)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_the_result_is_published_waits_until_it_is(tmp_path: Path, signum: int) -> None:
    """The bus (an observer) still gets the result when a signal lands as it is published; the code stands."""
    published = tmp_path / "published"
    code, events, err = run(
        tmp_path,
        f"""
import signal
def signal_arrives(event):
    if event.type == "result":
        signal.raise_signal({int(signum)})  # as if it landed while the bus stores the result
        time.sleep(0.05)  # the handler has run by now
def bus(event):
    if event.type == "result":
        open({str(published)!r}, "w").write(event.subtype)
with Stream("job") as s:
    s.observe(signal_arrives)
    s.observe(bus)
    s.message("done")
""",
    )
    assert code == 0 and events[-1]["subtype"] == "success", err
    assert published.read_text() == "success"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_as_the_stream_hands_the_signals_back_keeps_the_results_code(
    tmp_path: Path, signum: int
) -> None:
    """Once the stream has handed the signals back to the command line, a signal must still find the result's
    code there: the command line's handler would otherwise take the run for one not yet ended (128 + signum)."""
    code, events, err = run(
        tmp_path,
        f"""
import signal
from agentstream import _signals
_signals.install_cli_handlers()
_signals.deliver_held()
restore = _signals.SignalHandlers.restore
def restore_then_signal(self, *args, **options):
    restore(self, *args, **options)
    if getattr(self.handler, "__name__", "") == "_on_signal":  # the stream's, not another's
        signal.raise_signal({int(signum)})  # lands the moment the command line's handler is back
with Stream("job") as s:
    _signals.SignalHandlers.restore = restore_then_signal
    s.message("done")
""",
    )
    assert code == 0 and events[-1]["subtype"] == "success", err
