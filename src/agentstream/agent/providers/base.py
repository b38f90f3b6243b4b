"""The provider interface: one method that streams one model turn as provider-neutral events.

A provider turns a :class:`~agentstream.agent.conversation.Conversation` plus tool
specs into the events of one model call (:data:`TurnEvent`). Everything a
provider's SDK can raise is translated here, at one edge, into a
:class:`~agentstream.errors.ProviderError` with a protocol code, whether it is
worth retrying, and how long to wait — with anything that looks like a key
scrubbed from the message. The same edge redacts the configured secrets from
everything the model writes (text, reasoning, tool arguments) before the agent
sees it, so no later step can emit, store or record them.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal, TypeAlias

import msgspec

from agentstream import protocol as p
from agentstream._extras import require
from agentstream.errors import AgentstreamError, ErrorCode, ProviderError

if TYPE_CHECKING:
    from agentstream._secrets import Redactor
    from agentstream.agent.conversation import Conversation
    from agentstream.agent.tools import ToolSpec

__all__ = [
    "Provider",
    "ProviderSettings",
    "ReasoningBlock",
    "ReasoningDelta",
    "SdkProvider",
    "TextDelta",
    "ToolCallDone",
    "TurnEnd",
    "TurnEvent",
    "TurnUsage",
    "map_sdk_error",
    "network_error",
    "new_call_id",
    "scrub",
    "shown_arguments",
    "status_error",
    "stop_kind",
    "tool_call_from_json",
]


# -- turn events ------------------------------------------------------------------


class TextDelta(msgspec.Struct, tag="text", frozen=True):
    """A chunk of the assistant's text."""

    text: str


class ReasoningDelta(msgspec.Struct, tag="reasoning_delta", frozen=True):
    """A chunk of the model's visible reasoning."""

    text: str


class ReasoningBlock(msgspec.Struct, tag="reasoning", frozen=True, omit_defaults=True):
    """A complete reasoning block, in the form the provider must be sent it back.

    ``signature`` (Anthropic) proves the block is unaltered; ``redacted`` holds
    encrypted reasoning the model produced but we may not show.
    """

    text: str = ""
    signature: str | None = None
    redacted: str | None = None


class ToolCallDone(msgspec.Struct, tag="tool_call", frozen=True, omit_defaults=True):
    """A complete tool call. ``error`` is set when the arguments were not a JSON object.

    ``raw_arguments`` then keeps what the model wrote, so the stream and the history
    sent back show the model its own mistake rather than an empty object.
    """

    call_id: str
    name: str
    arguments: dict[str, Any] = {}
    error: str | None = None
    raw_arguments: str | None = None

    @property
    def shown_arguments(self) -> dict[str, Any]:
        return shown_arguments(self.arguments, self.raw_arguments)


def shown_arguments(arguments: dict[str, Any], raw: str | None) -> dict[str, Any]:
    """Arguments for places that take only an object: what the model wrote under ``_raw`` when it was not one."""
    return {"_raw": raw} if raw is not None else arguments


class TurnUsage(msgspec.Struct, tag="usage", frozen=True):
    """Tokens of this call. ``input_tokens`` includes ``cached_tokens`` and ``cache_write_tokens``."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0


class TurnEnd(msgspec.Struct, tag="end", frozen=True):
    """The model finished this call; ``reason`` is the provider's stop reason."""

    reason: str


TurnEvent: TypeAlias = TextDelta | ReasoningDelta | ReasoningBlock | ToolCallDone | TurnUsage | TurnEnd
_TURN_EVENTS: Final = (TextDelta, ReasoningDelta, ReasoningBlock, ToolCallDone, TurnUsage, TurnEnd)
"""What :meth:`Provider.stream_turn` yields; also the event format of replay cassettes."""

StopKind: TypeAlias = Literal["done", "truncated", "refused", "paused"]

_STOP_KINDS: Final[dict[str, StopKind]] = {
    "length": "truncated",  # OpenAI
    "max_tokens": "truncated",  # Anthropic
    "model_context_window_exceeded": "truncated",  # Anthropic
    "content_filter": "refused",  # OpenAI
    "refusal": "refused",  # Anthropic
    "pause_turn": "paused",  # Anthropic: a long turn paused; sending it back lets the model go on
}


def stop_kind(reason: str) -> StopKind:
    """What a provider's stop reason means for the run; a reason not known here is a normal end."""
    return _STOP_KINDS.get(reason, "done")


