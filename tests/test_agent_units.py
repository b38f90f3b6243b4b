"""The agent's pure parts: error mapping, scrubbing, pricing, conversation conversion, selection, cassettes."""

from __future__ import annotations

import time
from email.utils import formatdate
from pathlib import Path

import pytest

from _agent_fakes import closed_port
from agentstream import protocol as p
from agentstream.agent.conversation import AssistantTurn, Conversation
from agentstream.agent.loop import TurnWriter, backoff_ms
from agentstream.agent.pricing import cost_usd
from agentstream.agent.providers import DEMO_CASSETTE, NoProviderError, ProviderSettings, select_provider
from agentstream.agent.providers.anthropic import to_anthropic_messages
from agentstream.agent.providers.base import (
    ReasoningBlock,
    ReasoningDelta,
    TextDelta,
    ToolCallDone,
    TurnUsage,
    retry_after_ms,
    scrub,
    status_error,
    tool_call_from_json,
)
from agentstream.agent.providers.openai import to_openai_messages
from agentstream.agent.providers.replay import ReplayProvider
from agentstream.errors import ProviderError, UsageError
from agentstream.stream import Stream

# -- error mapping --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "code", "recoverable"),
    [
        (401, {"error": {"type": "invalid_request_error", "code": "invalid_api_key"}}, "AUTH_EXPIRED", False),
        (403, {"type": "error", "error": {"type": "permission_error"}}, "AUTH_EXPIRED", False),
        (429, {"error": {"type": "requests", "code": "rate_limit_exceeded"}}, "RATE_LIMITED", True),
        (429, {"error": {"type": "insufficient_quota", "code": "insufficient_quota"}}, "RATE_LIMITED", False),
        (500, {"error": {"type": "server_error"}}, "PROVIDER_ERROR", True),
        (503, "upstream connect error", "PROVIDER_ERROR", True),
        (529, {"type": "error", "error": {"type": "overloaded_error"}}, "PROVIDER_ERROR", True),
        (200, {"type": "error", "error": {"type": "overloaded_error"}}, "PROVIDER_ERROR", True),  # mid-stream
        (400, {"error": {"code": "context_length_exceeded"}}, "CONTEXT_LIMIT", False),
        (404, {"error": {"type": "not_found_error"}}, "PROVIDER_ERROR", False),
        (400, {"error": {"type": "invalid_request_error"}}, "PROVIDER_ERROR", False),
    ],
)
def test_status_errors_map_to_protocol_codes(status: int, body: object, code: str, recoverable: bool) -> None:
    error = status_error(status, f"Error code: {status}", {}, body)
    assert (error.code, error.recoverable) == (code, recoverable)


def test_context_limit_is_recognised_by_message() -> None:
    error = status_error(400, "prompt is too long: 210000 tokens > 200000 maximum", {}, {"type": "error"})
    assert error.code == "CONTEXT_LIMIT" and error.fix


def test_retry_after_headers() -> None:
    assert retry_after_ms({"retry-after-ms": "250"}) == 250
    assert retry_after_ms({"retry-after": "2"}) == 2000
    assert retry_after_ms({"retry-after": "0.5"}) == 500
    in_three = formatdate(time.time() + 3, usegmt=True)
    assert 1000 <= (retry_after_ms({"retry-after": in_three}) or 0) <= 3000
    assert retry_after_ms({"retry-after": "soon"}) is None
    assert retry_after_ms({}) is None
    assert retry_after_ms({"retry-after": "999999"}) == 300_000  # capped


def test_backoff_grows_with_jitter_and_is_capped() -> None:
    for attempt in (1, 2, 3):
        ceiling = 100 * 2 ** (attempt - 1)
        assert all(ceiling // 2 <= backoff_ms(attempt, 100) <= ceiling for _ in range(50))
    assert backoff_ms(30, 1000) <= 30_000


# -- scrubbing -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "sk-proj-AbCdEf0123456789xyz",
        "sk-ant-api03-abcdefghijklmnop",
        "gsk_0123456789abcdefABCD",
        "AIzaSyA1234567890abcdefghijklmnop",
    ],
)
def test_scrub_removes_key_shaped_tokens(key: str) -> None:
    assert key not in scrub(f"Incorrect API key provided: {key}. See the docs.")


def test_scrub_leaves_ordinary_text_alone() -> None:
    text = "task-manager-service failed; request req_011CPabcdefgh; see disk_usage_report"
    assert scrub(text) == text


