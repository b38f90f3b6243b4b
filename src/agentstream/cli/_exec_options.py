"""``exec``'s options, shared with ``submit`` (which checks a job's options before queueing it)."""

from __future__ import annotations

import argparse

from agentstream.agent.permissions import ALL_PERMISSION_MODES
from agentstream.agent.providers import PROVIDER_NAMES
from agentstream.cli._bus_options import add_publish_options
from agentstream.cli._options import (
    add_output_options,
    non_negative_int,
    positive_dollars,
    positive_int,
    positive_seconds,
    seconds,
)

__all__ = ["CLAUDE_IGNORED", "add_exec_options", "resolve_permission_mode"]

DEFAULT_PERMISSION_MODE = "workspace-write"
"""``exec``'s own default mode (docs/agent.md)."""
CLAUDE_DEFAULT_PERMISSION_MODE = "default"
"""The default when agentstream speaks as Claude Code (``--dialect claude``, ``agentstream-claude``):
Claude Code's own, which asks before shell commands and file writes. A Claude Agent SDK client with
``can_use_tool`` and no ``permission_mode`` sends no ``--permission-mode`` and counts on being asked."""


def resolve_permission_mode(args: argparse.Namespace) -> str:
    """The mode a run starts in (stored back on ``args``): the one given, else the dialect's default."""
    mode = getattr(args, "permission_mode", None)
    if mode is None:
        mode = CLAUDE_DEFAULT_PERMISSION_MODE if args.dialect == "claude" else DEFAULT_PERMISSION_MODE
        args.permission_mode = mode
    return str(mode)


CLAUDE_IGNORED: dict[str, str] = {
    # Claude Code options the Claude Agent SDK may pass that have no meaning here: option -> nargs
    "--verbose": "0",
    "--task-budget": "1",
    "--fallback-model": "1",
    "--betas": "1",
    "--settings": "1",
    "--add-dir": "1",
    "--include-hook-events": "0",
    "--strict-mcp-config": "0",
    "--resume-session-at": "1",
    "--resume-drops-turn": "1",
    "--session-mirror": "0",
    "--setting-sources": "1",
    "--plugin-dir": "1",
    "--thinking": "1",
    "--thinking-display": "1",
    "--effort": "1",
    "--json-schema": "1",
    "--replay-user-messages": "0",
    "--no-session-persistence": "0",
    "--forward-subagent-text": "0",
    "--bare": "0",
}
"""Accepted so the SDK can drive ``exec --dialect claude``; each one given costs a debug line on stderr."""


