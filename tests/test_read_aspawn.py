"""aspawn(): the asyncio spawn, against real child processes that crash, hang, vanish or ignore SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from _consumer_support import GRANDCHILD_HOLDS_BOTH_PIPES, agent_script, assert_valid_stream, is_synthetic
from agentstream import AsyncSpawn, aspawn
from agentstream import protocol as p

FAST = {"exit_timeout_s": 0.3, "cancel_grace_s": 0.3}


def run_bounded(
    child: AsyncSpawn, *, on_event: Callable[[p.AnyEvent], None] | None = None
) -> list[p.AnyEvent]:
    """Iterate the child in an event loop; fail (instead of hanging the suite) if it does not end within 20 s."""
    events: list[p.AnyEvent] = []

    async def consume() -> None:
        async with child:
            async for event in child:
                events.append(event)
                if on_event is not None:
                    on_event(event)

    async def bounded() -> None:
        try:
            await asyncio.wait_for(consume(), 20)
        except TimeoutError:
            child.kill()
            pytest.fail(f"aspawn() did not finish; events so far: {[e.type for e in events]}")

    asyncio.run(bounded())
    return events


def fatal(events: list[p.AnyEvent]) -> p.Error:
    error = events[-2]
    assert isinstance(error, p.Error) and not error.recoverable and error.synthetic is True
    return error


def test_a_well_behaved_child_streams_its_own_events(tmp_path: Path) -> None:
    argv = agent_script(tmp_path, "stream.message('hello'); stream.finish(result='done')")
    child = aspawn(argv)
    events = assert_valid_stream(run_bounded(child))
    assert [e.type for e in events] == ["start", "message", "result"]
    assert not any(is_synthetic(e) for e in events)
    assert child.returncode == 0 and child.dialect == "canonical"


def test_many_turns_are_read_to_the_end_of_the_session(tmp_path: Path) -> None:
    code = """
    stream.message('one'); stream.finish(result='first')
    second = Stream('fake-agent', out=1, owns_process=False, session_id=stream.session_id)
    second.start(); second.message('two'); second.finish(result='second')
    """
    child = aspawn(agent_script(tmp_path, code), turns="many")
    events = run_bounded(child)
    results = [e for e in events if isinstance(e, p.Result)]
    assert [r.result for r in results] == ["first", "second"] and child.returncode == 0
    one_turn = run_bounded(aspawn(agent_script(tmp_path, code, "again.py")))
    assert [e.type for e in one_turn][-1] == "result" and sum(e.type == "result" for e in one_turn) == 1


def test_a_child_that_crashes_mid_stream(tmp_path: Path) -> None:
    argv = agent_script(
        tmp_path,
        """
        stream.message("half of the answer")
        sys.stderr.write("Traceback: something broke\\n"); sys.stderr.flush()
        os._exit(3)
        """,
    )
    child = aspawn(argv)
    events = assert_valid_stream(run_bounded(child))
    assert [e.type for e in events] == ["start", "message", "error", "result"]
    error = fatal(events)
    assert error.code == "PROCESS_CRASHED" and "exit status 3" in error.message
    assert "something broke" in error.details["stderr_tail"]
    result = events[-1]
    assert isinstance(result, p.Result) and result.exit_code == 3 and result.synthetic is True
    assert result.result == "half of the answer"
    assert child.returncode == 3 and "something broke" in child.stderr


def test_a_missing_binary(tmp_path: Path) -> None:
    child = aspawn([str(tmp_path / "no-such-agent"), "-p", "hi"])
    events = assert_valid_stream(run_bounded(child))
    assert [e.type for e in events] == ["start", "error", "result"]
    assert all(is_synthetic(e) for e in events)
    error = fatal(events)
    assert error.code == "CLI_NOT_FOUND" and "PATH" in str(error.fix)
    assert events[-1].exit_code == 127  # type: ignore[union-attr]
    assert child.returncode is None


def test_a_child_that_hangs_after_its_result(tmp_path: Path) -> None:
    argv = agent_script(
        tmp_path,
        """
        stream.finish(result="all done")
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("late noise", flush=True)
        time.sleep(60)
        """,
    )
    child = aspawn(argv, **FAST)
    events = assert_valid_stream(run_bounded(child))
    assert events[-1].synthetic is not True and events[-1].ok  # type: ignore[union-attr]
    assert child.returncode == -signal.SIGKILL  # ignored SIGTERM, so the grace period ended in SIGKILL


def test_a_child_that_closes_stdout_but_never_exits(tmp_path: Path) -> None:
    argv = agent_script(tmp_path, "stream.message('done, I think'); os.close(1); time.sleep(60)")
    child = aspawn(argv, **FAST)
    events = assert_valid_stream(run_bounded(child))
    error = fatal(events)
    assert error.code == "STREAM_TRUNCATED"
    assert "had not exited" in error.message and "SIGTERM" in error.message
    assert child.returncode == -signal.SIGTERM
    assert events[-1].exit_code == 1  # type: ignore[union-attr]  # a failure, not a run interrupted by SIGTERM


def test_an_exited_child_whose_grandchild_holds_stdout(tmp_path: Path) -> None:
    argv = agent_script(
        tmp_path,
        """
        import subprocess
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        sys.stderr.write(f"helper {helper.pid}\\n"); sys.stderr.flush()
        stream.message("leaving a helper behind")
        os._exit(0)
        """,
    )
    child = aspawn(argv, new_process_group=True, **FAST)
    events = assert_valid_stream(run_bounded(child))
    assert fatal(events).code == "STREAM_TRUNCATED"
    helper = int(child.stderr.split()[1])
    _assert_gone(helper)


def test_cancel_escalates_to_sigkill_for_a_child_that_ignores_sigterm(tmp_path: Path) -> None:
    argv = agent_script(
        tmp_path,
        """
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stream.message("ready")
        time.sleep(60)
        """,
    )
    child = aspawn(argv, **FAST)

    def cancel_when_ready(event: p.AnyEvent) -> None:
        if isinstance(event, p.Message):
            child.cancel()

    events = assert_valid_stream(run_bounded(child, on_event=cancel_when_ready))
    error = fatal(events)
    assert error.code == "INTERRUPTED" and "SIGTERM" in error.message and "SIGKILL" in error.message
    result = events[-1]
    assert isinstance(result, p.Result) and result.subtype == "interrupted" and result.exit_code == 137


def test_stderr_as_log_events_arrive_before_later_output(tmp_path: Path) -> None:
    argv = agent_script(
        tmp_path,
        """
        sys.stderr.write("warming up\\n"); sys.stderr.flush()
        time.sleep(0.2)
        stream.message("hi")
        stream.finish()
        """,
    )
    events = assert_valid_stream(run_bounded(aspawn(argv, stderr_as_logs=True)))
    logs = [e for e in events if isinstance(e, p.Log)]
    assert [(log.message, log.synthetic) for log in logs] == [("warming up", True)]
    assert events.index(logs[0]) < [e.type for e in events].index("message")


def test_leaving_the_loop_early_stops_the_child(tmp_path: Path) -> None:
    argv = agent_script(tmp_path, "stream.message('one'); time.sleep(60)")
    child = aspawn(argv, **FAST)

    async def first_message() -> None:
        async with child:
            async for event in child:
                if isinstance(event, p.Message):
                    break

    asyncio.run(asyncio.wait_for(first_message(), 20))
    assert child.returncode == -signal.SIGTERM


def _assert_gone(pid: int) -> None:
    """Dead or a zombie (an orphan's zombie waits for whatever reaps orphans here)."""
    for _ in range(100):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return
        if state in ("Z", "X"):
            return
        threading.Event().wait(0.05)
    import os

    os.kill(pid, signal.SIGKILL)
    pytest.fail(f"process {pid} was left running")


def test_a_grandchild_holding_stdout_and_stderr_costs_exit_timeout_s_and_no_more(tmp_path: Path) -> None:
    """The documented bound: the reader stops waiting ``exit_timeout_s`` after the child's exit."""
    child = aspawn(
        agent_script(tmp_path, GRANDCHILD_HOLDS_BOTH_PIPES), exit_timeout_s=1.0, cancel_grace_s=0.3
    )
    began = time.monotonic()
    events = assert_valid_stream(run_bounded(child))
    took = time.monotonic() - began
    helper = int(child.stderr.split()[1])
    os.kill(helper, signal.SIGKILL)
    assert fatal(events).code == "STREAM_TRUNCATED"
    assert 1.0 <= took < 2.0, f"took {took:.1f}s for exit_timeout_s=1.0"  # a fixed 3 s came on top before


def test_no_traceback_at_exit_when_a_grandchild_holds_the_pipes(tmp_path: Path) -> None:
    """The pipes' transport is closed while the loop runs, not collected after it closed."""
    argv = agent_script(tmp_path, GRANDCHILD_HOLDS_BOTH_PIPES)
    program = tmp_path / "consumer.py"
    program.write_text(
        textwrap.dedent(
            f"""
            import asyncio, gc, os, signal
            from agentstream import aspawn

            async def main():
                async with aspawn({argv!r}, exit_timeout_s=0.3) as child:
                    async for event in child:
                        pass
                return child

            child = asyncio.run(main())
            os.kill(int(child.stderr.split()[1]), signal.SIGKILL)
            del child
            gc.collect()
            print("done")
            """
        )
    )
    done = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\n"
    assert done.stderr == "", done.stderr
