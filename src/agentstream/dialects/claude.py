"""Claude Code ``-p --output-format stream-json --verbose`` (and, through :mod:`.amp`, Amp's copy of it).

Lines: ``system`` (``init`` first unless startup hooks precede it; also
``api_retry``, ``status``, hook, task and other subtypes), ``assistant`` (one
line per completed content block — text, thinking, tool_use — all sharing the
API message id), ``user`` (prompts and ``tool_result`` blocks), ``stream_event``
(raw API stream events, only with ``--include-partial-messages``),
``rate_limit_event``, ``conversation_reset`` (after ``/clear``) and the closing
``result`` (with ``deferred_tool_use`` when a hook deferred a call). Control-protocol
frames and types this module does not know pass through as unknown events.

Producer quirks the decoder absorbs (see ``docs/dialects.md``): the complete
``assistant`` line repeats text already streamed as deltas (it closes the run
instead of adding to it); per-line ``output_tokens`` are placeholders (usage of
a streamed message is taken from its ``message_delta``, the result's totals win);
``subtype: "success"`` with ``is_error: true`` is a failure; the ``result`` key
is missing after an interrupt; startup hook lines may precede ``init``.
"""

# No ``from __future__ import annotations``: the typed lines' annotations stay real objects, which msgspec
# reads at import far faster than strings (see the note in agentstream.protocol).
import functools
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, ClassVar, Final, Literal, NamedTuple, cast

import msgspec

from agentstream import protocol as p
from agentstream._accel import speedups
from agentstream._recent_ids import RecentIds
from agentstream.dialects.kit import (
    UNDECODED,
    EventDecoder,
    EventEncoder,
    Fields,
    SimpleDialect,
    failure_text,
    first_keys,
    identify,
    malformed,
    text_or_json,
)
from agentstream.errors import ErrorCode, ExitCode, MalformedEventError, code_from_wording
from agentstream.transcript import TALLY_KINDS, Tally, has_usage, tally_add

# Claude's ``error`` categories (assistant lines, api_retry); the first one per code is the one we write.
_CATEGORY_CODES: dict[str, str] = {
    "authentication_failed": ErrorCode.AUTH_EXPIRED,
    "oauth_org_not_allowed": ErrorCode.PERMISSION_DENIED,
    "rate_limit": ErrorCode.RATE_LIMITED,
    "server_error": ErrorCode.PROVIDER_ERROR,
    "overloaded": ErrorCode.PROVIDER_ERROR,
    "billing_error": ErrorCode.PROVIDER_ERROR,
    "model_not_found": ErrorCode.PROVIDER_ERROR,
    "invalid_request": ErrorCode.INVALID_INPUT,
    "max_output_tokens": ErrorCode.CONTEXT_LIMIT,
    "unknown": ErrorCode.UNKNOWN,
}
_CODE_CATEGORIES = first_keys(_CATEGORY_CODES)
_API_FAILURES = frozenset(
    {
        ErrorCode.AUTH_EXPIRED,
        ErrorCode.RATE_LIMITED,
        ErrorCode.PROVIDER_ERROR,
        ErrorCode.NETWORK_TIMEOUT,
        ErrorCode.CONTEXT_LIMIT,
    }
)
"""Why a turn ends that are a model call's failure: Claude Code reports each in an assistant line of its own."""
_DELTA_KINDS = {"text_delta": "text", "thinking_delta": "thinking"}
CLAUDE_PERMISSION_MODE_OF = {
    "full": "bypassPermissions",
    "workspace-write": "acceptEdits",
    "read-only": "default",
}
"""agentstream's own permission modes in Claude Code's words (Claude Code's own modes are kept as they are)."""
_STREAM_ERROR_CODES = {
    "rate_limit_error": ErrorCode.RATE_LIMITED,
    "overloaded_error": ErrorCode.PROVIDER_ERROR,
}
_ERROR_SUBTYPES = (
    "error_max_turns",
    "error_during_execution",
    "error_max_budget_usd",
    "error_max_structured_output_retries",
)
_TURN_TYPES = frozenset({"assistant", "user", "result", "stream_event"})
"""Line types that end the startup phase: anything else before ``init`` is held until it."""
_STARTUP_LIMIT = 256


def _host_state(obj: dict[str, Any]) -> bool:
    """A line on the SDK host's session state (``idle``, ``running`` …), which Claude Code writes between turns."""
    return obj.get("type") == "system" and obj.get("subtype") == "session_state_changed"


CLAUDE_CODE_LEVEL = "2.1.0"
"""The Claude Code version whose stream-json and control protocol agentstream speaks.

Written as ``claude_code_version`` in the ``init`` line (the Claude Agent SDK
reads it there and warns below 2.0.0) and printed by ``agentstream-claude
--version``. It names a protocol level, not a copy of Claude Code.
"""
_STAMP_KEYS = frozenset({"type", "subtype", "session_id", "uuid"})


class _Block(NamedTuple):
    """One content block, validated before anything is emitted for its line."""

    kind: str  # text, thinking, tool_use, tool_result or other
    text: str = ""
    call_id: str = ""
    name: str = ""
    arguments: dict[str, Any] = {}  # noqa: RUF012 -- a NamedTuple field, never mutated
    is_error: bool = False
    raw: dict[str, Any] = {}  # noqa: RUF012 -- a NamedTuple field, never mutated


def _block(f: Fields) -> _Block:
    kind = f.text("type")
    if kind == "text":
        return _Block("text", f.text("text"))
    if kind == "thinking":
        return _Block("thinking", f.text("thinking"))
    if kind in ("tool_use", "server_tool_use"):
        return _Block(
            "tool_use", call_id=f.text("id"), name=f.text("name"), arguments=f.opt_mapping("input") or {}
        )
    if kind == "mcp_tool_use":  # the API's MCP connector: named as Claude Code names MCP tools
        server, name = f.opt_text("server_name"), f.text("name")
        return _Block(
            "tool_use",
            call_id=f.text("id"),
            name=f"mcp__{server}__{name}" if server else name,
            arguments=f.opt_mapping("input") or {},
        )
    if f.opt_text("tool_use_id") is not None and (kind == "tool_result" or kind.endswith("_tool_result")):
        content = f.obj.get("content")
        if kind != "tool_result" and isinstance(content, dict):
            return _server_result(f, content)
        text = _result_text(f, content)
        return _Block(
            "tool_result", text, call_id=f.text("tool_use_id"), is_error=f.opt_flag("is_error") is True
        )
    return _Block("other", raw=f.obj)


def _server_result(f: Fields, content: dict[str, Any]) -> _Block:
    """A server tool's result (``advisor_tool_result``, ``web_fetch_tool_result`` …) whose content is one object.

    The API gives such a tool's outcome as an object of the tool's own ``type``: its ``text`` is the output when it
    has one (the advisor's advice), else the object is kept whole as compact JSON. A ``*_error`` type
    (``advisor_tool_result_error``, ``web_search_tool_result_error`` …) is a failed call.
    """
    text, kind = content.get("text"), content.get("type")
    failed = (isinstance(kind, str) and kind.endswith("_error")) or f.opt_flag("is_error") is True
    output = text if isinstance(text, str) else text_or_json(content)
    return _Block("tool_result", output, call_id=f.text("tool_use_id"), is_error=failed)


def _blocks(message: Fields) -> list[_Block]:
    content = message.obj.get("content")
    if isinstance(content, str):
        return [_Block("text", content)]
    if not isinstance(content, list):
        message.fail("field 'content' must be a list of content blocks or a string")
    return [_block(block) for block in message.opt_subs("content")]


def _result_text(f: Fields, content: object) -> str:
    """A tool result's ``content`` (a string or a list of blocks) as text; non-text blocks become a marker."""
    if content is not None and not isinstance(content, (str, list)):
        f.lose("content", "must be a string or a list of blocks")
        return ""
    return _joined(content)


def _joined(content: str | list[Any] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for item in content:
        if isinstance(item, dict) and isinstance(item.get("text"), str):
            parts.append(item["text"])
        elif isinstance(item, dict) and isinstance(item.get("url"), str):  # a search result: what it found
            title = item.get("title")
            parts.append(f"{title} <{item['url']}>" if isinstance(title, str) and title else item["url"])
        elif isinstance(item, dict) and isinstance(item.get("tool_name"), str):
            parts.append(item["tool_name"])  # a tool_reference (ToolSearch's answer): the tool it found
        elif isinstance(item, dict):
            parts.append(f"[{item.get('type', 'block')}]")
        else:
            parts.append(text_or_json(item))
    return "\n".join(parts)


def _count(f: Fields, key: str) -> int | None:
    """A token count, read as the kit reads any number ("12" is 12, 5.5 is 6); a negative one is lost too."""
    value = f.opt_integer(key)
    if value is not None and value < 0:
        f.lose(key, "must not be negative")
        return None
    return value


_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def _figures(usage: Fields | None) -> dict[str, int]:
    """The token counts of an API usage object that are present and readable (the others are lost, reported)."""
    if usage is None:
        return {}
    counts = {key: _count(usage, key) for key in _USAGE_KEYS}
    return {key: value for key, value in counts.items() if value is not None}


def _totals(figures: dict[str, int]) -> p.UsageTotals:
    """Canonical input counts every prompt token, the cache's reads and writes included."""
    cached, written = figures.get("cache_read_input_tokens", 0), figures.get("cache_creation_input_tokens")
    return p.UsageTotals(
        input_tokens=figures.get("input_tokens", 0) + (written or 0) + cached,
        output_tokens=figures.get("output_tokens", 0),
        cached_tokens=cached,
        cache_write_tokens=written or p.UNSET,  # Claude Code writes 0 when nothing was written
    )


def _api_usage(usage: p.UsageTotals | p.Usage) -> dict[str, int]:
    """The inverse of :func:`_totals`: the API's input counts neither cache reads nor writes."""
    cached = min(usage.cached_tokens, usage.input_tokens)
    written = (
        0
        if usage.cache_write_tokens is p.UNSET
        else min(usage.cache_write_tokens, usage.input_tokens - cached)
    )
    return {
        "input_tokens": usage.input_tokens - cached - written,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": cached,
        "output_tokens": usage.output_tokens,
    }


def _code_for_status(status: int) -> str:
    if status == 429:
        return ErrorCode.RATE_LIMITED
    if status == 401:
        return ErrorCode.AUTH_EXPIRED
    if status == 403:
        return ErrorCode.PERMISSION_DENIED
    return ErrorCode.PROVIDER_ERROR


_SYNTHETIC = "<synthetic>"
"""The model of the messages Claude Code makes up itself (API errors): no call, no usage."""


class _PendingUsage(NamedTuple):
    message_id: str
    model: str
    figures: dict[str, int]
    streamed: bool


class _BlockIds:
    """Canonical ids for the text and thinking blocks of Claude's API messages.

    The first text block of message ``M`` is message ``M``, later ones ``M#1``,
    ``M#2``…; likewise for thinking. A block that streamed deltas keeps the id
    it got at ``content_block_start``, and the complete ``assistant`` line for it
    takes that id back (blocks of one kind complete in the order they started).

    An id already given out is never given again, even when a later API message
    carries the same id (servers behind ``ANTHROPIC_BASE_URL`` that number every
    reply alike): its blocks go on from the next free number, so that each
    canonical message stays one message.
    """

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] = {}
        self._waiting: dict[tuple[str, str], deque[str]] = {}
        self._given: RecentIds[tuple[str, str]] = RecentIds()
        """Every (block id, kind) given out, kept past :meth:`forget` (the reader's pairing keeps as many)."""

    def new(self, message_id: str, kind: str) -> str:
        key = (message_id, kind)
        index = self._counts.get(key, 0)
        block_id = message_id if index == 0 else f"{message_id}#{index}"
        given = self._given
        while (block_id, kind) in given:
            index += 1
            block_id = f"{message_id}#{index}"
        self._counts[key] = index + 1
        given.add((block_id, kind))
        return block_id

    def streamed(self, message_id: str, kind: str) -> str:
        block_id = self.new(message_id, kind)
        self._waiting.setdefault((message_id, kind), deque()).append(block_id)
        return block_id

    def take(self, message_id: str, kind: str) -> str:
        waiting = self._waiting.get((message_id, kind))
        if not waiting:
            return self.new(message_id, kind)
        block_id = waiting.popleft()
        if not waiting:
            del self._waiting[(message_id, kind)]
        return block_id

    def forget(self) -> None:
        """At a turn boundary every earlier message is complete."""
        self._counts.clear()
        self._waiting.clear()


