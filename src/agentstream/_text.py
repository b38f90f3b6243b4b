"""Text that came from outside (argv, stdin, a file): valid UTF-8, or a clear usage error up front.

Python hands over argv and a misdecoded stdin with the bad bytes smuggled in as
lone surrogates (``surrogateescape``), which only fail much later, when the text
is encoded for a model, a store or the bus. :func:`utf8_text` checks once, where
the text enters, and names the first bad byte.
"""

from __future__ import annotations

from agentstream.errors import ErrorCode, UsageError

__all__ = ["utf8_text"]

_FIX = "send UTF-8 text (convert it first, e.g. with 'iconv -f latin1 -t utf-8')"


def utf8_text(value: str | bytes, what: str) -> str:
    """``value`` as a str that encodes as UTF-8, or a :class:`UsageError` with code ``INVALID_UTF8``."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _invalid(what, f"byte 0x{value[exc.start]:02x} at offset {exc.start}") from None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        point = ord(value[exc.start])
        if 0xDC80 <= point <= 0xDCFF:  # a byte that was not UTF-8, carried by surrogateescape
            raise _invalid(what, f"byte 0x{point - 0xDC00:02x} at character {exc.start}") from None
        raise _invalid(what, f"a lone surrogate U+{point:04X} at character {exc.start}") from None
    return value


def _invalid(what: str, where: str) -> UsageError:
    return UsageError(f"{what} is not valid UTF-8 ({where})", code=ErrorCode.INVALID_UTF8, fix=_FIX)
