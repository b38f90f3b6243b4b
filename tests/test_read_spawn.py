"""spawn(): real child processes that crash, get killed, hang or ignore SIGTERM — the stream always ends."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from _consumer_support import GRANDCHILD_HOLDS_BOTH_PIPES, agent_script, assert_valid_stream, is_synthetic
from agentstream import protocol as p
from agentstream.consumer import Spawn, spawn

FAST = {"exit_timeout_s": 0.3, "cancel_grace_s": 0.3}


def run_bounded(child: Spawn, *, on_event: Callable[[p.AnyEvent], None] | None = None) -> list[p.AnyEvent]:
    """Iterate the child in a thread; fail (instead of hanging the suite) if it does not end within 20 s."""
    events: list[p.AnyEvent] = []
    failure: list[BaseException] = []

    def consume() -> None:
        try:
            with child:
                for event in child:
                    events.append(event)
                    if on_event is not None:
                        on_event(event)
        except BaseException as exc:  # reported in the test's thread below
            failure.append(exc)

    worker = threading.Thread(target=consume, daemon=True)
    worker.start()
    worker.join(20)
    if worker.is_alive():
        child.kill()
        pytest.fail(f"spawn() did not finish; events so far: {[e.type for e in events]}")
    if failure:
        raise failure[0]
    return events


def fatal(events: list[p.AnyEvent]) -> p.Error:
    error = events[-2]
    assert isinstance(error, p.Error) and not error.recoverable and error.synthetic is True
    return error


def test_a_child_that_crashes_mid_stream(tmp_path: Path) -> None:
    argv = agent_script(
        tmp_path,
        """
        stream.message("half of the answer")
        sys.stderr.write("Traceback: something broke\\n"); sys.stderr.flush()
        os._exit(3)
        """,
    )
    child = spawn(argv)
    events = assert_valid_stream(run_bounded(child))
    assert [e.type for e in events] == ["start", "message", "error", "result"]
    error = fatal(events)
    assert error.code == "PROCESS_CRASHED" and "exit status 3" in error.message
    assert "something broke" in error.details["stderr_tail"]
    result = events[-1]
    assert isinstance(result, p.Result) and result.exit_code == 3 and result.synthetic is True
    assert result.result == "half of the answer"
    assert child.returncode == 3 and "something broke" in child.stderr


def test_a_child_killed_by_sigkill(tmp_path: Path) -> None:
    argv = agent_script(tmp_path, "stream.message('working'); time.sleep(60)")
    child = spawn(argv)

    def kill_on_message(event: p.AnyEvent) -> None:
        if isinstance(event, p.Message):
            os.kill(child.pid or 0, signal.SIGKILL)

    events = assert_valid_stream(run_bounded(child, on_event=kill_on_message))
    assert fatal(events).code == "PROCESS_CRASHED" and "SIGKILL" in fatal(events).message
    assert events[-1].exit_code == 128 + signal.SIGKILL  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("ends_itself", "status"),
    [
        ("os.kill(os.getpid(), signal.SIGTERM)", 128 + signal.SIGTERM),  # killed by it, from outside
        ("os._exit(143)", 143),  # its own handler exits 128 + SIGTERM, as Claude Code does
        ("os._exit(130)", 130),
        ("os.kill(os.getpid(), signal.SIGHUP)", 128 + signal.SIGHUP),
    ],
)
def test_a_child_interrupted_without_a_result_ends_interrupted(
    tmp_path: Path, ends_itself: str, status: int
) -> None:
    """Stopped by SIGINT, SIGTERM or SIGHUP (or exiting 128 + one of them) is an interruption, not a crash."""
    argv = agent_script(tmp_path, f"import signal\nstream.message('working')\n{ends_itself}")
    events = assert_valid_stream(run_bounded(spawn(argv)))
    error, result = fatal(events), events[-1]
    assert error.code == "INTERRUPTED" and error.message.startswith("the child was interrupted by SIG")
    assert isinstance(result, p.Result) and result.subtype == "interrupted" and result.exit_code == status


def test_a_child_that_exits_0_without_a_result(tmp_path: Path) -> None:
    argv = agent_script(tmp_path, "stream.message('bye'); os._exit(0)")
    events = assert_valid_stream(run_bounded(spawn(argv)))
    assert fatal(events).code == "STREAM_TRUNCATED"
    result = events[-1]
    assert isinstance(result, p.Result) and not result.ok and result.exit_code == 1


def test_a_missing_binary(tmp_path: Path) -> None:
    child = spawn([str(tmp_path / "no-such-agent"), "-p", "hi"])
    events = assert_valid_stream(run_bounded(child))
    assert [e.type for e in events] == ["start", "error", "result"]
    assert all(is_synthetic(e) for e in events)
    error = fatal(events)
    assert error.code == "CLI_NOT_FOUND" and "PATH" in str(error.fix)
    assert events[-1].exit_code == 127  # type: ignore[union-attr]
    assert child.returncode is None


def test_a_child_that_closes_stdout_but_never_exits(tmp_path: Path) -> None:
    argv = agent_script(tmp_path, "stream.message('done, I think'); os.close(1); time.sleep(60)")
    child = spawn(argv, **FAST)
    events = assert_valid_stream(run_bounded(child))
    error = fatal(events)
    assert error.code == "STREAM_TRUNCATED"
    assert "had not exited" in error.message and "SIGTERM" in error.message
    assert child.returncode == -signal.SIGTERM
    assert events[-1].exit_code == 1  # type: ignore[union-attr]  # a failure, not a run interrupted by SIGTERM


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
    child = spawn(argv, **FAST)
    events = assert_valid_stream(run_bounded(child))
    assert events[-1].synthetic is not True and events[-1].ok  # type: ignore[union-attr]
    assert child.returncode == -signal.SIGKILL  # ignored SIGTERM, so the grace period ended in SIGKILL


def test_cancel_escalates_to_sigkill_for_a_child_that_ignores_sigterm(tmp_path: Path) -> None:
    argv = agent_script(
        tmp_path,
        """
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stream.message("ready")
        time.sleep(60)
        """,
    )
    child = spawn(argv, **FAST)

    def cancel_when_ready(event: p.AnyEvent) -> None:
        if isinstance(event, p.Message):
            threading.Thread(target=child.cancel).start()

    events = assert_valid_stream(run_bounded(child, on_event=cancel_when_ready))
    error = fatal(events)
    assert error.code == "INTERRUPTED" and "SIGTERM" in error.message and "SIGKILL" in error.message
    result = events[-1]
    assert isinstance(result, p.Result) and result.subtype == "interrupted" and result.exit_code == 137
    assert child.returncode == -signal.SIGKILL


def test_cancel_lets_a_well_behaved_child_send_its_own_result(tmp_path: Path) -> None:
    argv = agent_script(
        tmp_path,
        """
        def stop(signum, frame):
            stream.fail("INTERRUPTED", "stopping as asked", exit_code=143, subtype="interrupted")
            os._exit(143)
        signal.signal(signal.SIGTERM, stop)
        stream.message("ready")
        time.sleep(60)
        """,
    )
    child = spawn(argv, **FAST)

    def cancel_when_ready(event: p.AnyEvent) -> None:
        if isinstance(event, p.Message):
            child.cancel()

    events = assert_valid_stream(run_bounded(child, on_event=cancel_when_ready))
    assert events[-1].synthetic is not True and events[-1].exit_code == 143  # type: ignore[union-attr]
    assert events[-2].message == "stopping as asked"  # type: ignore[union-attr]


def test_a_full_stderr_pipe_never_blocks_the_child(tmp_path: Path) -> None:
    argv = agent_script(
        tmp_path,
        """
        for i in range(40000):
            sys.stderr.write(f"noise line {i:06d} " + "." * 40 + "\\n")
        sys.stderr.flush()
        stream.finish(result="survived")
        """,
    )
    child = spawn(argv, stderr_limit=64 * 1024)
    events = assert_valid_stream(run_bounded(child))
    assert events[-1].ok  # type: ignore[union-attr]
    assert child.stderr.endswith("noise line 039999 " + "." * 40 + "\n")
    assert len(child.stderr) <= 64 * 1024


def test_stderr_as_log_events(tmp_path: Path) -> None:
    argv = agent_script(
        tmp_path,
        """
        sys.stderr.write("warming up\\n"); sys.stderr.flush()
        time.sleep(0.2)
        stream.message("hi")
        time.sleep(0.1)
        stream.finish()
        """,
    )
    events = assert_valid_stream(run_bounded(spawn(argv, stderr_as_logs=True)))
    logs = [e for e in events if isinstance(e, p.Log)]
    assert [(log.message, log.synthetic) for log in logs] == [("warming up", True)]
    assert events.index(logs[0]) < [e.type for e in events].index("message")


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
    child = spawn(argv, new_process_group=True, **FAST)
    events = assert_valid_stream(run_bounded(child))
    assert fatal(events).code == "STREAM_TRUNCATED"
    helper = int(child.stderr.split()[1])
    _assert_gone(helper)


def test_a_helper_started_after_the_result_holding_stdout_is_stopped_too(tmp_path: Path) -> None:
    """The result ends the reading; the child's exit with its helper still holding the pipe ends the helper."""
    argv = agent_script(
        tmp_path,
        """
        import subprocess
        stream.message("done")
        stream.finish()
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        sys.stderr.write(f"helper {helper.pid}\\n"); sys.stderr.flush()
        os._exit(0)
        """,
    )
    child = spawn(argv, new_process_group=True, **FAST)
    events = assert_valid_stream(run_bounded(child))
    assert events[-1].ok  # type: ignore[union-attr]
    helper = int(child.stderr.split()[1])
    _assert_gone(helper)


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
    os.kill(pid, signal.SIGKILL)
    pytest.fail(f"process {pid} was left running")


def test_leaving_the_loop_early_stops_the_child(tmp_path: Path) -> None:
    argv = agent_script(tmp_path, "stream.message('one'); time.sleep(60)")
    with spawn(argv, **FAST) as child:
        for event in child:
            if isinstance(event, p.Message):
                break
    assert child.returncode == -signal.SIGTERM


def test_a_grandchild_holding_stdout_and_stderr_costs_exit_timeout_s_and_no_more(tmp_path: Path) -> None:
    """The documented bound: the reader stops waiting ``exit_timeout_s`` after the child's exit."""
    child = spawn(agent_script(tmp_path, GRANDCHILD_HOLDS_BOTH_PIPES), exit_timeout_s=1.0, cancel_grace_s=0.3)
    began = time.monotonic()
    events = assert_valid_stream(run_bounded(child))
    took = time.monotonic() - began
    helper = int(child.stderr.split()[1])  # the ending still has what the child wrote on stderr
    os.kill(helper, signal.SIGKILL)
    assert fatal(events).code == "STREAM_TRUNCATED"
    assert 1.0 <= took < 2.0, f"took {took:.1f}s for exit_timeout_s=1.0"  # a fixed 3 s came on top before
