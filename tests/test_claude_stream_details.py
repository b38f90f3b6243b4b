"""Claude Code output details: empty thinking lines, token counts read liberally, structured output, running
totals, the one-object JSON output read the same compact or pretty-printed, MCP blocks, denials, cut thinking."""

from __future__ import annotations

import io
import itertools
import json
from typing import Any

import msgspec
import pytest

from _dialect_kit import encode_objects, one, only, violations
from agentstream import protocol as p
from agentstream.consumer import read
from agentstream.dialects import get_dialect

INIT = {
    "type": "system",
    "subtype": "init",
    "cwd": "/x",
    "session_id": "s1",
    "tools": ["Bash"],
    "mcp_servers": [],
    "model": "claude-sonnet-4-5",
    "permissionMode": "default",
    "apiKeySource": "none",
    "claude_code_version": "2.1.211",
    "uuid": "i",
}


def _stream(event: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "stream_event",
        "event": event,
        "session_id": "s1",
        "parent_tool_use_id": None,
        "uuid": "e",
    }


def _assistant(block: dict[str, Any], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"model": "claude-sonnet-4-5", "id": "msg_1", "type": "message"}
    message.update(role="assistant", content=[block], stop_reason=None)
    if usage is not None:
        message["usage"] = usage
    return {
        "type": "assistant",
        "message": message,
        "parent_tool_use_id": None,
        "session_id": "s1",
        "uuid": "a",
    }


def _result(**fields: Any) -> dict[str, Any]:
    line = {"type": "result", "subtype": "success", "is_error": False, "duration_ms": 100, "num_turns": 1}
    line.update(result="Hi", session_id="s1", permission_denials=[], uuid="r")
    line.update(fields)
    return line


def _data(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(obj).encode() + b"\n" for obj in lines)


def _both(lines: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> list[p.AnyEvent]:
    """The stream read with the typed decoder and without it: the same events (returned), both ways."""
    data = _data(lines)

    def events() -> list[Any]:
        counter = itertools.count()
        monkeypatch.setattr(p, "new_id", lambda prefix: f"{prefix}_{next(counter):016x}")
        monkeypatch.setattr(p, "now_ts", lambda: "2026-01-01T00:00:00.000Z")
        return list(read(data, "claude"))

    typed = events()
    decoder_class = type(get_dialect("claude").decoder())
    with monkeypatch.context() as careful_only:
        careful_only.setattr(decoder_class, "typed_lines", None)
        careful = events()
    assert [msgspec.to_builtins(e) for e in typed] == [msgspec.to_builtins(e) for e in careful]
    return typed


def _thinking_run(*, with_line: bool) -> list[dict[str, Any]]:
    """A streamed thinking block then a text block; the thinking block's line holds no text, or is missing."""
    start = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-sonnet-4-5",
    }
    lines = [
        INIT,
        _stream(
            {"type": "message_start", "message": {**start, "usage": {"input_tokens": 10, "output_tokens": 1}}}
        ),
        _stream(
            {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}
        ),
        _stream(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}}
        ),
        _stream(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "m"}}
        ),
        _stream(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "signature_delta", "signature": "s"},
            }
        ),
    ]
    if with_line:
        lines.append(_assistant({"type": "thinking", "thinking": "", "signature": "s"}))
    return [
        *lines,
        _stream({"type": "content_block_stop", "index": 0}),
        _stream({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        _stream({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}}),
        _assistant({"type": "text", "text": "Hi"}),
        _stream({"type": "content_block_stop", "index": 1}),
        _stream(
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 30}}
        ),
        _stream({"type": "message_stop"}),
        _result(total_cost_usd=0.01, usage={"input_tokens": 10, "output_tokens": 30}),
    ]


# -- streamed blocks --------------------------------------------------------------------------


