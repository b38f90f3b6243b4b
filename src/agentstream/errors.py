"""Exceptions, protocol error codes and exit codes, all in one place.

Exception tree::

    AgentstreamError            code, message, fix, exit_code
    ├── UsageError              bad command-line usage or input (exit 2)
    ├── MalformedEventError     a line that is not a valid event (MALFORMED_EVENT)
    ├── UnknownDialectError     no dialect by that name / none detected
    └── ProviderError           a model provider failed (see agent.providers)
"""

from __future__ import annotations

import re
from functools import cache
from typing import Final

__all__ = [
    "ERROR_CODES",
    "AgentstreamError",
    "ErrorCode",
    "ExitCode",
    "MalformedEventError",
    "ProviderError",
    "UnknownDialectError",
    "UsageError",
    "code_from_wording",
    "exit_code_for_signal",
]


class ExitCode:
    """Process exit codes; ``result.exit_code`` always equals the process's.

    Plain constants rather than an enum: this module is imported on every start-up.
    """

    OK: Final = 0
    ERROR: Final = 1
    USAGE: Final = 2
    MAX_TURNS: Final = 3
    TIMEOUT: Final = 124
    CANNOT_EXECUTE: Final = 126
    NOT_FOUND: Final = 127
    SIGHUP: Final = 129
    SIGINT: Final = 130
    SIGPIPE: Final = 141
    SIGTERM: Final = 143


def exit_code_for_signal(signum: int) -> int:
    """The shell convention: 128 + the signal number."""
    return 128 + signum


class ErrorCode:
    """Values of ``error.code``. Consumers must accept codes not listed here."""

    UNKNOWN: Final = "UNKNOWN"
    INVALID_INPUT: Final = "INVALID_INPUT"
    MALFORMED_EVENT: Final = "MALFORMED_EVENT"
    UNKNOWN_DIALECT: Final = "UNKNOWN_DIALECT"
    INVALID_UTF8: Final = "INVALID_UTF8"
    LINE_TOO_LONG: Final = "LINE_TOO_LONG"
    STREAM_TRUNCATED: Final = "STREAM_TRUNCATED"
    PROCESS_CRASHED: Final = "PROCESS_CRASHED"
    STALLED: Final = "STALLED"
    CLI_NOT_FOUND: Final = "CLI_NOT_FOUND"
    INTERRUPTED: Final = "INTERRUPTED"
    OUTPUT_CLOSED: Final = "OUTPUT_CLOSED"
    OUTPUT_ERROR: Final = "OUTPUT_ERROR"
    NOT_FINISHED: Final = "NOT_FINISHED"
    EXCEPTION: Final = "EXCEPTION"
    AUTH_EXPIRED: Final = "AUTH_EXPIRED"
    RATE_LIMITED: Final = "RATE_LIMITED"
    PROVIDER_ERROR: Final = "PROVIDER_ERROR"
    NO_PROVIDER: Final = "NO_PROVIDER"
    NETWORK_TIMEOUT: Final = "NETWORK_TIMEOUT"
    CONTEXT_LIMIT: Final = "CONTEXT_LIMIT"
    MAX_TURNS: Final = "MAX_TURNS"
    MAX_BUDGET: Final = "MAX_BUDGET"
    TOOL_FAILED: Final = "TOOL_FAILED"
    PERMISSION_DENIED: Final = "PERMISSION_DENIED"
    SESSION_NOT_FOUND: Final = "SESSION_NOT_FOUND"
    SESSION_STORE_ERROR: Final = "SESSION_STORE_ERROR"
    RUN_NOT_FOUND: Final = "RUN_NOT_FOUND"
    EVENTS_MISSING: Final = "EVENTS_MISSING"
    SEQ_CONFLICT: Final = "SEQ_CONFLICT"
    WORKER_LOST: Final = "WORKER_LOST"
    PRODUCER_LOST: Final = "PRODUCER_LOST"
    BUS_UNAVAILABLE: Final = "BUS_UNAVAILABLE"
    TIMEOUT: Final = "TIMEOUT"
    MISSING_DEPENDENCY: Final = "MISSING_DEPENDENCY"
    UNAUTHORIZED: Final = "UNAUTHORIZED"
    FORBIDDEN: Final = "FORBIDDEN"


ERROR_CODES: Final[frozenset[str]] = frozenset(
    value for name, value in vars(ErrorCode).items() if name.isupper() and isinstance(value, str)
)
"""Every code listed in :class:`ErrorCode`."""

_WORDINGS: Final = (
    (
        ErrorCode.RATE_LIMITED,
        r"\b429\b|rate[ _-]?limit|usage limit|too many requests|resource[ _]exhausted|quota",
    ),
    (
        ErrorCode.AUTH_EXPIRED,
        r"\b401\b|unauthori[sz]ed|invalid (?:x-)?api[ _-]?key|authentication (?:failed|error)",
    ),
    (
        ErrorCode.CONTEXT_LIMIT,
        r"context (?:window|length)|prompt is too long|maximum context|exceeds the maximum number of tokens",
    ),
    (
        ErrorCode.PROVIDER_ERROR,
        r"\b50[0234]\b|overloaded|internal server error|service unavailable|bad gateway|stream disconnected"
        r"|high demand",
    ),
)


@cache
def _wording_patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((code, re.compile(words, re.IGNORECASE)) for code, words in _WORDINGS)


def code_from_wording(message: str) -> str:
    """The canonical code a provider's free-text error names (HTTP status or the words providers use), else UNKNOWN.

    For CLIs whose error lines carry no code of their own, so that a quota error reads as
    ``RATE_LIMITED`` whichever CLI relayed it.
    """
    for code, pattern in _wording_patterns():
        if pattern.search(message):
            return code
    return ErrorCode.UNKNOWN


class AgentstreamError(Exception):
    """Base of every error agentstream raises on purpose; carries what a stream needs to report it."""

    code: str = ErrorCode.UNKNOWN
    exit_code: int = ExitCode.ERROR

    def __init__(self, message: str, *, code: str | None = None, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.fix = fix


class UsageError(AgentstreamError):
    """The command line or its input is wrong; the fix says what to do instead."""

    code = ErrorCode.INVALID_INPUT
    exit_code = ExitCode.USAGE


class MalformedEventError(AgentstreamError):
    """A line is not a valid event of the expected format."""

    code = ErrorCode.MALFORMED_EVENT


class UnknownDialectError(UsageError):
    """No dialect by that name, or none could be detected from the input."""


class ProviderError(AgentstreamError):
    """A model provider call failed; ``recoverable`` and ``retry_in_ms`` say whether to try again."""

    code = ErrorCode.PROVIDER_ERROR

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        fix: str | None = None,
        recoverable: bool = False,
        retry_in_ms: int | None = None,
    ) -> None:
        super().__init__(message, code=code, fix=fix)
        self.recoverable = recoverable
        self.retry_in_ms = retry_in_ms


def error_text(command: str, code: str, message: str, fix: str | None, *, one_line: bool = False) -> str:
    """An error as a person reads it on stderr: ``COMMAND: CODE: message``, then the fix on a line of its own
    (``one_line``: in brackets after it, for commands whose errors are one line each).

    What the message quotes (a path, a value from the input) is written so that it cannot act on the terminal.
    """
    from agentstream._text import terminal_safe

    if not fix:
        shown_fix = ""
    elif one_line:
        shown_fix = f" (fix: {terminal_safe(fix, one_line=True)})"
    else:
        shown_fix = f"\n  fix: {terminal_safe(fix)}"
    return f"{command}: {code}: {terminal_safe(message, one_line=one_line)}{shown_fix}\n"
