"""OpenAI Chat Completions streaming, through the official ``openai`` SDK.

Also every OpenAI-compatible server (Ollama, vLLM, llama.cpp server, LM Studio)
through a base URL. Tool calls arrive as indexed argument fragments, several
calls at once for parallel tool use; they are assembled here and yielded whole
when the model finishes. Servers that stream visible reasoning as
``reasoning_content`` or ``reasoning`` on the delta (vLLM, DeepSeek, Ollama)
get reasoning events; that reasoning is shown but not sent back, as those servers ask.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agentstream.agent.providers.base import (
    ProviderSettings,
    ReasoningDelta,
    SdkProvider,
    TextDelta,
    TurnEnd,
    TurnEvent,
    TurnUsage,
    new_call_id,
    tool_call_from_json,
)
from agentstream.errors import UsageError

if TYPE_CHECKING:
    from agentstream.agent.conversation import Conversation
    from agentstream.agent.tools import ToolSpec

__all__ = [
    "OllamaProvider",
    "OpenAIProvider",
    "ollama_models",
    "ollama_url",
    "to_openai_messages",
    "to_openai_tools",
]

DEFAULT_MODEL = "gpt-4.1-mini"
_NO_KEY = "unused"
"""OpenAI-compatible local servers take any key; the SDK insists on one."""


class OpenAIProvider(SdkProvider):
    name = "openai"
    sdk = "openai"
    client_class = "OpenAI"
    no_credential = ("no OpenAI API key", "set OPENAI_API_KEY, or pass --base-url for a local server")

    def __init__(
        self, settings: ProviderSettings, *, api_key: str | None = None, base_url: str | None = None
    ) -> None:
        model = settings.model or os.environ.get("AGENTSTREAM_MODEL") or DEFAULT_MODEL
        base_url = base_url or settings.base_url or os.environ.get("OPENAI_BASE_URL")
        source = "the API key" if api_key else "OPENAI_API_KEY"
        api_key = api_key or os.environ.get("OPENAI_API_KEY") or (_NO_KEY if base_url else None)
        super().__init__(
            model, settings, {"api_key": api_key} if api_key else None, base_url, credential_source=source
        )

    def _turn(
        self, conversation: Conversation, tools: Sequence[ToolSpec], system: str
    ) -> Iterator[TurnEvent]:
        # The conversation is already plain JSON in the wire shape, so it travels in extra_body:
        # the SDK's typed transform would walk every message of every call again (about 16 ms
        # per call at 40 messages, growing with the session) only to send the same JSON.
        body: dict[str, Any] = {"messages": to_openai_messages(conversation, system)}
        if tools:
            body["tools"] = to_openai_tools(tools)
        yield from self.read(
            lambda: self.client().chat.completions.create(
                model=self.model,
                messages=[],
                stream=True,
                stream_options={"include_usage": True},
                extra_body=body,
            ),
            _events,
        )


def _events(stream: Any, progress: Callable[[], None]) -> Iterator[TurnEvent]:
    """The turn events of a Chat Completions stream; ``progress()`` for each chunk that carries some of the answer."""
    calls: dict[int, dict[str, str]] = {}
    usage = TurnUsage()
    finish: str | None = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = _usage(chunk.usage)
            progress()
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        thought = _reasoning_text(delta)
        if thought or delta.content or delta.tool_calls or choice.finish_reason:
            progress()
        if thought:
            yield ReasoningDelta(thought)
        if delta.content:
            yield TextDelta(delta.content)
        for fragment in delta.tool_calls or ():
            _merge_call(calls, fragment)
        if choice.finish_reason:
            finish = choice.finish_reason
    if finish is None:
        return
    for index in sorted(calls):
        call = calls[index]
        yield tool_call_from_json(call["id"] or new_call_id(), call["name"], call["arguments"])
    yield usage
    yield TurnEnd(finish)


def _reasoning_text(delta: Any) -> str | None:
    extra = delta.model_extra or {}
    value = extra.get("reasoning_content") or extra.get("reasoning")
    return value if isinstance(value, str) else None


def _merge_call(calls: dict[int, dict[str, str]], fragment: Any) -> None:
    """Add one tool-call fragment to the call its ``index`` names.

    Some servers leave ``index`` out: such a fragment continues the call in progress
    unless it brings an id of its own, which starts the next call.
    """
    index = fragment.index
    if index is None:
        current = max(calls, default=-1)
        same = current >= 0 and (not fragment.id or fragment.id == calls[current]["id"])
        index = current if same else current + 1
    call = calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
    if fragment.id:
        call["id"] = fragment.id
    function = fragment.function
    if function is not None:
        if function.name:
            call["name"] += function.name
        if function.arguments:
            call["arguments"] += function.arguments


def _usage(usage: Any) -> TurnUsage:
    prompt_details = usage.prompt_tokens_details
    completion_details = usage.completion_tokens_details
    return TurnUsage(
        input_tokens=usage.prompt_tokens or 0,
        output_tokens=usage.completion_tokens or 0,
        cached_tokens=(prompt_details.cached_tokens or 0) if prompt_details else 0,
        reasoning_tokens=(completion_details.reasoning_tokens or 0) if completion_details else 0,
    )


def to_openai_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]


def to_openai_messages(conversation: Conversation, system: str) -> list[dict[str, Any]]:
    """The conversation as Chat Completions messages, system prompt first."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in conversation:
        role = message["role"]
        if role == "user":
            messages.append({"role": "user", "content": message["content"]})
        elif role == "assistant":
            messages.append(_assistant_message(message))
        elif role == "tool":
            messages.append(
                {"role": "tool", "tool_call_id": message["call_id"], "content": message["content"]}
            )
    return messages


