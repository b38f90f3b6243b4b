"""The ``json`` format: exactly one object, the run's ``result``, written when the run ends.

Unlike tools that print nothing on failure, the object is written on every
path, failures included, because the Stream always produces a ``result``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentstream.protocol import Result, encode_line

if TYPE_CHECKING:
    from agentstream.protocol import AnyEvent
    from agentstream.render import Writer


class JsonSink:
    """Keeps the last ``result`` (a session of many turns has one per turn) and writes it at the close."""

    def __init__(self, out: Writer) -> None:
        self._out = out
        self._result: Result | None = None

    def emit(self, event: AnyEvent) -> None:
        if type(event) is Result:
            self._result = event

    def close(self) -> None:
        result, self._result = self._result, None
        if result is not None:
            self._out.write(encode_line(result))
