"""Canonical events to OpenTelemetry GenAI spans (imported only when export is configured).

One run (``start`` … ``result``) is one trace: an ``invoke_agent`` span for the
run, a ``chat`` span per model call (one ``usage`` event each) and an
``execute_tool`` span per tool call, all children of the run's span. Every time
comes from the events' ``ts``, so exporting a recorded stream later gives the
same trace as exporting it live. ``docs/otel.md`` describes the mapping.
"""

from __future__ import annotations

import os
import re
import shlex
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import PurePath
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Span, SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentstream import protocol as p
from agentstream._signals import MainThreadSignals
from agentstream._version import __version__
from agentstream.errors import ErrorCode

__all__ = ["OtelSink", "otlp_http_exporter"]

PROVIDER_ERRORS: Final = frozenset(
    {
        ErrorCode.AUTH_EXPIRED,
        ErrorCode.RATE_LIMITED,
        ErrorCode.PROVIDER_ERROR,
        ErrorCode.NETWORK_TIMEOUT,
        ErrorCode.CONTEXT_LIMIT,
    }
)
"""Fatal error codes that mean a model call failed: they end an open (or a new) ``chat`` span."""
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_UNFINISHED: Final = "the stream ended without a result"
_MODEL_OUTPUT: Final = (p.MessageDelta, p.Message, p.ReasoningDelta, p.Reasoning)

Warn = Callable[[str], None]


_CREDENTIAL_VARS: Final = (
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER",
)
"""When one is set, the exporter builds its own HTTP session (from that provider), whose answers are not seen."""
_NO_ANSWER: Final = "the collector did not answer (is it running, and is this its OTLP/HTTP port?)"


def otlp_http_exporter(endpoint: str | None, timeout_s: float | None) -> SpanExporter:
    """The official OTLP/HTTP protobuf exporter; None arguments are read from ``OTEL_*`` by the exporter.

    Its HTTP session notes the status of each answer, so a refusal can be told from a collector that is not there.
    """
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    if any(os.environ.get(name) for name in _CREDENTIAL_VARS):
        return OTLPSpanExporter(endpoint=endpoint, timeout=timeout_s)
    import requests

    answers = _Answers()
    session = requests.Session()
    session.hooks["response"].append(answers.note)
    return _AnsweredExporter(OTLPSpanExporter(endpoint=endpoint, timeout=timeout_s, session=session), answers)


class _Answers:
    """The HTTP status of the collector's last answer (None: no answer came)."""

    def __init__(self) -> None:
        self.status: int | None = None

    def note(self, response: Any, *args: Any, **kwargs: Any) -> None:
        self.status = response.status_code


class _AnsweredExporter(SpanExporter):
    """An exporter that can say why its last export failed: the collector's answer, or that none came."""

    def __init__(self, inner: SpanExporter, answers: _Answers) -> None:
        self.inner = inner
        self.answers = answers

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.answers.status = None
        return self.inner.export(spans)

    def why_not(self) -> str:
        status = self.answers.status
        if status is None:
            return _NO_ANSWER
        hint = _STATUS_HINTS.get(status, "see the collector's log for why")
        return f"the collector answered HTTP {status} ({hint})"

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


_STATUS_HINTS: Final = {
    401: "check the credentials in OTEL_EXPORTER_OTLP_HEADERS",
    403: "check the credentials in OTEL_EXPORTER_OTLP_HEADERS",
    404: "is this its OTLP/HTTP endpoint?",
    413: "the batch was too large for it",
}


