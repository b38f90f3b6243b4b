"""The text format on a real pseudo-terminal: --color, the spinner, wrapped notes, the summary's counts."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentstream import protocol as p
from agentstream.render.text import Spinner, TextSink
from agentstream.stream import Stream

SGR = re.compile(rb"\x1b\[[0-9;]*m")
FRAMES = Spinner.FRAMES


def _env(**changes: str | None) -> dict[str, str]:
    """The environment of a person's terminal (colour allowed), with ``changes`` applied."""
    env = {key: value for key, value in os.environ.items() if key not in ("NO_COLOR", "COLUMNS")}
    env["TERM"] = "xterm-256color"
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _drain(fd: int, chunks: list[bytes]) -> None:
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: every writer of the terminal has gone
            return
        if not data:
            return
        chunks.append(data)


def _run(
    argv: list[str], env: dict[str, str], *, tty_err: bool, tty_out: bool = False
) -> tuple[bytes, bytes, int]:
    """Run ``agentstream ARGV`` with stderr (and optionally stdout) on one pseudo-terminal, else pipes.

    Returns (stdout, stderr, exit code); with ``tty_out`` both are the one terminal's bytes (stderr's slot).
    """
    command = [sys.executable, "-m", "agentstream", *argv]
    if not tty_err:
        done = subprocess.run(command, capture_output=True, env=env, timeout=60)
        return done.stdout, done.stderr, done.returncode
    leader, follower = pty.openpty()
    stdout = follower if tty_out else subprocess.PIPE
    with subprocess.Popen(command, stdout=stdout, stderr=follower, env=env) as child:
        os.close(follower)
        chunks: list[bytes] = []
        _drain(leader, chunks)
        out = child.stdout.read() if child.stdout else b""
        code = child.wait(timeout=60)
    os.close(leader)
    return out, b"".join(chunks), code


def screen(raw: bytes) -> list[str]:
    """What a terminal shows after ``raw``: \\r returns to column 0, ESC[K erases to the line's end."""
    lines: list[str] = []
    line: list[str] = []
    column = 0
    text = SGR.sub(b"", raw).decode("utf-8", "replace")
    for token in re.split(r"(\r\n|\r|\n|\x1b\[K)", text):
        if token in ("\r\n", "\n"):
            lines.append("".join(line))
            line, column = [], 0
        elif token == "\r":
            column = 0
        elif token == "\x1b[K":
            del line[column:]
        else:
            for char in token:
                if column < len(line):
                    line[column] = char
                else:
                    line.append(char)
                column += 1
    if line:
        lines.append("".join(line))
    return lines


# -- --color ------------------------------------------------------------------------------------


def test_color_auto_on_a_terminal_always_when_piped_never_anywhere() -> None:
    demo = ["demo", "-o", "text", "--delay", "0"]
    _, err, code = _run(demo, _env(), tty_err=True)
    assert code == 0 and SGR.search(err), "auto on a terminal colours the notes"
    _, err, code = _run([*demo, "--color", "always"], _env(), tty_err=False)
    assert code == 0 and SGR.search(err), "always colours even a pipe"
    _, err, _ = _run(demo, _env(), tty_err=False)
    assert not SGR.search(err) and b"\x1b" not in err, "auto on a pipe: plain"
    _, err, code = _run([*demo, "--color", "never"], _env(), tty_err=True)
    assert code == 0 and b"\x1b" not in err and "■ done" in err.decode()


@pytest.mark.parametrize("plain", [{"NO_COLOR": "1"}, {"TERM": "dumb"}])
def test_auto_honours_no_color_and_dumb_terminals_but_always_wins(plain: dict[str, str]) -> None:
    demo = ["demo", "-o", "text", "--delay", "0"]
    _, err, code = _run(demo, _env(**plain), tty_err=True)
    assert code == 0 and b"\x1b" not in err and "▶ demo" in err.decode()
    _, err, _ = _run([*demo, "--color", "always"], _env(**plain), tty_err=True)
    assert SGR.search(err)


