"""Gemini CLI ``--output-format stream-json``.

Lines: ``init`` (session id, model), ``message`` (the user's prompt whole; the
assistant's text only as ``delta: true`` chunks, never as one complete message),
``tool_use``, ``tool_result``, ``error`` (``warning`` or ``error`` severity, not
fatal by itself) and ``result`` (status, optional ``error {type, message}`` and
``stats``). Every line has an ISO 8601 ``timestamp``. Gemini has no reasoning line.

Gemini's exit codes follow the error class that ended the run (see ``_FATAL``), or
for an API error its HTTP status; the decoder puts that code in ``result.exit_code``.
A model reply Gemini cannot use (its InvalidStream, see ``_INVALID_STREAM``) fails the
run though Gemini exits 0: the result says why, and the exit code is 1.
"""

# No ``from __future__ import annotations``: the typed lines' annotations stay real objects, which msgspec
# reads at import far faster than strings (see the note in agentstream.protocol).
import functools
import json
import re
from typing import Any, Final, Literal, NamedTuple, TypedDict

import msgspec

from agentstream import protocol as p
from agentstream._accel import speedups
from agentstream.dialects.kit import (
    UNDECODED,
    EventDecoder,
    EventEncoder,
    ExitMeaning,
    Fields,
    SimpleDialect,
    ToolPairs,
    _Run,
    first_keys,
    identify,
    iso,
    rfc3339,
)
from agentstream.errors import ERROR_CODES, ErrorCode, code_from_wording
from agentstream.transcript import TALLY_KINDS

# (Gemini error type, canonical code, Gemini's exit code). The first row for a code is
# the type the encoder writes for it.
_FATAL: tuple[tuple[str, str, int], ...] = (
    ("FatalError", ErrorCode.UNKNOWN, 1),
    ("FatalAuthenticationError", ErrorCode.AUTH_EXPIRED, 41),
    ("FatalInputError", ErrorCode.INVALID_INPUT, 42),
    ("FatalSandboxError", ErrorCode.UNKNOWN, 44),
    ("FatalConfigError", ErrorCode.INVALID_INPUT, 52),
    ("FatalTurnLimitedError", ErrorCode.MAX_TURNS, 53),
    ("FatalToolExecutionError", ErrorCode.TOOL_FAILED, 54),
    ("FatalUntrustedWorkspaceError", ErrorCode.PERMISSION_DENIED, 55),
    ("FatalCancellationError", ErrorCode.INTERRUPTED, 130),
    # A fatal tool error's result names the tool's own error type (Gemini's ToolErrorType) and exits 54.
    ("no_space_left", ErrorCode.TOOL_FAILED, 54),
)
_BY_TYPE = {kind: (code, exit_code) for kind, code, exit_code in _FATAL}
_EXIT_MEANINGS: dict[int, ExitMeaning] = {
    41: ExitMeaning(
        ErrorCode.AUTH_EXPIRED,
        "gemini could not authenticate (exit 41)",
        "sign in again (run gemini once interactively) or set GEMINI_API_KEY",
    ),
    42: ExitMeaning(
        ErrorCode.INVALID_INPUT,
        "gemini rejected its input (exit 42)",
        "check the prompt and the command-line flags (an empty prompt on stdin is a common cause)",
    ),
    44: ExitMeaning(
        ErrorCode.UNKNOWN,
        "gemini could not start its sandbox (exit 44)",
        "check the sandbox setup (GEMINI_SANDBOX, and that docker or podman runs), or run without --sandbox",
    ),
    52: ExitMeaning(
        ErrorCode.INVALID_INPUT,
        "gemini's configuration is invalid (exit 52)",
        "check settings.json (user and workspace) and the environment gemini reads its settings from",
    ),
    53: ExitMeaning(
        ErrorCode.MAX_TURNS,
        "gemini reached its turn limit (exit 53)",
        "raise the limit (model.maxSessionTurns in settings.json) or split the task",
    ),
    54: ExitMeaning(
        ErrorCode.TOOL_FAILED,
        "a tool failed fatally in gemini (exit 54)",
        "see the child's stderr for the tool's error (no space left on the device is a common cause)",
    ),
    55: ExitMeaning(
        ErrorCode.PERMISSION_DENIED,
        "gemini does not trust this folder (exit 55)",
        "trust the folder (run gemini interactively in it once) or run it from a trusted folder",
    ),
    130: ExitMeaning(
        ErrorCode.INTERRUPTED, "gemini was cancelled (exit 130)", "nothing to fix if the cancel was intended"
    ),
}
"""Gemini CLI's documented exit codes (``ExitCodes`` and the ``Fatal*Error`` classes) as canonical errors."""
_TYPE_FOR_CODE = first_keys({kind: code for kind, code, _ in _FATAL})
_SUBTYPE_FOR_CODE = {ErrorCode.INTERRUPTED: "interrupted", ErrorCode.MAX_TURNS: "max_turns"}
_TYPED_TEXT = re.compile(r"([A-Za-z_][\w.]*): (.*)", re.DOTALL)
_GENERIC_TYPE = "Error"