def test_scrub_removes_bearer_tokens_and_environment_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentstream._secrets import configured_redactor

    monkeypatch.setenv("MY_SERVICE_TOKEN", "plain-looking-value-42")
    configured_redactor.cache_clear()
    try:
        text = scrub("auth failed for Bearer abc.def.ghi123 using plain-looking-value-42")
    finally:
        configured_redactor.cache_clear()
    assert "abc.def.ghi123" not in text and "plain-looking-value-42" not in text
    assert "auth failed for" in text  # ordinary words survive


# -- pricing ---------------------------------------------------------------------------------


def test_cost_of_known_models() -> None:
    assert cost_usd("gpt-4.1-mini", input_tokens=1_000_000, output_tokens=1_000_000) == pytest.approx(2.0)
    # A dated snapshot finds its family; cached input tokens are billed at the cached rate.
    dated = cost_usd(
        "claude-sonnet-4-5-20250929", input_tokens=1_000_000, output_tokens=0, cached_tokens=1_000_000
    )
    assert dated == pytest.approx(0.30)
    assert cost_usd("gpt-4o-mini", input_tokens=1_000_000, output_tokens=0) == pytest.approx(
        0.15
    )  # not gpt-4o


def test_unknown_models_have_no_cost() -> None:
    assert cost_usd("llama3.2:latest", input_tokens=10, output_tokens=10) is None
    assert cost_usd("gpt-5.1", input_tokens=1, output_tokens=1) is None


# -- tool call parsing ----------------------------------------------------------------------------


def test_tool_call_arguments_must_be_a_json_object() -> None:
    assert tool_call_from_json("c", "t", '{"a": 1}').arguments == {"a": 1}
    assert tool_call_from_json("c", "t", "").arguments == {}
    assert "not valid JSON" in (tool_call_from_json("c", "t", '{"a": ').error or "")
    assert "JSON object" in (tool_call_from_json("c", "t", "[1, 2]").error or "")


# -- conversation ------------------------------------------------------------------------------


def conversation_with_tools() -> Conversation:
    conversation = Conversation()
    conversation.add_user("look")
    turn = AssistantTurn(
        text="Looking.",
        reasoning=[ReasoningBlock(text="think", signature="sig")],
        tool_calls=[ToolCallDone("c1", "list_dir", {}), ToolCallDone("c2", "read_file", {"path": "a"})],
    )
    conversation.add_assistant(turn, provider="anthropic")
    conversation.add_tool_result("c1", "list_dir", "a", is_error=False)
    conversation.add_tool_result("c2", "read_file", "nope", is_error=True)
    conversation.add_user("and now?")
    return conversation


def test_anthropic_conversion_merges_tool_results_with_the_next_prompt() -> None:
    turns = to_anthropic_messages(conversation_with_tools())
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assistant = turns[1]["content"]
    assert [b["type"] for b in assistant] == ["thinking", "text", "tool_use", "tool_use"]
    assert assistant[0]["signature"] == "sig"
    assert [b["type"] for b in turns[2]["content"]] == ["tool_result", "tool_result", "text"]
    assert turns[2]["content"][1]["is_error"] is True


def test_openai_conversion_keeps_calls_and_results_apart() -> None:
    messages = to_openai_messages(conversation_with_tools(), "be brief")
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert messages[2]["tool_calls"][1]["function"] == {"name": "read_file", "arguments": '{"path": "a"}'}
    assert "think" not in str(messages)  # reasoning is never sent to an OpenAI-compatible server


def test_reasoning_signatures_go_back_only_to_their_provider() -> None:
    conversation = Conversation()
    conversation.add_user("q")
    conversation.add_assistant(
        AssistantTurn("a", [ReasoningBlock(text="t", signature="s")]), provider="openai"
    )
    assert [b["type"] for b in to_anthropic_messages(conversation)[1]["content"]] == ["text"]


def test_a_dangling_tool_call_gets_a_result_when_loaded() -> None:
    stored = conversation_with_tools().to_json()[:3]  # the run stopped after the first tool result
    restored = Conversation(stored)
    tool_messages = [m for m in restored if m["role"] == "tool"]
    assert [m["call_id"] for m in tool_messages] == ["c2", "c1"]  # the missing one, right after its call
    assert tool_messages[0]["is_error"] is True and "stopped" in tool_messages[0]["content"]


# -- the turn writer ---------------------------------------------------------------------------------


