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
import sys

from agentstream.cli._exec_options import add_exec_options, resolve_permission_mode
from agentstream.cli._options import resolve_output_format
from agentstream.errors import AgentstreamError, UsageError


def configure(parser: argparse.ArgumentParser) -> None:
    add_exec_options(parser)


def run(args: argparse.Namespace) -> int:
    from agentstream.agent.runner import ExecOptions, fail_before_start
    from agentstream.agent.runner import run as run_agent

    resolve_output_format(args)
    _say_ignored(args)
    resolve_permission_mode(args)
    try:
        prompt = _first_prompt(args)
    except AgentstreamError as exc:
        return fail_before_start(ExecOptions.from_args(args), exc)
    return run_agent(ExecOptions.from_args(args, prompt))


def _say_ignored(args: argparse.Namespace) -> None:
    """One debug line per Claude Code option given that means nothing here."""
    from agentstream.cli._exec_options import CLAUDE_IGNORED

    for option in CLAUDE_IGNORED:
        if getattr(args, option.lstrip("-").replace("-", "_"), None) and option != "--verbose":
            sys.stderr.write(f"agentstream exec: debug: {option} has no effect here; ignored\n")
    if args.permission_prompt_tool not in (None, "stdio"):
        sys.stderr.write(
            f"agentstream exec: debug: --permission-prompt-tool {args.permission_prompt_tool}: only stdio "
            "is supported; calls that need permission are denied\n"
        )


def _first_prompt(args: argparse.Namespace) -> str | None:
    """The prompt from PROMPT, -p or stdin (``-``); text that is not UTF-8 is refused here, before the run."""
    from agentstream._text import utf8_text
    from agentstream.cli._options import stdin_bytes

    if args.prompt is not None and args.prompt_option is not None:
        raise UsageError("the prompt was given twice", fix="pass it either as PROMPT or with -p, not both")
    prompt = args.prompt if args.prompt is not None else args.prompt_option
    if prompt == "-":
        if args.input_format == "stream-json":
            raise UsageError(
                "with --input-format stream-json, stdin carries the turns", fix="drop the - prompt"
            )
        prompt = utf8_text(
            stdin_bytes(fix="pass PROMPT or -p PROMPT, or pipe the prompt in").read(), "the prompt"
        )
    elif prompt is not None:
        prompt = utf8_text(prompt, "the prompt")
    if args.system is not None:
        utf8_text(args.system, "--system")
    if args.input_format == "stream-json":
        stdin_bytes(fix="send the turns on stdin, or use --input-format text with a PROMPT")
    if args.input_format == "text" and not (prompt or "").strip():
        raise UsageError("no prompt", fix="pass PROMPT, -p PROMPT, or - to read it from stdin")
    return prompt
