"""Keeping the environment's secrets out of tool runs and out of the stream.

Two layers, because the shell is not a sandbox:

1. ``shell`` runs with :func:`scrubbed_environ` — the parent's environment minus
   every variable :func:`is_secret` flags — so ``env`` or a careless script cannot
   print the API key the agent itself was started with.
2. :class:`Redactor` replaces the values of those variables wherever they still
   turn up in tool output (``cat /proc/$PPID/environ``, a ``.env`` echoed by a
   build script), so they never reach an event.

The rule (documented in ``docs/tools.md``): a variable is a secret when its
upper-cased name contains ``SECRET``, ``PASSWORD``, ``PASSWD``, ``PASSPHRASE``,
``TOKEN``, ``APIKEY``, ``API_KEY``, ``CREDENTIAL``, ``PRIVATE_KEY`` or
``ACCESS_KEY``, or has ``KEY`` or ``PAT`` as one of its ``_``-separated words,
or when its value is a URL carrying a password (``scheme://user:pass@host``).

The *configured secrets* of a process (:func:`configured_redactor`) are the values
of those variables that are at least six characters long. The providers' keys are
among them by that rule: ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY`` and
``ANTHROPIC_AUTH_TOKEN`` (the only places a provider reads a credential from).
``exec`` redacts them at each edge where text leaves the process: the Stream's
events (and so the bus), stderr, the session store and recorded cassettes, and
model output as it streams (:class:`DeltaGuard` holds back a possible secret's
beginning until the next chunk shows whether it completes one). ``wrap`` redacts
the events it writes and publishes, and its stderr: a wrapped CLI is given its
keys, and may print them.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final

import msgspec

if TYPE_CHECKING:
    from agentstream import protocol as p

__all__ = [
    "DeltaGuard",
    "RedactedWriter",
    "Redactor",
    "configured_redactor",
    "event_redactor",
    "guard_chunks",
    "is_secret",
    "redact_stderr",
    "scrubbed_environ",
]

_SECRET_FRAGMENTS: Final = (
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "TOKEN",
    "APIKEY",
    "API_KEY",
    "CREDENTIAL",
    "PRIVATE_KEY",
    "ACCESS_KEY",
)
_SECRET_WORDS: Final = frozenset({"KEY", "PAT"})
_URL_WITH_PASSWORD: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@")

_MIN_REDACTED_LEN: Final = 6
"""Shorter values (``1``, ``true``) would redact ordinary text; they are still stripped from the shell."""

_SHELL_DEFAULTS: Final = {"PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"}
"""Set unless present: a command must never wait on a pager or a password prompt."""


def is_secret(name: str, value: str) -> bool:
    """Whether the variable ``name=value`` looks like a credential (see the module docstring)."""
    upper = name.upper()
    if any(fragment in upper for fragment in _SECRET_FRAGMENTS):
        return True
    if _SECRET_WORDS.intersection(upper.split("_")):
        return True
    return bool(_URL_WITH_PASSWORD.search(value))


def scrubbed_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default ``os.environ``) without secrets, plus non-interactive defaults."""
    source = os.environ if environ is None else environ
    env = {name: value for name, value in source.items() if not is_secret(name, value)}
    for name, value in _SHELL_DEFAULTS.items():
        env.setdefault(name, value)
    return env


