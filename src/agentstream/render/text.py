"""The ``text`` format, for a person: the assistant's words on stdout as they stream,
everything else as compact lines on stderr (colour only on a TTY, ``NO_COLOR`` honoured)."""

from __future__ import annotations

import json
import os
import sys
from typing import IO, TYPE_CHECKING

from agentstream import protocol as p

if TYPE_CHECKING:
    from agentstream.render import Writer

_PREVIEW = 160
_STYLES = {"dim": "2", "bold": "1", "red": "31", "green": "32", "yellow": "33", "blue": "34", "cyan": "36"}


def use_color(stream: IO[str]) -> bool:
    """Colour only for a terminal, and never when ``NO_COLOR`` is set (https://no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def preview(text: str, limit: int = _PREVIEW) -> str:
    """One line of at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class TextSink:
    """Renders canonical events for reading; never writes anything but assistant text to stdout."""

    def __init__(self, out: Writer, *, err: IO[str] | None = None, color: bool | None = None) -> None:
        self._out = out
        self._err = err if err is not None else sys.stderr
        self._color = use_color(self._err) if color is None else color
        self._streamed: dict[str, str] = {}
        self._ends_with_newline = True

    def _style(self, text: str, *styles: str) -> str:
        if not self._color:
            return text
        codes = ";".join(_STYLES[s] for s in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def _note(self, text: str, *styles: str) -> None:
        self._err.write(self._style(text, *styles) + "\n")
        self._err.flush()

    def _say(self, text: str) -> None:
        if text:
            self._out.write(text.encode("utf-8", "replace"))
            self._ends_with_newline = text.endswith("\n")

    def _end_message(self) -> None:
        if not self._ends_with_newline:
            self._say("\n")

    def emit(self, event: p.AnyEvent) -> None:
        # By class, never by the ``type`` string: an unknown event may carry a known type name.
        if type(event) is p.UnknownEvent:
            self._note(f"· {preview(event.type, 60)}", "dim")
            return
        handler = getattr(self, f"_on_{event.__struct_config__.tag}", None)
        if handler is not None:
            handler(event)

    def close(self) -> None:
        self._end_message()

    def _on_start(self, e: p.Start) -> None:
        where = " ".join(part for part in (e.provider or "", e.model or "") if part)
        self._note(f"▶ {e.command}" + (f"  [{where}]" if where else ""), "dim")

    def _on_message_delta(self, e: p.MessageDelta) -> None:
        if e.role != "assistant":
            return
        self._streamed[e.message_id] = self._streamed.get(e.message_id, "") + e.content
        self._say(e.content)

    def _on_message(self, e: p.Message) -> None:
        if e.role != "assistant":
            if e.role == "user":
                self._note(f"> {preview(e.content)}", "dim")
            return
        shown = self._streamed.pop(e.message_id, None)
        if shown is None:
            self._say(e.content)
        elif e.content.startswith(shown):
            self._say(e.content[len(shown) :])
        self._end_message()

    def _on_reasoning(self, e: p.Reasoning) -> None:
        self._note(f"∴ {preview(e.content)}", "dim")

    def _on_tool_call(self, e: p.ToolCall) -> None:
        args = preview(json.dumps(e.arguments, ensure_ascii=False), 100)
        self._end_message()
        self._note(f"→ {e.name} {args}", "cyan")

    def _on_tool_progress(self, e: p.ToolProgress) -> None:
        for line in e.content.splitlines():
            self._note(f"  │ {line}", "dim")

    def _on_tool_result(self, e: p.ToolResult) -> None:
        if e.status == "success":
            suffix = " (truncated)" if e.truncated is True else ""
            self._note(f"✓ {e.name} {e.duration_ms}ms{suffix}", "green")
        else:
            reason = e.error if isinstance(e.error, str) else ""
            self._note(f"✗ {e.name} {e.status}: {preview(reason)}", "red")

    def _on_step(self, e: p.Step) -> None:
        took = f" {e.duration_ms}ms" if isinstance(e.duration_ms, int) else ""
        why = f": {e.error}" if isinstance(e.error, str) else ""
        style = {"started": "blue", "completed": "green", "failed": "red"}[e.status]
        self._note(f"▸ {e.name} {e.status}{took}{why}", style)

    def _on_progress(self, e: p.Progress) -> None:
        parts = [e.name]
        if isinstance(e.percent, (int, float)):
            parts.append(f"{e.percent:g}%")
        elif isinstance(e.current, (int, float)):
            parts.append(
                f"{e.current:g}/{e.total:g}" if isinstance(e.total, (int, float)) else f"{e.current:g}"
            )
        if isinstance(e.message, str):
            parts.append(e.message)
        self._note("… " + " ".join(parts), "dim")

    def _on_log(self, e: p.Log) -> None:
        style = {"debug": "dim", "info": "dim", "warn": "yellow", "error": "red"}[e.level]
        self._note(f"[{e.level}] {e.message}", style)

    def _on_status(self, e: p.Status) -> None:
        self._note(f"· {e.status}" + (f": {e.message}" if isinstance(e.message, str) else ""), "dim")

    def _on_event(self, e: p.GenericEvent) -> None:
        self._note(f"⚑ {e.name}", "dim")

    def _on_error(self, e: p.Error) -> None:
        if isinstance(e.retry_in_ms, int):
            kind = f"retrying in {e.retry_in_ms / 1000:g}s"
        else:
            kind = "warning" if e.recoverable else "error"
        fix = f" — fix: {e.fix}" if isinstance(e.fix, str) else ""
        self._end_message()
        self._note(f"✗ {kind} {e.code}: {e.message}{fix}", "yellow" if e.recoverable else "red")

    def _on_result(self, e: p.Result) -> None:
        self._end_message()
        tokens = f"{e.usage.input_tokens} in / {e.usage.output_tokens} out tokens"
        cost = f", ${e.usage.cost_usd:.4f}" if isinstance(e.usage.cost_usd, float) else ""
        outcome = "done" if e.ok else f"failed ({e.subtype})"
        self._note(
            f"■ {outcome} in {e.duration_ms}ms, {e.turn_count} turns, {tokens}{cost}, exit {e.exit_code}",
            "bold" if e.ok else "red",
        )
