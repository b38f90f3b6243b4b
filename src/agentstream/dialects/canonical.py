"""The canonical protocol v1 as a dialect, so every reader and writer treats it like the others."""

from __future__ import annotations

import re
from typing import Any, Final

from agentstream import protocol as p
from agentstream._lines import parse_json
from agentstream.dialects.kit import DialectDecoder, DialectEncoder, SimpleDialect, _as_str, malformed
from agentstream.errors import MalformedEventError

_FIELD_AT: Final = re.compile(r"(.*) - at `\$((?:\.[^.\[`]+|\[\d+\])+)`$")
"""A msgspec validation error that names a field: its complaint, then the field's path."""
_PATH_STEP: Final = re.compile(r"\.([^.\[`]+)|\[(\d+)\]")
_NUMBER_FOR_TEXT: Final = re.compile(r"Expected `str(?: \| null)?`, got `(?:int|float)`")
"""msgspec's complaint about a number where text is meant: such a number is read as its text."""
MAX_LOST_FIELDS: Final = 16
"""Fields one line may lose before it is reported as malformed instead."""


class CanonicalDecoder(DialectDecoder):
    """Passes canonical events through unchanged, keeping their own stamps.

    Read as liberally as the other dialects: a field of the wrong kind loses that field (a ``log``
    warning says which, once per stream), not the event. ``validate`` is what holds a stream to the
    letter of the protocol.
    """

    session_named = True  # every event names its producer's session

    def __init__(self, session_id: str | None = None) -> None:
        super().__init__(session_id)
        self._reported: set[tuple[str, str]] = set()

    def decode_line(self, line: bytes | bytearray) -> list[p.AnyEvent] | None:
        try:
            return [p.decode(line)]
        except MalformedEventError as refused:
            return self._without_bad_fields(line, refused)

    def decode_object(self, obj: dict[str, Any]) -> None:
        import msgspec

        self._out.append(p.decode(msgspec.json.encode(obj)))

    def _without_bad_fields(
        self, line: bytes | bytearray, refused: MalformedEventError
    ) -> list[p.AnyEvent] | None:
        """The event of a line the strict decoder refused, minus the fields that made it refuse; ``None`` for a
        line that is no event at all; a :class:`MalformedEventError` in the strict decoder's words for an event
        short of a field it cannot be without."""
        import msgspec

        try:
            obj = parse_json(line)
        except (msgspec.DecodeError, RecursionError):
            return None  # not JSON: the reader says so
        kind = obj.get("type") if isinstance(obj, dict) else None
        if not isinstance(kind, str):
            return None  # not an event: the reader says what it is
        unreadable = malformed(f"canonical '{kind}' line: {refused.message}")
        lost: list[tuple[str, str]] = []
        while len(lost) <= MAX_LOST_FIELDS:
            try:
                event: p.Event = msgspec.convert(obj, p.Event)
            except msgspec.ValidationError as exc:
                found = _FIELD_AT.match(str(exc))
                place = None if found is None else _place(obj, found[2])
                if found is None or place is None:
                    raise unreadable from None  # a required field missing (or dropped): no event without it
                holder, key = place
                if _NUMBER_FOR_TEXT.fullmatch(found[1]):
                    holder[key] = _as_str(holder[key])  # read as its text, as every dialect reads it
                    continue
                del holder[
                    key
                ]  # when the event cannot be without it, the next round says the field is missing
                lost.append((found[2].lstrip("."), found[1]))
                continue
            return self._with_reports(event, kind, lost)
        raise unreadable

    def _with_reports(self, event: p.Event, kind: str, lost: list[tuple[str, str]]) -> list[p.AnyEvent]:
        """``event`` with a warning per field it lost (not yet reported in this stream), after a ``start``
        (nothing goes before it) and before anything else."""
        logs: list[p.AnyEvent] = []
        for path, complaint in lost:
            if (kind, path) not in self._reported:
                self._reported.add((kind, path))
                message = f"canonical '{kind}' line: field '{path}' was ignored ({complaint})"
                logs.append(p.Log(level="warn", message=message, session_id=event.session_id))
        return [event, *logs] if isinstance(event, p.Start) else [*logs, event]


def _place(obj: Any, path: str) -> tuple[Any, Any] | None:
    """The object or list holding the value at a msgspec error path (``.usage.input_tokens``, ``.tools[2]``) in
    ``obj``, and its key there; ``None`` when nothing is there (a missing field)."""
    steps = [key if key else int(index) for key, index in _PATH_STEP.findall(path)]
    parent = obj
    for step in steps[:-1]:
        try:
            parent = parent[step]
        except (KeyError, IndexError, TypeError):
            return None
    last = steps[-1] if steps else None
    if isinstance(parent, dict) and isinstance(last, str) and last in parent:
        return parent, last
    if isinstance(parent, list) and isinstance(last, int) and last < len(parent):
        return parent, last
    return None


class CanonicalEncoder(DialectEncoder):
    def encode(self, event: p.AnyEvent) -> list[bytes]:
        return [p.encode(event)]


class CanonicalDialect(SimpleDialect):
    name = "canonical"
    exact_exit_code = True
    summary = "agentstream protocol v1"
    decoder_class = CanonicalDecoder
    encoder_class = CanonicalEncoder

    def sniff(self, obj: dict[str, Any]) -> float:
        return 1.0 if p.is_canonical_object(obj) else 0.0


DIALECT = CanonicalDialect()
