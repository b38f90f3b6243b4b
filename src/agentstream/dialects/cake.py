"""cake ``--output-format stream-json``: acai's Responses-style items between task boundaries.

cake is acai renamed. Its stream-json output (the ``StreamRecord`` enum of cake's
``src/types/session.rs``) keeps acai's item lines (``message``, ``reasoning``,
``function_call``, ``function_call_output``, now with an RFC 3339 ``timestamp``) and
frames each invocation with ``task_start`` and ``task_complete`` (whose outcome is
flattened into it: ``subtype``, ``is_error``, ``result``, ``error``, ``limit``).
``hook_event`` reports a hook run. ``cake replay`` adds ``session_meta``,
``prompt_context``, ``skill_activated`` and, on failure, ``replay_error``; a session
file adds ``turn_usage``. The item lines decode exactly as acai's do (this decoder is
acai's, extended).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from agentstream import protocol as p
from agentstream.dialects.acai import (
    AcaiDecoder,
    AcaiEncoder,
    segment_texts,
    usage_object,
    usage_totals,
)
from agentstream.dialects.kit import ExitMeaning, Fields, SimpleDialect, epoch_ms, identify, iso, rfc3339
from agentstream.errors import ErrorCode, ExitCode


class _Outcome(NamedTuple):
    """What a ``task_complete`` subtype stands for in a canonical ``result``."""

    subtype: str
    exit_code: int
    code: str
    message: str
    """The error message when the record carries none."""


_FAILED = "cake reported a failure without a message"
_OUTCOMES: dict[str, _Outcome] = {
    "success": _Outcome("success", ExitCode.OK, "", ""),
    "error_during_execution": _Outcome("error", ExitCode.ERROR, ErrorCode.UNKNOWN, _FAILED),
    "error_output_schema": _Outcome(
        "output_schema", ExitCode.ERROR, ErrorCode.UNKNOWN, "the final answer did not match the output schema"
    ),
    "interrupted": _Outcome(
        "interrupted", ExitCode.SIGINT, ErrorCode.INTERRUPTED, "the task was interrupted"
    ),
    "cut_off": _Outcome(
        "cut_off", ExitCode.ERROR, ErrorCode.PROVIDER_ERROR, "the model's response was cut off"
    ),
    "limit_exceeded": _Outcome(
        "max_turns", ExitCode.MAX_TURNS, ErrorCode.MAX_TURNS, "a run limit was reached"
    ),
}
"""cake's ``TaskCompleteSubtype`` values. cake itself exits 0 after any of them in stream-json mode except
``interrupted`` (130) and ``error_output_schema`` (1); a failed ``result`` needs a non-zero exit code."""
_CAKE_SUBTYPE = {
    "success": "success",
    "interrupted": "interrupted",
    "max_turns": "limit_exceeded",
    "output_schema": "error_output_schema",
    "cut_off": "cut_off",
}
"""The inverse of :data:`_OUTCOMES` for the encoder (any other failure is ``error_during_execution``)."""
_CODE_SUBTYPE = {ErrorCode.INTERRUPTED: "interrupted", ErrorCode.MAX_TURNS: "limit_exceeded"}
_WITH_RESULT = frozenset({"success", "limit_exceeded"})
_LIMITS = ("max_tool_calls", "max_turns")
_REPLAY_CODES = {
    "output_format": ErrorCode.INVALID_INPUT,
    "invalid_uuid": ErrorCode.INVALID_INPUT,
    "session_not_found": ErrorCode.SESSION_NOT_FOUND,
    "corrupt": ErrorCode.SESSION_STORE_ERROR,
    "unsupported_format": ErrorCode.SESSION_STORE_ERROR,
    "permission": ErrorCode.PERMISSION_DENIED,
}
"""cake's ``ReplayErrorKind`` values."""
_CARRIED = ("hook_event", "prompt_context", "skill_activated")
"""Lines with no canonical counterpart, carried whole as an ``event`` named ``cake.<type>``."""
_DENIALS = "cake.permission_denials"
_EXIT_MEANINGS: dict[int, ExitMeaning] = {
    2: ExitMeaning(
        ErrorCode.PROVIDER_ERROR,
        "cake's model API failed (exit 2: rate limit, authentication or network)",
        "check the API key, the provider's rate limits and the network, then run again",
    ),
    3: ExitMeaning(
        ErrorCode.INVALID_INPUT,
        "cake rejected its input (exit 3)",
        "check the prompt, the command-line flags and that the API key is set",
    ),
    130: ExitMeaning(
        ErrorCode.INTERRUPTED,
        "cake was interrupted (exit 130)",
        "nothing to fix if the interrupt was intended",
    ),
}
"""cake's documented exit codes (``src/exit_code.rs``) as canonical errors."""