_MESSAGE_IDENTITY = frozenset(
    {"message", "message.id", "message.content", "message.content.*", "message.content.*.type"}
    | {"message.content.*.id", "message.content.*.name", "message.content.*.tool_use_id"}
)
_STREAM_IDENTITY = frozenset(
    {"event", "event.type", "event.index", "event.message", "event.message.id"}
    | {"event.content_block", "event.content_block.type", "event.content_block.text"}
    | {"event.content_block.thinking", "event.delta", "event.delta.type", "event.delta.text"}
    | {"event.delta.thinking"}
)


# -- the common lines, typed ------------------------------------------------------------
# The shapes of the lines Claude Code writes most, closed: every field such a line carries is declared, the
# ones the handlers read with exactly the types they take as they are, the others as ``Any`` (decoded and so
# checked as the careful path's JSON parser checks them: UTF-8, number range). A line that decodes into these
# is one the careful path reads without losing, coercing or rejecting anything, so both give the same
# events; a line with any other field, type or value takes the careful path.

_Index = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class _Typed(msgspec.Struct, tag_field="type", forbid_unknown_fields=True):
    """A line or nested object of a known ``type``."""


class _Closed(msgspec.Struct, forbid_unknown_fields=True):
    """A nested object without a ``type`` of its own."""


class _TextDelta(_Typed, tag="text_delta"):
    text: str


class _ThinkingDelta(_Typed, tag="thinking_delta"):
    thinking: str


class _QuietDelta(_Typed, tag="input_json_delta"):
    """Tool input streamed as JSON: the complete ``assistant`` line carries it whole."""

    partial_json: Any = None


class _SignatureDelta(_Typed, tag="signature_delta"):
    """A thinking block's signature: not carried."""

    signature: Any = None


class _BlockDelta(_Typed, tag="content_block_delta"):
    index: _Index
    delta: _TextDelta | _ThinkingDelta | _QuietDelta | _SignatureDelta


class _BlockStop(_Typed, tag="content_block_stop"):
    index: Any = None


class _TextStart(_Typed, tag="text"):
    text: str | None = None
    citations: Any = None


class _ThinkingStart(_Typed, tag="thinking"):
    thinking: str | None = None
    signature: Any = None


class _ToolUseStart(_Typed, tag="tool_use"):
    id: Any = None
    name: Any = None
    input: Any = None
    caller: Any = None


class _BlockStart(_Typed, tag="content_block_start"):
    index: _Index
    content_block: _TextStart | _ThinkingStart | _ToolUseStart


_Count = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]


class _Usage(_Closed):
    """An API usage object whose token counts are plain and non-negative: any other count is read liberally
    (and reported) on the careful path."""

    input_tokens: _Count | None = None
    output_tokens: _Count | None = None
    cache_creation_input_tokens: _Count | None = None
    cache_read_input_tokens: _Count | None = None
    cache_creation: Any = None
    server_tool_use: Any = None
    service_tier: Any = None
    output_tokens_details: Any = None
    inference_geo: Any = None
    iterations: Any = None
    speed: Any = None
    fallback_credit: Any = None


def _typed_figures(usage: _Usage | None) -> dict[str, int]:
    """:func:`_figures` of a usage object the typed path read (its counts are already plain, non-negative)."""
    if usage is None:
        return {}
    return {key: getattr(usage, key) for key in _USAGE_KEYS if getattr(usage, key) is not None}


class _MessageFields(_Closed, kw_only=True):
    """What an API message object carries besides its content."""

    id: str | None = None
    model: str | None = None
    usage: _Usage | None = None
    type: Any = None
    role: Any = None
    stop_reason: Any = None
    stop_sequence: Any = None
    container: Any = None
    context_management: Any = None
    diagnostics: Any = None
    stop_details: Any = None


class _StartedMessage(_MessageFields, kw_only=True):
    content: Any = None  # empty at message_start: blocks come as their own events


class _MessageStart(_Typed, tag="message_start"):
    message: _StartedMessage


class _MessageDelta(_Typed, tag="message_delta"):
    usage: _Usage | None = None
    delta: Any = None
    context_management: Any = None


class _MessageStop(_Typed, tag="message_stop"):
    pass


class _StreamLine(_Typed, tag="stream_event"):
    event: _BlockDelta | _BlockStop | _BlockStart | _MessageStart | _MessageDelta | _MessageStop
    session_id: Any = None
    parent_tool_use_id: Any = None
    uuid: Any = None
    ttft_ms: Any = None
    api_message_id: Any = None
    thinking_display: Any = None


class _TextBlock(_Typed, tag="text"):
    text: str
    citations: Any = None


class _ThinkingBlock(_Typed, tag="thinking"):
    thinking: str
    signature: Any = None


class _ToolUseBlock(_Typed, tag="tool_use"):
    id: str
    name: str
    input: dict[str, Any] | None = None
    caller: Any = None


class _ToolResultBlock(_Typed, tag="tool_result"):
    tool_use_id: str
    content: str | list[Any] | None = None
    is_error: bool | None = None


_TypedBlock = _TextBlock | _ThinkingBlock | _ToolUseBlock | _ToolResultBlock


class _ApiMessage(_MessageFields, kw_only=True):
    content: str | list[_TypedBlock]


class _UserMessage(_Closed):
    content: str | list[_TypedBlock]
    role: Any = None


class _AssistantLine(_Typed, tag="assistant"):
    message: _ApiMessage
    error: Any = None
    session_id: Any = None
    parent_tool_use_id: Any = None
    uuid: Any = None
    is_api_error_message: Any = None
    request_id: Any = None
    timestamp: Any = None
    thinking_display: Any = None
    thinking_duration_ms: Any = None


class _UserLine(_Typed, tag="user"):
    message: _UserMessage
    uuid: str | None = None
    session_id: Any = None
    parent_tool_use_id: Any = None
    tool_use_result: Any = None
    timestamp: Any = None
    tool_result_meta: Any = None


class _SystemLine(_Typed, tag="system"):
    """The system lines Claude Code writes most: the session's status (``requesting`` before each model call) and,
    since 2.1.332, its estimate of the thinking so far before each thinking delta. Fields a line leaves out stay
    ``UNSET``, so that an event's data holds what the line holds."""

    subtype: Literal["status", "thinking_tokens"]
    estimated_tokens: Any = msgspec.UNSET
    estimated_tokens_delta: Any = msgspec.UNSET
    status: str | msgspec.UnsetType | None = msgspec.UNSET
    message: str | msgspec.UnsetType | None = msgspec.UNSET
    session_id: Any = None
    uuid: Any = None

    def data(self) -> dict[str, Any]:
        """What the careful path keeps as an event's data: every field the line has but its stamps."""
        return {
            key: value
            for key in ("estimated_tokens", "estimated_tokens_delta", "status", "message")
            if (value := getattr(self, key)) is not msgspec.UNSET
        }


_THINKING_TOKENS: Final = "claude.system.thinking_tokens"
"""The event a ``thinking_tokens`` system line gives."""

_TYPED_LINES = msgspec.json.Decoder(_StreamLine | _AssistantLine | _UserLine | _SystemLine)

_SKIMMED_STEPS = (
    *("decode_typed", "typed_ready", "_stream_delta", "_stream_blocks", "delta", "emit", "_stamp"),
    *("_block_stop", "run_is_open", "_message_stop"),
)
"""What ``claude_skim`` does in C in their stead: a subclass changing one of them skims nothing."""
_SKIM: Final = (
    functools.partial(
        speedups.claude_skim,
        (
            *(_StreamLine, _BlockDelta, _TextDelta, _ThinkingDelta, _QuietDelta, _SignatureDelta),
            *(p.MessageDelta, p.ReasoningDelta, p, UNDECODED, "text", "thinking"),
            *(p.GenericEvent, _THINKING_TOKENS, p.Status),
        ),
    )
    if speedups
    else None
)


def _typed_block(block: _TypedBlock) -> _Block:
    kind = type(block)
    if kind is _TextBlock:
        return _Block("text", block.text)  # type: ignore[union-attr]
    if kind is _ThinkingBlock:
        return _Block("thinking", block.thinking)  # type: ignore[union-attr]
    if kind is _ToolUseBlock:
        return _Block("tool_use", call_id=block.id, name=block.name, arguments=block.input or {})  # type: ignore[union-attr]
    assert isinstance(block, _ToolResultBlock)
    return _Block(
        "tool_result", _joined(block.content), call_id=block.tool_use_id, is_error=block.is_error is True
    )


def _typed_blocks(content: str | list[_TypedBlock]) -> list[_Block]:
    return [_Block("text", content)] if isinstance(content, str) else [_typed_block(b) for b in content]


