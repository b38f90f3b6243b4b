"""The command itself: entry points, help, start-up hygiene, the text renderer."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from agentstream import protocol as p
from agentstream.cli import COMMANDS
from agentstream.render.text import TextSink


def agentstream(*args: str, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "agentstream", *args], capture_output=True, timeout=60, **kwargs
    )  # type: ignore[call-overload]


def test_version_and_top_help() -> None:
    from agentstream import __version__

    assert agentstream("--version").stdout.decode() == f"agentstream {__version__} (protocol v1)\n"
    helped = agentstream("--help")
    assert helped.returncode == 0 and all(name in helped.stdout.decode() for name in COMMANDS)
    bare = agentstream()
    assert bare.returncode == 2 and bare.stdout == b"" and b"usage" in bare.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help(command: str) -> None:
    result = agentstream(command, "--help")
    assert result.returncode == 0, result.stderr.decode()
    assert f"agentstream {command}" in result.stdout.decode()


def test_unknown_command_suggests_the_nearest() -> None:
    result = agentstream("valdiate")
    assert result.returncode == 2 and b"did you mean 'validate'" in result.stderr and result.stdout == b""


def test_version_does_not_import_heavy_modules() -> None:
    code = (
        "import sys; from agentstream.cli import main; main(['--version']);"
        "heavy = [m for m in ('msgspec', 'openai', 'anthropic', 'redis', 'sqlite3') if m in sys.modules];"
        "print(heavy, file=sys.stderr)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)
    assert result.stderr.strip() == b"[]"


COLLECTOR_AT_RUN = """
import gc, sys
import agentstream.cli.schema_cmd as command
from agentstream import cli
run = command.run
def run_and_tell(args):
    print(gc.isenabled(), gc.get_freeze_count() > 0, file=sys.stderr)
    return run(args)
command.run = run_and_tell
sys.argv = ["agentstream", "schema"]
{start}
"""


@pytest.mark.parametrize("way", ["entry", "main"])
def test_a_command_runs_with_the_garbage_collector_on(way: str) -> None:
    """The executable holds the collector off while it imports, then freezes what it loaded and starts it
    again before the command runs; a program calling ``main`` keeps its own collector as it was."""
    start = "cli.entry()" if way == "entry" else "sys.exit(cli.main(sys.argv[1:]))"
    code = COLLECTOR_AT_RUN.format(start=start)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stderr.decode().split() == ["True", str(way == "entry")]


def test_demo_output_validates_in_every_format() -> None:
    stream_json = agentstream("demo", "--delay", "0")
    assert stream_json.returncode == 0
    checked = agentstream("validate", "--expect-exit", "0", input=stream_json.stdout)
    assert checked.returncode == 0, checked.stdout.decode()
    failed = agentstream("demo", "--delay", "0", "--fail", "-o", "json")
    assert failed.returncode == 1 and json.loads(failed.stdout)["error"]["code"] == "PROVIDER_ERROR"
    text = agentstream("demo", "--delay", "0", "-o", "text", env={"NO_COLOR": "1", "PATH": ""})
    assert text.stdout == b"agentstream always ends its stream with exactly one result event.\n"


def test_schema_command_prints_the_schema() -> None:
    schema = json.loads(agentstream("schema").stdout)
    assert schema["title"].startswith("agentstream protocol v1")


def test_view_renders_a_stream_and_exits_with_its_code() -> None:
    demo = agentstream("demo", "--delay", "0", "--fail").stdout
    viewed = agentstream("view", "--color", "never", input=demo)
    assert viewed.returncode == 1
    assert b"PROVIDER_ERROR" in viewed.stderr and viewed.stdout == b""


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def render(events: list[p.BaseEvent], err: io.StringIO, color: bool | None = None) -> bytes:
    out = io.BytesIO()

    class Out:
        def write(self, data: bytes | bytearray) -> None:
            out.write(data)

    sink = TextSink(Out(), err=err, color=color)
    for event in events:
        sink.emit(event)
    sink.close()
    return out.getvalue()


def test_text_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    events = [p.Start(command="x"), p.Log(level="warn", message="careful")]
    monkeypatch.delenv("NO_COLOR", raising=False)
    on_tty = FakeTerminal()
    render(events, on_tty)
    assert "\x1b[" in on_tty.getvalue()
    piped = io.StringIO()
    render(events, piped)
    assert "\x1b[" not in piped.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    no_color = FakeTerminal()
    render(events, no_color)
    assert "\x1b[" not in no_color.getvalue() and "careful" in no_color.getvalue()


def test_text_never_repeats_streamed_text() -> None:
    events = [
        p.MessageDelta(message_id="m", content="Hel"),
        p.MessageDelta(message_id="m", content="lo"),
        p.Message(message_id="m", role="assistant", content="Hello, world"),
        p.Message(message_id="n", role="assistant", content="Second."),
    ]
    assert render(events, io.StringIO()) == b"Hello, world\nSecond.\n"


def test_view_reads_any_dialect() -> None:
    gemini = agentstream("demo", "--delay", "0", "--dialect", "gemini").stdout
    assert b'"type":"init"' in gemini
    viewed = agentstream("view", "--color", "never", input=gemini)
    assert viewed.returncode == 0
    assert viewed.stdout == b"agentstream always ends its stream with exactly one result event.\n"
