"""Registry of wire formats. Modules are imported only when their dialect is used.

Each module named here defines ``DIALECT``, an instance of
:class:`agentstream.dialects.base.Dialect`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentstream.errors import UnknownDialectError

if TYPE_CHECKING:
    from agentstream.dialects.base import Dialect

__all__ = [
    "DETECT_LINES",
    "DIALECT_NAMES",
    "detect_dialect",
    "detect_dialect_in_lines",
    "detect_document",
    "get_dialect",
]

_MODULES: dict[str, str] = {
    "canonical": "agentstream.dialects.canonical",
    "acai": "agentstream.dialects.acai",
    "gemini": "agentstream.dialects.gemini",
    "locus": "agentstream.dialects.locus",
    "cursor": "agentstream.dialects.cursor",
    "joelclaw": "agentstream.dialects.joelclaw",
    "claude": "agentstream.dialects.claude",
    "codex": "agentstream.dialects.codex",
    "opencode": "agentstream.dialects.opencode",
    "amp": "agentstream.dialects.amp",
    "agui": "agentstream.dialects.agui",
}
DIALECT_NAMES: tuple[str, ...] = tuple(_MODULES)
DETECT_LINES = 8
"""Non-blank lines a reader looks at, at most, to recognise the dialect."""


def get_dialect(name: str) -> Dialect:
    """The dialect called ``name``, or a :class:`UnknownDialectError` that lists the valid names."""
    module = _MODULES.get(name)
    if module is None:
        raise UnknownDialectError(f"unknown dialect {name!r}", fix=f"use one of: {', '.join(DIALECT_NAMES)}")
    return importlib.import_module(module).DIALECT


def available_dialects() -> list[Dialect]:
    """Every dialect whose module is present (all of them, in a complete install)."""
    found = []
    for name in DIALECT_NAMES:
        try:
            found.append(get_dialect(name))
        except ModuleNotFoundError:
            continue
    return found


def detect_dialect(objects: list[dict[str, Any]]) -> str | None:
    """The dialect that best explains the first parsed objects of a stream, or ``None``."""
    canonical = get_dialect("canonical")
    if any(canonical.sniff(obj) >= 1.0 for obj in objects):
        return canonical.name  # the common case, decided without importing every dialect
    best_name, best_score = None, 0.0
    for dialect in available_dialects():
        score = max((dialect.sniff(obj) for obj in objects), default=0.0)
        if score > best_score:
            best_name, best_score = dialect.name, score
    return best_name if best_score >= 0.5 else None


def detect_dialect_in_lines(lines: list[bytes]) -> str | None:
    """:func:`detect_dialect` over raw lines; lines that are not JSON objects (junk on stdout) are skipped."""
    import msgspec

    decode = msgspec.json.Decoder().decode
    objects = []
    for line in lines:
        try:
            obj = decode(line)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            continue
        if isinstance(obj, dict):
            objects.append(obj)
    return detect_dialect(objects)


def detect_document(document: object) -> str | None:
    """The dialect of a whole JSON document (a CLI's single-object ``json`` output), or ``None``.

    An array is judged by its elements; an object by the dialects' line sniffers,
    then by the document shapes only some dialects have (see ``sniff_document``).
    """
    if isinstance(document, list):
        return detect_dialect([item for item in document[:DETECT_LINES] if isinstance(item, dict)])
    if not isinstance(document, dict):
        return None
    name = detect_dialect([document])
    if name is not None:
        return name
    best_name, best_score = None, 0.0
    for dialect in available_dialects():
        score = dialect.sniff_document(document)
        if score > best_score:
            best_name, best_score = dialect.name, score
    return best_name if best_score >= 0.5 else None