def tool_call_from_json(call_id: str, name: str, raw: str) -> ToolCallDone:
    """A tool call from its streamed argument text; malformed arguments become ``error``, not an exception."""
    text = raw.strip() or "{}"
    try:
        arguments = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        error = f"the arguments were not valid JSON ({exc}): {text[:200]}"
        return ToolCallDone(call_id, name, error=error, raw_arguments=text)
    if not isinstance(arguments, dict):
        error = f"the arguments must be a JSON object, got: {text[:200]}"
        return ToolCallDone(call_id, name, error=error, raw_arguments=text)
    return ToolCallDone(call_id, name, arguments)


def new_call_id() -> str:
    """For servers that send a tool call without an id (some local ones do)."""
    return p.new_id("call")


# -- the interface ------------------------------------------------------------------


@dataclass(frozen=True)
class ProviderSettings:
    """Everything a provider needs from the command line; ``None`` means the provider's default."""

    model: str | None = None
    base_url: str | None = None
    timeout_s: float = 600.0
    max_tokens: int = 8192
    thinking_budget: int = 0
    cassette: str | None = None


class Provider(ABC):
    """A model provider. Subclasses implement :meth:`_turn` and, for an SDK, :meth:`map_error`."""

    name: str = ""
    """What ``start.provider`` says."""

    def __init__(self, model: str) -> None:
        self.model = model

    def stream_turn(
        self, conversation: Conversation, tools: Sequence[ToolSpec], system: str
    ) -> Iterator[TurnEvent]:
        """Stream one model call. Raises :class:`ProviderError` for every provider failure.

        A stream that ends before the model said it finished raises a recoverable
        network error, so a truncated turn is never taken for a complete one.
        """
        finished = False
        redacted = _RedactedTurn(_redactor())
        try:
            for event in self._turn(conversation, tools, system):
                if not isinstance(event, _TURN_EVENTS):
                    raise self._not_a_turn_event(event)
                finished = finished or isinstance(event, TurnEnd)
                yield from redacted.events(event)
        except ProviderError as exc:
            _scrubbed(exc)
            raise
        except AgentstreamError:  # ours on purpose (a missing SDK): it says what to do already
            raise
        except Exception as exc:
            mapped = self.map_error(exc)
            if mapped is None:
                raise
            raise _scrubbed(mapped) from exc
        if not finished:
            raise network_error("the model's stream ended before the turn was complete")

    def _not_a_turn_event(self, event: object) -> ProviderError:
        """A provider (a plugin's: the built-ins yield only turn events) that yields anything else is broken:
        the run ends saying so, rather than retrying a stream that only looks cut off."""
        from agentstream.plugins import describe

        names = ", ".join(kind.__name__ for kind in _TURN_EVENTS)
        return ProviderError(
            f"provider {self.name or type(self).__name__!r} yielded {describe(event)}, not a turn event",
            fix=f"its _turn() must yield only {names} (from agentstream.agent.providers.base)",
        )

    @abstractmethod
    def _turn(
        self, conversation: Conversation, tools: Sequence[ToolSpec], system: str
    ) -> Iterator[TurnEvent]:
        """Yield the events of one call; end with :class:`TurnUsage` and :class:`TurnEnd`."""

    def map_error(self, exc: Exception) -> ProviderError | None:
        """The ProviderError for an exception from the provider's library, or None to let it propagate."""
        return transport_error(exc)

    def close(self) -> None:
        """Release connections; called once when the run ends."""


