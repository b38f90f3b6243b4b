"""Cursor CLI stream-json: the documented examples, partial-output duplicates, encoder shapes, round trips, junk."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _dialect_kit import (
    assert_breakage_handled,
    assert_junk_handled,
    decode,
    decode_each,
    encode,
    encode_objects,
    fields,
    junk,
    line,
    mutants,
    one,
    only,
    realistic,
    round_trip,
    seed_lines,
    seed_objects,
    violations,
    without,
)
from _strategies import delta_runs, messages, reasonings, sessions, stamped, text, tool_round_trips, usages
from agentstream import protocol as p
from agentstream.consumer import read
from agentstream.dialects import detect_dialect, get_dialect
from agentstream.dialects.kit import RAW_ARGUMENTS_KEY, failure_text

SESSION_ID = "<uuid>"
READ_OUTPUT = (
    '{"content":"file contents...","isEmpty":false,"exceededLimit":false,"totalLines":54,"totalChars":1254}'
)
WRITE_OUTPUT = '{"path":"/Users/user/project/summary.txt","linesCreated":19,"fileSize":942}'
WRITE_ARGS = {
    "path": "summary.txt",
    "fileText": "# README Summary\n\nThis project contains...",
    "toolCallId": "toolu_vrtx_01Q3VHVnWFSKygaRPT7WDxrv",
}


def _assistant(text_: str, **extra: Any) -> bytes:
    return line(
        {
            "type": "assistant",
            "message": {"role": "assistant", "content": [{"type": "text", "text": text_}]},
            "session_id": SESSION_ID,
            **extra,
        }
    )


def test_the_fixture_holds_every_documented_example() -> None:
    assert [(obj["type"], obj.get("subtype")) for obj in seed_objects("cursor")] == [
        ("system", "init"),
        ("user", None),
        ("assistant", None),
        ("tool_call", "started"),
        ("tool_call", "completed"),
        ("tool_call", "started"),
        ("tool_call", "completed"),
        ("result", "success"),
    ]


def test_the_documented_examples_decode_line_by_line() -> None:
    per_line = decode_each("cursor", seed_lines("cursor"))
    init, user, assistant, read, read_done, write, write_done, result, flushed = per_line
    (start,) = init
    assert (start.session_id, start.cwd, start.model, start.command) == (
        SESSION_ID,
        "/absolute/path",
        "<model display name>",
        "cursor-agent",
    )
    assert [(m.role, m.content) for m in user + assistant] == [
        ("user", "<prompt>"),
        ("assistant", "<complete message text>"),
    ]
    assert [(c.call_id, c.name, c.arguments) for c in read + write] == [
        ("<string id>", "read", {"path": "file.txt"}),
        ("toolu_vrtx_01Q3VHVnWFSKygaRPT7WDxrv", "write", WRITE_ARGS),
    ]
    assert [(r.call_id, r.name, r.status, r.output) for r in read_done + write_done] == [
        ("<string id>", "read", "success", READ_OUTPUT),
        ("toolu_vrtx_01Q3VHVnWFSKygaRPT7WDxrv", "write", "success", WRITE_OUTPUT),
    ]
    (end,) = result
    assert (end.ok, end.subtype, end.exit_code, end.duration_ms, end.result, end.tools_used) == (
        True,
        "success",
        0,
        1234,
        "<full assistant text>",
        ["read", "write"],
    )
    assert {event.session_id for chunk in per_line for event in chunk} == {SESSION_ID}
    assert flushed == []
    assert not violations([event for chunk in per_line for event in chunk])


def test_partial_output_text_appears_once() -> None:
    """--stream-partial-output: deltas, the flush before a tool call and the final flush repeat the text."""
    lines = [
        seed_lines("cursor")[0],
        _assistant("Let me ", timestamp_ms=1770823434041),
        _assistant("look.", timestamp_ms=1770823434050),
        _assistant("Let me look.", timestamp_ms=1770823434060, model_call_id="mc-1"),
        seed_lines("cursor")[3],
        seed_lines("cursor")[4],
        _assistant("Done", timestamp_ms=1770823435000),
        _assistant("Let me look.Done"),
        line(
            {
                "type": "result",
                "subtype": "success",
                "duration_ms": 5,
                "duration_api_ms": 5,
                "is_error": False,
                "result": "Let me look.Done",
                "session_id": SESSION_ID,
            }
        ),
    ]
    per_line = decode_each("cursor", lines)
    assert [e.type for e in per_line[1] + per_line[2]] == ["message_delta", "message_delta"]
    assert per_line[1][0].ts == "2026-02-11T15:23:54.041Z"
    (closing,) = per_line[3]
    assert (closing.type, closing.content) == ("message", "Let me look."), "the flush closes the run, once"
    assert [e.type for e in per_line[4]] == ["tool_call"]
    (final,) = per_line[7]
    assert (final.type, final.content) == ("message", "Done"), "the final flush is skipped, the run closed"
    events = [event for chunk in per_line for event in chunk]
    assert [m.content for m in only(events, p.Message) if m.role == "assistant"] == ["Let me look.", "Done"]
    assert not violations(events)


def test_without_partial_output_every_assistant_form_is_a_complete_message() -> None:
    events = decode(
        "cursor",
        [seed_lines("cursor")[0], _assistant("mid", timestamp_ms=1, model_call_id="m"), _assistant("final")],
    )
    assert [(e.type, e.content) for e in events[1:]] == [("message", "mid"), ("message", "final")]


def test_thinking_events_become_reasoning() -> None:
    events = decode(
        "cursor",
        [
            line(
                {
                    "type": "thinking",
                    "subtype": "delta",
                    "text": "Let me ",
                    "session_id": SESSION_ID,
                    "timestamp_ms": 1770823434041,
                }
            ),
            line({"type": "thinking", "subtype": "delta", "text": "think", "session_id": SESSION_ID}),
            line(
                {
                    "type": "thinking",
                    "subtype": "completed",
                    "session_id": SESSION_ID,
                    "timestamp_ms": 1770823435070,
                }
            ),
        ],
    )
    assert [(e.type, e.content) for e in events[1:]] == [
        ("reasoning_delta", "Let me "),
        ("reasoning_delta", "think"),
        ("reasoning", "Let me think"),
    ]
    assert events[1].reasoning_id == events[3].reasoning_id


def test_a_function_form_result_beside_function_is_read_not_taken_for_success() -> None:
    """The generic form is undocumented: its outcome may sit inside ``function`` or beside it."""
    spec = {"function": {"name": "grep", "arguments": "{}"}}
    events = decode(
        "cursor",
        [
            line({"type": "tool_call", "subtype": "started", "call_id": "c1", "tool_call": spec}),
            line(
                {
                    "type": "tool_call",
                    "subtype": "completed",
                    "call_id": "c1",
                    "tool_call": {**spec, "result": {"error": {"message": "no such pattern"}}},
                }
            ),
        ],
    )
    (done,) = [event for event in events if isinstance(event, p.ToolResult)]
    assert (done.call_id, done.status, done.error) == ("c1", "error", "no such pattern")


def test_function_tools_errors_and_missing_ids() -> None:
    def tool(subtype: str, spec: dict[str, Any], call_id: str | None = None) -> bytes:
        obj: dict[str, Any] = {"type": "tool_call", "subtype": subtype, "tool_call": spec}
        return line({**obj, "call_id": call_id} if call_id else obj)

    events = decode(
        "cursor",
        [
            tool("started", {"function": {"name": "grep", "arguments": '{"pattern":"TODO"}'}}, "c1"),
            tool(
                "completed",
                {"function": {"name": "grep", "arguments": "{}", "result": {"error": {"message": "no"}}}},
                "c1",
            ),
            tool("started", {"function": {"name": "grep", "arguments": "TODO"}}, "c2"),
            tool("completed", {"function": {"name": "grep", "arguments": "TODO"}}, "c2"),
            tool("started", {"toolCallId": "x", "shellToolCall": {"args": {"command": "ls"}}}),
            tool(
                "completed",
                {"shellToolCall": {"args": {"command": "ls"}, "result": {"success": {"stdout": "a"}}}},
            ),
        ],
    )
    call, failed, log, raw_call, raw_done, shell, shell_done = events[1:]
    assert (call.name, call.arguments) == ("grep", {"pattern": "TODO"})
    assert (failed.call_id, failed.status, failed.error) == ("c1", "error", "no")
    assert isinstance(log, p.Log) and "not valid JSON" in log.message
    assert raw_call.arguments == {RAW_ARGUMENTS_KEY: "TODO"} and raw_done.status == "success"
    assert shell.name == "shell" and shell_done.call_id == shell.call_id, (
        "paired by name when ids are missing"
    )
    assert shell_done.output == '{"stdout":"a"}'
    assert not violations(
        [
            *events,
            p.Result(
                ok=True,
                subtype="success",
                exit_code=0,
                seq=len(events),
                session_id=events[0].session_id,
                ts=p.now_ts(),
            ),
        ]
    )


def test_result_usage_and_errors() -> None:
    ok = decode(
        "cursor",
        [
            line(
                {
                    "type": "result",
                    "subtype": "success",
                    "is_error": False,
                    "result": "x",
                    "usage": {
                        "inputTokens": 100,
                        "outputTokens": 50,
                        "cacheReadTokens": 10,
                        "cacheWriteTokens": 5,
                    },
                }
            )
        ],
    )[-1]
    assert ok.usage == p.UsageTotals(
        input_tokens=100, output_tokens=50, cached_tokens=10, cache_write_tokens=5
    )
    _, error, failed = decode(
        "cursor",
        [line({"type": "result", "subtype": "error", "is_error": True, "result": "model unavailable"})],
    )
    assert (error.recoverable, error.message) == (False, "model unavailable")
    assert (failed.ok, failed.exit_code, failed.error.message) == (False, 1, "model unavailable")


def test_unknown_lines_and_subtypes_pass_through() -> None:
    status = {"type": "system", "subtype": "status", "x": 1}
    other = {"type": "telemetry", "id": 1}
    stage = {"type": "tool_call", "subtype": "progress", "call_id": "c", "tool_call": {"shellToolCall": {}}}
    assert decode("cursor", [line(status), line(other), line(stage)]) == [
        p.UnknownEvent(type="system", raw=status),
        p.UnknownEvent(type="telemetry", raw=other),
        p.UnknownEvent(type="tool_call", raw=stage),
    ]


RUN_SESSION = "c6b62c6f-7ead-4fd6-9922-e952131177ff"


def _completed(tool: str, args: dict[str, Any], result: dict[str, Any]) -> list[bytes]:
    call = {"type": "tool_call", "call_id": "call_1", "session_id": RUN_SESSION}
    return [
        line({**call, "subtype": "started", "tool_call": {tool: {"args": args}}}),
        line({**call, "subtype": "completed", "tool_call": {tool: {"args": args, "result": result}}}),
    ]


@pytest.mark.parametrize(
    ("tool", "result", "status", "error"),
    [
        ("shellToolCall", {"success": {"exitCode": 0, "stdout": "ok\n"}}, "success", None),
        (
            "shellToolCall",
            {"success": {"exitCode": 2, "stdout": "", "stderr": "no such file"}},
            "error",
            "exit code 2",
        ),
        (
            "shellToolCall",
            {"rejected": {"reason": "Command rejected by the sandbox policy"}},
            "denied",
            "Command rejected by the sandbox policy",
        ),
        (
            "editToolCall",
            {"writePermissionDenied": {"path": "/etc/hosts"}},
            "denied",
            '{"path":"/etc/hosts"}',
        ),
        ("shellToolCall", {"needsConfirmation": {}}, "denied", "needsConfirmation"),
        ("readToolCall", {"fileNotFound": {"path": "a.txt"}}, "error", 'fileNotFound: {"path":"a.txt"}'),
        (
            "shellToolCall",
            {"timeout": {"message": "timed out after 30s"}},
            "error",
            "timeout: timed out after 30s",
        ),
        ("readToolCall", {"error": {"errorMessage": "boom"}}, "error", "boom"),
        ("editToolCall", {"complete": {"linesAdded": 3}}, "success", None),
        ("shellToolCall", {"stillRunning": {"pid": 42}}, "success", None),
    ],
)
def test_every_kind_of_tool_outcome_gets_its_status(
    tool: str, result: dict[str, Any], status: str, error: str | None
) -> None:
    """A completed call's ``result`` has one key naming the outcome: done, refused or failed."""
    events = decode("cursor", _completed(tool, {"command": "ls"}, result))
    (outcome,) = only(events, p.ToolResult)
    assert (outcome.status, None if outcome.error is p.UNSET else outcome.error) == (status, error)