class ClaudeDecoder(EventDecoder):
    dialect = "claude"
    command = "claude"
    identifying = identify(
        {
            "system": frozenset({"subtype"}),
            "assistant": _MESSAGE_IDENTITY,
            "user": _MESSAGE_IDENTITY,
            # a delta line is nothing but its block index and text
            "stream_event": _STREAM_IDENTITY,
            "result": frozenset({"subtype", "is_error"}),  # together they say whether the run failed
        }
    )

    def __init__(self, session_id: str | None = None) -> None:
        super().__init__(session_id)
        self._startup: list[dict[str, Any]] | None = []
        self._between: list[dict[str, Any]] = []
        """The host's session state lines (``session_state_changed``) after a turn's result, held for the next
        turn: Claude Code writes the session's ``running`` before that turn's ``init``."""
        self._ids = _BlockIds()
        self._streams: dict[str, dict[int, tuple[str, str]]] = {}
        """Messages being streamed: content block index -> (kind, canonical id)."""
        self._current: str | None = None
        self._usage: _PendingUsage | None = None
        self._usage_done: set[str] = set()
        """Messages whose usage went out; their later lines repeat it (or carry placeholders)."""
        self._calls_after_usage: list[_Block] = []
        """Tool calls of a streamed message, held until its usage goes out at its ``message_delta``."""
        self._api_error: str | None = None
        """The category of the turn's last API-error assistant line (``authentication_failed`` …)."""
        self._api_error_text: str | None = None
        self._answered: set[str] = set()
        """Calls whose result went out this turn: a deferred call among them gets no second ``tool_call``."""
        self._stopped: set[str] = set()
        """Streamed blocks closed at their ``content_block_stop`` (no ``assistant`` line came before it)."""
        self._running: tuple[str | None, p.UsageTotals | None, float | None] | None = None
        """The previous result's session, ``modelUsage`` summed and ``total_cost_usd`` (running totals)."""

    def decode_other(self, items: Any) -> list[p.AnyEvent] | None:
        """Also reads ``--output-format json --verbose``, which prints one array of every message (#84784)."""
        if not isinstance(items, list):
            return None
        if not all(isinstance(item, dict) for item in items):
            raise malformed(f"{self.dialect} JSON array: every element must be a message object")
        for item in items:
            self.decode_object(item)
        return self.drain()

    def decode_document(self, document: Any) -> list[p.AnyEvent] | None:
        """``claude -p --output-format json``: the ``result`` object alone, read as that line is when it opens a
        stream (see :meth:`_whole_run`), so that the compact and the pretty-printed output agree.

        ``--verbose`` makes the output an array of every message, read line by line as stream-json is.
        """
        if isinstance(document, list):
            if document and isinstance(document[-1], dict) and document[-1].get("type") == "result":
                return self.decode_other(document)
            return None
        if not isinstance(document, dict) or document.get("type") != "result":
            return None
        self.decode_object(document)
        return self.drain()

    def decode_object(self, obj: dict[str, Any]) -> None:
        held = self._startup
        if held is None:
            between = self._between
            if self.turn_ended and _host_state(obj) and len(between) < _STARTUP_LIMIT:
                between.append(obj)  # the host session's state after a turn: it opens no turn of its own
                return
            super().decode_object(obj)
            if between and not self.turn_ended:  # the next turn is open: they go out in it, after its start
                self._between = []
                self._replay(between)
            return
        kind = obj.get("type")
        is_init = kind == "system" and obj.get("subtype") == "init"
        if not is_init and not (isinstance(kind, str) and kind in _TURN_TYPES) and len(held) < _STARTUP_LIMIT:
            held.append(obj)
            return
        if is_init:
            super().decode_object(obj)  # when it is malformed, the startup lines stay held
            self._replay_startup()
        else:  # no init: the startup lines keep their place before this one
            own = next(
                (line["session_id"] for line in (*held, obj) if isinstance(line.get("session_id"), str)), None
            )
            self.adopt_session(own)  # every line names the session: the stream goes on under its real id
            self._replay_startup()
            super().decode_object(obj)

    def _replay_startup(self) -> None:
        held, self._startup = self._startup or [], None
        self._replay(held)

    def _replay(self, held: list[dict[str, Any]]) -> None:
        """Decode lines held for a turn's start; a bad one is reported in the stream, not raised for another line."""
        for obj in held:
            try:
                super().decode_object(obj)
            except MalformedEventError as exc:
                self.emit(p.Error(code=ErrorCode.MALFORMED_EVENT, message=exc.message, recoverable=True))

    def finish(self) -> list[p.AnyEvent]:
        self._between.clear()  # host-only state after the last turn (``idle``): the result said it ended
        self._replay_startup()
        self.close_named_runs()
        self._flush_usage()  # after what the call said, as everywhere
        self.close_open_calls("the stream ended before the tool's result")
        if self._api_error is not None and self.started and not self.turn_ended:
            # Claude Code may stop after an API error without its result (an authentication failure does):
            # that error, not a cut stream, is why the turn ended.
            text = self._api_error_text or f"API error: {self._api_error}"
            self.emit(
                p.Error(
                    code=_failure_code(None, self._api_error, None, text), message=text, recoverable=False
                )
            )
        return super().finish()

    # -- system --------------------------------------------------------------------

    def on_system(self, f: Fields) -> None:
        subtype = f.text("subtype")
        if subtype == "init":
            self._init(f)
        elif subtype == "api_retry":
            self._api_retry(f)
        elif subtype == "status":
            status, message = f.opt_text("status"), f.opt_text("message")
            self.emit(p.Status(status=status or "idle", message=message if message is not None else p.UNSET))
        elif subtype == "agentstream_event":
            self.emit(p.GenericEvent(name=f.text("name"), data=f.obj.get("data")))
        else:
            data = {key: value for key, value in f.obj.items() if key not in _STAMP_KEYS}
            self.emit(p.GenericEvent(name=f"claude.system.{subtype}", data=data))

    def _init(self, f: Fields) -> None:
        session_id, cwd, model = f.opt_text("session_id"), f.opt_text("cwd"), f.opt_text("model")
        tools, mode = f.opt_strings("tools") or [], f.opt_text("permissionMode")
        self._flush_usage()
        self.adopt_session(session_id)
        start = p.Start(command=self.command, cwd=cwd or "", model=model or p.UNSET, tools=tools)
        if mode is not None:
            start.permission_mode = mode
        self.emit(start)

    def _api_retry(self, f: Fields) -> None:
        attempt, limit = f.opt_integer("attempt"), f.opt_integer("max_retries")
        delay, status = f.opt_integer("retry_delay_ms"), f.opt_integer("error_status")
        category, message = f.obj.get("error"), f.opt_text("message")
        if isinstance(category, str) and category in _CATEGORY_CODES:
            code = _CATEGORY_CODES[category]
        else:
            code = _code_for_status(status) if status is not None else code_from_wording(message or "")
        if message is None:
            what = text_or_json(category) if category is not None else f"status {status}"
            message = f"API request failed ({what}); retry {attempt or '?'} of {limit or '?'}"
        details = {
            key: value
            for key, value in (("attempt", attempt), ("max_retries", limit), ("error_status", status))
            if value is not None
        }
        self.emit(
            p.Error(
                code=code,
                message=message,
                recoverable=True,
                retry_in_ms=delay if delay is not None else p.UNSET,
                details=details or p.UNSET,
            )
        )

    # -- messages ------------------------------------------------------------------

    def on_assistant(self, f: Fields) -> None:
        message = f.sub("message")
        blocks = _blocks(message)
        self._assistant(
            message.opt_text("id"),
            message.opt_text("model"),
            f.obj.get("error"),
            _figures(message.opt_sub("usage")),
            blocks,
            api_error=f.obj.get("is_api_error_message") is True,
        )

    def _assistant(
        self,
        message_id: str | None,
        model: str | None,
        error: object,
        figures: dict[str, int] | None,
        blocks: list[_Block],
        *,
        api_error: bool = False,
    ) -> None:
        """``api_error``: the line says it is Claude Code's report of a failed API call (as does a ``<synthetic>``
        one with an ``error`` category): its text is the turn's error, not the model's words, so no message."""
        message_id = message_id or p.new_id("msg")
        if isinstance(error, str):
            self._api_error = error
        if api_error or (model == _SYNTHETIC and isinstance(error, str)):
            self._api_error_text = next((block.text for block in blocks if block.kind == "text"), None)
            if not self.started:  # a turn it opens is a turn, not a lone result (``--output-format json``)
                self.emit(p.Start(command=self.command, synthetic=True))
            return
        self._note_usage(message_id, model, figures or {}, streamed=False)
        for block in blocks:
            self._assistant_block(message_id, block)

    def _assistant_block(self, message_id: str, block: _Block) -> None:
        if block.kind == "text" or block.kind == "thinking":
            reasoning = block.kind == "thinking"
            block_id = self._ids.take(message_id, block.kind)
            if block_id in self._stopped:  # closed at its content_block_stop, with the same text
                self._stopped.discard(block_id)
                return
            # Claude Code >= 2.1.211 writes a streamed thinking block's text only as deltas: the line's is empty.
            self.complete(block_id, block.text or None, reasoning=reasoning)
        elif block.kind == "tool_use":
            pending = self._usage
            if pending is not None and pending.message_id == message_id:
                if pending.streamed:
                    self._calls_after_usage.append(block)
                    return
                self._flush_usage()
            self._tool_call(block)
        elif block.kind == "tool_result":
            self._tool_result(block)
        else:
            self.emit(p.GenericEvent(name="claude.content_block", data=block.raw))

    def _tool_call(self, block: _Block) -> None:
        call_id = self.tools.called(block.call_id, block.name)
        self.emit(p.ToolCall(call_id=call_id, name=block.name, arguments=block.arguments))

    def _tool_result(self, block: _Block) -> None:
        call_id, name = self.tools.finished(block.call_id, None)
        self._answered.add(call_id)
        if block.is_error:
            # The result's permission_denials name such a call only after its result went out: read its words.
            status: p.ToolStatus = "denied" if block.text.startswith(_NOT_GRANTED) else "error"
            self.emit(p.ToolResult(call_id=call_id, name=name, status=status, error=block.text))
        else:
            self.emit(p.ToolResult(call_id=call_id, name=name, status="success", output=block.text))

    def on_user(self, f: Fields) -> None:
        message = f.sub("message")
        blocks = _blocks(message)
        self._user(f.opt_text("uuid"), blocks)

    def _user(self, user_id: str | None, blocks: list[_Block]) -> None:
        user_id = user_id or p.new_id("msg")
        self._end_of_turn()
        for block in blocks:
            if block.kind == "text":
                self.emit(
                    p.Message(message_id=self._ids.new(user_id, "user"), role="user", content=block.text)
                )
            elif block.kind == "other" and block.raw.get("type") == "image":
                continue  # prompt images are not carried (see docs/dialects.md)
            else:
                self._assistant_block(user_id, block)

    def _end_of_turn(self) -> None:
        """Before a user line or the result: every assistant message before it is complete, then its usage."""
        self.close_named_runs()
        self._flush_usage()
        self._ids.forget()
        self._streams.clear()
        self._usage_done.clear()
        self._stopped.clear()
        self._current = None

    # -- partial messages ------------------------------------------------------------

    def on_stream_event(self, f: Fields) -> None:
        raw = f.mapping("event")
        if raw.get("type") == "content_block_delta" and self._quick_delta(raw):
            return
        event = Fields(raw, "event", f)
        kind = event.text("type")
        if kind == "message_start":
            message = event.sub("message")
            self._message_start(
                message.opt_text("id"), message.opt_text("model"), _figures(message.opt_sub("usage"))
            )
        elif kind == "content_block_start":
            index, block = event.integer("index"), event.sub("content_block")
            block_kind = block.text("type")
            if block_kind in ("text", "thinking"):
                self._block_start(index, block_kind, None)  # registered before its text is checked
                initial = block.opt_text(block_kind)
                if initial:
                    self._stream_delta(index, block_kind, initial)
        elif kind == "content_block_delta":
            index, delta = event.integer("index"), event.sub("delta")
            delta_kind = delta.text("type")
            if delta_kind == "text_delta":
                self._stream_delta(index, "text", delta.text("text"))
            elif delta_kind == "thinking_delta":
                self._stream_delta(index, "thinking", delta.text("thinking"))
        elif kind == "content_block_stop":
            self._block_stop(raw.get("index"))
        elif kind == "message_delta":
            self._message_delta(_figures(event.opt_sub("usage")))
        elif kind == "message_stop":
            self._abandoned(f.opt_sub("abandoned_blocks"))
            self._message_stop()
        elif kind == "error":
            error = event.sub("error")
            code = _STREAM_ERROR_CODES.get(error.opt_text("type") or "", ErrorCode.PROVIDER_ERROR)
            self.emit(
                p.Error(code=code, message=error.opt_text("message") or "API stream error", recoverable=True)
            )

    def decode_typed(self, line: Any) -> None:
        """A line of :data:`_TYPED_LINES`: the same steps as the ``on_*`` handlers, without re-checking fields."""
        kind = type(line)
        if kind is _StreamLine:
            event = line.event
            kind = type(event)
            if kind is _BlockDelta:
                delta = event.delta
                if type(delta) is _TextDelta:
                    self._stream_delta(event.index, "text", delta.text)
                elif type(delta) is _ThinkingDelta:
                    self._stream_delta(event.index, "thinking", delta.thinking)
            elif kind is _BlockStop:
                self._block_stop(event.index)
            elif kind is _BlockStart:
                block = event.content_block
                if type(block) is _TextStart:
                    self._block_start(event.index, "text", block.text)
                elif type(block) is _ThinkingStart:
                    self._block_start(event.index, "thinking", block.thinking)
            elif kind is _MessageStart:
                message = event.message
                self._message_start(message.id, message.model, _typed_figures(message.usage))
            elif kind is _MessageDelta:
                self._message_delta(_typed_figures(event.usage))
            elif kind is _MessageStop:
                self._message_stop()
        elif kind is _AssistantLine:
            message = line.message
            blocks = _typed_blocks(message.content)
            figures = _typed_figures(message.usage)
            api_error = line.is_api_error_message is True
            self._assistant(message.id, message.model, line.error, figures, blocks, api_error=api_error)
        elif kind is _SystemLine:
            if line.subtype == "status":
                status, message = line.status, line.message
                text = message if isinstance(message, str) else p.UNSET
                self.emit(
                    p.Status(status=status if isinstance(status, str) and status else "idle", message=text)
                )
            else:
                self.emit(p.GenericEvent(name=_THINKING_TOKENS, data=line.data()))
        else:
            self._user(line.uuid, _typed_blocks(line.message.content))

    typed_lines: ClassVar[msgspec.json.Decoder[Any] | None] = _TYPED_LINES

    def typed_ready(self) -> bool:
        return self._startup is None and not self._between

    typed_skim = _SKIM
    """Text and thinking deltas of an open block's run, the tool input and signature deltas that give no event,
    and ``thinking_tokens`` system lines, read in C (``claude_skim`` in ``_speedups.c``, without msgspec for
    lines in the compact form Claude Code writes): :meth:`decode_typed`'s steps for them, inlined."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that reads or stamps deltas its own way does not skim past its steps."""
        super().__init_subclass__(**kwargs)
        if cls.typed_lines is not _TYPED_LINES or any(
            getattr(cls, name) is not getattr(ClaudeDecoder, name) for name in _SKIMMED_STEPS
        ):
            cls.typed_skim = None

    def _message_start(self, message_id: str | None, model: str | None, figures: dict[str, int]) -> None:
        message_id = message_id or p.new_id("msg")
        self._streams.setdefault(message_id, {})
        self._current = message_id
        self._note_usage(message_id, model, figures, streamed=True)

    def _block_start(self, index: int, kind: str, initial: str | None) -> None:
        blocks = self._stream_blocks()
        blocks[index] = (kind, self._ids.streamed(self._current or "", kind))
        if initial:
            self._stream_delta(index, kind, initial)

    def _block_stop(self, index: object) -> None:
        """A text or thinking block ends. Its ``assistant`` line comes before its stop, and closes its run: a run
        still open here gets none (Claude Code writes no thinking lines since 2.1.8), so it closes with its deltas.
        Should a line for it come later all the same, it is not repeated."""
        blocks = self._streams.get(self._current) if self._current is not None else None
        if blocks is None or type(index) is not int or index not in blocks:
            return
        kind, block_id = blocks.pop(index)
        if self.run_is_open(block_id, reasoning=kind == "thinking"):
            self.complete(block_id, reasoning=kind == "thinking")
            self._stopped.add(block_id)

    def _message_delta(self, figures: dict[str, int]) -> None:
        """A streamed message's usage is final here: Claude Code writes its ``message_stop`` only once a permission
        its tool call needs is answered, and the usage (and the tool calls held for it) should not wait for that.
        A message with a block still open (one an interrupt dropped) ends at its ``message_stop``."""
        pending, current = self._usage, self._current
        if pending is not None and pending.message_id == current:
            pending.figures.update(figures)
            if not self._streams.get(current):
                self._flush_usage()

    def _abandoned(self, abandoned: Fields | None) -> None:
        """``abandoned_blocks`` (on a ``message_stop`` line): Claude Code dropped the message's blocks from
        ``from_block_index`` on. A run of one still open (neither its line nor its stop came) was discarded: it
        closes with empty content, not with its deltas."""
        first = abandoned.opt_integer("from_block_index") if abandoned is not None else None
        blocks = self._streams.get(self._current) if self._current is not None else None
        if first is None or blocks is None:
            return
        for index, (kind, block_id) in list(blocks.items()):
            reasoning = kind == "thinking"
            if index >= first and self.run_is_open(block_id, reasoning=reasoning):
                self.complete(block_id, "", reasoning=reasoning)

    def _message_stop(self) -> None:
        if self._usage is not None and self._usage.message_id == self._current:
            self._flush_usage()
        self._streams.pop(self._current or "", None)
        self._current = None

    def _quick_delta(self, event: dict[str, Any]) -> bool:
        """The most frequent line of a partial-message stream, a well-formed text or thinking delta, read directly.

        Anything odd about it returns ``False`` for the checked path.
        """
        index, delta = event.get("index"), event.get("delta")
        if type(index) is not int or not isinstance(delta, dict):
            return False
        kind = _DELTA_KINDS.get(delta["type"]) if isinstance(delta.get("type"), str) else None
        if kind is None:
            return False
        text = delta.get(kind)
        if not isinstance(text, str):
            return False
        self._stream_delta(index, kind, text)
        return True

    def _stream_blocks(self) -> dict[int, tuple[str, str]]:
        if self._current is None:
            self._current = p.new_id("msg")
        return self._streams.setdefault(self._current, {})

    def _stream_delta(self, index: int, kind: str, text: str) -> None:
        current = self._current
        blocks = self._streams.get(current) if current is not None else None
        if blocks is None:
            blocks = self._stream_blocks()
        block = blocks.get(index)
        if block is None or block[0] != kind:  # no content_block_start seen for it (a cut stream)
            block = blocks[index] = (kind, self._ids.streamed(self._current or "", kind))
        if text:
            self.delta(block[1], text, reasoning=kind == "thinking")

    # -- usage -------------------------------------------------------------------------

    def _note_usage(
        self, message_id: str, model: str | None, figures: dict[str, int], *, streamed: bool
    ) -> None:
        """Keep one API message's usage until its figures are final (they grow line by line). A streamed message's
        lines carry placeholders, but the model they name is the call's (``message_start`` may name another)."""
        pending = self._usage
        if pending is not None and pending.message_id == message_id:
            if streamed or not pending.streamed:
                pending.figures.update(figures)
            elif model is not None and model != pending.model and model != _SYNTHETIC:
                self._usage = pending._replace(model=model)
            return
        if message_id in self._usage_done:
            return
        self._flush_usage()
        if (figures or streamed) and model != _SYNTHETIC:
            self._usage = _PendingUsage(message_id, model or "unknown", dict(figures), streamed)

    def _flush_usage(self) -> None:
        """The pending message's usage, then the tool calls held for it: a call's usage comes before its tool
        calls (as the agent emits them), so that a writer knows it when it writes them."""
        pending, self._usage = self._usage, None
        if pending is not None and pending.figures:
            self._usage_done.add(pending.message_id)
            self.emit(_totals(pending.figures).as_usage(pending.model))
        if self._calls_after_usage:
            calls, self._calls_after_usage = self._calls_after_usage, []
            for block in calls:
                self._tool_call(block)

    # -- the end -------------------------------------------------------------------------

    def on_rate_limit_event(self, f: Fields) -> None:
        self.emit(p.GenericEvent(name="claude.rate_limit", data=f.opt_mapping("rate_limit_info") or {}))

    def on_conversation_reset(self, f: Fields) -> None:
        """``/clear`` (or another reset) replaced the conversation mid-session; consumers summing totals need it."""
        self._running = None  # Claude Code's running totals start again
        data = {key: value for key, value in f.obj.items() if key not in _STAMP_KEYS}
        if f.opt_text("new_conversation_id") is None:  # of another kind: lost (and reported), not carried
            data.pop("new_conversation_id", None)
        self.emit(p.GenericEvent(name="claude.conversation_reset", data=data))

    def on_result(self, f: Fields) -> None:
        stray = (
            self.turn_ended
        )  # right after a result: a reader sets it aside, with nothing of its own before it
        is_error = f.opt_flag("is_error")
        subtype = f.opt_text("subtype") or ("error_during_execution" if is_error else "success")
        text, errors = f.opt_text("result"), f.opt_strings("errors") or []
        if not errors and (said := f.opt_text("error")):  # Amp names an error result's cause in ``error``
            errors = [said]
        status, reason = f.opt_integer("api_error_status"), f.opt_text("terminal_reason")
        cost = f.opt_number("total_cost_usd")
        cost = cost if cost is not None else f.opt_number("cost_usd")
        usage, turns = f.opt_sub("usage"), f.opt_integer("num_turns")
        figures, (per_model, model_extras) = _figures(usage), _model_usage(f)
        denied = _denied_calls(f)
        deferred, stop = f.opt_sub("deferred_tool_use"), f.opt_text("stop_reason")
        structured = f.obj.get("structured_output")
        ok = subtype == "success" and not is_error
        if not self.started:  # the result alone (``--output-format json``): it says what the run did
            self._whole_run(text if ok else None, figures, per_model)
        self._end_of_turn()
        if deferred is not None or _DEFERRED_REASON in (reason, stop):
            self._deferred_call(deferred)
        self._answered.clear()
        for call_id in denied:
            if any(call_id == open_id for open_id, _ in self.tools.unanswered()):
                call_id, name = self.tools.finished(call_id, None)
                self.emit(
                    p.ToolResult(
                        call_id=call_id, name=name, status="denied", error="permission denied", synthetic=True
                    )
                )
        self.close_open_calls("the run ended before the tool's result")
        canonical, exit_code, code = _outcome(subtype, ok, reason)
        error: p.ErrorInfo | None = None
        # On "success" with is_error the result text is the API's error; error subtypes list theirs in errors.
        message = (
            "; ".join(errors)
            or (text if subtype == "success" and is_error and text else "")
            or (self._api_error_text or "")
        )
        if structured is not None:
            self.emit(p.GenericEvent(name=_STRUCTURED_EVENT, data=structured))
        if model_extras and not stray:
            self.emit(p.GenericEvent(name=_MODEL_USAGE_EVENT, data=model_extras))
        if not ok:
            code = code or _failure_code(status, self._api_error, reason, message)
            ending = f"{self.dialect} ended with {subtype}" + (f" ({reason})" if reason else "")
            error = p.ErrorInfo(code=code, message=message or ending)
            self.emit(p.Error(code=error.code, message=error.message, recoverable=False))
        totals = self._turn_totals(
            f.opt_text("session_id"), figures if usage is not None else None, per_model, cost
        )
        self.emit(
            p.Result(
                ok=ok,
                subtype=canonical,
                exit_code=exit_code,
                duration_ms=f.opt_integer("duration_ms") or 0,
                turn_count=turns if turns is not None else self.tally.turn_count,
                tools_used=list(self.tally.tools_used),
                usage=totals,
                result=text if text is not None else p.UNSET,
                error=error if error is not None else p.UNSET,
            )
        )
        self._api_error = self._api_error_text = None  # the next turn's failure is its own

    def _whole_run(self, text: str | None, figures: dict[str, int], per_model: dict[str, p.Usage]) -> None:
        """What a result that opens the stream tells of the run before it: ``claude -p --output-format json``
        prints that object alone (compact or pretty-printed, read the same way).

        ``start`` (the model is the one with the most output), the answer as an assistant ``message`` (a
        failed run's text is its error), and one ``usage`` per model of ``modelUsage`` (else one from ``usage``).
        """
        models = list(per_model.values())
        main = max(models, key=lambda usage: usage.output_tokens, default=None)
        self.emit(p.Start(command=self.command, model=main.model if main is not None else p.UNSET))
        if text:
            self.emit(p.Message(message_id=p.new_id("msg"), role="assistant", content=text))
        if not models and figures:
            models = [_totals(figures).as_usage("unknown")]
        for usage in models:
            self.emit(usage)

    def _turn_totals(
        self,
        session: str | None,
        figures: dict[str, int] | None,
        per_model: dict[str, p.Usage],
        cost: float | None,
    ) -> p.UsageTotals:
        """The turn's totals, every figure of one scope: all models, this turn.

        ``usage`` counts the main model's calls of this turn only, while ``modelUsage`` (every model, subagents
        included) and ``total_cost_usd`` are the process's running totals: with stream-json input, one result
        per turn, each turn's share is what they grew by since the previous result of the same conversation (a
        figure that went down means the totals started again: it is the turn's own). Tokens come from
        ``modelUsage`` when it is there, else from ``usage``, else from the turn's ``usage`` events.

        A result without one of the running totals (or with one of another kind) says nothing of it: the last
        one known stays, so that the next result's share is still what it grew by since then.
        """
        running: p.UsageTotals | None = None
        if per_model:
            running = p.UsageTotals()
            for usage in per_model.values():
                running.add(msgspec.structs.replace(usage, cost_usd=p.UNSET))
        before = self._running if self._running is not None and self._running[0] == session else None
        earlier_tokens, earlier_cost = (before[1], before[2]) if before is not None else (None, None)
        self._running = (
            session,
            running if running is not None else earlier_tokens,
            cost if cost is not None else earlier_cost,
        )
        if running is not None:
            totals = _grown(running, earlier_tokens)
        elif figures is not None:
            totals = _totals(figures)
        else:
            totals = msgspec.structs.replace(self.tally.usage)
        if cost is not None:
            totals.cost_usd = (
                float(cost) if earlier_cost is None or cost < earlier_cost else round(cost - earlier_cost, 10)
            )
        return totals

    def _deferred_call(self, deferred: Fields | None) -> None:
        """The call a PreToolUse hook deferred: the run stopped before it, so that its caller decides.

        The caller answers by resuming the session, not in this stream: the call (its ``tool_call`` unless one
        went out) gets a ``permission_request`` and a ``cancelled`` result, after a ``claude.deferred_tool_use``
        event that keeps the fact (and lets the encoder write the line back). Without a readable
        ``deferred_tool_use`` (only the stop reason says so) the deferred call is the last one still open.
        """
        call_id = name = None
        arguments: dict[str, Any] | None = None
        if deferred is not None:
            call_id, name = deferred.opt_text("id"), deferred.opt_text("name")
            arguments = deferred.opt_mapping("input")
        running = dict(self.tools.unanswered())
        if call_id is None and running:
            call_id = next(reversed(running))
        if call_id is None and not name:
            return  # nothing names the call
        name = running.get(call_id or "") or name or "unknown"
        arguments = arguments if arguments is not None else {}
        if call_id is not None and call_id in self._answered:  # its result is out: only the fact is kept
            self.emit(
                p.GenericEvent(name=_DEFERRED_EVENT, data={"id": call_id, "name": name, "input": arguments})
            )
            return
        if call_id is None or call_id not in running:
            call_id = self.tools.called(call_id, name)
            self.emit(p.ToolCall(call_id=call_id, name=name, arguments=arguments))
        self.emit(
            p.GenericEvent(name=_DEFERRED_EVENT, data={"id": call_id, "name": name, "input": arguments})
        )
        self.emit(p.PermissionRequest(call_id=call_id, name=name, arguments=arguments, reason=_DEFERRED_ASK))
        call_id, name = self.tools.finished(call_id, None)
        self.emit(p.ToolResult(call_id=call_id, name=name, status="cancelled", error=_DEFERRED_END))