def test_view_takes_the_shared_color_option(tmp_path: Path) -> None:
    path = tmp_path / "run.ndjson"
    path.write_bytes(
        subprocess.run(
            [sys.executable, "-m", "agentstream", "demo", "--delay", "0"], capture_output=True
        ).stdout
    )
    _, err, code = _run(["view", str(path), "--color", "always"], _env(), tty_err=False)
    assert code == 0 and SGR.search(err)
    _, err, _ = _run(["view", str(path), "--color", "never"], _env(), tty_err=True)
    assert b"\x1b" not in err and "■ done" in err.decode()


# -- the spinner ----------------------------------------------------------------------------------


def _read_until_frame(fd: int, chunks: list[bytes]) -> None:
    """Read the terminal until a spinner frame has been drawn (a readiness check, not a sleep)."""
    while not any(frame.encode() in b"".join(chunks) for frame in FRAMES):
        ready, _, _ = select.select([fd], [], [], 30)
        assert ready, f"no spinner frame within 30s: {b''.join(chunks)!r}"
        chunks.append(os.read(fd, 65536))


def test_spinner_waits_for_a_slow_first_token_then_leaves_nothing_on_the_screen() -> None:
    buffer = io.BytesIO()
    with Stream("exec", out=buffer, owns_process=False) as stream:
        stream.message("The answer is 42.")
    start, *rest = buffer.getvalue().splitlines(keepends=True)
    # stdout and stderr on one terminal, as a person has them: the first token must land on a clean line.
    command = [sys.executable, "-m", "agentstream", "view"]
    leader, follower = pty.openpty()
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=follower, stderr=follower, env=_env()
    ) as child:
        os.close(follower)
        assert child.stdin is not None
        child.stdin.write(start)
        child.stdin.flush()
        chunks: list[bytes] = []
        _read_until_frame(leader, chunks)  # the first token has not come yet
        child.stdin.write(b"".join(rest))
        child.stdin.close()
        _drain(leader, chunks)
        code = child.wait(timeout=30)
    os.close(leader)
    shown = screen(b"".join(chunks))
    assert code == 0
    assert not any(frame in line for line in shown for frame in FRAMES), shown
    assert shown[0] == "▶ exec" and "The answer is 42." in shown and shown[-1].startswith("■ done")


def test_spinner_never_touches_stdout() -> None:
    out, err, code = _run(["demo", "-o", "text", "--delay", "0.2"], _env(), tty_err=True)
    assert code == 0 and out == b"agentstream always ends its stream with exactly one result event.\n"
    assert any(frame in err.decode() for frame in FRAMES)
    assert not any(frame in line for line in screen(err) for frame in FRAMES)


@pytest.mark.parametrize(
    ("option", "env", "tty"),
    [
        (["--color", "always"], _env(), False),  # a pipe: its redraws would be garbage in a file
        ([], _env(NO_COLOR="1"), True),
        ([], _env(TERM="dumb"), True),
        (["--color", "never"], _env(), True),
    ],
    ids=["piped", "NO_COLOR", "TERM=dumb", "never"],
)
def test_no_spinner_when_piped_or_plain(option: list[str], env: dict[str, str], tty: bool) -> None:
    # --fail ends after the tool's slow progress, the wait in which a spinner would be drawn.
    _, err, code = _run(["demo", "-o", "text", "--fail", "--delay", "0.2", *option], env, tty_err=tty)
    assert code != 0 and "✗ error PROVIDER_ERROR" in err.decode()
    assert not any(frame in err.decode() for frame in FRAMES)


