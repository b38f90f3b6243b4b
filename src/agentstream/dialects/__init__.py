"""Registry of wire formats. Modules are imported only when their dialect is used.

A dialect is an instance of :class:`agentstream.dialects.base.Dialect`, found by
name in the ``agentstream.dialects`` entry-point group (:mod:`agentstream.plugins`):
the built-ins below, then any installed plugin's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentstream.errors import UnknownDialectError
from agentstream.plugins import Registry, describe

if TYPE_CHECKING:
    from agentstream import protocol as p
    from agentstream.dialects.base import Dialect, DialectEncoder

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


def _check_dialect(name: str, value: object) -> str | None:
    """What keeps a plugin's object from being dialect ``name``, or ``None``.

    Detection goes by ``Dialect.name``, so a name other than the entry point's would
    make a detected stream "unknown", or pass it to the built-in of that name. A dialect
    that passes has its encoders checked from then on (:func:`_check_encoders`).
    """
    from agentstream.dialects.base import Dialect

    if not isinstance(value, Dialect):
        return f"is not a dialect: expected an instance of agentstream.dialects.base.Dialect, got {describe(value)}"
    own = getattr(value, "name", None)
    if own != name:
        return f"is not usable: its name is {own!r}, not its entry point's {name!r}"
    _check_encoders(name, value)
    return None


def _check_encoders(name: str, dialect: Dialect) -> None:
    """Have the plugin dialect's encoders check what they return, so a bad line names the plugin.

    A writer joins the lines as bytes: a ``str`` (or anything else) would fail there, far from its cause.
    """
    make = dialect.encoder

    def encoder() -> DialectEncoder:
        encoder = make()
        for method in ("encode", "finish"):
            setattr(encoder, method, _checked_lines(name, method, getattr(encoder, method)))
        return encoder

    try:
        dialect.encoder = encoder  # type: ignore[method-assign]
    except AttributeError:  # __slots__: its encoders go unchecked
        pass


def _checked_lines(name: str, method: str, lines_of: Callable[..., Any]) -> Callable[..., list[bytes]]:
    def checked(*args: p.AnyEvent) -> list[bytes]:
        lines = lines_of(*args)
        if type(lines) is list and all(type(line) is bytes for line in lines):
            return lines
        from agentstream.errors import AgentstreamError, ErrorCode

        got = (
            describe(lines)
            if type(lines) is not list
            else "a list holding "
            + ", ".join(sorted({describe(line) for line in lines if type(line) is not bytes}))
        )
        raise AgentstreamError(
            f"{DIALECTS.where(name)} returned {got} from its encoder's {method}(), expected a list of bytes",
            code=ErrorCode.EXCEPTION,
            fix=DIALECTS.fix_for(name, "its encoder must return lines as bytes, each without its newline"),
        )

    return checked


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
    check=_check_dialect,
)
DIALECT_NAMES: tuple[str, ...] = DIALECTS.builtin_names
"""The built-in dialects; :func:`dialect_names` adds the installed plugins'."""
DETECT_LINES = 8
"""Non-blank lines a reader looks at, at most, to recognise the dialect."""


def dialect_names() -> tuple[str, ...]:
    """Every dialect this install can use: the built-ins, then the plugins' that load."""
    return DIALECTS.usable_names()


def get_dialect(name: str) -> Dialect:
    """The dialect called ``name``, or a :class:`UnknownDialectError`: why its plugin fails, or the valid names."""
    dialect = DIALECTS.get(name, report=False)  # a plugin's failure is the error below
    if dialect is None:
        problem = DIALECTS.missing(name)
        raise UnknownDialectError(problem.message, fix=problem.fix)
    return dialect


def get_writable_dialect(name: str) -> Dialect:
    """The dialect called ``name``, to be written: a usage error for one agentstream only reads, and an unknown
    name's fix lists only the dialects that can be written."""
    dialect = DIALECTS.get(name, report=False)
    if dialect is None:
        problem = DIALECTS.problem(name)  # a plugin's own failure says what to do about it
        fix = problem.fix if problem is not None else f"use one of: {', '.join(writable_dialects())}"
        raise UnknownDialectError(problem.message if problem else f"unknown dialect {name!r}", fix=fix)
    dialect.check_writable()
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
    return _best(lambda dialect: max((dialect.sniff(obj) for obj in objects), default=0.0), "sniff")


def _best(score: Callable[[Dialect], float], method: str) -> str | None:
    """The dialect ``score`` rates highest, if at least 0.5; built-ins first on a tie.

    A plugin whose ``method`` raises, or returns no number, is reported once and skipped
    from then on: one broken plugin must not stop every other dialect from being recognised.
    """
    best_name, best_score = None, 0.0
    for name, dialect in DIALECTS.load_all().items():
        try:
            value = score(dialect)
            if not isinstance(value, (int, float)):
                raise TypeError(f"it returned {describe(value)}, not a number")
        except Exception as exc:
            if DIALECTS.plugin_distribution(name) is None:
                raise  # a built-in's bug
            DIALECTS.reject(
                name,
                f"failed in {method}() ({type(exc).__name__}: {exc})",
                DIALECTS.fix_for(name, f"{method}() must return a number from 0.0 to 1.0 for any object"),
            )
            continue
        if value > best_score:
            best_name, best_score = dialect.name, value
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
    return _best(lambda dialect: dialect.sniff_document(document), "sniff_document")
