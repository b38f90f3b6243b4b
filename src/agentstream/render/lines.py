"""The ``stream-json`` format: one line per event, canonical or in a dialect's shape."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentstream.protocol import encode_line

if TYPE_CHECKING:
    from agentstream.protocol import AnyEvent
    from agentstream.render import Writer


class LinesSink:
    """Writes each event the moment it is emitted, one write per line (or per dialect batch)."""

    def __init__(self, out: Writer, *, dialect: str | None = None) -> None:
        self._out = out
        self._encoder = None
        if dialect not in (None, "canonical"):
            from agentstream.dialects import get_dialect

            self._encoder = get_dialect(dialect).encoder()

    def emit(self, event: AnyEvent) -> None:
        if self._encoder is None:
            self._out.write(encode_line(event))
            return
        lines = self._encoder.encode(event)
        if lines:
            self._out.write(b"".join(line + b"\n" for line in lines))

    def close(self) -> None:
        if self._encoder is None:
            return
        lines = self._encoder.finish()
        if lines:
            self._out.write(b"".join(line + b"\n" for line in lines))
