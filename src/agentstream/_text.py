"""Text that came from outside (argv, stdin, a file, a model, a tool): checked where it enters, made safe where
it is shown.

Python hands over argv and a misdecoded stdin with the bad bytes smuggled in as
lone surrogates (``surrogateescape``), which only fail much later, when the text
is encoded for a model, a store or the bus. :func:`utf8_text` checks once, where
the text enters, and names the first bad byte.

Text shown to a person on a terminal must not be able to act on it: an escape
sequence in a model's answer or a tool's output could set the window title, write
the clipboard (OSC 52), move the cursor over earlier lines or hide a link, and a
carriage return or a bidi override makes text read other than it is.
:func:`terminal_safe` writes every such character as a visible escape.
"""

from __future__ import annotations

from typing import Final

from agentstream.errors import ErrorCode, UsageError

__all__ = ["terminal_safe", "utf8_text"]

_ESCAPES: Final[dict[int, str]] = {
    **{code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))},
    **{
        code: f"\\u{code:04x}"
        for code in (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
    },
    0x08: "\\b",
    0x09: "\\t",
    0x0A: "\\n",
    0x0D: "\\r",
    0x1B: "\\e",
}
"""C0 and C1 controls, DEL, and the bidi marks, overrides and isolates, as escapes."""
_KEEPING_LINES: Final = {code: escape for code, escape in _ESCAPES.items() if code not in (0x09, 0x0A)}
"""The same, but tab and newline (for text with lines, such as an answer)."""


def terminal_safe(text: str, *, one_line: bool = False) -> str:
    """``text`` with nothing that can act on a terminal (see the module): controls, DEL and bidi controls written
    as escapes (``\\e``, ``\\r``, ``\\x9b``, ``\\u202e``). Tab and newline are kept unless ``one_line`` (a
    table cell, a name), and a CRLF line ending is a newline."""
    if one_line:
        return text.translate(_ESCAPES)
    return text.replace("\r\n", "\n").translate(_KEEPING_LINES)


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