def test_a_refused_call_round_trips_as_refused() -> None:
    events = decode(
        "cursor", _completed("shellToolCall", {"command": "rm -rf /"}, {"rejected": {"reason": "no"}})
    )
    (outcome,) = only(round_trip("cursor", events), p.ToolResult)
    assert (outcome.status, outcome.error) == ("denied", "no")


def test_an_mcp_call_is_named_by_its_server_and_tool_both_ways() -> None:
    args = {
        "name": "github-get_issue",
        "toolName": "get_issue",
        "providerIdentifier": "github",
        "args": {"n": 1},
    }
    events = decode("cursor", _completed("mcpToolCall", args, {"success": {"content": [{"text": "#1"}]}}))
    call = one(events, p.ToolCall)
    assert (call.name, call.arguments) == ("mcp__github__get_issue", args)
    written = [json.loads(raw) for raw in encode("cursor", events)]
    assert [list(o["tool_call"]) for o in written if o["type"] == "tool_call"] == [
        ["mcpToolCall"],
        ["mcpToolCall"],
    ]
    assert one(round_trip("cursor", events), p.ToolCall).name == "mcp__github__get_issue"


def test_questions_retries_and_reconnects_are_events_and_statuses() -> None:
    query = {
        "type": "interaction_query",
        "subtype": "request",
        "query_type": "createPlanRequestQuery",
        "query": {"createPlanRequestQuery": {"args": {"plan": "1. read\n2. fix"}}},
        "session_id": RUN_SESSION,
    }
    events = decode(
        "cursor",
        [
            line(query),
            line({"type": "retry", "subtype": "starting", "attempt": 2, "session_id": RUN_SESSION}),
            line({"type": "connection", "subtype": "reconnected", "session_id": RUN_SESSION}),
            line(
                {"type": "system", "subtype": "task_notification", "task_id": "t1", "session_id": RUN_SESSION}
            ),
        ],
    )
    event, retry, reconnected, notice = events[1:]
    assert (event.name, event.data["query"]) == ("cursor.interaction_query", query["query"])
    assert (retry.status, retry.message, reconnected.status) == ("retry_starting", "attempt 2", "reconnected")
    assert (notice.name, notice.data) == (
        "cursor.task_notification",
        {"subtype": "task_notification", "task_id": "t1"},
    )
    assert detect_dialect([query]) == "cursor"