class SdkProvider(Provider):
    """A provider over an official SDK (``anthropic``, ``openai``): one client, made on first use.

    The client never retries on its own (the loop owns retries, so every attempt is seen) and times out
    as ``--timeout`` says; the SDK's exceptions become :class:`ProviderError` through :func:`map_sdk_error`.
    """

    sdk: ClassVar[str]
    """The SDK's module (imported lazily; missing, it exits 2 naming the ``agent`` extra)."""
    client_class: ClassVar[str]
    no_credential: ClassVar[tuple[str, str]]
    """The message and fix of the error raised when there is no credential."""

    def __init__(
        self,
        model: str,
        settings: ProviderSettings,
        credential: Mapping[str, str] | None,
        base_url: str | None,
        *,
        credential_source: str = "the API key",
    ) -> None:
        super().__init__(model)
        self.settings = settings
        self.credential = credential
        """The SDK's keyword argument(s) for the key, or ``None`` when there is none."""
        self.credential_source = credential_source
        """Where the key came from (an environment variable's name), for messages that must not show it."""
        self.base_url = base_url
        self._client: Any = None

    def client(self) -> Any:
        if self._client is None:
            if self.credential is None:
                message, fix = self.no_credential
                raise ProviderError(message, code=ErrorCode.AUTH_EXPIRED, fix=fix)
            _check_header_safe(self.credential.values(), self.credential_source)
            sdk_class = getattr(self._sdk(), self.client_class)
            self._client = sdk_class(
                **self.credential, base_url=self.base_url, max_retries=0, timeout=self.settings.timeout_s
            )
        return self._client

    def map_error(self, exc: Exception) -> ProviderError | None:
        return map_sdk_error(exc, self._sdk())

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def _sdk(self) -> ModuleType:
        return require(self.sdk, "agent")

    def read(
        self, open_stream: Callable[[], Any], reader: Callable[[Any, Callable[[], None]], Iterator[TurnEvent]]
    ) -> Iterator[TurnEvent]:
        """The events of one SDK stream, under the ``--timeout`` progress deadline.

        The SDK's read timeout restarts with every byte, so a server that sends only
        keep-alives (Anthropic ``ping`` events, SSE comments) would hold a call
        forever. Here ``reader(stream, progress)`` calls ``progress()`` for each piece
        of the answer (text, reasoning, a tool-call fragment, the end); a call with no
        progress for ``timeout_s`` is cut and fails as a recoverable timeout. A reply
        that ends without finishing and was not an event stream at all (a JSON body, a
        captive portal's page) fails for good: retrying the same URL cannot help.
        """
        timeout = self.settings.timeout_s
        with _ProgressDeadline(timeout) as deadline:
            stream = open_stream()
            finished = False
            with stream:
                deadline.watch(stream.response)
                try:
                    for event in reader(stream, deadline.progress):
                        finished = finished or isinstance(event, TurnEnd)
                        yield event
                except Exception:
                    if deadline.expired:
                        raise deadline.error() from None
                    raise
                if not finished:
                    if deadline.expired:
                        raise deadline.error()
                    _require_event_stream(stream.response)


def _require_event_stream(response: Any) -> None:
    """Raise the non-retried error for a 200 reply that is not ``text/event-stream``."""
    content_type = str(response.headers.get("content-type") or "none")
    if content_type.split(";")[0].strip().lower() != "text/event-stream":
        raise ProviderError(
            f"the model's reply was not a stream (content type {content_type[:80]})",
            code=ErrorCode.PROVIDER_ERROR,
            fix="check the provider's base URL (a proxy or captive portal may be answering instead)",
        )


class _ProgressDeadline:
    """Cuts a model call that has made no progress for ``timeout_s`` seconds, keep-alives or not.

    A watcher thread waits out the deadline (moved on by each :meth:`progress`); on
    expiry it shuts the response's socket down, which wakes the read blocked in the
    SDK, and the reading side turns whatever that read raised into :meth:`error`.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.last = 0.0
        self.expired = False
        self._done = threading.Event()
        self._response: Any = None

    def __enter__(self) -> _ProgressDeadline:
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()

    def progress(self) -> None:
        self.last = time.monotonic()

    def watch(self, response: Any) -> None:
        """Start the clock on ``response`` (the wait for its headers is the SDK's read timeout's)."""
        self._response = response
        self.last = time.monotonic()
        from agentstream._signals import start_thread

        # Signals blocked in it: they are the main thread's to take (the watcher starts no process).
        start_thread(threading.Thread(target=self._watch, name="agentstream-model-deadline", daemon=True))

    def error(self) -> ProviderError:
        return network_error(
            f"the request to the model timed out: no progress for {self.timeout_s:g} s (--timeout)"
        )

    def _watch(self) -> None:
        while not self._done.wait(max(self.last + self.timeout_s - time.monotonic(), 0.0)):
            if time.monotonic() - self.last >= self.timeout_s:
                self.expired = True
                _cut(self._response)
                return


def _cut(response: Any) -> None:
    """Shut the response's connection down from another thread (close alone may not wake a blocked read)."""
    import socket

    stream = getattr(response, "extensions", {}).get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    try:
        if isinstance(sock, socket.socket):
            sock.shutdown(socket.SHUT_RDWR)
        else:
            response.close()
    except Exception:  # already closed, or a transport without sockets: the read timeout still applies
        pass