_NOT_GRANTED = "Claude requested permissions to use "
"""How the result Claude Code gives a call that was not allowed begins (``… but you haven't granted it yet.``)."""
_STRUCTURED_EVENT = "claude.structured_output"
"""The event that carries a result's ``structured_output`` (``--json-schema``): the result has no field for it."""
_MODEL_USAGE_EVENT = "claude.model_usage"
"""The event that carries what a result's ``modelUsage`` entries say besides their tokens and cost
(``contextWindow``, ``maxOutputTokens``, ``webSearchRequests`` …), by model: no canonical event has a field for it."""
_DEFERRED_REASON = "tool_deferred"
"""The ``terminal_reason`` (and ``stop_reason``) of a run a PreToolUse hook stopped by deferring a call."""
_DEFERRED_EVENT = "claude.deferred_tool_use"
_DEFERRED_ASK = "a PreToolUse hook deferred this call to the caller: resume the session to decide it"
_DEFERRED_END = "deferred by a PreToolUse hook: the run stopped before the call"


def _model_usage(f: Fields) -> tuple[dict[str, p.Usage], dict[str, dict[str, Any]]]:
    """``modelUsage`` (camelCase figures, each model's cost): one ``usage`` per model, counts read liberally; and
    each model's other keys, as they are."""
    per_model = f.opt_sub("modelUsage")
    if per_model is None:
        return {}, {}
    found, extras = {}, {}
    for model in list(per_model.obj):
        figures = per_model.opt_sub(model)
        if figures is None:
            continue
        counts = {
            api: value for camel, api in _MODEL_USAGE_KEYS if (value := _count(figures, camel)) is not None
        }
        usage = _totals(counts).as_usage(model)
        cost = figures.opt_number("costUSD")
        if cost is not None and cost >= 0:
            usage.cost_usd = float(cost)
        found[model] = usage
        other = {key: value for key, value in figures.obj.items() if key not in _MODEL_USAGE_FIGURES}
        if other:
            extras[model] = other
    return found, extras


