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
from agentstream.bus import BusUnusable
from agentstream.ending import add_line
from agentstream.errors import AgentstreamError, UnknownDialectError
from agentstream.transcript import Tally

if TYPE_CHECKING:
    from agentstream.dialects.base import DialectEncoder
    from agentstream.serve.hub import RunHub

__all__ = ["Line", "ResumePoint", "encoder_for", "run_lines"]


class Line(NamedTuple):
    id: str | None
    """``SEQ`` or ``SEQ.N``; None for a line that is not the run's (an ending the server made up)."""
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
    hub: RunHub, run_id: str, start: ResumePoint, encoder: DialectEncoder | None, *, command: str
) -> AsyncGenerator[list[Line], None]:
    """The run's lines from ``start``, live, in batches, ending after its ``result``.

    A bus that no retry mends ends the lines instead with the ending a follower writes
    when it stops first (:func:`~agentstream.bus.follow.follower_ending`): the error's
    code, message and fix, in a session of its own, so the client stops rather than
    reconnecting to the same error. Those lines have no ``id``: a resume goes on from
    the run's last line sent.
    """
    tally = Tally(for_ending=True)
    next_seq = start.seq + (1 if start.frame else 0)
    sent = False
    try:
        if encoder is None:  # one line per event: a resume point inside an event means the next one
            async for batch in hub.batches(run_id, next_seq):
                for record in batch:
                    add_line(tally, record.type, record.line)
                next_seq, sent = batch[-1].seq + 1, True
                yield [Line(str(record.seq), record.line) for record in batch]
            return
        async for batch in hub.batches(run_id, 0):
            out = []
            for record in batch:
                add_line(tally, record.type, record.line)
                try:
                    event = p.decode(record.line)
                except AgentstreamError:
                    continue  # a stored line this version cannot read: the canonical stream still has it
                out += [
                    Line(f"{record.seq}.{frame}", line)
                    for frame, line in enumerate(_encoded(encoder, event))
                    if (record.seq, frame) >= start
                ]
            next_seq = batch[-1].seq + 1
            if out:
                sent = True
                yield out
    except BusUnusable as exc:
        from agentstream.bus.follow import follower_ending

        ending = follower_ending(
            tally,
            run_id,
            next_seq,
            exc,
            subtype="bus_unavailable",
            exit_code=int(exc.exit_code),
            command=command,
            opened=sent,
        )
        if encoder is None:
            yield [Line(None, p.encode(event)) for event in ending]
        else:
            yield [Line(None, line) for event in ending for line in _encoded(encoder, event)]


def _encoded(encoder: DialectEncoder, event: p.AnyEvent) -> list[bytes]:
    """The dialect's lines for one event; after the ``result``, whatever the encoder still held."""
    lines = encoder.encode(event)
    return lines + encoder.finish() if event.type == "result" else lines
