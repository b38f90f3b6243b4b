"""``agentstream exec``: run the agent on a prompt and stream what it does.

Every run is one protocol stream. With ``--input-format stream-json`` each user
turn read from stdin is its own stream (its own ``session_id``, ``seq`` from 0,
one ``result``), and all of them continue one stored session; the process exits
with the last turn's code. See ``docs/agent.md``.

Only light modules are imported at the top, so ``exec --help`` stays fast; the
provider SDKs load on the first model call.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from agentstream.cli._exec_options import add_exec_options
from agentstream.cli._options import resolve_output_format
from agentstream.errors import AgentstreamError, UsageError


def configure(parser: argparse.ArgumentParser) -> None:
    add_exec_options(parser)


def run(args: argparse.Namespace) -> int:
    from agentstream.agent.runner import ExecOptions, fail_before_start
    from agentstream.agent.runner import run as run_agent

    resolve_output_format(args)
    names = [field.name for field in dataclasses.fields(ExecOptions) if field.name != "prompt"]
    settings = {name: getattr(args, name) for name in names}
    try:
        prompt = _first_prompt(args)
    except AgentstreamError as exc:
        return fail_before_start(ExecOptions(prompt=None, **settings), exc)
    return run_agent(ExecOptions(prompt=prompt, **settings))


def _first_prompt(args: argparse.Namespace) -> str | None:
    if args.prompt is not None and args.prompt_option is not None:
        raise UsageError("the prompt was given twice", fix="pass it either as PROMPT or with -p, not both")
    prompt = args.prompt if args.prompt is not None else args.prompt_option
    if prompt == "-":
        if args.input_format == "stream-json":
            raise UsageError(
                "with --input-format stream-json, stdin carries the turns", fix="drop the - prompt"
            )
        prompt = sys.stdin.read()
    if args.input_format == "text" and not (prompt or "").strip():
        raise UsageError("no prompt", fix="pass PROMPT, -p PROMPT, or - to read it from stdin")
    return prompt