_MODEL_USAGE_KEYS = (
    ("inputTokens", "input_tokens"),
    ("outputTokens", "output_tokens"),
    ("cacheReadInputTokens", "cache_read_input_tokens"),
    ("cacheCreationInputTokens", "cache_creation_input_tokens"),
)
_MODEL_USAGE_FIGURES = frozenset({camel for camel, _ in _MODEL_USAGE_KEYS} | {"costUSD"})
"""The keys of a ``modelUsage`` entry that canonical usage carries (the tokens and the cost)."""


def _written(totals: p.UsageTotals) -> int:
    return 0 if totals.cache_write_tokens is p.UNSET else totals.cache_write_tokens


def _grown(running: p.UsageTotals, before: p.UsageTotals | None) -> p.UsageTotals:
    """What running token totals grew by since ``before``; all of them when one went down (they started again)."""
    if before is None:
        return running
    written, earlier = _written(running), _written(before)
    pairs = (
        (running.input_tokens, before.input_tokens),
        (running.output_tokens, before.output_tokens),
        (running.cached_tokens, before.cached_tokens),
        (written, earlier),
    )
    if any(now < then for now, then in pairs):
        return running
    return p.UsageTotals(
        input_tokens=running.input_tokens - before.input_tokens,
        output_tokens=running.output_tokens - before.output_tokens,
        cached_tokens=running.cached_tokens - before.cached_tokens,
        cache_write_tokens=written - earlier if running.cache_write_tokens is not p.UNSET else p.UNSET,
    )


def _denied_calls(f: Fields) -> list[str]:
    return [
        item["tool_use_id"]
        for item in f.opt_list("permission_denials") or []
        if isinstance(item, dict) and isinstance(item.get("tool_use_id"), str)
    ]


def _outcome(subtype: str, ok: bool, reason: str | None) -> tuple[str, int, str]:
    """Canonical (subtype, exit code, error code or "" when the details decide it) of a Claude result."""
    if ok:
        return "success", ExitCode.OK, ""
    if reason is not None and reason.startswith("aborted"):
        return "interrupted", ExitCode.SIGINT, ErrorCode.INTERRUPTED
    if subtype == "error_max_turns" or reason == "max_turns":
        return "max_turns", ExitCode.MAX_TURNS, ErrorCode.MAX_TURNS
    if subtype == "error_max_budget_usd":
        return "max_budget_usd", ExitCode.ERROR, ErrorCode.MAX_BUDGET
    if subtype in ("success", "error_during_execution") or not subtype.startswith("error_"):
        return "error", ExitCode.ERROR, ""
    return subtype.removeprefix("error_"), ExitCode.ERROR, ""


def _failure_code(status: int | None, api_error: str | None, reason: str | None, message: str) -> str:
    if status is not None:
        return _code_for_status(status)
    if api_error in _CATEGORY_CODES:
        return _CATEGORY_CODES[api_error]
    if reason == "prompt_too_long":
        return ErrorCode.CONTEXT_LIMIT
    if "No conversation found" in message:
        return ErrorCode.SESSION_NOT_FOUND
    return code_from_wording(message)


# -- encoding ----------------------------------------------------------------------------

_encode = p.JSON_ENCODER.encode
_STREAM_LINE = (
    b'{"type":"stream_event","event":%b,"parent_tool_use_id":null,"session_id":%b,"uuid":"%b%012x"}'
)
"""A ``stream_event`` line as :meth:`ClaudeEncoder.envelope` words it: inner event, session and line uuid."""
_BLOCK_STOP = _encode({"type": "content_block_stop", "index": 0})
_MESSAGE_ENDING = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}
_MESSAGE_END = _encode(_MESSAGE_ENDING)
_MESSAGE_CUT = _encode({"type": "message_delta", "delta": {"stop_reason": None}})
_MESSAGE_STOP = _encode({"type": "message_stop"})
_BLOCK_STARTS = {
    reasoning: _encode({"type": "content_block_start", "index": 0, "content_block": {"type": kind, kind: ""}})
    for reasoning, kind in ((False, "text"), (True, "thinking"))
}
_DELTA_HEADS = {
    reasoning: _encode(
        {"type": "content_block_delta", "index": 0, "delta": {"type": f"{kind}_delta", kind: ""}}
    )[:-4]
    for reasoning, kind in ((False, "text"), (True, "thinking"))
}
_TEXT_DELTA_HEAD = _DELTA_HEADS[False]
"""A delta's inner event up to its text: the same bytes with the encoded text and ``}}`` after them."""
_DELTA_STEPS = ("_lines", "on_message_delta", "_delta", "_stream_line", "session", "line_uuid")
"""The steps of a text delta's line that :meth:`ClaudeEncoder._text_deltas` takes in one (a subclass changing
any of them writes its deltas the long way)."""

