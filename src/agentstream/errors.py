"""Exceptions, protocol error codes and exit codes, all in one place.

Exception tree::

    AgentstreamError            code, message, fix, exit_code
    ├── UsageError              bad command-line usage or input (exit 2)
    ├── MalformedEventError     a line that is not a valid event (MALFORMED_EVENT)
    ├── UnknownDialectError     no dialect by that name / none detected
    └── ProviderError           a model provider failed (see agent.providers)
"""

from __future__ import annotations

from enum import IntEnum, StrEnum

__all__ = [
    "AgentstreamError",
    "ErrorCode",
    "ExitCode",
    "MalformedEventError",
    "ProviderError",
    "UnknownDialectError",
    "UsageError",
    "exit_code_for_signal",
]


class ExitCode(IntEnum):
    """Process exit codes; ``result.exit_code`` always equals the process's."""

    OK = 0
    ERROR = 1
    USAGE = 2
    MAX_TURNS = 3
    TIMEOUT = 124
    CANNOT_EXECUTE = 126
    NOT_FOUND = 127
    SIGHUP = 129
    SIGINT = 130
    SIGPIPE = 141
    SIGTERM = 143


def exit_code_for_signal(signum: int) -> int:
    """The shell convention: 128 + the signal number."""
    return 128 + signum


class ErrorCode(StrEnum):
    """Values of ``error.code``. Consumers must accept codes not listed here."""

    UNKNOWN = "UNKNOWN"
    INVALID_INPUT = "INVALID_INPUT"
    MALFORMED_EVENT = "MALFORMED_EVENT"
    UNKNOWN_DIALECT = "UNKNOWN_DIALECT"
    INVALID_UTF8 = "INVALID_UTF8"
    LINE_TOO_LONG = "LINE_TOO_LONG"
    STREAM_TRUNCATED = "STREAM_TRUNCATED"
    PROCESS_CRASHED = "PROCESS_CRASHED"
    CLI_NOT_FOUND = "CLI_NOT_FOUND"
    INTERRUPTED = "INTERRUPTED"
    OUTPUT_CLOSED = "OUTPUT_CLOSED"
    NOT_FINISHED = "NOT_FINISHED"
    EXCEPTION = "EXCEPTION"
    AUTH_EXPIRED = "AUTH_EXPIRED"
    RATE_LIMITED = "RATE_LIMITED"
    PROVIDER_ERROR = "PROVIDER_ERROR"
    NETWORK_TIMEOUT = "NETWORK_TIMEOUT"
    CONTEXT_LIMIT = "CONTEXT_LIMIT"
    MAX_TURNS = "MAX_TURNS"
    TOOL_FAILED = "TOOL_FAILED"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
    SESSION_STORE_ERROR = "SESSION_STORE_ERROR"
    RUN_NOT_FOUND = "RUN_NOT_FOUND"
    EVENTS_MISSING = "EVENTS_MISSING"
    SEQ_CONFLICT = "SEQ_CONFLICT"
    WORKER_LOST = "WORKER_LOST"
    BUS_UNAVAILABLE = "BUS_UNAVAILABLE"
    TIMEOUT = "TIMEOUT"


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
