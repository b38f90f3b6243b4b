"""The producer under what real programs do to it: threads still working at the end, text from file names that
UTF-8 cannot encode, a fork, signals while the program winds down, events handed to ``emit`` that would break the
result. Each on a real producer process, its stdout checked by the validator against its exit code."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from conftest import python_script, start_python
from test_stream_guarantees import HEADER, check, run


@pytest.mark.parametrize("work", ["tool_calls", "deltas"])
def test_threads_still_emitting_when_the_with_block_ends_leave_a_whole_stream(
    tmp_path: Path, work: str
) -> None:
    """Four threads open and close tool calls (or stream deltas) without pause while the run ends under them:
    nothing a thread adds slips between the closing of the open work and the result, however often it is tried."""
    for _ in range(6):
        run(
            tmp_path,
            f"""
import threading
with Stream("race") as s:
    def tool_calls(n):
        while True:
            with s.tool_call("fetch", {{"n": n}}) as call:
                call.succeed("ok")
    def deltas(n):
        while True:
            s.message_delta("word ", message_id=f"m{{n}}")
    for n in range(4):
        threading.Thread(target={work}, args=(n,), daemon=True).start()
    time.sleep(0.05)
""",
        )  # run() fails on any violation: a second result for a call, a delta after its complete event…


def test_text_with_lone_surrogates_is_written_with_replacement_characters(tmp_path: Path) -> None:
    """A file name read with surrogateescape, in a message, a tool's output and the error of an exception."""
    code, events, err = run(
        tmp_path,
        r"""
name = b"caf\xe9.txt".decode("utf-8", "surrogateescape")
with Stream("job") as s:
    with s.tool_call("list", {"dir": "."}) as call:
        call.succeed(name)
    s.message(f"found {name}")
    raise ValueError(f"cannot open {name}")
""",
    )
    assert code == 1, err
    assert [e["type"] for e in events] == ["start", "tool_call", "tool_result", "message", "error", "result"]
    assert events[2]["output"] == "caf\ufffd.txt" and events[3]["content"] == "found caf\ufffd.txt"
    assert events[4]["message"] == "ValueError: cannot open caf\ufffd.txt"
    assert events[-1]["result"] == "found caf\ufffd.txt"


def test_a_result_text_with_a_lone_surrogate_still_ends_the_run(tmp_path: Path) -> None:
    code, events, err = run(
        tmp_path,
        r"""
with Stream("job") as s:
    s.finish(result="\udcff done")
""",
    )
    assert code == 0 and events[-1]["result"] == "\ufffd done", err


def test_emit_refuses_what_would_break_the_run_before_it_takes_a_seq(tmp_path: Path) -> None:
    code, events, err = run(
        tmp_path,
        """
from agentstream import protocol as p
with Stream("job") as s:
    for bad in (
        p.Usage(model="m", input_tokens=1, output_tokens=1, cost_usd=float("nan")),
        p.Result(ok=True, subtype="success", exit_code=0),
        p.Start(command="another"),
        p.Message(message_id="m", role="assistant", content=object()),
    ):
        try:
            s.emit(bad)
        except (TypeError, ValueError) as exc:
            print(type(bad).__name__, "refused:", exc, file=sys.stderr)
    s.message("still whole")
""",
    )
    assert code == 0
    assert [e["type"] for e in events] == ["start", "message", "result"]  # no gap in seq: check() says so
    assert err.count(b"refused:") == 4, err


@pytest.mark.parametrize("how", ["sys.exit(0)", "raise RuntimeError('in the child')"])
def test_a_forked_child_leaving_the_with_block_writes_nothing_of_its_parents_stream(
    tmp_path: Path, how: str
) -> None:
    code, events, err = run(
        tmp_path,
        f"""
with Stream("job") as s:
    s.message("before the fork")
    pid = os.fork()
    if pid == 0:
        try:
            s.message("from the child")
        except RuntimeError as exc:
            print("child refused:", exc, file=sys.stderr)
        {how}
    os.waitpid(pid, 0)
    s.message("after the fork")
""",
    )
    assert code == 0, err
    assert [e["type"] for e in events] == ["start", "message", "message", "result"]
    assert b"child refused: this process is a fork" in err


@pytest.mark.parametrize(("body_end", "result_code"), [("pass", 0), ("sys.exit(3)", 3)])
def test_a_signal_while_the_program_winds_down_keeps_the_results_code(
    tmp_path: Path, body_end: str, result_code: int
) -> None:
    """The stream is over and the program is still in its atexit handlers: SIGTERM ends it, with the run's code."""
    proc = start_python(
        python_script(
            tmp_path,
            HEADER
            + f"""
import atexit
ready = {str(tmp_path / "ready")!r}
atexit.register(time.sleep, 10)
atexit.register(lambda: open(ready, "w").close())  # atexit runs the last registered first
with Stream("job") as s:
    s.message("done")
    {body_end}
""",
        )
    )
    deadline = time.monotonic() + 20
    while not (tmp_path / "ready").exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == result_code
    check(out, proc.returncode)


def test_a_second_signal_mid_line_waits_for_the_line_when_the_output_takes_it(tmp_path: Path) -> None:
    """Two signals land while a line is written to a pipe that is being read: that is a busy output, not one
    stuck on a reader that left, so the line is finished and the run ends whole (one signal's ending)."""
    code, events, err = run(
        tmp_path,
        """
import signal
def twice(event):
    if event.type == "message":
        for _ in range(2):  # one after the other: the handler runs (and holds the signal) in the sleep
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
with Stream("job") as s:
    s.observe(twice)
    s.message("busy")
    time.sleep(10)
""",
    )
    assert code == 130, err
    assert [e["type"] for e in events] == ["start", "message", "error", "result"]
    assert b"not being read" not in err


def test_a_line_a_descriptor_takes_only_part_of_is_finished_before_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pipe may take part of a long line (a write cut short by a signal): the rest goes out before anything
    else, for an event written as it came and for one mended first (a lone surrogate)."""
    import io
    import os

    from agentstream import protocol as p
    from agentstream import stream
    from agentstream.validate import validate_stream

    def half_a_write(fd: int, data: bytearray) -> int:
        return os.write(fd, bytes(data[: max(1, len(data) // 2)]))

    monkeypatch.setattr(stream, "_STAMP_KINDS", (*stream._STAMP_KINDS[:4], half_a_write))
    read_end, write_end = os.pipe()
    try:
        with stream.Stream("halves", out=write_end) as producer:
            producer.message("x" * 5000)
            producer.message("file \udc80.txt")
            producer.log("done")
        os.close(write_end)
        write_end = -1
        with os.fdopen(read_end, "rb") as pipe:
            read_end = -1
            written = pipe.read()
    finally:
        for fd in (read_end, write_end):
            if fd >= 0:
                os.close(fd)
    events = [p.decode(line) for line in written.splitlines()]
    assert [event.type for event in events] == ["start", "message", "message", "log", "result"]
    assert events[2].content == "file \ufffd.txt"  # type: ignore[union-attr]
    assert list(validate_stream(io.BytesIO(written))) == []
