"""The producer refuses what would make its stream lie or break, at the call that did it.

A contradictory outcome, an argument of the wrong type, an event after the
result, a second session on the same stdout: each is an error where it happens,
and the stream on stdout still ends with exactly one valid ``result``. Endings
that are not failures of the program (a cancelled task, a signal, ``sys.exit``
with a message) say in words what happened.
"""

from __future__ import annotations

import io
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentstream import protocol as p
from agentstream.stream import Stream
from conftest import python_script, start_python
from test_stream_guarantees import HEADER, check, run


def events_of(buffer: io.BytesIO) -> list[dict[str, Any]]:
    return check(buffer.getvalue(), 0)


@pytest.mark.parametrize(
    ("call", "ok", "exit_code"),
    [
        ("s.finish(exit_code=3)", False, 3),
        ("s.finish(ok=False)", False, 1),
        ("s.finish(exit_code=0)", True, 0),
    ],
)
def test_one_side_of_the_outcome_sets_the_other(tmp_path: Path, call: str, ok: bool, exit_code: int) -> None:
    code, events, _ = run(tmp_path, f'with Stream("job") as s:\n    {call}\n')
    assert code == exit_code == events[-1]["exit_code"]
    assert events[-1]["ok"] is ok


@pytest.mark.parametrize(
    ("call", "fix"),
    [
        ("s.finish(ok=False, exit_code=0)", "leave exit_code out"),
        ("s.finish(ok=True, exit_code=3)", "pass ok=False"),
        ('s.fail("X", "m", exit_code=0)', "call finish()"),
    ],
)
def test_a_contradictory_outcome_is_refused_and_the_run_still_ends(
    tmp_path: Path, call: str, fix: str
) -> None:
    """Never ``ok:false`` with exit 0 (a failure that reads as success), nor ``ok:true`` with exit 3."""
    code, events, err = run(tmp_path, f'with Stream("job") as s:\n    s.message("hi")\n    {call}\n')
    assert code == 1
    assert [e["type"] for e in events] == ["start", "message", "error", "result"]
    assert events[-2]["message"].startswith("ValueError:") and fix in events[-2]["message"]
    assert b"ValueError" in err


BAD_CALLS: list[tuple[Callable[[Stream], object], type[Exception]]] = [
    (lambda s: s.message(5), TypeError),  # type: ignore[arg-type]
    (lambda s: s.message("x", role="robot"), ValueError),  # type: ignore[arg-type]
    (lambda s: s.message_delta(b"x", message_id="m"), TypeError),  # type: ignore[arg-type]
    (lambda s: s.reasoning_delta("x", reasoning_id=7), TypeError),  # type: ignore[arg-type]
    (lambda s: s.progress("p", percent="lots"), TypeError),
    (lambda s: s.progress("p", percent=float("nan")), ValueError),
    (lambda s: s.progress("p", ts="yesterday"), TypeError),  # not the event's own field: the stream stamps it
    (lambda s: s.step_event("build", "done"), ValueError),  # type: ignore[arg-type]
    (lambda s: s.log("x", level="fatal"), ValueError),  # type: ignore[arg-type]
    (lambda s: s.status(None), TypeError),  # type: ignore[arg-type]
    (lambda s: s.event("saved", {"at": object()}), TypeError),
    (lambda s: s.record_usage("m", input_tokens=1.5), TypeError),
    (lambda s: s.record_usage("m", output_tokens=True), TypeError),
    (lambda s: s.error("E", "m", retry_in_ms="soon"), TypeError),  # type: ignore[arg-type]
    (lambda s: s.error("E", "m", recoverable=False), ValueError),  # a fatal error ends the run: fail()
    (lambda s: s.finish(next_actions=[p.NextAction(command=5, description="d")]), TypeError),  # type: ignore[arg-type]
    (
        lambda s: s.fail("E", "m", next_actions=[p.NextAction(command="c", description="d", params=[1])]),
        TypeError,
    ),  # type: ignore[arg-type]
    (lambda s: s.finish(result=5), TypeError),  # type: ignore[arg-type]
    (lambda s: s.fail("E", 5), TypeError),  # type: ignore[arg-type]
    (lambda s: s.tool_call("shell", ["ls"]).__enter__(), TypeError),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("call", "error"), BAD_CALLS)
