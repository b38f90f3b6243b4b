"""Cassettes: recorded model turns played back while the tools run for real.

A cassette is NDJSON. The first line is a header, then one line per model call,
in order (the format is documented in ``docs/agent.md``)::

    {"cassette":1,"provider":"openai","model":"gpt-4.1-mini","recorded_at":"2025-06-01T10:00:00.000Z"}
    {"call":1,"events":[{"type":"text","text":"Let me look."},{"type":"tool_call","call_id":"call_1","name":"list_dir","arguments":{"path":"."}},{"type":"usage","input_tokens":812,"output_tokens":41,"cached_tokens":0,"reasoning_tokens":0},{"type":"end","reason":"tool_calls"}]}
    {"call":2,"events":[{"type":"text","text":"Par"}],"error":{"code":"NETWORK_TIMEOUT","message":"…","recoverable":true}}

``events`` are the provider-neutral turn events of :mod:`.base`. A call with an
``error`` replays its partial events and then fails the same way, so the agent
loop retries exactly as it did live. The playback ignores what the conversation
says: call *n* of a run gets line *n*, whatever the tools returned. The bundled
demo (:class:`DemoProvider`) is the exception: it plays its one user turn again
for every user turn.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final

import msgspec

from agentstream.agent.providers.base import Provider, ProviderSettings, ToolCallDone, TurnEvent
from agentstream.errors import ErrorCode, ProviderError, UsageError
from agentstream.protocol import JSON_ENCODER, now_ts

if TYPE_CHECKING:
    from agentstream.agent.conversation import Conversation
    from agentstream.agent.tools import ToolSpec

__all__ = ["CASSETTE_VERSION", "DemoProvider", "RecordingProvider", "ReplayProvider"]

CASSETTE_VERSION = 1


class CassetteHeader(msgspec.Struct, kw_only=True):
    cassette: int
    provider: str
    model: str
    recorded_at: str = ""


class CassetteError(msgspec.Struct, kw_only=True, omit_defaults=True):
    code: str
    message: str
    recoverable: bool = False
    retry_in_ms: int | None = None
    fix: str | None = None

    @classmethod
    def of(cls, exc: ProviderError) -> CassetteError:
        return cls(
            code=exc.code,
            message=exc.message,
            recoverable=exc.recoverable,
            retry_in_ms=exc.retry_in_ms,
            fix=exc.fix,
        )

    def exception(self) -> ProviderError:
        return ProviderError(
            self.message,
            code=self.code,
            fix=self.fix,
            recoverable=self.recoverable,
            retry_in_ms=self.retry_in_ms,
        )


class CassetteCall(msgspec.Struct, kw_only=True, omit_defaults=True):
    call: int
    events: list[TurnEvent] = []
    error: CassetteError | None = None


_header_decoder = msgspec.json.Decoder(CassetteHeader)
_call_decoder = msgspec.json.Decoder(CassetteCall)


DEMO_CASSETTE: Final = Path(__file__).resolve().parent.parent.parent / "data" / "demo.cassette.jsonl"
"""The recording ``--provider demo`` plays: one user turn (three model calls)."""


def from_settings(settings: ProviderSettings) -> ReplayProvider:
    """The ``replay`` provider: the ``--cassette`` recording (never a stand-in when there is none)."""
    if not settings.cassette:
        raise UsageError(
            "--provider replay plays a recording, and none was given",
            fix="pass --cassette FILE (record one with --record FILE), or use --provider demo",
        )
    return ReplayProvider(settings.cassette)


def demo_from_settings(settings: ProviderSettings) -> DemoProvider:
    """The ``demo`` provider: the bundled demo conversation, played only when asked for by name."""
    return DemoProvider()


class ReplayProvider(Provider):
    """Plays a cassette back, one recorded call per model call."""

    name = "replay"

    def __init__(self, path: str | Path, *, name: str = "replay") -> None:
        self.name = name
        self.path = Path(path)
        header, self.calls = _load(self.path)
        super().__init__(header.model)
        self.recorded_provider = header.provider
        self._next = 0

    def _turn(
        self, conversation: Conversation, tools: Sequence[ToolSpec], system: str
    ) -> Iterator[TurnEvent]:
        if self._next >= len(self.calls):
            raise ProviderError(
                f"the cassette {self.path.name} has no model turn left (it holds {len(self.calls)})",
                code=ErrorCode.PROVIDER_ERROR,
                fix="record a longer run with 'agentstream exec --record FILE'",
            )
        call = self.calls[self._next]
        self._next += 1
        yield from call.events
        if call.error is not None:
            raise call.error.exception()


class DemoProvider(ReplayProvider):
    """The bundled demo: its cassette is one user turn, played from its first call for every user turn.

    So a two-way (or ACP) session of many turns gets an answer to each. The tool
    call ids of the n-th user turn end in ``_n`` (from the second on): an id ties a
    result to its call, for ACP clients and for a model API the session is resumed
    with, so one session never holds the same id twice.
    """

    def __init__(self) -> None:
        super().__init__(DEMO_CASSETTE, name="demo")

    def _turn(
        self, conversation: Conversation, tools: Sequence[ToolSpec], system: str
    ) -> Iterator[TurnEvent]:
        messages = conversation.messages
        if messages and messages[-1].get("role") == "user":  # the first model call of a user turn
            self._next = 0
        user_turn = sum(1 for message in messages if message.get("role") == "user")
        for event in super()._turn(conversation, tools, system):
            if user_turn > 1 and isinstance(event, ToolCallDone):
                event = msgspec.structs.replace(event, call_id=f"{event.call_id}_{user_turn}")
            yield event


def _load(path: Path) -> tuple[CassetteHeader, list[CassetteCall]]:
    try:
        lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    except OSError as exc:
        raise UsageError(
            f"cannot read the cassette {path}: {exc.strerror or exc}", fix="check the --cassette path"
        ) from None
    if not lines:
        raise UsageError(
            f"the cassette {path} is empty", fix="record one with 'agentstream exec --record FILE'"
        )
    try:
        header = _header_decoder.decode(lines[0])
        calls = [_call_decoder.decode(line) for line in lines[1:]]
    except msgspec.DecodeError as exc:
        raise UsageError(
            f"{path} is not a valid cassette: {exc}", fix="see the cassette format in docs/agent.md"
        ) from None
    if header.cassette != CASSETTE_VERSION:
        raise UsageError(
            f"{path} is cassette version {header.cassette}; this agentstream reads version {CASSETTE_VERSION}"
        )
    return header, calls


class RecordingProvider(Provider):
    """Wraps a live provider and writes each of its calls to a cassette as it completes (or fails)."""

    def __init__(self, inner: Provider, path: str | Path) -> None:
        super().__init__(inner.model)
        self.inner = inner
        self.name = inner.name
        try:
            self._file: IO[bytes] = open(path, "wb")  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise UsageError(
                f"cannot write the cassette {path}: {exc.strerror or exc}", fix="check the --record path"
            ) from None
        header = CassetteHeader(
            cassette=CASSETTE_VERSION, provider=inner.name, model=inner.model, recorded_at=now_ts()
        )
        self._write(header)
        self._calls = 0

    def _turn(
        self, conversation: Conversation, tools: Sequence[ToolSpec], system: str
    ) -> Iterator[TurnEvent]:
        events: list[TurnEvent] = []
        self._calls += 1
        try:
            for event in self.inner.stream_turn(conversation, tools, system):
                events.append(event)
                yield event
        except ProviderError as exc:
            self._write(CassetteCall(call=self._calls, events=events, error=CassetteError.of(exc)))
            raise
        self._write(CassetteCall(call=self._calls, events=events))

    def _write(self, record: msgspec.Struct) -> None:
        """Every line of a recording passes here, with the configured secrets redacted."""
        from agentstream._secrets import configured_redactor

        self._file.write(JSON_ENCODER.encode(configured_redactor().value(record)) + b"\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()
        self.inner.close()