def test_a_thinking_line_with_no_text_closes_its_run_with_the_deltas(monkeypatch: pytest.MonkeyPatch) -> None:
    """Claude Code >= 2.1.211 writes a streamed thinking block's text only as deltas."""
    events = _both(_thinking_run(with_line=True), monkeypatch)
    assert one(events, p.Reasoning).content == "hmm"
    assert [e.type for e in events[1:4]] == ["reasoning_delta", "reasoning_delta", "reasoning"]
    assert one(events, p.Message).content == "Hi" and not violations(events)


def test_an_empty_text_line_after_text_deltas_keeps_the_deltas(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _thinking_run(with_line=True)
    lines[10] = _assistant({"type": "text", "text": ""})
    assert one(_both(lines, monkeypatch), p.Message).content == "Hi"


def test_a_thinking_run_without_its_line_closes_at_its_block_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``assistant`` line before ``content_block_stop``: the run ends there, not as a made-up reasoning."""
    events = _both(_thinking_run(with_line=False), monkeypatch)
    reasoning = one(events, p.Reasoning)
    assert reasoning.content == "hmm" and reasoning.synthetic is not True
    assert [e.type for e in events[1:5]] == [
        "reasoning_delta",
        "reasoning_delta",
        "reasoning",
        "message_delta",
    ]
    assert not violations(events)


def test_a_line_after_the_block_stop_of_its_run_is_not_repeated(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _thinking_run(with_line=False)
    lines.insert(7, _assistant({"type": "thinking", "thinking": "hmm", "signature": "s"}))  # after the stop
    events = _both(lines, monkeypatch)
    assert one(events, p.Reasoning).content == "hmm" and not violations(events)


def _interrupted(*, kept: bool) -> list[dict[str, Any]]:
    """An answer interrupted as it streamed, as Claude Code 2.1.332 writes it (captured, loopback model server):
    the text so far in an ``aborted`` assistant line, the interrupt as a user line, then the message's end, whose
    ``message_stop`` names the blocks dropped. Not ``kept``: the streamed block is among them, with no line."""
    start = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-sonnet-4-5",
    }
    text = {"type": "text", "text": ""}
    lines = [
        INIT,
        _stream(
            {"type": "message_start", "message": {**start, "usage": {"input_tokens": 20, "output_tokens": 1}}}
        ),
        _stream({"type": "content_block_start", "index": 0, "content_block": text}),
        *(
            _stream(
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": part}}
            )
            for part in ("A lo", "ng a")
        ),
    ]
    if kept:
        lines += [
            {**_assistant({"type": "text", "text": "A long a"}), "aborted": True},
            {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": _INTERRUPT}]}},
            _stream({"type": "content_block_stop", "index": 0}),
        ]
    stop = _stream({"type": "message_stop"})
    stop.update(
        api_message_id="msg_1", abandoned_blocks={"api_message_id": "msg_1", "from_block_index": int(kept)}
    )
    lines += [_stream({"type": "message_delta", "delta": {"stop_reason": None}}), stop]
    result = _result(subtype="error_during_execution", is_error=True, terminal_reason="aborted_streaming")
    del result["result"]  # none after an interrupt (#94741)
    return [*lines, result]


_INTERRUPT = "[Request interrupted by user]"


@pytest.mark.parametrize("kept", [True, False])
def test_an_interrupted_answer_is_what_claude_code_kept_of_it(
    kept: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claude Code keeps the text streamed before an interrupt (its ``aborted`` line): that is the message. A block
    its ``message_stop`` says it dropped, with no line, was discarded: an empty message, not its deltas."""
    events = _both(_interrupted(kept=kept), monkeypatch)
    said = [(e.role, e.content, e.synthetic) for e in only(events, p.Message)]
    assert said == (
        [("assistant", "A long a", p.UNSET), ("user", _INTERRUPT, p.UNSET)]
        if kept
        else [("assistant", "", p.UNSET)]
    )
    result = events[-1]
    assert isinstance(result, p.Result) and result.subtype == "interrupted" and not violations(events)


# -- token counts -----------------------------------------------------------------------------------


def test_token_counts_are_read_as_the_kit_reads_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A numeric string is its number, a fraction is rounded; an unreadable count is lost and reported once."""
    lines = _thinking_run(with_line=True)
    lines[1]["event"]["message"]["usage"] = {"input_tokens": "10", "cache_read_input_tokens": 5.5}
    lines[-3]["event"]["usage"] = {"output_tokens": "x"}
    lines[-1]["usage"] = {"input_tokens": "10", "output_tokens": "42", "cache_read_input_tokens": True}
    events = _both(lines, monkeypatch)
    usage = one(events, p.Usage)
    assert (usage.input_tokens, usage.cached_tokens) == (16, 6)
    result = events[-1]
    assert isinstance(result, p.Result)
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.cached_tokens) == (10, 42, 0)
    warned = [e.message for e in only(events, p.Log)]
    assert len(warned) == 2 and all("the field was ignored" in text for text in warned)
    assert "'output_tokens' must be an integer" in warned[0] and "cache_read_input_tokens" in warned[1]


def test_an_assistant_line_s_counts_are_read_liberally_too(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [
        INIT,
        _assistant({"type": "text", "text": "Hi"}, {"input_tokens": "7", "output_tokens": -3}),
        _result(),
    ]
    events = _both(lines, monkeypatch)
    assert (one(events, p.Usage).input_tokens, one(events, p.Usage).output_tokens) == (7, 0)
    assert "'output_tokens' must not be negative" in one(events, p.Log).message


# -- the result -------------------------------------------------------------------------------------


def test_structured_output_is_carried_and_written_back() -> None:
    shape = {"files": ["a", "b"]}
    lines = [INIT, _assistant({"type": "text", "text": "{}"}), _result(result="", structured_output=shape)]
    events = list(read(_data(lines), "claude"))
    carried = [e for e in events if isinstance(e, p.GenericEvent) and e.name == "claude.structured_output"]
    assert [e.data for e in carried] == [shape] and events[-1].type == "result" and not violations(events)
    written = encode_objects("claude", events)
    assert written[-1]["type"] == "result" and written[-1]["structured_output"] == shape
    assert not any(line.get("subtype") == "agentstream_event" for line in written)


def test_a_failed_result_without_errors_still_says_it_failed() -> None:
    line = _result(subtype="error_during_execution", is_error=True)
    del line["result"]
    events = list(read(_data([INIT, line]), "claude"))
    error, result = events[-2:]
    assert isinstance(error, p.Error) and not error.recoverable
    assert error.message == "claude ended with error_during_execution"
    assert isinstance(result, p.Result) and not result.ok and isinstance(result.error, p.ErrorInfo)
    assert not violations(events)


MODEL_USAGE = {
    "claude-haiku-4-5": {"inputTokens": 100, "outputTokens": 10, "cacheReadInputTokens": 0, "costUSD": 0.001},
    "claude-sonnet-4-5": {
        "inputTokens": 5,
        "outputTokens": 50,
        "cacheReadInputTokens": "20",
        "cacheCreationInputTokens": 3,
        "costUSD": 0.009,
    },
}


def test_result_tokens_count_every_model_as_its_cost_does() -> None:
    """``usage`` is the main model's alone; ``modelUsage`` and ``total_cost_usd`` are every model's."""
    usage = {"input_tokens": 5, "output_tokens": 50, "cache_read_input_tokens": 20}
    line = _result(usage=usage, modelUsage=MODEL_USAGE, total_cost_usd=0.01)
    totals = list(read(_data([INIT, line]), "claude"))[-1].usage
    assert (totals.input_tokens, totals.output_tokens, totals.cached_tokens) == (128, 60, 20)
    assert (totals.cache_write_tokens, totals.cost_usd) == (3, 0.01)


def test_each_turn_of_a_session_counts_what_the_running_totals_grew_by() -> None:
    """With stream-json input every turn's result carries the session's running cost and ``modelUsage``."""
    grown = {model: dict(figures) for model, figures in MODEL_USAGE.items()}
    grown["claude-sonnet-4-5"].update(inputTokens=9, outputTokens=80)
    first = _result(modelUsage=MODEL_USAGE, total_cost_usd=0.01)
    second = _result(modelUsage=grown, total_cost_usd=0.03)
    reset = {"type": "conversation_reset", "new_conversation_id": "s2", "session_id": "s1", "uuid": "c"}
    events = list(read(_data([INIT, first, INIT, second, INIT, second, reset, INIT, second]), "claude"))
    turns = [e.usage for e in events if isinstance(e, p.Result)]
    assert [(t.input_tokens, t.output_tokens, t.cost_usd) for t in turns] == [
        (128, 60, 0.01),
        (4, 30, 0.02),
        (0, 0, 0.0),
        (132, 90, 0.03),  # after /clear the totals start again
    ]
    restarted = list(read(_data([INIT, second, INIT, first]), "claude"))  # went down: started again
    assert [e.usage.cost_usd for e in restarted if isinstance(e, p.Result)] == [0.03, 0.01]


@pytest.mark.parametrize("unknown", [{}, {"modelUsage": [], "total_cost_usd": "much"}])
def test_a_result_without_the_running_totals_keeps_the_last_ones_known(unknown: dict[str, Any]) -> None:
    """A turn whose result does not say the running totals (or says them in another kind) adds nothing known: the
    next result's share is what the totals grew by since the last ones known, not all of them again."""
    grown = {model: dict(figures) for model, figures in MODEL_USAGE.items()}
    grown["claude-sonnet-4-5"].update(inputTokens=9, outputTokens=80)
    first = _result(modelUsage=MODEL_USAGE, total_cost_usd=0.01)
    second = _result(modelUsage=grown, total_cost_usd=0.03)
    events = list(read(_data([INIT, first, INIT, _result(**unknown), INIT, second]), "claude"))
    turns = [e.usage for e in events if isinstance(e, p.Result)]
    assert [(t.input_tokens, t.output_tokens, t.cost_usd) for t in turns] == [
        (128, 60, 0.01),
        (0, 0, p.UNSET),
        (4, 30, 0.02),
    ]


OPUS_USAGE = {  # a turn's modelUsage entry as Claude Code 2.1.332 writes it (captured, loopback model server)
    "inputTokens": 100000,
    "outputTokens": 1000,
    "cacheReadInputTokens": 0,
    "cacheCreationInputTokens": 0,
    "webSearchRequests": 0,
    "costUSD": 0.42000000000000004,
    "contextWindow": 1000000,
    "maxOutputTokens": 128000,
    "thinkingTokens": 0,
    "cacheCreationEphemeral5mInputTokens": 0,
    "cacheCreationEphemeral1hInputTokens": 0,
    "canonicalModel": "claude-opus-5-5",
    "provider": "firstParty",
    "costBasis": "list",
}


def test_claude_code_model_usage_is_read_and_an_odd_entry_loses_only_itself() -> None:
    """Real ``modelUsage`` (more keys than it reads), running over the turns; an entry or figure of another kind
    is lost and reported, never the result."""

    def turn(times: int, **odd: Any) -> dict[str, Any]:
        entry = {**OPUS_USAGE, "inputTokens": times * 100000, "outputTokens": times * 1000}
        entry["costUSD"] = times * OPUS_USAGE["costUSD"]
        return _result(total_cost_usd=entry["costUSD"], modelUsage={"claude-opus-5-5": {**entry, **odd}})

    third = turn(3, costUSD="n/a")
    third["modelUsage"]["claude-haiku-4-5"] = [1, 2]
    events = list(read(_data([INIT, turn(1), INIT, turn(2), INIT, third]), "claude"))
    turns = [e.usage for e in events if isinstance(e, p.Result)]
    assert [(t.input_tokens, t.output_tokens, t.cost_usd) for t in turns] == [
        pytest.approx((100000, 1000, 0.42))
    ] * 3
    assert len(only(events, p.Log)) == 2, "the odd cost and the odd entry are reported"


def test_the_json_output_reads_the_same_on_one_line_as_pretty_printed() -> None:
    document = _result(
        result="Done.",
        usage={"input_tokens": 5, "output_tokens": 50},
        modelUsage=MODEL_USAGE,
        total_cost_usd=0.01,
    )

    def comparable(data: bytes) -> list[dict[str, Any]]:
        out = []
        for event in read(io.BytesIO(data), "auto"):
            built = msgspec.to_builtins(event)
            for key in ("ts", "message_id"):
                built.pop(key, None)
            out.append(built)
        return out

    compact = comparable(json.dumps(document).encode() + b"\n")
    assert [e["type"] for e in compact] == ["start", "message", "usage", "usage", "result"]
    assert compact[0]["model"] == "claude-sonnet-4-5" and compact[1]["content"] == "Done."
    assert compact == comparable(json.dumps(document, indent=2).encode() + b"\n")


# -- tool blocks --------------------------------------------------------------------------------------


def test_mcp_connector_blocks_are_a_call_and_its_result() -> None:
    call = {
        "type": "mcp_tool_use",
        "id": "mcptoolu_1",
        "name": "echo",
        "server_name": "example",
        "input": {"a": 1},
    }
    answer = {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_1", "is_error": False}
    answer["content"] = [{"type": "text", "text": "Hello"}]
    events = list(read(_data([INIT, _assistant(call), _assistant(answer), _result()]), "claude"))
    tool_call, tool_result = one(events, p.ToolCall), one(events, p.ToolResult)
    assert (tool_call.name, tool_call.arguments) == ("mcp__example__echo", {"a": 1})
    assert (tool_result.name, tool_result.status, tool_result.output) == (
        "mcp__example__echo",
        "success",
        "Hello",
    )
    assert not [e for e in events if isinstance(e, p.GenericEvent)] and not violations(events)


def test_a_tool_reference_result_names_the_tool_it_found() -> None:
    call = {"type": "tool_use", "id": "toolu_3", "name": "ToolSearch", "input": {"query": "slack"}}
    found = [{"type": "tool_reference", "tool_name": "mcp__slack__post"}, {"type": "image"}]
    user = {
        "type": "user",
        "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_3"}]},
    }
    user["message"]["content"][0]["content"] = found
    events = list(read(_data([INIT, _assistant(call), user, _result()]), "claude"))
    assert one(events, p.ToolResult).output == "mcp__slack__post\n[image]"


