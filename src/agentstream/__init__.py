"""agentstream: one protocol, producer and consumer for agent CLIs' NDJSON streams.

Public names are imported on first use, so importing the package is cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentstream._version import __version__

if TYPE_CHECKING:
    from agentstream.protocol import PROTOCOL_VERSION, decode, encode, encode_line
    from agentstream.stream import Stream

__all__ = ["PROTOCOL_VERSION", "Stream", "__version__", "decode", "encode", "encode_line"]

_LAZY = {
    "PROTOCOL_VERSION": "agentstream.protocol",
    "decode": "agentstream.protocol",
    "encode": "agentstream.protocol",
    "encode_line": "agentstream.protocol",
    "Stream": "agentstream.stream",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agentstream' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