def test_the_json_output_line_alone_is_detected_and_read() -> None:
    """``--output-format json`` prints one ``result`` line (Cursor's docs)."""
    document = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "duration_ms": 1234,
        "duration_api_ms": 1234,
        "result": "Done: 3 files listed.",
        "session_id": RUN_SESSION,
        "request_id": "req-9",
    }
    events = list(read([line(document) + b"\n"]))
    result = events[-1]
    assert events[0].session_id == RUN_SESSION and events[0].command == "cursor-agent"
    assert (result.ok, result.result, result.duration_ms) == (True, "Done: 3 files listed.", 1234)
    claude_result = {**document, "num_turns": 1}
    del claude_result["request_id"], claude_result["duration_api_ms"]
    assert get_dialect("cursor").sniff(claude_result) == 0.0


# -- encoder ---------------------------------------------------------------------------------

IGNORED = frozenset({"session_id", "request_id", "apiKeySource"})


def test_encoder_reproduces_the_documented_examples() -> None:
    events = stamped(
        [
            p.Start(command="cursor-agent", cwd="/absolute/path", model="<model display name>"),
            p.Message(message_id="u", role="user", content="<prompt>"),
            p.Message(message_id="a", role="assistant", content="<complete message text>"),
            p.ToolCall(call_id="<string id>", name="read", arguments={"path": "file.txt"}),
            p.ToolResult(call_id="<string id>", name="read", status="success", output=READ_OUTPUT),
            p.ToolCall(call_id="toolu_vrtx_01Q3VHVnWFSKygaRPT7WDxrv", name="write", arguments=WRITE_ARGS),
            p.ToolResult(
                call_id="toolu_vrtx_01Q3VHVnWFSKygaRPT7WDxrv",
                name="write",
                status="success",
                output=WRITE_OUTPUT,
            ),
            p.Result(
                ok=True, subtype="success", exit_code=0, duration_ms=1234, result="<full assistant text>"
            ),
        ],
        session_id=RUN_SESSION,
    )
    encoded = encode_objects("cursor", events)
    assert without(encoded, IGNORED) == without(seed_objects("cursor"), IGNORED)
    assert encoded[0]["apiKeySource"] in ("env", "flag", "login")
    assert {obj["session_id"] for obj in encoded} == {RUN_SESSION}


