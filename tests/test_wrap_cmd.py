"""``agentstream wrap -- CMD``: end to end in real processes, with real crashes and real signals."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path

import msgspec
import pytest

from _consumer_support import PYTHON, ROOT, agent_script, assert_valid_stream, decode_output, helper_threads
from _dialect_kit import FIXTURES
from agentstream import protocol as p
from agentstream.dialects import available_dialects
from conftest import signal_twice_with_stdout_unread

FAST = ["--exit-timeout", "0.3", "--grace", "0.3"]


def wrap(*args: str, timeout: float = 30) -> tuple[list[p.AnyEvent], int, bytes]:
    done = subprocess.run(
        [PYTHON, "-m", "agentstream", "wrap", *args], capture_output=True, timeout=timeout, cwd=ROOT
    )
    events = assert_valid_stream(decode_output(done.stdout), exit_code=done.returncode)
    return events, done.returncode, done.stderr


def owning_agent(tmp_path: Path, body: str) -> list[str]:
    """An agent CLI that owns its process the way a real one does (its own signal handling and exit code)."""
    script = tmp_path / "owning_agent.py"
    script.write_text(
        "import os, signal, sys, time\n"
        "from agentstream.stream import Stream\n"
        "with Stream('owning-agent') as stream:\n"
        + "".join(f"    {line}\n" for line in body.strip().splitlines())
    )
    return [PYTHON, str(script)]


def test_a_good_child_is_relayed_into_the_wraps_own_session(tmp_path: Path) -> None:
    argv = agent_script(
        tmp_path, "stream.message('4'); stream.record_usage('m', input_tokens=3); stream.finish()"
    )
    events, code, _ = wrap("--", *argv)
    assert code == 0
    start, status = events[0], events[1]
    assert isinstance(start, p.Start) and start.command.endswith("agent.py")
    assert (
        isinstance(status, p.Status)
        and status.status == "child_session"
        and status.message != start.session_id
    )
    assert [e.type for e in events[2:]] == ["message", "usage", "result"]
    result = events[-1]
    assert (
        isinstance(result, p.Result) and result.ok and result.result == "4" and result.usage.input_tokens == 3
    )


_CLAUDE_WITHOUT_INIT = [
    {
        "type": "assistant",
        "message": {"id": "msg_1", "role": "assistant", "content": [{"type": "text", "text": "4"}]},
        "session_id": "16c61d1b-fe47-4d2a-a97a-fdea9213ac86",
    },
    {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": "4",
        "session_id": "16c61d1b-fe47-4d2a-a97a-fdea9213ac86",
    },
]


@pytest.mark.parametrize(
    ("lines", "session"),
    [
        (
            FIXTURES.joinpath("opencode", "real-1.18.33-tools.ndjson").read_bytes(),
            "ses_de2e8a932ffe7ehQqGXQ1ELQO6",
        ),
        (
            b"".join(msgspec.json.encode(line) + b"\n" for line in _CLAUDE_WITHOUT_INIT),
            _CLAUDE_WITHOUT_INIT[0]["session_id"],
        ),
        (b'{"response": "4", "stats": {"models": {}}}\n', None),
    ],
    ids=["opencode-on-every-line", "claude-without-init", "gemini-document-without-one"],
)
def test_the_child_session_is_the_one_the_child_names(
    tmp_path: Path, lines: bytes, session: str | None
) -> None:
    """The CLI's own session (the one it resumes), whether a start line names it or every line does (opencode has
    no start line); a stream that names none has no ``child_session``, rather than one the reader made up."""
    output = tmp_path / "output.ndjson"
    output.write_bytes(lines)
    events, code, _ = wrap("--", "cat", str(output))
    assert code == 0
    named = [e.message for e in events if isinstance(e, p.Status) and e.status == "child_session"]
    assert named == ([session] if session else [])


def test_a_crashing_child_gives_its_exit_code(tmp_path: Path) -> None:
    argv = agent_script(
        tmp_path, "stream.message('half'); sys.stderr.write('oops\\n'); sys.stderr.flush(); os._exit(3)"
    )
    events, code, stderr = wrap("--", *argv)
    assert code == 3
    error = events[-2]
    assert isinstance(error, p.Error) and error.code == "PROCESS_CRASHED" and error.synthetic is True
    assert b"oops" in stderr  # the child's stderr is passed through


def test_a_child_killed_by_a_signal(tmp_path: Path) -> None:
    argv = agent_script(tmp_path, "stream.message('bye'); os.kill(os.getpid(), signal.SIGKILL)")
    events, code, _ = wrap("--", *argv)
    assert code == 137 and events[-2].code == "PROCESS_CRASHED"  # type: ignore[union-attr]


def test_a_child_that_fails_cleanly_keeps_its_error(tmp_path: Path) -> None:
    argv = agent_script(tmp_path, "stream.fail('AUTH_EXPIRED', 'log in again', fix='run login', exit_code=4)")
    events, code, _ = wrap("--", *argv)
    assert code == 4
    error, result = events[-2], events[-1]
    assert isinstance(error, p.Error) and error.code == "AUTH_EXPIRED" and error.fix == "run login"
    assert isinstance(result, p.Result) and result.error.code == "AUTH_EXPIRED"  # type: ignore[union-attr]


def test_a_missing_binary(tmp_path: Path) -> None:
    events, code, _ = wrap("--", str(tmp_path / "no-such-agent"))
    assert code == 127 and events[-2].code == "CLI_NOT_FOUND"  # type: ignore[union-attr]


def test_a_child_that_hangs_after_closing_stdout(tmp_path: Path) -> None:
    argv = agent_script(tmp_path, "stream.message('done?'); os.close(1); time.sleep(60)")
    events, code, _ = wrap(*FAST, "--", *argv)
    assert code == 1 and events[-2].code == "STREAM_TRUNCATED"  # type: ignore[union-attr]  # stopped by us


def test_junk_on_the_childs_stdout_is_reported_not_passed_on(tmp_path: Path) -> None:
    argv = agent_script(
        tmp_path, "print('[SandboxDebug] hi', flush=True); stream.message('x'); stream.finish()"
    )
    events, code, _ = wrap("--", *argv)
    assert code == 0
    assert [e.code for e in events if isinstance(e, p.Error)] == ["MALFORMED_EVENT"]


def test_stderr_as_logs(tmp_path: Path) -> None:
    argv = agent_script(
        tmp_path, "sys.stderr.write('note\\n'); sys.stderr.flush(); time.sleep(0.2); stream.finish()"
    )
    events, code, stderr = wrap("--stderr-as-logs", "--", *argv)
    assert code == 0 and b"note" not in stderr
    assert [e.message for e in events if isinstance(e, p.Log)] == ["note"]


CLAUDE_INIT = '{"type":"system","subtype":"init","session_id":"a","model":"m","tools":[]}'
CLAUDE_RESULT = '{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"a"}'


def late_stderr_child(tmp_path: Path, before_result: str = "") -> list[str]:
    """A Claude-speaking child that writes a stderr line right before its result line, with no pause between."""
    script = tmp_path / "late_stderr.sh"
    script.write_text(
        f"{before_result}\necho '{CLAUDE_INIT}'\necho 'late on stderr' >&2\necho '{CLAUDE_RESULT}'\n"
    )
    return ["sh", str(script)]


def test_stderr_written_just_before_the_result_comes_before_it(tmp_path: Path) -> None:
    argv = late_stderr_child(tmp_path)
    for _ in range(5):  # the child's two pipes race each other: each run must come out the same
        events, code, stderr = wrap("--stderr-as-logs", "--no-publish", "--from", "claude", "--", *argv)
        assert code == 0 and stderr == b""
        kinds = [e.type for e in events]
        assert [e.message for e in events if isinstance(e, p.Log)] == ["late on stderr"], kinds
        assert kinds.index("log") < kinds.index("result")


def test_a_child_whose_stderr_stays_open_and_quiet_is_not_waited_for(tmp_path: Path) -> None:
    """Only stderr already written is waited for: a grandchild holding the pipe open costs no time."""
    pid_file = tmp_path / "holder.pid"
    argv = late_stderr_child(tmp_path, before_result=f"sleep 30 >/dev/null & echo $! > {pid_file}")
    began = time.monotonic()
    try:
        events, code, _ = wrap("--stderr-as-logs", "--no-publish", "--from", "claude", *FAST, "--", *argv)
    finally:
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert time.monotonic() - began < 10
    assert code == 0
    assert [e.message for e in events if isinstance(e, p.Log)] == ["late on stderr"]


def test_json_output_format(tmp_path: Path) -> None:
    argv = agent_script(tmp_path, "os._exit(5)")
    done = subprocess.run(
        [PYTHON, "-m", "agentstream", "wrap", "-o", "json", "--", *argv], capture_output=True, cwd=ROOT
    )
    (line,) = done.stdout.splitlines()
    result = p.decode(line)
    assert isinstance(result, p.Result) and result.exit_code == done.returncode == 5


def test_no_command_is_a_usage_error_and_still_a_stream() -> None:
    done = subprocess.run([PYTHON, "-m", "agentstream", "wrap"], capture_output=True, cwd=ROOT)
    assert done.returncode == 2 and b"fix:" in done.stderr
    events = [p.decode(line) for line in done.stdout.splitlines()]
    assert [e.type for e in events] == ["start", "error", "result"]
    assert isinstance(events[-1], p.Result) and events[-1].exit_code == 2


@pytest.mark.parametrize(
    "dialect", [d.name for d in available_dialects() if d.name != "canonical" and d.can_encode]
)
def test_to_another_dialect(tmp_path: Path, dialect: str) -> None:
    from agentstream.consumer import read

    argv = agent_script(tmp_path, "stream.message('4'); stream.finish()")
    done = subprocess.run(
        [PYTHON, "-m", "agentstream", "wrap", "--to", dialect, "--", *argv], capture_output=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    events = assert_valid_stream(read(done.stdout, dialect=dialect))
    assert events[-1].ok and events[-1].synthetic is not True  # type: ignore[union-attr]


class Running:
    """A wrap process we can signal once its child is known to be running."""

    def __init__(self, argv: list[str], *extra: str) -> None:
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "agentstream", "wrap", *extra, "--", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
        )
        self.seen = b""

    def wait_for(self, kind: str) -> None:
        """Read the wrap's stdout (raw, unbuffered, so select() tells the truth) until an event of ``kind``."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                self.seen += os.read(fd, 65536)
                if f'"type":"{kind}"'.encode() in self.seen:
                    return
        pytest.fail(f"no {kind} event from the wrap; got {self.seen!r}")

    def finish(self) -> tuple[list[p.AnyEvent], int, bytes]:
        try:
            out, err = self.proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail("the wrap did not end after the signal")
        events = assert_valid_stream(decode_output(self.seen + out), exit_code=self.proc.returncode)
        return events, self.proc.returncode, err


