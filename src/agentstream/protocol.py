"""Protocol v1: the canonical event model every part of agentstream speaks.

One JSON object per line. Every event carries ``type``, ``v``, ``session_id``,
``seq`` and ``ts``; the rest depends on ``type``. The classes here are msgspec
Structs in one tagged union (:data:`Event`), so one decoder turns a line into the
right class without a dispatch table, and :func:`json_schema` is derived from the
same definitions that the code uses.

Compatibility rules (see ``docs/protocol.md``): new fields always get defaults,
unknown fields are ignored, and an unknown ``type`` decodes to
:class:`UnknownEvent` instead of failing.
"""

# No ``from __future__ import annotations`` here: msgspec reads these classes' annotations when the
# decoders are built at import, and real objects cost it a fraction of what string annotations do
# (each one compiled and evaluated), which is a good part of every command's start-up.
import functools
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, Literal, TypeAlias, TypeVar, cast, get_args

import msgspec
from msgspec import UNSET, Struct, UnsetType

from agentstream._accel import speedups
from agentstream._lines import LongLine, NotSure, is_long, parse_long_line
from agentstream._version import PROTOCOL_VERSION as _PROTOCOL_VERSION

__all__ = [
    "EVENT_TYPES",
    "JSON_DECODER",
    "JSON_ENCODER",
    "PROTOCOL_VERSION",
    "UNSET",
    "AnyEvent",
    "BaseEvent",
    "Error",
    "ErrorInfo",
    "Event",
    "GenericEvent",
    "Heartbeat",
    "InputLine",
    "InputMessage",
    "InputSettings",
    "Interrupt",
    "Log",
    "Message",
    "MessageDelta",
    "NextAction",
    "PermissionDecision",
    "PermissionRequest",
    "Progress",
    "Reasoning",
    "ReasoningDelta",
    "Result",
    "Sequencer",
    "Start",
    "Status",
    "Step",
    "ToolCall",
    "ToolProgress",
    "ToolResult",
    "UnknownEvent",
    "UnsetType",
    "Usage",
    "UsageTotals",
    "are_timestamps",
    "decode",
    "decode_input",
    "decode_lines",
    "encode",
    "encode_line",
    "input_json_schema",
    "is_canonical_object",
    "is_timestamp",
    "json_schema",
    "new_id",
    "now_ts",
]

PROTOCOL_VERSION: Final = _PROTOCOL_VERSION
"""Bumped only by a change that an existing v1 consumer would misread (see docs/protocol.md)."""

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
ToolStatus: TypeAlias = Literal["success", "error", "denied", "cancelled"]
StepStatus: TypeAlias = Literal["started", "completed", "failed"]
LogLevel: TypeAlias = Literal["debug", "info", "warn", "error"]


class BaseEvent(Struct, tag_field="type", kw_only=True, gc=False):
    """Fields common to every event. The Stream stamps them; decoders fill them.

    Events are plain data, never part of a reference cycle, so the cycle collector does not track them
    (``gc=False``): a consumer holding a long session's events does not make every collection walk them.
    """

    v: int = PROTOCOL_VERSION
    session_id: str = ""
    seq: int = -1
    ts: str = ""
    synthetic: bool | UnsetType = UNSET
    """True on events that a consumer or wrapper made up (e.g. a result after a crash)."""

    @property
    def type(self) -> str:
        """The wire ``type`` of this event (its msgspec tag)."""
        return cast(str, self.__struct_config__.tag)  # msgspec allows int tags; every event's is a str


class Start(BaseEvent, tag="start", kw_only=True):
    """The first event of every stream, exactly once."""

    command: str
    cwd: str = ""
    model: str | UnsetType = UNSET
    provider: str | UnsetType = UNSET
    tools: list[str] = []
    parent_session_id: str | UnsetType = UNSET
    permission_mode: str | UnsetType = UNSET
    """What the producer's tools may do without asking, in its own words (``exec``: its ``--permission-mode``)."""


class Message(BaseEvent, tag="message", kw_only=True):
    """A complete message. Authoritative over any deltas with the same ``message_id``."""

    message_id: str
    role: Role
    content: str


class MessageDelta(BaseEvent, tag="message_delta", kw_only=True):
    """A preview chunk of a message; the ``message`` with the same id follows."""

    message_id: str
    role: Role = "assistant"
    content: str


