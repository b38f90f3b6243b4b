"""Anthropic Messages streaming, through the official ``anthropic`` SDK.

Reads the raw stream events (``message_start``, ``content_block_*``,
``message_delta``, ``message_stop``) rather than the SDK's accumulating helper,
so each delta reaches the stream as soon as it arrives. Extended thinking
(``--thinking-budget``) streams as reasoning; each thinking block is kept with
its signature so it can be sent back on the next call, as the API requires
during tool use.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from agentstream.agent.providers.base import (
    ProviderSettings,
    ReasoningBlock,
    ReasoningDelta,
    SdkProvider,
    TextDelta,
    TurnEnd,
    TurnEvent,
    TurnUsage,
    shown_arguments,
    tool_call_from_json,
)

if TYPE_CHECKING:
    from agentstream.agent.conversation import Conversation
    from agentstream.agent.tools import ToolSpec

__all__ = ["AnthropicProvider", "to_anthropic_messages", "to_anthropic_tools"]

DEFAULT_MODEL = "claude-sonnet-4-5"


class AnthropicProvider(SdkProvider):
    name = "anthropic"
    sdk = "anthropic"
    client_class = "Anthropic"
    no_credential = ("no Anthropic API key", "set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN)")

    def __init__(self, settings: ProviderSettings) -> None:
        model = settings.model or os.environ.get("AGENTSTREAM_MODEL") or DEFAULT_MODEL
        credential, source = _credential()
        super().__init__(model, settings, credential, settings.base_url, credential_source=source)

    def _turn(
        self, conversation: Conversation, tools: Sequence[ToolSpec], system: str
    ) -> Iterator[TurnEvent]:
        # Plain JSON in the wire shape travels in extra_body, past the SDK's per-call typed
        # transform of every message (see the OpenAI provider for the measurement).
        budget = self.settings.thinking_budget
        body: dict[str, Any] = {"messages": to_anthropic_messages(conversation)}
        if system:
            body["system"] = system
        if tools:
            body["tools"] = to_anthropic_tools(tools)
        if budget:
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        yield from self.read(
            lambda: self.client().messages.create(
                # max_tokens must exceed the thinking budget: the answer gets its own room on top.
                model=self.model,
                max_tokens=self.settings.max_tokens + budget,
                messages=[],
                stream=True,
                extra_body=body,
            ),
            lambda stream, progress: _StreamReader().events(stream, progress),
        )


def _credential() -> tuple[dict[str, str] | None, str]:
    """The SDK keyword for the key in the environment (an API key, ``api_key``, else a bearer token,
    ``auth_token``) and the variable it came from."""
    for variable, keyword in (("ANTHROPIC_API_KEY", "api_key"), ("ANTHROPIC_AUTH_TOKEN", "auth_token")):
        if os.environ.get(variable):
            return {keyword: os.environ[variable]}, variable
    return None, "ANTHROPIC_API_KEY"


_USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


class _StreamReader:
    """Turns raw Messages stream events into turn events, one content block at a time."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.counts: dict[str, int] = dict.fromkeys(_USAGE_FIELDS, 0)
        self.stop_reason: str | None = None
        self.stopped = False

    def events(self, stream: Any, progress: Callable[[], None]) -> Iterator[TurnEvent]:
        for event in stream:  # the SDK drops ``ping`` keep-alives: every event here is progress
            progress()
            handler = getattr(self, f"_on_{event.type}", None)
            if handler is not None:
                yield from handler(event)
        if self.stopped:
            yield self.usage()
            yield TurnEnd(self.stop_reason or "end_turn")

    def usage(self) -> TurnUsage:
        """The call's usage; Anthropic's ``input_tokens`` leaves out the cache reads and writes."""
        counts = self.counts
        cached, written = counts["cache_read_input_tokens"], counts["cache_creation_input_tokens"]
        return TurnUsage(
            input_tokens=counts["input_tokens"] + cached + written,
            output_tokens=counts["output_tokens"],
            cached_tokens=cached,
            cache_write_tokens=written,
        )

    def _count(self, usage: Any) -> None:
        """Take the counts ``usage`` gives (message_delta's are cumulative and may be the only input count)."""
        for name in _USAGE_FIELDS:
            value = getattr(usage, name, None)
            if isinstance(value, int):
                self.counts[name] = value

    def _on_message_start(self, event: Any) -> Iterator[TurnEvent]:
        self._count(event.message.usage)
        return iter(())

    def _on_content_block_start(self, event: Any) -> Iterator[TurnEvent]:
        block = event.content_block
        self.blocks[event.index] = {
            "type": block.type,
            "text": [],
            "json": [],
            "input": getattr(block, "input", None),
            "signature": getattr(block, "signature", "") or "",
            "id": getattr(block, "id", ""),
            "name": getattr(block, "name", ""),
            "data": getattr(block, "data", None),
        }
        return iter(())

    def _on_content_block_delta(self, event: Any) -> Iterator[TurnEvent]:
        block = self.blocks.get(event.index)
        delta = event.delta
        if block is None:
            return
        if delta.type == "text_delta":
            yield TextDelta(delta.text)
        elif delta.type == "thinking_delta":
            block["text"].append(delta.thinking)
            yield ReasoningDelta(delta.thinking)
        elif delta.type == "signature_delta":
            block["signature"] += delta.signature
        elif delta.type == "input_json_delta":
            block["json"].append(delta.partial_json)

    def _on_content_block_stop(self, event: Any) -> Iterator[TurnEvent]:
        block = self.blocks.pop(event.index, None)
        if block is None:
            return
        if block["type"] == "thinking":
            yield ReasoningBlock(text="".join(block["text"]), signature=block["signature"] or None)
        elif block["type"] == "redacted_thinking":
            yield ReasoningBlock(redacted=block["data"])
        elif block["type"] == "tool_use":
            yield tool_call_from_json(block["id"], block["name"], _tool_input(block))

    def _on_message_delta(self, event: Any) -> Iterator[TurnEvent]:
        self.stop_reason = event.delta.stop_reason or self.stop_reason
        if event.usage is not None:
            self._count(event.usage)
        return iter(())

    def _on_message_stop(self, event: Any) -> Iterator[TurnEvent]:
        self.stopped = True
        return iter(())