def test_sigterm_to_the_wrap_is_passed_on_and_the_childs_last_words_kept(tmp_path: Path) -> None:
    argv = owning_agent(tmp_path, "stream.message('working'); time.sleep(60)")
    running = Running(argv, *FAST)
    running.wait_for("message")
    running.proc.send_signal(signal.SIGTERM)
    events, code, _ = running.finish()
    assert code == 143
    errors = [e for e in events if isinstance(e, p.Error)]
    assert [e.code for e in errors] == ["INTERRUPTED"]
    assert errors[0].details["child_error"]["code"] == "INTERRUPTED"  # the child's own report, kept
    assert "SIGTERM" in errors[0].message


def test_the_wraps_helper_threads_leave_signals_to_its_main_thread(tmp_path: Path) -> None:
    """The kernel gives a process's signal to any thread not blocking it; Python runs the handler in the main
    thread, but only once its wait (here a select with no timeout) ends, so a signal taken by the stderr or
    bus thread would leave the wrap waiting for ever."""
    argv = owning_agent(tmp_path, "stream.message('working'); time.sleep(60)")
    running = Running(argv, *FAST)
    running.wait_for("message")
    threads = helper_threads(running.proc.pid)
    running.proc.send_signal(signal.SIGTERM)
    _, code, _ = running.finish()
    assert len(threads) >= 2, threads  # the stderr drain and the bus publisher at least
    assert all(threads.values()), f"threads that can take the wrap's signals: {threads}"
    assert code == 143


