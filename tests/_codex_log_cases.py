"""A Codex session log with one ``token_count`` record whose running total cannot be read, for the tests
of both paths that count it (the codex-log decoder and ``agentstream usage``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BAD_RECORD_TIME = "2026-11-03T10:00:03.000Z"

_SECOND_CALL = {
    "input_tokens": 6000,
    "cached_input_tokens": 5000,
    "output_tokens": 120,
    "reasoning_output_tokens": 44,
}

unreadable_totals = pytest.mark.parametrize(
    ("total", "last"),
    [
        ({}, {}),
        ({"input_tokens": "5000", "output_tokens": 1}, {}),
        ({"input_tokens": 5000, "output_tokens": -1}, {}),
        (None, _SECOND_CALL),
        ({"input_tokens": "11000"}, _SECOND_CALL),
    ],
    ids=["empty", "wrong-kind", "negative", "missing-with-last", "wrong-kind-with-last"],
)
"""Totals that cannot be read, alone or beside a good ``last_token_usage`` (the second call's)."""


def with_bad_token_count(log: Path, total: object, last: object) -> bytes:
    """The log at ``log`` with the bad record between its first and second call."""
    lines = log.read_bytes().splitlines(keepends=True)
    bad = {
        "timestamp": BAD_RECORD_TIME,
        "type": "event_msg",
        "payload": {"type": "token_count", "info": {"total_token_usage": total, "last_token_usage": last}},
    }
    return b"".join(lines[:11]) + json.dumps(bad).encode() + b"\n" + b"".join(lines[11:])