_API_ERROR = re.compile(r"\[API Error: (?P<inner>.*?)\](?P<advice>\n.*)?", re.DOTALL)
"""How Gemini CLI words an API error (``parseAndFormatApiError``): the error's own message (for an HTTP error,
the Google error body as JSON) in brackets, then advice on a new line, which it adds for a 429 alone."""
_NETWORK_FAILURE = re.compile(
    r"terminated|fetch failed|socket hang up|.*\bE(?:CONNRESET|CONNREFUSED|TIMEDOUT|PIPE)\b.*"
)
"""Node's words for a connection that failed or dropped part-way (``terminated`` is a body cut off)."""


def _api_status(message: str) -> int | None:
    """The HTTP status of an API error as Gemini CLI words it: the ``code`` of the quoted Google error body,
    else 429 when the rate-limit advice follows; None when the words do not tell."""
    match = _API_ERROR.fullmatch(message)
    if match is None:
        return None
    try:
        body = json.loads(match["inner"])
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    if type(code) is int:
        return code
    return 429 if match["advice"] else None


def _wording(message: str) -> str:
    """The canonical code a message names; a dropped or refused connection is the provider's failure."""
    code = code_from_wording(message)
    if code == ErrorCode.UNKNOWN:
        match = _API_ERROR.fullmatch(message)
        if _NETWORK_FAILURE.fullmatch(match["inner"] if match is not None else message):
            return ErrorCode.PROVIDER_ERROR
    return code


def _code_and_exit(error_type: str, message: str) -> tuple[str, int]:
    """The canonical code and Gemini's exit code for an error type; an API error's type says nothing, its words do."""
    if error_type in _BY_TYPE:
        return _BY_TYPE[error_type]
    return (error_type if error_type in ERROR_CODES else _wording(message)), 1


_HTTP_CODES = ((401, ErrorCode.AUTH_EXPIRED), (403, ErrorCode.AUTH_EXPIRED), (429, ErrorCode.RATE_LIMITED))


class _Ending(NamedTuple):
    """One of the ways Gemini CLI finds a model reply unusable (``InvalidStreamError``), in canonical terms."""

    kind: str
    """Gemini's name for it, as ``-o json`` counts it in ``stats.models.*.api.errorsByType``."""
    message: str
    """What Gemini CLI says of it: stream-json's ``error`` line, ``-o json``'s ``error.message``."""
    code: str
    subtype: str


