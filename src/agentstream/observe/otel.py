"""OpenTelemetry export of runs, switched on by the standard ``OTEL_*`` environment.

``exec``, ``wrap`` and ``follow`` call :func:`attach_otel` (or
:func:`otel_sink_from_environ`) and feed the sink the events they emit;
``agentstream export otel FILE`` feeds it a recorded stream. The mapping from
events to GenAI spans lives in :mod:`agentstream.observe._otel_spans`, which is
imported — with the ``[otel]`` extra's SDK — only when an endpoint is
configured, so a run without ``OTEL_EXPORTER_OTLP_ENDPOINT`` imports nothing
from ``opentelemetry``. See ``docs/otel.md``.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from agentstream.errors import AgentstreamError, UsageError

if TYPE_CHECKING:
    from agentstream.observe._otel_spans import OtelSink
    from agentstream.stream import Stream

__all__ = [
    "attach_otel",
    "build_sink",
    "endpoint_configured",
    "otel_sink_from_environ",
    "traceparent_env",
]

ENDPOINT_VARS: Final = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOL_VARS: Final = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
TIMEOUT_VARS: Final = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
DEFAULT_TIMEOUT_S: Final = 2.0
"""Per export request when no ``OTEL_EXPORTER_OTLP_*TIMEOUT`` is set: a run must not wait long on a dead collector."""
TRACES_PATH: Final = "/v1/traces"

_lock = threading.Lock()
_process_sink: OtelSink | None = None
_setup_failed = False


def endpoint_configured(environ: Mapping[str, str] = os.environ) -> bool:
    """Is trace export asked for? An endpoint is set, and neither the SDK nor the traces exporter is disabled."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters and "otlp" not in exporters.split(","):
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARS)


def otel_sink_from_environ() -> OtelSink | None:
    """The process's one sink when an OTLP endpoint is configured, else None (nothing imported).

    A setup problem (the extra not installed, an unsupported protocol) costs one
    warning line on stderr and no export: the run itself goes on.
    """
    global _process_sink, _setup_failed
    if not endpoint_configured():
        return None
    with _lock:
        if _process_sink is None and not _setup_failed:
            try:
                _process_sink = build_sink(live=True)
            except AgentstreamError as exc:
                _setup_failed = True
                fix = f" (fix: {exc.fix})" if exc.fix else ""
                _warn(f"traces are not exported: {exc.message}{fix}")
                return None
            atexit.register(_process_sink.close)
        return _process_sink


def attach_otel(stream: Stream) -> OtelSink | None:
    """Export ``stream``'s run as a trace when OTel is configured; call before ``stream.start()``."""
    sink = otel_sink_from_environ()
    if sink is not None:
        stream.observe(sink.on_event)
    return sink


def traceparent_env(sink: OtelSink | None) -> dict[str, str] | None:
    """The environment for a child that should join the current run's trace (``TRACEPARENT``), or None."""
    if sink is None or sink.traceparent is None:
        return None
    return {**os.environ, "TRACEPARENT": sink.traceparent}


def build_sink(*, live: bool, endpoint: str | None = None) -> OtelSink:
    """A sink exporting over OTLP/HTTP to ``endpoint`` (a base URL) or to the one the environment names.

    ``live`` runs join the trace named by ``TRACEPARENT`` when it is set;
    an export of a recorded file starts traces of its own.
    """
    _check_protocol()
    url = traces_url(endpoint)
    from agentstream._extras import require

    require("opentelemetry.sdk.trace", "otel")
    require("opentelemetry.exporter.otlp.proto.http.trace_exporter", "otel")
    from agentstream.observe._otel_spans import OtelSink, otlp_http_exporter

    exporter = otlp_http_exporter(url if endpoint else None, _timeout_s())
    parent = os.environ.get("TRACEPARENT") if live else None
    return OtelSink(exporter, endpoint=url, parent_traceparent=parent, warn=_warn)


def traces_url(endpoint: str | None = None) -> str:
    """Where spans go: the traces endpoint, or the base endpoint plus ``/v1/traces``.

    Every endpoint, from ``--endpoint`` or the environment, is checked here: a
    malformed URL is a usage error, not a collector that seems not to answer.
    """
    if endpoint:
        return f"{_checked_url(endpoint, '--endpoint').rstrip('/')}{TRACES_PATH}"
    traces = os.environ.get(ENDPOINT_VARS[0], "").strip()
    if traces:
        return _checked_url(traces, ENDPOINT_VARS[0])
    base = _checked_url(os.environ.get(ENDPOINT_VARS[1], "").strip(), ENDPOINT_VARS[1])
    return f"{base.rstrip('/')}{TRACES_PATH}"


def _checked_url(url: str, name: str) -> str:
    """``url`` if it is an http(s) URL with a host (and a valid port), else a usage error naming ``name``."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port that is not a number, or out of range
        valid = False
    if not valid:
        raise UsageError(
            f"{name} {url!r} is not an OTLP/HTTP URL (it needs http:// or https:// and a host)",
            fix="give the collector's OTLP/HTTP base URL, e.g. http://localhost:4318",
        )
    return url


def _check_protocol() -> None:
    for name in PROTOCOL_VARS:
        value = os.environ.get(name, "").strip().lower()
        if value and value != "http/protobuf":
            raise UsageError(
                f"{name}={value} is not supported: agentstream exports OTLP over HTTP with protobuf",
                fix=f"unset {name} or set it to http/protobuf, and point the endpoint at the collector's "
                "OTLP/HTTP port (4318 by default)",
            )


def _timeout_s() -> float | None:
    """None lets the exporter read ``OTEL_EXPORTER_OTLP_*TIMEOUT``; else agentstream's short default."""
    if any(os.environ.get(name, "").strip() for name in TIMEOUT_VARS):
        return None
    return DEFAULT_TIMEOUT_S


def _warn(message: str) -> None:
    try:
        sys.stderr.write(f"agentstream: warning: otel: {message}\n")
        sys.stderr.flush()
    except Exception:
        pass
