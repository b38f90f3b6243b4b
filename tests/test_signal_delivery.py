"""A signal always reaches its handler, whatever the main thread is blocked in.

Two ways it could be lost, both seen as a run that never ends: the kernel
giving the signal to a helper thread (tests in test_wrap_cmd and
test_agent_exec_wire check those threads block it), and the signal landing
after the main thread's last look at its flags but before it blocks. The second
is simulated exactly with ``_thread.interrupt_main``: it marks the signal the
way CPython's C-level handler does, without interrupting any system call. The
command line cuts such a wait short; ``spawn()`` in any program bounds its wait.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from _agent_fakes import closed_port, exec_env
from conftest import python_script

_COMMAND_BLOCKED_IN_A_READ = """
    import _thread, importlib, signal, sys, threading

    module, *args = sys.argv[1:]
    sys.argv = [module, *args]
    # Well after start-up, when the command is blocked reading its standard input.
    threading.Timer(1.0, _thread.interrupt_main, (signal.SIGTERM,)).start()
    importlib.import_module(module).entry()
"""


@pytest.mark.parametrize(
    ("executable", "args"),
    [
        ("agentstream.cli", ["convert", "--from", "claude", "--to", "canonical"]),
        # The Claude Agent SDK's way in: a two-way session waiting for its first turn.
        ("agentstream.cli.claude_entry", ["--input-format", "stream-json", "--output-format", "stream-json"]),
    ],
    ids=["agentstream", "agentstream-claude"],
)
def test_a_signal_just_before_a_blocking_wait_still_ends_the_command(
    tmp_path: Path, executable: str, args: list[str]
) -> None:
    script = python_script(tmp_path, _COMMAND_BLOCKED_IN_A_READ)
    proc = subprocess.Popen(
        [sys.executable, str(script), executable, *args],
        stdin=subprocess.PIPE,  # stays open: only the signal can end the command
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=exec_env(
            tmp_path / "home",
            ANTHROPIC_API_KEY="sk-ant-unused",
            ANTHROPIC_BASE_URL=f"http://127.0.0.1:{closed_port()}",
        ),
    )
    try:
        proc.wait(timeout=15)  # not communicate(): that would close stdin
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("the signal never reached its handler: the command is still blocked") from None
    out, err = proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, (out, err)


_PROGRAM_READING_A_SILENT_CHILD = """
    import _thread, sys, threading
    from agentstream.consumer import spawn

    threading.Timer(1.0, _thread.interrupt_main).start()  # Ctrl-C, just as the reading loop starts to wait
    try:
        with spawn(["sleep", "60"], dialect="claude") as child:
            for event in child:
                pass
    except KeyboardInterrupt:
        print("interrupted", child.returncode)
"""


def test_a_program_reading_a_silent_child_still_gets_its_keyboard_interrupt(tmp_path: Path) -> None:
    """Without the command line's wake-up thread: spawn()'s loop never blocks for long, so Ctrl-C is seen."""
    script = python_script(tmp_path, _PROGRAM_READING_A_SILENT_CHILD)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=15)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [b"interrupted", str(-signal.SIGTERM).encode()]  # and the child was stopped


_SIGNAL_WHILE_THE_STREAM_OPENS = """
    import os, signal, sys
    import agentstream.stream as stream

    make_sink = stream.make_sink

    def make_sink_then_signalled(*args, **kwargs):
        stream.make_sink = make_sink  # once: the second stream, the command's fallback, opens untouched
        sink = make_sink(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # lands before the stream is started: nothing is written yet
        return sink

    stream.make_sink = make_sink_then_signalled
    from agentstream.cli import main

    sys.exit(main(["demo"]))
"""


def test_a_signal_while_the_stream_opens_still_gives_one_whole_stream(tmp_path: Path) -> None:
    """The command's own fallback writes the stream: the half-opened one no longer holds stdout against it."""
    script = python_script(tmp_path, _SIGNAL_WHILE_THE_STREAM_OPENS)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=30, cwd=tmp_path)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr.decode()
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert [event["type"] for event in events] == ["start", "error", "result"], done.stdout
    assert events[-1]["error"]["code"] == "INTERRUPTED"
    assert b"Traceback" not in done.stderr, done.stderr.decode()