_INVALID_STREAM: tuple[_Ending, ...] = (
    # The first refusal is the type the encoder writes for a refusal. A reply that has text reads as a success
    # whatever its finishReason (SAFETY and MAX_TOKENS too), and Gemini CLI words every other blocked reply
    # without text (PROHIBITED_CONTENT, SPII, ...) as an empty one.
    _Ending(
        "SAFETY_BLOCKED",
        "The model response was blocked due to safety settings.",
        ErrorCode.PROVIDER_ERROR,
        "refusal",
    ),
    _Ending(
        "RECITATION_BLOCKED",
        "The model response was blocked due to recitation/copyright filters.",
        ErrorCode.PROVIDER_ERROR,
        "refusal",
    ),
    _Ending(
        "MAX_TOKENS_EXCEEDED",
        "Model response was truncated because it exceeded the token limit. Try using /compress to free up context "
        "space.",
        ErrorCode.CONTEXT_LIMIT,
        "error",
    ),
    # OTHER is an unknown reason (Gemini CLI's own finish-reason table calls it failed, not a refusal).
    _Ending(
        "OTHER_BLOCKED",
        "The model response was blocked due to other policy settings.",
        ErrorCode.PROVIDER_ERROR,
        "error",
    ),
    _Ending(
        "NO_FINISH_REASON", "Model stream ended without a finish reason.", ErrorCode.PROVIDER_ERROR, "error"
    ),
    _Ending(
        "MALFORMED_FUNCTION_CALL",
        "Model stream ended with malformed function call.",
        ErrorCode.PROVIDER_ERROR,
        "error",
    ),
    _Ending(
        "UNEXPECTED_TOOL_CALL",
        "Model stream ended with unexpected tool call.",
        ErrorCode.PROVIDER_ERROR,
        "error",
    ),
    _Ending(
        "NO_RESPONSE_TEXT",
        "The model returned an empty response with no text or thoughts. This may be a transient API issue; please try "
        "again.",
        ErrorCode.PROVIDER_ERROR,
        "error",
    ),
    _Ending(
        "THINKING_ONLY_RESPONSE",
        "The model returned reasoning thoughts but no final response text. If your context window is near capacity, "
        "try using /compress.",
        ErrorCode.PROVIDER_ERROR,
        "error",
    ),
)
"""Gemini CLI 0.61's InvalidStream endings: it prints a failed result (stream-json's without an error object, after
an ``error`` line that says why) and exits 0."""
_ENDINGS = {key: ending for ending in _INVALID_STREAM for key in (ending.kind, ending.message)}
_INVALID_STREAM_TYPE = "INVALID_STREAM"
"""``-o json``'s error type for every InvalidStream ending; the message tells which."""
_REFUSAL_TYPE = next(ending.kind for ending in _INVALID_STREAM if ending.subtype == "refusal")


def _invalid_stream(message: str, kind: str = _INVALID_STREAM_TYPE) -> tuple[str, str]:
    """The canonical code and result subtype of an InvalidStream ending, known by its kind or its words; any
    other is still an unusable reply from the model's provider."""
    ending = _ENDINGS.get(kind) or _ENDINGS.get(message.strip())
    return (ending.code, ending.subtype) if ending is not None else (ErrorCode.PROVIDER_ERROR, "error")


def _document_failure(error_type: str, code: int | str | None, message: str) -> tuple[str, int, str]:
    """The canonical code, exit status and result subtype of an ``error {type, message, code?}``.

    ``code`` is what Gemini exits with when it is a number (a ``Fatal*Error``'s exit code, or an API error's
    HTTP status, of which the process keeps the low byte); for a fatal tool error it is the tool's error type.
    The error's own type, when known, decides the canonical code. An InvalidStream ending exits 1 (Gemini: 0).
    """
    if error_type == _INVALID_STREAM_TYPE or error_type in _ENDINGS:
        canonical, subtype = _invalid_stream(message, error_type)
        return canonical, 1, subtype
    if isinstance(code, str) and error_type not in _BY_TYPE:
        error_type = code
    canonical, exit_code = _code_and_exit(error_type, message)
    if isinstance(code, int) and code > 0:
        exit_code = code & 0xFF or 1
        if canonical == ErrorCode.UNKNOWN:
            meaning = _EXIT_MEANINGS.get(code)
            canonical = meaning.code if meaning is not None else dict(_HTTP_CODES).get(code, canonical)
            if canonical == ErrorCode.UNKNOWN and code >= 500:
                canonical = ErrorCode.PROVIDER_ERROR
    return canonical, exit_code, _SUBTYPE_FOR_CODE.get(canonical, "error")


_CANCELLED = "[Operation Cancelled]"
"""How Gemini's scheduler begins the error of a cancelled tool call (whose line then says ``success``)."""


def _typed_text(kind: str, message: str) -> str:
    """A tool's ``error {type, message}`` as one string, ``"Type: message"`` unless the type says nothing."""
    return message if kind in ("", _GENERIC_TYPE) else f"{kind}: {message}"


def _typed_object(text: str) -> dict[str, str]:
    """The inverse of :func:`_typed_text`."""
    match = _TYPED_TEXT.fullmatch(text)
    if match is not None and match[1] != _GENERIC_TYPE:
        return {"type": match[1], "message": match[2]}
    return {"type": _GENERIC_TYPE, "message": text}


# -- the hot lines, typed: what the careful path below reads from them, and of the same kinds --------
# No other field: a typed decoder skips unknown fields unchecked, so a line whose other fields hold
# invalid UTF-8 or an out-of-range number would pass here but fail the careful path.


class _MessageLine(msgspec.Struct, tag="message", tag_field="type", forbid_unknown_fields=True):
    role: p.Role
    content: str
    timestamp: str | None = None
    delta: bool | None = None