def test_sigterm_with_a_child_that_ignores_it(tmp_path: Path) -> None:
    argv = agent_script(
        tmp_path, "signal.signal(signal.SIGTERM, signal.SIG_IGN); stream.message('deaf'); time.sleep(60)"
    )
    running = Running(argv, *FAST)
    running.wait_for("message")
    running.proc.send_signal(signal.SIGTERM)
    events, code, _ = running.finish()
    assert code == 143 and events[-1].subtype == "interrupted"  # type: ignore[union-attr]


def test_a_second_signal_stops_at_once(tmp_path: Path) -> None:
    argv = agent_script(
        tmp_path, "signal.signal(signal.SIGINT, signal.SIG_IGN); stream.message('deaf'); time.sleep(60)"
    )
    running = Running(argv, "--grace", "30")
    running.wait_for("message")
    running.proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    for _ in range(20):  # on a loaded machine two signals close together can reach the wrap as one
        running.proc.send_signal(signal.SIGINT)
        try:
            running.proc.wait(timeout=1)
            break
        except subprocess.TimeoutExpired:
            continue
    events, code, _ = running.finish()
    assert code == 130 and events[-1].subtype == "interrupted"  # type: ignore[union-attr]


def test_sighup_to_the_wrap(tmp_path: Path) -> None:
    argv = owning_agent(tmp_path, "stream.message('working'); time.sleep(60)")
    running = Running(argv, *FAST)
    running.wait_for("message")
    os.kill(running.proc.pid, signal.SIGHUP)
    _, code, _ = running.finish()
    assert code == 129


