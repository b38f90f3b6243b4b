"""Cursor CLI stream-json: an init that lists its tools is still Cursor's, and untimed lines take the stream's time."""

from __future__ import annotations

from typing import Any

import pytest

from _dialect_kit import FIXTURES, SEEDS, line, objects
from agentstream import protocol as p
from agentstream.consumer import read
from agentstream.dialects import DETECT_LINES, detect_dialect, get_dialect

SESSION = "c6b62c6f-7ead-4fd6-9922-e952131177ff"
CLOCK = "2030-01-01T00:00:00.000Z"
CURSOR_INIT: dict[str, Any] = {
    "type": "system",
    "subtype": "init",
    "apiKeySource": "login",
    "cwd": "/Users/u/proj",
    "session_id": SESSION,
    "model": "Claude 4 Sonnet",
    "permissionMode": "default",
    "tools": ["read", "shell"],
    "mcp_servers": [],
}
"""Cursor's init with the ``tools`` and ``mcp_servers`` its docs say may be added: otherwise Claude Code's shape."""


def _tool_call(subtype: str, **extra: Any) -> dict[str, Any]:
    tool: dict[str, Any] = {"args": {"path": "README.md"}}
    if subtype == "completed":
        tool["result"] = {"success": {"content": "# Hello"}}
    return {
        "type": "tool_call",
        "subtype": subtype,
        "call_id": "toolu_vrtx_01A",
        "tool_call": {"readToolCall": tool},
        "session_id": SESSION,
        **extra,
    }


def _thinking(subtype: str, ms: object) -> dict[str, Any]:
    thought = {"text": "Let me look"} if subtype == "delta" else {}
    return {"type": "thinking", "subtype": subtype, **thought, "session_id": SESSION, "timestamp_ms": ms}


def _assistant(text: str) -> dict[str, Any]:
    content = [{"type": "text", "text": text}]
    return {"type": "assistant", "message": {"role": "assistant", "content": content}, "session_id": SESSION}


RESULT = {
    "type": "result",
    "subtype": "success",
    "duration_ms": 5234,
    "duration_api_ms": 5234,
    "is_error": False,
    "result": "I'll read the README",
    "session_id": SESSION,
    "request_id": "req-1",
}
STREAM = [
    CURSOR_INIT,
    {
        "type": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        "session_id": SESSION,
    },
    _thinking("delta", 1761000000000),
    _thinking("completed", 1761000000100),
    _assistant("I'll read the README"),
    _tool_call("started"),
    _tool_call("completed"),
    RESULT,
]


def _data(objs: list[dict[str, Any]]) -> bytes:
    return b"\n".join(line(obj) for obj in objs) + b"\n"


# -- detection ---------------------------------------------------------------------------------


def test_an_init_listing_tools_with_cursors_key_source_is_cursors() -> None:
    assert detect_dialect([CURSOR_INIT]) == "cursor"
    events = list(read(_data(STREAM)))
    assert events[0].type == "start" and events[0].command == "cursor-agent"
    assert not [event for event in events if isinstance(event, p.GenericEvent) and "foreign" in event.name]
    assert [event.type for event in events].count("tool_call") == 1


@pytest.mark.parametrize(
    "claude_only",
    [
        {"claude_code_version": "2.0.76"},
        {"uuid": "5e12f41f-cbf2-4e6a-85d2-9607ad647a88"},
        {"slash_commands": ["compact"]},
        {"output_style": "default"},
    ],
)
def test_an_init_with_a_field_only_claude_code_writes_stays_claudes(claude_only: dict[str, Any]) -> None:
    assert detect_dialect([{**CURSOR_INIT, **claude_only}]) == "claude"


@pytest.mark.parametrize("source", ["none", "ANTHROPIC_API_KEY", "user", ["login"], None])
def test_claude_codes_key_sources_are_not_cursors(source: object) -> None:
    """Claude Code 1.0's init has no version, uuid or command list: its key source tells it from Cursor's."""
    init = {**CURSOR_INIT, "model": "claude-sonnet-4-20250514", "apiKeySource": source}
    assert get_dialect("cursor").sniff(init) == 0.0
    assert detect_dialect([init]) == "claude"


def _detected(path: Any) -> str | None:
    """What a reader settles on for a stream: the first of its first lines that any dialect claims."""
    lines = [raw for raw in path.read_bytes().splitlines() if raw.strip()][:DETECT_LINES]
    objs = [obj for obj in objects(lines) if isinstance(obj, dict)]
    return next((name for size in range(1, len(objs) + 1) if (name := detect_dialect(objs[:size]))), None)


@pytest.mark.parametrize(
    "path",
    [*sorted(FIXTURES.glob("*/*.ndjson")), *sorted(SEEDS.glob("*.ndjson"))],
    ids=lambda path: f"{path.parent.name}/{path.name}",
)
def test_every_example_stream_is_still_detected_as_its_own_dialect(path: Any) -> None:
    own = path.stem if path.parent == SEEDS else path.parent.name
    assert _detected(path) == own


# -- timestamps ---------------------------------------------------------------------------------


def test_lines_without_a_time_take_the_last_one_the_stream_gave(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(p, "now_ts", lambda: CLOCK)
    events = list(read(_data(STREAM), "cursor"))
    after = events[[event.type for event in events].index("reasoning_delta") :]
    assert {event.ts for event in after} == {"2025-10-20T22:40:00.000Z", "2025-10-20T22:40:00.100Z"}
    assert events[-1].ts == "2025-10-20T22:40:00.100Z"


def test_a_warning_takes_its_lines_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(p, "now_ts", lambda: CLOCK)
    odd = _tool_call("started", timestamp_ms="1761000000200")
    odd["tool_call"]["readToolCall"]["args"] = "README.md"
    stream = [*STREAM[:4], odd, _tool_call("completed"), RESULT]
    events = list(read(_data(stream), "cursor"))
    (warning,) = [event for event in events if isinstance(event, p.Log)]
    assert warning.ts == "2025-10-20T22:40:00.200Z"
    assert events[-1].ts == "2025-10-20T22:40:00.200Z"