class _ToolUseLine(msgspec.Struct, tag="tool_use", tag_field="type", forbid_unknown_fields=True):
    tool_name: str
    tool_id: str
    parameters: dict[str, Any] | None = None
    timestamp: str | None = None


class _ToolError(msgspec.Struct, forbid_unknown_fields=True):
    message: str
    type: str | None = None


class _ToolResultLine(msgspec.Struct, tag="tool_result", tag_field="type", forbid_unknown_fields=True):
    tool_id: str
    status: Literal["success", "error"]
    output: str | None = None
    error: _ToolError | None = None
    timestamp: str | None = None


_TYPED_LINES = msgspec.json.Decoder(_MessageLine | _ToolUseLine | _ToolResultLine)
_SKIM: Final = (
    functools.partial(
        speedups.gemini_skim,
        (
            _Run,
            p.MessageDelta,
            UNDECODED,
            _ToolUseLine,
            _ToolResultLine,
            ToolPairs,
            p.ToolCall,
            p.ToolResult,
            TALLY_KINDS,
        ),
    )
    if speedups
    else None
)
_SKIMMED_STEPS = (
    "decode_typed",
    "typed_ready",
    "_message",
    "_replied",
    "chunk",
    "_stamp",
    "_tool_use",
    "_tool_result",
    "emit",
)
"""What ``gemini_skim`` does in C in their stead: a subclass changing one of them skims nothing."""


