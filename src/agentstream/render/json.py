"""The ``json`` format: exactly one object, the run's ``result``, written when the run ends.

Unlike tools that print nothing on failure, the object is written on every
path, failures included, because the Stream always produces a ``result``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentstream.protocol import Result, encode_line

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from agentstream.protocol import AnyEvent
    from agentstream.render import Sink, Writer


class JsonSink:
    """Keeps the last ``result`` (a session of many turns has one per turn) and writes it at the close.

    With a ``dialect`` whose CLI prints its ``result`` line as its JSON output (Claude Code's
    ``--output-format json``), every event goes through that dialect's encoder, and the last
    ``result`` line it wrote is the object.
    """

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
        self._line: bytes | None = None
        self.dialect = dialect
        self.encoder = dialect_encoder(dialect, after, dialect_options)

    def emit(self, event: AnyEvent) -> None:
        if self.encoder is not None:
            lines = self.encoder.encode(event)
            if type(event) is Result and lines:
                line = lines[-1]
                self._line = line if line.endswith(b"\n") else line + b"\n"
        elif type(event) is Result:
            self._line = encode_line(event)

    def close(self) -> None:
        line, self._line = self._line, None
        if line is not None:
            self._out.write(line)
