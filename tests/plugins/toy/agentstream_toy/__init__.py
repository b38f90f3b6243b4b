"""A toy plugin: the smallest dialect, provider, toolset and bus backend agentstream accepts.

The toy wire format has two kinds of line::

    {"toy": "say", "text": "hello"}     a complete assistant message
    {"toy": "done", "ok": true}         the end of the run
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from agentstream import Message, Result
from agentstream.agent.providers.base import (
    Provider,
    ProviderSettings,
    TextDelta,
    ToolCallDone,
    TurnEnd,
    TurnEvent,
)
from agentstream.agent.tools import Tool, ToolContext, ToolOutcome, ToolSpec
from agentstream.bus import Bus
from agentstream.bus.sqlite import open_sqlite
from agentstream.dialects.base import Dialect, DialectDecoder, DialectEncoder


class ToyDecoder(DialectDecoder):
    def decode_object(self, obj: dict[str, Any]) -> None:
        if obj.get("toy") == "say" and isinstance(obj.get("text"), str):
            self.emit(
                Message(message_id=f"m{self.sequencer.next_seq}", role="assistant", content=obj["text"])
            )
        elif obj.get("toy") == "done":
            ok = obj.get("ok") is True
            self.emit(Result(ok=ok, subtype="success" if ok else "error", exit_code=0 if ok else 1))


class ToyEncoder(DialectEncoder):
    def encode(self, event: Any) -> list[bytes]:
        import json

        if isinstance(event, Message):
            return [json.dumps({"toy": "say", "text": event.content}).encode()]
        if isinstance(event, Result):
            return [json.dumps({"toy": "done", "ok": event.ok}).encode()]
        return []


class ToyDialect(Dialect):
    name = "toy"
    summary = "The toy plugin's two-line format"

    def sniff(self, obj: dict[str, Any]) -> float:
        return 1.0 if obj.get("toy") in ("say", "done") else 0.0

    def decoder(self, session_id: str | None = None) -> DialectDecoder:
        return ToyDecoder(session_id)

    def encoder(self) -> DialectEncoder:
        return ToyEncoder()


DIALECT = ToyDialect()


def shout(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    return ToolOutcome("success", str(args["text"]).upper())


TOOLS = (
    Tool(
        ToolSpec(
            "shout",
            "Upper-case a text.",
            {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            "read",
        ),
        shout,
    ),
)


class ToyProvider(Provider):
    """Calls the toy tool on the prompt, then answers with what the tool returned."""

    name = "toy"

    def __init__(self, settings: ProviderSettings) -> None:
        super().__init__(settings.model or "toy-1")

    def _turn(self, conversation: Any, tools: Sequence[Any], system: str) -> Iterator[TurnEvent]:
        last = conversation.messages[-1]
        if last["role"] == "user" and any(tool.name == "shout" for tool in tools):
            yield ToolCallDone("call_1", "shout", {"text": last["content"]})
            yield TurnEnd("tool_calls")
            return
        yield TextDelta(f"toy heard: {last['content']}")
        yield TurnEnd("stop")


def open_toy_bus(url: str, *, retention: float, maxlen: int | None, connect_timeout: float) -> Bus:
    """``toybus:///path`` is the SQLite bus under another name."""
    return open_sqlite(
        "sqlite:" + url.partition(":")[2], retention=retention, maxlen=maxlen, connect_timeout=connect_timeout
    )