def add_exec_options(parser: argparse.ArgumentParser) -> None:
    """Every option of ``agentstream exec``."""
    parser.add_argument("prompt", nargs="?", help="what to do; - reads it from stdin")
    parser.add_argument(
        "-p", "--prompt", dest="prompt_option", metavar="PROMPT", help="the prompt, as an option"
    )
    add_output_options(parser, default=None)
    parser.add_argument(
        "--input-format",
        choices=("text", "stream-json"),
        default="text",
        help="stream-json: read user turns as NDJSON from stdin, one result per turn",
    )
    model = parser.add_argument_group("model")
    model.add_argument(
        "--provider",
        metavar="NAME",
        help=f"{', '.join(PROVIDER_NAMES)} or an installed plugin's (default: picked from the environment)",
    )
    model.add_argument("--model", help="model name (default: the provider's; or $AGENTSTREAM_MODEL)")
    model.add_argument(
        "--base-url", metavar="URL", help="an OpenAI-compatible server (vLLM, llama.cpp, LM Studio…)"
    )
    model.add_argument(
        "--system", "--system-prompt", metavar="TEXT", help="replace the default system prompt"
    )
    model.add_argument(
        "--append-system-prompt", dest="append_system", metavar="TEXT", help="add to the system prompt"
    )
    model.add_argument(
        "--max-tokens",
        type=positive_int,
        default=8192,
        metavar="N",
        help="answer tokens per Anthropic call (default 8192)",
    )
    model.add_argument(
        "--thinking-budget",
        "--max-thinking-tokens",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="Anthropic extended thinking tokens",
    )
    model.add_argument(
        "--timeout",
        type=positive_seconds,
        default=600.0,
        metavar="S",
        help="seconds per model call (default 600)",
    )
    model.add_argument(
        "--max-retries",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="retries of a failed call (default 3, $AGENTSTREAM_MAX_RETRIES)",
    )
    model.add_argument("--cassette", metavar="FILE", help="replay this cassette instead of calling a model")
    model.add_argument("--record", metavar="FILE", help="also record the model's turns to this cassette")
    agent = parser.add_argument_group("agent")
    agent.add_argument("--cwd", metavar="DIR", help="the workspace the tools work in (default: here)")
    agent.add_argument(
        "--max-turns",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="model calls per prompt (default 0: no limit)",
    )
    agent.add_argument(
        "--max-budget-usd",
        type=positive_dollars,
        metavar="USD",
        help="stop a prompt's run once its model calls cost this much (default: no limit)",
    )
    agent.add_argument(
        "--permission-mode",
        choices=ALL_PERMISSION_MODES,
        default=None,
        help="what tools may do (default workspace-write; with --dialect claude, Claude Code's default, "
        "which asks first); Claude Code's modes are accepted too (see docs/agent.md)",
    )
    agent.add_argument(
        "--dangerously-skip-permissions",
        dest="permission_mode",
        action="store_const",
        const="bypassPermissions",
        help="the same as --permission-mode bypassPermissions",
    )
    agent.add_argument(
        "--allow-dangerously-skip-permissions",
        dest="allow_bypass",
        action="store_true",
        help="let a two-way client switch the session to bypassPermissions (or full) later; without it only "
        "a session started in that mode runs in it",
    )
    agent.add_argument(
        "--permission-prompt-tool",
        metavar="stdio",
        help="stdio: ask on stdout before a tool call the mode does not allow, wait for the answer on stdin",
    )
    agent.add_argument(
        "--permission-timeout",
        type=positive_seconds,
        default=300.0,
        metavar="S",
        help="deny a permission request nobody answered within S seconds, more than 0 (default 300)",
    )
    agent.add_argument(
        "--heartbeat",
        type=seconds,
        default=None,
        metavar="S",
        help="emit a heartbeat after S silent seconds (two-way sessions: default 15; 0 turns them off)",
    )
    agent.add_argument("--tools", metavar="LIST", help="comma-separated allow-list of tools")
    agent.add_argument(
        "--allowedTools",
        "--allowed-tools",
        dest="allowed_tools",
        metavar="LIST",
        help="tools that run without asking",
    )
    agent.add_argument(
        "--disallowedTools",
        "--disallowed-tools",
        dest="disallowed_tools",
        metavar="LIST",
        help="tools never offered",
    )
    agent.add_argument(
        "--mcp-config",
        action="append",
        metavar="CONFIG",
        help="MCP servers, as JSON text or a file of it in the shape of .mcp.json (stdio, http or sse); "
        "their tools join the run as mcp__SERVER__TOOL (repeatable)",
    )
    agent.add_argument(
        "--include-partial-messages",
        action="store_true",
        help="with --dialect claude: also write stream_event lines (always on for canonical deltas)",
    )
    agent.add_argument(
        "--no-deltas", action="store_true", help="only complete messages, no message_delta events"
    )
    session = parser.add_argument_group("session")
    session.add_argument("--session-id", metavar="ID", help="the id of the new session")
    session.add_argument("--resume", metavar="ID", help="continue this stored session")
    session.add_argument(
        "--continue", dest="continue_", action="store_true", help="continue the latest session here"
    )
    session.add_argument(
        "--fork-session",
        action="store_true",
        help="with --resume or --continue: go on in a copy under a new id, leaving the stored session as it was",
    )
    add_publish_options(parser)
    claude = parser.add_argument_group("Claude Code compatibility (accepted, no effect; see docs/agent.md)")
    for option, nargs in CLAUDE_IGNORED.items():
        if nargs == "0":
            claude.add_argument(option, action="count", default=0, help=argparse.SUPPRESS)
        else:
            claude.add_argument(option, action="append", metavar="X", help=argparse.SUPPRESS)