def _check_header_safe(values: Iterable[str], source: str) -> None:
    """Refuse a key that cannot travel in an HTTP header (a pasted newline, a non-ASCII letter) before sending it.

    Sent, it fails deep in the HTTP library as a connection error or an encoding
    exception; retrying cannot help, and the message must name where the key came
    from, never the key.
    """
    for value in values:
        if value != value.strip() or not all(" " <= char <= "~" for char in value):
            raise ProviderError(
                f"{source} cannot be sent: it holds whitespace at an end, a control character "
                "or a non-ASCII character",
                code=ErrorCode.AUTH_EXPIRED,
                fix=f"check the key in {source} (a line ending copied from a .env file, a stray character)",
            )


# -- error mapping ------------------------------------------------------------------

_CONTEXT_HINTS: Final = re.compile(
    r"context[_ ]length|context window|prompt is too long|too many tokens|maximum context|request_too_large",
    re.I,
)
_RECOVERABLE_TYPES: Final = {
    "overloaded_error": ErrorCode.PROVIDER_ERROR,
    "api_error": ErrorCode.PROVIDER_ERROR,
    "rate_limit_error": ErrorCode.RATE_LIMITED,
    "server_error": ErrorCode.PROVIDER_ERROR,
}
_MAX_RETRY_AFTER_MS: Final = 300_000


