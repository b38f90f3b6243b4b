"""agentstream: one protocol, producer and consumer for agent CLIs' NDJSON streams.

The public API is the names in ``__all__``; each is imported on first use, so
``import agentstream`` stays cheap for a command-line tool.

* produce: :class:`Stream`
* consume: :func:`read`, :func:`aread`, :func:`spawn`, :func:`aspawn`, :class:`Transcript`
* the protocol: the event classes, :func:`encode`, :func:`decode`, ``UNSET``
* errors: :class:`AgentstreamError` and its subclasses
"""

from __future__ import annotations

import importlib

from agentstream._version import __version__

TYPE_CHECKING = False  # not ``typing``: the command line imports this package first, and must start fast
if TYPE_CHECKING:
    from typing import Any

    from agentstream.consumer import AsyncReader, AsyncSpawn, Reader, Spawn, aread, aspawn, read, spawn
    from agentstream.errors import (
        AgentstreamError,
        MalformedEventError,
        ProviderError,
        UnknownDialectError,
        UsageError,
    )
    from agentstream.protocol import (
        PROTOCOL_VERSION,
        UNSET,
        AnyEvent,
        Error,
        Event,
        GenericEvent,
        Heartbeat,
        Log,
        Message,
        MessageDelta,
        PermissionRequest,
        Progress,
        Reasoning,
        ReasoningDelta,
        Result,
        Start,
        Status,
        Step,
        ToolCall,
        ToolProgress,
        ToolResult,
        UnknownEvent,
        Usage,
        decode,
        encode,
        encode_line,
    )
    from agentstream.stream import Stream
    from agentstream.transcript import Transcript

_PROTOCOL_NAMES = (
    "PROTOCOL_VERSION",
    "UNSET",
    "AnyEvent",
    "Error",
    "Event",
    "GenericEvent",
    "Heartbeat",
    "Log",
    "Message",
    "MessageDelta",
    "PermissionRequest",
    "Progress",
    "Reasoning",
    "ReasoningDelta",
    "Result",
    "Start",
    "Status",
    "Step",
    "ToolCall",
    "ToolProgress",
    "ToolResult",
    "UnknownEvent",
    "Usage",
    "decode",
    "encode",
    "encode_line",
)
_ERROR_NAMES = (
    "AgentstreamError",
    "MalformedEventError",
    "ProviderError",
    "UnknownDialectError",
    "UsageError",
)
_CONSUMER_NAMES = ("AsyncReader", "AsyncSpawn", "Reader", "Spawn", "aread", "aspawn", "read", "spawn")

_LAZY: dict[str, str] = {
    **dict.fromkeys(_PROTOCOL_NAMES, "agentstream.protocol"),
    **dict.fromkeys(_ERROR_NAMES, "agentstream.errors"),
    **dict.fromkeys(_CONSUMER_NAMES, "agentstream.consumer"),
    "Stream": "agentstream.stream",
    "Transcript": "agentstream.transcript",
}

# Literal, so type checkers see the re-exports; tests/test_public_api.py keeps it equal to _LAZY.
__all__ = [
    "PROTOCOL_VERSION",
    "UNSET",
    "AgentstreamError",
    "AnyEvent",
    "AsyncReader",
    "AsyncSpawn",
    "Error",
    "Event",
    "GenericEvent",
    "Heartbeat",
    "Log",
    "MalformedEventError",
    "Message",
    "MessageDelta",
    "PermissionRequest",
    "Progress",
    "ProviderError",
    "Reader",
    "Reasoning",
    "ReasoningDelta",
    "Result",
    "Spawn",
    "Start",
    "Status",
    "Step",
    "Stream",
    "ToolCall",
    "ToolProgress",
    "ToolResult",
    "Transcript",
    "UnknownDialectError",
    "UnknownEvent",
    "Usage",
    "UsageError",
    "__version__",
    "aread",
    "aspawn",
    "decode",
    "encode",
    "encode_line",
    "read",
    "spawn",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agentstream' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
