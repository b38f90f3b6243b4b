"""The dialect kit: everything a dialect module needs, built-in or from a plugin.

A *dialect* turns another tool's NDJSON lines into canonical events and back.
Every built-in dialect is written with this module alone, the same way, and a
plugin dialect should be too: import from here, not from the package's private
modules. A minimal dialect::

    from agentstream import protocol as p
    from agentstream.dialects.kit import EventDecoder, EventEncoder, Fields, SimpleDialect, identify

    class ToyDecoder(EventDecoder):
        dialect, command = "toy", "toy run"
        identifying = identify({"said": ["id"]})  # a 'said' line without its id is malformed

        def on_said(self, f: Fields) -> None:  # one handler per line type: {"type": "said", ...}
            self.emit(p.Message(message_id=f.text("id"), role="assistant", content=f.text("text")))

        def on_done(self, f: Fields) -> None:
            self.emit_result(ok=f.flag("ok"), exit_code=0 if f.flag("ok") else 1)

    class ToyEncoder(EventEncoder):
        def on_message(self, event: p.Message) -> list[dict]:
            return [{"type": "said", "id": event.message_id, "text": event.content}]

        def on_result(self, event: p.Result) -> list[dict]:
            return [{"type": "done", "ok": event.ok}]

    class ToyDialect(SimpleDialect):
        name, summary = "toy", "the toy CLI's --json output"
        decoder_class, encoder_class = ToyDecoder, ToyEncoder
        has_start_line = False  # its streams open with no line of their own: 'start' is always made up

        def sniff(self, obj: dict) -> float:  # how sure a first line is ours, 0.0 to 1.0
            return 0.9 if obj.get("type") == "said" and "toy_version" in obj else 0.0

    DIALECT = ToyDialect()

What is here, and when to use it:

- **The dialect object** — :class:`Dialect` (the interface: ``sniff``, ``decoder``,
  ``encoder``, and optionally ``error_for_exit`` for the CLI's documented exit codes,
  ``sniff_document`` for a single-document JSON output (its decoder's ``decode_document``
  reads it), ``has_start_line``);
  :class:`SimpleDialect` builds the decoder and encoder from two class attributes (a decode-only
  dialect sets ``can_encode = False`` and names no encoder).
- **Reading fields liberally** — :class:`Fields` reads one line: any JSON number where a
  number is meant (fractions rounded, numeric strings read), a number where text is meant
  read as its text, and a field of the wrong kind
  is lost (a default, and one ``log`` warning per field per stream), never the line. Only
  the fields a decoder lists in :attr:`EventDecoder.identifying` (built with
  :func:`identify`) make a line malformed; :func:`malformed` is that error for checks of
  your own.
- **Decoding** — :class:`EventDecoder` dispatches each object to ``on_<type>``,
  passes unknown types through as :class:`~agentstream.protocol.UnknownEvent`,
  adopts the dialect's session id (:meth:`EventDecoder.adopt_session`), stamps events with the
  current line's own time when the decoder sets :attr:`EventDecoder.line_ts`, synthesises
  ``start`` when a stream lacks one, buffers delta runs (:meth:`EventDecoder.chunk`,
  :meth:`EventDecoder.delta`) and closes each with one complete ``message``/``reasoning``,
  and keeps a :class:`~agentstream.transcript.Tally` for the ``result`` a dialect leaves
  incomplete (:meth:`EventDecoder.emit_result`).
- **Encoding** — :class:`EventEncoder` dispatches each canonical event to
  ``on_<type>`` (no handler: the dialect cannot carry it, so it is dropped; an
  unknown line goes to ``on_event`` as :func:`as_generic` makes it), writes a
  ``start`` first and a terminal event last in every turn of a session, on every
  path, remembers which messages already went out as deltas, and can hold a fatal
  ``error`` so that a dialect whose terminal event carries the error folds it in.
- **Tool pairing** — :class:`ToolPairs` remembers open calls so a result line that
  lacks the tool's name (or its id) still pairs with its call.
- **Timestamps** — :func:`rfc3339` turns a dialect's epoch milliseconds or ISO 8601
  string into the canonical RFC 3339 UTC form with milliseconds (``None`` when the
  value is unusable, so the caller falls back to "now"); :func:`epoch_ms` and
  :func:`iso` go the other way for encoders.
- **JSON in strings** — :func:`parse_arguments` / :func:`arguments_text` for tool
  arguments sent as a JSON string (invalid JSON is kept under
  :data:`RAW_ARGUMENTS_KEY`); :func:`text_or_json` / :func:`json_or_text` carry an
  object or array through a canonical string field and back, exactly;
  :func:`event_data` / :func:`event_from_data` carry a whole event in a dialect's
  extension slot; :func:`first_keys` inverts a code table; :func:`encode_object` writes a line;
  :func:`failure_text` is a failed tool call's one text for a dialect that has no other.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, ClassVar, Final, NoReturn, cast

import msgspec

from agentstream import protocol as p
from agentstream._lines import is_long
from agentstream.dialects.base import Dialect, DialectDecoder, DialectEncoder, ExitMeaning
from agentstream.ending import ending_events
from agentstream.errors import ErrorCode, ExitCode, MalformedEventError
from agentstream.transcript import Tally, tally_add

__all__ = [
    "RAW_ARGUMENTS_KEY",
    "ROLES",
    "Dialect",
    "DialectDecoder",
    "DialectEncoder",
    "EventDecoder",
    "EventEncoder",
    "ExitMeaning",
    "Fields",
    "LineRules",
    "SimpleDialect",
    "ToolPairs",
    "arguments_text",
    "as_generic",
    "encode_object",
    "epoch_ms",
    "event_data",
    "event_from_data",
    "failure_text",
    "first_keys",
    "identify",
    "iso",
    "json_or_text",
    "kind_of",
    "malformed",
    "parse_arguments",
    "rfc3339",
    "text_or_json",
]

ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool"})
RAW_ARGUMENTS_KEY = "_raw_arguments"
"""Where tool arguments that are not a JSON object are kept, as the original string."""

_INT_LIMIT = 2**63
_MAX_EPOCH_MS = 253_402_300_800_000  # 10000-01-01T00:00:00Z
_SECONDS_BELOW = 100_000_000_000
"""Epoch numbers below this are seconds (up to the year 5138), the others milliseconds (from 1973 on)."""
_json_encode = p.JSON_ENCODER.encode
_json_decode = p.JSON_DECODER.decode
_NOT_DATA = frozenset({"type", "v", "session_id", "seq", "ts", "synthetic"})


# -- timestamps ------------------------------------------------------------------


def _format(moment: datetime) -> str:
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T"
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}.{moment.microsecond // 1000:03d}Z"
    )


def _parse_iso(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is None:
            return moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


_MILLIS = frozenset(f"{n:03d}" for n in range(1000))
_SECONDS = frozenset(f"{n:02d}." for n in range(60))


def rfc3339(value: object) -> str | None:
    """A dialect timestamp (an epoch number or ISO 8601 string) as canonical RFC 3339 UTC ms, or ``None``.

    Epoch numbers are milliseconds, except those below :data:`_SECONDS_BELOW`, which are seconds: as
    milliseconds they would fall in 1970–1973, when no agent ran, while as seconds they cover any date a
    producer writes (Python's ``time.time()`` is seconds, JavaScript's ``Date.now()`` milliseconds).
    """
    if isinstance(value, str):
        return _iso_stamp(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value) or not 0 <= value < _MAX_EPOCH_MS:
        return None
    if value < _SECONDS_BELOW:
        value *= 1000
    seconds, millis = divmod(int(value), 1000)
    return f"{_epoch_second(seconds)}.{millis:03d}Z"


def _iso_stamp(text: str) -> str | None:
    """Most dialects already write canonical stamps: those pass through after a check of their minute."""
    if (
        len(text) == 24
        and text[20:23] in _MILLIS
        and text[23] == "Z"
        and text[17:20] in _SECONDS
        and _canonical_minute(text[:17])
    ):
        return text
    moment = _parse_iso(text)
    return _format(moment) if moment is not None else None


@functools.lru_cache(maxsize=64)
def _canonical_minute(prefix: str) -> bool:
    """Whether ``YYYY-MM-DDTHH:MM:`` is a real minute written canonically (a stream's lines share a few)."""
    moment = _parse_iso(prefix + "00.000Z")
    return moment is not None and _format(moment) == prefix + "00.000Z"


@functools.lru_cache(maxsize=64)
def _epoch_second(seconds: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` of an epoch second."""
    return _format(datetime.fromtimestamp(seconds, UTC))[:19]


def epoch_ms(ts: str) -> int:
    """A canonical timestamp as epoch milliseconds (now, when it is empty or unreadable)."""
    moment = _parse_iso(ts) if ts else None
    if moment is None:
        moment = _parse_iso(p.now_ts())
        assert moment is not None
    return int(moment.timestamp()) * 1000 + moment.microsecond // 1000


def iso(ts: str) -> str:
    """A canonical timestamp for an ISO 8601 field (now, when the event was never stamped)."""
    return ts or p.now_ts()


# -- typed field access ------------------------------------------------------------


def malformed(message: str) -> MalformedEventError:
    """The error for a line a dialect cannot decode at all; ``message`` starts with the dialect's name."""
    return MalformedEventError(
        message, fix="check that the input really is this dialect's output (see docs/dialects.md)"
    )


def _ignore_report(key: str, message: str) -> None:
    """Where problems of a :class:`Fields` made outside a decoder go: nowhere (its caller checks the result)."""


class LineRules:
    """What a decoder tells :class:`Fields` about the kind of line it is reading.

    ``identifying`` holds the dotted paths (``*`` for each item of a list) of
    the fields without which the line cannot be decoded at all: a missing or
    mistyped one makes the line malformed. Any other field of the wrong kind is
    *lost*: the getter returns its default and ``report(key, message)`` is
    called, which a decoder turns into one warning per field per stream.

    (A plain class, as :class:`_Run` is: a dataclass is made by compiling its
    methods when the module is imported, which every command start pays.)
    """

    __slots__ = ("identifying", "report")

    def __init__(
        self, identifying: frozenset[str] = frozenset(), report: Callable[[str, str], None] = _ignore_report
    ) -> None:
        self.identifying = identifying
        self.report = report


_LENIENT = LineRules()


def identify(by_type: Mapping[str, Iterable[str]]) -> Mapping[str, frozenset[str]]:
    """An :attr:`EventDecoder.identifying` table: line type -> the dotted paths that identify such a line.

    Paths name nested fields with dots and every item of a list with ``*``
    (``message.content.*.id``); the key ``"*"`` applies to every line type.
    """
    return MappingProxyType({kind: frozenset(paths) for kind, paths in by_type.items()})


class Fields:
    """Liberal, typed access to one dialect object (and, through :meth:`sub`, the objects inside it).

    Be liberal in what you read: any JSON number is accepted where a number is
    meant (a number with a fraction where an integer was documented is rounded
    to the nearest integer; a string holding a number, such as ``"12"`` or
    ``"0.5"``, is read as that number), and a number where text is meant is read
    as its text (an id sent as ``5`` is ``"5"``). A field of another kind is lost, not the
    line: the getter returns its default (``""``, ``0``, ``False``, an empty
    object or list for the required getters, ``None`` for the ``opt_*`` ones)
    and the problem is reported through :class:`LineRules`. Only a field listed
    as *identifying* raises :class:`MalformedEventError` when it is missing or of
    the wrong kind. Unknown fields are never looked at.

    Required getters (``text``, ``integer`` …) are for documented fields that
    should always be there: a missing one is reported too. ``opt_*`` getters
    return ``None`` for a missing or null field without a word.
    """

    __slots__ = ("_parent", "_path", "_rules", "_where", "obj")

    def __init__(
        self,
        obj: dict[str, Any],
        where: str,
        parent: Fields | None = None,
        *,
        rules: LineRules | None = None,
        path: str | None = None,
    ) -> None:
        """``where`` names the object in messages; with ``parent``, it is the key that leads to it.

        ``rules`` default to the parent's (or, for a root object, to lenient rules that report nowhere);
        ``path`` is the dotted path from the line's root that identifying fields are matched against.
        """
        self.obj = obj
        self._where = where
        self._parent = parent
        if rules is None:
            rules = parent.rules if parent is not None else _LENIENT
        self._rules: LineRules = rules
        if path is None:
            path = "" if parent is None else parent.path_of(where)
        self._path = path

    @property
    def where(self) -> str:
        """The object's name in messages (a nested object's path is only spelt out when needed)."""
        parent = self._parent
        return self._where if parent is None else f"{parent.where}.{self._where}"

    @property
    def rules(self) -> LineRules:
        """What identifies the line this object belongs to, and where lost fields are reported."""
        return self._rules

    @property
    def path(self) -> str:
        """The dotted path of this object from the line's root (``""`` for the line itself)."""
        return self._path

    def path_of(self, key: str) -> str:
        """The dotted path of field ``key`` of this object, as :attr:`LineRules.identifying` spells it."""
        return f"{self._path}.{key}" if self._path else key

    def identifies(self, key: str) -> bool:
        """Whether field ``key`` is one the line cannot be decoded without."""
        return self.path_of(key) in self._rules.identifying

    def fail(self, problem: str) -> NoReturn:
        """Reject the whole line (only for what identifies it; everything else goes through :meth:`lose`)."""
        raise malformed(f"{self.where}: {problem}")

    def lose(self, key: str, problem: str) -> None:
        """Give up field ``key`` (``problem`` says why): report it, or fail the line when the field identifies it."""
        if self.identifies(key):
            self.fail(f"field '{key}' {problem}")
        self._rules.report(self.path_of(key), f"{self.where}: field '{key}' {problem}; the field was ignored")

    def child(self, obj: dict[str, Any], key: str) -> Fields:
        """An object found under ``key`` by the dialect's own means, read with this line's rules."""
        return Fields(obj, key, self)

    def _get(self, key: str, kind: str, coerce: Callable[[Any], Any], default: Any, required: bool) -> Any:
        """The careful path; each getter first tries the exact type on its own.

        ``coerce`` returns the value read liberally, or :data:`_WRONG` when it cannot be read as ``kind``.
        """
        value = self.obj.get(key)
        if value is None:
            if required:
                self.lose(key, f"is missing (expected {kind})")
            return default
        read = coerce(value)
        if read is _WRONG:
            self.lose(key, f"must be {kind}, not {kind_of(value)}")
            return default
        return read

    def text(self, key: str, default: str = "") -> str:
        value = self.obj.get(key)
        return value if type(value) is str else self._get(key, "a string", _as_str, default, True)

    def opt_text(self, key: str) -> str | None:
        value = self.obj.get(key)
        return (
            value if value is None or type(value) is str else self._get(key, "a string", _as_str, None, False)
        )

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.obj.get(key)
        return value if type(value) is bool else self._get(key, "a boolean", _as_bool, default, True)

    def opt_flag(self, key: str) -> bool | None:
        value = self.obj.get(key)
        return (
            value
            if value is None or type(value) is bool
            else self._get(key, "a boolean", _as_bool, None, False)
        )

    def integer(self, key: str, default: int = 0) -> int:
        value = self.obj.get(key)
        if type(value) is int and -_INT_LIMIT <= value < _INT_LIMIT:
            return value
        return self._get(key, "an integer", _as_int, default, True)

    def opt_integer(self, key: str) -> int | None:
        value = self.obj.get(key)
        if value is None or (type(value) is int and -_INT_LIMIT <= value < _INT_LIMIT):
            return value
        return self._get(key, "an integer", _as_int, None, False)

    def opt_number(self, key: str) -> float | int | None:
        return self._get(key, "a number", _as_number, None, False)

    def mapping(self, key: str) -> dict[str, Any]:
        value = self.obj.get(key)
        return value if type(value) is dict else self._get(key, "an object", _as_dict, {}, True)

    def opt_mapping(self, key: str) -> dict[str, Any] | None:
        value = self.obj.get(key)
        return (
            value
            if value is None or type(value) is dict
            else self._get(key, "an object", _as_dict, None, False)
        )

    def opt_strings(self, key: str) -> list[str] | None:
        """A list of strings (numbers read as their text); items of another kind are left out (and reported),
        not the list."""
        items = self.opt_list(key)
        if items is None or all(type(item) is str for item in items):
            return items
        texts = [_as_str(item) for item in items]
        if _WRONG in texts:
            self.lose(key, "must be a list of strings, not a list with other items in it")
        return [text for text in texts if text is not _WRONG]

    def opt_list(self, key: str) -> list[Any] | None:
        value = self.obj.get(key)
        return (
            value if value is None or type(value) is list else self._get(key, "a list", _as_list, None, False)
        )

    def opt_subs(self, key: str) -> list[Fields]:
        """The objects in the list under ``key`` (none when it is missing); other items are left out, reported."""
        items = self.opt_list(key) or []
        found = []
        for index, item in enumerate(items):
            if type(item) is dict:
                found.append(Fields(item, f"{key}[{index}]", self, path=self.path_of(key) + ".*"))
            else:
                self.lose(key, f"must hold objects, not {kind_of(item)} (item {index})")
        return found

    def sub(self, key: str) -> Fields:
        """The object under ``key`` (documented as always there), with messages that name the path to it.

        When it is lost, its fields read as missing without a word (the loss was reported once, for ``key``).
        """
        value = self.obj.get(key)
        if type(value) is dict:
            return Fields(value, key, self)
        return Fields(self.mapping(key), key, self, rules=_LENIENT, path=self.path_of(key))

    def opt_sub(self, key: str) -> Fields | None:
        value = self.opt_mapping(key)
        return None if value is None else Fields(value, key, self)

    def role(self, key: str, default: p.Role = "assistant") -> p.Role:
        return self.choice(key, _ROLE_NAMES, default)  # type: ignore[return-value]

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        """One of ``choices``; any other value is lost (``default``), or fails the line when it identifies it."""
        value = self.obj.get(key)
        if type(value) is str and value in choices:
            return value
        if type(value) is str:
            self.lose(key, f"must be one of {', '.join(choices)}, not {value!r}")
            return default
        return self._get(key, f"one of {', '.join(choices)}", _never, default, True)

    def ts(self, key: str) -> str | None:
        """A timestamp, leniently: an unreadable one is ignored rather than failing the line."""
        value = self.obj.get(key)
        return _iso_stamp(value) if type(value) is str else rfc3339(value)


_WRONG: Any = object()
"""What a ``coerce`` function of :meth:`Fields._get` returns for a value it cannot read."""
_ROLE_NAMES = tuple(sorted(ROLES))


def kind_of(value: object) -> str:
    """A parsed JSON value's kind, as messages about it name it (``"a string"``, ``"null"``…)."""
    if isinstance(value, float):
        return "a number" if math.isfinite(value) else "NaN" if math.isnan(value) else "an infinite number"
    return _KINDS.get(type(value), type(value).__name__)


_KINDS: dict[type, str] = {
    dict: "an object",
    list: "a list",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    type(None): "null",
}


def _never(value: object) -> Any:
    return _WRONG


def _as_str(value: object) -> Any:
    """A string, or a JSON number read as its text: some producers send ids (and, rarely, text) as numbers."""
    if isinstance(value, str):
        return value
    if type(value) is int:
        return str(value)
    if type(value) is float and math.isfinite(value):
        return repr(value)
    return _WRONG


def _as_bool(value: object) -> Any:
    return value if isinstance(value, bool) else _WRONG


def _as_number(value: object) -> Any:
    """Any finite JSON number in the 64-bit range, or a string that holds one."""
    if isinstance(value, str):
        try:
            value = float(value.strip()) if not _looks_int(value) else int(value.strip())
        except ValueError:
            return _WRONG
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _WRONG
    if not math.isfinite(value) or not -_INT_LIMIT <= value < _INT_LIMIT:
        return _WRONG
    return value


def _looks_int(text: str) -> bool:
    digits = text.strip().removeprefix("-").removeprefix("+")
    return digits.isascii() and digits.isdigit()


def _as_int(value: object) -> Any:
    """A number read liberally (see :func:`_as_number`), rounded to the nearest integer (half to even)."""
    number = _as_number(value)
    if number is _WRONG:
        return _WRONG
    rounded = number if isinstance(number, int) else round(number)
    return rounded if -_INT_LIMIT <= rounded < _INT_LIMIT else _WRONG


def _as_dict(value: object) -> Any:
    return value if isinstance(value, dict) else _WRONG


def _as_list(value: object) -> Any:
    return value if isinstance(value, list) else _WRONG


# -- JSON carried in strings -----------------------------------------------------


def parse_arguments(value: object, fields: Fields, key: str) -> tuple[dict[str, Any], str | None]:
    """Tool arguments sent as a JSON string (or already an object) as an object.

    Returns the arguments and, when the string was not a JSON object, what was
    wrong with it; the caller reports that, and the string is kept whole under
    :data:`RAW_ARGUMENTS_KEY` so nothing is lost.
    """
    if value is None:
        return {}, None
    if isinstance(value, dict):
        return value, None
    if not isinstance(value, str):
        fields.lose(key, f"must be a JSON string or an object, not {kind_of(value)}")
        return {}, None
    try:
        parsed = _json_decode(value)
    except msgspec.DecodeError:
        return {RAW_ARGUMENTS_KEY: value}, "are not valid JSON"
    if not isinstance(parsed, dict):
        return {RAW_ARGUMENTS_KEY: value}, "are not a JSON object"
    return parsed, None


def arguments_text(arguments: dict[str, Any]) -> str:
    """The inverse of :func:`parse_arguments`: compact JSON, or the raw string it kept."""
    raw = arguments.get(RAW_ARGUMENTS_KEY)
    if len(arguments) == 1 and isinstance(raw, str):
        return raw
    return _json_encode(arguments).decode()


def text_or_json(value: object) -> str:
    """A value for a canonical string field: strings as they are, anything else as compact JSON."""
    return value if isinstance(value, str) else _json_encode(value).decode()


def failure_text(event: p.ToolResult) -> str:
    """The one text a dialect has for a call that did not succeed: its error, then what it printed (a failed
    command's output often says why it failed), so that neither is lost; empty when it has neither."""
    return "\n".join(text for text in (event.error, event.output) if isinstance(text, str) and text)


def json_or_text(text: str) -> Any:
    """The inverse of :func:`text_or_json`: an object or array back as itself, any other string unchanged.

    Only text that re-encodes to exactly itself is parsed, so the round trip is exact.
    """
    if not text.startswith(("{", "[")):
        return text
    try:
        value = _json_decode(text)
    except msgspec.DecodeError:
        return text
    return value if _json_encode(value).decode() == text else text


def first_keys(mapping: dict[str, str]) -> dict[str, str]:
    """Invert a many-to-one table (dialect name -> canonical code), keeping the first name for each code."""
    inverse: dict[str, str] = {}
    for key, value in mapping.items():
        inverse.setdefault(value, key)
    return inverse


def encode_object(obj: dict[str, Any]) -> bytes:
    """One dialect line (no newline), keys in the order the dict was built."""
    return _json_encode(obj)


def event_data(event: p.BaseEvent) -> dict[str, Any]:
    """An event's own fields, without ``type`` and stamps (e.g. to carry it in a dialect's extension slot)."""
    return {k: v for k, v in msgspec.to_builtins(event).items() if k not in _NOT_DATA}


def as_generic(event: p.UnknownEvent) -> p.GenericEvent:
    """A line of a type the reader did not know, as the ``event`` named after its type that carries the line whole.

    ``wrap`` relays such a line in this form; an encoder writes it so too (through ``on_event``), so that the two
    agree. It keeps the line's own session and time, which the reader stamped into it.
    """
    return p.GenericEvent(name=event.type, data=event.raw, session_id=event.session_id, ts=event.ts)


def event_from_data(kind: str, data: object) -> p.Event | None:
    """The inverse of :func:`event_data`; ``None`` when ``data`` is not a valid ``kind`` event."""
    if not isinstance(data, dict) or kind not in p.EVENT_TYPES:
        return None
    try:
        return msgspec.convert({**data, "type": kind}, p.Event)
    except msgspec.ValidationError:
        return None


# -- tool pairing ------------------------------------------------------------------


_EDGES = frozenset({p.Start, p.Result, p.Error})
"""Events that open or end a turn or may be fatal: stamping them takes the checks; any other needs none."""


class ToolPairs:
    """Open tool calls by id, so a result can be paired by id (to find its name) or by name (to find its id).

    Calls are forgotten when their result arrives, so memory holds only the calls still running.
    """

    def __init__(self) -> None:
        self._open: dict[str, str] = {}

    def called(self, call_id: str | None, name: str) -> str:
        """Record a call; returns its id (a new one when the dialect gave none)."""
        call_id = call_id or p.new_id("call")
        self._open[call_id] = name
        return call_id

    def finished(self, call_id: str | None, name: str | None) -> tuple[str, str]:
        """The id and name of the call a result belongs to."""
        if call_id is None and name is not None:
            call_id = next((cid for cid, open_name in self._open.items() if open_name == name), None)
        if call_id is None:
            return p.new_id("call"), name or "unknown"
        known = self._open.pop(call_id, None)
        return call_id, name or known or "unknown"

    def unanswered(self) -> list[tuple[str, str]]:
        """The id and name of every call still waiting for its result, oldest first."""
        return list(self._open.items())


# -- decoding ------------------------------------------------------------------------


class _Run:
    """Chunks of one message or reasoning block whose complete event is still owed."""

    __slots__ = ("parts", "reasoning", "role", "run_id", "ts")

    def __init__(
        self,
        reasoning: bool,
        role: p.Role,
        run_id: str,
        ts: str | None = None,
        parts: list[str] | None = None,
    ) -> None:
        self.reasoning = reasoning
        self.role = role
        self.run_id = run_id
        self.ts = ts
        self.parts: list[str] = [] if parts is None else parts

    def delta(self, text: str) -> p.ReasoningDelta | p.MessageDelta:
        self.parts.append(text)
        if self.reasoning:
            return p.ReasoningDelta(reasoning_id=self.run_id, content=text)
        return p.MessageDelta(message_id=self.run_id, role=self.role, content=text)

    def complete(self, content: str | None = None) -> p.Reasoning | p.Message:
        """The complete event: the dialect's own ``content`` when it sent one, else the deltas joined."""
        text = "".join(self.parts) if content is None else content
        if self.reasoning:
            return p.Reasoning(reasoning_id=self.run_id, content=text)
        return p.Message(message_id=self.run_id, role=self.role, content=text)


UNDECODED: Final = object()
"""What :attr:`EventDecoder.typed_skim` returns for a line the typed decoder refused (the careful path reads it)."""


def _careful_if_long(decode: Callable[[bytes | bytearray], Any]) -> Callable[[bytes | bytearray], Any]:
    """The typed ``decode``, refusing a very long line: the careful path reads that one holding it once."""

    def typed_unless_long(line: bytes | bytearray) -> Any:
        if is_long(line):
            raise ValueError("a very long line")  # see DialectDecoder.decode_line
        return decode(line)

    return typed_unless_long


class EventDecoder(DialectDecoder):
    """A dialect decoder that routes each object to ``on_<type>(fields)``.

    Subclasses set :attr:`dialect` and :attr:`command` and define one handler per
    documented line type. Handlers validate through :class:`Fields` before they
    emit anything, so a malformed line leaves no half-decoded events behind.
    """

    dialect: ClassVar[str]
    command: ClassVar[str]
    """The ``start.command`` to use when the dialect's stream does not name one."""

    def __init__(self, session_id: str | None = None) -> None:
        super().__init__(session_id)
        self._session_fixed = session_id is not None
        self.started = False
        self.turn_ended = False
        """Whether the last event emitted was a ``result`` (a ``start`` may open another turn)."""
        self.tally = Tally()
        self.tools = ToolPairs()
        self.last_fatal: p.Error | None = None
        """The event just emitted, when it is a fatal error (its ``result`` must come next)."""
        self._run: _Run | None = None
        self._named: dict[tuple[bool, str], _Run] = {}
        self._routes: dict[str, tuple[Callable[[Fields], None], str]] = {}
        self._rules: dict[str, LineRules] = {}
        self._lost: list[tuple[tuple[str, str], str]] = []
        """Fields lost while decoding the current line, reported once it decoded (see :meth:`decode_object`)."""
        self._reported: set[tuple[str, str]] = set()
        self._ended = False
        self._clock = ""
        """The clock reading shared by the events of the lines being read (``""``: read it per event)."""
        self._after_failure = False
        """Whether the last line read failed: what it left queued goes out with the next line that decodes, as
        :meth:`decode_line` would return it."""
        self.line_ts: str | None = None
        """The time the current line carries, for its events that name none (a session log sets it per
        record); ``None``: such events are stamped with the time they are read."""

    # dispatch

    typed_lines: ClassVar[msgspec.json.Decoder[Any] | None] = None
    """A typed decoder for the dialect's most frequent lines (a tagged union of ``msgspec.Struct`` types that
    declare exactly the fields the handlers read, with exactly the types they take as they are), or ``None``.

    A line it decodes is handed to :meth:`decode_typed` without the dict, :class:`Fields` and per-field
    checks of the careful path, which is why long streams read fast. Any line it rejects (another type, a
    missing field, a number sent as a string …) takes the careful path, which reads it liberally or words
    the error, so the events are the same either way. A subclass that reads lines its own way (overrides
    ``decode_object`` or a handler) sets it back to ``None`` or gives its own.
    """

    def typed_ready(self) -> bool:
        """Whether the next line may take the typed path (a decoder holding lines back says no)."""
        return True

    typed_skim: ClassVar[Callable[..., tuple[int, Any]] | None] = None
    """A step that reads, from ``lines[index]`` on, the lines whose events need nothing but the commonest step
    of :meth:`decode_typed` (a delta of an open run, say), exactly as it would, and stops at the first other
    one: ``skim(decoder, lines, index, decode)`` returns that line's index and the line typed (or
    :data:`UNDECODED`: the typed decoder refused it; ``None`` with ``len(lines)``: none was left). ``None``:
    every line goes through :meth:`decode_typed`. Set by a dialect with a C twin of that step; a subclass that
    changes what it relies on sets it back to ``None``."""

    def decode_typed(self, line: Any) -> None:
        """Decode one line :attr:`typed_lines` read (emit its events as a handler would)."""
        raise NotImplementedError

    def decode_lines(
        self, lines: list[bytes | bytearray], start: int
    ) -> tuple[list[p.AnyEvent], int, BaseException | None]:
        typed = self.typed_lines
        if typed is None:
            return super().decode_lines(lines, start)
        self._clock = p.now_ts()  # one clock reading for the events of these lines
        decode: Callable[[bytes | bytearray], Any] = typed.decode
        if start < len(lines) and is_long(lines[start]):  # only a block's first line can be a LongLine
            decode = _careful_if_long(decode)
        try:
            return self._read_run(lines, start, decode)
        finally:
            self._clock = ""

    def _read_run(
        self, lines: list[bytes | bytearray], start: int, decode: Callable[[bytes | bytearray], Any]
    ) -> tuple[list[p.AnyEvent], int, BaseException | None]:
        """:meth:`decode_lines` with the typed decoder: typed lines in a tight loop, the others the careful way."""
        # the skim from the class: a partial read through an instance would be bound to it on Python 3.14
        decode_typed, ready, skim = self.decode_typed, self.typed_ready, type(self).typed_skim
        events: list[p.AnyEvent] = []
        typed_now = ready()  # what ready() says changes only with a line read the careful way
        index, count = start, len(lines)
        while index < count:
            if typed_now:
                if skim is not None:
                    skimmed, line = skim(self, lines, index, decode)
                    if skimmed > index:
                        self._after_failure = False
                        index = skimmed
                        if index == count:
                            break
                else:
                    try:
                        line = decode(lines[index])
                    except Exception:
                        line = UNDECODED  # not one of the common shapes: the careful path reads it or says why not
                if line is not UNDECODED:
                    try:
                        decode_typed(line)
                    except Exception as exc:  # a bug here must not end the reading: the line is reported
                        return events + self.drain(), index, exc
                    self._after_failure = False
                    index += 1
                    continue
            if self._out and not self._after_failure:  # the lines before this one: theirs go out first
                events += self.drain()
            try:
                decoded = self.decode_line(lines[index])
            except Exception as exc:  # a decoder failing on a line is that line's problem, not the reader's
                self._after_failure = True
                self._lost.clear()  # what the failed line lost is not reported (the next line may be typed)
                return events, index, exc
            if decoded is None:
                return events, index, None
            self._after_failure = False
            events += decoded
            typed_now = ready()
            index += 1
        events += self.drain()
        return events, count, None

    def decode_object(self, obj: dict[str, Any]) -> None:
        kind = obj.get("type")
        if not isinstance(kind, str):
            self.checked(self.decode_untyped, obj)
            return
        route = self._routes.get(kind) or self._route(kind)
        if route is None:
            self.pass_through(kind, obj)
            return
        self.checked(route[0], self.fields(obj, route[1], kind))

    def checked(self, decode: Callable[[Any], None], argument: Any) -> None:
        """Run one line's decoding and warn about the fields it lost (nothing is said for a rejected line).

        The warnings go out just before the line's first event (just after it, when that is ``start``),
        so that they stay inside the stream; fields lost after the line's last event are reported at its
        end, unless nothing may come between that event and the next (a ``result``, a fatal ``error``).
        """
        self._lost.clear()
        self._ended = False
        decode(argument)
        if self._lost and not self._ended and self.last_fatal is None:
            self._report_lost()
        self._lost.clear()

    def _route(self, kind: str) -> tuple[Callable[[Fields], None], str] | None:
        """The handler for ``kind`` and the name its errors give the line, looked up once per type."""
        name = self.handler_name(kind)
        handler = getattr(self, name, None) if name.isidentifier() else None
        if handler is None:
            return None  # not remembered: unknown types are open-ended
        route = self._routes[kind] = (handler, f"{self.dialect} '{kind}' line")
        return route

    # liberal reading

    identifying: ClassVar[Mapping[str, frozenset[str]]] = MappingProxyType({})
    """Per line type (build it with :func:`identify`), the dotted field paths (``*`` for every item of a list) a line cannot be decoded
    without; ``"*"`` applies to every line type. The line type's own discriminator (``type``) always
    identifies it. Any other field of the wrong kind loses only that field (see :class:`Fields`)."""

    def rules_kind(self, obj: dict[str, Any]) -> str:
        """The key of :attr:`identifying` that applies to ``obj``: its type, unless the dialect writes one type
        in two shapes and tells them apart."""
        kind = obj.get("type")
        return kind if isinstance(kind, str) else ""

    def identifying_paths(self, kind: str) -> frozenset[str]:
        """Everything that identifies a line of type ``kind`` (its ``type`` included)."""
        return self.identifying.get(kind, frozenset()) | self.identifying.get("*", frozenset()) | {"type"}

    def fields(self, obj: dict[str, Any], where: str, kind: str) -> Fields:
        """Liberal access to a line of type ``kind`` (``where`` names it in messages), lost fields reported."""
        rules = self._rules.get(kind)
        if rules is None:
            report = functools.partial(self._lose, kind)
            rules = self._rules[kind] = LineRules(self.identifying_paths(kind), report)
        return Fields(obj, where, rules=rules)

    def _lose(self, kind: str, key: str, message: str) -> None:
        self._lost.append(((kind, key), message))

    def _report_lost(self) -> None:
        """One ``log`` warning per field (line type and path) per stream; the first message stands for the rest."""
        lost, self._lost = self._lost, []
        for field_id, message in lost:
            if field_id not in self._reported:
                self._reported.add(field_id)
                self._stamp(p.Log(level="warn", message=message), None)

    def handler_name(self, kind: str) -> str:
        """The method that decodes lines of type ``kind``; dialects whose types are not identifiers map them."""
        return "on_" + kind

    def decode_untyped(self, obj: dict[str, Any]) -> None:
        """An object without a string ``type``; dialects with untyped lines override this."""
        self.fields(obj, f"{self.dialect} line", "").text("type")

    def pass_through(self, kind: str, obj: dict[str, Any]) -> None:
        """Keep a line of a type this decoder does not know, whole, as an unknown event (stamped, as the others
        are, with the line's own time when the dialect gives one)."""
        self.close_run()
        if self.line_ts is not None and "ts" not in obj:
            obj = {**obj, "ts": self.line_ts}
        self._out.append(p.UnknownEvent(type=kind, raw=obj))

    def adopt_session(self, session_id: str | None) -> None:
        """Use the dialect's own session id, unless the caller fixed one or events are already out."""
        if session_id and not self._session_fixed and self.sequencer.next_seq == 0:
            self.sequencer.session_id = session_id
            self.session_named = True

    # emitting

    def emit(self, event: p.Event, ts: str | None = None) -> None:
        """Queue a canonical event, first closing any open delta run with its complete event."""
        if self._run is not None:  # tested here: most events find none, and a call costs more than the test
            self.close_run()
        self._stamp(event, ts)

    def _stamp(self, event: p.Event, ts: str | None) -> None:
        kind = type(event)  # exact type checks: this runs for every event
        if ts is None:
            ts = self.line_ts
        if self.started and kind not in _EDGES and not self._lost:  # the common case, in short
            if kind is not p.MessageDelta and kind is not p.ReasoningDelta:  # open runs are in _named
                tally_add(self.tally, event)
            self.last_fatal = None
            self.turn_ended = False
            sequencer = self.sequencer  # Sequencer.stamp, inlined, with the reading's clock
            event.session_id = sequencer.session_id
            event.seq = sequencer.next_seq
            sequencer.next_seq += 1
            event.ts = ts or event.ts or self._clock or p.now_ts()
            self._out.append(event)
            return
        if self._lost and kind is not p.Start and self.last_fatal is None:
            self._report_lost()
        if kind is p.Result:
            self._ended = True
        if kind is p.Start:
            if self.started and not self.turn_ended:  # a start after a result opens the next turn
                event = p.GenericEvent(name="start", data=event_data(event))
            self.started = True
        elif not self.started:
            self.started = True
            super().emit(p.Start(command=self.command, synthetic=True), ts)
        tally_add(self.tally, event)
        self.last_fatal = event if isinstance(event, p.Error) and not event.recoverable else None
        self.turn_ended = kind is p.Result
        super().emit(event, ts)
        if self._lost and kind is p.Start:
            self._report_lost()

    def chunk(
        self, text: str, *, ts: str | None = None, role: p.Role = "assistant", reasoning: bool = False
    ) -> None:
        """Emit one delta of the current run (starting a run when none of this kind is open)."""
        run = self._run
        if run is not None and (run.reasoning != reasoning or run.role != role):
            self.close_run()
            run = None
        if run is None:
            run = self._run = _Run(reasoning, role, p.new_id("rsn" if reasoning else "msg"))
        run.ts = ts
        self._stamp(run.delta(text), ts)

    @property
    def run_open(self) -> bool:
        return self._run is not None

    def close_run(self) -> None:
        """Emit the complete message (or reasoning) that closes the open delta run, if any."""
        run, self._run = self._run, None
        if run is None:
            return
        self._stamp(run.complete(), run.ts)

    def delta(
        self,
        run_id: str,
        text: str,
        *,
        ts: str | None = None,
        role: p.Role = "assistant",
        reasoning: bool = False,
    ) -> None:
        """A delta of a run the dialect names and ends itself (several may be open at once).

        Unlike :meth:`chunk`, other events do not close it: :meth:`complete` does, or EOF.
        """
        key = (reasoning, run_id)
        run = self._named.get(key)
        if run is None:
            run = self._named[key] = _Run(reasoning, role, run_id)
        run.ts = ts
        event = run.delta(text)
        if not self.started or self._lost:
            self._stamp(event, ts)
            return
        # _stamp's common case, inlined: a delta is most lines of a partial-message stream (its run is in _named)
        self.last_fatal = None
        self.turn_ended = False
        sequencer = self.sequencer
        event.session_id = sequencer.session_id
        event.seq = sequencer.next_seq
        sequencer.next_seq += 1
        if ts is None:
            ts = self.line_ts
        event.ts = ts or self._clock or p.now_ts()
        self._out.append(event)

    def complete(
        self,
        run_id: str,
        content: str | None = None,
        *,
        ts: str | None = None,
        role: p.Role = "assistant",
        reasoning: bool = False,
    ) -> None:
        """Emit the complete ``message``/``reasoning`` of a named run (with no deltas before it, just the event).

        ``content`` is the dialect's own complete text; without it the deltas are joined.
        """
        run = self._named.pop((reasoning, run_id), None) or _Run(reasoning, role, run_id)
        self.emit(run.complete(content), ts)

    def run_is_open(self, run_id: str, *, reasoning: bool = False) -> bool:
        """Whether a named run has deltas out and its complete event still owed."""
        return (reasoning, run_id) in self._named

    def close_named_runs(self) -> None:
        """Close every named run the dialect never ended, with ``synthetic`` complete events."""
        runs, self._named = list(self._named.values()), {}
        for run in runs:
            event = run.complete()
            event.synthetic = True
            self.emit(event, run.ts)

    def close_open_calls(
        self, error: str, *, ts: str | None = None, status: p.ToolStatus = "cancelled"
    ) -> None:
        """Give every call the dialect left unanswered a ``synthetic`` result, so each call has one."""
        for call_id, name in self.tools.unanswered():
            self.tools.finished(call_id, name)
            result = p.ToolResult(call_id=call_id, name=name, status=status, error=error, synthetic=True)
            self.emit(result, ts)

    def finish(self) -> list[p.AnyEvent]:
        self.close_run()
        self.close_named_runs()
        return self.drain()

    # helpers for terminal events

    def emit_result(
        self,
        *,
        ok: bool,
        exit_code: int,
        ts: str | None = None,
        error: p.ErrorInfo | None = None,
        **fields: Any,
    ) -> None:
        """Emit the ``result``; tools used and usage come from the tally unless the dialect gave its own.

        With ``error``, the fatal ``error`` event that must precede a failed result is emitted first,
        unless the dialect's own error line was just decoded as that event.
        """
        if error is not None:
            if self.last_fatal is None:
                self.emit(
                    p.Error(code=error.code, message=error.message, recoverable=False, fix=error.fix), ts
                )
            fields["error"] = error
        fields.setdefault("subtype", "success" if ok else "error")
        fields.setdefault("tools_used", list(self.tally.tools_used))
        fields.setdefault("usage", self.tally.usage)
        self.emit(p.Result(ok=ok, exit_code=exit_code, **fields), ts)

    def fatal_info(self) -> p.ErrorInfo | None:
        """The error of the fatal ``error`` just emitted, for the ``result`` that follows it."""
        fatal = self.last_fatal
        if fatal is None:
            return None
        return p.ErrorInfo(code=fatal.code, message=fatal.message, fix=fatal.fix)

    def warn_arguments(self, fields: Fields, problem: str | None, ts: str | None) -> None:
        """Say, in the stream, that a tool's arguments were kept as a raw string."""
        if problem is not None:
            self.emit(
                p.Log(
                    level="warn",
                    message=f"{fields.where}: the arguments {problem}; kept as a string under "
                    f"'{RAW_ARGUMENTS_KEY}'",
                ),
                ts,
            )


# -- encoding ------------------------------------------------------------------------


class EventEncoder(DialectEncoder):
    """A dialect encoder that routes each canonical event to ``on_<type>(event) -> list[dict]``.

    Events without a handler are dropped (the dialect cannot carry them). A line
    of a type the reader did not know goes to ``on_event`` as the ``event`` that
    ``wrap`` relays it as (:func:`as_generic`), so a dialect that carries events
    keeps it. The dialect's own guarantees are kept here, for each turn of a
    session (docs/protocol.md): a ``start`` line comes first (made up from the
    turn's first event when the turn lacks one), the terminal line last, and
    :meth:`finish` writes a failed terminal when the stream ended inside a turn.
    After each ``result``, :meth:`end_turn` forgets the turn, and the next ``start``
    opens the next one, written as the dialect writes a turn of its own (anything
    else after a ``result`` is dropped, as the protocol has it). With
    :attr:`fold_fatal`, a fatal ``error`` is held until the next event: a
    ``result`` takes it (see :meth:`failure`), anything else releases it through
    ``on_error``.
    """

    fold_fatal: ClassVar[bool] = False

    def __init__(self) -> None:
        self.started = False
        """Whether a turn is open: its ``start`` is out and its ``result`` is not."""
        self.ended_a_turn = False
        """Whether a ``result`` went out: from then on only a ``start`` opens a turn (docs/protocol.md)."""
        self.session_id = ""
        self.tally = Tally()
        self.held_fatal: p.Error | None = None
        self._delta_ids: set[str] = set()
        self._id_stem: str | None = None
        self._made_up = 0
        self._handlers: dict[type[p.BaseEvent], Callable[[Any], list[dict[str, Any]]] | None] = {}

    def encode(self, event: p.AnyEvent) -> list[bytes]:
        kind = type(event)
        if (
            self.started
            and self.held_fatal is None
            and kind is not p.Error
            and kind is not p.Result
            and kind is not p.UnknownEvent
        ):
            return self._lines(event)  # type: ignore[arg-type]  # every other kind is an Event
        return self._edge(event)

    def _edge(self, event: p.AnyEvent) -> list[bytes]:
        """A turn's first event, errors, the result, unknown lines and whatever follows a held fatal error."""
        if isinstance(event, p.UnknownEvent):
            event = as_generic(event)
        lines: list[bytes] = []
        if not self.started:
            if self.ended_a_turn and not isinstance(event, p.Start):
                return []  # after a result only a start opens a turn; anything else breaks result-last
            self.started = True
            if not isinstance(event, p.Start):
                lines += self._lines(
                    p.Start(command="", session_id=event.session_id, ts=event.ts, synthetic=True)
                )
        if self.held_fatal is not None and not isinstance(event, p.Result):
            held, self.held_fatal = self.held_fatal, None
            lines += self._lines(held)
        if self.fold_fatal and isinstance(event, p.Error) and not event.recoverable:
            self.held_fatal = event
            return lines
        lines += self._lines(event)
        if isinstance(event, p.Result):
            self.started = False
            self.ended_a_turn = True
            self.end_turn()
        return lines

    def reproducible(self, seed: str) -> None:
        import hashlib

        self._id_stem = hashlib.sha256(seed.encode()).hexdigest()[:8]
        self._made_up = 0

    def made_up_id(self, prefix: str) -> str:
        """An id such as ``msg_…`` that a line needs and no event gives: random, or after :meth:`reproducible`
        the seed's stem and a count (the same length either way)."""
        if self._id_stem is None:
            return p.new_id(prefix)
        self._made_up += 1
        return f"{prefix}_{self._id_stem}{self._made_up:08x}"

    def end_turn(self) -> None:
        """Forget the turn whose ``result`` just went out, so that the next turn is written whole on its own.

        A dialect that keeps state of its own for a turn (usage summed for its terminal line, blocks left
        open) extends this; what lasts the whole session (line and item counters, a mode the decoder keeps
        for the session) stays.
        """
        self.held_fatal = None
        self.tally = Tally()
        self._delta_ids.clear()

    def _lines(self, event: p.Event) -> list[bytes]:
        self.session_id = event.session_id or self.session_id
        tally_add(self.tally, event)
        kind = type(event)
        handler = self._handlers[kind] if kind in self._handlers else self._handler(kind)
        if handler is None:
            return []
        return list(map(_json_encode, handler(event)))

    def _handler(self, kind: type[p.BaseEvent]) -> Callable[[Any], list[dict[str, Any]]] | None:
        """``on_<type>`` for an event class, looked up once per class."""
        tag = cast(str, kind.__struct_config__.tag)  # msgspec allows int tags; every event's is a str
        handler = self._handlers[kind] = getattr(self, "on_" + tag, None)
        return handler

    def finish(self) -> list[bytes]:
        """A whole failed ending when the stream ended inside a turn (nothing after a ``result``, or before
        anything)."""
        if not self.started:
            return []
        info = p.ErrorInfo(code=ErrorCode.NOT_FINISHED, message="the stream ended without a result")
        lines: list[bytes] = []
        for event in ending_events(self.tally, info, exit_code=ExitCode.ERROR):
            event.session_id = self.session_id
            lines += self.encode(event)
        return lines

    def failure(self, result: p.Result) -> p.ErrorInfo | None:
        """Why a failed run failed: the result's own error, else the fatal error held for it."""
        if result.error is not p.UNSET:
            return result.error
        held = self.held_fatal
        if held is not None:
            return p.ErrorInfo(code=held.code, message=held.message, fix=held.fix)
        return None

    def wrote_delta(self, block_id: str) -> None:
        """Remember that a delta of this message or reasoning block went out."""
        self._delta_ids.add(block_id)

    def closes_deltas(self, block_id: str) -> bool:
        """Whether deltas of this block went out (so its complete event must not repeat the text)."""
        if block_id in self._delta_ids:
            self._delta_ids.discard(block_id)
            return True
        return False


class SimpleDialect(Dialect):
    """A dialect whose decoder and encoder need nothing but the session id: name the two classes.

    A decode-only dialect (one agentstream reads but does not write, such as a CLI's session log)
    names no ``encoder_class`` and sets :attr:`~Dialect.can_encode` to ``False``: asking it for an
    encoder is then a :class:`~agentstream.errors.UsageError` that says what to write instead.
    """

    decoder_class: ClassVar[type[DialectDecoder]]
    encoder_class: ClassVar[type[DialectEncoder]]

    def decoder(self, session_id: str | None = None) -> DialectDecoder:
        return self.decoder_class(session_id)

    def encoder(self) -> DialectEncoder:
        self.check_writable()
        return self.encoder_class()
