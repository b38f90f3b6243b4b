"""What the real Codex, Gemini CLI and opencode printed, converted into the other dialects.

The fixtures are the CLIs' own output (``real-<version>-…``, captured against the loopback model servers of
``_agent_fakes``). Converted ``--to claude`` they are read by the official Claude Agent SDK's message parser,
as a program that drives Claude Code would read them: every line must parse, and the SDK's result must say
what the CLI's run said.
"""

from __future__ import annotations

import pytest

from _dialect_kit import decode, decode_fixture, encode, encode_objects, one, only
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


REAL_RUNS = [
    ("codex", "real-0.171.0-tools.ndjson"),
    ("codex", "real-0.171.0-api-401.ndjson"),
    ("codex", "real-0.171.0-reconnect.ndjson"),
    ("gemini", "real-0.61.0-tools.ndjson"),
    ("gemini", "rate-limited-429.ndjson"),
    ("gemini", "cut-off.ndjson"),
    ("opencode", "real-1.18.33-tools.ndjson"),
    ("opencode", "real-1.18.33-api-401.ndjson"),
    ("opencode", "real-1.18.33-dropped.ndjson"),
]


@pytest.mark.parametrize(("dialect", "name"), REAL_RUNS)
def test_a_real_run_converted_to_claude_is_parsed_whole_and_its_result_agrees(
    dialect: str, name: str
) -> None:
    from claude_agent_sdk import ResultMessage
    from claude_agent_sdk._internal.message_parser import parse_message

    events = decode_fixture(dialect, name)
    result = one(events, p.Result)
    parsed = [parse_message(obj) for obj in encode_objects("claude", events)]
    assert None not in parsed
    (sdk,) = [message for message in parsed if isinstance(message, ResultMessage)]
    assert parsed[-1] is sdk
    assert (sdk.is_error, sdk.result, sdk.num_turns) == (
        not result.ok,
        result.result if result.result is not p.UNSET else None,
        result.turn_count,
    )
    assert sdk.num_turns >= 1 or not result.ok  # an answer took a model call at least
    assert sdk.usage is not None
    given = sdk.usage["input_tokens"] + sdk.usage["cache_read_input_tokens"]
    assert (given + sdk.usage["cache_creation_input_tokens"], sdk.usage["output_tokens"]) == (
        result.usage.input_tokens,
        result.usage.output_tokens,
    )
    assert sdk.usage["cache_read_input_tokens"] == result.usage.cached_tokens
    if not result.ok:
        assert result.error is not p.UNSET and sdk.errors == [result.error.message]
