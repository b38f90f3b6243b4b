"""Agent overhead: ``agentstream exec`` against the raw ``openai`` SDK on the same scripted stream.

    .venv/bin/python bench/bench_agent.py [--rounds N] [--turns N]

A fake OpenAI server on loopback (``tests/_agent_fakes.py``) plays a scripted
conversation: each turn streams a few sentences in small deltas, and every turn
but the last asks for one tool call (``list_dir``). Two subprocesses, so both pay
interpreter start-up and the SDK import:

* baseline: a script that makes the same number of streaming Chat Completions
  calls with the raw SDK and reads every chunk (assembling the text and tool
  calls), and nothing else;
* agentstream: ``agentstream exec`` doing the whole job — tools offered and run,
  the conversation sent back, every event written as stream-json to a pipe, the
  session saved — once as shipped (publishing to the embedded bus) and once with
  ``--no-publish``.

Each figure is the best of ``--rounds`` runs; the ratio is exec / baseline,
measured in the same run. The target is a wall-time ratio of at most 1.2. The
children's CPU time is printed too, because on a busy machine it is the steadier
figure.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from _agent_fakes import FakeModelServer, Reply, openai_env, openai_reply  # noqa: E402

SENTENCE = "The directory holds the project's sources, its tests and a few notes worth reading. "

BASELINE = textwrap.dedent(
    """
    import sys
    import openai

    client = openai.OpenAI(max_retries=0)
    for turn in range(int(sys.argv[1])):
        text, calls = [], {}
        stream = client.chat.completions.create(
            model="gpt-4.1-mini",
            messages=[{"role": "user", "content": "go"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        for chunk in stream:
            for choice in chunk.choices:
                if choice.delta.content:
                    text.append(choice.delta.content)
                for call in choice.delta.tool_calls or ():
                    calls.setdefault(call.index, []).append(call.function.arguments or "")
        sys.stdout.write("".join(text) + "\\n")
    """
)


def script(turns: int) -> list[Reply]:
    """``turns`` replies: a tool call in each but the last, about 60 deltas of text in each."""
    text = SENTENCE * 3
    calls = [
        openai_reply(text, [(f"call_{n}", "list_dir", {"path": "."})], chunk=4) for n in range(turns - 1)
    ]
    return [*calls, openai_reply(text, chunk=4)]


def timed(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) for one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    proc = subprocess.run(command, env=env, cwd=cwd, capture_output=True)
    took = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{command[:4]} failed ({proc.returncode}):\n{proc.stderr.decode()[-2000:]}")
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def best(
    rounds: int, server: FakeModelServer, turns: int, command: list[str], env: dict[str, str], cwd: Path
) -> tuple[float, float]:
    """The fastest wall time of ``rounds`` runs, and the least CPU time."""
    runs = []
    for _ in range(rounds):
        server.script = script(turns)
        runs.append(timed(command, env, cwd))
        assert not server.script, "the run did not make every scripted call"
    return min(wall for wall, _ in runs), min(cpu for _, cpu in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, FakeModelServer() as server:
        home = Path(tmp)
        workspace = home / "ws"
        workspace.mkdir()
        for name in ("README.md", "main.py", "notes.txt"):
            (workspace / name).write_text("x\n")
        (home / "baseline.py").write_text(BASELINE)
        env = openai_env(home, server)
        baseline = best(
            args.rounds,
            server,
            args.turns,
            [sys.executable, str(home / "baseline.py"), str(args.turns)],
            env,
            workspace,
        )
        exec_args = [sys.executable, "-m", "agentstream", "exec", "go", "-o", "stream-json"]
        shipped = best(args.rounds, server, args.turns, exec_args, env, workspace)
        quiet = best(args.rounds, server, args.turns, [*exec_args, "--no-publish"], env, workspace)
    print(
        f"{args.turns}-turn tool conversation, best of {args.rounds}:   wall (ratio)          child CPU (ratio)"
    )
    for name, (wall, cpu) in (
        ("raw openai SDK (baseline)", baseline),
        ("agentstream exec", shipped),
        ("agentstream exec --no-publish", quiet),
    ):
        print(
            f"  {name:31} {wall * 1000:8.1f} ms ({wall / baseline[0]:.2f}x)   {cpu * 1000:8.1f} ms ({cpu / baseline[1]:.2f}x)"
        )
    print("  target: wall ratio at most 1.20x")


if __name__ == "__main__":
    main()
