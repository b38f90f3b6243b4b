"""opencode ``opencode run --format json``: finished message parts, one per line.

Every line is ``{type, timestamp (epoch ms), sessionID, ...}``. Types:
``step_start`` / ``step_finish`` (one model call; the finish carries ``reason``,
``cost`` and ``tokens``), ``text`` and ``reasoning`` (a part, only once it is
complete: opencode streams no deltas; reasoning only with ``--thinking``),
``tool_use`` (only once the tool is ``completed`` or ``error``), ``error`` (a
session error: the run will exit 1) and, in some versions, a closing ``done``
(``reason: "idle"``, auto-rejected ``permissions``). opencode 1.18 prints no
``done``: its run is over once a step finishes for a reason other than
``tool-calls`` (the model stopped, or hit its output limit), after a step whose
tool call a permission rule rejected (opencode stops there and exits 0), or after a
session error other than a context overflow (which opencode compacts and goes on).
Each run prints its own session on every line, so the outputs of several runs
appended read as runs of their own: a line of another session, or a model call or
error after the run was over, opens the next one.

opencode has no start line, never names the model (a spawned ``opencode``'s start and
usage name the one its ``-m``/``--model provider/model`` option asks for, else
``unknown``) and never echoes the prompt. A ``text`` part marked
``synthetic`` is opencode's own words in a user message (the note it adds after
compacting a conversation), not the model's. ``tokens.input`` leaves
out cache reads and writes, and ``tokens.output`` leaves out ``reasoning``
(``getUsage`` subtracts them); canonical ``input_tokens`` and ``output_tokens``
count them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from agentstream import protocol as p
from agentstream.dialects.base import UNKNOWN_MODEL, NamedModel, option_value
from agentstream.dialects.kit import (
    EventDecoder,
    EventEncoder,
    Fields,
    SimpleDialect,
    epoch_ms,
    first_keys,
    identify,
    rfc3339,
)
from agentstream.errors import ErrorCode, code_from_wording
from agentstream.transcript import Tally

_TYPES = frozenset({"step_start", "step_finish", "text", "reasoning", "tool_use", "error", "done"})
# opencode's session error names (NamedError.name); the first one per code is the one we write.
_ERROR_NAMES: dict[str, str] = {
    "UnknownError": ErrorCode.UNKNOWN,
    "ProviderAuthError": ErrorCode.AUTH_EXPIRED,
    "APIError": ErrorCode.PROVIDER_ERROR,
    "ContextOverflowError": ErrorCode.CONTEXT_LIMIT,
    "MessageOutputLengthError": ErrorCode.CONTEXT_LIMIT,
    "MessageAbortedError": ErrorCode.INTERRUPTED,
}
_NAME_FOR_CODE = first_keys(_ERROR_NAMES)
_STATUS_CODES = {401: ErrorCode.AUTH_EXPIRED, 403: ErrorCode.PERMISSION_DENIED, 429: ErrorCode.RATE_LIMITED}
"""An ``APIError``'s HTTP status, when it names the failure better than the error's name does."""
_FINAL = frozenset({"stop", "length", "content-filter", "error", "other"})
"""Step finish reasons (the AI SDK's) after which opencode calls the model no more; after ``tool-calls`` (and
``unknown``) it does."""
_REJECTED = "The user rejected permission to use this specific tool call."
"""opencode's error for a tool call a permission rule turned down (``PermissionRejectedError``): the run stops
after that step."""
_OVERFLOW = "ContextOverflowError"
"""The session error opencode goes on after (it compacts the conversation); after any other the run stops."""
_RUN_OPENERS = frozenset({"step_start", "error"})
"""What the next run opens with (its first model call, or the error that failed it): after the run was over, such
a line is the next run's."""
_CUT_SHORT = "the run's output stopped before it ended, and another run's followed"
_NO_REASON = "unknown"
"""The AI SDK's finish reason for a step that gave none: the encoder's, as a canonical ``usage`` does not say why the
model stopped, and a reason that ends the run (``stop``) on a step that more steps follow would split the run."""