class CakeDecoder(AcaiDecoder):
    dialect = "cake"
    command = "cake"
    identifying = identify({**AcaiDecoder.identifying, "task_complete": frozenset({"subtype"})})

    def __init__(self, session_id: str | None = None) -> None:
        super().__init__(session_id)
        self._task_open = False
        """Whether a ``task_start`` is still waiting for its ``task_complete``."""
        self._task_ts: str | None = None
        """When the open task started (its ``task_start``'s time)."""
        self._meta: tuple[str, str | None, list[str]] = ("", None, [])
        """The working directory, model and tools of the session (from ``session_meta``), for each ``start``."""

    def decode_object(self, obj: dict[str, Any]) -> None:
        """Stamp the line's events with its own ``timestamp``. A ``task_complete`` has none: its events are
        stamped with the end of the task (its start plus ``duration_ms``); other events of lines without one,
        with the time read."""
        self.line_ts = rfc3339(obj.get("timestamp"))
        if self.line_ts is None and obj.get("type") == "task_complete":
            self.line_ts = _task_end(self._task_ts, obj.get("duration_ms"))
        super().decode_object(obj)

    def role_of(self, f: Fields) -> p.Role:
        """cake's ``developer`` role (instructions and mutable context) is a system message."""
        if f.obj.get("role") == "developer":
            return "system"
        return super().role_of(f)

    def segments(self, f: Fields) -> list[str]:
        """The summary, or, from a provider that sends no summary, the reasoning ``content`` parts."""
        return super().segments(f) or segment_texts(f, "content")

    def on_session_meta(self, f: Fields) -> None:
        self.adopt_session(f.opt_text("session_id"))
        self._meta = (
            f.opt_text("working_directory") or "",
            f.opt_text("model"),
            f.opt_strings("tools") or [],
        )
        self._open_turn()

    def on_task_start(self, f: Fields) -> None:
        self._task_ts = self.line_ts
        self.adopt_session(f.opt_text("session_id"))
        if self._task_open:
            self._end_unfinished_task()
        self._task_open = True
        self._open_turn()

    def _open_turn(self) -> None:
        """A ``start`` with the session's metadata, unless a turn is open (one a ``session_meta`` opened)."""
        if self.started and not self.turn_ended:
            return
        cwd, model, tools = self._meta
        self.emit(p.Start(command=self.command, cwd=cwd, model=model or p.UNSET, tools=list(tools)))

    def _end_unfinished_task(self) -> None:
        """A task that never got its ``task_complete`` (its process was killed) ends as the next one starts."""
        message = "the task ended without a task_complete record"
        self.close_open_calls(f"{message} (no output for this call)")
        self.emit(p.Error(code=ErrorCode.NOT_FINISHED, message=message, recoverable=False, synthetic=True))
        info = self.fatal_info()
        self.emit_result(ok=False, exit_code=ExitCode.ERROR, error=info, synthetic=True)

    def on_task_complete(self, f: Fields) -> None:
        self._task_open = False
        kind = f.text("subtype")
        outcome = _OUTCOMES.get(kind) or _unknown_outcome(f, kind)
        ok = outcome.exit_code == ExitCode.OK
        error = None
        if not ok:
            limit = f.opt_text("limit")
            default = (
                f"the {limit} limit was reached" if limit and kind == "limit_exceeded" else outcome.message
            )
            error = p.ErrorInfo(code=outcome.code, message=f.opt_text("error") or default)
        self.close_open_calls("the task ended before the tool's result")
        denials = f.opt_strings("permission_denials")
        if denials:
            self.emit(p.GenericEvent(name=_DENIALS, data=denials))
        usage = f.opt_sub("usage")
        result = f.opt_text("result")
        self.emit_result(
            ok=ok,
            exit_code=outcome.exit_code,
            error=error,
            subtype=outcome.subtype,
            duration_ms=f.opt_integer("duration_ms") or 0,
            turn_count=f.opt_integer("turn_count") or 0,
            usage=usage_totals(usage) if usage is not None else self.tally.usage,
            result=result if result is not None else p.UNSET,
        )

    def on_hook_event(self, f: Fields) -> None:
        self._carry("hook_event", f)

    def on_prompt_context(self, f: Fields) -> None:
        self._carry("prompt_context", f)

    def on_skill_activated(self, f: Fields) -> None:
        self._carry("skill_activated", f)

    def _carry(self, kind: str, f: Fields) -> None:
        self.emit(p.GenericEvent(name=f"cake.{kind}", data={k: v for k, v in f.obj.items() if k != "type"}))

    def on_turn_usage(self, f: Fields) -> None:
        """A session file's per-turn usage (stream-json never carries it) is that turn's ``usage``."""
        usage = f.opt_sub("usage")
        if usage is None:
            return
        self.emit(usage_totals(usage).as_usage(self._meta[1] or "unknown"))

    def on_replay_error(self, f: Fields) -> None:
        """``cake replay`` could not read the session: the run fails with the exit code cake names."""
        self.adopt_session(f.opt_text("session_id"))
        code = _REPLAY_CODES.get(f.opt_text("kind") or "", ErrorCode.UNKNOWN)
        message = f.opt_text("error") or "cake could not replay the session"
        exit_code = f.opt_integer("exit_code") or ExitCode.ERROR
        self.emit_result(ok=False, exit_code=exit_code, error=p.ErrorInfo(code=code, message=message))