def _assistant_message(message: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": message.get("content") or None}
    calls = message.get("tool_calls")
    if calls:
        out["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {
                    "name": c["name"],
                    "arguments": c.get("raw_arguments") or json.dumps(c["arguments"]),
                },
            }
            for c in calls
        ]
    elif out["content"] is None:
        out["content"] = ""
    return out


# -- Ollama -------------------------------------------------------------------------

OLLAMA_HOST = "127.0.0.1:11434"


def ollama_url() -> str:
    """Where Ollama listens: ``$OLLAMA_HOST`` (as Ollama itself reads it), else its default port."""
    host = os.environ.get("OLLAMA_HOST") or OLLAMA_HOST
    return (host if "://" in host else f"http://{host}").rstrip("/")


def ollama_models(timeout_s: float) -> list[str] | None:
    """The models a local Ollama has pulled, or None when nothing answers within ``timeout_s``."""
    import http.client
    from urllib.parse import urlsplit

    url = urlsplit(ollama_url())
    connection = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port or 11434, timeout=timeout_s)
    try:
        connection.request("GET", "/api/tags")
        response = connection.getresponse()
        if response.status != 200:
            return None
        tags = json.loads(response.read())
        return [
            model["name"] for model in tags.get("models", []) if isinstance(model, dict) and "name" in model
        ]
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        connection.close()


class OllamaProvider(OpenAIProvider):
    """A local Ollama through its OpenAI-compatible endpoint; the model defaults to the first one pulled."""

    name = "ollama"

    def __init__(self, settings: ProviderSettings, models: list[str] | None = None) -> None:
        model = settings.model or os.environ.get("AGENTSTREAM_MODEL")
        if model is None:
            pulled = models if models is not None else ollama_models(2.0)
            if not pulled:
                raise UsageError(
                    f"Ollama at {ollama_url()} has no models"
                    if pulled is not None
                    else f"no Ollama answers at {ollama_url()}",
                    fix="run 'ollama pull llama3.2' (or start Ollama), or pass --model",
                )
            model = pulled[0]
        super().__init__(
            replace(settings, model=model),
            api_key="ollama",
            base_url=settings.base_url or f"{ollama_url()}/v1",
        )
