"""A run's records as the client asked for them: canonical lines, or another dialect's lines.

A canonical line's SSE ``id`` is its ``seq``. One canonical event may become several
lines of another dialect (AG-UI's TOOL_CALL_START, ARGS and END), so a dialect line's
``id`` is ``SEQ.N``: the seq it came from and its place among that event's lines.
A client resuming after either kind of id gets exactly what follows, nothing twice.
A dialect encoder is stateful (open messages, tool calls, steps), so a resumed
dialect stream is encoded from the run's first event and only the lines after
the resume point are sent.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, NamedTuple

from agentstream import protocol as p
from agentstream.errors import AgentstreamError, UnknownDialectError

if TYPE_CHECKING:
    from agentstream.dialects.base import DialectEncoder
    from agentstream.serve.hub import RunHub

__all__ = ["Line", "ResumePoint", "encoder_for", "run_lines"]


class Line(NamedTuple):
    id: str
    data: bytes


class ResumePoint(NamedTuple):
    """The first line to send: line ``frame`` of those made from the event with seq ``seq``."""

    seq: int
    frame: int = 0


def encoder_for(dialect: str | None) -> DialectEncoder | None:
    """The encoder of ``dialect`` (``None`` or ``canonical``: the stored lines as they are).

    Raises :class:`~agentstream.errors.UsageError` naming the dialects that can be written
    for an unknown name or a decode-only dialect.
    """
    if dialect is None or dialect == "canonical":
        return None
    from agentstream.dialects import DIALECTS, writable_dialects

    found = DIALECTS.get(dialect)
    if found is None:
        raise UnknownDialectError(
            f"unknown dialect {dialect!r}", fix=f"use one of: {', '.join(writable_dialects())}"
        )
    return found.encoder()  # a decode-only dialect's is the usage error naming the ones that can be written


async def run_lines(
    hub: RunHub, run_id: str, start: ResumePoint, encoder: DialectEncoder | None
) -> AsyncGenerator[list[Line], None]:
    """The run's lines from ``start``, live, in batches, ending after its ``result``."""
    if encoder is None:  # one line per event: a resume point inside an event means the next one
        async for batch in hub.batches(run_id, start.seq + (1 if start.frame else 0)):
            yield [Line(str(record.seq), record.line) for record in batch]
        return
    async for batch in hub.batches(run_id, 0):
        out = []
        for record in batch:
            try:
                event = p.decode(record.line)
            except AgentstreamError:
                continue  # a stored line this version cannot read: the canonical stream still has it
            lines = encoder.encode(event)
            if record.type == "result":
                lines += encoder.finish()
            out += [
                Line(f"{record.seq}.{frame}", line)
                for frame, line in enumerate(lines)
                if (record.seq, frame) >= start
            ]
        if out:
            yield out
