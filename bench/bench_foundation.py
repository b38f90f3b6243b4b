"""Benchmarks for the protocol and the producer, as ratios against baselines run alongside.

    .venv/bin/python bench/bench_foundation.py [--quick]

1. decode + validate a mixed canonical stream, against a pydantic v2
   discriminated union (decode only) and bare msgspec (decode only);
2. real-time emit (a flush per event) into a pipe, against
   ``print(json.dumps(e), flush=True)`` and bare ``os.write`` of msgspec bytes;
3. start-up of ``agentstream --version`` and ``agentstream validate`` on a
   10-line file, against ``python -c pass``.

Every figure is the best of several rounds in CPU time (start-up: the median
wall time); ratios compare numbers measured in the same run, because absolute
times on a shared machine mean little. ``bench_hotpath.py`` measures the same
things on real-shaped input.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from common import VENV_BIN, drained_child, startup_times, validate_times


def mixed_stream(turns: int) -> list[bytes]:
    """A realistic canonical session: deltas, messages, tool round trips, usage."""
    from agentstream import protocol as p

    seq = p.Sequencer("ses_bench")
    events: list[p.BaseEvent] = [
        p.Start(command="exec", cwd="/work", model="m", provider="openai", tools=["shell"])
    ]
    for turn in range(turns):
        mid = f"msg_{turn}"
        events += [p.MessageDelta(message_id=mid, content=f"chunk {i} of the answer ") for i in range(8)]
        events.append(p.Message(message_id=mid, role="assistant", content="the whole answer " * 8))
        events.append(
            p.ToolCall(call_id=f"c{turn}", name="shell", arguments={"command": "ls -la", "timeout": 30})
        )
        events.append(
            p.ToolResult(
                call_id=f"c{turn}", name="shell", status="success", output="a\nb\n" * 20, duration_ms=12
            )
        )
        events.append(p.Usage(model="m", input_tokens=1200, output_tokens=80, cached_tokens=1000))
        events.append(p.Log(level="info", message=f"turn {turn} done"))
    events.append(p.Result(ok=True, subtype="success", exit_code=0, duration_ms=1000, turn_count=turns))
    return [p.encode_line(seq.stamp(e)) for e in events]


def bench_decode(rounds: int, turns: int) -> dict[str, float]:
    lines = mixed_stream(turns)
    return {"events": len(lines), **validate_times(b"".join(lines), rounds)}


EMIT_CHILD = """
import json, os, sys, time
import msgspec
from agentstream import protocol as p
from agentstream.stream import Stream
kind, count = sys.argv[1], int(sys.argv[2])
fd = sys.stdout.fileno()
event = {"type": "log", "v": 1, "session_id": "s", "seq": 0, "ts": "2026-01-01T00:00:00.000Z",
         "level": "info", "message": "a typical diagnostic line of moderate length"}
began = time.process_time()
if kind == "ours":
    with Stream("bench", out=fd) as s:
        for i in range(count):
            s.log("a typical diagnostic line of moderate length")
elif kind == "print":
    for i in range(count):
        event["seq"] = i
        print(json.dumps(event), flush=True)
else:
    encode = msgspec.json.Encoder().encode
    for i in range(count):
        event["seq"] = i
        os.write(fd, encode(event) + b"\\n")
print(time.process_time() - began, file=sys.stderr)
"""


def bench_emit(rounds: int, count: int) -> dict[str, float]:
    """Each variant writes ``count`` events into a pipe that this process drains."""

    def one(kind: str) -> float:
        return drained_child([sys.executable, "-c", EMIT_CHILD, kind, str(count)])

    return {
        "events": count,
        **{kind: min(one(kind) for _ in range(rounds)) for kind in ("ours", "print", "os.write")},
    }


def bench_startup(rounds: int) -> dict[str, float]:
    """Median wall time of whole commands."""
    with tempfile.TemporaryDirectory() as tmp:
        sample = Path(tmp) / "ten.ndjson"
        sample.write_bytes(
            b"".join(mixed_stream(1)[:9]) + mixed_stream(1)[-1].replace(b'"seq":13', b'"seq":9')
        )
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "agentstream --version": [str(VENV_BIN / "agentstream"), "--version"],
            "agentstream validate (10 lines)": [str(VENV_BIN / "agentstream"), "validate", "-q", str(sample)],
            "python -c 'import msgspec' (the JSON library alone)": [sys.executable, "-c", "import msgspec"],
        }
        return {name: wall for name, (wall, _) in startup_times(commands, rounds).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and events")
    args = parser.parse_args()
    rounds = 3 if args.quick else 7

    d = bench_decode(rounds, 200 if args.quick else 1000)
    print(f"decode+validate, {d['events']} events (best of {rounds})")
    print(
        f"  ours {d['ours'] * 1e3:8.1f} ms   pydantic v2 {d['pydantic'] * 1e3:8.1f} ms   bare msgspec {d['bare msgspec'] * 1e3:8.1f} ms"
    )
    print(
        f"  speed vs pydantic: {d['pydantic'] / d['ours']:.2f}x (target >= 3)   vs bare msgspec: {d['bare msgspec'] / d['ours']:.2f}x (target >= 0.8)"
    )

    e = bench_emit(rounds, 20_000 if args.quick else 100_000)
    print(f"emit with a flush per event into a pipe, {e['events']} events (best of {rounds})")
    print(
        f"  ours {e['ours'] * 1e3:8.1f} ms   print+json.dumps {e['print'] * 1e3:8.1f} ms   bare os.write {e['os.write'] * 1e3:8.1f} ms"
    )
    print(
        f"  speed vs print: {e['print'] / e['ours']:.2f}x   vs bare os.write: {e['os.write'] / e['ours']:.2f}x (target >= 0.6)"
    )

    s = bench_startup(11 if args.quick else 31)
    base = s.pop("python -c pass")
    print(f"start-up (median): python -c pass {base * 1e3:.1f} ms")
    for name, took in s.items():
        print(f"  {name}: {took * 1e3:.1f} ms = {took / base:.2f}x python")
    msgspec_alone = s["python -c 'import msgspec' (the JSON library alone)"]
    ratio = s["agentstream validate (10 lines)"] / msgspec_alone
    print(f"  validate (10 lines) vs import msgspec: {ratio:.2f}x (target <= 1.3)")


if __name__ == "__main__":
    main()