class GeminiDecoder(EventDecoder):
    dialect = "gemini"
    command = "gemini"
    identifying = identify(
        {
            "tool_use": frozenset({"tool_name", "tool_id"}),
            "tool_result": frozenset({"tool_id"}),
            "message": frozenset({"delta"}),
            "error": frozenset({"severity"}),
            "result": frozenset({"status"}),
        }
    )

    def __init__(self, session_id: str | None = None) -> None:
        super().__init__(session_id)
        self._held: tuple[str, str | None] | None = None
        """A severity ``error`` line, held to learn whether the run's failure follows it."""
        self._answer: list[str] = []
        """The turn's assistant text so far: the ``result``'s text, as ``-o json``'s ``response`` has it."""
        self._replies = 0
        """The model's replies in this turn: the ``result``'s ``turn_count`` (stream-json gives no count)."""
        self._in_reply = False
        """Whether the last line was the model's (its text or a call): the next one is the same reply."""

    typed_lines = _TYPED_LINES

    typed_skim = _SKIM
    """The answer's chunks that continue its open text run (most of a stream's lines), read in C
    (``gemini_skim`` in ``_speedups.c``, without msgspec for lines in the compact form Gemini CLI writes), and
    tool calls and results that need no run closed first (typed by msgspec): :meth:`decode_typed`'s steps for
    them, inlined."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that reads, stamps or emits chunks or tool lines its own way does not skim past its steps."""
        super().__init_subclass__(**kwargs)
        if cls.typed_lines is not _TYPED_LINES or any(
            getattr(cls, name) is not getattr(GeminiDecoder, name) for name in _SKIMMED_STEPS
        ):
            cls.typed_skim = None

    def decode_typed(self, hot: _MessageLine | _ToolUseLine | _ToolResultLine) -> None:
        """Message and tool lines, as :meth:`decode_object` runs a handler: a held error goes out first."""
        if self._held is not None:
            self._release(recoverable=True)
        ts = rfc3339(hot.timestamp)
        if ts is not None:
            self.line_ts = ts
        if isinstance(hot, _MessageLine):
            self._message(hot.role, hot.content, ts, delta=bool(hot.delta))
        elif isinstance(hot, _ToolUseLine):
            self._tool_use(hot.tool_name, hot.tool_id, hot.parameters or {}, ts)
        else:
            error = hot.error
            failure = (error.type or "", error.message) if error is not None else None
            self._tool_result(hot.tool_id, hot.status, hot.output, failure, ts)

    def decode_object(self, obj: dict[str, Any]) -> None:
        """Events with no time of their own (a ``log`` warning, a run closed at the end) take the last one the
        stream gave, so its times do not jump to the clock's and back."""
        if self._held is not None and obj.get("type") != "result":
            self._release(recoverable=True)
        ts = rfc3339(obj.get("timestamp"))
        if ts is not None:
            self.line_ts = ts
        super().decode_object(obj)

    def finish(self) -> list[p.AnyEvent]:
        if self._held is not None:
            self._release(recoverable=False)
        return super().finish()

    def _release(self, *, recoverable: bool, code: str | None = None) -> None:
        """The held error line as an ``error``; its code from its words unless the caller knows better."""
        assert self._held is not None
        (message, ts), self._held = self._held, None
        code = code if code is not None else code_from_wording(message)
        self.emit(p.Error(code=code, message=message, recoverable=recoverable), ts)

    def on_init(self, f: Fields) -> None:
        session_id, model = f.text("session_id"), f.opt_text("model")
        self.adopt_session(session_id)
        self._answer, self._replies, self._in_reply = [], 0, False
        self.emit(p.Start(command=self.command, model=model or p.UNSET), f.ts("timestamp"))

    def on_message(self, f: Fields) -> None:
        role, content, ts = f.role("role"), f.text("content"), f.ts("timestamp")
        self._message(role, content, ts, delta=bool(f.opt_flag("delta")))

    def _message(self, role: p.Role, content: str, ts: str | None, *, delta: bool) -> None:
        self._replied(role == "assistant")
        if role == "assistant":
            self._answer.append(content)
        if delta:
            self.chunk(content, ts=ts, role=role)
        else:
            self.emit(p.Message(message_id=p.new_id("msg"), role=role, content=content), ts)

    def on_tool_use(self, f: Fields) -> None:
        name, call_id = f.text("tool_name"), f.text("tool_id")
        self._tool_use(name, call_id, f.opt_mapping("parameters") or {}, f.ts("timestamp"))

    def _tool_use(self, name: str, call_id: str, arguments: dict[str, Any], ts: str | None) -> None:
        """The text so far led up to a call, so it is not the answer: Gemini's ``response`` is the last reply's."""
        self._replied(True)
        self._answer = []
        self.emit(p.ToolCall(call_id=self.tools.called(call_id, name), name=name, arguments=arguments), ts)

    def on_tool_result(self, f: Fields) -> None:
        call_id, status = f.text("tool_id"), f.choice("status", ("success", "error"), "error")
        output, error = f.opt_text("output"), f.opt_sub("error")
        failure = None if error is None else (error.opt_text("type") or "", error.text("message"))
        self._tool_result(call_id, status, output, failure, f.ts("timestamp"))

    def _tool_result(
        self, call_id: str, status: str, output: str | None, failure: tuple[str, str] | None, ts: str | None
    ) -> None:
        """``failure`` is the line's ``error`` (type, message): Gemini writes any call that did not fail as a
        success, so a cancelled one (its error says so) is written ``success`` with its error."""
        self._replied(False)
        error = None
        if failure is not None:
            error = _typed_text(*failure)
            status = "cancelled" if failure[1].startswith(_CANCELLED) else "error"
        call_id, name = self.tools.finished(call_id, None)
        event = p.ToolResult(
            call_id=call_id,
            name=name,
            status=status,  # type: ignore[arg-type]
            output=output if output is not None else p.UNSET,
            error=error if error is not None else p.UNSET,
        )
        self.emit(event, ts)

    def _replied(self, by_the_model: bool) -> None:
        """A line of the model's after one that was not starts its next reply (one model call): the calls of
        a reply come before its tools' results, and the CLI asks the model again once they are in."""
        if by_the_model and not self._in_reply:
            self._replies += 1
        self._in_reply = by_the_model

    def on_error(self, f: Fields) -> None:
        severity, message, ts = (
            f.choice("severity", ("warning", "error"), "error"),
            f.text("message"),
            f.ts("timestamp"),
        )
        if severity == "error":
            self._held = (message, ts)
        else:
            self.emit(p.Error(code=code_from_wording(message), message=message, recoverable=True), ts)

    def on_result(self, f: Fields) -> None:
        ok = f.choice("status", ("success", "error"), "error") == "success"
        error, stats, ts = f.opt_sub("error"), f.opt_sub("stats"), f.ts("timestamp")
        info, exit_code, subtype = None, 0, None
        if not ok and error is not None:
            # An API error's type is ``unknown`` (Gemini relays it as a plain object) and Gemini exits with its
            # HTTP status, which only the message tells.
            message = error.text("message")
            code, exit_code, subtype = _document_failure(
                error.opt_text("type") or "", _api_status(message), message
            )
            info = p.ErrorInfo(code=code, message=message)
        usage, duration_ms, per_model = _stats(stats) if stats is not None else (self.tally.usage, 0, [])
        for usage_event in per_model:
            self.emit(usage_event, ts)
        if self._held is not None:
            # A held severity-error line is the failure itself only when the result names no other: Gemini's
            # InvalidStream, whose line says why the model's reply was unusable.
            if ok or info is not None:
                self._release(recoverable=True)
            else:
                code, subtype = _invalid_stream(self._held[0])
                self._release(recoverable=False, code=code)
        if info is None and not ok:
            info = self.fatal_info()
        if info is None and not ok and "error" in f.obj:  # an error object we could not read
            info = p.ErrorInfo(code=ErrorCode.UNKNOWN, message="gemini reported an error it did not describe")
        if ok:
            subtype = "success"
        elif subtype is None:
            subtype = _SUBTYPE_FOR_CODE.get(info.code if info else "", "error")
        # Without an error object a failure is Gemini's InvalidStream, which exits 0; ok and exit must agree: 1.
        exit_code = 0 if ok else exit_code or 1
        answer, self._answer = self._answer, []
        replies, self._replies, self._in_reply = self._replies, 0, False
        self.emit_result(
            ok=ok,
            exit_code=exit_code,
            ts=ts,
            error=info,
            subtype=subtype,
            duration_ms=duration_ms,
            turn_count=replies,
            usage=usage,
            result="".join(answer) if answer else p.UNSET,
        )

    def decode_document(self, document: Any) -> list[p.AnyEvent] | None:
        """Only Gemini CLI's ``-o json`` document is a Gemini document (see :meth:`decode_untyped`)."""
        if isinstance(document, dict) and "type" not in document and _JSON_OUTPUT_KEYS & document.keys():
            self.decode_object(document)
            return self.drain()
        return None

    def decode_untyped(self, obj: dict[str, Any]) -> None:
        """Gemini CLI's ``-o json``: one object ``{session_id?, response?, stats?, error?, warnings?}``.

        It has no ``type`` (compact on one line, or pretty-printed: the reader hands a whole document to
        :meth:`decode_document`, which comes here). Read into the run stream-json would give: start, the
        warnings as ``log`` warnings, the response as the assistant's message, usage per model (``stats`` is
        Gemini's ``SessionMetrics``), then the result. An ``error`` fails the run with the code and exit code
        of its type, as in stream-json; Gemini's ``INVALID_STREAM`` (which exits 0) is a failure too.
        """
        f = self.fields(obj, "gemini JSON output", "")
        if not _JSON_OUTPUT_KEYS & obj.keys():
            f.text("type")  # neither a stream line nor the json document: malformed
        # Every field is read before anything is emitted: a bad one leaves no half-decoded run behind.
        session_id, response, error = f.opt_text("session_id"), f.opt_text("response"), f.opt_sub("error")
        warnings = f.opt_strings("warnings") or []
        stats = f.opt_sub("stats")
        models = stats.opt_sub("models") if stats is not None else None
        per_model = (
            [_model_usage(name, models.sub(name)) for name in models.obj] if models is not None else []
        )
        tools = stats.opt_sub("tools") if stats is not None else None
        by_name = tools.opt_mapping("byName") if tools is not None else None
        info, exit_code, subtype = None, 0, "success"
        if error is not None:
            given = error.obj.get("code")  # an exit status, or a tool's error type: either kind is meant
            exit_or_type = given if type(given) in (int, str) else None
            message = error.opt_text("message") or "gemini reported an error it did not describe"
            code, exit_code, subtype = _document_failure(error.opt_text("type") or "", exit_or_type, message)
            info = p.ErrorInfo(code=code, message=message)
        self.adopt_session(session_id)
        # The model that answered, not a utility one (Gemini's router asks a small model first).
        roles = (
            [models.sub(name).opt_mapping("roles") or {} for name in models.obj] if models is not None else []
        )
        main = next((usage.model for usage, of in zip(per_model, roles, strict=True) if "main" in of), None)
        requests = [_main_requests(models.sub(name)) for name in models.obj] if models is not None else []
        self.emit(p.Start(command=self.command, model=main or (per_model[0].model if per_model else p.UNSET)))
        for warning in warnings:
            self.emit(p.Log(level="warn", message=warning))
        if response:
            self.emit(p.Message(message_id=p.new_id("msg"), role="assistant", content=response))
        totals = p.UsageTotals()
        for usage in per_model:
            self.emit(usage)
            totals.add(usage)
        self.emit_result(
            ok=info is None,
            exit_code=0 if info is None else exit_code or 1,
            error=info,
            subtype=subtype,
            turn_count=sum(requests),
            result=response if response is not None else p.UNSET,
            usage=totals,
            tools_used=list(by_name or ()),
        )


