"""How ``agentstream exec`` ends a model call the wire left unusual: cut off, refused, paused,
kept alive without progress, answered by something that is not a stream, or never sent.

Each test runs the real command in a subprocess, the official SDK talking to a loopback
server that speaks the provider's real stream format; every stream must validate.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from _agent_fakes import (
    ExecRun,
    FakeModelServer,
    Reply,
    Sse,
    Status,
    _sse,
    anthropic_env,
    anthropic_reply,
    assert_valid_stream,
    openai_env,
    openai_reply,
    paced,
    run_exec,
)

EnvFor = Callable[..., dict[str, str]]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("alpha\nbeta\n")
    return root


def exec_against(
    script: list[Reply], env_for: EnvFor, tmp_path: Path, workspace: Path, *args: str, **env: str
) -> tuple[ExecRun, FakeModelServer]:
    """One stream-json run against ``script``; the stream is checked for every invariant."""
    with FakeModelServer(script) as server:
        run = run_exec(
            ["do it", "-o", "stream-json", *args], env_for(tmp_path / "home", server, **env), cwd=workspace
        )
    assert_valid_stream(run.lines, run.returncode)
    return run, server


WIRES = pytest.mark.parametrize(
    ("reply", "env_for"),
    [(openai_reply, openai_env), (anthropic_reply, anthropic_env)],
    ids=["openai", "anthropic"],
)


# -- --timeout is a progress deadline ------------------------------------------------


def _keepalive(reply: Callable[..., Sse]) -> bytes:
    if reply is anthropic_reply:
        return _sse({"type": "ping"}, "ping")
    return b": keep-alive\n\n"


@WIRES
def test_keepalives_alone_do_not_hold_a_call_past_timeout(
    reply: Callable[..., Sse], env_for: EnvFor, tmp_path: Path, workspace: Path
) -> None:
    """Keep-alives every 0.2 s (for 10 s) restart the HTTP read timeout, but not the --timeout deadline: the call
    is cut for want of progress, not by the keep-alives' end, which words its error otherwise."""
    first = reply("Some partial answer").events
    stuck = Sse([*first[:4], *paced([_keepalive(reply)] * 50, 0.2)])
    run, server = exec_against(
        [stuck, reply("The full answer.")], env_for, tmp_path, workspace, "--timeout", "1"
    )
    (error,) = run.of_type("error")
    assert (error.code, error.recoverable) == ("NETWORK_TIMEOUT", True)
    assert "no progress for 1 s (--timeout)" in error.message
    assert run.returncode == 0 and run.result.result == "The full answer."
    assert len(server.posts) == 2


@WIRES
def test_an_answer_that_keeps_coming_is_not_cut(
    reply: Callable[..., Sse], env_for: EnvFor, tmp_path: Path, workspace: Path
) -> None:
    """Content every 0.3 s for longer than --timeout is progress: the call goes on to its end."""
    slow = reply("one two three four five six seven", chunk=8)
    script: list[Reply] = [Sse(paced([e for e in slow.events if isinstance(e, bytes)], 0.3, after=2))]
    run, server = exec_against(script, env_for, tmp_path, workspace, "--timeout", "1")
    assert run.of_type("error") == []
    assert run.returncode == 0 and run.result.result == "one two three four five six seven"
    assert len(server.posts) == 1


# -- stop reasons --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "env_for", "stop", "code", "subtype"),
    [
        (openai_reply, openai_env, "length", "CONTEXT_LIMIT", "error"),
        (openai_reply, openai_env, "content_filter", "PROVIDER_ERROR", "refusal"),
        (anthropic_reply, anthropic_env, "max_tokens", "CONTEXT_LIMIT", "error"),
        (anthropic_reply, anthropic_env, "refusal", "PROVIDER_ERROR", "refusal"),
    ],
    ids=["openai-length", "openai-content_filter", "anthropic-max_tokens", "anthropic-refusal"],
)
def test_a_cut_off_or_refused_answer_is_not_success(
    reply: Callable[..., Sse],
    env_for: EnvFor,
    stop: str,
    code: str,
    subtype: str,
    tmp_path: Path,
    workspace: Path,
) -> None:
    key = "finish" if reply is openai_reply else "stop"
    run, server = exec_against([reply("Here is half of", **{key: stop})], env_for, tmp_path, workspace)
    (error,) = run.of_type("error")
    assert (error.code, error.recoverable) == (code, False)
    assert stop in error.message
    assert (run.returncode, run.result.ok, run.result.subtype) == (1, False, subtype)
    assert [m.content for m in run.of_type("message")] == ["Here is half of"]
    assert len(run.of_type("usage")) == 1  # the tokens were spent all the same
    assert len(server.posts) == 1


