"""The real Codex CLI (``@openai/codex`` in tests/peers) against a loopback Responses API server.

Codex is pointed at :class:`FakeModelServer` through a model provider of its own config
(``wire_api = "responses"``), in a throwaway ``CODEX_HOME``; the server answers with
:func:`responses_reply` streams or HTTP errors. What Codex prints with ``exec --json`` (and
the rollout file it writes) is then read by the ``codex`` (and ``codex-log``) dialect, so a
change of Codex's output that the reader misreads fails here rather than for users. Retries
are cut to one so that a failing run takes a second, not the default back-off's half minute.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from _agent_fakes import FakeModelServer, Reply, openai_error, responses_reply
from _dialect_kit import one, only, violations
from agentstream import protocol as p
from agentstream.consumer import read, spawn

PEERS = Path(__file__).parent / "peers"
CODEX = PEERS / "node_modules" / ".bin" / "codex"
MODEL = "gpt-5.5"
"""A model Codex 0.171 has metadata for (another one earns an ``error`` item warning about it)."""
KEY = "sk-fake-codex-0001"
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch\n"


def codex() -> str:
    """The CLI's launcher; a missing one fails the test (CI installs it), it does not skip it."""
    assert shutil.which("node"), (
        "node is missing: install Node.js (the Codex CLI's launcher is a Node script)"
    )
    assert CODEX.exists(), "the Codex CLI is missing: cd tests/peers && npm install"
    return str(CODEX)


@dataclass
class CodexRun:
    returncode: int
    stdout: bytes
    stderr: str
    home: Path
    requests: int

    @property
    def lines(self) -> list[bytes]:
        return [line for line in self.stdout.splitlines() if line.strip()]

    def events(self, dialect: str = "codex") -> list[p.AnyEvent]:
        return list(read(self.stdout, dialect))

    def rollout(self) -> Path:
        (path,) = (self.home / ".codex" / "sessions").rglob("rollout-*.jsonl")
        return path


def _run(
    tmp_path: Path,
    script: Sequence[Reply],
    *args: str,
    model: str = MODEL,
    home: Path | None = None,
    wrap: Sequence[str] | None = None,
) -> CodexRun:
    """``codex exec --json ARGS`` (``ARGS`` end with the prompt, or ``resume ID PROMPT``) against a server
    answering ``script``; with ``wrap``, run under ``agentstream wrap WRAP --``."""
    home = home or tmp_path / "home"
    work = tmp_path / "work"
    with FakeModelServer(script) as server:
        command, env = _codex_exec(server, home, work, model, args)
        if wrap is not None:
            command = [sys.executable, "-m", "agentstream", "wrap", "--no-publish", *wrap, "--", *command]
        proc = subprocess.run(
            command, capture_output=True, env=env, cwd=work, stdin=subprocess.DEVNULL, timeout=60
        )
        posts = len(server.posts)
    return CodexRun(proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace"), home, posts)


def _codex_exec(
    server: FakeModelServer, home: Path, work: Path, model: str, args: Sequence[str]
) -> tuple[list[str], dict[str, str]]:
    """The ``codex exec --json ARGS`` command line against ``server`` (made to run in ``work``), and its
    environment (``home`` its home)."""
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    work.mkdir(exist_ok=True)
    provider = f'{{name="fake", base_url="{server.url}/v1", wire_api="responses", env_key="FAKE_CODEX_KEY"}}'
    command = [
        codex(),
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "-C",
        str(work),
        "-m",
        model,
        "-c",
        "model_provider=fake",
        "-c",
        f"model_providers.fake={provider}",
        "-c",
        "model_providers.fake.request_max_retries=0",
        "-c",
        "model_providers.fake.stream_max_retries=1",
        *args,
    ]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "FAKE_CODEX_KEY": KEY,
        "AGENTSTREAM_HOME": str(home / "agentstream"),
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
    }
    return command, env


def _agentstream(*args: str, data: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "agentstream", *args], input=data, capture_output=True, timeout=30
    )


def _usage(usage: p.Usage | p.UsageTotals) -> tuple[int, int, int, int]:
    return usage.input_tokens, usage.cached_tokens, usage.output_tokens, usage.reasoning_tokens


# -- a turn that ends well ---------------------------------------------------------------------