def test_a_bad_argument_is_refused_before_anything_is_written(
    call: Callable[[Stream], object], error: type[Exception]
) -> None:
    buffer = io.BytesIO()
    with Stream("job", out=buffer) as s:
        with pytest.raises(error):
            call(s)
        s.message("still fine")
    events = events_of(buffer)
    assert [e["type"] for e in events] == ["start", "message", "result"]
    assert events[-1]["result"] == "still fine"


def test_a_bad_argument_in_a_process_ends_its_stream_as_an_exception(tmp_path: Path) -> None:
    code, events, err = run(tmp_path, 'with Stream("job") as s:\n    s.message(5)\n')
    assert code == 1 and [e["type"] for e in events] == ["start", "error", "result"]
    assert events[-2]["message"] == "TypeError: content must be a str, not int"
    assert b"TypeError" in err


def test_the_result_stays_valid_whatever_was_emitted_raw() -> None:
    """``emit`` checks nothing (it is the hot path), but what it took in never spoils the ``result``."""
    buffer = io.BytesIO()
    with Stream("job", out=buffer) as s:
        s.emit(p.Message(message_id="m", role="assistant", content=5))  # type: ignore[arg-type]
    result = p.decode(buffer.getvalue().splitlines()[-1])
    assert isinstance(result, p.Result) and result.ok and result.result is p.UNSET


def test_a_cancelled_task_ends_the_stream_as_interrupted_and_stays_cancelled(tmp_path: Path) -> None:
    code, events, err = run(
        tmp_path,
        """
import asyncio
async def main():
    with Stream("job") as s:
        s.message("hi")
        await asyncio.sleep(30)
async def runner():
    task = asyncio.create_task(main())
    await asyncio.sleep(0.2)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        print("caught CancelledError", file=sys.stderr)
asyncio.run(runner())
""",
    )
    assert code == 130  # the process still exits with the result's code
    assert events[-2]["code"] == "INTERRUPTED" and events[-2]["message"] == "the asyncio task was cancelled"
    assert events[-1]["subtype"] == "interrupted"
    assert err == b"caught CancelledError\n", err  # propagated unchanged; no traceback


def test_a_cancelled_task_in_a_stream_that_does_not_own_the_process() -> None:
    import asyncio

    buffer = io.BytesIO()

    async def main() -> None:
        with Stream("job", out=buffer):
            raise asyncio.CancelledError("user pressed stop")

    with pytest.raises(asyncio.CancelledError, match="user pressed stop"):
        asyncio.run(main())
    events = check(buffer.getvalue(), 130)
    assert events[-2]["message"] == "the asyncio task was cancelled: user pressed stop"


def test_emitting_after_finish_is_an_error(tmp_path: Path) -> None:
    code, events, err = run(
        tmp_path,
        'with Stream("job") as s:\n    s.finish()\n    s.message("lost?")\n    print("not reached")\n',
    )
    assert code == 0 and [e["type"] for e in events] == ["start", "result"]
    assert b"RuntimeError" in err and b"before finish()/fail()" in err and b"not reached" not in err


def test_a_block_that_ends_the_run_itself_gets_no_late_events() -> None:
    """``fail()`` inside a tool call or step: its ending already closed them, so their exits add nothing."""
    buffer = io.BytesIO()
    with Stream("job", out=buffer) as s, s.step("deploy"), s.tool_call("shell", {"command": "ls"}):
        s.fail("TOOL_FAILED", "ls is gone", exit_code=4)
    events = check(buffer.getvalue(), 4)
    assert [e["type"] for e in events] == ["start", "step", "tool_call", "tool_result", "error", "result"]