def test_encoder_partial_output_and_reasoning_shapes() -> None:
    events = stamped(
        [
            p.Start(command="c"),
            p.ReasoningDelta(reasoning_id="r", content="hm"),
            p.Reasoning(reasoning_id="r", content="hm"),
            p.MessageDelta(message_id="a", content="Hel"),
            p.MessageDelta(message_id="a", content="lo"),
            p.Message(message_id="a", role="assistant", content="Hello"),
            p.Message(message_id="b", role="assistant", content="again"),
            p.Error(code="RATE_LIMITED", message="retrying", recoverable=True),
            p.Result(ok=True, subtype="success", exit_code=0),
        ]
    )
    encoded = encode_objects("cursor", events)
    shapes = [
        (obj["type"], obj.get("subtype"), "timestamp_ms" in obj, "model_call_id" in obj) for obj in encoded
    ]
    assert shapes == [
        ("system", "init", False, False),
        ("thinking", "delta", True, False),
        ("thinking", "completed", True, False),
        ("assistant", None, True, False),
        ("assistant", None, True, False),
        ("assistant", None, True, True),
        ("assistant", None, True, False),
        ("assistant", None, True, True),
        ("result", "success", False, False),
    ]
    assert encoded[-1]["result"] == "Helloagain", "Cursor's result is every assistant segment, concatenated"


