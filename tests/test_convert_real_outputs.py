"""What the real Codex, Gemini CLI and opencode printed, converted into the other dialects.

The fixtures are the CLIs' own output (``real-<version>-…``, captured against the loopback model servers of
``_agent_fakes``). Converted ``--to claude`` they are read by the official Claude Agent SDK's message parser,
as a program that drives Claude Code would read them: every line must parse, and the SDK's result must say
what the CLI's run said.
"""

from __future__ import annotations

import pytest

from _dialect_kit import decode, decode_fixture, encode, encode_objects, only
from agentstream import protocol as p

FAILED_COMMAND = ("codex", "real-0.171.0-tools.ndjson")
"""A turn whose ``echo oops >&2; exit 3`` failed: Codex gives its exit code and what it printed."""


@pytest.mark.parametrize("dialect", ["claude", "amp", "cursor"])
def test_a_failed_call_keeps_its_error_and_what_it_printed_in_a_dialect_with_one_text_for_both(
    dialect: str,
) -> None:
    events = decode_fixture(*FAILED_COMMAND)
    (failed,) = [r for r in only(events, p.ToolResult) if r.status == "error"]
    assert (failed.error, failed.output) == ("exit code 3", "oops\n")
    (back,) = [r for r in only(decode(dialect, encode(dialect, events)), p.ToolResult) if r.status == "error"]
    assert back.error == "exit code 3\noops\n"


def test_a_failed_call_reaches_the_claude_sdk_with_its_error_and_what_it_printed() -> None:
    from claude_agent_sdk import ToolResultBlock, UserMessage
    from claude_agent_sdk._internal.message_parser import parse_message

    parsed = [parse_message(obj) for obj in encode_objects("claude", decode_fixture(*FAILED_COMMAND))]
    blocks = [
        block
        for message in parsed
        if isinstance(message, UserMessage) and isinstance(message.content, list)
        for block in message.content
        if isinstance(block, ToolResultBlock) and block.is_error
    ]
    assert [block.content for block in blocks] == ["exit code 3\noops\n"]
