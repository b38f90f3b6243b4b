"""``agentstream acp``: an ACP agent on stdio (JSON-RPC 2.0, one message per line).

Without ``--cli`` the agent is agentstream's own (``exec``'s loop and tools);
with ``--cli NAME`` each prompt runs that agent CLI headless and its stream is
presented over ACP. stdout carries only JSON-RPC; everything else goes to stderr.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from agentstream.agent.permissions import ALL_PERMISSION_MODES
from agentstream.agent.providers import PROVIDER_NAMES
from agentstream.cli._bus_options import add_publish_options
from agentstream.cli._options import non_negative_int, positive_int

if TYPE_CHECKING:
    from agentstream.acp.agent import AcpAgent


def configure(parser: argparse.ArgumentParser) -> None:
    from agentstream.acp.cli_agent import CLI_NAMES

    parser.add_argument(
        "--cli",
        choices=CLI_NAMES,
        metavar="NAME",
        help=f"present this agent CLI over ACP instead of agentstream's own agent ({', '.join(CLI_NAMES)})",
    )
    parser.add_argument("--cli-path", metavar="PATH", help="the CLI's binary (default: NAME found on PATH)")
    parser.add_argument(
        "--permission-mode",
        choices=ALL_PERMISSION_MODES,
        default="default",
        help="what runs without asking the client: default asks before shell, writes and edits; "
        "acceptEdits asks before shell only; full (or bypassPermissions) never asks",
    )
    model = parser.add_argument_group("agentstream's own agent")
    model.add_argument("--provider", choices=PROVIDER_NAMES, help="default: picked from the environment")
    model.add_argument("--model", help="model name (default: the provider's; or $AGENTSTREAM_MODEL)")
    model.add_argument("--base-url", metavar="URL", help="an OpenAI-compatible server")
    model.add_argument("--system", metavar="TEXT", help="replace the default system prompt")
    model.add_argument(
        "--max-tokens", type=positive_int, default=8192, metavar="N", help="answer tokens per Anthropic call"
    )
    model.add_argument(
        "--max-turns",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="model calls per prompt (0: no limit)",
    )
    model.add_argument("--cassette", metavar="FILE", help="replay this cassette instead of calling a model")
    model.add_argument("--allowed-tools", metavar="LIST", help="tools that run without asking")
    add_publish_options(parser)
    parser.add_argument(
        "argv", nargs=argparse.REMAINDER, metavar="-- ARGS", help="with --cli: more arguments for the CLI"
    )


def run(args: argparse.Namespace) -> int:
    from agentstream.agent.control import OutputChannel
    from agentstream.cli._options import stdin_bytes
    from agentstream.errors import UsageError

    extra = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if extra and not args.cli:
        raise UsageError(
            f"unexpected arguments: {' '.join(extra)}", fix="arguments after -- go to the --cli agent"
        )
    if args.cli_path and not args.cli:
        raise UsageError(
            "--cli-path needs --cli", fix="name the CLI: --cli claude --cli-path /path/to/claude"
        )
    requests = stdin_bytes(fix="start it from an ACP client, which writes JSON-RPC to its stdin")
    agent: AcpAgent
    if args.cli:
        from agentstream.acp.cli_agent import CliAgent

        agent = CliAgent(
            args.cli,
            args.cli_path,
            extra,
            permission_mode=args.permission_mode,
            bus=args.bus,
            publish=not args.no_publish,
        )
    else:
        from agentstream.acp.own_agent import OwnAgent
        from agentstream.agent.runner import ExecOptions

        agent = OwnAgent(ExecOptions.from_args(args))
    output = OutputChannel()  # the real stdout, kept for JSON-RPC; stray prints go to stderr
    try:
        return agent.serve(requests, output)
    finally:
        agent.close()