class _ReportingExporter(SpanExporter):
    """Counts what reached the collector and warns once (one stderr line) when something did not."""

    def __init__(self, inner: SpanExporter, endpoint: str, warn: Warn) -> None:
        self.inner = inner
        self.endpoint = endpoint
        self.warn = warn
        self.exported = 0
        self.failed = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # an exporter bug must never reach the run
            result, why = SpanExportResult.FAILURE, f"{type(exc).__name__}: {exc}"
        else:
            why = self.inner.why_not() if isinstance(self.inner, _AnsweredExporter) else _NO_ANSWER
        if result is SpanExportResult.SUCCESS:
            self.exported += len(spans)
        else:
            if not self.failed:
                self.warn(f"{len(spans)} span(s) not exported to {self.endpoint}: {why}")
            self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class OtelSink:
    """Receives canonical events (a Stream observer, a follower, a file reader) and exports their traces.

    Thread-safe; a run's spans are flushed when its ``result`` arrives, so the
    trace of a run that ends by a signal or an error is exported before the
    process exits. :meth:`close` ends whatever is still open and shuts down.
    """

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        endpoint: str = "",
        parent_traceparent: str | None = None,
        warn: Warn = lambda message: None,
        flush_timeout_s: float = 5.0,
    ) -> None:
        import logging

        # The SDK's own export errors would repeat on every batch; the reporting exporter says it once.
        logging.getLogger("opentelemetry.exporter.otlp.proto.http").setLevel(logging.CRITICAL)
        self.exporter = _ReportingExporter(exporter, endpoint, warn)
        self.provider = TracerProvider(resource=_resource(), shutdown_on_exit=False)
        with MainThreadSignals():  # the processor's export thread
            self.provider.add_span_processor(BatchSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("agentstream", __version__)
        self.parent = _parent_context(parent_traceparent)
        self.flush_timeout_ms = int(flush_timeout_s * 1000)
        self.runs = 0
        self._run: _RunSpans | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def traceparent(self) -> str | None:
        """W3C ``traceparent`` of the current run's ``invoke_agent`` span, for a child process to join."""
        run = self._run
        if run is None:
            return None
        ctx = run.agent.get_span_context()
        return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"

    def on_event(self, event: p.AnyEvent) -> None:
        """Map one event; never raises into the producer."""
        if isinstance(event, p.UnknownEvent) or self._closed:
            return
        with self._lock:
            try:
                self._feed(event)
            except Exception as exc:  # a mapping bug costs the trace, never the run
                self.exporter.warn(f"tracing stopped: {type(exc).__name__}: {exc}")
                self._closed = True

    def _feed(self, event: p.Event) -> None:
        if isinstance(event, p.Start) and self._run is not None:
            self._run.abandon(self._run.last_ns)
            self._run = None
        if self._run is None:
            self._run = _RunSpans.begin(self.tracer, self.parent, event)
            self.runs += 1
        if self._run.feed(event):
            self._run = None
            self.flush()

    def flush(self) -> bool:
        """Export every span ended so far (bounded by the flush timeout); False if that timed out."""
        return self.provider.force_flush(self.flush_timeout_ms)

    def discard(self) -> None:
        """Shut down without exporting the open run: its spans never end, so they are never sent."""
        with self._lock:
            self._closed = True
            self._run = None
        self.provider.shutdown()

    def close(self) -> None:
        """End an unfinished run at its last event, flush, shut down. Idempotent."""
        with self._lock:
            if self._closed and self._run is None:
                return
            self._closed = True
            if self._run is not None:
                self._run.abandon(self._run.last_ns)
                self._run = None
        self.flush()
        self.provider.shutdown()


@dataclass
class _Call:
    """A model call whose usage arrived; its finish reason is known once the next event says."""

    start_ns: int
    end_ns: int
    usage: p.Usage
    tool_calls: bool


@dataclass
class _RunSpans:
    """The spans of one run, built as its events arrive."""

    tracer: trace.Tracer
    agent: Span
    session_id: str
    last_ns: int
    model: str | None = None
    provider: str | None = None
    boundary_ns: int = 0
    """Where the next model call starts: the run's start, the last usage, tool result or turn start."""
    call_open: bool = False
    """The model has produced output whose usage has not arrived yet."""
    call_saw_tools: bool = False
    pending: _Call | None = None
    tools: dict[str, Span] = field(default_factory=dict)
    fatal: p.Error | None = None

    @classmethod
    def begin(cls, tracer: trace.Tracer, parent: otel_context.Context | None, first: p.Event) -> _RunSpans:
        start_ns = _ns(first.ts, None)
        start = first if isinstance(first, p.Start) else None
        model = _text(start.model) if start else None
        provider = _text(start.provider) if start else None
        agent_name = _agent_name(start.command if start else "")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent_name,
            "gen_ai.conversation.id": first.session_id,
        }
        _put(attributes, "gen_ai.provider.name", provider)
        _put(attributes, "gen_ai.request.model", model)
        if start is not None:
            _put(attributes, "agentstream.command", _command_shape(start.command))
            _put(attributes, "agentstream.parent_session_id", _text(start.parent_session_id))
        agent = tracer.start_span(
            f"invoke_agent {agent_name}",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=start_ns,
        )
        return cls(tracer, agent, first.session_id, start_ns, model, provider, boundary_ns=start_ns)

    def feed(self, event: p.Event) -> bool:
        """Map one event; True when it ended the run."""
        ns = _ns(event.ts, self.last_ns)
        self.last_ns = max(self.last_ns, ns)
        if isinstance(event, _MODEL_OUTPUT) and getattr(event, "role", "assistant") == "assistant":
            self._settle("stop")
            self.call_open = True
        elif isinstance(event, (p.Message, p.MessageDelta)):  # a user (or system, tool) message
            self._mark_boundary(ns)
        elif isinstance(event, p.Usage):
            self._on_usage(event, ns)
        elif isinstance(event, p.ToolCall):
            self._on_tool_call(event, ns)
        elif isinstance(event, p.ToolResult):
            self._on_tool_result(event, ns)
        elif isinstance(event, p.Step) and event.status == "started":
            self._settle("stop")
            self._mark_boundary(ns)
        elif isinstance(event, p.Error):
            self._on_error(event, ns)
        elif isinstance(event, p.Result):
            self._on_result(event, ns)
            return True
        return False

    # -- model calls ----------------------------------------------------------------

    def _mark_boundary(self, ns: int) -> None:
        if not self.call_open:
            self.boundary_ns = ns

    def _on_usage(self, usage: p.Usage, ns: int) -> None:
        self._settle("stop")
        self.pending = _Call(self.boundary_ns, ns, usage, self.call_saw_tools)
        self.call_open = self.call_saw_tools = False
        self.boundary_ns = ns
        if self.pending.tool_calls:
            self._settle("tool_calls")

    def _settle(self, finish_reason: str) -> None:
        """End the pending model call's span now that its finish reason is known."""
        call, self.pending = self.pending, None
        if call is None:
            return
        usage = call.usage
        attributes = self._chat_attributes(usage.model)
        attributes["gen_ai.response.model"] = usage.model
        attributes["gen_ai.response.finish_reasons"] = (finish_reason,)
        attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
        attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
        if usage.cached_tokens:
            attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cached_tokens
        if usage.cache_write_tokens is not p.UNSET:
            attributes["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
        if usage.reasoning_tokens:
            attributes["gen_ai.usage.reasoning.output_tokens"] = usage.reasoning_tokens
        if usage.cost_usd is not p.UNSET:
            attributes["agentstream.usage.cost_usd"] = usage.cost_usd
        span = self._child(f"chat {usage.model or self.model or 'unknown'}", SpanKind.CLIENT, call.start_ns)
        span.set_attributes(attributes)
        span.end(end_time=max(call.end_ns, call.start_ns))

    def _failed_call(self, code: str, message: str, ns: int) -> None:
        """A model call that ended in an error, without usage."""
        model = self.model or "unknown"
        span = self._child(f"chat {model}", SpanKind.CLIENT, self.boundary_ns)
        span.set_attributes(self._chat_attributes(self.model))
        _record_error(span, code, message, ns)
        span.end(end_time=max(ns, self.boundary_ns))
        self.call_open = self.call_saw_tools = False
        self.boundary_ns = ns

    def _chat_attributes(self, model: str | None) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.conversation.id": self.session_id,
        }
        _put(attributes, "gen_ai.provider.name", self.provider)
        _put(attributes, "gen_ai.request.model", self.model or model)
        return attributes

    # -- tools ----------------------------------------------------------------------

    def _on_tool_call(self, call: p.ToolCall, ns: int) -> None:
        """A tool call is the model's output: it ends the call whose usage came, else marks the one under way
        (a call may answer with tool calls alone, no text before them)."""
        if self.pending is not None:
            self._settle("tool_calls")
        else:
            self.call_saw_tools = True
        self._open_tool(call.call_id, call.name, ns)

    def _open_tool(self, call_id: str, name: str, ns: int) -> Span:
        span = self._child(f"execute_tool {name}", SpanKind.INTERNAL, ns)
        span.set_attributes(
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": call_id,
                "gen_ai.tool.type": "function",
            }
        )
        self.tools[call_id] = span
        return span

    def _on_tool_result(self, result: p.ToolResult, ns: int) -> None:
        span = self.tools.pop(result.call_id, None)
        if span is None:  # a result whose call this stream never showed: place it by its duration
            span = self._open_tool(result.call_id, result.name, ns - result.duration_ms * 1_000_000)
            self.tools.pop(result.call_id)
        span.set_attribute("agentstream.tool.status", result.status)
        if result.duration_ms:  # 0: the stream did not say
            span.set_attribute("agentstream.tool.duration_ms", result.duration_ms)
        if result.status != "success":
            error = result.error if isinstance(result.error, str) else result.status
            _record_error(span, result.status, error, ns)
        span.end(end_time=ns)
        if not self.call_open:  # the model call that asked for it is over: the next one starts here
            self.boundary_ns = ns
            self.call_saw_tools = False

    # -- errors and the end ---------------------------------------------------------

    def _on_error(self, error: p.Error, ns: int) -> None:
        if error.recoverable:
            self.agent.add_event(
                "agentstream.error",
                {"error.type": error.code, "agentstream.error.message": error.message},
                timestamp=ns,
            )
            return
        self.fatal = error
        if self.call_open or error.code in PROVIDER_ERRORS:
            self._settle("stop")
            self._failed_call(error.code, error.message, ns)

    def _on_result(self, result: p.Result, ns: int) -> None:
        self._settle("stop")
        info = result.error if isinstance(result.error, p.ErrorInfo) else None
        code = info.code if info else (self.fatal.code if self.fatal else result.subtype)
        message = info.message if info else f"the run ended with {result.subtype}"
        if self.call_open:
            self._failed_call(code, message, ns)
        self._end_tools(code, message, ns)
        agent = self.agent
        agent.set_attributes(
            {
                "gen_ai.usage.input_tokens": result.usage.input_tokens,
                "gen_ai.usage.output_tokens": result.usage.output_tokens,
                "agentstream.exit_code": result.exit_code,
                "agentstream.result.subtype": result.subtype,
                "agentstream.turn_count": result.turn_count,
            }
        )
        if result.usage.cached_tokens:
            agent.set_attribute("gen_ai.usage.cache_read.input_tokens", result.usage.cached_tokens)
        if result.usage.cache_write_tokens is not p.UNSET:
            agent.set_attribute("gen_ai.usage.cache_creation.input_tokens", result.usage.cache_write_tokens)
        if not result.ok:
            _record_error(agent, code, message, ns)
        agent.end(end_time=ns)

    def _end_tools(self, code: str, message: str, ns: int) -> None:
        """Tool calls still running when the run ended: ended with it, as errors."""
        for span in self.tools.values():
            span.set_attribute("agentstream.tool.status", "cancelled")
            _record_error(span, code, message, ns)
            span.end(end_time=ns)
        self.tools.clear()

    def abandon(self, ns: int) -> None:
        """The stream stopped without a result (a cut file, a process gone): end everything as not finished,
        or as the fatal error it stopped on."""
        self._settle("stop")
        fatal = self.fatal
        code, message = (fatal.code, fatal.message) if fatal else (ErrorCode.NOT_FINISHED, _UNFINISHED)
        if self.call_open:
            self._failed_call(code, message, ns)
        self._end_tools(code, message, ns)
        _record_error(self.agent, code, message, ns)
        self.agent.end(end_time=max(ns, self.last_ns))

    def _child(self, name: str, kind: SpanKind, start_ns: int) -> Span:
        return self.tracer.start_span(
            name, context=trace.set_span_in_context(self.agent), kind=kind, start_time=start_ns
        )


