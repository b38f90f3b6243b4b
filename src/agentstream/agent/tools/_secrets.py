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
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Final

__all__ = ["Redactor", "is_secret", "scrubbed_environ"]

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

    def __call__(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(lambda match: f"[redacted:{self._names[match.group(0)]}]", text)
