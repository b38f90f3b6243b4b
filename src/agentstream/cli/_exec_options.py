"""``exec``'s options, shared with ``submit`` (which checks a job's options before queueing it)."""

from __future__ import annotations

import argparse

from agentstream.agent.permissions import PERMISSION_MODES
from agentstream.agent.providers import PROVIDER_NAMES
from agentstream.cli._bus_options import add_publish_options
from agentstream.cli._options import (
    add_output_options,
    non_negative_int,
    positive_int,
    positive_seconds,
)

__all__ = ["add_exec_options"]


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
    model.add_argument("--provider", choices=PROVIDER_NAMES, help="default: picked from the environment")
    model.add_argument("--model", help="model name (default: the provider's; or $AGENTSTREAM_MODEL)")
    model.add_argument(
        "--base-url", metavar="URL", help="an OpenAI-compatible server (vLLM, llama.cpp, LM Studio…)"
    )
    model.add_argument("--system", metavar="TEXT", help="replace the default system prompt")
    model.add_argument(
        "--max-tokens",
        type=positive_int,
        default=8192,
        metavar="N",
        help="answer tokens per Anthropic call (default 8192)",
    )
    model.add_argument(
        "--thinking-budget",
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
        help="model calls per prompt (default: no limit)",
    )
    agent.add_argument("--permission-mode", choices=PERMISSION_MODES, default="workspace-write")
    agent.add_argument("--tools", metavar="LIST", help="comma-separated allow-list of tools")
    agent.add_argument(
        "--no-deltas", action="store_true", help="only complete messages, no message_delta events"
    )
    session = parser.add_argument_group("session")
    session.add_argument("--session-id", metavar="ID", help="the id of the new session")
    session.add_argument("--resume", metavar="ID", help="continue this stored session")
    session.add_argument(
        "--continue", dest="continue_", action="store_true", help="continue the latest session here"
    )
    add_publish_options(parser)