_WRITE_DELTAS_WITH: Final = (
    p.MessageDelta,
    "assistant",
    _TEXT_DELTA_HEAD,
    b"}}",
    _encode,
    TALLY_KINDS,
    tuple(_STREAM_LINE.replace(b"%012x", b"%b").split(b"%b")),
)
"""What :func:`_write_deltas` compares with, writes and tallies with: the delta class, the role, the inner
event's head and tail around the encoded text, the encoder, the tally's kinds, and the pieces of
``_STREAM_LINE`` around its inner event, session, uuid prefix and counter (the C twin takes it as an
argument; the Python twin formats ``_STREAM_LINE`` itself)."""


def _write_deltas_py(
    events: list[p.AnyEvent],
    index: int,
    lines: list[bytes],
    run_id: str,
    session_id: str,
    session_json: bytes,
    uuid_prefix: bytes,
    uuids: int,
    tally: Tally,
    kinds: tuple[Any, ...],
) -> int:
    """The ``stream_event`` line of each delta from ``events[index]`` on that is of run ``run_id``, session
    ``session_id`` and the assistant's, tallied and appended to ``lines`` (their uuids counted on from
    ``uuids``); the index after them."""
    delta_class, assistant, head, tail, encode, _, _ = kinds
    count = len(events)
    while index < count:
        event: Any = events[index]
        if (
            type(event) is not delta_class
            or event.message_id != run_id
            or event.session_id != session_id
            or event.role != assistant
        ):
            break
        tally_add(tally, event)
        uuids += 1
        inner = b"".join((head, encode(event.content), tail))
        lines.append(_STREAM_LINE % (inner, session_json, uuid_prefix, uuids))
        index += 1
    return index


_write_deltas: Callable[..., int] = speedups.claude_deltas if speedups else _write_deltas_py

EncodedLine = dict[str, Any] | msgspec.Raw
"""A line as an encoder handler returns it: an object, or the bytes of one already written (hot lines)."""
_NO_MODEL = "unknown"
"""The model an API message names when no ``start`` named one (never a ``modelUsage`` key of its own)."""


class _Running:
    """The session's running totals that each of its result lines repeats, as Claude Code's do.

    A turn adds what it knows: one of unknown cost, or without usage, leaves them as they were.
    """

    __slots__ = ("cost", "extras", "models", "session")

    def __init__(self, session: str | None) -> None:
        self.session = session
        self.cost: float | None = None
        """``total_cost_usd`` (None: no turn's cost known yet)."""
        self.models: dict[str, p.UsageTotals] = {}
        """``modelUsage``: each model's figures over the session."""
        self.extras: dict[str, dict[str, Any]] = {}
        """Each model's other ``modelUsage`` keys, as the last ``claude.model_usage`` event gave them."""

    def add(self, turn: p.UsageTotals, by_model: dict[str, p.UsageTotals]) -> None:
        if turn.cost_usd is not p.UNSET:
            self.cost = round((self.cost or 0.0) + turn.cost_usd, 10)
        for model, figures in by_model.items():
            self.models.setdefault(model, p.UsageTotals()).add(figures.as_usage(model))


def _model_figures(totals: p.UsageTotals, extras: dict[str, Any]) -> dict[str, Any]:
    """One model's ``modelUsage`` entry: its tokens, its cost when known, and Claude Code's other keys
    (``webSearchRequests``, ``contextWindow``, ``maxOutputTokens`` …) when a ``claude.model_usage`` event gave
    them: no canonical usage says them, and none is made up."""
    api = _api_usage(totals)
    figures: dict[str, Any] = {camel: api[key] for camel, key in _MODEL_USAGE_KEYS}
    if totals.cost_usd is not p.UNSET:
        figures["costUSD"] = totals.cost_usd
    for key, value in extras.items():
        figures.setdefault(key, value)
    return figures


def _carriers(held: list[p.Message | p.Reasoning]) -> tuple[str | None, int]:
    """Which held lines carry their call's usage: the last ones, all of the last one's message id (Claude Code's
    lines of one call share one), from the index returned. Lines of another id do not, so that a reader counting
    per message id counts the call once, and reads it after all that the call said."""
    last = held[-1]
    if not last.content:
        return None, len(held)
    carrier, first = _own_id(last), len(held) - 1
    while first > 0 and _own_id(held[first - 1]) == carrier:
        first -= 1
    return carrier, first


def _own_id(event: p.Message | p.Reasoning) -> str:
    return event.message_id if isinstance(event, p.Message) else event.reasoning_id