class ReasoningDelta(BaseEvent, tag="reasoning_delta", kw_only=True):
    """A preview chunk of the model's reasoning; the ``reasoning`` with the same id follows."""

    reasoning_id: str
    content: str


class Reasoning(BaseEvent, tag="reasoning", kw_only=True):
    """The model's complete reasoning for one block."""

    reasoning_id: str
    content: str


class ToolCall(BaseEvent, tag="tool_call", kw_only=True):
    """The agent decided to call a tool; exactly one ``tool_result`` with the same id follows."""

    call_id: str
    name: str
    arguments: dict[str, Any] = {}


class ToolProgress(BaseEvent, tag="tool_progress", kw_only=True):
    """Output of a tool that is still running (e.g. a shell command's lines)."""

    call_id: str
    content: str


class ToolResult(BaseEvent, tag="tool_result", kw_only=True):
    """The outcome of one ``tool_call``."""

    call_id: str
    name: str
    status: ToolStatus
    output: str | UnsetType = UNSET
    error: str | UnsetType = UNSET
    duration_ms: int = 0
    truncated: bool | UnsetType = UNSET


class Step(BaseEvent, tag="step", kw_only=True):
    """A named unit of work started, completed or failed (pipeline steps, agent turns)."""

    name: str
    status: StepStatus
    duration_ms: int | UnsetType = UNSET
    error: str | UnsetType = UNSET


class Progress(BaseEvent, tag="progress", kw_only=True):
    """How far a named piece of work has come."""

    name: str
    percent: float | UnsetType = UNSET
    current: float | UnsetType = UNSET
    total: float | UnsetType = UNSET
    message: str | UnsetType = UNSET


class Log(BaseEvent, tag="log", kw_only=True):
    """A diagnostic line that belongs in the stream rather than on stderr."""

    level: LogLevel
    message: str


class Status(BaseEvent, tag="status", kw_only=True):
    """An informational state change; consumers need not act on it."""

    status: str
    message: str | UnsetType = UNSET


class GenericEvent(BaseEvent, tag="event", kw_only=True):
    """A named application event, published for fan-out visibility."""

    name: str
    data: Any = None


class Usage(BaseEvent, tag="usage", kw_only=True):
    """Tokens of one model call, emitted per call so that usage survives an interrupt."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | UnsetType = UNSET
    cache_write_tokens: int | UnsetType = UNSET
    """Of ``input_tokens``, those written to the provider's prompt cache (billed apart), when known."""


class Error(BaseEvent, tag="error", kw_only=True):
    """Something went wrong. A fatal one (``recoverable`` false) is immediately followed by ``result``."""

    code: str
    message: str
    recoverable: bool = False
    retry_in_ms: int | UnsetType = UNSET
    fix: str | UnsetType = UNSET
    details: Any = UNSET


class PermissionRequest(BaseEvent, tag="permission_request", kw_only=True):
    """The agent asks before running a tool call; the call's ``tool_result`` tells what was decided.

    Answered on the input side by a ``permission_decision`` naming the same
    ``call_id`` (or, in Claude's dialect, a ``control_response`` to ``request_id``).
    """

    call_id: str
    name: str
    arguments: dict[str, Any] = {}
    choices: list[str] = msgspec.field(default_factory=lambda: ["allow", "deny"])
    request_id: str | UnsetType = UNSET
    reason: str | UnsetType = UNSET
    timeout_ms: int | UnsetType = UNSET
    """How long the agent waits before it denies the call by itself."""


class Heartbeat(BaseEvent, tag="heartbeat", kw_only=True):
    """A sign of life from a producer that has had nothing else to say for a while."""

    waiting_on: str | UnsetType = UNSET
    """What it waits for: ``model``, ``tool`` or ``permission``."""


