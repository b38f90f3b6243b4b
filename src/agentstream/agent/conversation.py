"""The provider-neutral conversation: a list of plain dicts the session store can keep as JSON.

Four message shapes, each a dict with a ``role``::

    {"role": "user", "content": "text"}
    {"role": "assistant", "content": "text",
     "reasoning": [{"text": ..., "signature": ..., "provider": "anthropic"}],   # optional
     "tool_calls": [{"id": ..., "name": ..., "arguments": {...},                # optional
                     "raw_arguments": "..."}]}   # only when the model's were not a JSON object
    {"role": "tool", "call_id": ..., "name": ..., "content": "text", "is_error": false}

Each provider converts this list to its own wire format, so a session started
with one provider can be resumed with another (reasoning signatures only go back
to the provider that made them).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from agentstream.agent.providers.base import ReasoningBlock, ToolCallDone

__all__ = ["AssistantTurn", "Conversation"]

INTERRUPTED_TOOL = "the run stopped before this tool call finished; it may or may not have taken effect"
INTERRUPTED_REQUEST = "[Request interrupted by user]"
INTERRUPTED_TOOL_USE = "[Request interrupted by user for tool use]"
"""What the model reads after a turn that was stopped, in Claude Code's words (which models know): without it, the
next prompt would read as more of the stopped request, and the model would go on with what it was told to stop."""


@dataclass
class AssistantTurn:
    """What one model call produced."""

    text: str = ""
    reasoning: list[ReasoningBlock] = field(default_factory=list)
    tool_calls: list[ToolCallDone] = field(default_factory=list)
    stop: str = ""
    """The provider's stop reason (``TurnEnd.reason``)."""


class Conversation:
    """The messages of one agent session, oldest first."""

    def __init__(self, messages: Iterable[dict[str, Any]] = ()) -> None:
        self.messages: list[dict[str, Any]] = list(messages)
        self.close_dangling_calls()

    def __len__(self) -> int:
        return len(self.messages)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.messages)

    def add_user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def add_assistant(self, turn: AssistantTurn, *, provider: str) -> None:
        message: dict[str, Any] = {"role": "assistant", "content": turn.text}
        if turn.reasoning:
            message["reasoning"] = [_reasoning_dict(block, provider) for block in turn.reasoning]
        if turn.tool_calls:
            message["tool_calls"] = [_call_dict(call) for call in turn.tool_calls]
        self.messages.append(message)

    def add_tool_result(self, call_id: str, name: str, content: str, *, is_error: bool) -> None:
        self.messages.append(
            {"role": "tool", "call_id": call_id, "name": name, "content": content, "is_error": is_error}
        )

    def note_interrupted(self, *, in_tool: bool) -> None:
        """The turn was stopped (``in_tool``: while a tool call was decided on or ran): its calls get results,
        and the model is told that the user stopped it."""
        self.close_dangling_calls()
        self.add_user(INTERRUPTED_TOOL_USE if in_tool else INTERRUPTED_REQUEST)

    def to_json(self) -> list[dict[str, Any]]:
        """The messages, ready for the session store (a copy, so later turns don't alias it)."""
        return [dict(message) for message in self.messages]

    def close_dangling_calls(self) -> None:
        """Give every tool call without a result one, so an interrupted session can go on or be resumed.

        Both providers reject a history in which a tool call has no result.
        """
        answered = {m["call_id"] for m in self.messages if m.get("role") == "tool"}
        repaired: list[dict[str, Any]] = []
        for message in self.messages:
            repaired.append(message)
            repaired.extend(
                {
                    "role": "tool",
                    "call_id": call["id"],
                    "name": call["name"],
                    "content": INTERRUPTED_TOOL,
                    "is_error": True,
                }
                for call in message.get("tool_calls", ())
                if call["id"] not in answered
            )
        self.messages = repaired


def _call_dict(call: ToolCallDone) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": call.call_id, "name": call.name, "arguments": call.arguments}
    if call.raw_arguments is not None:
        entry["raw_arguments"] = call.raw_arguments
    return entry


def _reasoning_dict(block: ReasoningBlock, provider: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"text": block.text, "provider": provider}
    if block.signature is not None:
        entry["signature"] = block.signature
    if block.redacted is not None:
        entry["redacted"] = block.redacted
    return entry