def _record_error(span: Span, code: str, message: str, ns: int) -> None:
    """``error.type`` (the protocol's error code, or a tool's status), an error status and an exception event."""
    span.set_attribute("error.type", code)
    span.set_status(StatusCode.ERROR, message)
    span.add_event("exception", {"exception.type": code, "exception.message": message}, timestamp=ns)


_last_ts = ""
_last_ns = 0


def _ns(ts: str, fallback: int | None) -> int:
    """Nanoseconds since the epoch of an event's RFC 3339 ``ts``; the fallback (or now) when it has none."""
    global _last_ts, _last_ns
    if ts == _last_ts:
        return _last_ns
    try:
        moment = datetime.fromisoformat(ts)
    except (TypeError, ValueError):
        import time

        return fallback if fallback is not None else time.time_ns()
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    value = (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000
    _last_ts, _last_ns = ts, value
    return value


def _agent_name(command: str) -> str:
    """``agentstream`` for its own agent; else the program a command line runs (``claude``, ``codex``…)."""
    if command in ("", "exec"):
        return "agentstream"
    words = _words(command)
    return PurePath(words[0]).name if words else "agentstream"


_OPTION = re.compile(r"-[A-Za-z]|--[A-Za-z][A-Za-z0-9_-]*", re.ASCII)
"""An option's name: a short one alone (``-pVALUE`` may be a value glued on), a long one up to its ``=``."""


def _command_shape(command: str) -> str:
    """A command line without anything it was given: the program's name and the names of its options.

    A prompt, a path or an option's value (``--key=value`` included) may hold what the user would not send
    anywhere: ``claude -p 'my secret' --output-format stream-json`` is ``claude -p --output-format``.
    """
    words = _words(command)
    if not words:
        return ""
    given = words[1 : words.index("--")] if "--" in words else words[1:]  # after "--", arguments only
    options = (word.partition("=")[0] for word in given)
    return " ".join([PurePath(words[0]).name, *(word for word in options if _OPTION.fullmatch(word))])


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _put(attributes: dict[str, Any], key: str, value: str | None) -> None:
    if value:
        attributes[key] = value


def _resource() -> Resource:
    """``service.name`` from ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``, else ``agentstream``."""
    resource = Resource.create({"service.version": __version__})
    name = resource.attributes.get("service.name")
    if not isinstance(name, str) or name.startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "agentstream"}))
    return resource


def _parent_context(traceparent: str | None) -> otel_context.Context | None:
    """The context of a ``TRACEPARENT`` this process was started with, so its run joins that trace."""
    if not traceparent:
        return None
    ctx = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None