class OpencodeDecoder(EventDecoder):
    dialect = "opencode"
    command = "opencode run"
    identifying = identify(
        {
            # the session tells one run's lines from the next run's
            "*": frozenset({"sessionID"}),
            # the error's name tells whether opencode goes on after it (it compacts after a context overflow)
            "error": frozenset({"error", "error.name"}),
            # a tool's status tells a call still running from a finished one
            "tool_use": frozenset({"part", "part.callID", "part.tool", "part.state", "part.state.status"}),
            # without ``done``, a step that finished with reason ``stop`` ends the run
            "step_finish": frozenset({"part", "part.reason"}),
        }
    )

    def __init__(self, session_id: str | None = None) -> None:
        super().__init__(session_id)
        self._held: tuple[p.ErrorInfo, str | None] | None = None
        """The last session error, held to see whether the run ends right after it."""
        self._failed: p.ErrorInfo | None = None
        """Any session error fails the run (opencode then exits 1), even when the run goes on."""
        self._running: set[str] = set()
        self._over = False
        """The last step ended the run: opencode calls the model no more."""
        self._rejected = False
        """A permission rule turned down one of this step's tool calls: opencode stops after the step."""
        self._last_text: str | None = None
        self._ended = False
        self._run_session: str | None = None
        """The session the current run's lines name."""
        self._began: str | None = None
        """The time of the current run's first line: its ``result``'s duration runs from there to its last."""

    def decode_object(self, obj: dict[str, Any]) -> None:
        """Every line names the session and its time; the time also stamps the events that carry none of their
        own (a ``log`` warning, the ending made up at EOF), so the stream's times do not jump to the clock's. The
        stream is the first run's session, and a run that ends as the next one begins ends at its own last time."""
        kind = self.rules_kind(obj)
        session_id = self.fields(obj, f"{self.dialect} '{kind}' line", kind).opt_text("sessionID")
        if not self._ended and self._opens_next_run(kind, session_id):
            self._end_before_next_run()
        self.adopt_session(session_id)
        stamp = obj.get("timestamp")
        ts = rfc3339(stamp) if type(stamp) is int else _liberal_time(obj)
        if ts is not None:
            self.line_ts = ts
        if self._ended:
            self._next_run()
        self._began = self._began or ts
        self._run_session = self._run_session or session_id
        if self._held is not None and obj.get("type") not in ("error", "done"):
            self._release_error()
        super().decode_object(obj)

    def _opens_next_run(self, kind: str, session_id: str | None) -> bool:
        """Whether a line belongs to the run after this one (outputs of ``opencode run`` appended): it names another
        session, or it opens a run (see ``_RUN_OPENERS``) after this one was over."""
        other_session = session_id is not None and self._run_session not in (None, session_id)
        return other_session or (self._over and kind in _RUN_OPENERS)

    def _end_before_next_run(self) -> None:
        """End this run as EOF would, but for a run whose output stops before it ended (its process was stopped):
        the next run's lines follow, so its ending is made up here rather than by the reader at the end."""
        if self._ends_here():
            self._end()
            return
        self.close_open_calls(f"{_CUT_SHORT} (no result for this call)")
        self._failed = p.ErrorInfo(code=ErrorCode.STREAM_TRUNCATED, message=_CUT_SHORT)
        self.emit(p.Error(code=self._failed.code, message=_CUT_SHORT, recoverable=False, synthetic=True))
        self._end(synthetic=True)

    def _ends_here(self) -> bool:
        """Whether the lines read tell how the run ended: an error, or a last step that ended it."""
        return self._failed is not None or self._over

    def _next_run(self) -> None:
        """The next run's first line (after ``done``, or see :meth:`_opens_next_run`): it opens with a start made
        up as the first run's is, and how it ends, its session, steps, tools and usage are its own."""
        self._ended, self._failed, self._last_text = False, None, None
        self._rejected, self._run_session, self._began = False, None, None
        self.tally = Tally()
        self.emit(self.started_with_model(self.command, synthetic=True))

    def _release_error(self) -> None:
        """The run went on after a session error: report it now; the result still fails."""
        assert self._held is not None
        (info, ts), self._held = self._held, None
        self.emit(p.Error(code=info.code, message=info.message, recoverable=True), ts)

    def finish(self) -> list[p.AnyEvent]:
        """EOF without ``done``: an error, or a last step that ended the run, still tells how the run ended."""
        if not self._ended and self._ends_here():
            self._end()
        return super().finish()

    def on_step_start(self, f: Fields) -> None:
        """The run's first step opens it: the start made up for it has the step's time, not a later line's."""
        f.opt_sub("part")
        self._over = self._rejected = False
        if not self.started:
            self.emit(self.started_with_model(self.command, synthetic=True))

    def on_step_finish(self, f: Fields) -> None:
        part = f.sub("part")
        tokens = part.opt_sub("tokens")
        cost = part.opt_number("cost")
        reason = part.opt_text("reason")
        self._over = reason in _FINAL or self._rejected
        if tokens is None:
            return
        cache = tokens.opt_sub("cache")
        read = (cache.opt_integer("read") if cache else None) or 0
        write = (cache.opt_integer("write") if cache else None) or 0
        reasoning = tokens.opt_integer("reasoning") or 0
        usage = p.Usage(
            model=self.usage_model,
            input_tokens=(tokens.opt_integer("input") or 0) + read + write,
            output_tokens=(tokens.opt_integer("output") or 0) + reasoning,
            cached_tokens=read,
            reasoning_tokens=reasoning,
            cache_write_tokens=write or p.UNSET,
        )
        if cost:
            usage.cost_usd = float(cost)
        if usage.input_tokens or usage.output_tokens or usage.reasoning_tokens or cost:
            self.emit(usage)

    def on_text(self, f: Fields) -> None:
        """The model's text comes inside a step; after the step that stopped, only opencode's own note after
        compacting the conversation (``synthetic``) does, and the run goes on."""
        part = f.sub("part")
        text, part_id = part.text("text"), part.opt_text("id") or p.new_id("msg")
        self._over = False
        if part.opt_flag("synthetic"):
            self.emit(p.Message(message_id=part_id, role="user", content=text))
            return
        self._last_text = text
        self.emit(p.Message(message_id=part_id, role="assistant", content=text))

    def on_reasoning(self, f: Fields) -> None:
        part = f.sub("part")
        text, part_id = part.text("text"), part.opt_text("id") or p.new_id("rsn")
        self.emit(p.Reasoning(reasoning_id=part_id, content=text))

    def on_tool_use(self, f: Fields) -> None:
        part = f.sub("part")
        call_id, name, state = part.text("callID"), part.text("tool"), part.sub("state")
        status = state.choice("status", ("completed", "error", "running", "pending"), "")
        arguments = state.opt_mapping("input") or {}
        output, error = state.opt_text("output"), state.opt_text("error")
        timing = state.opt_sub("time")
        start, end = (timing.opt_integer("start"), timing.opt_integer("end")) if timing else (None, None)
        if call_id not in self._running:
            self._running.add(call_id)
            self.emit(
                p.ToolCall(call_id=self.tools.called(call_id, name), name=name, arguments=arguments),
                _ts(start),
            )
        if status not in ("completed", "error"):
            return  # opencode prints only finished tools; one still running is closed at the end
        self._running.discard(call_id)
        self._rejected = self._rejected or error == _REJECTED
        call_id, name = self.tools.finished(call_id, name)
        self.emit(
            p.ToolResult(
                call_id=call_id,
                name=name,
                status="success" if status == "completed" else "error",
                output=output if output is not None else p.UNSET,
                error=(error if error is not None else "the tool failed") if status == "error" else p.UNSET,
                duration_ms=max(end - start, 0) if start is not None and end is not None else 0,
            ),
            _ts(end),
        )

    def on_error(self, f: Fields) -> None:
        error = f.sub("error")
        name, data = error.opt_text("name") or "UnknownError", error.opt_sub("data")
        message = (
            (data.opt_text("message") if data is not None else None) or error.opt_text("message") or name
        )
        code = _ERROR_NAMES.get(name, ErrorCode.UNKNOWN)
        status = data.opt_integer("statusCode") if data is not None else None
        if code == ErrorCode.UNKNOWN:
            code = code_from_wording(message)
        if status is not None:
            code = _STATUS_CODES.get(status, code)
        if self._held is not None:
            self._release_error()
        self._failed = p.ErrorInfo(code=code, message=message)
        self._held = (self._failed, self.line_ts)
        self._over = self._over or name != _OVERFLOW

    def on_done(self, f: Fields) -> None:
        rejected = f.opt_list("rejected") or []
        if rejected:
            self.emit(p.GenericEvent(name="opencode.rejected", data=rejected))
        self._end()

    def _end(self, *, synthetic: bool = False) -> None:
        self._ended, self._over = True, False
        self._running.clear()
        self.close_open_calls("opencode finished without the tool's result")
        held, self._held = self._held, None
        if held is not None:
            info, error_ts = held
            self.emit(p.Error(code=info.code, message=info.message, recoverable=False), error_ts)
        ok = self._failed is None
        self.emit(
            p.Result(
                ok=ok,
                subtype="success" if ok else "error",
                exit_code=0 if ok else 1,
                duration_ms=_span_ms(self._began, self.line_ts),
                turn_count=self.tally.turn_count,
                tools_used=list(self.tally.tools_used),
                usage=msgspec.structs.replace(self.tally.usage),
                result=self._last_text if self._last_text is not None else p.UNSET,
                error=self._failed if self._failed is not None else p.UNSET,
                synthetic=True if synthetic else p.UNSET,
            )
        )


