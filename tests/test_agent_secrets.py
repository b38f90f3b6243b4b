"""No configured secret leaves ``agentstream exec``, whatever the provider sends or the model writes.

Each provider's every failure path (HTTP errors, in-stream errors, broken JSON,
a dropped connection, a timeout) and every kind of model-written text (deltas
that split the key, reasoning, tool arguments, tool output) is driven through the
real command in a subprocess, against a loopback server speaking the provider's
real wire format that echoes the key in every message. Then stdout, stderr, every
file of the state directory (session store, SQLite bus, their WAL files) and the
``--record`` cassette are searched for the key and for every 12-character piece of it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from _agent_fakes import (
    ExecRun,
    FakeModelServer,
    Reply,
    Sse,
    Status,
    anthropic_env,
    anthropic_reply,
    assert_valid_stream,
    openai_env,
    openai_reply,
    run_exec,
    split_streams,
)
from agentstream._secrets import DeltaGuard, Redactor, is_secret
from agentstream.agent.providers.base import ReasoningDelta, TextDelta, ToolCallDone, TurnEnd

OPENAI_KEY = "sk-proj-5e1f0c9b7a3d48e6b2c4a9f01d7e3b58"
ANTHROPIC_KEY = "sk-ant-api03-8c2e6a4f1b9d07e3c5a8f2b6d4e1c09a"
WINDOW = 12


def leaks(data: bytes, key: str) -> list[str]:
    """Every 12-character piece of ``key`` found in ``data`` (empty when nothing leaked)."""
    pieces = {key[i : i + WINDOW] for i in range(len(key) - WINDOW + 1)}
    return sorted(piece for piece in pieces if piece.encode() in data)


# -- what each provider's server sends --------------------------------------------


def _sse_line(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {payload}\n\n".encode()


@dataclass(frozen=True)
class Provider:
    name: str
    key: str
    variable: str
    env: Callable[..., dict[str, str]]
    reply: Callable[..., Sse]
    http_error: Callable[[int, str, str], Status]
    stream_error: Callable[[str, str], Sse]
    broken_json: Callable[[], Sse]
    extra_fatal: tuple[tuple[str, Reply, str], ...] = ()


def _openai_http_error(status: int, kind: str, message: str) -> Status:
    return Status(status, {"error": {"message": message, "type": kind, "param": None, "code": None}})


def _openai_stream_error(kind: str, message: str) -> Sse:
    opening = openai_reply("Partial").events[:2]
    return Sse([*opening, _sse_line({"error": {"message": message, "type": kind, "code": None}})])


def _anthropic_http_error(status: int, kind: str, message: str) -> Status:
    return Status(status, {"type": "error", "error": {"type": kind, "message": message}})


def _anthropic_stream_error(kind: str, message: str) -> Sse:
    opening = anthropic_reply("Partial").events[:4]
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return Sse([*opening, _sse_line(body, "error")])


def _openai_broken_json() -> Sse:
    return Sse(
        [*openai_reply("Partial").events[:2], f'data: {{"choices": [{{"delta": "{OPENAI_KEY}\n\n'.encode()]
    )


def _anthropic_broken_json() -> Sse:
    broken = f'event: content_block_delta\ndata: {{"type": "content_block_delta", "{ANTHROPIC_KEY}\n\n'
    return Sse([*anthropic_reply("Partial").events[:4], broken.encode()])


OPENAI = Provider(
    "openai",
    OPENAI_KEY,
    "OPENAI_API_KEY",
    openai_env,
    openai_reply,
    _openai_http_error,
    _openai_stream_error,
    _openai_broken_json,
)
ANTHROPIC = Provider(
    "anthropic",
    ANTHROPIC_KEY,
    "ANTHROPIC_API_KEY",
    anthropic_env,
    anthropic_reply,
    _anthropic_http_error,
    _anthropic_stream_error,
    _anthropic_broken_json,
    extra_fatal=(
        (
            "in-stream error that is not JSON",
            Sse(
                [
                    *anthropic_reply("x").events[:2],
                    f"event: error\ndata: denied for {ANTHROPIC_KEY}\n\n".encode(),
                ]
            ),
            "PROVIDER_ERROR",
        ),
    ),
)

ECHO = "the server echoes the credential: {authorization}"
"""Every HTTP error body carries the credential header the client sent."""

RECOVERABLE_HTTP = ((429, "rate_limit_error", "RATE_LIMITED"), (500, "api_error", "PROVIDER_ERROR"))
RECOVERABLE_HTTP_529 = (529, "overloaded_error", "PROVIDER_ERROR")
FATAL_HTTP = (
    (400, "invalid_request_error", "PROVIDER_ERROR"),
    (401, "authentication_error", "AUTH_EXPIRED"),
    (403, "permission_error", "AUTH_EXPIRED"),
    (404, "not_found_error", "PROVIDER_ERROR"),
)


def recoverable_chain(provider: Provider) -> list[tuple[str, Reply, str]]:
    """Failures the agent retries, in one turn: (what, reply, the recoverable error code expected)."""
    key = provider.key
    chain: list[tuple[str, Reply, str]] = [
        (f"HTTP {status}", provider.http_error(status, kind, f"{ECHO} ({key})"), code)
        for status, kind, code in (*RECOVERABLE_HTTP, RECOVERABLE_HTTP_529)
    ]
    chain += [
        (
            "in-stream overloaded",
            provider.stream_error("overloaded_error", f"overloaded, key {key}"),
            "PROVIDER_ERROR",
        ),
        (
            "in-stream server error",
            provider.stream_error("server_error", f"failed for {key}"),
            "PROVIDER_ERROR",
        ),
        (
            "in-stream rate limit",
            provider.stream_error("rate_limit_error", f"slow down {key}"),
            "RATE_LIMITED",
        ),
        ("broken JSON mid-stream", provider.broken_json(), "PROVIDER_ERROR"),
        (
            "dropped connection",
            provider.reply(f"Half an answer with {key} in it", drop_after=5),
            "NETWORK_TIMEOUT",
        ),
        ("timeout", provider.reply(f"Stalling with {key}", stall_after=4), "NETWORK_TIMEOUT"),
    ]
    return chain


def fatal_cases(provider: Provider) -> list[tuple[str, Reply, str]]:
    """Failures that end a turn at once: (what, reply, the fatal error code expected)."""
    key = provider.key
    cases = [
        (f"HTTP {status}", provider.http_error(status, kind, f"{ECHO} ({key})"), code)
        for status, kind, code in FATAL_HTTP
    ]
    cases.append(
        (
            "in-stream invalid request",
            provider.stream_error("invalid_request_error", f"bad {key}"),
            "PROVIDER_ERROR",
        )
    )
    cases += provider.extra_fatal
    return cases


def model_writes_the_key(provider: Provider) -> list[Reply]:
    """A successful turn in which the model writes the key everywhere it can (split across deltas)."""
    key = provider.key
    thinking = (
        {"reasoning": f"I recall the key {key}."} if provider is OPENAI else {"thinking": f"I recall {key}."}
    )
    return [
        provider.reply(
            f"Let me use {key} now.",
            [("call_1", "shell", {"command": f"echo {key}"}), ("call_2", "read_file", {"path": "creds.txt"})],
            chunk=5,
            **thinking,
        ),
        provider.reply(f"Done; the key was {key}, and the file said so.", chunk=3),
    ]


# -- the run ------------------------------------------------------------------------


@dataclass
class Outcome:
    run: ExecRun
    stored: dict[str, bytes]
    cassette: bytes
    streams: list[list[bytes]]


def run_every_path(provider: Provider, tmp_path: Path) -> tuple[Outcome, list[str], list[list[str]]]:
    """One exec process, one stream-json turn per case: the recoverable chain first, then each fatal case."""
    chain = recoverable_chain(provider)
    fatal = fatal_cases(provider)
    script = [reply for _, reply, _ in chain] + model_writes_the_key(provider)
    script += [reply for _, reply, _ in fatal]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "creds.txt").write_text(f"token={provider.key}\n")
    home = tmp_path / "home"
    cassette = tmp_path / "recorded.jsonl"
    turns = b"".join(
        json.dumps({"type": "message", "role": "user", "content": f"turn {n}"}).encode() + b"\n"
        for n in range(1 + len(fatal))
    )
    with FakeModelServer(script) as server:
        env = provider.env(
            home, server, AGENTSTREAM_MAX_RETRIES=str(len(chain)), **{provider.variable: provider.key}
        )
        run = run_exec(
            ["--input-format", "stream-json", "--timeout", "1", "--record", str(cassette)],
            env,
            cwd=workspace,
            stdin=turns,
            timeout=90,
        )
        sent = [str(post.headers) for post in server.posts]
    assert all(provider.key in headers for headers in sent)  # the key really went out
    stored = {str(path): path.read_bytes() for path in (home / "state").rglob("*") if path.is_file()}
    outcome = Outcome(run, stored, cassette.read_bytes(), split_streams(run.lines))
    return outcome, [code for _, _, code in chain], [[code] for _, _, code in fatal]


@pytest.mark.parametrize("provider", [OPENAI, ANTHROPIC], ids=lambda p: p.name)
def test_no_error_path_and_no_model_text_leaks_the_key(provider: Provider, tmp_path: Path) -> None:
    outcome, retried, fatal = run_every_path(provider, tmp_path)
    run = outcome.run
    places = {
        "stdout": run.stdout,
        "stderr": run.stderr.encode(),
        "cassette": outcome.cassette,
        **outcome.stored,
    }
    assert any(name.endswith(".sqlite3") for name in outcome.stored), outcome.stored.keys()  # store and bus
    leaked = {name: found for name, data in places.items() if (found := leaks(data, provider.key))}
    assert not leaked, leaked
    assert len(outcome.streams) == 1 + len(fatal), run.stderr

    first, *rest = outcome.streams
    events = assert_valid_stream(first, 0)
    errors = [e for e in events if e.type == "error"]
    assert [(e.code, e.recoverable) for e in errors] == [(code, True) for code in retried], run.stderr
    assert f"[redacted:{provider.name.upper()}_API_KEY]" in "".join(e.message for e in errors)
    text = first and b"".join(first).decode()
    for place in ("message_delta", "reasoning_delta", "tool_call", "tool_result", "message"):
        assert f'"type":"{place}"' in text
    assert text.count("[redacted:") >= 8  # in deltas, reasoning, both tool calls' I/O and the messages
    assert events[-1].ok and events[-1].result.startswith("Done; the key was [redacted:")

    for stream, codes in zip(rest, fatal, strict=True):
        events = assert_valid_stream(stream, 1)
        assert [(e.code, e.recoverable) for e in events if e.type == "error"] == [(c, False) for c in codes]
        assert events[-1].error.code == codes[0]
        assert "EXCEPTION" not in b"".join(stream).decode()
    assert "Traceback" not in run.stderr
    assert json.loads(outcome.cassette.splitlines()[0])["cassette"] == 1


def test_an_unexpected_exception_is_redacted_in_events_stderr_and_the_bus(tmp_path: Path) -> None:
    """A bug (not a provider error) whose message carries the key: the traceback is redacted everywhere."""
    home = tmp_path / "home"
    code = f"""
