"""OpenAI Codex ``codex exec --json``: thread and turn events around ``item.*`` lifecycles.

Lines: ``thread.started`` (``thread_id``), ``turn.started``, ``item.started`` /
``item.updated`` / ``item.completed`` (an ``item`` of type ``agent_message``,
``reasoning``, ``command_execution``, ``file_change``, ``mcp_tool_call``,
``web_search``, ``todo_list`` or ``error``), ``turn.completed`` (``usage``) or
``turn.failed`` (``error.message``), and top-level ``error`` lines.

A turn's end is the run's end: ``turn.completed`` becomes the ``usage`` and the
``result``. Top-level ``error`` lines and ``error`` items are not fatal — only
``turn.failed`` is, and Codex writes the error that failed the turn twice: as an
``error`` line, then as ``turn.failed``'s. A retry notice (``Reconnecting... 2/5
(…)``) is never that error: Codex writes it, then waits before it tries again.
Codex never names the model (a spawned ``codex``'s start and usage name the one its
``-m``/``--model`` option asks for, else ``unknown``), and ``exec`` stops with no turn
event at all when interrupted: the reader then makes up the ending.
"""

# No ``from __future__ import annotations``: the typed lines' annotations stay real objects, which msgspec
# reads at import far faster than strings (see the note in agentstream.protocol).
import functools
import operator
import re
from collections.abc import Callable, Sequence
from typing import Annotated, Any, ClassVar, Final, NamedTuple

import msgspec

from agentstream import protocol as p
from agentstream._accel import speedups
from agentstream.dialects.base import NamedModel, option_value
from agentstream.dialects.kit import (
    UNDECODED,
    EventDecoder,
    EventEncoder,
    Fields,
    SimpleDialect,
    ToolPairs,
    arguments_text,
    identify,
    parse_arguments,
    text_or_json,
)
from agentstream.errors import ErrorCode, code_from_wording
from agentstream.transcript import TALLY_KINDS

_RENAMED = {"assistant_message": "agent_message"}
"""Item types before openai/codex#4610 (which also renamed ``item_type`` to ``type``)."""
_RETRY = r"(?i)(?:reconnecting|retrying)\D{0,40}?(\d+)\s*/\s*(\d+)"
_DELAY = r"(?i)\bin\s+(\d+(?:\.\d+)?)\s*(ms|s)\b"
_EXIT = r"exit code (-?\d+)"
"""Patterns of error lines and results, compiled (by ``re``'s cache) when first met, not at every start."""
_COMMAND = "command_execution"
_MCP_PREFIX = "mcp__"
_NEVER_FINISHED = "codex marked the command completed without an exit code: it never finished"

Outcome = tuple[p.ToolStatus, str | None, str | None]
"""A finished tool item: (status, output, error)."""


def _error_code(message: str) -> str:
    """A canonical code for Codex's free-text errors: a retry notice is the provider's trouble."""
    code = code_from_wording(message)
    if code == ErrorCode.UNKNOWN and re.search(_RETRY, message):
        return ErrorCode.PROVIDER_ERROR
    return code


def _line_error(message: str) -> p.Error:
    """A top-level ``error`` line, recoverable: a retry notice carries its attempt (in ``details``) and delay."""
    attempt, delay = re.search(_RETRY, message), re.search(_DELAY, message)
    error = p.Error(code=_error_code(message), message=message, recoverable=True)
    if delay is not None:
        amount = float(delay[1])
        error.retry_in_ms = int(amount if delay[2].lower() == "ms" else amount * 1000)
    if attempt is not None:
        error.details = {"attempt": int(attempt[1]), "max_attempts": int(attempt[2])}
    return error


# -- tool items: (name, arguments) when called, (status, output, error) when finished ----------------


def _command_call(item: Fields) -> tuple[str, dict[str, Any]]:
    return _COMMAND, {"command": item.opt_text("command") or ""}


def _command_outcome(item: Fields) -> Outcome:
    status, exit_code = item.opt_text("status"), item.opt_integer("exit_code")
    return _command_result(status, exit_code, item.opt_text("aggregated_output") or "")


def _command_result(status: str | None, exit_code: int | None, output: str) -> Outcome:
    if status == "declined":
        return "denied", output, "the command was declined"
    if exit_code is None:
        return "cancelled", output, _NEVER_FINISHED
    if exit_code == 0 and status != "failed":
        return "success", output, None
    return "error", output, f"exit code {exit_code}"