class ClaudeEncoder(EventEncoder):
    """Canonical events as Claude Code stream-json lines, as the Claude Agent SDK parses them.

    A model call's ``usage`` goes in its ``assistant`` lines' ``message.usage``, as Claude Code's: its complete
    messages and reasoning are held until the next event, and when that is the call's ``usage`` (which comes after
    them) their lines carry it, as do the lines of the call's tool calls that follow it.

    With partial messages, deltas become ``stream_event`` lines (one API message per delta run, block 0), closed
    by the complete ``assistant`` line then ``content_block_stop``, ``message_delta`` (with the usage when the run
    carries it) and ``message_stop``, in Claude's own order; a ``usage`` no line carries becomes a short stream of
    its own (``message_start`` … ``message_stop``), as Claude Code writes a call that said nothing. Without them,
    as Claude Code without ``--include-partial-messages``, no ``stream_event`` line is written, and such a usage
    is counted only in the result's ``usage`` and ``modelUsage``.
    """

    fold_fatal = True
    carries_usage: ClassVar[bool] = True
    """Whether ``assistant`` lines carry ``message.usage`` (Amp's do not)."""

    def __init__(
        self, *, partial_messages: bool = True, mcp_servers: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        super().__init__()
        self.streams = partial_messages
        """Whether ``stream_event`` lines are written (``--include-partial-messages``)."""
        self.mcp_servers = [{"name": server["name"], "status": server["status"]} for server in mcp_servers]
        """The MCP servers the producer was given, for ``init``: each one's name and status (``connected``,
        ``failed``), as Claude Code lists them."""
        self._model = _NO_MODEL
        self._uuid_prefix = str(uuid.uuid4())[:24]
        self._uuid_prefix_bytes = self._uuid_prefix.encode()
        self._uuids = 0
        self._runs: dict[tuple[bool, str], str] = {}
        """Open delta runs -> the API message they stream in (the run's own id)."""
        self._current: str | None = None
        self._calls: dict[str, tuple[str, dict[str, Any]]] = {}
        """Open tool calls -> (name, input), for the result's ``permission_denials``."""
        self._denials: list[dict[str, Any]] = []
        self._deferred: dict[str, Any] | None = None
        """The turn's ``claude.deferred_tool_use`` (id, name, input): the result line carries it."""
        self._structured: Any = None
        """The turn's ``claude.structured_output``, written in its result line."""
        self._turn_models: dict[str, p.UsageTotals] = {}
        """The turn's ``usage`` events summed per model, for its result's ``modelUsage``."""
        self._running = _Running(None)
        """The session's running totals its result lines repeat (``total_cost_usd``, ``modelUsage``)."""
        self._conversation: str | None = None
        """The stored session the current run continues (its ``start``'s parent), written as the session id."""
        self._session_json: tuple[str | None, bytes] = (None, b"")
        """The last session id and its JSON, for stream lines (written as bytes, not objects)."""
        self._held: list[p.Message | p.Reasoning] = []
        """Complete assistant messages and reasoning not written yet: the next event may be their call's usage."""
        self._carried: tuple[str | None, p.Usage] | None = None
        """The usage just written and the message id that carries it (None: no line yet), for the tool calls
        that follow it."""
        self._model_extras: dict[str, dict[str, Any]] = {}
        """The turn's ``claude.model_usage``: each model's other ``modelUsage`` keys."""
        self._short_deltas = all(
            getattr(type(self), step) is getattr(ClaudeEncoder, step) for step in _DELTA_STEPS
        )
        """Whether :meth:`encode` may write a delta of the open text run straight (no subclass changed a step)."""

    def encode(self, event: p.AnyEvent) -> list[bytes]:
        if self._continues_text(event):
            lines: list[bytes] = []
            self._text_deltas([event], 0, lines)
            return lines
        return super().encode(event)

    def encode_batch(self, events: list[p.AnyEvent]) -> list[bytes]:
        """Runs of deltas of the open text run (most of a streamed run's events) each in one loop."""
        lines: list[bytes] = []
        index, count = 0, len(events)
        while index < count:
            event = events[index]
            if self._continues_text(event):
                index = self._text_deltas(events, index, lines)
            else:
                lines += self.encode(event)
                index += 1
        return lines

    def _continues_text(self, event: p.AnyEvent) -> bool:
        """Whether ``event`` is one more delta of the open text run, with nothing held that must go first."""
        return (
            type(event) is p.MessageDelta
            and self._current == event.message_id
            and self.started
            and self.streams
            and self._short_deltas
            and self.held_fatal is None
            and not self._held
            and self._carried is None
            and event.role == "assistant"
            and (False, event.message_id) in self._runs
        )

    def _text_deltas(self, events: list[p.AnyEvent], index: int, lines: list[bytes]) -> int:
        """The lines of ``events[index]`` (which :meth:`_continues_text`) and of the deltas after it of the same
        run and session, straight to their bytes: the steps of :meth:`_lines`, :meth:`on_message_delta`,
        :meth:`_delta` and :meth:`_stream_line` for them, without their calls. Returns the index after them.

        Nothing those steps read changes inside such a run: a delta only grows the tally.
        """
        first = cast(p.MessageDelta, events[index])
        run_id, session_id = first.message_id, first.session_id
        self.session_id = session_id or self.session_id
        session = self.session(first)
        cached, session_json = self._session_json
        if session is not cached:
            session_json = _encode(session)
            self._session_json = (session, session_json)
        before = len(lines)
        index = _write_deltas(
            events, index, lines, run_id, session_id, session_json, self._uuid_prefix_bytes, self._uuids,
            self.tally, _WRITE_DELTAS_WITH,
        )  # fmt: skip
        self._uuids += len(lines) - before  # one a line
        return index

    def end_turn(self) -> None:
        super().end_turn()
        self._calls.clear()  # its result's permission denials are out; a later turn cannot answer them
        self._deferred = self._structured = None
        self._turn_models = {}
        self._model_extras = {}
        self._carried = None

    def _lines(self, event: p.Event) -> list[bytes]:
        """What is held waits only for the next event: any but another message or reasoning (held with it) or a
        usage (which it carries) writes it first, without usage. Any event but a tool call ends the call whose
        usage was the last one written."""
        if self._held or self._carried is not None:
            kind = type(event)
            if kind is not p.ToolCall:
                self._carried = None
            if self._held and kind is not p.Usage and not _joins(event):
                held = list(map(_encode, self._release(None)))
                return [*held, *super()._lines(event)]
        return super()._lines(event)

    # line shapes (Amp overrides these)

    def session(self, event: p.BaseEvent) -> str:
        """Claude Code's ``session_id`` is the conversation's, the one to resume: a run that continues a stored
        session (its ``start`` names it as the parent) goes out under that session's id."""
        return self._conversation or event.session_id

    def reproducible(self, seed: str) -> None:
        super().reproducible(seed)
        self._uuid_prefix = str(uuid.uuid5(uuid.NAMESPACE_URL, "agentstream:" + seed))[:24]
        self._uuid_prefix_bytes = self._uuid_prefix.encode()
        self._uuids = 0

    def line_uuid(self) -> str:
        """A fresh line uuid: one random UUID v4 per stream with a counter in its last group (cheap, unique)."""
        self._uuids += 1
        return "%s%012x" % (self._uuid_prefix, self._uuids)  # noqa: UP031 (the fastest way, and _STREAM_LINE's)

    def envelope(self, event: p.BaseEvent, line: dict[str, Any], *, parent: bool = True) -> dict[str, Any]:
        """The fields every line ends with (``parent_tool_use_id`` only on message-like lines)."""
        if parent:
            line["parent_tool_use_id"] = None
        line["session_id"] = self.session(event)
        line["uuid"] = self.line_uuid()
        return line

    def api_message(
        self,
        message_id: str,
        block: dict[str, Any],
        stop_reason: str | None,
        usage: p.Usage | None = None,
    ) -> dict[str, Any]:
        """An assistant line's API message, with its call's model and usage when known. Claude's per-block lines
        have no stop reason yet; Amp's do."""
        message: dict[str, Any] = {
            "model": self._model if usage is None else usage.model,
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "content": [block],
            "stop_reason": None,
            "stop_sequence": None,
        }
        if usage is not None:
            message["usage"] = _api_usage(usage)
        return message

    def on_start(self, event: p.Start) -> list[dict[str, Any]]:
        if event.model is not p.UNSET:
            self._model = event.model
        parent = event.parent_session_id
        self._conversation = parent if parent is not p.UNSET else None
        line: dict[str, Any] = {
            "type": "system",
            "subtype": "init",
            "cwd": event.cwd,
            "session_id": self.session(event),
            "tools": list(event.tools),
            "mcp_servers": list(self.mcp_servers),
        }
        if event.model is not p.UNSET:
            line["model"] = event.model
        mode = event.permission_mode if event.permission_mode is not p.UNSET else "default"
        line.update(
            permissionMode=CLAUDE_PERMISSION_MODE_OF.get(mode, mode),
            apiKeySource="none",
            claude_code_version=CLAUDE_CODE_LEVEL,
            uuid=self.line_uuid(),
        )
        return [line]

    def result_line(self, event: p.Result, failure: p.ErrorInfo | None) -> dict[str, Any]:
        subtype, reason = _claude_subtype(event)
        line: dict[str, Any] = {
            "type": "result",
            "subtype": subtype,
            "is_error": not event.ok,
            "duration_ms": event.duration_ms,
            "duration_api_ms": event.duration_ms,
            "num_turns": event.turn_count,
        }
        if event.result is not p.UNSET:
            line["result"] = event.result
        deferred = self._deferred
        line["stop_reason"] = _DEFERRED_REASON if deferred else "end_turn" if event.ok else None
        if reason is not None or deferred:
            line["terminal_reason"] = reason or _DEFERRED_REASON
        line["session_id"] = self.session(event)
        running = self._running
        if running.session != line["session_id"]:
            running = self._running = _Running(line["session_id"])
        running.add(event.usage, self._by_model(event.usage))
        running.extras.update(self._model_extras)
        if running.cost is not None:
            line["total_cost_usd"] = running.cost
        line["usage"] = _api_usage(event.usage)
        if running.models:
            line["modelUsage"] = {
                model: _model_figures(totals, running.extras.get(model, {}))
                for model, totals in running.models.items()
            }
        line["permission_denials"], self._denials = self._denials, []
        if self._structured is not None:
            line["structured_output"] = self._structured
        if deferred:
            line["deferred_tool_use"] = deferred
        if failure is not None:
            line["errors"] = [failure.message]
        line["uuid"] = self.line_uuid()
        return line

    def _by_model(self, totals: p.UsageTotals) -> dict[str, p.UsageTotals]:
        """A turn's totals per model, for ``modelUsage``: as its ``usage`` events split them when they add up to
        the result's totals, else all under the turn's main model (its events' with the most output, else the
        start's), so that ``modelUsage`` always grows by the result's own figures. None without a known model."""
        models = self._turn_models
        if not has_usage(totals):
            return {}
        summed = self.tally.usage  # the turn's usage events
        if models and _api_usage(summed) == _api_usage(totals) and summed.cost_usd == totals.cost_usd:
            return models
        main = max(models, key=lambda model: models[model].output_tokens, default=None)
        main = main or (self._model if self._model != _NO_MODEL else None)
        return {main: totals} if main is not None else {}

    # canonical events

    def on_message(self, event: p.Message) -> list[EncodedLine]:
        if event.role == "user":
            line = {"type": "user", "message": {"role": "user", "content": event.content}}
            return [self.envelope(event, line)]
        if event.role != "assistant":
            return []
        return self._hold(event)

    def on_reasoning(self, event: p.Reasoning) -> list[EncodedLine]:
        return self._hold(event)

    def _hold(self, event: p.Message | p.Reasoning) -> list[EncodedLine]:
        """Held until the next event (see :meth:`_lines`) when assistant lines carry usage; else written now."""
        if self.carries_usage:
            self._held.append(event)
            return []
        return self._said(event, None)

    def _said(self, event: p.Message | p.Reasoning, usage: p.Usage | None) -> list[EncodedLine]:
        """The lines of a complete assistant message or reasoning."""
        if isinstance(event, p.Message):
            block = {"type": "text", "text": event.content}
            return self._complete(event, (False, event.message_id), block, event.content, usage)
        block = {"type": "thinking", "thinking": event.content, "signature": ""}
        return self._complete(event, (True, event.reasoning_id), block, event.content, usage)

    def _release(self, usage: p.Usage | None) -> list[EncodedLine]:
        """The held messages and reasoning, the last ones with ``usage`` (see :func:`_carriers`)."""
        held, self._held = self._held, []
        carrier, first = _carriers(held) if usage is not None else (None, len(held))
        if carrier is not None and usage is not None:
            self._carried = (carrier, usage)
        lines: list[EncodedLine] = []
        for index, event in enumerate(held):
            lines += self._said(event, usage if index >= first else None)
        return lines

    def on_message_delta(self, event: p.MessageDelta) -> list[EncodedLine]:
        if event.role != "assistant":
            return []
        return self._delta(event, (False, event.message_id), event.content)

    def on_reasoning_delta(self, event: p.ReasoningDelta) -> list[EncodedLine]:
        return self._delta(event, (True, event.reasoning_id), event.content)

    def on_tool_call(self, event: p.ToolCall) -> list[dict[str, Any]]:
        """A tool call right after its call's usage is a line of that call's message, with its usage."""
        self._calls[event.call_id] = (event.name, event.arguments)
        block = {"type": "tool_use", "id": event.call_id, "name": event.name, "input": event.arguments}
        carried, usage = self._carried, None
        if carried is None:
            message_id = self.made_up_id("msg")
        else:
            message_id, usage = carried[0] or self.made_up_id("msg"), carried[1]
            self._carried = (message_id, usage)
        line = {"type": "assistant", "message": self.api_message(message_id, block, "tool_use", usage)}
        return [self.envelope(event, line)]

    def on_tool_result(self, event: p.ToolResult) -> list[dict[str, Any]]:
        name, arguments = self._calls.pop(event.call_id, (event.name, {}))
        if self._deferred_here(event.call_id) and event.status == "cancelled":
            return []  # the deferred call has no result line: the result's deferred_tool_use says it
        if event.status == "denied":
            self._denials.append({"tool_name": name, "tool_use_id": event.call_id, "tool_input": arguments})
        if event.status == "success":
            text = event.output if isinstance(event.output, str) else ""
        else:
            text = failure_text(event)
        is_error = (
            event.status != "success"
        )  # said either way, as Claude Code does: the SDK's is_error is a bool
        block = {"tool_use_id": event.call_id, "type": "tool_result", "content": text, "is_error": is_error}
        line = {"type": "user", "message": {"role": "user", "content": [block]}}
        return [self.envelope(event, line)]

    def on_permission_request(self, event: p.PermissionRequest) -> list[dict[str, Any]]:
        """Claude Code asks its SDK over the control protocol: a ``can_use_tool`` request.

        For a deferred call it asks nothing: the result's ``deferred_tool_use`` hands the decision over.
        """
        if self._deferred_here(event.call_id):
            return []
        request: dict[str, Any] = {
            "subtype": "can_use_tool",
            "tool_name": event.name,
            "input": event.arguments,
            "permission_suggestions": None,
            "blocked_path": None,
            "tool_use_id": event.call_id,
        }
        if event.reason is not p.UNSET:
            request["decision_reason"] = event.reason
        request_id = event.request_id if event.request_id is not p.UNSET else f"perm_{event.call_id}"
        return [{"type": "control_request", "request_id": request_id, "request": request}]

    def _deferred_here(self, call_id: str) -> bool:
        return self._deferred is not None and self._deferred["id"] == call_id

    def on_heartbeat(self, event: p.Heartbeat) -> list[dict[str, Any]]:
        """Claude Code's liveness line; receivers ignore it."""
        return [{"type": "keep_alive"}]

    def on_status(self, event: p.Status) -> list[dict[str, Any]]:
        line: dict[str, Any] = {"type": "system", "subtype": "status", "status": event.status}
        if event.message is not p.UNSET:
            line["message"] = event.message
        return [self.envelope(event, line, parent=False)]

    def on_event(self, event: p.GenericEvent) -> list[dict[str, Any]]:
        name, data = event.name, event.data
        if name.startswith("claude.system.") and isinstance(data, dict) and not _STAMP_KEYS & data.keys():
            line = {"type": "system", "subtype": name.removeprefix("claude.system."), **data}
        elif name == "claude.rate_limit" and isinstance(data, dict):
            line = {"type": "rate_limit_event", "rate_limit_info": data}
        elif name == "claude.conversation_reset" and isinstance(data, dict) and _resets(data):
            line = {"type": "conversation_reset", **data}
            self._running = _Running(None)  # the running totals start again
        elif name == _DEFERRED_EVENT and isinstance(data, dict) and _deferral(data):
            self._deferred = {"id": data["id"], "name": data["name"], "input": data["input"]}
            return []  # written with the result line, as Claude Code writes it
        elif name == _STRUCTURED_EVENT and data is not None:
            self._structured = data
            return []  # the result line's structured_output
        elif name == _MODEL_USAGE_EVENT and isinstance(data, dict) and _per_model(data):
            self._model_extras = data
            return []  # in the result line's modelUsage
        else:
            line = {"type": "system", "subtype": "agentstream_event", "name": name, "data": data}
        return [self.envelope(event, line, parent=False)]

    def on_error(self, event: p.Error) -> list[dict[str, Any]]:
        line: dict[str, Any] = {"type": "system", "subtype": "api_retry"}
        details = event.details if isinstance(event.details, dict) else {}
        for key in ("attempt", "max_retries", "error_status"):
            if isinstance(details.get(key), int):
                line[key] = details[key]
        if event.retry_in_ms is not p.UNSET:
            line["retry_delay_ms"] = event.retry_in_ms
        line["error"] = _CODE_CATEGORIES.get(event.code, "unknown")
        line["message"] = event.message
        return [self.envelope(event, line, parent=False)]

    def on_usage(self, event: p.Usage) -> list[EncodedLine]:
        """The held lines carry it; when none can, a stream of its own (only with partial messages) does."""
        self._turn_models.setdefault(event.model, p.UsageTotals()).add(event)
        lines = self._release(event) if self._held else []
        if self._carried is not None or not self.carries_usage:
            return lines
        if not self.streams:
            self._carried = (None, event)  # no line yet: the call's first tool call carries it
            return lines
        usage = _api_usage(event)
        if self._current is not None:
            self._carried = (self._current, event)
            inner = _encode({"type": "message_delta", "delta": {"stop_reason": None}, "usage": usage})
            return [*lines, self._stream_line(event, inner)]
        message_id = self.made_up_id("msg")
        self._carried = (message_id, event)
        message: dict[str, Any] = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": event.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        end = {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": event.output_tokens},
        }
        return [
            *lines,
            self._stream_line(event, _encode({"type": "message_start", "message": message})),
            self._stream_line(event, _encode(end)),
            self._stream_line(event, _MESSAGE_STOP),
        ]

    def on_result(self, event: p.Result) -> list[EncodedLine]:
        lines: list[EncodedLine] = []
        for key in list(self._runs):
            lines += self._stop(event, key)
        failure = None if event.ok else self.failure(event)
        if failure is not None and failure.code in _API_FAILURES:
            lines += self.api_error_lines(event, failure)
        return [*lines, self.result_line(event, failure)]

    def api_error_lines(self, event: p.Result, failure: p.ErrorInfo) -> list[dict[str, Any]]:
        """A failed model call as Claude Code reports one: a ``<synthetic>`` assistant line with its text and
        ``error`` category, which the Claude Agent SDK gives as ``AssistantMessage.error``."""
        message = {
            "id": self.made_up_id("msg"),
            "model": _SYNTHETIC,
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": failure.message}],
            "stop_reason": "stop_sequence",
            "stop_sequence": "",
            "usage": _api_usage(p.UsageTotals()),
        }
        line = self.envelope(event, {"type": "assistant", "message": message})
        line["error"] = _CODE_CATEGORIES.get(failure.code, "unknown")
        line["is_api_error_message"] = True
        return [line]

    # streaming

    def _stream_line(self, event: p.BaseEvent, inner: bytes) -> msgspec.Raw:
        """A ``stream_event`` line around its encoded inner event, as :meth:`envelope` words it.

        Written as bytes, not as an object to encode: these are most of a streamed run's lines.
        """
        session = self.session(event)
        cached, session_json = self._session_json
        if session is not cached:
            session_json = _encode(session)
            self._session_json = (session, session_json)
        self._uuids += 1  # the line uuid, as line_uuid() makes it
        return msgspec.Raw(_STREAM_LINE % (inner, session_json, self._uuid_prefix_bytes, self._uuids))

    def _switch(self, event: p.BaseEvent, message_id: str) -> list[EncodedLine]:
        """A ``message_start`` when the stream moves to another message (a new run, or back to an open one)."""
        if self._current == message_id:
            return []
        self._current = message_id
        message: dict[str, Any] = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self._model,
            "stop_reason": None,
            "stop_sequence": None,
        }
        return [self._stream_line(event, _encode({"type": "message_start", "message": message}))]

    def _delta(self, event: p.BaseEvent, key: tuple[bool, str], text: str) -> list[EncodedLine]:
        if not self.streams:
            return []
        message_id = key[1]
        delta = b"".join((_DELTA_HEADS[key[0]], _encode(text), b"}}"))
        if self._current == message_id and key in self._runs:
            return [self._stream_line(event, delta)]  # the common case: one more delta of the open run
        lines = self._switch(event, message_id)
        if key not in self._runs:
            self._runs[key] = message_id
            lines.append(self._stream_line(event, _BLOCK_STARTS[key[0]]))
        return [*lines, self._stream_line(event, delta)]

    def _complete(
        self,
        event: p.BaseEvent,
        key: tuple[bool, str],
        block: dict[str, Any],
        text: str,
        usage: p.Usage | None,
    ) -> list[EncodedLine]:
        """The ``assistant`` line of a complete message or reasoning, closing its delta run if it had one (whose
        ``message_delta`` carries ``usage`` too, as the API's does).

        Empty content (a delta run discarded by an interrupt or a failed call, or nothing said) writes no
        ``assistant`` line: the API never sends an empty block, and the Claude Agent SDK would hand its user one.
        """
        if not text:
            return self._abandon(event, key) if key in self._runs else []
        if key not in self._runs:
            line = {"type": "assistant", "message": self.api_message(key[1], block, "end_turn", usage)}
            return [self.envelope(event, line)]
        lines = self._switch(event, self._runs[key])
        line = {"type": "assistant", "message": self.api_message(self._runs[key], block, "end_turn", usage)}
        return [*lines, self.envelope(event, line), *self._stop(event, key, usage)]

    def _stop(
        self, event: p.BaseEvent, key: tuple[bool, str], usage: p.Usage | None = None
    ) -> list[EncodedLine]:
        end = _MESSAGE_END if usage is None else _encode({**_MESSAGE_ENDING, "usage": _api_usage(usage)})
        return [
            *self._leave(event, key),
            self._stream_line(event, _BLOCK_STOP),
            self._stream_line(event, end),
            self._stream_line(event, _MESSAGE_STOP),
        ]

    def _abandon(self, event: p.BaseEvent, key: tuple[bool, str]) -> list[EncodedLine]:
        """A discarded run ends as Claude Code ends a message whose streamed blocks it dropped: no block stop, no
        stop reason, and ``abandoned_blocks`` on its ``message_stop`` line, so that a reader (the wrap's among
        them) does not take its deltas for a complete message."""
        message_id = self._runs[key]
        lines = self._leave(event, key)
        stop = {"type": "stream_event", "event": {"type": "message_stop"}}
        stop["abandoned_blocks"] = {"api_message_id": message_id, "from_block_index": 0}
        return [*lines, self._stream_line(event, _MESSAGE_CUT), self.envelope(event, stop)]

    def _leave(self, event: p.BaseEvent, key: tuple[bool, str]) -> list[EncodedLine]:
        """Close a run: the ``message_start`` that returns to its message when another one is current."""
        lines = self._switch(event, self._runs.pop(key))
        self._current = None
        return lines