def test_encoder_failure_is_an_error_result() -> None:
    encoded = encode_objects(
        "cursor",
        stamped(
            [
                p.Start(command="c"),
                p.Error(code="AUTH_EXPIRED", message="log in"),
                p.Result(ok=False, subtype="error", exit_code=1),
            ]
        ),
    )
    assert [obj["type"] for obj in encoded] == ["system", "result"]
    assert (encoded[1]["is_error"], encoded[1]["subtype"], encoded[1]["result"]) == (True, "error", "log in")
    unfinished = encode_objects("cursor", stamped([p.Start(command="c")]))
    assert unfinished[-1]["is_error"] is True


# -- properties -------------------------------------------------------------------------------


def _kept(events: list[p.AnyEvent]) -> list[tuple[Any, ...]]:
    kept: list[tuple[Any, ...]] = []
    for event in events:
        if isinstance(event, p.Message) and event.role in ("user", "assistant"):
            kept.append((event.role, event.content))
        elif isinstance(event, p.Reasoning):
            kept.append(("reasoning", event.content))
        elif isinstance(event, p.ToolCall):
            kept.append(("call", event.call_id, event.name, event.arguments))
        elif isinstance(event, p.ToolResult):
            ok = event.status == "success"
            problem = failure_text(event) or event.status  # cursor has one text for a failure
            kept.append(
                (
                    "result",
                    event.call_id,
                    event.name,
                    ok,
                    event.output if ok else p.UNSET,
                    p.UNSET if ok else problem,
                )
            )
    return kept


BODY = st.one_of(
    messages(("user", "assistant", "system")).map(lambda m: [m]),
    delta_runs(roles=("assistant",)),
    reasonings.map(lambda r: [r]),
    delta_runs(reasoning=True),
    tool_round_trips(),
    usages.map(lambda u: [u]),
)