def _span_ms(first: str | None, last: str | None) -> int:
    """Milliseconds from one line's time to another's (0 when either is unknown)."""
    return max(epoch_ms(last) - epoch_ms(first), 0) if first and last else 0


def _ts(ms: int | None) -> str | None:
    return rfc3339(ms) if ms is not None else None


def _liberal_time(obj: dict[str, Any]) -> str | None:
    """A ``timestamp`` that is not an integer: epoch ms read as any number is (``"1761000003000"``), or an
    ISO 8601 string; ``None`` when it is neither."""
    stamp = obj.get("timestamp")
    if stamp is None:
        return None
    return rfc3339(Fields(obj, "opencode line").opt_number("timestamp")) or rfc3339(stamp)


# -- encoding ----------------------------------------------------------------------------


class OpencodeEncoder(EventEncoder):
    """Canonical events as opencode parts: a ``usage`` closes a step (``step_finish``), tools print once finished."""

    fold_fatal = True

    def __init__(self) -> None:
        super().__init__()
        self._step: str | None = None
        """The open step's message id (opencode's assistant message)."""
        self._calls: dict[str, p.ToolCall] = {}

    def end_turn(self) -> None:
        super().end_turn()
        self._calls.clear()  # opencode prints a tool once it finished: one left open in a turn that ended never does

    def _line(self, event: p.BaseEvent, kind: str, **data: Any) -> dict[str, Any]:
        return {"type": kind, "timestamp": epoch_ms(event.ts), "sessionID": event.session_id, **data}

    def _part(self, event: p.BaseEvent, part_type: str, part_id: str, **fields: Any) -> dict[str, Any]:
        assert self._step is not None
        return {
            "id": part_id,
            "sessionID": event.session_id,
            "messageID": self._step,
            "type": part_type,
            **fields,
        }

    def _open_step(self, event: p.BaseEvent) -> list[dict[str, Any]]:
        if self._step is not None:
            return []
        self._step = self.made_up_id("msg")
        return [self._line(event, "step_start", part=self._part(event, "step-start", self.made_up_id("prt")))]

    def on_message(self, event: p.Message) -> list[dict[str, Any]]:
        if event.role != "assistant":
            return []
        lines = self._open_step(event)
        moment = epoch_ms(event.ts)
        part = self._part(
            event, "text", event.message_id, text=event.content, time={"start": moment, "end": moment}
        )
        return [*lines, self._line(event, "text", part=part)]

    def on_reasoning(self, event: p.Reasoning) -> list[dict[str, Any]]:
        lines = self._open_step(event)
        moment = epoch_ms(event.ts)
        part = self._part(
            event, "reasoning", event.reasoning_id, text=event.content, time={"start": moment, "end": moment}
        )
        return [*lines, self._line(event, "reasoning", part=part)]

    def on_tool_call(self, event: p.ToolCall) -> list[dict[str, Any]]:
        self._calls[event.call_id] = event
        return []

    def on_tool_result(self, event: p.ToolResult) -> list[dict[str, Any]]:
        call = self._calls.pop(event.call_id, None)
        arguments = call.arguments if call is not None else {}
        end = epoch_ms(event.ts)
        state: dict[str, Any] = {
            "status": "completed" if event.status == "success" else "error",
            "input": arguments,
        }
        if event.output is not p.UNSET:
            state["output"] = event.output
        if event.status != "success":
            state["error"] = event.error if event.error is not p.UNSET else event.status
        state["time"] = {"start": end - event.duration_ms, "end": end}
        lines = self._open_step(event)
        part = self._part(
            event, "tool", self.made_up_id("prt"), callID=event.call_id, tool=event.name, state=state
        )
        return [*lines, self._line(event, "tool_use", part=part)]

    def on_usage(self, event: p.Usage) -> list[dict[str, Any]]:
        return self._open_step(event) + self._close_step(event, event)

    def _close_step(self, event: p.BaseEvent, usage: p.Usage | None = None) -> list[dict[str, Any]]:
        """A ``step_finish`` for the open step, with ``usage``'s tokens (zeros when the step had none); the run's end
        is the ``done`` line's to say."""
        if self._step is None:
            return []
        usage = usage or p.Usage(model=UNKNOWN_MODEL)
        cached = min(usage.cached_tokens, usage.input_tokens)
        written = min(
            0 if usage.cache_write_tokens is p.UNSET else usage.cache_write_tokens,
            usage.input_tokens - cached,
        )
        reasoning = min(usage.reasoning_tokens, usage.output_tokens)
        tokens = {
            "input": usage.input_tokens - cached - written,
            "output": usage.output_tokens - reasoning,
            "reasoning": reasoning,
            "cache": {"read": cached, "write": written},
        }
        cost = usage.cost_usd if usage.cost_usd is not p.UNSET else 0
        part = self._part(
            event, "step-finish", self.made_up_id("prt"), reason=_NO_REASON, cost=cost, tokens=tokens
        )
        self._step = None
        return [self._line(event, "step_finish", part=part)]

    def on_error(self, event: p.Error) -> list[dict[str, Any]]:
        return [self._error_line(event, event.code, event.message)] if not event.recoverable else []

    def _error_line(self, event: p.BaseEvent, code: str, message: str) -> dict[str, Any]:
        error = {"name": _NAME_FOR_CODE.get(code, "UnknownError"), "data": {"message": message}}
        if code == ErrorCode.RATE_LIMITED:
            error = {"name": "APIError", "data": {"message": message, "statusCode": 429}}
        return self._line(event, "error", error=error)

    def on_result(self, event: p.Result) -> list[dict[str, Any]]:
        lines = self._close_step(event)
        if not event.ok:
            failure = self.failure(event)
            code, message = (
                (failure.code, failure.message)
                if failure is not None
                else (ErrorCode.UNKNOWN, f"the run failed ({event.subtype})")
            )
            lines.append(self._error_line(event, code, message))
        return [*lines, self._line(event, "done", reason="idle", rejected=[])]


class OpencodeDialect(SimpleDialect):
    name = "opencode"
    summary = "opencode run --format json"
    has_start_line = False
    decoder_class = OpencodeDecoder
    encoder_class = OpencodeEncoder

    def named_model(self, argv: Sequence[str]) -> NamedModel | None:
        """``provider/model``, as opencode splits it: the provider is the first part, the model the rest."""
        named = option_value(argv, "opencode", ("-m", "--model"))
        if not named:
            return None
        provider, _, model = named.partition("/")
        return NamedModel(model, provider) if provider and model else NamedModel(named)

    def sniff(self, obj: dict[str, Any]) -> float:
        if "v" in obj or "seq" in obj or str(obj.get("type")) not in _TYPES:
            return 0.0
        if not isinstance(obj.get("sessionID"), str) or not isinstance(obj.get("timestamp"), int):
            return 0.0
        return 0.95 if isinstance(obj.get("part"), dict) else 0.8


DIALECT = OpencodeDialect()
