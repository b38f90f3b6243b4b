"""What every tool shares: its spec, its outcome, the context it runs in, argument checks, caps."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentstream.agent.permissions import PermissionMode
from agentstream.errors import AgentstreamError, ErrorCode

__all__ = [
    "HeadTail",
    "Tool",
    "ToolContext",
    "ToolFailure",
    "ToolOutcome",
    "ToolSpec",
    "cap_text",
    "check_arguments",
    "whole_chars",
]


@dataclass(frozen=True)
class ToolSpec:
    """A tool as offered to a model; ``parameters`` is the JSON Schema both OpenAI and Anthropic take."""

    name: str
    description: str
    parameters: dict[str, Any]
    access: Literal["read", "write", "execute"]


@dataclass
class ToolOutcome:
    """The result of one call; ``output`` is what the model sees, ``error`` says what went wrong."""

    status: Literal["success", "error", "denied", "cancelled"]
    output: str = ""
    error: str | None = None
    truncated: bool = False


def _no_progress(text: str) -> None:
    """Default progress sink: drop streamed output."""


@dataclass
class ToolContext:
    """Where and how tools run. ``workspace`` must be the resolved (real) root."""

    workspace: Path
    mode: PermissionMode = "workspace-write"
    progress: Callable[[str], None] = field(default=_no_progress)
    """Receives streamed output of a running tool (becomes ``tool_progress``)."""
    shell_timeout_s: float = 120.0
    output_cap_bytes: int = 32_000
    env: Mapping[str, str] | None = None
    """Environment for ``shell``; ``None`` means ``os.environ`` without secrets (see :mod:`agentstream._secrets`)."""
    interrupt: threading.Event | None = None
    """Set when the client interrupts the turn: a running tool stops (``shell`` kills its group)."""


class ToolFailure(AgentstreamError):
    """A tool-level problem the model can act on (bad argument, missing file, non-unique edit…)."""

    code = ErrorCode.TOOL_FAILED

    def __init__(self, message: str, *, output: str = "", truncated: bool = False) -> None:
        super().__init__(message)
        self.output = output
        self.truncated = truncated


Handler = Callable[[ToolContext, dict[str, Any]], ToolOutcome]


@dataclass(frozen=True)
class Tool:
    """A spec and the function that runs it."""

    spec: ToolSpec
    handler: Handler
    raw_arguments: bool = False
    """The handler gets the model's arguments as they came: their schema is richer than
    :func:`check_arguments` reads, and whoever runs the tool checks them (an MCP server)."""


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def check_arguments(spec: ToolSpec, arguments: Any) -> dict[str, Any]:
    """Check arguments against the spec's (flat) schema and fill defaults; raise ToolFailure if wrong.

    Only the schema features the built-in tools use are understood: ``required``,
    per-property ``type``, ``minimum`` and ``default``. Unknown arguments are refused
    so that a misspelt name does not silently do something else; ``null`` for an
    optional argument means "not given" (some models send every field).
    """
    if not isinstance(arguments, dict):
        raise ToolFailure(f"{spec.name} takes a JSON object of arguments, got {type(arguments).__name__}")
    properties: dict[str, dict[str, Any]] = spec.parameters.get("properties", {})
    unknown = sorted(set(arguments) - set(properties))
    if unknown:
        raise ToolFailure(
            f"{spec.name}: unknown argument(s) {', '.join(unknown)}; it takes {', '.join(properties)}"
        )
    required = spec.parameters.get("required", ())
    missing = [name for name in required if arguments.get(name) is None]
    if missing:
        raise ToolFailure(f"{spec.name}: missing required argument(s) {', '.join(missing)}")
    checked = {name: prop.get("default") for name, prop in properties.items()}
    for name, value in arguments.items():
        if value is not None:
            checked[name] = _check_value(spec.name, name, properties[name], value)
    return checked


def _check_value(tool: str, name: str, prop: dict[str, Any], value: Any) -> Any:
    kind = prop.get("type", "string")
    if not isinstance(value, _JSON_TYPES[kind]) or (kind != "boolean" and isinstance(value, bool)):
        raise ToolFailure(f"{tool}: argument {name!r} must be of type {kind}, got {value!r}")
    if "minimum" in prop and value < prop["minimum"]:
        raise ToolFailure(f"{tool}: argument {name!r} must be at least {prop['minimum']}, got {value}")
    return value


class HeadTail:
    """Keeps the beginning and the end of a byte stream of any length, ``cap`` bytes in all.

    Memory stays bounded however much is fed, which is what a chatty command needs.
    :meth:`text` fits in ``cap`` UTF-8 bytes, marker included, even when bytes that are
    not UTF-8 grow as text, so a later cap of the same size leaves it (and the count
    of omitted bytes its marker gives) alone.
    """

    def __init__(self, cap: int) -> None:
        self.cap = max(cap, 1)
        self.head_cap = self.cap // 2
        self.tail_keep = self.cap - self.head_cap
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_len = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail.append(data)
            self.tail_len += len(data)
            while self.tail_len - len(self.tail[0]) >= self.tail_keep:
                self.tail_len -= len(self.tail.popleft())

    @property
    def truncated(self) -> bool:
        """Whether :meth:`text` leaves something out (bytes that are not UTF-8 take 3 bytes each as text)."""
        return self.total > self.cap or len(self._whole_text().encode()) > self.cap

    def _whole_text(self) -> str:
        return (bytes(self.head) + b"".join(self.tail)).decode("utf-8", "replace")

    def _marker(self, omitted: int) -> str:
        return f"\n[... {omitted} bytes omitted; output is capped at {self.cap} bytes ...]\n"

    def text(self) -> str:
        """The kept bytes as text; when cut, a marker says how many of the bytes fed were left out in the middle."""
        if not self.truncated:
            return self._whole_text()
        budget = max(self.cap - len(self._marker(self.total).encode()), 0)
        head, head_used = _fitted(bytes(self.head), budget // 2, at_end=True)
        tail, tail_used = _fitted(b"".join(self.tail), budget - len(head.encode()), at_end=False)
        return head + self._marker(self.total - head_used - tail_used) + tail


def _fitted(data: bytes, room: int, *, at_end: bool) -> tuple[str, int]:
    """The longest start (``at_end``: cut at the end) or end of ``data`` whose text fits in ``room`` UTF-8
    bytes, and how many bytes of ``data`` it shows. Each byte that is not UTF-8 becomes U+FFFD (3 bytes)."""
    take = min(room, len(data))
    while take > 0:
        piece = whole_chars(data[:take] if at_end else data[-take:], at_end=at_end)
        text = piece.decode("utf-8", "replace")
        over = len(text.encode()) - room
        if over <= 0:
            return text, len(piece)
        take -= max(over // 3, 1)  # a byte gives at most 3 bytes of text: never cut more than needed
    return "", 0


def whole_chars(data: bytes, *, at_end: bool) -> bytes:
    """``data`` without the partial UTF-8 character a byte cut left at its end (or start)."""
    if not at_end:
        skip = 0
        while skip < min(3, len(data)) and 0x80 <= data[skip] < 0xC0:
            skip += 1
        return data[skip:]
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return data
        if byte >= 0xC0:  # a lead byte: is its sequence complete?
            needed = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data if back >= needed else data[:-back]
    return data


def cap_text(text: str, cap: int) -> tuple[str, bool]:
    """``text`` limited to about ``cap`` UTF-8 bytes (head and tail kept), and whether it was cut."""
    data = text.encode("utf-8", "surrogateescape")
    if len(data) <= cap:
        return text, False
    kept = HeadTail(cap)
    kept.feed(data)
    return kept.text(), True
