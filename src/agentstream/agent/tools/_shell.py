"""The ``shell`` tool: one command in the workspace, streamed, bounded in time and size.

The command runs as ``bash -c`` (``/bin/sh -c`` when bash is missing) in its own
process group with stdin closed and stdout+stderr combined. Whatever happens —
normal exit, timeout, or an exception such as ``KeyboardInterrupt`` in the agent —
the whole group is killed before ``shell`` returns or raises, so no background
child outlives its call.
"""

from __future__ import annotations

import codecs
import os
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Final, cast

from agentstream._children import GroupWatchdog
from agentstream._secrets import scrubbed_environ
from agentstream._signals import SignalsHeld
from agentstream.agent.interrupt import TurnInterrupted
from agentstream.agent.tools._base import (
    HeadTail,
    Tool,
    ToolContext,
    ToolFailure,
    ToolOutcome,
    ToolSpec,
    whole_chars,
)

__all__ = ["SHELL_TOOLS"]

_CHUNK: Final = 1 << 16
_FLUSH_EVERY_S: Final = 0.1
"""Progress is sent at most this often (plus when a burst fills :data:`_COALESCE_BYTES`)."""
_COALESCE_BYTES: Final = 4096
_LONGEST_PARTIAL: Final = 4 * _COALESCE_BYTES
"""A partial line longer than this is streamed without waiting for its newline."""
_NOTE_ROOM: Final = 120
"""Bytes of the output cap kept free for the ``[exit code N]`` / timeout line."""
_WATCHDOG_GRACE_S: Final = 1.0
"""If the agent is killed outright, how long the command's group has between SIGTERM and SIGKILL."""
_DRAIN_S: Final = 2.0
"""After the group is killed, how long to wait for the pipe to close (a ``setsid`` escapee may hold it)."""


@lru_cache(maxsize=1)
def _shell_binary() -> str:
    return shutil.which("bash") or "/bin/sh"


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone


def _has_exited(pid: int) -> bool:
    """Whether the shell exited, without reaping it: its pid keeps naming the group until we wait."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


class _ProgressPump:
    """Turns raw output into a modest number of ``tool_progress`` texts, at most ``cap`` bytes in all.

    Progress prefers whole lines, but a line longer than :data:`_LONGEST_PARTIAL`
    is sent in pieces: what is pending stays that small, and each chunk is
    scanned once, so a command printing gigabytes without a newline costs
    constant memory and linear time.
    """

    def __init__(self, sink: Callable[[str], None], cap: int) -> None:
        self.sink = sink
        self.budget = cap
        self.pending = bytearray()
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.last_sent = time.monotonic()
        self.line_ended = True
        """Whether what was sent so far ends with a newline (a pause may have sent a partial line)."""

    def feed(self, data: bytes) -> None:
        if self.budget <= 0:
            return
        self.pending += data[: self.budget + 1]  # more than the budget is never sent, so never kept
        if len(self.pending) >= _COALESCE_BYTES or time.monotonic() - self.last_sent >= _FLUSH_EVERY_S:
            self.flush(whole_lines=True)

    def flush(self, *, whole_lines: bool = False) -> None:
        """Send what is pending; with ``whole_lines`` keep a short trailing partial line for later."""
        cut = len(self.pending)
        if whole_lines and cut < _LONGEST_PARTIAL:
            cut = self.pending.rfind(b"\n") + 1
        if cut <= 0 or self.budget <= 0:
            return
        chunk = bytes(self.pending[:cut])
        del self.pending[:cut]
        text = self.decoder.decode(chunk)
        size = len(text.encode())  # the budget is in bytes of text: a byte that is not UTF-8 takes 3
        if size >= self.budget:
            # The whole lines that fit; of a line that does not, only a long one's first piece (it would
            # have gone out in pieces anyway): a short line cut at the cap could read as another ("42").
            data = text.encode()
            end = data.rfind(b"\n", 0, self.budget) + 1
            if end == 0 and self.budget >= _LONGEST_PARTIAL:
                end = len(whole_chars(data[: self.budget], at_end=True))
            text = data[:end].decode()
            if not (text.endswith("\n") if text else self.line_ended):
                text += "\n"  # the note on a line of its own
            text += "[further output is not streamed; the result has it]"
            self.budget = 0
            self.pending.clear()
        else:
            self.budget -= size
        self.last_sent = time.monotonic()
        if text:
            self.line_ended = text.endswith("\n")
            self.sink(text)


class _ShellRun:
    """One running command: reads its output until it ends, times out or is abandoned."""

    def __init__(self, proc: subprocess.Popen[bytes], ctx: ToolContext, timeout_s: float) -> None:
        self.proc = proc
        self.timeout_s = timeout_s
        self.captured = HeadTail(max(ctx.output_cap_bytes - _NOTE_ROOM, 1))
        self.progress = _ProgressPump(ctx.progress, ctx.output_cap_bytes)
        self.timed_out = False
        self.interrupt = ctx.interrupt

    def pump(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + self.timeout_s
        draining = False
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while True:
                if self.interrupt is not None and self.interrupt.is_set():
                    raise TurnInterrupted()  # the caller's ``_started`` kills the group
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if draining:
                        return
                    self.timed_out, draining, deadline = True, True, self._wind_down()
                    continue
                if selector.select(min(remaining, _FLUSH_EVERY_S)):
                    data = os.read(fd, _CHUNK)
                    if not data:
                        if not draining:
                            self._await_exit(deadline)
                        return
                    self.captured.feed(data)
                    self.progress.feed(data)
                else:
                    self.progress.flush()
                if not draining and _has_exited(self.proc.pid):
                    draining, deadline = True, self._wind_down()

    def _await_exit(self, deadline: float) -> None:
        """The pipe closed; the shell is usually a moment from exiting. Past the deadline it timed out."""
        pause = 0.001
        while not _has_exited(self.proc.pid):
            if time.monotonic() >= deadline:
                self.timed_out = True
                return
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _wind_down(self) -> float:
        """Kill what is left of the group; the pipe closes once every writer is gone."""
        _kill_group(self.proc.pid)
        return time.monotonic() + _DRAIN_S

    def outcome(self) -> ToolOutcome:
        self.progress.flush()
        text = self.captured.text()
        truncated = self.captured.truncated
        code = self.proc.returncode
        if self.timed_out:
            note = f"timed out after {self.timeout_s:g}s; the command and its child processes were killed"
            return ToolOutcome("error", _with_note(text, note), error=note, truncated=truncated)
        if code != 0:
            note = f"killed by signal {_signal_name(-code)}" if code < 0 else f"exit code {code}"
            return ToolOutcome("error", _with_note(text, note), error=note, truncated=truncated)
        return ToolOutcome("success", text or "(no output)", truncated=truncated)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _with_note(text: str, note: str) -> str:
    """The output with a last line the model cannot miss, e.g. ``[exit code 2]``."""
    body = text.rstrip("\n")
    return f"{body}\n[{note}]" if body else f"[{note}]"


@contextmanager
def _started(command: str, ctx: ToolContext, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """The command running in a new session (its process group is its pid); on leaving, the group is killed.

    ``Popen()`` forks, stores the child's pid, then waits for its exec. A signal whose handler raises
    (KeyboardInterrupt) between the fork and that store would leave the command running with no pid to
    kill, and a loaded machine can let the command run for a while in that window. So, in the main thread,
    the handled signals are only noted while the child starts, and delivered once its pid is known.

    A SIGKILL of the agent runs no ``finally``: a :class:`GroupWatchdog` then ends the group instead, so
    neither the command nor its children outlive the agent (and its timeout) that way either. It starts
    before the command, which names its group to it first thing, so no moment of the start escapes it.
    """
    proc = cast(
        "subprocess.Popen[bytes]", subprocess.Popen.__new__(subprocess.Popen)
    )  # bytes: no text= below
    watchdog: GroupWatchdog | None = None
    try:
        try:
            watchdog = GroupWatchdog(grace=_WATCHDOG_GRACE_S)
            with SignalsHeld():  # until the pid that the ``finally`` kills the group by is stored
                proc.__init__(  # type: ignore[misc]
                    watchdog.announcing([_shell_binary(), "-c", command]),
                    cwd=ctx.workspace,
                    env=env,
                    stdin=watchdog.child_stdin,  # the command itself reads /dev/null
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except OSError as exc:
            raise ToolFailure(f"shell: could not start {_shell_binary()}: {exc.strerror or exc}") from None
        yield proc
    finally:
        if getattr(proc, "pid", None) is not None and proc.returncode is None:
            _kill_group(proc.pid)
            proc.wait()
        if watchdog is not None:
            watchdog.release()  # after the group is gone, so its pid cannot have been reused yet
        stdout = getattr(proc, "stdout", None)  # missing if __init__ stopped before setting it
        if stdout is not None:
            stdout.close()


def shell(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    timeout_s = min(args["timeout_s"] or ctx.shell_timeout_s, ctx.shell_timeout_s)
    env = dict(ctx.env) if ctx.env is not None else scrubbed_environ()
    with _started(args["command"], ctx, env) as proc:
        run = _ShellRun(proc, ctx, timeout_s)
        run.pump()
    return run.outcome()


SHELL_TOOLS: Final = (
    Tool(
        ToolSpec(
            "shell",
            "Run a shell command (bash -c) in the workspace directory and return its combined "
            "stdout and stderr. stdin is closed, so interactive programs cannot wait for input. "
            "A non-zero exit status is reported as an error together with the output. Long output "
            "keeps its beginning and end. Background processes end when the command ends.",
            {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command line to run."},
                    "timeout_s": {
                        "type": "number",
                        "minimum": 0.1,
                        "description": "Seconds before the command is killed; capped at the run's shell timeout.",
                    },
                },
                "required": ["command"],
            },
            "execute",
        ),
        shell,
    ),
)