def _stats(f: Fields) -> tuple[p.UsageTotals, int, list[p.Usage]]:
    """Totals, duration and one ``usage`` event per model from a result's ``stats``."""
    models = f.opt_sub("models")
    per_model = (
        [p.Usage(model=name, **_counts(models.sub(name))) for name in models.obj]
        if models is not None
        else []
    )
    return p.UsageTotals(**_counts(f)), f.opt_integer("duration_ms") or 0, per_model


_JSON_OUTPUT_KEYS = frozenset({"response", "stats", "error"})


def _main_requests(f: Fields) -> int:
    """A ``SessionMetrics`` model entry's calls for the conversation (its ``main`` role), not the router's."""
    roles = f.opt_sub("roles")
    main = roles.opt_sub("main") if roles is not None else None
    return (main.opt_integer("totalRequests") or 0) if main is not None else 0


def _model_usage(name: str, f: Fields) -> p.Usage:
    """A ``SessionMetrics`` model entry in canonical terms, as the chat log's tokens are read: ``prompt`` counts
    every prompt token (``input`` leaves out cached ones), plus ``tool`` (a tool-use prompt); the output counts
    the ``thoughts`` with the ``candidates``."""
    tokens = f.opt_sub("tokens") or f.child({}, "tokens")
    cached = tokens.opt_integer("cached") or 0
    prompt = tokens.opt_integer("prompt")
    thoughts = tokens.opt_integer("thoughts") or 0
    return p.Usage(
        model=name,
        input_tokens=(prompt if prompt is not None else (tokens.opt_integer("input") or 0) + cached)
        + (tokens.opt_integer("tool") or 0),
        output_tokens=(tokens.opt_integer("candidates") or 0) + thoughts,
        cached_tokens=cached,
        reasoning_tokens=thoughts,
    )


