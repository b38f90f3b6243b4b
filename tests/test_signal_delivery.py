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

import signal
import subprocess
import sys
from pathlib import Path

from conftest import python_script

_COMMAND_BLOCKED_IN_A_READ = """
    import _thread, signal, sys, threading
    from agentstream.cli import entry

    sys.argv = ["agentstream", *sys.argv[1:]]
    # Well after start-up, when the command is blocked reading its standard input.
    threading.Timer(1.0, _thread.interrupt_main, (signal.SIGTERM,)).start()
    entry()
"""


def test_a_signal_just_before_a_blocking_read_still_ends_the_command(tmp_path: Path) -> None:
    script = python_script(tmp_path, _COMMAND_BLOCKED_IN_A_READ)
    proc = subprocess.Popen(
        [sys.executable, str(script), "convert", "--from", "claude", "--to", "canonical"],
        stdin=subprocess.PIPE,  # stays open: only the signal can end the command
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        proc.wait(timeout=15)  # not communicate(): that would close stdin
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("the signal never reached its handler: the command is still blocked") from None
    out, err = proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, (out, err)
    assert out == b""  # nothing was read, so nothing is converted


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