def write_turn(
    events: list[object], *, deltas: bool = True, complete: bool = True
) -> tuple[list[p.BaseEvent], AssistantTurn | None]:
    seen: list[p.BaseEvent] = []
    with open("/dev/null", "wb") as sink:
        stream = Stream("t", out=sink)
        stream.observe(seen.append)
        with stream:
            writer = TurnWriter(stream, deltas=deltas)
            for event in events:
                writer.feed(event)  # type: ignore[arg-type]
            turn = writer.finish("gpt-4.1-mini") if complete else writer.discard()
    return seen[1:-1], turn


def test_complete_events_follow_the_deltas_in_order() -> None:
    events, turn = write_turn(
        [
            ReasoningDelta("hm"),
            ReasoningBlock(text="hmm", signature="s"),
            TextDelta("Hi "),
            TextDelta("there"),
            ToolCallDone("c", "list_dir"),
            TextDelta("More."),
            TurnUsage(10, 2),
        ]
    )
    kinds = [(e.type, getattr(e, "content", None)) for e in events]
    assert kinds == [
        ("reasoning_delta", "hm"),
        ("message_delta", "Hi "),
        ("message_delta", "there"),
        ("message_delta", "More."),
        ("reasoning", "hmm"),
        ("message", "Hi there"),
        ("message", "More."),
        ("usage", None),
    ]
    assert turn is not None and turn.text == "Hi there\n\nMore." and turn.reasoning[0].signature == "s"
    assert events[-1].cost_usd == cost_usd("gpt-4.1-mini", input_tokens=10, output_tokens=2)


def test_a_discarded_turn_closes_its_runs_with_empty_content() -> None:
    events, _ = write_turn([ReasoningDelta("a"), TextDelta("b")], complete=False)
    assert [(e.type, e.content) for e in events] == [
        ("reasoning_delta", "a"),
        ("message_delta", "b"),
        ("reasoning", ""),
        ("message", ""),
    ]
    assert write_turn([TextDelta("b")], deltas=False, complete=False)[0] == []


# -- selection and cassettes ---------------------------------------------------------------------


@pytest.fixture
def no_ollama(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{closed_port()}")


@pytest.mark.usefixtures("no_ollama")
@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"}, "anthropic"),
        ({"ANTHROPIC_AUTH_TOKEN": "k"}, "anthropic"),
        ({"OPENAI_API_KEY": "k"}, "openai"),
        ({"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}, "openai"),
    ],
)
def test_selection_order(environ: dict[str, str], expected: str) -> None:
    assert select_provider(None, ProviderSettings(), environ).name == expected


@pytest.mark.usefixtures("no_ollama")
def test_no_provider_configured_is_an_error_never_the_demo() -> None:
    with pytest.raises(NoProviderError) as raised:
        select_provider(None, ProviderSettings(), {})
    error = raised.value
    assert (error.code, error.exit_code) == ("NO_PROVIDER", 2)
    for way in (
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "--base-url",
        "Ollama",
        "--cassette",
        "--provider demo",
    ):
        assert way in (error.fix or "")


def test_the_demo_plays_only_by_name() -> None:
    demo = select_provider("demo", ProviderSettings(), {})
    assert demo.name == "demo" and demo.path == DEMO_CASSETTE  # type: ignore[attr-defined]
    with pytest.raises(UsageError) as raised:
        select_provider("replay", ProviderSettings(), {})
    assert "--cassette FILE" in (raised.value.fix or "")


@pytest.mark.usefixtures("no_ollama")
def test_a_base_url_option_selects_openai() -> None:
    assert select_provider(None, ProviderSettings(base_url="http://127.0.0.1:9/v1"), {}).name == "openai"


def test_the_demo_cassette_is_bundled_and_valid() -> None:
    provider = ReplayProvider(DEMO_CASSETTE)
    assert len(provider.calls) == 3 and provider.calls[-1].events[-1].reason == "stop"


def test_cassette_errors_replay_as_provider_errors(tmp_path: Path) -> None:
    cassette = tmp_path / "c.jsonl"
    cassette.write_text(
        '{"cassette":1,"provider":"openai","model":"m"}\n'
        '{"call":1,"events":[{"type":"text","text":"par"}],"error":{"code":"RATE_LIMITED","message":"slow","recoverable":true,"retry_in_ms":7}}\n'
    )
    provider = ReplayProvider(cassette)
    events = []
    with pytest.raises(ProviderError) as raised:
        for event in provider.stream_turn(Conversation(), [], ""):
            events.append(event)
    assert events == [TextDelta("par")]
    assert (raised.value.code, raised.value.recoverable, raised.value.retry_in_ms) == (
        "RATE_LIMITED",
        True,
        7,
    )


def test_a_missing_cassette_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read the cassette"):
        ReplayProvider(tmp_path / "absent.jsonl")