import sys
from agentstream.agent.providers.openai import OpenAIProvider
def broken(self, conversation, tools, system):
    raise RuntimeError("internal failure near {OPENAI_KEY}")
    yield
OpenAIProvider._turn = broken
from agentstream.cli import main
sys.exit(main(["exec", "hi", "--max-retries", "0"]))
"""
    with FakeModelServer() as server:
        env = openai_env(home, server)
        proc = subprocess.run(
            [sys.executable, "-c", code],
            env={**env, "OPENAI_API_KEY": OPENAI_KEY},
            capture_output=True,
            cwd=tmp_path,
            timeout=60,
        )
    assert proc.returncode == 1, proc.stderr
    assert b"Traceback" in proc.stderr and b"[redacted:OPENAI_API_KEY]" in proc.stderr
    assert b'"code":"EXCEPTION"' in proc.stdout and b"[redacted:OPENAI_API_KEY]" in proc.stdout
    stored = b"".join(path.read_bytes() for path in (home / "state").rglob("*") if path.is_file())
    assert b"internal failure near [redacted" in stored  # the bus has the run, redacted
    for data in (proc.stdout, proc.stderr, stored):
        assert not leaks(data, OPENAI_KEY)


# -- the pieces, in process --------------------------------------------------------


def test_every_provider_key_variable_is_a_configured_secret() -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        assert is_secret(name, "x" * 40)


def test_delta_guard_catches_a_secret_split_at_any_points() -> None:
    """Property: however a text is cut into chunks, the joined output is the text redacted at once."""
    from hypothesis import given
    from hypothesis import strategies as st

    secrets = {"OPENAI_API_KEY": OPENAI_KEY, "DB_PASSWORD": "hunter2hunter2", "SHORT_TOKEN": "abcdef"}
    redactor = Redactor(secrets)
    pieces = st.sampled_from([*secrets.values(), OPENAI_KEY[:9], "hunter2", "abc", " ", "x", "sk-"])

    @given(st.lists(pieces, max_size=12), st.lists(st.integers(0, 400), max_size=8))
    def check(parts: list[str], cuts: list[int]) -> None:
        text = "".join(parts)
        bounds = sorted({min(c, len(text)) for c in cuts})
        chunks = [text[a:b] for a, b in zip([0, *bounds], [*bounds, len(text)], strict=True)]
        guard = DeltaGuard(redactor)
        shown = [guard.feed(chunk) for chunk in chunks] + [guard.flush()]
        assert "".join(shown) == redactor(text)
        for value in secrets.values():
            assert all(value not in piece for piece in shown)

    check()


def test_canonical_chunks_are_guarded_per_run_and_released_before_what_completes_them() -> None:
    """Two runs and a call's progress interleaved, each cutting the key in two: every piece is redacted, and
    what a guard held back goes out just before the event that completes its run (or before the result)."""
    from agentstream import protocol as p
    from agentstream._secrets import guard_chunks

    redactor = Redactor({"OPENAI_API_KEY": OPENAI_KEY})
    head, tail = OPENAI_KEY[:10], OPENAI_KEY[10:]
    events: list[p.AnyEvent] = [
        p.MessageDelta(message_id="m", content="a " + head),
        p.ReasoningDelta(reasoning_id="r", content="b " + head),
        p.ToolProgress(call_id="c", content="c " + head),
        p.MessageDelta(message_id="m", content=tail + " a"),
        p.ReasoningDelta(reasoning_id="r", content=tail + " b"),
        p.ToolProgress(call_id="c", content=tail + " c s"),
        p.Message(message_id="m", role="assistant", content="a " + OPENAI_KEY + " a"),
        p.MessageDelta(message_id="m2", content="ends with sk"),
        p.Result(ok=True, exit_code=0, subtype="success"),
    ]
    out = list(guard_chunks(events, redactor))
    shown = "[redacted:OPENAI_API_KEY]"

    def joined(kind: type[p.Event], key: str, value: str) -> str:
        return "".join(e.content for e in out if type(e) is kind and getattr(e, key) == value)  # type: ignore[attr-defined]

    assert joined(p.MessageDelta, "message_id", "m") == f"a {shown} a"
    assert joined(p.ReasoningDelta, "reasoning_id", "r") == f"b {shown} b"
    assert joined(p.ToolProgress, "call_id", "c") == f"c {shown} c s"
    assert joined(p.MessageDelta, "message_id", "m2") == "ends with sk"
    assert type(out[-1]) is p.Result and type(out[-2]) is p.MessageDelta, (
        "held text goes out before the result"
    )
    chunks = [e for e in out if isinstance(e, (p.MessageDelta, p.ReasoningDelta, p.ToolProgress))]
    assert not [e for e in chunks if head in e.content or tail in e.content]


def test_turn_events_are_redacted_at_the_provider_edge(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a provider yields is redacted before the loop sees it: text runs, reasoning, tool calls."""
    from agentstream import _secrets
    from agentstream.agent.providers import base

    monkeypatch.setattr(_secrets, "configured_redactor", lambda: Redactor({"OPENAI_API_KEY": OPENAI_KEY}))
    half = len(OPENAI_KEY) // 2

    class Scripted(base.Provider):
        name = "scripted"

        def _turn(self, conversation: Any, tools: Any, system: str) -> Any:
            yield ReasoningDelta(f"think {OPENAI_KEY[:half]}")
            yield ReasoningDelta(f"{OPENAI_KEY[half:]} done")
            yield TextDelta(f"say {OPENAI_KEY[:3]}")
            yield TextDelta(OPENAI_KEY[3:])
            yield ToolCallDone("c1", "shell", {"command": f"echo {OPENAI_KEY}", "n": [OPENAI_KEY]})
            yield TurnEnd("stop")

    events = list(Scripted("m").stream_turn(None, (), ""))  # type: ignore[arg-type]
    assert (
        "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        == "think [redacted:OPENAI_API_KEY] done"
    )
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "say [redacted:OPENAI_API_KEY]"
    (call,) = [e for e in events if isinstance(e, ToolCallDone)]
    assert call.arguments == {"command": "echo [redacted:OPENAI_API_KEY]", "n": ["[redacted:OPENAI_API_KEY]"]}
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("TextDelta") > max(i for i, k in enumerate(kinds) if k == "ReasoningDelta")