class UsageTotals(Struct, kw_only=True):
    """Token totals of a whole run, carried by ``result``."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | UnsetType = UNSET
    cache_write_tokens: int | UnsetType = UNSET

    def as_usage(self, model: str) -> Usage:
        """These figures as one ``usage`` event of ``model`` (a producer that reports only totals)."""
        return Usage(
            model=model,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cached_tokens=self.cached_tokens,
            reasoning_tokens=self.reasoning_tokens,
            cost_usd=self.cost_usd,
            cache_write_tokens=self.cache_write_tokens,
        )

    def add(self, usage: Usage) -> None:
        """Fold one model call's usage into the totals."""
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cached_tokens += usage.cached_tokens
        self.reasoning_tokens += usage.reasoning_tokens
        if usage.cache_write_tokens is not UNSET:
            written = 0 if self.cache_write_tokens is UNSET else self.cache_write_tokens
            self.cache_write_tokens = written + usage.cache_write_tokens
        if usage.cost_usd is not UNSET:
            base = 0.0 if self.cost_usd is UNSET else self.cost_usd
            self.cost_usd = round(base + usage.cost_usd, 10)


class ErrorInfo(Struct, kw_only=True):
    """Why a run failed, as carried by ``result.error``."""

    code: str
    message: str
    fix: str | UnsetType = UNSET


class NextAction(Struct, kw_only=True):
    """A command template a program can fill in and run next (HATEOAS)."""

    command: str
    description: str
    params: dict[str, Any] | UnsetType = UNSET


class Result(BaseEvent, tag="result", kw_only=True):
    """The last event of every stream, exactly once; ``exit_code`` equals the process's."""

    ok: bool
    subtype: str
    exit_code: int
    duration_ms: int = 0
    turn_count: int = 0
    tools_used: list[str] = []
    usage: UsageTotals = msgspec.field(default_factory=UsageTotals)
    result: str | UnsetType = UNSET
    error: ErrorInfo | UnsetType = UNSET
    command: str | UnsetType = UNSET
    next_actions: list[NextAction] = []


Event: TypeAlias = (
    Start
    | Message
    | MessageDelta
    | ReasoningDelta
    | Reasoning
    | ToolCall
    | ToolProgress
    | ToolResult
    | Step
    | Progress
    | Log
    | Status
    | GenericEvent
    | Usage
    | Error
    | PermissionRequest
    | Heartbeat
    | Result
)
"""Any v1 event, decoded by its ``type``."""

EVENT_CLASSES: Final[tuple[type[BaseEvent], ...]] = get_args(Event)
EVENT_TYPES: Final[frozenset[str]] = frozenset(cast(str, cls.__struct_config__.tag) for cls in EVENT_CLASSES)


class UnknownEvent(Struct, kw_only=True):
    """An event whose ``type`` this version does not know; the raw object is kept whole."""

    type: str
    raw: dict[str, Any]

    @property
    def seq(self) -> int:
        value = self.raw.get("seq")
        return value if isinstance(value, int) else -1

    @property
    def session_id(self) -> str:
        value = self.raw.get("session_id")
        return value if isinstance(value, str) else ""

    @property
    def synthetic(self) -> bool:
        return self.raw.get("synthetic") is True

    @property
    def ts(self) -> str:
        value = self.raw.get("ts")
        return value if isinstance(value, str) else ""

    @property
    def v(self) -> int:
        value = self.raw.get("v")
        return value if isinstance(value, int) else PROTOCOL_VERSION


AnyEvent: TypeAlias = Event | UnknownEvent
"""What a lenient reader yields: a known v1 event or an unknown one kept whole."""

JSON_ENCODER: Final = msgspec.json.Encoder()
"""The one shared untyped JSON encoder."""
JSON_DECODER: Final = msgspec.json.Decoder()
"""The one shared untyped JSON decoder."""
_decoder: msgspec.json.Decoder[Event] = msgspec.json.Decoder(Event)


def _event_of(value: Any) -> Event:
    try:
        return cast(Event, msgspec.convert(value, Event))
    except msgspec.ValidationError:
        raise NotSure from None  # an unknown type or a bad field: the usual path reads it, or words why not


def encode(event: AnyEvent) -> bytes:
    """Compact JSON for one event, without the newline."""
    if isinstance(event, UnknownEvent):
        raw = event.raw
        if raw.get("type") != event.type:  # a foreign object kept whole still says what it is
            raw = {"type": event.type, **{key: value for key, value in raw.items() if key != "type"}}
        return JSON_ENCODER.encode(raw)
    return JSON_ENCODER.encode(event)


def encode_line(event: AnyEvent) -> bytes:
    """One NDJSON line for an event."""
    return encode(event) + b"\n"