def test_a_tool_call_cut_off_by_max_tokens_never_runs(tmp_path: Path, workspace: Path) -> None:
    cut = anthropic_reply(
        "", [("toolu_1", "write_file", '{"path": "out.txt", "content": "par')], stop="max_tokens"
    )
    run, server = exec_against([cut], anthropic_env, tmp_path, workspace)
    assert run.of_type("tool_call") == [] and not (workspace / "out.txt").exists()
    assert (run.result.error.code, run.returncode) == ("CONTEXT_LIMIT", 1)
    assert len(server.posts) == 1


def test_a_paused_turn_is_sent_back_to_go_on(tmp_path: Path, workspace: Path) -> None:
    """Anthropic ``pause_turn``: the paused answer goes back as the last message, and the model goes on."""
    script: list[Reply] = [anthropic_reply("First part.", stop="pause_turn"), anthropic_reply("Second part.")]
    run, server = exec_against(script, anthropic_env, tmp_path, workspace)
    assert run.returncode == 0 and run.result.result == "Second part."
    assert run.result.turn_count == 2
    last = server.posts[1].body["messages"][-1]
    assert last == {"role": "assistant", "content": [{"type": "text", "text": "First part."}]}


# -- tool calls ----------------------------------------------------------------------


def test_repeated_call_ids_get_unique_protocol_ids(tmp_path: Path, workspace: Path) -> None:
    """The stream's call ids are unique; the model is answered under the ids it gave."""
    script: list[Reply] = [
        openai_reply("", [("c1", "read_file", {"path": "notes.txt"}), ("c1", "list_dir", {"path": "."})]),
        openai_reply("", [("c1", "list_dir", {})]),
        openai_reply("Done."),
    ]
    run, server = exec_against(script, openai_env, tmp_path, workspace)
    ids = [e.call_id for e in run.of_type("tool_call")]
    assert ids == ["c1", "c1_2", "c1_3"]
    assert [e.call_id for e in run.of_type("tool_result")] == ids
    sent = server.posts[2].body["messages"]
    assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == ["c1", "c1", "c1"]
    assert run.returncode == 0


def test_arguments_that_are_not_json_are_shown_as_written(tmp_path: Path, workspace: Path) -> None:
    broken = '{"path": "notes.txt"'
    script: list[Reply] = [openai_reply("", [("call_1", "read_file", broken)]), openai_reply("Sorry.")]
    run, server = exec_against(script, openai_env, tmp_path, workspace)
    (call,) = run.of_type("tool_call")
    assert call.arguments == {"_raw": broken}
    (result,) = run.of_type("tool_result")
    assert result.status == "error" and "not valid JSON" in result.error
    assistant = next(m for m in server.posts[1].body["messages"] if m["role"] == "assistant")
    assert assistant["tool_calls"][0]["function"]["arguments"] == broken


def _openai_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return _sse(
        {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [choice]}
    )


def test_openai_fragments_without_index_continue_the_call(tmp_path: Path, workspace: Path) -> None:
    opening = {"id": "call_9", "type": "function", "function": {"name": "read_file", "arguments": ""}}
    parts = ['{"pa', 'th": "no', 'tes.txt"}']
    events: list[bytes | float] = [
        _openai_chunk({"role": "assistant", "content": None}),
        _openai_chunk({"tool_calls": [opening]}),
        *[_openai_chunk({"tool_calls": [{"function": {"arguments": part}}]}) for part in parts],
        _openai_chunk({}, "tool_calls"),
        _sse("[DONE]"),
    ]
    run, _ = exec_against([Sse(events), openai_reply("Read.")], openai_env, tmp_path, workspace)
    (call,) = run.of_type("tool_call")
    assert (call.call_id, call.arguments) == ("call_9", {"path": "notes.txt"})
    assert run.of_type("tool_result")[0].status == "success"