def test_events_from_another_thread_after_the_result_are_dropped_and_said_once(tmp_path: Path) -> None:
    code, events, err = run(
        tmp_path,
        """
import threading
with Stream("job") as s:
    s.message("done")
late = threading.Thread(target=lambda: [s.log(f"late {n}") for n in range(3)])
late.start()
late.join()
""",
    )
    assert code == 0 and [e["type"] for e in events] == ["start", "message", "result"]
    assert err.count(b"came after the stream's result") == 1, err


def test_a_finished_stream_cannot_be_entered_again() -> None:
    buffer = io.BytesIO()
    s = Stream("job", out=buffer)
    with s:
        s.message("a")
    with pytest.raises(RuntimeError, match="make a new Stream"):
        s.__enter__()  # a second ``with s:``
    assert [e["type"] for e in events_of(buffer)] == ["start", "message", "result"]


def test_a_second_stream_on_the_same_stdout_is_refused(tmp_path: Path) -> None:
    code, events, err = run(
        tmp_path,
        """
with Stream("outer") as s:
    with Stream("inner") as t:
        t.message("b")
    s.message("a")
""",
    )
    assert code == 1 and [e["type"] for e in events] == ["start", "error", "result"]
    assert events[0]["command"] == "outer" and "out=..." in events[1]["message"]
    assert b"RuntimeError" in err


@pytest.mark.parametrize("output_format", ["stream-json", "text"])
def test_a_signal_says_what_cut_a_tool_call_and_a_step_short(tmp_path: Path, output_format: str) -> None:
    proc = start_python(
        python_script(
            tmp_path,
            HEADER
            + f"""
with Stream("job", output_format={output_format!r}) as s:
    with s.step("build"), s.tool_call("shell", {{"command": "sleep 30"}}):
        print("ready", file=sys.stderr, flush=True)
        time.sleep(30)
""",
        ),
        env={"NO_COLOR": "1"},
    )
    assert proc.stderr is not None
    while b"ready" not in (line := proc.stderr.readline()):
        assert line, "the producer ended before its tool call ran"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 143
    if output_format == "text":
        assert b"shell cancelled: interrupted by SIGTERM" in err, err
        return
    events = check(out, 143)
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["status"] == "cancelled" and result["error"] == "interrupted by SIGTERM"
    failed = next(e for e in events if e["type"] == "step" and e["status"] == "failed")
    assert failed["error"] == "interrupted by SIGTERM"


def test_sys_exit_with_a_message_reports_the_message(tmp_path: Path) -> None:
    code, events, err = run(tmp_path, 'with Stream("job") as s:\n    sys.exit("fatal: config missing")\n')
    assert code == 1
    assert events[-2]["message"] == "fatal: config missing"
    assert events[-1]["error"]["message"] == "fatal: config missing"
    assert err == b"fatal: config missing\n"  # as Python prints it, once


def test_mistaken_arguments_fail_at_once_with_what_to_pass_instead() -> None:
    from agentstream import read, spawn

    with pytest.raises(TypeError, match="a binary file"):
        Stream("t", out=io.StringIO())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="list of words, such as \\['gemini', '-p', 'hi'\\]"):
        spawn("gemini -p hi")
    with pytest.raises(TypeError, match="cannot read events from dict"):
        list(read({"type": "start"}))  # type: ignore[arg-type]


def test_a_stream_that_owns_the_process_is_refused_outside_the_main_thread() -> None:
    """Only the main thread can set the exit code and take the signals; a worker thread passes out=."""
    failures: list[BaseException] = []

    def work() -> None:
        try:
            Stream("in-thread").start()
        except RuntimeError as exc:
            failures.append(exc)
        with Stream("in-thread", out=written, owns_process=False) as stream:
            stream.message("fine")

    written = io.BytesIO()
    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    (refused,) = failures
    assert "owns_process=False" in str(refused)
    assert [line.split(b'"')[3] for line in written.getvalue().splitlines()] == [
        b"start",
        b"message",
        b"result",
    ]