def test_a_call_that_was_not_granted_is_denied() -> None:
    call = {"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {"command": "rm x"}}
    words = "Claude requested permissions to use Bash, but you haven't granted it yet."
    block = {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True, "content": words}
    user = {"type": "user", "message": {"role": "user", "content": [block]}, "uuid": "u"}
    denial = {"tool_name": "Bash", "tool_use_id": "toolu_2", "tool_input": {"command": "rm x"}}
    events = list(read(_data([INIT, _assistant(call), user, _result(permission_denials=[denial])]), "claude"))
    result = one(events, p.ToolResult)
    assert (result.status, result.error) == ("denied", words) and not violations(events)


def test_the_encoder_writes_the_running_cost_and_reads_each_turn_s_back() -> None:
    def turn(cost: float) -> list[p.BaseEvent]:
        usage = p.UsageTotals(input_tokens=1, output_tokens=1, cost_usd=cost)
        return [
            p.Start(command="x", session_id="s"),
            p.Result(ok=True, subtype="success", exit_code=0, usage=usage),
        ]

    events = [*turn(0.01), *turn(0.02), *turn(0.005)]
    for seq, event in enumerate(events):
        event.session_id, event.seq = "s", seq
    written = encode_objects("claude", events)
    assert [line["total_cost_usd"] for line in written if line["type"] == "result"] == [0.01, 0.03, 0.035]
    back = list(read(_data(written), "claude"))
    assert [e.usage.cost_usd for e in back if isinstance(e, p.Result)] == [0.01, 0.02, 0.005]