def _tool_input(block: dict[str, Any]) -> str:
    """A tool_use block's arguments: the streamed JSON, else the ``input`` its start gave whole."""
    streamed = "".join(block["json"])
    given = block["input"]
    if streamed.strip() or not given:
        return streamed
    return json.dumps(given)


def to_anthropic_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]


def to_anthropic_messages(conversation: Conversation) -> list[dict[str, Any]]:
    """The conversation as Messages API turns; consecutive turns of one role are merged."""
    turns: list[dict[str, Any]] = []
    for message in conversation:
        role, blocks = _blocks(message)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return turns


def _blocks(message: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    role = message["role"]
    if role == "tool":
        result = {
            "type": "tool_result",
            "tool_use_id": message["call_id"],
            "content": message["content"],
            "is_error": bool(message.get("is_error")),
        }
        return "user", [result]
    text = [{"type": "text", "text": message["content"]}] if message.get("content") else []
    if role == "user":
        return "user", text
    thinking = [_thinking_block(r) for r in message.get("reasoning", ()) if r.get("provider") == "anthropic"]
    calls = [
        {
            "type": "tool_use",
            "id": c["id"],
            "name": c["name"],
            "input": shown_arguments(c["arguments"], c.get("raw_arguments")),
        }
        for c in message.get("tool_calls", ())
    ]
    return "assistant", [b for b in thinking if b] + text + calls


def _thinking_block(reasoning: dict[str, Any]) -> dict[str, Any] | None:
    if reasoning.get("redacted"):
        return {"type": "redacted_thinking", "data": reasoning["redacted"]}
    if reasoning.get("signature"):
        return {"type": "thinking", "thinking": reasoning["text"], "signature": reasoning["signature"]}
    return None
