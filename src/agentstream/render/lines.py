"""The ``stream-json`` format: one line per event, canonical or in a dialect's shape."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from agentstream.protocol import UnknownEvent, encode_line

_encode_into = msgspec.json.Encoder().encode_into

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from agentstream.protocol import AnyEvent
    from agentstream.render import Sink, Writer


class LinesSink:
    """Writes each event the moment it is emitted, one write per line (or per dialect batch)."""

    def __init__(
        self,
        out: Writer,
        *,
        dialect: str | None = None,
        after: Sink | None = None,
        dialect_options: Mapping[str, Any] | None = None,
    ) -> None:
        from agentstream.render import dialect_encoder

        self._out = out
        self._buffer = bytearray()
        self.dialect = dialect
        self.encoder = dialect_encoder(dialect, after, dialect_options)

    def emit(self, event: AnyEvent) -> None:
        if self.encoder is None:
            if type(event) is UnknownEvent:
                self._out.write(encode_line(event))
                return
            # The hot path: encode into one reused buffer, newline included, one write.
            buffer = self._buffer
            _encode_into(event, buffer)
            buffer.append(10)
            self._out.write(buffer)
            return
        lines = self.encoder.encode(event)
        if lines:
            self._out.write(b"".join(line + b"\n" for line in lines))

    def close(self) -> None:
        if self.encoder is None:
            return
        lines = self.encoder.finish()
        if lines:
            self._out.write(b"".join(line + b"\n" for line in lines))