def test_the_child_reads_the_wraps_stdin(tmp_path: Path) -> None:
    argv = agent_script(tmp_path, "stream.message(sys.stdin.read().strip()); stream.finish()")
    done = subprocess.run(
        [PYTHON, "-m", "agentstream", "wrap", "--", *argv],
        input=b"prompt from a pipe\n",
        capture_output=True,
        cwd=ROOT,
    )
    events = assert_valid_stream(decode_output(done.stdout), exit_code=done.returncode)
    assert [e.content for e in events if isinstance(e, p.Message)] == ["prompt from a pipe"]


def test_a_second_signal_ends_a_wrap_whose_stdout_is_not_read() -> None:
    """The first signal goes to the child; the second stops waiting for a relay stuck on a full pipe."""
    child = 'import sys\nfor _ in range(200_000): print(\'{"type": "log", "message": "%s"}\' % (\'x\' * 100))'
    wrap = subprocess.Popen(
        [PYTHON, "-m", "agentstream", "wrap", "--no-publish", "--", PYTHON, "-c", child],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    code, err = signal_twice_with_stdout_unread(wrap)
    assert code == 130, err
    assert b"stdout is not being read" in err


def test_a_secret_the_child_prints_reaches_neither_the_stream_nor_stderr_nor_the_bus(tmp_path: Path) -> None:
    """A wrapped CLI is given its API key and may print it; the wrap's output and the bus must not carry it."""
    key = "sk-ant-api03-" + "Zq7" * 12
    child = tmp_path / "leaky.py"
    child.write_text(
        "import json, os, sys\n"
        "key = os.environ['ANTHROPIC_API_KEY']\n"
        "print(json.dumps({'type': 'system', 'subtype': 'init', 'session_id': 'a', 'model': 'm', 'tools': []}))\n"
        "print('debug: using ' + key, file=sys.stderr, flush=True)\n"
        "block = {'type': 'text', 'text': 'the key is ' + key}\n"
        "print(json.dumps({'type': 'assistant', 'message': {'id': 'm1', 'role': 'assistant', 'content': [block]}}))\n"
        "print(json.dumps({'type': 'result', 'subtype': 'success', 'is_error': False, 'result': key}))\n"
    )
    bus = tmp_path / "bus.sqlite3"
    env = {**os.environ, "ANTHROPIC_API_KEY": key, "AGENTSTREAM_BUS": f"sqlite:///{bus}"}
    done = subprocess.run(
        [PYTHON, "-m", "agentstream", "wrap", "--from", "claude", "--", PYTHON, str(child)],
        capture_output=True, timeout=30, cwd=ROOT, env=env,
    )  # fmt: skip
    events = assert_valid_stream(decode_output(done.stdout), exit_code=done.returncode)
    redacted = "[redacted:ANTHROPIC_API_KEY]"
    assert [e.content for e in events if isinstance(e, p.Message)] == [f"the key is {redacted}"]
    assert b"debug: using [redacted:ANTHROPIC_API_KEY]" in done.stderr
    stored = b"".join(path.read_bytes() for path in tmp_path.glob("bus.sqlite3*"))
    assert b"[redacted:ANTHROPIC_API_KEY]" in stored  # the run is on the bus, redacted
    for output in (done.stdout, done.stderr, stored):
        assert key.encode() not in output


def test_a_secret_the_child_splits_across_two_deltas_is_still_redacted(tmp_path: Path) -> None:
    """Each chunk holds half of the key: redacting each event alone would let both halves through."""
    key = "sk-ant-api03-" + "Qx9" * 12
    half = len(key) // 2
    child = tmp_path / "splitting.py"
    child.write_text(
        "import json, os\n"
        "key = os.environ['ANTHROPIC_API_KEY']\n"
        f"head, tail = key[:{half}], key[{half}:]\n"
        "def say(line): print(json.dumps(line), flush=True)\n"
        "def stream(event): say({'type': 'stream_event', 'event': event})\n"
        "say({'type': 'system', 'subtype': 'init', 'session_id': 'a', 'model': 'm', 'tools': []})\n"
        "stream({'type': 'message_start', 'message': {'id': 'm1', 'model': 'm', 'usage': {}}})\n"
        "stream({'type': 'content_block_start', 'index': 0, 'content_block': {'type': 'text', 'text': ''}})\n"
        "for piece in ('the key is ' + head, tail + ' ok'):\n"
        "    stream({'type': 'content_block_delta', 'index': 0, 'delta': {'type': 'text_delta', 'text': piece}})\n"
        "block = {'type': 'text', 'text': 'the key is ' + key + ' ok'}\n"
        "say({'type': 'assistant', 'message': {'id': 'm1', 'role': 'assistant', 'content': [block]}})\n"
        "stream({'type': 'content_block_stop', 'index': 0})\n"
        "stream({'type': 'message_stop'})\n"
        "say({'type': 'result', 'subtype': 'success', 'is_error': False, 'result': 'done'})\n"
    )
    env = {**os.environ, "ANTHROPIC_API_KEY": key}
    done = subprocess.run(
        [PYTHON, "-m", "agentstream", "wrap", "--no-publish", "--from", "claude", "--", PYTHON, str(child)],
        capture_output=True, timeout=30, cwd=ROOT, env=env,
    )  # fmt: skip
    events = assert_valid_stream(decode_output(done.stdout), exit_code=done.returncode)
    deltas = "".join(e.content for e in events if isinstance(e, p.MessageDelta))
    redacted = "the key is [redacted:ANTHROPIC_API_KEY] ok"
    assert deltas == redacted, "the deltas, joined, read as the message does"
    assert [e.content for e in events if isinstance(e, p.Message)] == [redacted]
    assert key[:half].encode() not in done.stdout and key[half:].encode() not in done.stdout


def test_the_childs_own_turn_count_is_kept_when_it_reported_no_usage(tmp_path: Path) -> None:
    """A failed Claude turn carries ``num_turns`` but no usage lines: the wrap's result says what convert says."""
    child = tmp_path / "no_usage.py"
    child.write_text(
        "import json\n"
        "print(json.dumps({'type': 'system', 'subtype': 'init', 'session_id': 'a', 'model': 'm', 'tools': []}))\n"
        "print(json.dumps({'type': 'result', 'subtype': 'error_during_execution', 'is_error': True,"
        " 'num_turns': 2, 'errors': ['API Error: 500'], 'session_id': 'a'}))\n"
    )
    done = subprocess.run(
        [PYTHON, "-m", "agentstream", "wrap", "--no-publish", "--from", "claude", "--", PYTHON, str(child)],
        capture_output=True, timeout=30, cwd=ROOT,
    )  # fmt: skip
    events = assert_valid_stream(decode_output(done.stdout), exit_code=done.returncode)
    result = events[-1]
    assert isinstance(result, p.Result) and not result.ok and result.turn_count == 2
