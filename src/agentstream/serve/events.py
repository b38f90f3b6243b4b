"""A run's records as the client asked for them: canonical lines, or another dialect's lines.

Each output line keeps the ``seq`` of the canonical event it came from, which is
the SSE ``id``; a client resuming after ``seq`` N gets exactly what follows. A
dialect encoder is stateful (open messages, tool calls, steps), so a resumed
dialect stream is encoded from the run's first event and only the lines after
the resume point are sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, NamedTuple

from agentstream import protocol as p
from agentstream.errors import AgentstreamError

if TYPE_CHECKING:
    from agentstream.dialects.base import DialectEncoder
    from agentstream.serve.hub import RunHub

__all__ = ["Line", "encoder_for", "run_lines"]


class Line(NamedTuple):
    seq: int
    data: bytes


def encoder_for(dialect: str | None) -> DialectEncoder | None:
    """The encoder of ``dialect`` (``None`` or ``canonical``: the stored lines as they are).

    Raises :class:`~agentstream.errors.UnknownDialectError` (listing the names) for an unknown one.
    """
    if dialect is None or dialect == "canonical":
        return None
    from agentstream.dialects import get_dialect

    return get_dialect(dialect).encoder()


async def run_lines(
    hub: RunHub, run_id: str, from_seq: int, encoder: DialectEncoder | None
) -> AsyncIterator[list[Line]]:
    """The run's lines from ``from_seq``, live, in batches, ending after its ``result``."""
    if encoder is None:
        async for batch in hub.batches(run_id, from_seq):
            yield [Line(record.seq, record.line) for record in batch]
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
            if record.seq >= from_seq:
                out += [Line(record.seq, line) for line in lines]
        if out:
            yield out