def _joins(event: p.Event) -> bool:
    """Whether an event is a complete assistant message or reasoning (held with those before it)."""
    return isinstance(event, p.Reasoning) or (isinstance(event, p.Message) and event.role == "assistant")


def _per_model(data: dict[str, Any]) -> bool:
    """Whether an event's data is a ``claude.model_usage``: an object of keys per model."""
    return all(isinstance(extras, dict) for extras in data.values())


def _resets(data: dict[str, Any]) -> bool:
    """Whether an event's data makes a ``conversation_reset`` line the Claude Agent SDK accepts."""
    return isinstance(data.get("new_conversation_id"), str) and not _STAMP_KEYS & data.keys()


def _deferral(data: dict[str, Any]) -> bool:
    """Whether an event's data is a ``deferred_tool_use`` as the Claude Agent SDK reads it."""
    return (
        isinstance(data.get("id"), str)
        and isinstance(data.get("name"), str)
        and isinstance(data.get("input"), dict)
    )


def _claude_subtype(event: p.Result) -> tuple[str, str | None]:
    """Claude's result subtype (and terminal reason) for a canonical result."""
    if event.ok:
        return "success", None
    if event.subtype == "interrupted":
        return "error_during_execution", "aborted_streaming"
    claude = "error_" + event.subtype
    return (claude if claude in _ERROR_SUBTYPES else "error_during_execution"), None


# -- detection ----------------------------------------------------------------------------

_CLAUDE_SYSTEM_SUBTYPES = frozenset(
    {
        "api_retry",
        "status",
        "compact_boundary",
        "hook_started",
        "hook_progress",
        "hook_response",
        "task_started",
        "task_progress",
        "task_updated",
        "task_notification",
        "plugin_install",
    }
)


def amp_session(obj: dict[str, Any]) -> bool:
    """Amp's session ids look like ``T-<uuid>``; Claude's are bare UUIDs."""
    session_id = obj.get("session_id")
    return isinstance(session_id, str) and session_id.startswith("T-")


def claude_score(obj: dict[str, Any]) -> float:
    """How much a first line looks like Claude Code (Cursor's init has no tools/mcp_servers/version)."""
    if "v" in obj or "seq" in obj or amp_session(obj):
        return 0.0
    kind = obj.get("type")
    if kind == "system" and obj.get("subtype") == "init":
        if "claude_code_version" in obj:
            return 1.0
        has_lists = isinstance(obj.get("tools"), list) and isinstance(obj.get("mcp_servers"), list)
        if has_lists and ("apiKeySource" in obj or "permissionMode" in obj):
            return 0.9
        return 0.6 if has_lists else 0.0
    if kind in ("stream_event", "rate_limit_event") and "uuid" in obj:
        return 0.9
    if kind == "system" and str(obj.get("subtype")) in _CLAUDE_SYSTEM_SUBTYPES and "uuid" in obj:
        return 0.7
    message = obj.get("message")
    if kind in ("assistant", "user") and isinstance(message, dict):
        if "uuid" in obj:
            return 0.7
        if _CLAUDE_LINE_KEYS & obj.keys() or _API_MESSAGE_KEYS & message.keys() or _api_blocks(message):
            return 0.6  # a line without its envelope (an API error, an SDK capture) is still Claude's shape
        return 0.0
    if kind == "result" and "num_turns" in obj:
        return 0.8 if _CLAUDE_RESULT_KEYS & obj.keys() else 0.0
    return 0.0


_CLAUDE_LINE_KEYS = frozenset({"parent_tool_use_id", "is_api_error_message", "request_id"})
_API_MESSAGE_KEYS = frozenset({"model", "id", "stop_reason"})
"""Keys of an Anthropic API message (Cursor's messages have only role and content)."""
_API_BLOCKS = frozenset(
    {"thinking", "redacted_thinking", "tool_use", "server_tool_use", "mcp_tool_use", "tool_result"}
)
_CLAUDE_RESULT_KEYS = frozenset({"duration_api_ms", "terminal_reason", "api_error_status", "total_cost_usd"})


def _api_blocks(message: dict[str, Any]) -> bool:
    """Whether a message holds content blocks only the Anthropic API writes (thinking, tool use)."""
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") in _API_BLOCKS for block in content
    )


class ClaudeDialect(SimpleDialect):
    name = "claude"
    json_output_is_result_line = True
    summary = "Claude Code -p --output-format stream-json --verbose"
    decoder_class = ClaudeDecoder
    encoder_class = ClaudeEncoder

    def encoder(
        self, *, partial_messages: bool = True, mcp_servers: Sequence[Mapping[str, Any]] = ()
    ) -> ClaudeEncoder:
        """With ``stream_event`` lines for deltas by default; ``partial_messages=False`` writes what Claude Code
        writes without ``--include-partial-messages``; ``mcp_servers`` (name, status) are listed in ``init``."""
        return ClaudeEncoder(partial_messages=partial_messages, mcp_servers=mcp_servers)

    def sniff(self, obj: dict[str, Any]) -> float:
        return claude_score(obj)


DIALECT = ClaudeDialect()