def _file_call(item: Fields) -> tuple[str, dict[str, Any]]:
    return "file_change", {"changes": item.opt_list("changes") or []}


def _file_outcome(item: Fields) -> Outcome:
    return _file_result(item.opt_list("changes"), item.opt_text("status"))


def _file_result(changes: list[Any] | None, status: str | None) -> Outcome:
    summary = "\n".join(
        f"{change.get('kind', 'update')} {change.get('path', '')}"
        for change in changes or []
        if isinstance(change, dict)
    )
    if status == "failed":
        return "error", summary, "the patch was not applied"
    return "success", summary, None


def _mcp_call(item: Fields) -> tuple[str, dict[str, Any]]:
    server, tool = item.opt_text("server") or "", item.text("tool")
    arguments, _ = parse_arguments(item.obj.get("arguments"), item, "arguments")
    return _mcp_name(server, tool), arguments


def _mcp_name(server: str, tool: str) -> str:
    return f"{_MCP_PREFIX}{server}__{tool}" if server else tool


def _mcp_outcome(item: Fields) -> Outcome:
    result, error, status = item.opt_sub("result"), item.opt_sub("error"), item.opt_text("status")
    output = (
        _mcp_output(result.opt_list("content"), result.obj.get("structured_content"))
        if result is not None
        else None
    )
    message = error.opt_text("message") if error is not None else None
    return _mcp_result(output, status, message, failed=error is not None)


def _mcp_result(output: str | None, status: str | None, message: str | None, *, failed: bool) -> Outcome:
    """``failed``: the item carries an ``error`` object (which fails it when it has no status)."""
    if status == "failed" or (status is None and failed):
        return "error", output, message if message is not None else "the tool call failed"
    return "success", output or "", message


def _mcp_output(content: list[Any] | None, structured: Any) -> str | None:
    texts = [
        block["text"]
        for block in content or []
        if isinstance(block, dict) and isinstance(block.get("text"), str)
    ]
    if texts:
        return "\n".join(texts)
    return text_or_json(structured) if structured is not None else None


def _search_call(item: Fields) -> tuple[str, dict[str, Any]]:
    return _search_arguments(item.opt_text("query"), item.opt_mapping("action"))


