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
    def __init__(self, out: Writer) -> None:
        self._out = out

    def emit(self, event: AnyEvent) -> None:
        if isinstance(event, Result):
            self._out.write(encode_line(event))

    def close(self) -> None:
        return None