def test_an_interrupt_while_the_spinner_runs_erases_it() -> None:
    command = [sys.executable, "-m", "agentstream", "demo", "-o", "text", "--delay", "2"]
    leader, follower = pty.openpty()
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=follower, env=_env()) as child:
        os.close(follower)
        chunks: list[bytes] = []
        _read_until_frame(leader, chunks)
        child.send_signal(signal.SIGINT)
        _drain(leader, chunks)
        code = child.wait(timeout=30)
    os.close(leader)
    shown = screen(b"".join(chunks))
    assert code == 130
    assert not any(frame in line for line in shown for frame in FRAMES), shown
    assert shown[-1].startswith("■ failed (interrupted)"), shown


# -- wrapping -------------------------------------------------------------------------------------

_FIX = (
    "set ANTHROPIC_API_KEY in the environment or pass --provider openai with OPENAI_API_KEY, "
    "then run the same command again; see docs/agent.md for every provider's variables"
)


@pytest.fixture
def failed_run(tmp_path: Path) -> Path:
    """A canonical stream whose fatal error carries a long fix."""
    buffer = io.BytesIO()
    with Stream("exec", out=buffer, owns_process=False) as stream:
        stream.fail("AUTH_ERROR", "no credentials for the anthropic provider", fix=_FIX)
    path = tmp_path / "failed.ndjson"
    path.write_bytes(buffer.getvalue())
    return path


def test_notes_wrap_at_word_boundaries_to_the_terminal(failed_run: Path) -> None:
    _, err, code = _run(["view", str(failed_run)], _env(COLUMNS="40"), tty_err=True)
    assert code != 0
    shown = [line for line in screen(err) if line]
    start = next(i for i, line in enumerate(shown) if line.startswith("✗ error AUTH_ERROR"))
    note = shown[start : next(i for i in range(start, len(shown)) if shown[i].startswith("■"))]
    assert len(note) > 3 and all(len(line) <= 40 for line in note), note
    assert all(line.startswith("  ") for line in note[1:])
    words = " ".join(note).split()
    assert words == f"✗ error AUTH_ERROR: no credentials for the anthropic provider — fix: {_FIX}".split()


def test_notes_are_not_wrapped_off_a_terminal(failed_run: Path) -> None:
    _, err, _ = _run(["view", str(failed_run)], _env(COLUMNS="40"), tty_err=False)
    error_lines = [line for line in err.decode().splitlines() if "AUTH_ERROR" in line]
    assert len(error_lines) == 1 and error_lines[0].endswith(_FIX)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _wrapped_note(message: str, columns: int, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(columns))
    err = _Terminal()
    sink = TextSink(io.BytesIO(), err=err, color="never")
    sink.emit(p.Log(level="warn", message=message, session_id="s", seq=0, ts="2026-01-01T00:00:00.000Z"))
    return err.getvalue().splitlines()


def test_a_note_of_wide_characters_wraps_by_the_columns_they_take(monkeypatch: pytest.MonkeyPatch) -> None:
    """CJK characters take two columns each: wrapped by code points, the rows would run off the terminal."""
    from agentstream.render.text import columns

    rows = _wrapped_note("测试 " * 12 + "résumé naïve e\u0301 ok", 20, monkeypatch)
    assert len(rows) > 3 and all(columns(row) <= 20 for row in rows), rows
    assert all(row.startswith("  ") for row in rows[1:])
    assert " ".join(rows).split() == f"[warn] {'测试 ' * 12}résumé naïve e\u0301 ok".split()
    assert columns("测试") == 4 and columns("e\u0301") == 1


def test_a_wrapped_note_keeps_its_own_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """A note of several lines (a tool's error output) is wrapped line by line, never run into one paragraph."""
    rows = _wrapped_note("short\nsecond line that is long enough to wrap\nend", 24, monkeypatch)
    assert rows == ["[warn] short", "  second line that is", "  long enough to wrap", "  end"]


# -- the summary's counts ---------------------------------------------------------------------------