def test_an_answer_with_reasoning_reads_whole(tmp_path: Path) -> None:
    reply = responses_reply(
        "Hello there.", reasoning="The user greets me.", usage=(1200, 35), cached=1000, reasoning_tokens=12
    )
    run = _run(tmp_path, [reply], "say hi")
    assert run.returncode == 0, run.stderr
    events = run.events()
    assert [e.type for e in events] == ["start", "reasoning", "message", "usage", "result"]
    assert one(events, p.Reasoning).content == "The user greets me."
    assert _usage(one(events, p.Usage)) == (1200, 1000, 35, 12)
    result = one(events, p.Result)
    assert (result.ok, result.exit_code, result.result) == (True, 0, "Hello there.")
    assert _usage(result.usage) == (1200, 1000, 35, 12)
    assert one(events, p.Start).session_id == json.loads(run.lines[0])["thread_id"]
    assert not violations(events)
    detected = read(run.stdout)
    assert list(detected) and detected.dialect == "codex"
    checked = _agentstream("validate", "--from", "auto", "-", data=run.stdout)
    assert checked.returncode == 0 and b"(codex), valid" in checked.stderr, checked


def test_a_model_codex_has_no_metadata_for_is_a_warning_not_a_failure(tmp_path: Path) -> None:
    """Codex warns with an ``error`` item before ``turn.started``; the turn goes on."""
    run = _run(tmp_path, [responses_reply("ok")], "say hi", model="fake-model-1")
    assert run.returncode == 0, run.stderr
    events = run.events()
    warning = one(events, p.Error)
    assert warning.recoverable and "fake-model-1" in warning.message
    assert one(events, p.Result).ok and not violations(events)


def test_commands_a_patch_and_a_search_pair_with_their_results(tmp_path: Path) -> None:
    """Codex runs the commands (``exec_command``) and applies the patch (``apply_patch``) for real."""
    items = [
        {
            "type": "custom_tool_call",
            "id": "ctc_1",
            "call_id": "call_p",
            "name": "apply_patch",
            "input": PATCH,
        },
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"type": "search", "query": "agentstream"},
        },
    ]
    calls = [("call_a", "exec_command", {"cmd": "printf one"}), ("call_b", "exec_command", {"cmd": "exit 3"})]
    script = [responses_reply("", calls, items=items), responses_reply("All done.")]
    run = _run(tmp_path, script, "do things")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "work" / "hello.txt").read_text() == "hello\n"
    events = run.events()
    outcomes = [(r.name, r.status, r.output, r.error) for r in only(events, p.ToolResult)]
    assert sorted(outcomes, key=str) == sorted(
        [
            ("command_execution", "success", "one", p.UNSET),
            ("command_execution", "error", "", "exit code 3"),
            ("file_change", "success", f"add {tmp_path / 'work' / 'hello.txt'}", p.UNSET),
            (
                "web_search",
                "success",
                '{"query":"agentstream","action":{"type":"search","query":"agentstream"}}',
                p.UNSET,
            ),
        ],
        key=str,
    )
    commands = [c.arguments["command"] for c in only(events, p.ToolCall) if c.name == "command_execution"]
    assert sorted(commands) == ["/bin/bash -lc 'exit 3'", "/bin/bash -lc 'printf one'"]
    result = one(events, p.Result)
    assert result.ok and result.result == "All done." and run.requests == 2
    assert _usage(result.usage) == (40, 0, 20, 0)  # the turn's two calls, summed by Codex
    assert not violations(events)


def test_a_stream_dropped_once_is_retried_and_the_turn_succeeds(tmp_path: Path) -> None:
    script = [responses_reply("cut off part-way", drop_after=4), responses_reply("Second try.")]
    run = _run(tmp_path, script, "say hi")
    assert run.returncode == 0, run.stderr
    events = run.events()
    notice = one(events, p.Error)
    assert notice.recoverable and notice.details == {"attempt": 1, "max_attempts": 1}
    assert notice.code == "PROVIDER_ERROR"
    assert one(events, p.Result).result == "Second try."
    assert not violations(events)


class _HeldRetry(FakeModelServer):
    """Holds its answer to the request Codex retries until ``read`` is set (the reader has the notice), and notes
    in ``order`` when it answers."""

    def __init__(self, script: Sequence[Reply], read: threading.Event, order: list[str]) -> None:
        super().__init__(script)
        self.read, self.order = read, order

    def next_reply(self) -> Reply:
        if self.posts[1:]:  # the retry: Codex waits for it after its notice, as it waits out its back-off
            self.read.wait(30)  # bounded, so that a notice never read fails the test rather than hanging it
            self.order.append("retry answered")
        return super().next_reply()