def decode(line: bytes | bytearray | memoryview | str) -> AnyEvent:
    """Decode one line into its event class.

    Raises :class:`agentstream.errors.MalformedEventError` when the line is not
    JSON, not an object, has no string ``type``, or a known type with bad fields.
    A very long :class:`~agentstream._lines.LongLine` is emptied when it decodes.
    """
    if type(line) is LongLine and is_long(line):  # the type first: no call for other lines
        try:
            return cast(Event, parse_long_line(line, _event_of))
        except NotSure:
            pass  # the line is whole again: the usual path reads it, or says what is wrong
    try:
        return _decoder.decode(line)
    except msgspec.ValidationError as exc:
        return _unknown_or_raise(line, exc)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        from agentstream.errors import MalformedEventError

        raise MalformedEventError(f"not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise _too_deep(exc) from exc


def decode_lines(data: bytes | bytearray) -> list[AnyEvent]:
    """Decode a buffer of whole NDJSON lines in one call (blank lines are skipped).

    Raises :class:`MalformedEventError` if any line is bad or of an unknown
    type; callers that must keep going fall back to :func:`decode` per line.
    """
    try:
        return cast("list[AnyEvent]", _decoder.decode_lines(data))  # a fresh list: widening it is safe
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        from agentstream.errors import MalformedEventError

        raise MalformedEventError(f"a line in the block is not a valid event: {exc}") from exc


def _too_deep(exc: RecursionError) -> Exception:
    from agentstream.errors import MalformedEventError

    return MalformedEventError(f"not valid JSON: nested too deeply to read ({exc})")


def _unknown_or_raise(
    line: bytes | bytearray | memoryview | str, exc: msgspec.ValidationError
) -> UnknownEvent:
    from agentstream.errors import MalformedEventError

    try:
        raw = JSON_DECODER.decode(line)
    except RecursionError as too_deep:
        raise _too_deep(too_deep) from too_deep
    except (msgspec.DecodeError, UnicodeDecodeError) as syntax_error:
        # The typed decoder can reject a line's shape before reaching its syntax error.
        raise MalformedEventError(f"not valid JSON: {syntax_error}") from syntax_error
    if not isinstance(raw, dict):
        raise MalformedEventError("an event must be a JSON object") from exc
    kind = raw.get("type")
    if not isinstance(kind, str):
        raise MalformedEventError("an event needs a string 'type' field") from exc
    if kind in EVENT_TYPES:
        raise MalformedEventError(f"bad '{kind}' event: {exc}") from exc
    return UnknownEvent(type=kind, raw=raw)


_STAMPS: Final = frozenset({"type", "v", "session_id", "seq", "ts"})


def _generated_schema(kind: Any) -> dict[str, Any]:
    """msgspec's JSON Schema of ``kind``, each class's docstring in it cleaned as ``inspect.cleandoc`` cleans it:
    the same text on every Python (from 3.13 the compiler strips a docstring's indentation itself)."""
    import inspect

    schema = msgspec.json.schema(kind)
    for definition in schema.get("$defs", {}).values():
        if isinstance(definition.get("description"), str):
            definition["description"] = inspect.cleandoc(definition["description"])
    return schema


def json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of one v1 event line."""
    schema = _generated_schema(Event)
    for name, definition in schema.get("$defs", {}).items():
        _state_the_wire(name, definition)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://agentstream.dev/schema/v1/event.json",
        "title": f"agentstream protocol v{PROTOCOL_VERSION} event",
        "description": "One line of an agentstream NDJSON stream. Unknown fields must be ignored.",
        **schema,
    }


def _state_the_wire(name: str, definition: dict[str, Any]) -> None:
    """Add to one event's generated schema what docs/protocol.md states of every line on the wire.

    The decoder is liberal on purpose (a producer's slip is reported by the
    validator, not a line lost), so these rules are not constraints on the
    Structs: they are written into the published schema here, and only here.
    """
    properties = definition.get("properties", {})
    if properties.keys() >= _STAMPS:
        # The stamps have defaults in code (a producer fills them), but every line on the wire carries them.
        definition["required"] = sorted({*definition.get("required", ()), *_STAMPS})
        properties["v"] = {"type": "integer", "const": PROTOCOL_VERSION}
        properties["session_id"] = {"type": "string"}
        properties["seq"] = {"type": "integer", "minimum": 0}
        # [0-9], not \d: a JSON Schema pattern is run by other regex engines, some of which take any digit
        ts_pattern = _TIMESTAMP.pattern.replace(r"\d", "[0-9]")
        properties["ts"] = {"type": "string", "format": "date-time", "pattern": f"^{ts_pattern}$"}
    if name == "Result":
        properties["exit_code"] = {"type": "integer", "minimum": 0, "maximum": 255}


# -- the input side (``--input-format stream-json``) ------------------------------------


class InputMessage(Struct, tag_field="type", tag="message", kw_only=True):
    """A user turn: the session runs it as a stream of its own once the turn before has ended."""

    role: Literal["user"]
    content: str | list[dict[str, Any]]
    """Text, or content blocks of which the ``text`` ones are read."""


class Interrupt(Struct, tag_field="type", tag="interrupt", kw_only=True):
    """Stop the running turn (model call and tool); its stream ends ``interrupted``, the session stays open."""


class PermissionDecision(Struct, tag_field="type", tag="permission_decision", kw_only=True):
    """The answer to a ``permission_request`` with the same ``call_id``."""

    call_id: str
    decision: Literal["allow", "deny"]
    message: str | UnsetType = UNSET
    """Why it was denied; the model reads it."""
    arguments: dict[str, Any] | UnsetType = UNSET
    """With ``allow``: run the tool with these arguments instead."""


class InputSettings(Struct, tag_field="type", tag="settings", kw_only=True):
    """Change the session's settings; they apply from the next model call or tool call on."""

    permission_mode: str | UnsetType = UNSET
    model: str | UnsetType = UNSET


InputLine: TypeAlias = InputMessage | Interrupt | PermissionDecision | InputSettings
"""One line a client writes to a two-way session's stdin."""

_input_decoder: msgspec.json.Decoder[InputLine] = msgspec.json.Decoder(InputLine)


def decode_input(line: bytes | str) -> InputLine:
    """Decode one input line. Raises ``msgspec.DecodeError`` / ``ValidationError`` saying what is wrong."""
    return _input_decoder.decode(line)


def input_json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of one line of a two-way session's input."""
    schema = _generated_schema(InputLine)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://agentstream.dev/schema/v1/input.json",
        "title": f"agentstream protocol v{PROTOCOL_VERSION} input line",
        "description": "One line written to the stdin of a two-way session (--input-format stream-json).",
        **schema,
    }


