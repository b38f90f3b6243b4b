"""What the benchmarks share: timing, the child-process launcher, the canonical producer's lines, sizes."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

MIB = 1 << 20
VENV_BIN = Path(sys.executable).parent


def best_of(rounds: int, fn: Callable[[], object]) -> float:
    """Best CPU time of ``fn`` (in process, single-threaded: what other processes do on the machine does not count)."""
    return best_of_each(rounds, fn)[0]


def best_of_each(
    rounds: int, *fns: Callable[[], object], measure: Callable[[Callable[[], object]], float] | None = None
) -> list[float]:
    """Best time of each of ``fns``, their rounds taken in turn (one of each, then again), so that a slower
    spell of the machine falls on all of them rather than on whichever ran then.

    The time is this process's CPU time of the call, unless ``measure`` (given the call) says otherwise:
    for a child process, the CPU time the call reports.
    """
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for fn, taken in zip(fns, times, strict=True):
            taken.append(measure(fn) if measure is not None else _cpu_time_of(fn))
    return [min(taken) for taken in times]


def reported_time(fn: Callable[[], object]) -> float:
    """A ``measure`` for :func:`best_of_each`: the call runs a child and returns the CPU time the child took."""
    took = fn()
    assert isinstance(took, float), took
    return took


def _cpu_time_of(fn: Callable[[], object]) -> float:
    began = time.process_time()
    fn()
    return time.process_time() - began


_LAUNCHER = """
import os, sys, time
began = time.perf_counter()
pid = os.fork()
if pid == 0:
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
took = time.perf_counter() - began
print(usage.ru_maxrss, os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime, took)
"""


class Child(NamedTuple):
    """What one finished process cost, as the kernel counts it for that process alone."""

    peak_rss_kib: int
    cpu: float
    wall: float


def run_child(argv: list[str], *, check: bool = True) -> Child:
    """Run ``argv`` (stdout to /dev/null) from a tiny launcher and return its peak RSS, CPU and wall time.

    The launcher, not this (large) process, forks the command: a child's peak
    RSS includes the memory of the process it was forked from. ``argv[0]`` must
    be a path.
    """
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _LAUNCHER, *argv], capture_output=True, text=True, check=False
    )
    peak, code, cpu, wall = done.stdout.split()
    if check and int(code) != 0:
        raise SystemExit(f"{argv} failed with {code}: {done.stderr}")
    return Child(int(peak), float(cpu), float(wall))


def peak_rss_kib(argv: list[str]) -> tuple[int, float]:
    """Peak RSS (KiB) and wall time of one process (see :func:`run_child`)."""
    child = run_child(argv)
    return child.peak_rss_kib, child.wall


class LineTap(io.RawIOBase):
    """A binary sink that hands over the lines written to it so far."""

    def __init__(self) -> None:
        self._lines: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self._lines.append(bytes(data))
        return len(data)

    def take(self) -> list[bytes]:
        lines, self._lines = self._lines, []
        return lines


def producer_session(turns: int) -> Iterator[bytes]:
    """One canonical session from the real producer: per turn, deltas, a message, a tool round trip, usage."""
    from agentstream.stream import Stream

    out = LineTap()
    stream = Stream("bench-agent", out=out, model="m", provider="p", tools=["shell"])
    stream.start()
    yield from out.take()
    for turn in range(turns):
        message_id = f"msg_{turn}"
        for i in range(6):
            stream.message_delta(f"part {i} of the answer to question {turn}. ", message_id=message_id)
        stream.message(
            "".join(f"part {i} of the answer to question {turn}. " for i in range(6)), message_id=message_id
        )
        with stream.tool_call("shell", {"command": f"grep -rn needle_{turn} src/", "timeout": 30}) as call:
            call.succeed("src/a.py:12: needle\n" * 12)
        stream.record_usage("m", input_tokens=1200 + turn, output_tokens=80, cached_tokens=1000)
        yield from out.take()
    stream.finish()
    yield from out.take()


def passthrough(data: bytes) -> None:
    """The baseline of a conversion: parse and re-serialise every line with orjson, nothing else."""
    import orjson

    out = io.BytesIO()
    for line in io.BytesIO(data):
        out.write(orjson.dumps(orjson.loads(line)))
        out.write(b"\n")


PASSTHROUGH = """
import sys, orjson
out = sys.stdout.buffer
with open(sys.argv[1], "rb") as lines:
    for line in lines:
        out.write(orjson.dumps(orjson.loads(line)))
        out.write(b"\\n")