def test_a_retry_notice_reaches_a_live_reader_while_codex_waits_to_try_again(tmp_path: Path) -> None:
    """Codex prints ``Reconnecting... 1/1`` and then waits (its back-off, then the retry, which this server holds)
    before its next line: a reader of its pipe has the notice in that wait, not once the next line comes."""
    notice_read, order, events = threading.Event(), list[str](), list[p.AnyEvent]()
    with _HeldRetry([openai_error(500), responses_reply("Back.")], notice_read, order) as server:
        command, env = _codex_exec(server, tmp_path / "home", tmp_path / "work", MODEL, ["say hi"])
        with subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env
        ) as proc:
            assert proc.stdout is not None
            for event in read(proc.stdout, "codex"):
                events.append(event)
                if isinstance(event, p.Error):
                    order.append("notice read")
                    notice_read.set()
    assert proc.returncode == 0
    assert order == ["notice read", "retry answered"]
    assert one(events, p.Error).details == {"attempt": 1, "max_attempts": 1}
    assert one(events, p.Result).result == "Back." and not violations(events)


# -- a turn that fails -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("replies", "code"),
    [
        ([openai_error(401)] * 2, "AUTH_EXPIRED"),
        ([openai_error(500)] * 2, "PROVIDER_ERROR"),
        ([responses_reply("cut off part-way", drop_after=4)] * 2, "PROVIDER_ERROR"),
    ],
    ids=["401", "500", "dropped"],
)
def test_a_failed_turn_has_one_fatal_error_with_its_code(
    tmp_path: Path, replies: list[Reply], code: str
) -> None:
    """Codex writes the failure as an ``error`` line and again in ``turn.failed``: one fatal error, not two."""
    run = _run(tmp_path, replies, "say hi")
    assert run.returncode == 1, run.stderr
    events = run.events()
    notice, fatal = only(events, p.Error)
    assert notice.recoverable and notice.details == {"attempt": 1, "max_attempts": 1}
    assert (fatal.recoverable, fatal.code) == (False, code)
    result = one(events, p.Result)
    assert (result.ok, result.exit_code, result.synthetic) == (False, 1, p.UNSET)
    assert result.error is not p.UNSET and (result.error.code, result.error.message) == (code, fatal.message)
    assert not violations(events)


# -- resuming a thread -------------------------------------------------------------------------


def test_resumed_turns_count_what_the_thread_s_total_grew_by(tmp_path: Path) -> None:
    """``turn.completed`` gives the thread's total, earlier processes' turns included: read one after the
    other, the two runs' outputs count each turn once."""
    first = _run(tmp_path, [responses_reply("First.", usage=(100, 5))], "one")
    thread = json.loads(first.lines[0])["thread_id"]
    second = _run(
        tmp_path, [responses_reply("Second.", usage=(150, 7))], "resume", thread, "two", home=first.home
    )
    assert second.returncode == 0, second.stderr
    assert json.loads(second.lines[0])["thread_id"] == thread
    events = list(read(first.stdout + second.stdout, "codex"))
    assert [_usage(u) for u in only(events, p.Usage)] == [(100, 0, 5, 0), (150, 0, 7, 0)]
    assert [r.result for r in only(events, p.Result)] == ["First.", "Second."]
    assert not violations(events)


# -- the rollout file --------------------------------------------------------------------------


def test_the_rollout_of_a_turn_with_a_failed_command_reads_as_codex_printed_it(tmp_path: Path) -> None:
    script = [
        responses_reply("", [("call_b", "exec_command", {"cmd": "echo oops >&2; exit 3"})], usage=(20, 10)),
        responses_reply("It failed.", usage=(30, 4)),
    ]
    run = _run(tmp_path, script, "run it")
    assert run.returncode == 0, run.stderr
    events = list(read(run.rollout()))
    assert not [e.type for e in events if isinstance(e, p.UnknownEvent) and "item_completed" in e.type]
    (call,) = only(events, p.ToolCall)
    assert (call.name, call.arguments) == ("exec_command", {"cmd": "echo oops >&2; exit 3"})
    (result,) = only(events, p.ToolResult)
    assert result.status == "error" and "oops" in result.output
    ending = one(events, p.Result)
    assert (ending.ok, ending.result, _usage(ending.usage)) == (True, "It failed.", (50, 0, 14, 0))
    assert not violations(events)