_TIMESTAMP = re.compile(
    r"\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])T(?:[01]\d|2[0-3]):[0-5]\d:(?:[0-5]\d|60)"
    r"(?:\.\d{1,9})?(?:[Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d)",
    re.ASCII,  # digits are 0-9 only: without it, \d also takes other scripts' digits, such as "٢٠٢٦"
)


def is_timestamp(value: object) -> bool:
    """Whether ``value`` is an RFC 3339 date-time, as ``ts`` must be."""
    return isinstance(value, str) and _TIMESTAMP.fullmatch(value) is not None


_TIMESTAMP_LINES = f"(?:{_TIMESTAMP.pattern}\n)*+{_TIMESTAMP.pattern}"
"""Timestamps one per line (a timestamp has no newline, so each line must be one); compiled on first use."""


def are_timestamps(values: Iterable[str]) -> bool:
    """Whether every string in ``values`` is a timestamp (:func:`is_timestamp`), checked for all at once.

    For a block of events, where a call per event would cost more than the check itself. The
    common case, every value of one shape, is settled by a byte comparison and a typed decode in
    C (:func:`_alike_and_in_range`); anything else by one regex call over all of them.
    """
    unique = set(values)
    if not unique:
        return True
    text = "\n".join(unique)
    if text.count("\n") != len(unique) - 1:
        return False  # a value holding a newline
    return _alike_and_in_range(text, len(unique)) or (
        re.fullmatch(_TIMESTAMP_LINES, text, re.ASCII) is not None
    )


def _events_timestamped(events: list[AnyEvent]) -> bool:
    return are_timestamps([event.ts for event in events])


events_timestamped: Callable[[list[AnyEvent]], bool] = (
    speedups.events_timestamped if speedups else _events_timestamped
)
"""Whether every event's ``ts`` is a timestamp: :func:`are_timestamps` of a block's events, in C where built."""


