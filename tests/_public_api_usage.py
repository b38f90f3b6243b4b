"""Typed code that uses every public name of ``agentstream``; ``tests/test_typing.py`` runs ``mypy --strict`` on it.

Never executed: it exists so that a public name whose types a user cannot rely on
(an ``Any`` leaking out, a missing annotation, a name not re-exported) fails CI.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Iterator

from agentstream import (
    PROTOCOL_VERSION,
    UNSET,
    AgentstreamError,
    AnyEvent,
    AsyncReader,
    AsyncSpawn,
    Error,
    Event,
    GenericEvent,
    Heartbeat,
    Log,
    MalformedEventError,
    Message,
    MessageDelta,
    PermissionRequest,
    Progress,
    ProviderError,
    Reader,
    Reasoning,
    ReasoningDelta,
    Result,
    Spawn,
    Start,
    Status,
    Step,
    Stream,
    ToolCall,
    ToolProgress,
    ToolResult,
    Transcript,
    UnknownDialectError,
    UnknownEvent,
    Usage,
    UsageError,
    __version__,
    aread,
    aspawn,
    decode,
    encode,
    encode_line,
    read,
    spawn,
)

EVENT_CLASSES: tuple[type[Event] | type[UnknownEvent], ...] = (
    Start, Message, MessageDelta, ReasoningDelta, Reasoning, ToolCall, ToolProgress, ToolResult,
    Usage, Step, Progress, Log, Status, GenericEvent, Error, Result, UnknownEvent, PermissionRequest, Heartbeat,
)  # fmt: skip
ERRORS: tuple[type[AgentstreamError], ...] = (
    MalformedEventError,
    ProviderError,
    UnknownDialectError,
    UsageError,
)
VERSIONS: tuple[str, int] = (__version__, PROTOCOL_VERSION)


def produce() -> int:
    out = io.BytesIO()
    stream = Stream("example", out=out, owns_process=False).start()
    message: Message = stream.message("hello")
    assert message.synthetic is UNSET or isinstance(message.synthetic, bool)
    stream.finish(result="done")
    return stream.result.exit_code if stream.result is not None else 1


def consume(data: bytes) -> Transcript:
    reader: Reader = read(data)
    transcript = Transcript.from_events(reader)
    line: bytes = encode_line(decode(encode(Log(level="info", message="x"))))
    assert line.endswith(b"\n")
    return transcript


def run_child(argv: list[str]) -> Iterator[AnyEvent]:
    child: Spawn = spawn(argv, exit_timeout_s=1.0)
    with child:
        yield from child


async def run_child_async(argv: list[str]) -> AsyncIterator[AnyEvent]:
    child: AsyncSpawn = aspawn(argv, exit_timeout_s=1.0)
    async with child:
        async for event in child:
            yield event
    reader: AsyncReader = aread([b""])
    async for event in reader:
        yield event


def result_of(event: AnyEvent) -> Result | None:
    return event if isinstance(event, Result) else None