def _search_arguments(query: str | None, action: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    arguments: dict[str, Any] = {"query": query or ""}
    if action is not None:
        arguments["action"] = action
    return "web_search", arguments


def _search_outcome(item: Fields) -> Outcome:
    return _search_result(item.opt_text("query"), item.opt_mapping("action"))


def _search_result(query: str | None, action: dict[str, Any] | None) -> Outcome:
    """The completed search as the result's output: Codex fills its query and action in only once it is done
    (the started item often says ``"query": ""``), and it reports no results of its own."""
    return "success", arguments_text(_search_arguments(query, action)[1]), None


_TOOLS: dict[str, tuple[Callable[[Fields], tuple[str, dict[str, Any]]], Callable[[Fields], Outcome]]] = {
    _COMMAND: (_command_call, _command_outcome),
    "file_change": (_file_call, _file_outcome),
    "mcp_tool_call": (_mcp_call, _mcp_outcome),
    "web_search": (_search_call, _search_outcome),
}


# -- the hot lines, typed: what the careful path reads from them, and of the same kinds -------------
# No other field: a typed decoder skips unknown fields unchecked, so a line whose other fields hold
# invalid UTF-8 or an out-of-range number would pass here but fail the careful path.

_Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
"""An integer :meth:`Fields.opt_integer` reads as it is."""


class _TextItem(msgspec.Struct, tag_field="type", forbid_unknown_fields=True):
    id: str
    text: str | None = None
    reasoning: ClassVar[bool] = False


class _MessageItem(_TextItem, tag="agent_message"):
    pass


class _ReasoningItem(_TextItem, tag="reasoning"):
    reasoning = True


class _ErrorItem(msgspec.Struct, tag="error", tag_field="type", forbid_unknown_fields=True):
    id: str
    message: str


class _ToolItem(msgspec.Struct, tag_field="type", forbid_unknown_fields=True):
    """A tool item: its call, its outcome once completed, and its output so far (commands only)."""

    id: str

    def call(self) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def outcome(self) -> Outcome:
        return "success", None, None

    def output(self) -> str | None:
        return None


class _CommandItem(_ToolItem, tag=_COMMAND):
    command: str | None = None
    aggregated_output: str | None = None
    status: str | None = None
    exit_code: _Int64 | None = None

    def call(self) -> tuple[str, dict[str, Any]]:
        return _COMMAND, {"command": self.command or ""}

    def outcome(self) -> Outcome:
        return _command_result(self.status, self.exit_code, self.aggregated_output or "")

    def output(self) -> str | None:
        return self.aggregated_output


class _FileItem(_ToolItem, tag="file_change"):
    changes: list[Any] | None = None
    status: str | None = None

    def call(self) -> tuple[str, dict[str, Any]]:
        return "file_change", {"changes": self.changes or []}

    def outcome(self) -> Outcome:
        return _file_result(self.changes, self.status)


class _McpResult(msgspec.Struct, forbid_unknown_fields=True):
    content: list[Any] | None = None
    structured_content: Any = None


class _McpError(msgspec.Struct, forbid_unknown_fields=True):
    message: str | None = None


class _McpItem(_ToolItem, tag="mcp_tool_call"):
    """Arguments sent as a JSON string take the careful path, which parses them."""

    tool: str
    server: str | None = None
    arguments: dict[str, Any] | None = None
    result: _McpResult | None = None
    error: _McpError | None = None
    status: str | None = None

    def call(self) -> tuple[str, dict[str, Any]]:
        return _mcp_name(self.server or "", self.tool), self.arguments if self.arguments is not None else {}

    def outcome(self) -> Outcome:
        result, error = self.result, self.error
        output = _mcp_output(result.content, result.structured_content) if result is not None else None
        message = error.message if error is not None else None
        return _mcp_result(output, self.status, message, failed=error is not None)


class _SearchItem(_ToolItem, tag="web_search"):
    query: str | None = None
    action: dict[str, Any] | None = None

    def call(self) -> tuple[str, dict[str, Any]]:
        return _search_arguments(self.query, self.action)

    def outcome(self) -> Outcome:
        return _search_result(self.query, self.action)


class _TodoItem(msgspec.Struct, tag="todo_list", tag_field="type", forbid_unknown_fields=True):
    id: str
    items: list[Any] | None = None


_HotItem = (
    _MessageItem | _ReasoningItem | _ErrorItem | _CommandItem | _FileItem | _McpItem | _SearchItem | _TodoItem
)
_TOOL_ITEMS: frozenset[type[_ToolItem]] = frozenset({_CommandItem, _FileItem, _McpItem, _SearchItem})


class _ItemLine(msgspec.Struct, tag_field="type", forbid_unknown_fields=True):
    item: _HotItem
    phase: ClassVar[str]


class _ItemStarted(_ItemLine, tag="item.started"):
    phase = "started"


class _ItemUpdated(_ItemLine, tag="item.updated"):
    phase = "updated"


class _ItemCompleted(_ItemLine, tag="item.completed"):
    phase = "completed"


class _TurnStarted(msgspec.Struct, tag="turn.started", tag_field="type", forbid_unknown_fields=True):
    pass


_Count = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
"""A token count as Codex writes it (:meth:`Tokens.read_each` takes such figures as they are)."""


class _Usage(msgspec.Struct, forbid_unknown_fields=True):
    """A running total with both of the counts that make one (without them: the careful path)."""

    input_tokens: _Count
    output_tokens: _Count
    cached_input_tokens: _Count = 0
    reasoning_output_tokens: _Count = 0
    cache_write_input_tokens: _Count = 0


class _TurnCompleted(msgspec.Struct, tag="turn.completed", tag_field="type", forbid_unknown_fields=True):
    usage: _Usage | None = None


_TYPED_LINES = msgspec.json.Decoder(
    _ItemStarted | _ItemUpdated | _ItemCompleted | _TurnStarted | _TurnCompleted
)
_SKIMMED_STEPS = ("decode_typed", "typed_ready", "_tool_events", "_text_item", "complete", "emit", "_stamp")
"""What ``codex_skim`` does in C in their stead: a subclass changing one of them skims nothing."""
_SKIM: Final = (
    functools.partial(
        speedups.codex_skim,
        (
            *(_ItemStarted, _ItemUpdated, _ItemCompleted, _CommandItem, ToolPairs),
            *(p.ToolCall, p.ToolProgress, p.ToolResult, UNDECODED, TALLY_KINDS, p, _COMMAND, _NEVER_FINISHED),
            *(_MessageItem, _ReasoningItem, p.Message, p.Reasoning),
        ),
    )
    if speedups
    else None
)


_INT_LIMIT = 2**63
"""Where :meth:`Fields.opt_integer` stops reading integers as they are."""
_TOKEN_FIELDS = (
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_output_tokens",
    "cache_write_input_tokens",
)


class Tokens(NamedTuple):
    """One ``TokenUsage`` object: of a ``token_count`` event, or the ``usage`` of ``codex exec``'s ``turn.completed``."""

    input: int = 0
    cached: int = 0
    output: int = 0
    reasoning: int = 0
    cache_write: int = 0

    @classmethod
    def read(cls, value: object) -> "Tokens | None":
        """The figures, or ``None`` when they cannot all be trusted: no input or output count, or any figure of
        the wrong kind or below 0. A running total read as zeros would make the next one count the session
        again, so an unreadable one is lost whole (the next good total is measured against the last good one).
        """
        if not isinstance(value, dict) or not ("input_tokens" in value or "output_tokens" in value):
            return None
        figures = [value.get(key, 0) for key in _TOKEN_FIELDS]
        if not all(type(n) is int and n >= 0 for n in figures):
            return None
        return cls(*figures)

    @classmethod
    def read_each(cls, usage: Fields, previous: "Tokens | None") -> "Tokens":
        """The figures read liberally (``"12"`` and ``11.6`` are 12), each on its own: one that is missing, null,
        not a number or below 0 is unknown, and counts nothing this time (it keeps ``previous``'s figure, 0 for
        the first total), so the next total that has it is measured against the last one known. What cannot be
        read is reported through ``usage``; the rest of the usage stands.
        """
        obj = usage.obj
        figures = [obj.get(key, 0) for key in _TOKEN_FIELDS]
        if all(type(n) is int and 0 <= n < _INT_LIMIT for n in figures):  # as Codex writes them
            return cls(*figures)
        read: list[int] = []
        for key, last in zip(_TOKEN_FIELDS, previous or cls(), strict=True):
            figure = usage.opt_integer(key)
            if figure is not None and figure < 0:
                usage.lose(key, f"must be a count of 0 or more, not {figure}")
                figure = None
            read.append(last if figure is None else figure)
        return cls(*read)

    @classmethod
    def of(cls, totals: p.UsageTotals) -> "Tokens":
        written = totals.cache_write_tokens
        cache_write = 0 if written is p.UNSET else written
        return cls(
            totals.input_tokens,
            totals.cached_tokens,
            totals.output_tokens,
            totals.reasoning_tokens,
            cache_write,
        )

    def wire(self) -> dict[str, int]:
        """The figures under Codex's names."""
        return dict(zip(_TOKEN_FIELDS, self, strict=True))

    def __add__(self, other: tuple[int, ...]) -> "Tokens":  # type: ignore[override]
        return Tokens(*(mine + theirs for mine, theirs in zip(self, other, strict=True)))

    def usage(self, model: str) -> p.Usage:
        """These figures as one ``usage`` event (the meanings are the same)."""
        return p.Usage(
            model=model,
            input_tokens=self.input,
            cached_tokens=self.cached,
            output_tokens=self.output,
            reasoning_tokens=self.reasoning,
            cache_write_tokens=self.cache_write or p.UNSET,
        )


def growth(previous: Tokens | None, total: Tokens) -> Tokens | None:
    """What a running total grew by since ``previous``; ``None`` when it shrank (a count that started again)."""
    if previous is None:
        return total
    step = Tokens._make(map(operator.sub, total, previous))
    return None if min(step) < 0 else step


class CodexDecoder(EventDecoder):
    dialect = "codex"
    command = "codex exec"
    identifying = identify(
        {
            **dict.fromkeys(
                ("item.started", "item.updated", "item.completed"),
                frozenset({"item", "item.id", "item.type", "item.item_type"}),
            ),
            # it tells a retry notice (out at once) from an error that may fail the turn (held)
            "error": frozenset({"message"}),
        }
    )

    def __init__(self, session_id: str | None = None) -> None:
        super().__init__(session_id)
        self._shown: dict[str, int] = {}
        """Open tool items -> how much of their output already went out as ``tool_progress``."""
        self._texts: dict[str, str] = {}
        """Text of agent messages and reasoning items seen in ``item.updated`` so far."""
        self._last_text: str | None = None
        self._turns = 0
        self._turn_over = False
        """Whether the last turn ended (its ``result`` is out) and no line opened another."""
        self._usage_total: Tokens | None = None
        """The last running total a ``turn.completed`` of this thread reported."""
        self._thread: str | None = None
        self._held: p.Error | None = None
        """The last top-level ``error`` line but a retry notice, held until the next line says whether it is the
        turn's failure (``turn.failed`` repeats it, or the stream ends on it) or one the turn got past."""

    def handler_name(self, kind: str) -> str:
        return "on_" + kind.replace(".", "_")

    typed_lines = _TYPED_LINES
    typed_skim = _SKIM
    """The lines of command items and of completed agent messages and reasoning (most of a session's), read in C
    (``codex_skim`` in ``_speedups.c``) once msgspec has typed them: :meth:`decode_typed`'s steps, inlined."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that reads tool items or stamps events its own way does not skim past its steps."""
        super().__init_subclass__(**kwargs)
        if cls.typed_lines is not _TYPED_LINES or any(
            getattr(cls, name) is not getattr(CodexDecoder, name) for name in _SKIMMED_STEPS
        ):
            cls.typed_skim = None

    def decode_typed(self, hot: Any) -> None:
        """``hot``: an ``_ItemLine`` subclass, ``_TurnStarted`` or ``_TurnCompleted``, told apart by exact type
        (the typed decoder makes no subclass of them, and a test costs less than an ``isinstance`` call)."""
        if self._held is not None:
            self._release(recoverable=True)
        kind = type(hot)
        if kind is _TurnStarted:
            self._open_turn()
            return
        if kind is _TurnCompleted:
            usage = hot.usage
            self._turn_completed(
                None
                if usage is None
                else Tokens(
                    usage.input_tokens,
                    usage.cached_input_tokens,
                    usage.output_tokens,
                    usage.reasoning_output_tokens,
                    usage.cache_write_input_tokens,
                )
            )
            return
        item, phase = hot.item, hot.phase
        item_kind = type(item)
        if item_kind in _TOOL_ITEMS:
            outcome = item.outcome() if phase == "completed" else None
            name, arguments = item.call()
            self._tool_events(item.id, phase, name, arguments, outcome, item.output())
        elif item_kind is _MessageItem or item_kind is _ReasoningItem:
            self._text_item(item.id, item.text or "", phase, reasoning=item.reasoning)
        elif item_kind is _TodoItem:
            self._todo_list(item.items)
        else:
            self._error_item(item.message)

    def decode_object(self, obj: dict[str, Any]) -> None:
        """A held error line goes out, recoverable, before any line but the ``turn.failed`` that may repeat it."""
        if self._held is not None and obj.get("type") != "turn.failed":
            self._release(recoverable=True)
        super().decode_object(obj)

    def _release(self, *, recoverable: bool) -> None:
        held, self._held = self._held, None
        assert held is not None
        held.recoverable = recoverable
        self.emit(held)

    def finish(self) -> list[p.AnyEvent]:
        """A turn cut off right after an ``error`` line ended for that error (older ``exec`` versions stop so
        on a 401), not because the stream was cut: that error is the fatal one the made-up ending names."""
        self.close_open_calls("the stream ended before the item completed")
        if self._held is not None:
            self._release(recoverable=not self.started or self._turn_over)
        return super().finish()

    def on_thread_started(self, f: Fields) -> None:
        """``usage`` totals are the thread's (they go on across ``exec resume``): another thread counts anew."""
        thread_id = f.text("thread_id")
        self.adopt_session(thread_id)
        if thread_id != self._thread:
            self._thread, self._usage_total = thread_id, None
        self.emit(self.started_with_model(self.command), f.ts("timestamp"))
        self._turn_over = False

    def on_turn_started(self, f: Fields) -> None:
        self._open_turn()

    def _open_turn(self) -> None:
        """Nothing to say in a run's first turn (``thread.started`` opened it): ``exec`` runs one turn, and its end
        is the run's end. A turn after an ended one without its own ``thread.started`` gets a made-up start."""
        if self._turn_over or not self.started:
            self.emit(self.started_with_model(self.command, synthetic=True))
        self._turn_over = False

    def on_turn_completed(self, f: Fields) -> None:
        """``usage`` is the thread's running total (with the turns of earlier ``exec resume`` processes): the turn
        used what it grew by since the last ``turn.completed`` of the thread that this reader saw."""
        usage, total = f.opt_sub("usage"), None
        if usage is not None and ("input_tokens" in usage.obj or "output_tokens" in usage.obj):
            total = Tokens.read_each(usage, self._usage_total)
        elif usage is not None:
            f.lose("usage", "cannot be read as a running total of token counts")
        self._turn_completed(total)

    def _turn_completed(self, total: Tokens | None) -> None:
        step = None if total is None else growth(self._usage_total, total)
        if total is not None:
            step = total if step is None else step  # a count that started again: a new process's own
            self._usage_total = total
        self._end_turn()
        if step is not None and any(step):  # zeros: codex reported nothing
            self.emit(step.usage(self.usage_model))
        self.emit(self._result(ok=True))

    def on_turn_failed(self, f: Fields) -> None:
        """The ``error`` line just before is this failure's own report (Codex writes it twice): one fatal error,
        with this line's message, else that line's."""
        error = f.opt_sub("error")
        message = error.opt_text("message") if error is not None else None
        held, self._held = self._held, None
        if not message and held is not None:
            message = held.message
        message = message or "the turn failed"
        self._end_turn()
        info = p.ErrorInfo(code=_error_code(message), message=message)
        self.emit(p.Error(code=info.code, message=message, recoverable=False))
        self.emit(self._result(ok=False, error=info))

    def _end_turn(self) -> None:
        self._turns += 1
        self._turn_over = True
        self.close_named_runs()
        self.close_open_calls("the turn ended before the item completed")
        self._shown.clear()
        self._texts.clear()

    def _result(self, *, ok: bool, error: p.ErrorInfo | None = None) -> p.Result:
        return p.Result(
            ok=ok,
            subtype="success" if ok else "error",
            exit_code=0 if ok else 1,
            turn_count=self._turns,
            tools_used=list(self.tally.tools_used),
            usage=msgspec.structs.replace(self.tally.usage),
            result=self._last_text if self._last_text is not None else p.UNSET,
            error=error if error is not None else p.UNSET,
        )

    def on_error(self, f: Fields) -> None:
        """A retry notice goes out at once: Codex waits after it (seconds, growing with each attempt) before the
        next line, and the notice is never the turn's failure (Codex was still trying). Any other error line is
        held (see ``_held``)."""
        error = _line_error(f.text("message"))
        if self._held is not None:
            self._release(recoverable=True)
        if error.details is p.UNSET:  # not a retry notice, which names its attempt
            self._held = error
        else:
            self.emit(error)

    def on_item_started(self, f: Fields) -> None:
        self._item(f, "started")

    def on_item_updated(self, f: Fields) -> None:
        self._item(f, "updated")

    def on_item_completed(self, f: Fields) -> None:
        self._item(f, "completed")

    def _item(self, f: Fields, phase: str) -> None:
        item = f.sub("item")
        item_id = item.text("id")
        kind = item.opt_text("type") or item.opt_text("item_type")
        if kind is None:
            item.fail("field 'type' is missing (expected a string)")
        kind = _RENAMED.get(kind, kind)
        if kind in ("agent_message", "reasoning"):
            self._text_item(item_id, item.opt_text("text") or "", phase, reasoning=kind == "reasoning")
        elif kind in _TOOLS:
            self._tool_item(item, item_id, phase, kind)
        elif kind == "todo_list":
            self._todo_list(item.opt_list("items"))
        elif kind == "error":
            self._error_item(item.text("message"))
        else:
            self.pass_through(f.text("type"), f.obj)

    def _error_item(self, message: str) -> None:
        self.emit(p.Error(code=_error_code(message), message=message, recoverable=True))

    def _text_item(self, item_id: str, text: str, phase: str, *, reasoning: bool) -> None:
        if phase != "completed":
            seen = self._texts.get(item_id, "")
            if text.startswith(seen) and len(text) > len(seen):
                self.delta(item_id, text[len(seen) :], reasoning=reasoning)
            self._texts[item_id] = text
            return
        self._texts.pop(item_id, None)
        if not reasoning:
            self._last_text = text
        self.complete(item_id, text, reasoning=reasoning)

    def _tool_item(self, item: Fields, item_id: str, phase: str, kind: str) -> None:
        call_spec, outcome_spec = _TOOLS[kind]
        name, arguments = call_spec(item)
        outcome = outcome_spec(item) if phase == "completed" else None
        output = item.opt_text("aggregated_output") if kind == _COMMAND else None
        self._tool_events(item_id, phase, name, arguments, outcome, output)

    def _tool_events(
        self,
        item_id: str,
        phase: str,
        name: str,
        arguments: dict[str, Any],
        outcome: Outcome | None,
        output: str | None,
    ) -> None:
        if item_id not in self._shown:
            self._shown[item_id] = 0
            self.emit(p.ToolCall(call_id=self.tools.called(item_id, name), name=name, arguments=arguments))
        if phase == "updated" and output and len(output) > self._shown[item_id]:
            self.emit(p.ToolProgress(call_id=item_id, content=output[self._shown[item_id] :]))
            self._shown[item_id] = len(output)
        if outcome is None:
            return
        del self._shown[item_id]
        status, text, error = outcome
        call_id, name = self.tools.finished(item_id, None)
        self.emit(
            p.ToolResult(
                call_id=call_id,
                name=name,
                status=status,
                output=text if text is not None else p.UNSET,
                error=error if error is not None else p.UNSET,
            )
        )

    def _todo_list(self, items: list[Any] | None) -> None:
        entries = [entry for entry in items or [] if isinstance(entry, dict)]
        done = sum(entry.get("completed") is True for entry in entries)
        lines = [
            f"[{'x' if entry.get('completed') is True else ' '}] {entry.get('text', '')}" for entry in entries
        ]
        self.emit(p.Progress(name="todo_list", current=done, total=len(entries), message="\n".join(lines)))


# -- encoding ----------------------------------------------------------------------------


class CodexEncoder(EventEncoder):
    """Canonical events as ``codex exec --json`` lines: one thread, one turn, items numbered ``item_0``…

    Tool calls become ``command_execution`` (a call named so, with a string
    ``command``), ``file_change``, ``web_search`` or, for every other tool,
    ``mcp_tool_call`` (``mcp__server__tool`` names split into server and tool).
    """

    fold_fatal = True

    def __init__(self) -> None:
        super().__init__()
        self._next_item = 0
        self._calls: dict[str, dict[str, Any]] = {}
        """Open tool calls -> the item they are (its fields so far)."""
        self._usage = p.UsageTotals()
        self._usage_seen = False
        self._thread_usage = Tokens()

    def end_turn(self) -> None:
        """Item numbers go on through the session; ``turn.completed`` gives the thread's running total."""
        super().end_turn()
        self._calls.clear()
        self._usage = p.UsageTotals()
        self._usage_seen = False

    def _item_id(self) -> str:
        item_id = f"item_{self._next_item}"
        self._next_item += 1
        return item_id

    def on_start(self, event: p.Start) -> list[dict[str, Any]]:
        """Each turn as ``codex exec resume`` writes one: the thread it goes on, then the turn."""
        return [{"type": "thread.started", "thread_id": event.session_id}, {"type": "turn.started"}]

    def on_message(self, event: p.Message) -> list[dict[str, Any]]:
        if event.role != "assistant":
            return []
        item = {"id": self._item_id(), "type": "agent_message", "text": event.content}
        return [{"type": "item.completed", "item": item}]

    def on_reasoning(self, event: p.Reasoning) -> list[dict[str, Any]]:
        item = {"id": self._item_id(), "type": "reasoning", "text": event.content}
        return [{"type": "item.completed", "item": item}]

    def on_tool_call(self, event: p.ToolCall) -> list[dict[str, Any]]:
        item: dict[str, Any] = {"id": self._item_id()}
        arguments, name = event.arguments, event.name
        if name == _COMMAND and isinstance(arguments.get("command"), str):
            item.update(type=_COMMAND, command=arguments["command"], aggregated_output="")
        elif name == "file_change" and isinstance(arguments.get("changes"), list):
            item.update(type="file_change", changes=arguments["changes"])
        elif name == "web_search" and isinstance(arguments.get("query"), str):
            item.update(type="web_search", query=arguments["query"])
        else:
            server, tool = _split_mcp(name)
            item.update(type="mcp_tool_call", server=server, tool=tool, arguments=arguments)
        self._calls[event.call_id] = item
        return [{"type": "item.started", "item": {**item, "status": "in_progress"}}]

    def on_tool_progress(self, event: p.ToolProgress) -> list[dict[str, Any]]:
        item = self._calls.get(event.call_id)
        if item is None or item["type"] != _COMMAND:
            return []
        item["aggregated_output"] += event.content
        return [{"type": "item.updated", "item": {**item, "status": "in_progress"}}]

    def on_tool_result(self, event: p.ToolResult) -> list[dict[str, Any]]:
        item = self._calls.pop(event.call_id, None)
        if item is None:
            return []
        ok = event.status == "success"
        output = event.output if event.output is not p.UNSET else None
        if item["type"] == _COMMAND:
            item.update(aggregated_output=output or "", **_command_end(event))
        elif item["type"] == "mcp_tool_call":
            if output is not None:
                item["result"] = {"content": [{"type": "text", "text": output}], "structured_content": None}
            if event.error is not p.UNSET:
                item["error"] = {"message": event.error}
            item["status"] = "completed" if ok else "failed"
        elif item["type"] == "file_change":
            item["status"] = "completed" if ok else "failed"
        return [{"type": "item.completed", "item": item}]

    def on_usage(self, event: p.Usage) -> list[dict[str, Any]]:
        self._usage.add(event)
        self._usage_seen = True
        return []

    def on_error(self, event: p.Error) -> list[dict[str, Any]]:
        return [
            {
                "type": "item.completed",
                "item": {"id": self._item_id(), "type": "error", "message": event.message},
            }
        ]

    def on_result(self, event: p.Result) -> list[dict[str, Any]]:
        if not event.ok:
            failure = self.failure(event)
            message = failure.message if failure is not None else "the turn failed"
            return [{"type": "turn.failed", "error": {"message": message}}]
        self._thread_usage += Tokens.of(self._usage if self._usage_seen else event.usage)
        return [{"type": "turn.completed", "usage": self._thread_usage.wire()}]


def _split_mcp(name: str) -> tuple[str, str]:
    """``mcp__server__tool`` -> (server, tool); any other name is a tool of no server."""
    if name.startswith(_MCP_PREFIX):
        server, sep, tool = name.removeprefix(_MCP_PREFIX).partition("__")
        if sep and server and tool:
            return server, tool
    return "", name


def _command_end(event: p.ToolResult) -> dict[str, Any]:
    """``exit_code`` and ``status`` of a finished command (the inverse of :func:`_command_outcome`)."""
    if event.status == "success":
        return {"exit_code": 0, "status": "completed"}
    if event.status == "denied":
        return {"exit_code": None, "status": "declined"}
    if event.status == "cancelled":
        return {"exit_code": None, "status": "failed"}
    found = re.fullmatch(_EXIT, event.error) if isinstance(event.error, str) else None
    return {"exit_code": int(found[1]) if found else 1, "status": "failed"}


class CodexDialect(SimpleDialect):
    name = "codex"
    summary = "OpenAI Codex codex exec --json"
    decoder_class = CodexDecoder
    encoder_class = CodexEncoder

    def named_model(self, argv: Sequence[str]) -> NamedModel | None:
        model = option_value(argv, "codex", ("-m", "--model"))
        return NamedModel(model) if model else None

    def sniff(self, obj: dict[str, Any]) -> float:
        kind = obj.get("type")
        if "v" in obj or "seq" in obj or not isinstance(kind, str):
            return 0.0
        if kind == "thread.started" and isinstance(obj.get("thread_id"), str):
            return 1.0
        if kind.startswith("item.") and isinstance(obj.get("item"), dict):
            return 0.9
        if kind in ("turn.started", "turn.completed", "turn.failed"):
            return 0.9
        return 0.0


DIALECT = CodexDialect()