class _Counts(TypedDict):
    """Keyword arguments shared by a per-model ``usage`` event and the run's totals."""

    input_tokens: int
    output_tokens: int
    cached_tokens: int
    reasoning_tokens: int


def _counts(f: Fields) -> _Counts:
    """Gemini's token figures under our names (``input`` is input minus cached, and not needed).

    ``output_tokens`` counts the candidates alone; the thoughts are only in ``total_tokens`` (with a tool-use
    prompt's tokens, which stream-json does not tell apart), so what the total has beyond input and output is
    the reasoning, and part of the output.
    """
    input_tokens, output_tokens = f.opt_integer("input_tokens") or 0, f.opt_integer("output_tokens") or 0
    total = f.opt_integer("total_tokens")
    thoughts = max(total - input_tokens - output_tokens, 0) if total is not None else 0
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens + thoughts,
        "cached_tokens": f.opt_integer("cached") or 0,
        "reasoning_tokens": thoughts,
    }


def _figures(usage: p.UsageTotals | p.Usage) -> dict[str, int]:
    """The inverse of :func:`_counts`: the reasoning goes into the total only."""
    return {
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "input_tokens": usage.input_tokens,
        "output_tokens": max(usage.output_tokens - usage.reasoning_tokens, 0),
        "cached": usage.cached_tokens,
        "input": max(usage.input_tokens - usage.cached_tokens, 0),
    }


