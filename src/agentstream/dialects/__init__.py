"""Registry of wire formats. Modules are imported only when their dialect is used.

A dialect is an instance of :class:`agentstream.dialects.base.Dialect`, found by
name in the ``agentstream.dialects`` entry-point group (:mod:`agentstream.plugins`):
the built-ins below, then any installed plugin's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentstream.errors import UnknownDialectError
from agentstream.plugins import Registry

if TYPE_CHECKING:
    from agentstream.dialects.base import Dialect

__all__ = [
    "DETECT_LINES",
    "DIALECTS",
    "DIALECT_NAMES",
    "available_dialects",
    "detect_dialect",
    "detect_dialect_in_lines",
    "detect_document",
    "dialect_names",
    "get_dialect",
    "sse_payload",
]


def _is_dialect(value: object) -> bool:
    from agentstream.dialects.base import Dialect

    return isinstance(value, Dialect)


DIALECTS: Registry[Dialect] = Registry(
    "agentstream.dialects",
    {
        name: f"agentstream.dialects.{name.replace('-', '_')}:DIALECT"
        for name in (
            "canonical",
            "acai",
            "cake",
            "gemini",
            "locus",
            "cursor",
            "joelclaw",
            "claude",
            "codex",
            "opencode",
            "amp",
            "agui",
            "claude-log",
            "codex-log",
            "gemini-log",
        )
    },
    kind="dialect",
    accepts=_is_dialect,
)
DIALECT_NAMES: tuple[str, ...] = DIALECTS.builtin_names
"""The built-in dialects; :func:`dialect_names` adds the installed plugins'."""
DETECT_LINES = 8
"""Non-blank lines a reader looks at, at most, to recognise the dialect."""


def dialect_names() -> tuple[str, ...]:
    """Every dialect this install has: the built-ins, then the plugins'."""
    return DIALECTS.names()


def get_dialect(name: str) -> Dialect:
    """The dialect called ``name``, or a :class:`UnknownDialectError` that lists the valid names."""
    dialect = DIALECTS.get(name)
    if dialect is None:
        raise UnknownDialectError(
            f"unknown dialect {name!r}", fix=f"use one of: {', '.join(dialect_names())}"
        )
    return dialect


def available_dialects() -> list[Dialect]:
    """Every dialect that loads: the built-ins, then the plugins'."""
    return list(DIALECTS.load_all().values())


def writable_dialects() -> list[str]:
    """The names of every dialect that loads and can be written (what an output dialect may be)."""
    return [dialect.name for dialect in available_dialects() if dialect.can_encode]


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


def sse_payload(line: bytes | bytearray) -> bytes | bytearray:
    """A line as detection sees it: the JSON of an SSE ``data:`` line (AG-UI over SSE), else the line itself."""
    return line[5:] if line.startswith(b"data:") else line


def detect_dialect_in_lines(lines: list[bytes]) -> str | None:
    """:func:`detect_dialect` over raw lines (SSE ``data:`` lines by their payload); lines that are not JSON
    objects (junk on stdout, SSE comments and fields) are skipped."""
    import msgspec

    decode = msgspec.json.Decoder().decode
    objects = []
    for line in lines:
        try:
            obj = decode(sse_payload(line))
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