def _task_end(started: str | None, duration_ms: object) -> str | None:
    """The moment a task that started at ``started`` and took ``duration_ms`` ended, when both are known."""
    if started is None or type(duration_ms) is not int or duration_ms < 0:
        return None
    return rfc3339(epoch_ms(started) + duration_ms)


def _unknown_outcome(f: Fields, kind: str) -> _Outcome:
    """A subtype this decoder does not know: its ``is_error`` (or ``success``) says whether the task failed."""
    failed = f.opt_flag("is_error")
    success = f.opt_flag("success")
    ok = success if success is not None else failed is False
    if ok:
        return _OUTCOMES["success"]
    return _Outcome(kind or "error", ExitCode.ERROR, ErrorCode.UNKNOWN, _FAILED)


class CakeEncoder(AcaiEncoder):
    """acai's item lines with a ``timestamp``, each turn between ``task_start`` and ``task_complete``."""

    def __init__(self) -> None:
        super().__init__()
        self._meta_written = False
        self._task_id = ""
        self._calls = 0
        self._denials: list[str] = []

    def end_turn(self) -> None:
        super().end_turn()
        self._calls = 0
        self._denials = []

    def on_start(self, event: p.Start) -> list[dict[str, Any]]:
        """``task_start``, after a ``session_meta`` (as ``cake replay`` writes one) for what it cannot carry."""
        lines: list[dict[str, Any]] = []
        model = event.model if isinstance(event.model, str) else None
        if not self._meta_written and (event.cwd or event.tools or model):
            meta: dict[str, Any] = {
                "type": "session_meta",
                "format_version": 4,
                "session_id": event.session_id,
                "timestamp": iso(event.ts),
                "working_directory": event.cwd,
            }
            if model:
                meta["model"] = model
            meta["tools"] = list(event.tools)
            lines.append(meta)
        self._meta_written = True
        self._task_id = self.made_up_id("task")
        task = {"type": "task_start", "session_id": event.session_id, "task_id": self._task_id}
        return [*lines, {**task, "timestamp": iso(event.ts)}]

    def on_message(self, event: p.Message) -> list[dict[str, Any]]:
        return _timed(super().on_message(event), event)

    def on_reasoning(self, event: p.Reasoning) -> list[dict[str, Any]]:
        summary = [{"type": "summary_text", "text": event.content}]
        return [
            {"type": "reasoning", "id": event.reasoning_id, "summary": summary, "timestamp": iso(event.ts)}
        ]

    def on_tool_call(self, event: p.ToolCall) -> list[dict[str, Any]]:
        self._calls += 1
        return _timed(super().on_tool_call(event), event)

    def on_tool_result(self, event: p.ToolResult) -> list[dict[str, Any]]:
        """A made-up result (a call its run never answered) stays unwritten: cake writes none, and the decoder
        makes the same one up again at the ``task_complete``."""
        if event.synthetic is True:
            return []
        return _timed(super().on_tool_result(event), event)

    def on_event(self, event: p.GenericEvent) -> list[dict[str, Any]]:
        """The lines carried whole come back as they were; permission denials go into the ``task_complete``."""
        data = event.data
        if event.name == _DENIALS and isinstance(data, list):
            self._denials += [item for item in data if isinstance(item, str)]
            return []
        kind = event.name.removeprefix("cake.")
        if kind in _CARRIED and event.name != kind and isinstance(data, dict):
            return [{"type": kind, **{k: v for k, v in data.items() if k != "type"}}]
        return []

    def on_result(self, event: p.Result) -> list[dict[str, Any]]:
        failure = self.failure(event)
        subtype = _cake_subtype(event, failure)
        line: dict[str, Any] = {"type": "task_complete", "subtype": subtype, "is_error": not event.ok}
        if isinstance(event.result, str) and subtype in _WITH_RESULT:
            line["result"] = event.result
        if subtype not in ("success", "interrupted"):
            line["error"] = failure.message if failure is not None else "the run failed"
        if subtype == "limit_exceeded":
            line["limit"] = next((name for name in _LIMITS if name in line["error"]), "max_turns")
        line.update(
            duration_ms=event.duration_ms,
            turn_count=event.turn_count,
            tool_call_count=self._calls,
            session_id=event.session_id or self.session_id,
            task_id=self._task_id,
            usage=usage_object(event.usage),
        )
        if self._denials:
            line["permission_denials"] = list(self._denials)
        return [line]


