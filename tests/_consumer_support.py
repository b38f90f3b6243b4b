"""Helpers for the consumer tests (read, spawn, convert, wrap): invariant checks and fake agent CLIs."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterable
from itertools import pairwise
from pathlib import Path

import msgspec

from agentstream import protocol as p
from agentstream._signals import HANDLED_SIGNALS
from agentstream.stream import Stream

PYTHON = sys.executable
ROOT = Path(__file__).resolve().parent.parent


def assert_valid_stream(
    events: Iterable[p.AnyEvent], *, exit_code: int | None = None, turns: int | None = 1
) -> list[p.AnyEvent]:
    """Check the protocol's stream invariants ourselves, then with the validator.

    Each turn is start first, one result last; seq contiguous from 0 and one
    session id throughout. ``turns`` is how many turns there must be (``None``: any).
    """
    from agentstream.validate import Validator

    events = list(events)
    assert events, "empty stream"
    assert isinstance(events[0], p.Start), f"first event is {events[0].type}"
    assert isinstance(events[-1], p.Result), f"last event is {events[-1].type}"
    results = sum(isinstance(e, p.Result) for e in events)
    starts = sum(isinstance(e, p.Start) for e in events)
    if turns is not None:
        assert results == turns, f"{results} results, not {turns}"
    assert starts == results, f"{starts} starts for {results} results"
    for before, after in pairwise(events):
        assert isinstance(after, p.Start) == isinstance(before, p.Result), "a start not right after a result"
    assert [e.seq for e in events] == list(range(len(events))), "seq not contiguous from 0"
    assert {e.session_id for e in events} == {events[0].session_id}, "several session ids"
    result = events[-1]
    assert isinstance(result, p.Result)
    assert result.ok == (result.exit_code == 0)
    for before, after in pairwise(events):
        if isinstance(before, p.Error) and not before.recoverable:
            assert isinstance(after, p.Result), "a fatal error not immediately followed by the result"
    if exit_code is not None:
        assert result.exit_code == exit_code, (
            f"result.exit_code {result.exit_code} != process exit {exit_code}"
        )
    validator = Validator()
    for number, event in enumerate(events, start=1):
        validator.feed(event, number)
    assert validator.close() == [], "the validator rejects the stream"
    return events


def is_synthetic(event: p.AnyEvent) -> bool:
    """Made up by a reader or wrapper (unknown events never are: they are kept as they came)."""
    return getattr(event, "synthetic", None) is True


def decode_output(data: bytes) -> list[p.AnyEvent]:
    """Strictly decode a canonical NDJSON output (every line must be a valid event)."""
    return [p.decode(line) for line in data.splitlines()]


def canonical_session(body: Callable[[Stream], None] | None = None, *, finish: bool = True) -> bytes:
    """A real Stream's output (start, some events, result unless ``finish`` is false)."""
    buf = io.BytesIO()
    s = Stream("fake-agent", out=buf, cwd="/tmp")
    s.start()
    if body is None:
        mid = p.new_id("msg")
        s.message("what is 2+2?", role="user")
        s.message_delta("4", message_id=mid)
        s.message("4", message_id=mid)
        with s.tool_call("calc", {"expr": "2+2"}) as call:
            call.succeed("4")
        s.record_usage("m", input_tokens=10, output_tokens=2)
    else:
        body(s)
    if finish:
        s.finish()
    return buf.getvalue()


def strip_volatile(events: Iterable[p.AnyEvent]) -> list[object]:
    """Events as plain data, without what differs between two reads of the same input.

    That is the timestamps of made-up events and the session ids made up for
    inputs that had none (renamed S0, S1… in order of appearance).
    """
    out = []
    sessions: dict[str, str] = {}
    for event in events:
        data = msgspec.to_builtins(event.raw if isinstance(event, p.UnknownEvent) else event)
        data["session_id"] = sessions.setdefault(data.get("session_id", ""), f"S{len(sessions)}")
        if data.get("synthetic"):
            data.pop("ts", None)
            if data.get("type") == "result":
                data.pop("duration_ms", None)
        out.append(data)
    return out


GRANDCHILD_HOLDS_BOTH_PIPES = """
import subprocess
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
sys.stderr.write(f"helper {helper.pid}\\n"); sys.stderr.flush()
stream.message("leaving a helper behind, on stdout and stderr")
os._exit(0)
"""
"""An :func:`agent_script` body that exits leaving a helper process holding its stdout and stderr."""


def agent_script(tmp_path: Path, code: str, name: str = "agent.py") -> list[str]:
    """A small Python "agent CLI": ``code`` runs with ``stream`` (a Stream on stdout, not owning the process)."""
    script = tmp_path / name
    prelude = (
        "import os, signal, sys, time\n"
        "from agentstream.stream import Stream\n"
        "stream = Stream('fake-agent', out=1, owns_process=False)\n"
        "stream.start()\n"
    )
    script.write_text(prelude + textwrap.dedent(code))
    return [PYTHON, str(script)]


def run_cli(
    *args: str, stdin: bytes | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [PYTHON, "-m", "agentstream", *args], input=stdin, capture_output=True, timeout=timeout, cwd=ROOT
    )


def helper_threads(pid: int) -> dict[str, bool]:
    """Each thread of ``pid`` but its main one (by name), and whether it blocks SIGINT, SIGTERM and SIGHUP.

    A thread that does not block them can take a signal meant for the process,
    and then the main thread's blocking wait is never cut short (Linux ``/proc``).
    """
    threads: dict[str, bool] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        if int(task.name) == pid:
            continue
        try:
            status, name = (task / "status").read_text(), (task / "comm").read_text().strip()
        except FileNotFoundError:
            continue  # the thread ended meanwhile
        found = re.search(r"^SigBlk:\s*([0-9a-f]+)$", status, re.MULTILINE)
        assert found is not None, status
        blocked = int(found.group(1), 16)
        threads[f"{name} ({task.name})"] = all(blocked >> (signum - 1) & 1 for signum in HANDLED_SIGNALS)
    return threads


def exited(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie nobody reaped yet counts: it holds nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