out.flush()
"""
"""The baseline of a whole ``convert`` process: a Python program doing :func:`passthrough` on the file it is given."""


def parse_size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower().removesuffix("ib").removesuffix("b")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def available(*dialects: str) -> bool:
    """Whether every named dialect can be loaded (a note says which cannot)."""
    from agentstream.dialects import get_dialect

    for name in dialects:
        try:
            get_dialect(name)
        except ModuleNotFoundError:
            print(f"(skipped: dialect {name!r} is not available yet)")
            return False
    return True


def pydantic_adapter() -> Any:
    """The canonical event shapes as a pydantic v2 discriminated union: what a Python user would write instead."""
    from pydantic import BaseModel, Field, TypeAdapter

    class Common(BaseModel):
        v: int = 1
        session_id: str = ""
        seq: int = -1
        ts: str = ""
        synthetic: bool | None = None

    class Start(Common):
        type: Literal["start"]
        command: str
        cwd: str = ""
        model: str | None = None
        provider: str | None = None
        tools: list[str] = []
        parent_session_id: str | None = None

    class MessageDelta(Common):
        type: Literal["message_delta"]
        message_id: str
        role: Literal["system", "user", "assistant", "tool"] = "assistant"
        content: str

    class Message(Common):
        type: Literal["message"]
        message_id: str
        role: Literal["system", "user", "assistant", "tool"]
        content: str

    class ReasoningDelta(Common):
        type: Literal["reasoning_delta"]
        reasoning_id: str
        content: str

    class Reasoning(Common):
        type: Literal["reasoning"]
        reasoning_id: str
        content: str

    class ToolCall(Common):
        type: Literal["tool_call"]
        call_id: str
        name: str
        arguments: dict[str, Any] = {}

    class ToolProgress(Common):
        type: Literal["tool_progress"]
        call_id: str
        content: str

    class ToolResult(Common):
        type: Literal["tool_result"]
        call_id: str
        name: str
        status: Literal["success", "error", "denied", "cancelled"]
        output: str | None = None
        error: str | None = None
        duration_ms: int = 0
        truncated: bool | None = None

    class Usage(Common):
        type: Literal["usage"]
        model: str
        input_tokens: int = 0
        output_tokens: int = 0
        cached_tokens: int = 0
        reasoning_tokens: int = 0
        cost_usd: float | None = None
        cache_write_tokens: int | None = None

    class Log(Common):
        type: Literal["log"]
        level: Literal["debug", "info", "warn", "error"]
        message: str

    class Status(Common):
        type: Literal["status"]
        status: str
        message: str | None = None

    class Named(Common):
        type: Literal["event"]
        name: str
        data: Any = None

    class Totals(BaseModel):
        input_tokens: int = 0
        output_tokens: int = 0
        cached_tokens: int = 0
        reasoning_tokens: int = 0
        cost_usd: float | None = None
        cache_write_tokens: int | None = None

    class ErrorInfo(BaseModel):
        code: str
        message: str
        fix: str | None = None

    class Error(Common):
        type: Literal["error"]
        code: str
        message: str
        recoverable: bool = False
        retry_in_ms: int | None = None
        fix: str | None = None
        details: Any = None

    class Result(Common):
        type: Literal["result"]
        ok: bool
        subtype: str
        exit_code: int
        duration_ms: int = 0
        turn_count: int = 0
        tools_used: list[str] = []
        usage: Totals = Totals()
        result: str | None = None
        error: ErrorInfo | None = None
        command: str | None = None

    Event = Annotated[
        Start
        | MessageDelta
        | Message
        | ReasoningDelta
        | Reasoning
        | ToolCall
        | ToolProgress
        | ToolResult
        | Usage
        | Log
        | Status
        | Named
        | Error
        | Result,
        Field(discriminator="type"),
    ]
    return TypeAdapter(Event)


def drained_child(argv: list[str]) -> float:
    """Run a child that writes into a pipe this process drains; return the float it prints last on stderr."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    while proc.stdout.read(1 << 16):
        pass
    _, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(err.decode())
    return float(err.decode().strip().splitlines()[-1])


def startup_times(commands: dict[str, list[str]], rounds: int) -> dict[str, tuple[float, float]]:
    """Median wall time and best CPU time of each command, runs interleaved so that a busy moment hits all.

    The package's bytecode is compiled first, as an install does.
    """
    import compileall
    import statistics

    import agentstream

    compileall.compile_dir(str(Path(agentstream.__file__).parent), quiet=1)
    runs: dict[str, list[Child]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, argv in commands.items():
            runs[name].append(run_child(argv, check=False))
    return {
        name: (statistics.median(child.wall for child in children), min(child.cpu for child in children))
        for name, children in runs.items()
    }


def validate_times(data: bytes, rounds: int) -> dict[str, float]:
    """Best CPU times of validating a canonical stream (``validate_stream``, what ``agentstream validate`` runs),
    of a pydantic v2 union's ``validate_json`` per line and of a bare msgspec typed decode per line."""
    import msgspec

    from agentstream import protocol as p
    from agentstream.validate import validate_stream

    adapter = pydantic_adapter()
    bare = msgspec.json.Decoder(p.Event)

    def ours() -> None:
        for _ in validate_stream(io.BytesIO(data)):
            pass

    def with_pydantic() -> None:
        for line in io.BytesIO(data):
            adapter.validate_json(line)

    def with_bare_msgspec() -> None:
        for line in io.BytesIO(data):
            bare.decode(line)

    mine, pydantic, bare = best_of_each(rounds, ours, with_pydantic, with_bare_msgspec)
    return {"ours": mine, "pydantic": pydantic, "bare msgspec": bare}