_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_COMMON_SHAPES = frozenset(
    b"0000-00-00T00:00:00" + fraction + zone
    for fraction in (b"", *(b"." + b"0" * digits for digits in range(1, 10)))
    for zone in (b"Z", b"z", b"+00:00", b"-00:00")
)
"""The shapes :data:`_TIMESTAMP` admits, digits written as 0: a value of one of them is a timestamp if in range."""


def _alike_and_in_range(text: str, count: int) -> bool:
    """Whether the ``count`` newline-separated values in ``text`` share one timestamp shape and are in range.

    True only for timestamps (msgspec's RFC 3339 reading of such a shape admits a subset of what
    :data:`_TIMESTAMP` does: a real date, seconds below 60); False says nothing, the regex decides.
    """
    try:
        data = text.encode()
    except UnicodeEncodeError:
        return False
    end = data.find(b"\n")
    shape = (data if end < 0 else data[:end]).translate(_DIGITS_TO_ZERO)
    if shape not in _COMMON_SHAPES or data.translate(_DIGITS_TO_ZERO) != b"\n".join([shape] * count):
        return False
    try:  # the shape check left no quote or backslash: the values are a JSON array of strings as written
        _datetimes_decoder().decode(b'["' + data.replace(b"\n", b'","') + b'"]')
    except msgspec.ValidationError:
        return False
    return True


@functools.cache
def _datetimes_decoder() -> msgspec.json.Decoder[list[Any]]:
    import datetime

    return msgspec.json.Decoder(list[datetime.datetime])


def is_canonical_object(obj: object) -> bool:
    """Whether a decoded line carries this protocol's stamps: what tells a canonical stream from other dialects."""
    return isinstance(obj, dict) and obj.get("v") == PROTOCOL_VERSION and "seq" in obj and "session_id" in obj


_IDS_PER_READ = 256
_random_ids: Iterator[str] = iter(())
"""The random parts of the next ids: 8 bytes of the system's randomness each, read for many at once (a read is
a system call, which cost more than the rest of reading a line where a dialect names none of its messages)."""


def new_id(prefix: str) -> str:
    """A short random id such as ``msg_3f9a0c1d2b4e5f60``."""
    global _random_ids
    random_part = next(
        _random_ids, None
    )  # a list iterator's next is atomic: no two threads get the same part
    if random_part is None:
        hexed = os.urandom(8 * _IDS_PER_READ).hex()
        _random_ids = iter([hexed[at : at + 16] for at in range(0, len(hexed), 16)])
        return new_id(prefix)
    return f"{prefix}_{random_part}"


def _forget_random_ids() -> None:
    """A forked child would otherwise make the ids its parent makes next."""
    global _random_ids
    _random_ids = iter(())


os.register_at_fork(after_in_child=_forget_random_ids)


_time_ns = time.time_ns  # one lookup on the hot path
_ts_second = -1
_ts_prefix = ""
_ts_milli = -1
_ts_text = ""


def _now_ts_py() -> str:
    """The current time as RFC 3339 UTC with milliseconds, cached per millisecond for the hot path."""
    global _ts_second, _ts_prefix, _ts_milli, _ts_text
    milli = _time_ns() // 1_000_000
    if milli == _ts_milli:
        return _ts_text
    second = milli // 1000
    if second != _ts_second:
        _ts_prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _ts_second = second
    _ts_milli = milli
    _ts_text = f"{_ts_prefix}.{milli % 1000:03d}Z"
    return _ts_text


now_ts: Callable[[], str] = speedups.now_ts if speedups else _now_ts_py
"""The current time as RFC 3339 UTC with milliseconds (one string object per millisecond): the producer
stamps every event with it."""


E = TypeVar("E", bound=BaseEvent)


class Sequencer:
    """Stamps events with one session's id, a contiguous ``seq`` and a timestamp.

    Not locked: a caller that stamps from several threads must hold its own lock
    around stamping and writing, so that line order and ``seq`` order agree.
    """

    __slots__ = ("next_seq", "session_id")  # read and written from C for every event a producer writes

    def __init__(self, session_id: str | None = None, next_seq: int = 0) -> None:
        self.session_id = session_id or new_id("ses")
        self.next_seq = next_seq

    def stamp(self, event: E, ts: str | None = None) -> E:
        """Stamp ``event`` in place and return it, typed as it came in."""
        event.session_id = self.session_id
        event.seq = self.next_seq
        event.ts = ts or event.ts or now_ts()
        self.next_seq += 1
        return event
