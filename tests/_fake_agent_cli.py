"""A stand-in for an agent CLI's headless mode, for ``agentstream acp --cli``: ``python _fake_agent_cli.py KIND ARGS``.

KIND is ``gemini`` (``[--resume ID] -p PROMPT --output-format stream-json``, the prompt also as
``--prompt=PROMPT``) or ``codex`` (``exec --json [-m MODEL] [-C DIR] [resume ID] [--] PROMPT``, with "tool"
in the prompt a command item first); options are read as an
option parser reads them, so a prompt such as ``--fix`` written without care would be taken for one. It prints the lines its CLI
prints (the shapes of tests/fixtures/seeds/gemini.ndjson and
tests/fixtures/dialects/codex/exec-doc.ndjson), says in its answer which
session it was resumed with (so tests can see the resume flag arrive), with "crash" in
the prompt (gemini) it exits with status 1 and a line on stderr, and
with "sleep" in the prompt it sleeps after its first line until SIGINT, on
which it exits with status 130 and no result, as the real CLIs do.
"""

from __future__ import annotations

import json
import signal
import sys
import time


def say(obj: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def wait_for_sigint() -> None:
    signal.signal(signal.SIGINT, lambda *_: sys.exit(130))
    time.sleep(60)
    sys.exit(1)


def gemini(args: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--resume")
    parser.add_argument("-p", "--prompt", required=True)
    parser.add_argument("--output-format", choices=["stream-json"], required=True)
    options = parser.parse_args(args)
    resume, prompt = options.resume, options.prompt
    ts = "2025-10-10T12:00:00.000Z"
    say(
        {
            "type": "init",
            "timestamp": ts,
            "session_id": resume or "gemini-session-1",
            "model": "gemini-2.5-pro",
        }
    )
    say({"type": "message", "timestamp": ts, "role": "user", "content": prompt})
    if "crash" in prompt:
        sys.exit("Error: the configuration file is broken")  # on stderr, status 1, no result
    if "sleep" in prompt:
        say({"type": "message", "timestamp": ts, "role": "assistant", "content": "sleeping", "delta": True})
        wait_for_sigint()
    if "tool" in prompt:
        say(
            {
                "type": "tool_use",
                "timestamp": ts,
                "tool_name": "read_file",
                "tool_id": "rf-1",
                "parameters": {"absolute_path": "/w/notes.txt"},
            }
        )
        say(
            {
                "type": "tool_result",
                "timestamp": ts,
                "tool_id": "rf-1",
                "status": "success",
                "output": "notes",
            }
        )
    answer = f"resumed {resume}" if resume else "fresh session"
    say({"type": "message", "timestamp": ts, "role": "assistant", "content": answer, "delta": True})
    stats = {
        "total_tokens": 30,
        "input_tokens": 20,
        "output_tokens": 10,
        "cached": 0,
        "input": 20,
        "duration_ms": 5,
        "tool_calls": 0,
        "models": {},
    }
    say({"type": "result", "timestamp": ts, "status": "success", "stats": stats})


def codex(args: list[str]) -> None:
    assert args[:2] == ["exec", "--json"], args
    rest = args[2:]
    while rest[:1] in (["-m"], ["-C"]):  # exec's own options: before its resume subcommand, never after
        rest = rest[2:]
    resume = None
    if rest[:1] == ["resume"]:
        resume, rest = rest[1], rest[2:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    elif rest[0].startswith("-"):
        sys.exit(f"error: unexpected argument '{rest[0]}' found")  # as clap says it
    (prompt,) = rest
    say({"type": "thread.started", "thread_id": resume or "codex-thread-1"})
    say({"type": "turn.started"})
    if "sleep" in prompt:
        say({"type": "item.completed", "item": {"id": "item_0", "type": "agent_message", "text": "sleeping"}})
        wait_for_sigint()
    if "tool" in prompt:  # item ids start at item_0 in every run, as Codex numbers them
        command = {"id": "item_0", "type": "command_execution", "command": "ls", "aggregated_output": ""}
        say({"type": "item.started", "item": {**command, "status": "in_progress"}})
        done = {**command, "aggregated_output": "notes.txt\n", "exit_code": 0, "status": "completed"}
        say({"type": "item.completed", "item": done})
    answer = f"resumed {resume}" if resume else "fresh session"
    say({"type": "item.completed", "item": {"id": "item_1", "type": "agent_message", "text": answer}})
    say(
        {
            "type": "turn.completed",
            "usage": {"input_tokens": 20, "cached_input_tokens": 0, "output_tokens": 10},
        }
    )


if __name__ == "__main__":
    {"gemini": gemini, "codex": codex}[sys.argv[1]](sys.argv[2:])