class GeminiEncoder(EventEncoder):
    fold_fatal = True

    def __init__(self) -> None:
        super().__init__()
        self._tool_calls = 0
        self._models: dict[str, p.UsageTotals] = {}

    def end_turn(self) -> None:
        """Each turn is a run of its own (Gemini CLI runs one per process): its result's stats are its own."""
        super().end_turn()
        self._tool_calls = 0
        self._models = {}

    def on_start(self, event: p.Start) -> list[dict[str, Any]]:
        model = event.model if event.model is not p.UNSET else ""
        return [{"type": "init", "timestamp": iso(event.ts), "session_id": event.session_id, "model": model}]

    def on_message(self, event: p.Message) -> list[dict[str, Any]]:
        if event.role == "user":
            return [{"type": "message", "timestamp": iso(event.ts), "role": "user", "content": event.content}]
        if event.role != "assistant" or self.closes_deltas(event.message_id):
            return []
        return [_delta_line(event.ts, event.content)]

    def on_message_delta(self, event: p.MessageDelta) -> list[dict[str, Any]]:
        if event.role != "assistant":
            return []
        self.wrote_delta(event.message_id)
        return [_delta_line(event.ts, event.content)]

    def on_tool_call(self, event: p.ToolCall) -> list[dict[str, Any]]:
        self._tool_calls += 1
        return [
            {
                "type": "tool_use",
                "timestamp": iso(event.ts),
                "tool_name": event.name,
                "tool_id": event.call_id,
                "parameters": event.arguments,
            }
        ]

    def on_tool_result(self, event: p.ToolResult) -> list[dict[str, Any]]:
        line: dict[str, Any] = {
            "type": "tool_result",
            "timestamp": iso(event.ts),
            "tool_id": event.call_id,
            "status": "success" if event.status == "success" else "error",
        }
        if event.output is not p.UNSET:
            line["output"] = event.output
        if event.error is not p.UNSET:
            line["error"] = _typed_object(event.error)
        return [line]

    def on_error(self, event: p.Error) -> list[dict[str, Any]]:
        severity = "warning" if event.recoverable else "error"
        return [{"type": "error", "timestamp": iso(event.ts), "severity": severity, "message": event.message}]

    def on_usage(self, event: p.Usage) -> list[dict[str, Any]]:
        self._models.setdefault(event.model, p.UsageTotals()).add(event)
        return []

    def on_result(self, event: p.Result) -> list[dict[str, Any]]:
        status = "success" if event.ok else "error"
        line: dict[str, Any] = {"type": "result", "timestamp": iso(event.ts), "status": status}
        if not event.ok:
            failure = self.failure(event)
            code = failure.code if failure is not None else ErrorCode.UNKNOWN
            message = failure.message if failure is not None else "the run failed"
            refused = event.subtype == "refusal" and code == ErrorCode.PROVIDER_ERROR
            kind = _REFUSAL_TYPE if refused else _TYPE_FOR_CODE.get(code, code)
            line["error"] = {"type": kind, "message": message}
        stats: dict[str, Any] = {
            **_figures(event.usage),
            "duration_ms": event.duration_ms,
            "tool_calls": self._tool_calls,
        }
        if self._models:
            stats["models"] = {model: _figures(totals) for model, totals in self._models.items()}
        if any(stats.values()):
            line["stats"] = stats
        return [line]


def _delta_line(ts: str, content: str) -> dict[str, Any]:
    return {"type": "message", "timestamp": iso(ts), "role": "assistant", "content": content, "delta": True}


class GeminiDialect(SimpleDialect):
    name = "gemini"
    summary = "Gemini CLI --output-format stream-json"
    decoder_class = GeminiDecoder
    encoder_class = GeminiEncoder

    def error_for_exit(self, status: int) -> ExitMeaning | None:
        """Gemini's start-up and fatal exit codes (41 auth … 130 cancelled; see ``_EXIT_MEANINGS``)."""
        return _EXIT_MEANINGS.get(status)

    def sniff_document(self, document: dict[str, Any]) -> float:
        """Gemini CLI's json mode: no ``type``; ``response`` and ``stats`` (or ``error``) at the top."""
        if "type" in document or "v" in document:
            return 0.0
        if isinstance(document.get("stats"), dict) and ("response" in document or "error" in document):
            return 0.9
        if isinstance(document.get("response"), str) and "session_id" in document:
            return 0.7
        error = document.get("error")
        if (
            isinstance(error, dict)
            and isinstance(error.get("type"), str)
            and isinstance(error.get("message"), str)
        ):
            return 0.7 if document.keys() <= {"session_id", "error", "warnings"} else 0.0
        return 0.0

    def sniff(self, obj: dict[str, Any]) -> float:
        kind = obj.get("type")
        if "v" in obj or "seq" in obj or not isinstance(obj.get("timestamp"), str):
            return 0.0
        if kind == "init" and isinstance(obj.get("session_id"), str) and "model" in obj and "cwd" not in obj:
            return 0.95
        if kind == "tool_use" and "tool_name" in obj and "tool_id" in obj:
            return 0.8
        if kind == "result" and obj.get("status") in ("success", "error"):
            return 0.6
        if kind == "message" and "role" in obj and "content" in obj:
            return 0.6
        return 0.0


DIALECT = GeminiDialect()
