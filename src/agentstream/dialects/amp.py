"""Amp ``--execute "…" --stream-json``: Claude Code's stream-json shape, as Amp documents it.

Amp writes ``system/init`` (``cwd``, ``session_id`` ``T-…``, ``tools``,
``mcp_servers``; no model), ``user``, ``assistant`` (an Anthropic message with
``stop_reason`` and ``usage``, no id or model) and ``result`` (no
``duration_api_ms``, usage or cost). ``--stream-json-thinking`` adds thinking
blocks. There are no ``stream_event`` lines and no other ``system`` subtypes.

Decoding is Claude's (:class:`~agentstream.dialects.claude.ClaudeDecoder`);
only the command name differs. Detection keys on the ``T-`` session id; a line
without one is taken for Claude, and ``--from amp`` forces this dialect.
"""

from __future__ import annotations

from typing import Any

from agentstream import protocol as p
from agentstream.dialects.claude import ClaudeDecoder, ClaudeEncoder, amp_session
from agentstream.dialects.kit import SimpleDialect

_RESULT_KEYS = ("type", "subtype", "duration_ms", "is_error", "num_turns", "result", "session_id", "errors")


class AmpDecoder(ClaudeDecoder):
    dialect = "amp"
    command = "amp"


class AmpEncoder(ClaudeEncoder):
    """Claude's encoder restricted to the lines and fields Amp documents (no ``stream_event`` lines)."""

    carries_usage = False

    def __init__(self) -> None:
        super().__init__(partial_messages=False)

    def session(self, event: p.BaseEvent) -> str:
        session_id = super().session(event)
        return session_id if session_id.startswith("T-") else "T-" + session_id

    def envelope(self, event: p.BaseEvent, line: dict[str, Any], *, parent: bool = True) -> dict[str, Any]:
        if parent:
            line["parent_tool_use_id"] = None
        line["session_id"] = self.session(event)
        return line

    def api_message(
        self,
        message_id: str,
        block: dict[str, Any],
        stop_reason: str | None,
        usage: p.Usage | None = None,
    ) -> dict[str, Any]:
        return {"type": "message", "role": "assistant", "content": [block], "stop_reason": stop_reason}

    def on_start(self, event: p.Start) -> list[dict[str, Any]]:
        line = {
            "type": "system",
            "subtype": "init",
            "cwd": event.cwd,
            "session_id": self.session(event),
            "tools": list(event.tools),
            "mcp_servers": [],
        }
        return [line]

    def result_line(self, event: p.Result, failure: p.ErrorInfo | None) -> dict[str, Any]:
        claude = super().result_line(event, failure)
        return {key: claude[key] for key in _RESULT_KEYS if key in claude}

    def api_error_lines(self, event: p.Result, failure: p.ErrorInfo) -> list[dict[str, Any]]:
        return []  # Amp documents no such line: its result's ``errors`` say why

    def on_status(self, event: p.Status) -> list[dict[str, Any]]:
        return []

    def on_event(self, event: p.GenericEvent) -> list[dict[str, Any]]:
        return []

    def on_error(self, event: p.Error) -> list[dict[str, Any]]:
        return []


class AmpDialect(SimpleDialect):
    name = "amp"
    summary = "Amp --execute --stream-json (Claude Code compatible)"
    decoder_class = AmpDecoder
    encoder_class = AmpEncoder

    def sniff(self, obj: dict[str, Any]) -> float:
        if "v" in obj or "seq" in obj or not amp_session(obj):
            return 0.0
        if obj.get("type") == "system" and obj.get("subtype") == "init":
            return 0.95
        return 0.9 if obj.get("type") in ("assistant", "user", "result") else 0.0


DIALECT = AmpDialect()