def test_the_rollout_of_a_failed_turn_reads_as_failed(tmp_path: Path) -> None:
    """Codex records a turn that failed as ``task_complete`` with an ``error``."""
    run = _run(tmp_path, [openai_error(401)] * 2, "say hi")
    events = list(read(run.rollout(), "codex-log"))
    result = one(events, p.Result)
    assert (result.ok, result.exit_code) == (False, 1)
    assert result.error is not p.UNSET and result.error.code == "AUTH_EXPIRED"
    assert not violations(events)


# -- agentstream wrap -- codex exec --json ------------------------------------------------------


@pytest.mark.parametrize(
    ("replies", "exit_code"), [([responses_reply("Wrapped.")], 0), ([openai_error(401)] * 2, 1)]
)
def test_wrap_relays_codex_with_its_exit_code(tmp_path: Path, replies: list[Reply], exit_code: int) -> None:
    run = _run(tmp_path, replies, "say hi", wrap=[])
    assert run.returncode == exit_code, run.stderr
    events: list[Any] = [p.decode(line) for line in run.lines]
    assert not violations(events)
    result = one(events, p.Result)
    assert result.exit_code == exit_code
    (child,) = [e for e in events if isinstance(e, p.Status) and e.status == "child_session"]
    assert run.rollout().stem.endswith(f"-{child.message}")  # Codex's own thread, the one it resumes
    assert KEY not in run.stdout.decode()  # the 401 echoes the key; the wrap redacts it
    if exit_code == 0:
        assert result.result == "Wrapped."
        assert [usage.model for usage in only(events, p.Usage)] == [MODEL]  # as its -m asked, not "unknown"
    else:
        assert len(only(events, p.Error)) == 2  # the retry notice and the one fatal error


def test_a_spawned_codex_names_the_model_its_command_line_asks_for(tmp_path: Path) -> None:
    """Codex prints no model: the start and usage of ``spawn`` name the one its ``-m`` asked for."""
    home, work = tmp_path / "home", tmp_path / "work"
    with FakeModelServer([responses_reply("Named.", usage=(50, 5))]) as server:
        command, env = _codex_exec(server, home, work, MODEL, ["say hi"])
        with spawn(command, "codex", env=env, cwd=str(work)) as child:
            events = list(child)
    assert not violations(events) and one(events, p.Result).ok
    assert one(events, p.Start).model == MODEL
    assert [(usage.model, usage.input_tokens) for usage in only(events, p.Usage)] == [(MODEL, 50)]


# -- agentstream acp --cli codex -- an editor's session over ACP --------------------------------


def test_an_acp_session_resumes_codex_with_its_options_and_new_ids_each_turn(tmp_path: Path) -> None:
    """The official ACP client drives two prompts: the second resumes Codex's thread with the same options
    (``exec``'s, before ``resume``), and its command, which Codex numbers ``item_0`` again, gets an id of its own."""
    from _acp_support import acp_client, of_kind, updates

    calls = [("call_a", "exec_command", {"cmd": "printf one"})]
    script = [responses_reply("", calls), responses_reply("First."), responses_reply("", calls)]
    script.append(responses_reply("Second."))
    with FakeModelServer(script) as server:
        command, env = _codex_exec(server, tmp_path / "home", tmp_path / "work", MODEL, [])
        assert command[1:3] == ["exec", "--json"]
        agent = [sys.executable, "-m", "agentstream", "acp", "--cli", "codex", "--cli-path", command[0]]
        agent += ["--no-publish", "--", *command[3:]]
        plan = {"cwd": str(tmp_path / "work"), "prompts": ["run it", "run it again"]}
        got = acp_client(plan, agent, env, cwd=tmp_path / "work", timeout=60)
    assert [s["stopReason"] for s in of_kind(got, "stop")] == ["end_turn", "end_turn"], got
    announced = [u["toolCallId"] for u in updates(got, "tool_call")]
    assert len(announced) == len(set(announced)) == 2
    assert [u["status"] for u in updates(got, "tool_call_update")] == ["completed", "completed"]
