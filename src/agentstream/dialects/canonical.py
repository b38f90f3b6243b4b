"""The canonical protocol v1 as a dialect, so every reader and writer treats it like the others."""

from __future__ import annotations

from typing import Any

from agentstream import protocol as p
from agentstream.dialects.kit import DialectDecoder, DialectEncoder, SimpleDialect
from agentstream.errors import MalformedEventError


class CanonicalDecoder(DialectDecoder):
    """Passes canonical events through unchanged, keeping their own stamps."""

    def decode_line(self, line: bytes | bytearray) -> list[p.AnyEvent] | None:
        try:
            return [p.decode(line)]
        except MalformedEventError:
            return None

    def decode_object(self, obj: dict[str, Any]) -> None:
        import msgspec

        self._out.append(p.decode(msgspec.json.encode(obj)))


class CanonicalEncoder(DialectEncoder):
    def encode(self, event: p.AnyEvent) -> list[bytes]:
        return [p.encode(event)]


class CanonicalDialect(SimpleDialect):
    name = "canonical"
    summary = "agentstream protocol v1"
    decoder_class = CanonicalDecoder
    encoder_class = CanonicalEncoder

    def sniff(self, obj: dict[str, Any]) -> float:
        return 1.0 if p.is_canonical_object(obj) else 0.0


DIALECT = CanonicalDialect()