def _timed(lines: list[dict[str, Any]], event: p.Event) -> list[dict[str, Any]]:
    """acai's lines with cake's ``timestamp`` (the event's time) last, where cake writes it."""
    return [{**line, "timestamp": iso(event.ts)} for line in lines]


def _cake_subtype(event: p.Result, failure: p.ErrorInfo | None) -> str:
    """The ``task_complete`` subtype for a canonical result: by its subtype, else its error's code."""
    if event.ok:
        return "success"
    if event.subtype in _CAKE_SUBTYPE:
        return _CAKE_SUBTYPE[event.subtype]
    code = failure.code if failure is not None else ""
    return _CODE_SUBTYPE.get(code, "error_during_execution")


class CakeDialect(SimpleDialect):
    name = "cake"
    summary = "cake --output-format stream-json (acai's items between task_start and task_complete)"
    decoder_class = CakeDecoder
    encoder_class = CakeEncoder

    def error_for_exit(self, status: int) -> ExitMeaning | None:
        """cake's exit codes 2 (API), 3 (input) and 130 (interrupted); see ``_EXIT_MEANINGS``."""
        return _EXIT_MEANINGS.get(status)

    def sniff(self, obj: dict[str, Any]) -> float:
        """Task and replay records are cake's alone; an item line is cake's only with a string ``timestamp``
        (acai's never have one), and a ``message`` only with its ``id`` too (Gemini's have a timestamp)."""
        if "v" in obj or "seq" in obj:
            return 0.0
        kind = obj.get("type")
        if kind in ("task_start", "task_complete") and isinstance(obj.get("task_id"), str):
            return 0.98
        if kind == "session_meta" and "working_directory" in obj and "format_version" in obj:
            return 0.95
        if kind in ("hook_event", "prompt_context", "skill_activated", "turn_usage") and "task_id" in obj:
            return 0.9
        if kind == "replay_error" and "kind" in obj and "exit_code" in obj:
            return 0.9
        if not isinstance(obj.get("timestamp"), str):
            return 0.0
        if kind == "function_call" and isinstance(obj.get("arguments"), str) and "call_id" in obj:
            return 0.85
        if kind == "reasoning" and "id" in obj and ("summary" in obj or "content" in obj):
            return 0.7
        if kind == "function_call_output" and "call_id" in obj:
            return 0.7
        if kind == "message" and "id" in obj and "role" in obj and "content" in obj:
            return 0.65
        return 0.0


DIALECT = CakeDialect()
