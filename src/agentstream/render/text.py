"""The ``text`` format, for a person: the assistant's words on stdout as they stream,
everything else as compact notes on stderr.

Decorations follow one rule each, so every command that renders agrees:
``use_color`` (``--color``, ``NO_COLOR``, ``TERM=dumb``, a TTY), ``spinner_allowed``
and ``wrap_width``. The assistant's own text is never rewrapped or styled: it may be
Markdown or code, and a person may copy it. Only the notes on stderr are wrapped.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import sys
import threading
import unicodedata
from typing import IO, TYPE_CHECKING

from agentstream import protocol as p
from agentstream._signals import start_thread
from agentstream._text import terminal_safe

if TYPE_CHECKING:
    from collections.abc import Iterator

    from agentstream.render import ColorChoice, Writer

_PREVIEW = 160
_STYLES = {"dim": "2", "bold": "1", "red": "31", "green": "32", "yellow": "33", "blue": "34", "cyan": "36"}
_ERASE_LINE = "\r\x1b[K"


def _isatty(stream: IO[str]) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):  # a closed stream is no terminal
        return False


def _plain_terminal() -> bool:
    """The person asked for plain output (https://no-color.org), or the terminal cannot do more."""
    return bool(os.environ.get("NO_COLOR")) or os.environ.get("TERM") == "dumb"


def use_color(stream: IO[str], choice: ColorChoice | bool | None = "auto") -> bool:
    """Whether to colour what goes to ``stream``: ``always``/``never`` decide; ``auto`` (or
    ``None``) means a TTY, unless ``NO_COLOR`` is set (any non-empty value) or ``TERM=dumb``."""
    if choice is True or choice == "always":
        return True
    if choice is False or choice == "never":
        return False
    return _isatty(stream) and not _plain_terminal()


def spinner_allowed(stream: IO[str], choice: ColorChoice | bool | None = "auto") -> bool:
    """A spinner only on a TTY that can erase a line, and not for someone who asked for plain
    output (``NO_COLOR``, ``TERM=dumb``, ``--color never``). ``--color always`` does not force
    it: on a pipe or in a file its redraws would be garbage."""
    if choice is False or choice == "never":
        return False
    return _isatty(stream) and not _plain_terminal()


def wrap_width(stream: IO[str]) -> int | None:
    """Columns to wrap notes to: ``COLUMNS``, else the terminal's width; ``None`` (no
    wrapping) when ``stream`` is not a TTY, so logs and pipes keep one note a line."""
    if not _isatty(stream):
        return None
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(stream.fileno()).columns or None
    except (OSError, ValueError, AttributeError):
        return shutil.get_terminal_size().columns


def preview(text: str, limit: int = _PREVIEW) -> str:
    """One line of at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class Spinner:
    """A one-line animation on stderr, drawn by a daemon thread until ``stop()``.

    Every other write to the same stream goes through ``paused()`` (the line is erased
    under the lock the thread draws under, so a note never lands mid-frame); the next
    tick redraws below it. ``stop()`` erases the line for good, so nothing is left
    behind when the run ends, fails or is interrupted.
    """

    FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
    INTERVAL = 0.1

    def __init__(self, err: IO[str], label: str = "waiting for the first token") -> None:
        self._err = err
        self._label = label
        self._lock = threading.RLock()  # re-entered when a signal handler writes the result mid-note
        self._stopped = threading.Event()
        self._drawn = False
        self._thread = start_thread(
            threading.Thread(target=self._spin, name="agentstream-spinner", daemon=True)
        )

    def _spin(self) -> None:
        for frame in itertools.cycle(self.FRAMES):
            if self._stopped.wait(self.INTERVAL):
                return
            with self._lock:
                if self._stopped.is_set():
                    return
                line = f"{frame} {self._label}"
                width = wrap_width(self._err) or len(line) + 1
                try:  # never as wide as the terminal: a wrapped frame could not be erased with \r
                    self._err.write(_ERASE_LINE + line[: max(width - 1, 1)])
                    self._err.flush()
                except (OSError, ValueError):  # stderr went away: stop drawing, say nothing
                    return
                self._drawn = True

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Erase the frame and hold off the next one while the caller writes."""
        with self._lock:
            self._erase()
            yield

    def _erase(self) -> None:
        if self._drawn:
            self._drawn = False
            try:
                self._err.write(_ERASE_LINE)
                self._err.flush()
            except (OSError, ValueError):
                pass

    def stop(self) -> None:
        """Erase the frame for good. No join: the thread checks ``_stopped`` under the lock before
        every frame, and a signal handler stopping the spinner mid-note must not wait on it."""
        self._stopped.set()
        with self._lock:
            self._erase()


def columns(text: str) -> int:
    """How many terminal columns ``text`` takes: East Asian wide and full-width characters two, combining marks
    none, the rest one."""
    if text.isascii():
        return len(text)
    return sum(
        0 if unicodedata.combining(char) else 2 if unicodedata.east_asian_width(char) in "WF" else 1
        for char in text
    )


def _wrapped(line: str, width: int, indent: str) -> list[str]:
    """One line of a note broken at spaces into rows of at most ``width`` columns (a longer word gets a row of its
    own). Rows after the first keep the line's own indent, or take ``indent`` when it has none."""
    if columns(line) <= width:
        return [line]
    lead = line[: len(line) - len(line.lstrip(" "))]
    rows: list[str] = []
    row, used, empty = lead, columns(lead), True
    for word in line.split():
        size = columns(word)
        if not empty and used + 1 + size > width:
            rows.append(row)
            row, used, empty = lead or indent, columns(lead or indent), True
        if not empty:
            row, used = row + " ", used + 1
        row, used, empty = row + word, used + size, False
    rows.append(row)
    return rows


class TextSink:
    """Renders canonical events for reading; never writes anything but assistant text to stdout.

    Notes on stderr are wrapped at word boundaries to the terminal (``wrap_width``);
    the assistant's text on stdout is written as it came, never rewrapped. A spinner
    (``spinner_allowed``) shows on stderr from ``start`` until the first assistant text.
    """

    def __init__(
        self, out: Writer, *, err: IO[str] | None = None, color: ColorChoice | bool | None = None
    ) -> None:
        self._out = out
        self._err = err if err is not None else sys.stderr
        self._color = use_color(self._err, color)
        self._spinner_allowed = spinner_allowed(self._err, color)
        self._spinner: Spinner | None = None
        self._streamed: dict[str, str] = {}
        self._ends_with_newline = True
        self._seen = _Seen()

    def _style(self, text: str, *styles: str) -> str:
        if not self._color:
            return text
        codes = ";".join(_STYLES[s] for s in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def _note(self, text: str, *styles: str, indent: str = "  ") -> None:
        # Lines a note holds are indented under it: none can pass for a note of its own.
        text = terminal_safe(text).replace("\n", "\n" + indent)
        width = wrap_width(self._err)
        if width is not None:
            text = "\n".join(row for line in text.split("\n") for row in _wrapped(line, width, indent))
        with self._spinner.paused() if self._spinner else contextlib.nullcontext():
            self._err.write(self._style(text, *styles) + "\n")
            self._err.flush()

    def _say(self, text: str) -> None:
        if text:
            self._stop_spinner()
            self._out.write(terminal_safe(text).encode("utf-8", "replace"))
            self._ends_with_newline = text.endswith("\n")

    def _stop_spinner(self) -> None:
        if self._spinner is not None:
            self._spinner.stop()
            self._spinner = None

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
        self._stop_spinner()
        self._end_message()

    def _on_start(self, e: p.Start) -> None:
        where = " ".join(part for part in (e.provider or "", e.model or "") if part)
        self._note(f"▶ {e.command}" + (f"  [{where}]" if where else ""), "dim")
        self._seen = _Seen()
        if self._spinner_allowed and self._spinner is None:
            self._spinner = Spinner(self._err)

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
        else:
            # The complete text is authoritative: printed text cannot be taken back, so it follows in full.
            self._end_message()
            self._say(e.content)
        self._end_message()

    def _on_reasoning(self, e: p.Reasoning) -> None:
        self._note(f"∴ {preview(e.content)}", "dim")

    def _on_tool_call(self, e: p.ToolCall) -> None:
        args = preview(json.dumps(e.arguments, ensure_ascii=False), 100)
        self._end_message()
        self._seen.tool_calls += 1
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

    def _on_usage(self, e: p.Usage) -> None:
        self._seen.usage.add(e)

    def _on_result(self, e: p.Result) -> None:
        self._stop_spinner()
        self._end_message()
        outcome = "done" if e.ok else f"failed ({e.subtype})"
        if e.duration_ms > 0:
            outcome += f" in {_duration(e.duration_ms)}"
        self._note(", ".join([f"■ {outcome}", *summary_counts(e, self._seen)]), "bold" if e.ok else "red")


class _Seen:
    """What the renderer counted itself in the current turn, for counts a result leaves out."""

    def __init__(self) -> None:
        self.tool_calls = 0
        self.usage = p.UsageTotals()


def summary_counts(result: p.Result, seen: _Seen) -> list[str]:
    """The counts that are known, never a zero that only means "not counted".

    A converted stream may carry no turn count, duration or usage (its dialect has
    none); then the renderer's own tally of tool calls and usage events stands in,
    and what neither knows is left out. The exit code is always known. (The duration
    goes next to the outcome, and only when above zero.)
    """
    parts = []
    if result.turn_count > 0:
        parts.append(_plural(result.turn_count, "turn"))
    if seen.tool_calls:
        parts.append(_plural(seen.tool_calls, "tool call"))
    elif result.tools_used:
        parts.append(f"tools used: {', '.join(result.tools_used)}")
    usage = result.usage
    if not (usage.input_tokens or usage.output_tokens or usage.cost_usd is not p.UNSET):
        usage = seen.usage
    if usage.input_tokens or usage.output_tokens:
        parts.append(f"{usage.input_tokens} in / {usage.output_tokens} out tokens")
    if isinstance(usage.cost_usd, float):
        parts.append(f"${usage.cost_usd:.4f}")
    parts.append(f"exit {result.exit_code}")
    return parts


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _duration(ms: int) -> str:
    return f"{ms}ms" if ms < 1000 else f"{ms / 1000:.1f}s"
