"""OpenTelemetry export: real runs of exec, wrap, follow and export, checked at a loopback OTLP/HTTP receiver.

The receiver decodes each request with opentelemetry-proto (the official
protobuf bindings); the mapping's corner cases are checked in-process against
the SDK's own in-memory exporter.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from _otlp_receiver import ReceivedSpan, Receiver, start_receiver

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = start_receiver()
    yield rec
    rec.server.shutdown()
    rec.server.server_close()


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any OTel setting of the machine's, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "TRACEPARENT"}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def otel_env(receiver: Receiver, **extra: str) -> dict[str, str]:
    return clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint, OTEL_SERVICE_NAME="otel-test", **extra)


def agentstream(
    *args: str, env: dict[str, str], cwd: Path, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentstream", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )


def events_of(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def ns(ts: str) -> int:
    moment = datetime.fromisoformat(ts)
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def by_operation(spans: list[ReceivedSpan], operation: str) -> list[ReceivedSpan]:
    return sorted(
        (s for s in spans if s.attributes.get("gen_ai.operation.name") == operation),
        key=lambda s: (s.start_ns, s.end_ns),
    )


def the_agent_span(spans: list[ReceivedSpan]) -> ReceivedSpan:
    agents = by_operation(spans, "invoke_agent")
    assert len(agents) == 1, [s.name for s in spans]
    return agents[0]


def check_replay_trace(spans: list[ReceivedSpan], session_id: str) -> ReceivedSpan:
    """The bundled cassette's run: 3 model calls, 3 real tool calls, all children of the run's span."""
    agent = the_agent_span(spans)
    assert agent.name == "invoke_agent agentstream"
    assert agent.parent_span_id == ""
    assert agent.attributes["gen_ai.conversation.id"] == session_id
    assert agent.attributes["gen_ai.provider.name"] == "demo"
    assert agent.attributes["gen_ai.request.model"] == "agentstream-demo"
    chats = by_operation(spans, "chat")
    tools = by_operation(spans, "execute_tool")
    assert len(spans) == 7
    for child in chats + tools:
        assert child.trace_id == agent.trace_id
        assert child.parent_span_id == agent.span_id
        assert agent.start_ns <= child.start_ns <= child.end_ns <= agent.end_ns
    assert [c.name for c in chats] == ["chat agentstream-demo"] * 3
    assert {c.kind for c in chats} == {"CLIENT"}
    assert [c.attributes["gen_ai.usage.input_tokens"] for c in chats] == [1184, 1532, 1790]
    assert [c.attributes["gen_ai.usage.output_tokens"] for c in chats] == [52, 31, 96]
    assert [c.attributes["gen_ai.response.finish_reasons"] for c in chats] == [
        ("tool_calls",),
        ("tool_calls",),
        ("stop",),
    ]
    assert chats[1].attributes["gen_ai.usage.cache_read.input_tokens"] == 1152
    assert [(t.attributes["gen_ai.tool.name"], t.attributes["gen_ai.tool.call.id"]) for t in tools] == [
        ("list_dir", "call_demo_01"),
        ("shell", "call_demo_02"),
        ("glob", "call_demo_03"),
    ]
    assert [t.name for t in tools] == ["execute_tool list_dir", "execute_tool shell", "execute_tool glob"]
    # each model call ends before the tools it asked for start, and the next call starts after them
    assert chats[0].end_ns <= tools[0].start_ns and tools[1].end_ns <= chats[1].start_ns
    assert chats[1].end_ns <= tools[2].start_ns <= tools[2].end_ns <= chats[2].start_ns
    assert agent.attributes["gen_ai.usage.input_tokens"] == 1184 + 1532 + 1790
    assert agent.attributes["agentstream.exit_code"] == 0
    assert agent.status == "UNSET"
    return agent


# -- exec -----------------------------------------------------------------------------


def test_exec_exports_its_run_as_one_genai_trace(receiver: Receiver, tmp_path: Path) -> None:
    done = agentstream(
        "exec", "--provider", "demo", "--no-publish", "look around", env=otel_env(receiver), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "otel" not in done.stderr
    events = events_of(done.stdout)
    spans = receiver.wait_for(7)
    agent = check_replay_trace(spans, events[0]["session_id"])
    assert agent.resource["service.name"] == "otel-test"
    # times are the events' own: the run from start to result, each call ending at its usage
    assert agent.start_ns == ns(events[0]["ts"]) and agent.end_ns == ns(events[-1]["ts"])
    usage_times = [ns(e["ts"]) for e in events if e["type"] == "usage"]
    assert [c.end_ns for c in by_operation(spans, "chat")] == usage_times
    results = {e["call_id"]: ns(e["ts"]) for e in events if e["type"] == "tool_result"}
    for tool in by_operation(spans, "execute_tool"):
        assert tool.end_ns == results[tool.attributes["gen_ai.tool.call.id"]]
        assert tool.attributes["agentstream.tool.status"] == "success"
        assert tool.status == "UNSET"


def test_a_failing_run_records_its_errors_on_the_spans(receiver: Receiver, tmp_path: Path) -> None:
    done = agentstream(
        "exec",
        "--provider",
        "demo",
        "--no-publish",
        "--max-turns",
        "1",
        "--permission-mode",
        "read-only",
        "go",
        env=otel_env(receiver),
        cwd=tmp_path,
    )
    assert done.returncode == 3, done.stderr
    spans = receiver.wait_for(4)
    agent = the_agent_span(spans)
    assert agent.status == "ERROR"
    assert agent.attributes["error.type"] == "MAX_TURNS"
    assert agent.attributes["agentstream.exit_code"] == 3
    assert "--max-turns 1" in agent.status_message
    assert [e[0] for e in agent.events] == ["exception"]
    tools = {t.attributes["gen_ai.tool.name"]: t for t in by_operation(spans, "execute_tool")}
    assert tools["list_dir"].status == "UNSET"
    shell = tools["shell"]
    assert shell.status == "ERROR"
    assert shell.attributes["error.type"] == "denied"
    assert "read-only" in shell.status_message
    assert len(by_operation(spans, "chat")) == 1


def test_an_interrupted_exec_still_exports_its_spans(receiver: Receiver, tmp_path: Path) -> None:
    cassette = tmp_path / "slow.cassette.jsonl"
    calls = [
        {"cassette": 1, "provider": "demo", "model": "slow-demo"},
        {
            "call": 1,
            "events": [
                {
                    "type": "tool_call",
                    "call_id": "call_sleep",
                    "name": "shell",
                    "arguments": {"command": "sleep 30"},
                },
                {"type": "usage", "input_tokens": 10, "output_tokens": 5},
                {"type": "end", "reason": "tool_calls"},
            ],
        },
    ]
    cassette.write_text("".join(json.dumps(c) + "\n" for c in calls))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentstream",
            "exec",
            "--provider",
            "replay",
            "--cassette",
            str(cassette),
            "--no-publish",
            "--permission-mode",
            "full",
            "wait",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=otel_env(receiver),
        cwd=tmp_path,
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if json.loads(line)["type"] == "tool_call":
                break
        proc.send_signal(signal.SIGINT)
        rest = proc.stdout.read()
        assert proc.wait(timeout=30) == 130
    finally:
        proc.kill()
        proc.wait()
    assert json.loads(rest.splitlines()[-1])["subtype"] == "interrupted"
    spans = receiver.wait_for(3)
    agent = the_agent_span(spans)
    assert agent.status == "ERROR" and agent.attributes["error.type"] == "INTERRUPTED"
    assert agent.attributes["agentstream.exit_code"] == 130
    (tool,) = by_operation(spans, "execute_tool")
    assert tool.attributes["gen_ai.tool.call.id"] == "call_sleep"
    assert tool.status == "ERROR" and tool.attributes["agentstream.tool.status"] == "cancelled"
    (chat,) = by_operation(spans, "chat")
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)


def test_a_dead_collector_costs_one_warning_and_not_the_run(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}")
    done = agentstream("exec", "--provider", "demo", "--no-publish", "hi", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert events_of(done.stdout)[-1]["ok"] is True
    warnings = [line for line in done.stderr.splitlines() if "otel" in line]
    assert len(warnings) == 1, done.stderr
    assert f"127.0.0.1:{port}/v1/traces" in warnings[0] and "not exported" in warnings[0]


def test_grpc_is_refused_with_a_clear_message(tmp_path: Path, receiver: Receiver) -> None:
    env = otel_env(receiver, OTEL_EXPORTER_OTLP_PROTOCOL="grpc")
    done = agentstream("exec", "--provider", "demo", "--no-publish", "hi", env=env, cwd=tmp_path)
    assert done.returncode == 0
    assert "OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported" in done.stderr
    assert "http/protobuf" in done.stderr
    exported = agentstream("export", "otel", str(FIXTURES / "seeds" / "acai.ndjson"), env=env, cwd=tmp_path)
    assert exported.returncode == 2
    assert "OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported" in exported.stderr
    assert receiver.requests == 0


@pytest.mark.parametrize("command", ["exec", "wrap"])
def test_without_an_endpoint_nothing_from_opentelemetry_is_imported(tmp_path: Path, command: str) -> None:
    report = tmp_path / "modules.json"
    child = tmp_path / "child.py"
    child.write_text('print(\'{"type":"start","v":1,"session_id":"c","seq":0,"ts":"","command":"c"}\')\n')
    argv = (
        ["exec", "--provider", "demo", "--no-publish", "hi"]
        if command == "exec"
        else ["wrap", "--", sys.executable, str(child)]
    )
    code = textwrap.dedent(
        f"""
        import atexit, json, sys
        def report():
            names = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
            open({str(report)!r}, "w").write(json.dumps(names))
        atexit.register(report)
        from agentstream.cli import main
        sys.exit(main({argv!r}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=tmp_path,
        timeout=60,
    )
    assert events_of(done.stdout)[-1]["type"] == "result", done.stderr
    assert json.loads(report.read_text()) == []


# -- wrap -----------------------------------------------------------------------------

CHILD = """
import json, os, sys
open(sys.argv[1], "w").write(os.environ.get("TRACEPARENT", ""))
events = [
    {"type": "start", "command": "child", "model": "child-model", "provider": "openai"},
    {"type": "message", "message_id": "m1", "role": "assistant", "content": "checking"},
    {"type": "usage", "model": "child-model", "input_tokens": 11, "output_tokens": 7},
    {"type": "tool_call", "call_id": "c1", "name": "read_file", "arguments": {"path": "x"}},
    {"type": "tool_result", "call_id": "c1", "name": "read_file", "status": "error", "error": "no such file", "duration_ms": 3},
    {"type": "message", "message_id": "m2", "role": "assistant", "content": "done"},
    {"type": "usage", "model": "child-model", "input_tokens": 20, "output_tokens": 2},
    {"type": "result", "ok": True, "subtype": "success", "exit_code": 0},
]
for seq, event in enumerate(events):
    print(json.dumps({"v": 1, "session_id": "ses_child", "seq": seq, "ts": "", **event}), flush=True)
"""


def test_wrap_exports_the_child_run_and_passes_it_a_traceparent(receiver: Receiver, tmp_path: Path) -> None:
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    seen = tmp_path / "traceparent.txt"
    outer_trace, outer_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    env = otel_env(receiver, TRACEPARENT=f"00-{outer_trace}-{outer_span}-01")
    done = agentstream("wrap", "--", sys.executable, str(child), str(seen), env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    spans = receiver.wait_for(4)
    agent = the_agent_span(spans)
    # the wrap joins the trace it was started in, and hands its own span to the child
    assert agent.trace_id == outer_trace and agent.parent_span_id == outer_span
    assert seen.read_text() == f"00-{agent.trace_id}-{agent.span_id}-01"
    assert agent.name == f"invoke_agent {Path(sys.executable).name}"
    assert agent.attributes["agentstream.command"] == Path(sys.executable).name  # its arguments stay out
    chats = by_operation(spans, "chat")
    assert [c.attributes["gen_ai.usage.input_tokens"] for c in chats] == [11, 20]
    assert [c.attributes["gen_ai.response.finish_reasons"] for c in chats] == [("tool_calls",), ("stop",)]
    assert all(c.attributes["gen_ai.response.model"] == "child-model" for c in chats)
    (tool,) = by_operation(spans, "execute_tool")
    assert tool.parent_span_id == agent.span_id
    assert tool.status == "ERROR" and tool.attributes["error.type"] == "error"
    assert tool.status_message == "no such file"


# -- follow and export ----------------------------------------------------------------


def test_follow_exports_the_run_it_follows(receiver: Receiver, tmp_path: Path) -> None:
    bus = f"sqlite:///{tmp_path / 'bus.db'}"
    produced = agentstream("exec", "--provider", "demo", "--bus", bus, "hi", env=clean_env(), cwd=tmp_path)
    assert produced.returncode == 0, produced.stderr
    run_id = events_of(produced.stdout)[0]["session_id"]
    assert receiver.requests == 0
    followed = agentstream("follow", run_id, "--bus", bus, env=otel_env(receiver), cwd=tmp_path)
    assert followed.returncode == 0, followed.stderr
    check_replay_trace(receiver.wait_for(7), run_id)


def test_export_otel_replays_a_recorded_stream_with_its_own_times(receiver: Receiver, tmp_path: Path) -> None:
    recorded = agentstream("exec", "--provider", "demo", "--no-publish", "hi", env=clean_env(), cwd=tmp_path)
    path = tmp_path / "run.ndjson"
    path.write_text(recorded.stdout)
    events = events_of(recorded.stdout)
    done = agentstream("export", "otel", str(path), env=clean_env(), cwd=tmp_path)
    assert done.returncode == 2
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in done.stderr and "--endpoint" in done.stderr
    done = agentstream(
        "export", "otel", str(path), "--endpoint", receiver.endpoint, env=clean_env(), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert (
        f"1 run(s), 7 span(s) from {len(events)} event(s) exported to {receiver.endpoint}/v1/traces"
        in done.stderr
    )
    spans = receiver.wait_for(7)
    agent = check_replay_trace(spans, events[0]["session_id"])
    assert agent.resource["service.name"] == "agentstream"
    assert (agent.start_ns, agent.end_ns) == (ns(events[0]["ts"]), ns(events[-1]["ts"]))


def test_export_otel_reads_a_session_log_dialect(receiver: Receiver, tmp_path: Path) -> None:
    log = FIXTURES / "dialects" / "claude" / "session-2.0.76.ndjson"
    done = agentstream("export", "otel", str(log), env=otel_env(receiver), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    spans = receiver.wait_for(3)
    agent = the_agent_span(spans)
    assert agent.name == "invoke_agent claude"
    assert agent.attributes["gen_ai.request.model"] == "claude-opus-4-5-20251101"
    (chat,) = by_operation(spans, "chat")
    assert chat.attributes["gen_ai.usage.input_tokens"] == 34420
    assert chat.attributes["gen_ai.usage.cache_read.input_tokens"] == 12671
    (tool,) = by_operation(spans, "execute_tool")
    assert tool.attributes["gen_ai.tool.name"] == "Read"
    assert agent.status == "ERROR"  # the log stops mid-run


def test_export_otel_says_what_followed_the_last_result(receiver: Receiver, tmp_path: Path) -> None:
    """Claude Code's stray results after a run's result are no run: not exported, and said so, as convert says."""
    results = FIXTURES / "dialects" / "claude" / "results.ndjson"
    done = agentstream("export", "otel", str(results), env=otel_env(receiver), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "1 run(s)" in done.stderr and "what followed the last result was not read" in done.stderr


def test_export_to_a_dead_collector_exits_1(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = FIXTURES / "dialects" / "claude" / "session-2.0.76.ndjson"
    done = agentstream(
        "export", "otel", str(log), "--endpoint", f"http://127.0.0.1:{port}", env=clean_env(), cwd=tmp_path
    )
    assert done.returncode == 1
    assert "3 of 3 span(s) were not accepted" in done.stderr


@pytest.mark.parametrize(
    "order",
    [
        ["otel", "--endpoint", "{url}", "{file}"],
        ["otel", "--from", "claude-log", "{file}", "--endpoint", "{url}"],
        ["otel", "--endpoint", "{url}", "--from", "claude-log", "{file}"],
        ["--endpoint", "{url}", "otel", "{file}"],
    ],
    ids=["options-then-file", "from-file-endpoint", "options-around", "option-before-target"],
)
def test_export_takes_its_options_and_file_in_any_order(
    receiver: Receiver, tmp_path: Path, order: list[str]
) -> None:
    log = FIXTURES / "dialects" / "claude" / "session-2.0.76.ndjson"
    argv = [word.format(url=receiver.endpoint, file=log) for word in order]
    done = agentstream("export", *argv, env=clean_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(receiver.wait_for(3)) == 3


@pytest.mark.parametrize(
    "url", ["notaurl", "localhost:4318", "ftp://collector:4318", "http://", "http://h:99999"]
)
def test_a_malformed_endpoint_is_a_usage_error_before_the_input_is_read(
    receiver: Receiver, tmp_path: Path, url: str
) -> None:
    log = FIXTURES / "dialects" / "claude" / "session-2.0.76.ndjson"
    done = agentstream("export", "otel", str(log), "--endpoint", url, env=clean_env(), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"INVALID_INPUT: --endpoint {url!r} is not an OTLP/HTTP URL" in done.stderr
    assert "\n  fix: " in done.stderr and "is it running" not in done.stderr
    missing = agentstream(
        "export", "otel", "no-such.ndjson", "--endpoint", url, env=clean_env(), cwd=tmp_path
    )
    assert (
        missing.returncode == 2 and "is not an OTLP/HTTP URL" in missing.stderr
    )  # before the input is opened
    from_env = agentstream(
        "export", "otel", str(log), env=clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=url), cwd=tmp_path
    )
    assert from_env.returncode == 2 and f"OTEL_EXPORTER_OTLP_ENDPOINT {url!r} is not" in from_env.stderr
    assert receiver.requests == 0


def test_a_malformed_endpoint_in_the_environment_costs_a_live_run_one_warning(tmp_path: Path) -> None:
    env = clean_env(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="collector:4318/v1/traces")
    done = agentstream("exec", "--provider", "demo", "--no-publish", "hi", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert events_of(done.stdout)[-1]["ok"] is True
    warnings = [line for line in done.stderr.splitlines() if "otel" in line]
    assert len(warnings) == 1, done.stderr
    assert (
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT 'collector:4318/v1/traces' is not an OTLP/HTTP URL" in warnings[0]
    )


@pytest.mark.parametrize(
    "content",
    [b"", b"\n   \n\r\n", b"hello\nnot an event {\n"],
    ids=["empty", "blank-lines", "noise"],
)
@pytest.mark.parametrize("where", ["file", "stdin"])
def test_export_of_an_input_with_no_events_exports_nothing_and_fails(
    receiver: Receiver, tmp_path: Path, content: bytes, where: str
) -> None:
    """The reader's made-up ending of such an input (a failed run) is no run to trace."""
    path = tmp_path / "input.ndjson"
    path.write_bytes(content)
    done = subprocess.run(
        [sys.executable, "-m", "agentstream", "export", "otel", *([str(path)] if where == "file" else [])],
        input=content,
        capture_output=True,
        env=otel_env(receiver),
        cwd=tmp_path,
        timeout=60,
    )
    stderr = done.stderr.decode()
    assert done.returncode == 2, stderr
    assert done.stdout == b""
    assert "agentstream export: INVALID_INPUT: " in stderr and "has no events to export" in stderr
    assert ("stdin" if where == "stdin" else str(path)) in stderr and "\n  fix: " in stderr
    assert receiver.requests == 0


def test_export_of_a_stream_of_made_up_events_only_exports_nothing(
    receiver: Receiver, tmp_path: Path
) -> None:
    """A saved made-up ending (convert of an empty input) says itself that no run is in it."""
    empty = tmp_path / "empty.ndjson"
    empty.write_bytes(b"")
    made_up = agentstream("convert", str(empty), env=clean_env(), cwd=tmp_path)
    assert [e["synthetic"] for e in events_of(made_up.stdout)] == [True, True, True]
    path = tmp_path / "made-up.ndjson"
    path.write_text(made_up.stdout)
    done = agentstream("export", "otel", str(path), env=otel_env(receiver), cwd=tmp_path)
    assert done.returncode == 2 and "has no events to export" in done.stderr
    assert receiver.requests == 0


def test_export_after_noise_lines_still_exports_the_run(receiver: Receiver, tmp_path: Path) -> None:
    recorded = agentstream("exec", "--provider", "demo", "--no-publish", "hi", env=clean_env(), cwd=tmp_path)
    path = tmp_path / "run.ndjson"
    path.write_text("some noise first\n\n" + recorded.stdout)
    done = agentstream("export", "otel", str(path), env=otel_env(receiver), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    check_replay_trace(receiver.wait_for(7), events_of(recorded.stdout)[0]["session_id"])


# -- the mapping's corner cases, in-process against the SDK's in-memory exporter --------


def _sink_spans(events: list) -> list:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentstream.observe._otel_spans import OtelSink

    memory = InMemorySpanExporter()
    sink = OtelSink(memory)
    for event in events:
        sink.on_event(event)
    sink.close()
    return sorted(memory.get_finished_spans(), key=lambda s: (s.start_time, s.name))


def _at(second: float) -> str:
    whole, milli = divmod(round(second * 1000), 1000)
    return f"2025-06-02T09:30:{whole:02d}.{milli:03d}Z"


def _op(spans: list, operation: str) -> list:
    return [s for s in spans if s.attributes["gen_ai.operation.name"] == operation]


def test_a_tool_called_while_the_model_streams_marks_that_call_tool_calls() -> None:
    from agentstream import protocol as p

    spans = _sink_spans(
        [
            p.Start(command="demo", ts=_at(0), session_id="s"),
            p.Step(name="turn 1", status="started", ts=_at(1)),
            p.Reasoning(reasoning_id="r", content="think", ts=_at(2)),
            p.ToolCall(call_id="c", name="count", ts=_at(3)),
            p.ToolResult(call_id="c", name="count", status="success", ts=_at(4)),
            p.Usage(model="m", input_tokens=5, output_tokens=1, ts=_at(5)),
            p.Message(message_id="x", role="assistant", content="ok", ts=_at(6)),
            p.Usage(model="m", input_tokens=6, output_tokens=2, ts=_at(7)),
            p.Result(ok=True, subtype="success", exit_code=0, ts=_at(8)),
        ]
    )
    first, second = _op(spans, "chat")
    assert first.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert (first.start_time, first.end_time) == (_sink_ns(1), _sink_ns(5))  # from the turn's start
    assert second.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert (second.start_time, second.end_time) == (_sink_ns(5), _sink_ns(7))


def _sink_ns(second: float) -> int:
    return ns(_at(second).replace("Z", "+00:00"))


def test_a_stream_without_a_result_ends_as_not_finished() -> None:
    from agentstream import protocol as p

    spans = _sink_spans(
        [
            p.Start(command="claude -p hi", ts=_at(0), session_id="s"),
            p.MessageDelta(message_id="m", content="par", ts=_at(1)),
            p.ToolCall(call_id="c", name="Bash", ts=_at(2)),
        ]
    )
    (agent,) = _op(spans, "invoke_agent")
    assert agent.name == "invoke_agent claude"
    assert agent.status.status_code.name == "ERROR" and agent.attributes["error.type"] == "NOT_FINISHED"
    assert agent.end_time == _sink_ns(2)
    (chat,) = _op(spans, "chat")
    assert chat.attributes["error.type"] == "NOT_FINISHED"
    (tool,) = _op(spans, "execute_tool")
    assert tool.attributes["agentstream.tool.status"] == "cancelled" and tool.end_time == _sink_ns(2)


def test_a_provider_failure_is_a_failed_chat_span_and_retries_are_span_events() -> None:
    from agentstream import protocol as p

    spans = _sink_spans(
        [
            p.Start(command="exec", model="gpt-x", provider="openai", ts=_at(0), session_id="s"),
            p.Error(code="RATE_LIMITED", message="slow down", recoverable=True, ts=_at(1)),
            p.Error(code="AUTH_EXPIRED", message="bad key", ts=_at(3)),
            p.Result(
                ok=False,
                subtype="error",
                exit_code=1,
                error=p.ErrorInfo(code="AUTH_EXPIRED", message="bad key"),
                ts=_at(3),
            ),
        ]
    )
    (chat,) = _op(spans, "chat")
    assert chat.name == "chat gpt-x" and chat.attributes["gen_ai.provider.name"] == "openai"
    assert chat.attributes["error.type"] == "AUTH_EXPIRED" and chat.status.description == "bad key"
    assert (chat.start_time, chat.end_time) == (_sink_ns(0), _sink_ns(3))
    (agent,) = _op(spans, "invoke_agent")
    retry, failure = agent.events
    assert (retry.name, retry.attributes["error.type"], retry.timestamp) == (
        "agentstream.error",
        "RATE_LIMITED",
        _sink_ns(1),
    )
    assert (failure.name, failure.attributes["exception.type"]) == ("exception", "AUTH_EXPIRED")


def test_each_run_of_a_multi_turn_input_is_its_own_trace_and_orphan_results_keep_their_duration() -> None:
    from agentstream import protocol as p

    def run(session: str, base: float) -> list:
        return [
            p.Start(command="exec", ts=_at(base), session_id=session),
            p.ToolResult(call_id="c", name="grep", status="success", duration_ms=500, ts=_at(base + 2)),
            p.Result(ok=True, subtype="success", exit_code=0, ts=_at(base + 3), session_id=session),
        ]

    spans = _sink_spans(run("one", 0) + run("two", 10))
    agents = _op(spans, "invoke_agent")
    assert [a.attributes["gen_ai.conversation.id"] for a in agents] == ["one", "two"]
    assert agents[0].context.trace_id != agents[1].context.trace_id
    tools = _op(spans, "execute_tool")
    assert [(t.start_time, t.end_time) for t in tools] == [
        (_sink_ns(1.5), _sink_ns(2)),
        (_sink_ns(11.5), _sink_ns(12)),
    ]
    assert [t.parent.span_id for t in tools] == [a.context.span_id for a in agents]


# -- what a trace must not say, and what it must ---------------------------------------


def test_the_command_is_exported_without_its_prompt_or_any_value() -> None:
    """A prompt on the command line (or a key in an option) stays out: the program and its option names go."""
    from agentstream import protocol as p

    command = "/usr/local/bin/claude -p 'my secret prompt: password hunter2' --api-key=sk-1 --output-format stream-json"
    spans = _sink_spans(
        [
            p.Start(command=command, ts=_at(0), session_id="s"),
            p.Result(ok=True, subtype="success", exit_code=0, ts=_at(1)),
        ]
    )
    (agent,) = _op(spans, "invoke_agent")
    assert agent.attributes["agentstream.command"] == "claude -p --api-key --output-format"
    values = [str(v) for span in spans for v in span.attributes.values()]
    assert not [v for v in values if "hunter2" in v or "sk-1" in v or "stream-json" in v]


def _cut_stream(path: Path) -> list[dict]:
    """A recorded run cut off while a tool runs (no result), from long ago."""
    events = [
        {"type": "start", "command": "exec", "model": "m1", "provider": "demo", "cwd": "/"},
        {"type": "step", "name": "turn 1", "status": "started"},
        {"type": "message_delta", "message_id": "a", "role": "assistant", "content": "let me "},
        {"type": "tool_call", "call_id": "c1", "name": "shell", "arguments": {"command": "ls"}},
    ]
    lines = [
        {**event, "v": 1, "session_id": "ses_cut", "seq": seq, "ts": f"2026-01-01T00:00:0{seq}.000Z"}
        for seq, event in enumerate(events)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return lines


def test_export_of_a_cut_file_ends_its_trace_at_its_last_event(receiver: Receiver, tmp_path: Path) -> None:
    """Not at the time of the export (the reader's made-up ending), so exporting it again gives the same trace."""
    path = tmp_path / "cut.ndjson"
    lines = _cut_stream(path)
    done = agentstream("export", "otel", str(path), env=otel_env(receiver), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"1 run(s), 3 span(s) from {len(lines)} event(s)" in done.stderr
    spans = receiver.wait_for(3)
    last = ns(lines[-1]["ts"])
    agent = the_agent_span(spans)
    assert (agent.start_ns, agent.end_ns) == (ns(lines[0]["ts"]), last)
    assert agent.status == "ERROR" and agent.attributes["error.type"] == "NOT_FINISHED"
    (chat,) = by_operation(spans, "chat")
    assert chat.end_ns == last and chat.attributes["error.type"] == "NOT_FINISHED"
    (tool,) = by_operation(spans, "execute_tool")
    assert tool.end_ns == last and tool.attributes["agentstream.tool.status"] == "cancelled"


def test_a_run_cut_by_the_next_one_ends_at_its_own_last_event() -> None:
    from agentstream import protocol as p

    spans = _sink_spans(
        [
            p.Start(command="exec", ts=_at(0), session_id="one"),
            p.MessageDelta(message_id="m", content="par", ts=_at(1)),
            p.Start(command="exec", ts=_at(9), session_id="two"),
            p.Result(ok=True, subtype="success", exit_code=0, ts=_at(10), session_id="two"),
        ]
    )
    first, second = _op(spans, "invoke_agent")
    assert first.end_time == _sink_ns(1) and first.attributes["error.type"] == "NOT_FINISHED"
    assert second.end_time == _sink_ns(10)


def test_a_stream_that_stops_after_its_fatal_error_ends_with_that_error() -> None:
    from agentstream import protocol as p

    spans = _sink_spans(
        [
            p.Start(command="exec", model="m", ts=_at(0), session_id="s"),
            p.Error(code="AUTH_EXPIRED", message="bad key", ts=_at(2)),
        ]
    )
    (agent,) = _op(spans, "invoke_agent")
    assert agent.attributes["error.type"] == "AUTH_EXPIRED" and agent.status.description == "bad key"
    assert agent.end_time == _sink_ns(2)


def test_a_model_call_answered_by_a_tool_call_alone_finishes_with_tool_calls() -> None:
    from agentstream import protocol as p

    spans = _sink_spans(
        [
            p.Start(command="exec", ts=_at(0), session_id="s"),
            p.Step(name="turn 1", status="started", ts=_at(1)),
            p.ToolCall(call_id="c1", name="shell", ts=_at(2)),
            p.Usage(model="m", input_tokens=10, output_tokens=5, ts=_at(3)),
            p.ToolResult(call_id="c1", name="shell", status="success", ts=_at(4)),
            p.Message(message_id="a", role="assistant", content="done", ts=_at(5)),
            p.Usage(model="m", input_tokens=20, output_tokens=5, ts=_at(6)),
            p.Result(ok=True, subtype="success", exit_code=0, ts=_at(7)),
        ]
    )
    first, second = _op(spans, "chat")
    assert first.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert (first.start_time, first.end_time) == (_sink_ns(1), _sink_ns(3))
    assert second.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert (second.start_time, second.end_time) == (_sink_ns(4), _sink_ns(6))


def test_a_tool_duration_the_stream_did_not_give_is_not_exported_as_zero() -> None:
    from agentstream import protocol as p

    spans = _sink_spans(
        [
            p.Start(command="exec", ts=_at(0), session_id="s"),
            p.ToolCall(call_id="quick", name="grep", ts=_at(1)),
            p.ToolResult(call_id="quick", name="grep", status="success", ts=_at(2)),
            p.ToolCall(call_id="timed", name="shell", ts=_at(3)),
            p.ToolResult(call_id="timed", name="shell", status="success", duration_ms=250, ts=_at(4)),
            p.Result(ok=True, subtype="success", exit_code=0, ts=_at(5)),
        ]
    )
    durations = {
        t.attributes["gen_ai.tool.name"]: t.attributes.get("agentstream.tool.duration_ms")
        for t in _op(spans, "execute_tool")
    }
    assert durations == {"grep": None, "shell": 250}


@pytest.mark.parametrize(
    ("log", "provider"),
    [
        ("claude-log/project-log.jsonl", "anthropic"),
        ("codex-log/rollout.jsonl", "openai"),
        ("gemini-log/chat.jsonl", "gcp.gemini"),
    ],
)
def test_the_spans_of_a_session_log_name_the_cli_s_provider(log: str, provider: str) -> None:
    from agentstream.consumer import read

    with read(FIXTURES / "dialects" / log) as reader:
        spans = _sink_spans(list(reader))
    model_spans = _op(spans, "invoke_agent") + _op(spans, "chat")
    assert len(model_spans) == 3
    assert {s.attributes["gen_ai.provider.name"] for s in model_spans} == {provider}


def test_cache_writes_are_exported_when_the_stream_knows_them() -> None:
    from agentstream.consumer import read

    with read(FIXTURES / "dialects" / "claude-log" / "project-log.jsonl") as reader:
        spans = _sink_spans(list(reader))
    chats = _op(spans, "chat")
    assert [c.attributes["gen_ai.usage.cache_creation.input_tokens"] for c in chats] == [1500, 300]
    (agent,) = _op(spans, "invoke_agent")
    assert agent.attributes["gen_ai.usage.cache_creation.input_tokens"] == 1800
    with read(FIXTURES / "dialects" / "gemini-log" / "chat.jsonl") as reader:
        unknown = _sink_spans(list(reader))  # Gemini's logs do not say: nothing is made up
    assert not [s for s in unknown if "gen_ai.usage.cache_creation.input_tokens" in s.attributes]


def test_a_collector_that_refuses_the_spans_is_said_to_by_its_status(tmp_path: Path) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    class Refusing(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        host, port = server.server_address[:2]
        log = FIXTURES / "dialects" / "claude" / "session-2.0.76.ndjson"
        done = agentstream(
            "export", "otel", str(log), "--endpoint", f"http://{host}:{port}", env=clean_env(), cwd=tmp_path
        )
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 1
    (warning,) = [line for line in done.stderr.splitlines() if "otel" in line]
    assert "the collector answered HTTP 500" in warning and "is it running" not in warning