def _summary(events: list[p.AnyEvent]) -> str:
    out, err = io.BytesIO(), io.StringIO()

    class Out:
        def write(self, data: bytes | bytearray) -> None:
            out.write(data)

    sink = TextSink(Out(), err=err, color="never")
    for event in events:
        sink.emit(event)
    sink.close()
    return err.getvalue().splitlines()[-1]


def test_summary_shows_only_what_was_counted() -> None:
    # A converted stream from a dialect that reports no turns, duration or usage in its result.
    bare = _summary(
        [
            p.Start(command="gemini"),
            p.ToolCall(call_id="c1", name="read_file", arguments={}),
            p.ToolCall(call_id="c2", name="grep", arguments={}),
            p.Usage(model="m", input_tokens=12, output_tokens=5),
            p.Result(ok=True, subtype="success", exit_code=0),
        ]
    )
    assert bare == "■ done, 2 tool calls, 12 in / 5 out tokens, exit 0"
    nothing = _summary([p.Start(command="x"), p.Result(ok=False, subtype="error", exit_code=1)])
    assert nothing == "■ failed (error), exit 1"
    full = _summary(
        [
            p.Start(command="exec"),
            p.Result(
                ok=True,
                subtype="success",
                exit_code=0,
                duration_ms=2500,
                turn_count=3,
                tools_used=["bash"],
                usage=p.UsageTotals(input_tokens=100, output_tokens=20, cost_usd=0.0123),
            ),
        ]
    )
    assert full == "■ done in 2.5s, 3 turns, tools used: bash, 100 in / 20 out tokens, $0.0123, exit 0"


def test_counts_start_again_with_each_turn_of_a_session() -> None:
    line = _summary(
        [
            p.Start(command="exec"),
            p.ToolCall(call_id="c1", name="bash", arguments={}),
            p.Result(ok=True, subtype="success", exit_code=0, turn_count=1),
            p.Start(command="exec"),
            p.Result(ok=True, subtype="success", exit_code=0, turn_count=1),
        ]
    )
    assert line == "■ done, 1 turn, exit 0"


# -- deltas and the complete message ------------------------------------------------------------------


def _stdout(events: list[p.AnyEvent]) -> str:
    out = io.BytesIO()

    class Out:
        def write(self, data: bytes | bytearray) -> None:
            out.write(data)

    sink = TextSink(Out(), err=io.StringIO(), color="never")
    for event in events:
        sink.emit(event)
    sink.close()
    return out.getvalue().decode()


@pytest.mark.parametrize(
    ("deltas", "complete", "shown"),
    [
        (["Hel", "lo"], "Hello world.", "Hello world.\n"),  # continues the deltas: only the rest follows
        (["Helo wrld"], "Hello world, corrected.", "Helo wrld\nHello world, corrected.\n"),
        (["Line one\n"], "Line 1\n", "Line one\nLine 1\n"),
        ([], "No deltas.", "No deltas.\n"),
    ],
)
def test_the_complete_message_is_always_shown_even_when_it_does_not_continue_its_deltas(
    deltas: list[str], complete: str, shown: str
) -> None:
    events: list[p.AnyEvent] = [p.Start(command="x")]
    events += [p.MessageDelta(message_id="m", content=delta) for delta in deltas]
    events += [
        p.Message(message_id="m", role="assistant", content=complete),
        p.Result(ok=True, subtype="success", exit_code=0),
    ]
    assert _stdout(events) == shown


def test_view_and_convert_print_a_corrected_final_message(tmp_path: Path) -> None:
    path = tmp_path / "corrected.ndjson"
    events: list[p.Event] = [
        p.Start(command="x"),
        p.MessageDelta(message_id="m", content="Helo wrld"),
        p.Message(message_id="m", role="assistant", content="Hello world, corrected."),
        p.Result(ok=True, subtype="success", exit_code=0),
    ]
    sequencer = p.Sequencer("s", 0)
    path.write_bytes(b"".join(p.encode(sequencer.stamp(event)) + b"\n" for event in events))
    for argv in (["view", str(path)], ["convert", "-o", "text", str(path)]):
        out, _, code = _run(argv, _env(), tty_err=False)
        assert code == 0 and out.decode().splitlines()[-1] == "Hello world, corrected.", argv