def map_sdk_error(exc: Exception, sdk: ModuleType) -> ProviderError | None:
    """Translate an exception of the ``openai`` or ``anthropic`` SDK (their hierarchies match)."""
    if isinstance(exc, sdk.APITimeoutError):
        return network_error("the request to the model timed out")
    if isinstance(exc, sdk.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        return network_error(f"the connection to the model failed: {cause or exc}")
    if isinstance(exc, sdk.APIStatusError):
        status = exc.status_code
        # Anthropic raises an in-stream ``event: error`` as a status error of the 200 response.
        message = _body_message(exc.body) if status < 300 else None
        return status_error(status, message or str(exc), exc.response.headers, exc.body)
    if isinstance(exc, sdk.APIError):  # OpenAI: ``data: {"error": {...}}`` inside a 200 stream
        return status_error(0, exc.message, {}, exc.body)
    if isinstance(exc, json.JSONDecodeError):  # the SDKs decode each SSE event themselves
        return ProviderError(
            scrub(f"the model's stream carried an event that is not JSON ({exc.msg})"),
            code=ErrorCode.PROVIDER_ERROR,
            recoverable=True,
            fix="check the provider's base URL (a proxy may be rewriting the stream)",
        )
    return transport_error(exc)


def transport_error(exc: Exception) -> ProviderError | None:
    """Network failures raised below the SDK (a connection dropped mid-stream, a reset socket).

    The SDKs' HTTP library (``httpx2``) is not our dependency: if nothing has imported
    it, none of its exceptions can be in flight, so it is looked up, never imported.
    """
    transport = getattr(sys.modules.get("httpx2"), "TransportError", None)  # None while still importing
    if isinstance(exc, OSError) or (transport is not None and isinstance(exc, transport)):
        return network_error(f"the connection to the model failed: {exc}")
    return None


def network_error(message: str) -> ProviderError:
    return ProviderError(
        scrub(message),
        code=ErrorCode.NETWORK_TIMEOUT,
        recoverable=True,
        fix="check the network and the provider's base URL",
    )


def status_error(status: int, message: str, headers: Mapping[str, str], body: object) -> ProviderError:
    """Classify an HTTP error status from a provider; ``status`` below 300 is an error event in a stream.

    An in-stream error has no telling status, so its body's error type decides:
    the kinds the providers document as transient (overloaded, rate limited,
    server error) are recoverable, anything else is a plain ``PROVIDER_ERROR``.
    """
    kind, code = _error_kind(body)
    text = scrub(message)
    retry_in_ms = retry_after_ms(headers)
    if status in (401, 403) or kind in ("authentication_error", "permission_error"):
        return ProviderError(
            text, code=ErrorCode.AUTH_EXPIRED, fix="check the provider's API key (see docs/agent.md)"
        )
    if code == "insufficient_quota":
        return ProviderError(
            text, code=ErrorCode.RATE_LIMITED, fix="the account is out of quota; check its billing"
        )
    if status == 429 or kind == "rate_limit_error" or code == "rate_limit_exceeded":
        return ProviderError(text, code=ErrorCode.RATE_LIMITED, recoverable=True, retry_in_ms=retry_in_ms)
    if status in (400, 413) and (code == "context_length_exceeded" or _CONTEXT_HINTS.search(message)):
        return ProviderError(
            text,
            code=ErrorCode.CONTEXT_LIMIT,
            fix="start a new session, or use a model with a larger context",
        )
    if status in (408, 409) or status >= 500 or kind in _RECOVERABLE_TYPES:
        code_for_kind = _RECOVERABLE_TYPES.get(kind or "", ErrorCode.PROVIDER_ERROR)
        return ProviderError(text, code=code_for_kind, recoverable=True, retry_in_ms=retry_in_ms)
    if status == 404:
        return ProviderError(text, code=ErrorCode.PROVIDER_ERROR, fix="check --model and --base-url")
    return ProviderError(text, code=ErrorCode.PROVIDER_ERROR)


def _body_message(body: object) -> str | None:
    """The ``message`` of either provider's error body, if it has one."""
    inner = body.get("error", body) if isinstance(body, dict) else None
    message = inner.get("message") if isinstance(inner, dict) else None
    return message if isinstance(message, str) else None


def _error_kind(body: object) -> tuple[str | None, str | None]:
    """(error type, error code) from either provider's error body."""
    if not isinstance(body, dict):
        return None, None
    inner = body.get("error", body)
    if not isinstance(inner, dict):
        return None, None
    kind, code = inner.get("type"), inner.get("code")
    return (kind if isinstance(kind, str) else None), (code if isinstance(code, str) else None)


def retry_after_ms(headers: Mapping[str, str]) -> int | None:
    """The server's requested wait: ``retry-after-ms``, else ``retry-after`` (seconds or an HTTP date)."""
    try:
        value = headers.get("retry-after-ms")
        if value is not None:
            return min(int(float(value)), _MAX_RETRY_AFTER_MS)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            seconds = float(value)
        except ValueError:
            from email.utils import parsedate_to_datetime

            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        return min(max(int(seconds * 1000), 0), _MAX_RETRY_AFTER_MS)
    except (TypeError, ValueError):
        return None


# -- scrubbing ------------------------------------------------------------------------

_KEY_PATTERNS: Final = re.compile(
    r"\b(?:sk|xai|gsk|hf|pk|rk)[-_][A-Za-z0-9][A-Za-z0-9_\-]{7,}"  # sk-…, sk-ant-…, sk-proj-…, xai-…, gsk_…, hf_…
    r"|AIza[0-9A-Za-z_\-]{20,}"  # Google API keys
    r"|(?<=Bearer )[A-Za-z0-9._~+/=\-]{8,}"  # whatever follows Bearer
    r"|(?i:(?<=api[-_]key[=:] )|(?<=api[-_]key=))[^\s,;\"']{6,}"
)


def scrub(text: str) -> str:
    """``text`` without anything that looks like an API key or equals a secret from the environment."""
    return _KEY_PATTERNS.sub("[redacted]", _redactor()(text))


def _scrubbed(exc: ProviderError) -> ProviderError:
    """``exc`` with its message and fix scrubbed (a cassette or a server may have put a key in them)."""
    exc.message = scrub(exc.message)
    exc.args = (exc.message,)
    exc.fix = scrub(exc.fix) if exc.fix else exc.fix
    return exc


def _redactor() -> Redactor:
    from agentstream._secrets import configured_redactor

    return configured_redactor()


class _RedactedTurn:
    """One call's events with the configured secrets redacted; text and reasoning chunk by chunk.

    A run of text (or reasoning) deltas passes through one :class:`DeltaGuard`, so a
    secret split across two deltas is still caught; what the guard holds back is
    released as a last delta of the run before any other event.
    """

    def __init__(self, redactor: Redactor) -> None:
        from agentstream._secrets import DeltaGuard

        self.redactor = redactor
        self.guard = DeltaGuard(redactor)
        self.run: type[TextDelta] | type[ReasoningDelta] | None = None

    def events(self, event: TurnEvent) -> Iterator[TurnEvent]:
        if not self.redactor:
            yield event
            return
        if isinstance(event, (TextDelta, ReasoningDelta)):
            if type(event) is not self.run:
                yield from self._end_run()
                self.run = type(event)
            text = self.guard.feed(event.text)
            if text:
                yield type(event)(text)
            return
        yield from self._end_run()
        yield self.redactor.value(event)

    def _end_run(self) -> Iterator[TurnEvent]:
        held = self.guard.flush()
        if held and self.run is not None:
            yield self.run(held)
        self.run = None