@settings(max_examples=60, deadline=None)
@given(sessions(middle=BODY), st.none() | text)
def test_round_trip_keeps_what_cursor_carries(session: list[p.BaseEvent], final_text: str | None) -> None:
    session = realistic(session)
    original = session[-1]
    if final_text is not None:
        original.result = final_text
    decoded = round_trip("cursor", session)
    assert not violations(decoded)
    start, result = decoded[0], decoded[-1]
    assert (start.session_id, start.cwd, start.model) == (session[0].session_id, "/work", "m1")
    assert _kept(decoded) == _kept(session)
    assistant_text = "".join(m.content for m in only(session, p.Message) if m.role == "assistant")
    assert result.result == (final_text if final_text is not None else assistant_text)
    assert (result.ok, result.subtype, result.exit_code, result.duration_ms, result.tools_used) == (
        original.ok,
        original.subtype,
        original.exit_code,
        original.duration_ms,
        original.tools_used,
    )
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.cached_tokens) == (
        original.usage.input_tokens,
        original.usage.output_tokens,
        original.usage.cached_tokens,
    )


def test_sniff_claims_cursor_and_not_claude_or_amp() -> None:
    cursor_init = seed_objects("cursor")[0]
    assert detect_dialect([cursor_init]) == "cursor"
    claude_init = {
        "type": "system",
        "subtype": "init",
        "cwd": "/w",
        "session_id": "s",
        "tools": ["Bash"],
        "mcp_servers": [],
        "model": "claude-opus-4-5",
        "permissionMode": "default",
        "apiKeySource": "none",
        "uuid": "u",
    }
    amp_init = {
        "type": "system",
        "subtype": "init",
        "cwd": "/w",
        "session_id": "T-1",
        "tools": [],
        "mcp_servers": [],
    }
    assert get_dialect("cursor").sniff(claude_init) == 0.0
    assert get_dialect("cursor").sniff(amp_init) == 0.0
    assert get_dialect("cursor").sniff(json.loads(seed_lines("cursor")[3])) == 0.9


CONTENT = st.lists(fields(["type", "text"]), max_size=3)
MESSAGE = fields(["role", "content"], nested={"content": CONTENT})
TOOL = fields(["args", "name", "arguments", "result"], nested={"result": fields(["success", "error"])})


BASES = [
    *seed_objects("cursor"),
    json.loads(_assistant("d", timestamp_ms=1770823434041)),
    json.loads(_assistant("f", timestamp_ms=1770823434041, model_call_id="m")),
    {
        "type": "thinking",
        "subtype": "delta",
        "text": "t",
        "session_id": RUN_SESSION,
        "timestamp_ms": 1770823434041,
    },
    {
        "type": "tool_call",
        "subtype": "completed",
        "call_id": "c",
        "tool_call": {"function": {"name": "g", "arguments": "{}", "result": {"error": {"message": "no"}}}},
    },
    {
        "type": "result",
        "subtype": "error",
        "is_error": True,
        "result": "r",
        "duration_ms": 1,
        "usage": {"inputTokens": 1, "outputTokens": 2, "cacheReadTokens": 0},
    },
]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        mutants(BASES)
        | junk(
            ["system", "user", "assistant", "thinking", "tool_call", "result"],
            [
                "subtype",
                "session_id",
                "cwd",
                "model",
                "timestamp_ms",
                "model_call_id",
                "text",
                "call_id",
                "duration_ms",
                "is_error",
                "result",
            ],
            nested={
                "message": MESSAGE,
                "tool_call": st.dictionaries(
                    st.sampled_from(["readToolCall", "function", "shellToolCall", "toolCallId"]),
                    TOOL,
                    max_size=2,
                ),
                "usage": fields(["inputTokens", "outputTokens", "cacheReadTokens"]),
            },
        ),
        max_size=6,
    )
)
def test_junk_raises_only_malformed_event_errors(junk_lines: list[dict[str, Any]]) -> None:
    assert_junk_handled("cursor", junk_lines)


def test_every_single_field_breakage_is_decoded_or_malformed() -> None:
    assert_breakage_handled("cursor", BASES)