HOSTILE = (
    "\x1b]0;PWNED\x07"  # window title
    "\x1b]52;c;Zm9v\x07"  # clipboard write
    "\x1b]8;;https://evil.example/\x1b\\link"  # hidden hyperlink
    "\x1b[2J\x1b[H"  # clear the screen
    "\u009b31m"  # a C1 CSI
    "\rforged\b\x7f"  # overwrite the line
    "\u202egnp.exe"  # bidi override
)
CONTROLS = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xaa-\xae]|\xe2\x81[\xa6-\xa9]")
"""What must never reach the terminal from the input: controls but tab and newline, C1, bidi controls."""


def test_untrusted_text_cannot_act_on_the_terminal_in_any_field(tmp_path: Path) -> None:
    """Model and tool text, names, ids, errors: every escape sequence shows as text, none reaches the terminal."""
    name = f"Bash{HOSTILE}"
    with (
        (tmp_path / "run.ndjson").open("wb") as out,
        Stream(f"agent{HOSTILE}", out=out, owns_process=False) as s,
    ):
        s.message(f"answer {HOSTILE}\r\nsecond line")
        s.reasoning(f"thinking {HOSTILE}")
        s.emit(p.ToolCall(call_id="c1", name=name, arguments={"cmd": HOSTILE}))
        s.emit(p.ToolProgress(call_id="c1", content=f"out {HOSTILE}"))
        s.emit(p.ToolResult(call_id="c1", name=name, status="error", error=f"failed {HOSTILE}"))
        s.log(f"note {HOSTILE}\n✓ all good", level="error")
        s.error("TOOL_FAILED", f"broke {HOSTILE}", fix=f"fix {HOSTILE}", recoverable=True)
    done = subprocess.run(
        [sys.executable, "-m", "agentstream", "view", "--color", "always", str(tmp_path / "run.ndjson")],
        capture_output=True,
        timeout=30,
    )
    shown = SGR.sub(b"", done.stdout + done.stderr)  # our own colours aside
    assert CONTROLS.search(shown) is None, CONTROLS.findall(shown)
    assert b"\\e]0;PWNED\\x07" in done.stdout and b"\\u202egnp.exe" in done.stdout
    assert b"\n  \xe2\x9c\x93 all good" in shown  # a line inside a note is indented under it, not a note
    assert b"answer " in done.stdout and b"\nsecond line" in done.stdout  # CRLF read as a line break


def test_an_error_quoting_its_input_cannot_act_on_the_terminal(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentstream", "view", str(tmp_path / f"nofile{HOSTILE}")],
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 2 and b"no such file" in done.stderr
    assert CONTROLS.search(done.stderr) is None, done.stderr


def test_runs_sessions_and_send_show_what_producers_wrote_as_text() -> None:
    """A run's id and command, a session's model and title: cells and lines, not terminal commands."""
    from agentstream.agent.sessions import SessionRecord
    from agentstream.cli import runs_cmd, send_cmd, sessions_cmd

    runs = runs_cmd._table({"runs": [{"run_id": f"r{HOSTILE}", "status": "running", "command": HOSTILE}]}, [])
    record = SessionRecord(
        f"s{HOSTILE}", "2026-01-01T00:00", "2026-01-01T00:00", "/w", "demo", HOSTILE, HOSTILE, "ok"
    )
    session = sessions_cmd._row(record, 10)
    sent = send_cmd._sent({"name": HOSTILE, "run_id": f"r{HOSTILE}"})
    for shown in (runs, session, sent):
        assert CONTROLS.search(shown.encode()) is None, shown
        assert "\\e]0;PWNED\\x07" in shown