def test_anthropic_tool_input_given_whole_at_block_start(tmp_path: Path, workspace: Path) -> None:
    template = anthropic_reply("x", usage=(20, 5)).events
    block = {"type": "tool_use", "id": "toolu_9", "name": "read_file", "input": {"path": "notes.txt"}}
    events: list[bytes | float] = [
        template[0],
        _sse({"type": "content_block_start", "index": 0, "content_block": block}, "content_block_start"),
        _sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
        _sse(
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 5}},
            "message_delta",
        ),
        _sse({"type": "message_stop"}, "message_stop"),
    ]
    run, _ = exec_against([Sse(events), anthropic_reply("Read.")], anthropic_env, tmp_path, workspace)
    (call,) = run.of_type("tool_call")
    assert call.arguments == {"path": "notes.txt"}
    assert run.of_type("tool_result")[0].status == "success"


# -- usage ---------------------------------------------------------------------------


def test_anthropic_cache_writes_and_late_input_count(tmp_path: Path, workspace: Path) -> None:
    reply = anthropic_reply("Hi.", usage=(300, 7), cached=40, cache_write=200, input_at_end=True)
    run, _ = exec_against([reply], anthropic_env, tmp_path, workspace)
    (usage,) = run.of_type("usage")
    assert (usage.input_tokens, usage.cached_tokens, usage.cache_write_tokens) == (540, 40, 200)
    assert (run.result.usage.input_tokens, run.result.usage.cache_write_tokens) == (540, 200)


# -- replies that cannot be used -----------------------------------------------------


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ({"id": "chatcmpl-x", "choices": []}, "application/json"),
        ("<html>Sign in to the Wi-Fi</html>", "text/html"),
    ],
    ids=["json", "html"],
)
def test_a_reply_that_is_not_a_stream_is_not_retried(
    body: Any, content_type: str, tmp_path: Path, workspace: Path
) -> None:
    script: list[Reply] = [Status(200, body, content_type=content_type), openai_reply("never")]
    run, server = exec_against(script, openai_env, tmp_path, workspace)
    (error,) = run.of_type("error")
    assert (error.code, error.recoverable) == ("PROVIDER_ERROR", False)
    assert f"not a stream (content type {content_type})" in error.message
    assert run.returncode == 1 and len(server.posts) == 1


@pytest.mark.parametrize(
    "key", ["sk-test-0123456789abcdef\r\n", "sk-test-0123456789abcdé"], ids=["crlf", "non-ascii"]
)
def test_a_key_that_cannot_be_sent_is_named_not_retried(key: str, tmp_path: Path, workspace: Path) -> None:
    run, server = exec_against([], openai_env, tmp_path, workspace, OPENAI_API_KEY=key)
    (error,) = run.of_type("error")
    assert (error.code, error.recoverable) == ("AUTH_EXPIRED", False)
    assert "OPENAI_API_KEY" in error.message and "OPENAI_API_KEY" in (error.fix or "")
    assert "0123456789abcd" not in run.stdout.decode() + run.stderr
    assert "Traceback" not in run.stderr
    assert run.returncode == 1 and server.posts == []


def test_no_retries_reads_as_one_attempt(tmp_path: Path, workspace: Path) -> None:
    failing = Status(500, {"error": {"message": "boom", "type": "server_error", "param": None, "code": None}})
    run, server = exec_against([failing], openai_env, tmp_path, workspace, "--max-retries", "0")
    (error,) = run.of_type("error")
    assert error.message.startswith("gave up after 1 attempt (retries are off): ")
    assert len(server.posts) == 1


def test_a_cut_off_answer_is_kept_without_its_tool_calls(tmp_path: Path, workspace: Path) -> None:
    """A cut-off answer is kept in the session (for a resume) without the tool calls it never finished."""
    cut = anthropic_reply("Partial.", [("toolu_1", "list_dir", '{"pa')], stop="max_tokens")
    run, _ = exec_against([cut], anthropic_env, tmp_path, workspace)
    from agentstream.agent.sessions import SessionStore

    record = SessionStore(tmp_path / "home" / "state" / "sessions.sqlite3").load(run.events[0].session_id)
    assert record.messages[-1] == {"role": "assistant", "content": "Partial."}
    assert json.dumps(record.messages).count("toolu_1") == 0