class Redactor:
    """Replaces secret values from an environment with ``[redacted:NAME]``."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        source = os.environ if environ is None else environ
        secrets = {
            value: name
            for name, value in source.items()
            if len(value) >= _MIN_REDACTED_LEN and is_secret(name, value)
        }
        self._names = secrets
        longest_first = sorted(secrets, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, longest_first))) if secrets else None
        self.by_first_char: dict[str, list[str]] = {}
        """The secrets by their first character: where a secret may begin in a text's end."""
        for value in longest_first:
            self.by_first_char.setdefault(value[0], []).append(value)
        self.longest = len(longest_first[0]) if secrets else 0

    def __bool__(self) -> bool:
        return self._pattern is not None

    def __call__(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(lambda match: f"[redacted:{self._names[match.group(0)]}]", text)

    def value(self, obj: Any) -> Any:
        """``obj`` with every string inside it redacted: JSON-like values and msgspec structs.

        Returns ``obj`` itself when nothing changed, a copy otherwise (frozen structs too).
        """
        if self._pattern is None:
            return obj
        if isinstance(obj, str):
            return self(obj)
        if isinstance(obj, list):
            items = [self.value(item) for item in obj]
            return items if any(new is not old for new, old in zip(items, obj, strict=True)) else obj
        if isinstance(obj, dict):
            pairs = [(self.value(key), self.value(item)) for key, item in obj.items()]
            same = all(k is key and v is item for (k, v), (key, item) in zip(pairs, obj.items(), strict=True))
            return obj if same else dict(pairs)
        if isinstance(obj, msgspec.Struct):
            changes = self._struct_changes(obj)
            return msgspec.structs.replace(obj, **changes) if changes else obj
        return obj

    def scrub_struct(self, obj: msgspec.Struct) -> None:
        """Redact a mutable struct in place (a Stream's event keeps its identity)."""
        if self._pattern is None:
            return
        for name, value in self._struct_changes(obj).items():
            setattr(obj, name, value)

    def _struct_changes(self, obj: msgspec.Struct) -> dict[str, Any]:
        changes = {}
        for name in obj.__struct_fields__:
            old = getattr(obj, name)
            new = self.value(old)
            if new is not old:
                changes[name] = new
        return changes


class DeltaGuard:
    """Redacts a text that arrives in chunks, where a secret may be split across two of them.

    :meth:`feed` returns what is safe to show now and keeps back the longest end of
    the text that could still grow into a secret; :meth:`flush` returns that when
    the text ends. Joined, the pieces equal the whole text redacted at once.
    """

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self.held = ""

    def feed(self, chunk: str) -> str:
        if not self.redactor:
            return chunk
        text = self.redactor(self.held + chunk)
        keep = self._unfinished_secret(text)
        self.held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def flush(self) -> str:
        held, self.held = self.held, ""
        return held

    def _unfinished_secret(self, text: str) -> int:
        """Length of the longest end of ``text`` that is the beginning of a secret (0 if none is)."""
        candidates = self.redactor.by_first_char
        for start in range(max(len(text) - self.redactor.longest + 1, 0), len(text)):
            secrets = candidates.get(text[start])
            if secrets and any(secret.startswith(text[start:]) for secret in secrets):
                return len(text) - start
        return 0


def guard_chunks(events: Iterable[p.AnyEvent], redactor: Redactor) -> Iterator[p.AnyEvent]:
    """``events`` with the text of every delta run and every tool call's progress redacted chunk by chunk.

    Each run (and each call's progress) has a :class:`DeltaGuard` of its own, so a secret that the source
    split across two chunks is still caught, even with several runs open at once. What a guard holds back
    goes out as one more chunk just before the run's complete event (the call's result), or before a
    ``result`` for anything still open. Per-event redaction (:func:`event_redactor`) still does the rest.
    """
    from agentstream import protocol as p

    if not redactor:
        yield from events
        return
    open_chunks: dict[
        tuple[str, str], tuple[DeltaGuard, p.MessageDelta | p.ReasoningDelta | p.ToolProgress]
    ] = {}
    for event in events:
        if isinstance(event, (p.MessageDelta, p.ReasoningDelta, p.ToolProgress)):
            key = _chunk_key(event)
            guard = open_chunks[key][0] if key in open_chunks else DeltaGuard(redactor)
            open_chunks[key] = (guard, event)
            text = guard.feed(event.content)
            if text or not event.content:
                event.content = text
                yield event
            continue
        if isinstance(event, p.Result):
            keys = list(open_chunks)
        else:
            key = _chunk_key(event)
            keys = [key] if key in open_chunks else []
        for key in keys:
            guard, last = open_chunks.pop(key)
            held = guard.flush()
            if held:
                yield msgspec.structs.replace(last, content=held)
        yield event


def _chunk_key(event: p.AnyEvent) -> tuple[str, str]:
    """Which run or call a chunk (or the event that completes it) belongs to."""
    for field in ("message_id", "reasoning_id", "call_id"):
        value = getattr(event, field, None)
        if isinstance(value, str):
            return field, value
    return "", ""


@lru_cache(maxsize=1)
def configured_redactor() -> Redactor:
    """The process's configured secrets (see the module docstring), read once."""
    return Redactor()


def event_redactor() -> Callable[[msgspec.Struct], None] | None:
    """What scrubs the configured secrets from each event a Stream writes (None when there are none)."""
    redactor = configured_redactor()
    return redactor.scrub_struct if redactor else None


class RedactedWriter:
    """A text stream (stderr) that redacts every write; everything else is the wrapped stream's."""

    def __init__(self, inner: Any, redactor: Redactor) -> None:
        self._inner = inner
        self._redactor = redactor

    def write(self, text: str) -> int:
        self._inner.write(self._redactor(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def redact_stderr() -> None:
    """From now on, whatever this process writes to ``sys.stderr`` (tracebacks, warnings) is redacted."""
    redactor = configured_redactor()
    if redactor and not isinstance(sys.stderr, RedactedWriter):
        sys.stderr = RedactedWriter(sys.stderr, redactor)
