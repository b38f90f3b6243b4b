"""Errors that carry no code of their own are read by their wording, the same way in every dialect."""

from __future__ import annotations

from typing import Any

import pytest

from _dialect_kit import decode, line
from agentstream import protocol as p
from agentstream.errors import ErrorCode, code_from_wording

QUOTA = (
    "[API Error: You exceeded your current quota, please check your plan and billing details. "
    "(Status: RESOURCE_EXHAUSTED)]"
)


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (QUOTA, ErrorCode.RATE_LIMITED),
        ("429 Too Many Requests", ErrorCode.RATE_LIMITED),
        ("Claude AI usage limit reached|1767225600", ErrorCode.RATE_LIMITED),
        ("Rate limit exceeded, retry later", ErrorCode.RATE_LIMITED),
        ("401 Unauthorized", ErrorCode.AUTH_EXPIRED),
        ("Invalid API key · Please run /login", ErrorCode.AUTH_EXPIRED),
        ("prompt is too long: 210000 tokens > 200000 maximum", ErrorCode.CONTEXT_LIMIT),
        ("Your input exceeds the context window of this model", ErrorCode.CONTEXT_LIMIT),
        (
            "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
            ErrorCode.CONTEXT_LIMIT,
        ),
        ("stream disconnected before completion", ErrorCode.PROVIDER_ERROR),
        ("upstream returned 503 Service Unavailable", ErrorCode.PROVIDER_ERROR),
        ("Overloaded", ErrorCode.PROVIDER_ERROR),
        # Codex 0.171 says so of an HTTP 500.
        (
            "We’re currently experiencing high demand, which may cause temporary errors.",
            ErrorCode.PROVIDER_ERROR,
        ),
        # Numbers inside other numbers, and failures that name no provider trouble, stay unknown.
        ("wrote 14290 bytes to out.txt, then failed", ErrorCode.UNKNOWN),
        ("build 5004 failed", ErrorCode.UNKNOWN),
        ("the model refused", ErrorCode.UNKNOWN),
    ],
)
def test_wording_names_the_code(message: str, code: str) -> None:
    assert code_from_wording(message) == code


def _failure(events: list[p.AnyEvent]) -> str:
    result = events[-1]
    assert isinstance(result, p.Result) and not result.ok
    assert isinstance(result.error, p.ErrorInfo)
    return result.error.code


RESULT_LINES: dict[str, list[dict[str, Any]]] = {
    # Gemini's stream-json names an API error's class, which says nothing; its message does.
    "gemini": [
        {
            "type": "init",
            "timestamp": "2026-11-01T10:00:00.000Z",
            "session_id": "s1",
            "model": "gemini-2.5-pro",
        },
        {
            "type": "result",
            "timestamp": "2026-11-01T10:00:01.000Z",
            "status": "error",
            "error": {"type": "Error", "message": QUOTA},
        },
    ],
    "cursor": [{"type": "result", "subtype": "error", "is_error": True, "result": QUOTA}],
    # Claude Code's subscription limit comes as a failed result's text, with no status or category.
    "claude": [
        {
            "type": "result",
            "subtype": "success",
            "is_error": True,
            "result": "Claude AI usage limit reached|1767225600",
            "session_id": "s1",
            "duration_ms": 10,
            "num_turns": 1,
        }
    ],
    "opencode": [
        {
            "type": "error",
            "timestamp": 1767225600000,
            "sessionID": "ses_1",
            "error": {"name": "UnknownError", "data": {"message": QUOTA}},
        }
    ],
    "codex": [
        {"type": "thread.started", "thread_id": "t1"},
        {"type": "turn.started"},
        {"type": "turn.failed", "error": {"message": QUOTA}},
    ],
}


@pytest.mark.parametrize("dialect", sorted(RESULT_LINES))
def test_a_quota_failure_is_rate_limited_in_every_dialect(dialect: str) -> None:
    assert _failure(decode(dialect, [line(obj) for obj in RESULT_LINES[dialect]])) == ErrorCode.RATE_LIMITED


def test_a_gemini_error_line_is_coded_by_its_words() -> None:
    events = decode(
        "gemini",
        [
            line(
                {
                    "type": "error",
                    "timestamp": "2026-11-01T10:00:00.000Z",
                    "severity": "warning",
                    "message": QUOTA,
                }
            )
        ],
    )
    errors = [event for event in events if isinstance(event, p.Error)]
    assert [(error.code, error.recoverable) for error in errors] == [(ErrorCode.RATE_LIMITED, True)]
