"""``agentstream convert`` as a real process: files, pipes, live flushing, dialects, errors."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import time
from pathlib import Path

import msgspec
import pytest

from _consumer_support import PYTHON, ROOT, assert_valid_stream, canonical_session, decode_output, run_cli
from agentstream import protocol as p
from agentstream.dialects import available_dialects
from agentstream.stream import Stream
from conftest import signal_twice_with_stdout_unread

OTHER_DIALECTS = [d.name for d in available_dialects() if d.name != "canonical" and d.can_encode]


def test_canonical_file_converts_to_itself(tmp_path: Path) -> None:
    data = canonical_session()
    (tmp_path / "in.ndjson").write_bytes(data)
    done = run_cli("convert", str(tmp_path / "in.ndjson"), "--to", "canonical")
    assert done.returncode == 0, done.stderr
    assert done.stdout == data
    assert done.stderr == b""


def test_stdin_with_junk_gives_a_valid_stream_with_the_reports() -> None:
    broken = canonical_session(finish=False).replace(b"\n", b"\n[SandboxDebug] noise\n", 1)
    done = run_cli("convert", "-", stdin=broken)
    assert done.returncode == 0
    events = assert_valid_stream(decode_output(done.stdout))
    codes = [e.code for e in events if isinstance(e, p.Error)]
    assert codes == ["MALFORMED_EVENT", "STREAM_TRUNCATED"]


def test_json_output_is_one_result_object(tmp_path: Path) -> None:
    done = run_cli("convert", "-o", "json", stdin=canonical_session())
    (line,) = done.stdout.splitlines()
    result = p.decode(line)
    assert isinstance(result, p.Result) and result.ok


@pytest.mark.parametrize("dialect", ["claude", "cursor"])
def test_json_output_in_a_dialect_is_that_cli_s_result_line(dialect: str) -> None:
    """``-o json --dialect claude`` prints what ``claude -p --output-format json`` would: its result line."""
    import io

    from agentstream.cli.convert_cmd import convert

    out = io.BytesIO()
    convert(io.BytesIO(canonical_session()), out, to_dialect=dialect, output_format="json")
    (line,) = out.getvalue().splitlines()
    result = msgspec.json.decode(line)
    assert result["type"] == "result" and "v" not in result and result["is_error"] is False


@pytest.mark.parametrize("dialect", OTHER_DIALECTS)
def test_round_trip_through_each_dialect(dialect: str) -> None:
    """canonical → DIALECT → canonical: still a whole stream, ending with the dialect's own (successful) result."""
    there = run_cli("convert", "--to", dialect, stdin=canonical_session())
    assert there.returncode == 0, there.stderr
    back = run_cli("convert", "--from", dialect, stdin=there.stdout)
    assert back.returncode == 0, back.stderr
    events = assert_valid_stream(decode_output(back.stdout))
    assert not [e for e in events if isinstance(e, p.Error) and e.code == "MALFORMED_EVENT"]
    result = events[-1]
    assert isinstance(result, p.Result) and result.ok and result.synthetic is not True


def test_live_input_is_converted_line_by_line() -> None:
    """Each line comes out while the input is still open (no buffering until EOF)."""
    lines = canonical_session().splitlines(keepends=True)
    proc = subprocess.Popen(
        [PYTHON, "-m", "agentstream", "convert", "--from", "canonical"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for line in lines[:2]:
            proc.stdin.write(line)
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], 15)
            assert ready, "no output for a line while the input stayed open"
            assert proc.stdout.readline() == line
        proc.stdin.write(b"".join(lines[2:]))
        proc.stdin.close()
        assert proc.stdout.read() == b"".join(lines[2:])
        assert proc.wait(15) == 0
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from", "klingon"], b"unknown dialect 'klingon'"),
        (["--to", "klingon"], b"unknown dialect 'klingon'"),
        (["/no/such/file.ndjson"], b"no such file"),
    ],
)
def test_bad_usage_exits_2_with_a_fix_and_nothing_on_stdout(args: list[str], message: bytes) -> None:
    done = run_cli("convert", *args, stdin=b"")
    assert done.returncode == 2
    assert done.stdout == b""
    assert message in done.stderr and b"fix:" in done.stderr


def test_the_fix_for_an_unknown_output_dialect_names_only_dialects_that_can_be_written() -> None:
    """Offering a decode-only dialect (a session log) for --to would only lead to the next refusal."""
    reading, writing = (
        run_cli("convert", "--from", "klingon", stdin=b""),
        run_cli("convert", "--to", "klingon", stdin=b""),
    )
    assert b"claude-log" in reading.stderr
    assert b"claude-log" not in writing.stderr and b"agui" in writing.stderr


def test_a_reader_that_goes_away_ends_it_quietly(tmp_path: Path) -> None:
    path = tmp_path / "many.ndjson"
    path.write_bytes(canonical_session(lambda s: [s.message("x" * 100) for _ in range(20000)]))
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        [PYTHON, "-m", "agentstream", "convert", str(path)], stdout=write_fd, stderr=subprocess.PIPE, cwd=ROOT
    )
    os.close(write_fd)
    os.read(read_fd, 100)
    os.close(read_fd)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 141
    assert b"Traceback" not in err and b"Exception ignored" not in err


def test_progress_goes_to_a_terminal_stderr_only(tmp_path: Path) -> None:
    path = tmp_path / "big.ndjson"
    message = "m" * 4000
    path.write_bytes(canonical_session(lambda s: [s.message(message) for _ in range(4500)]))
    assert path.stat().st_size > 16 << 20
    leader, follower = pty.openpty()
    out = tmp_path / "out.ndjson"
    with open(out, "wb") as sink:
        proc = subprocess.Popen(
            [PYTHON, "-m", "agentstream", "convert", str(path)], stdout=sink, stderr=follower, cwd=ROOT
        )
        os.close(follower)
        shown = _read_all(leader)
        assert proc.wait(60) == 0
    assert "converting: " in shown and " of 17." in shown
    assert out.read_bytes() == path.read_bytes()


def _read_all(fd: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the other side closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks).decode(errors="replace")


def test_dialects_lists_every_dialect_as_json_lines_and_as_a_table() -> None:
    from agentstream.dialects import DIALECT_NAMES

    as_json = run_cli("dialects", "--json")
    rows = [msgspec.json.decode(line) for line in as_json.stdout.splitlines()]
    assert [row["name"] for row in rows] == list(DIALECT_NAMES)
    assert all(row["available"] and row["summary"] for row in rows)
    table = run_cli("dialects").stdout.decode().splitlines()
    assert [line.split()[0] for line in table] == list(DIALECT_NAMES)
    assert table[0].split(None, 1)[1] == rows[0]["summary"]


CLAUDE_LIVE = (
    b'{"type":"system","subtype":"init","session_id":"s1","model":"m","tools":[],"cwd":"/"}\n'
    b'{"type":"stream_event","session_id":"s1","event":{"type":"message_start","message":{"id":"m1","model":"m",'
    b'"role":"assistant","content":[],"usage":{"input_tokens":3,"output_tokens":1}}}}\n'
    b'{"type":"stream_event","session_id":"s1","event":{"type":"content_block_start","index":0,'
    b'"content_block":{"type":"text","text":""}}}\n'
    b'{"type":"stream_event","session_id":"s1","event":{"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"Half an ans"}}}\n'
)


def _fed_live(argv: list[str], signum: int | None = None) -> tuple[int, bytes, bytes]:
    """(exit code, stdout, stderr) of ``argv`` fed CLAUDE_LIVE on a stdin left open, so that only a signal ends
    it: with ``signum``, sent once output shows and the reader waits for more."""
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(CLAUDE_LIVE)
        proc.stdin.flush()
        if signum is not None:
            ready, _, _ = select.select([proc.stdout], [], [], 15)
            assert ready, "nothing converted while the input stayed open"
            time.sleep(0.2)  # the reader is waiting for more input
            proc.send_signal(signum)
        code = proc.wait(timeout=15)
        return code, proc.stdout.read(), proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("to", ["canonical", "claude"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_waiting_for_live_input_ends_the_output_whole(signum: int, to: str) -> None:
    """`producer | agentstream convert` stopped by Ctrl-C: the open turn gets its interrupted ending."""
    code, out, err = _fed_live(
        [PYTHON, "-m", "agentstream", "convert", "--from", "claude", "--to", to], signum
    )
    assert code == 128 + signum, err
    canonical = out if to == "canonical" else run_cli("convert", "--from", "claude", stdin=out).stdout
    events = assert_valid_stream(decode_output(canonical))
    error, result = events[-2:]
    assert isinstance(error, p.Error) and error.code == "INTERRUPTED"
    assert isinstance(result, p.Result) and not result.ok
    assert "Half an ans" in [e.content for e in events if isinstance(e, p.Message)]


HELD_WHILE_DECODING = """
import signal, sys
from agentstream.cli import entry
from agentstream.consumer.pipeline import Pipeline
feed_chunk, chunks = Pipeline.feed_chunk, []
def feed_chunk_then_signal(self, chunk):
    chunks.append(chunk)
    if len(chunks) == 2:
        signal.raise_signal(signal.SIGTERM)  # lands in the middle of decoding this chunk
    return feed_chunk(self, chunk)
Pipeline.feed_chunk = feed_chunk_then_signal
sys.argv = ["agentstream", "convert", "--to", "canonical", sys.argv[1]]
entry()
"""


def test_a_signal_while_a_batch_is_decoded_ends_the_output_after_it(tmp_path: Path) -> None:
    """No event half made, no line half written: the batch goes out whole, then the ending."""
    path = tmp_path / "long.ndjson"
    session = canonical_session(finish=False)
    path.write_bytes(session * (1 + (1 << 17) // len(session)))  # several read chunks
    done = subprocess.run(
        [PYTHON, "-c", HELD_WHILE_DECODING, str(path)], capture_output=True, timeout=30, cwd=ROOT
    )
    assert done.returncode == 143, done.stderr
    events = assert_valid_stream(decode_output(done.stdout), turns=None)
    error, result = events[-2:]
    assert isinstance(error, p.Error) and error.code == "INTERRUPTED"
    assert isinstance(result, p.Result) and result.exit_code == 143
    assert len(done.stdout) > (1 << 16)  # both decoded chunks were converted before it stopped


HELD_AS_THE_READ_BEGINS = """
import signal, sys
from agentstream.cli import entry
from agentstream.consumer.reader import Reader
read_chunk, reads = Reader._read_chunk, []
def signal_then_read(self):
    reads.append(1)
    if len(reads) == 2:
        signal.raise_signal(signal.SIGTERM)  # handled here, just before the read starts to wait
    return read_chunk(self)
Reader._read_chunk = signal_then_read
sys.argv = ["agentstream", "convert", "--from", "claude", "--to", "canonical"]
entry()
"""


def test_a_signal_held_just_before_the_reader_waits_still_ends_it() -> None:
    """The held signal is sent again, and cuts short the wait that began after it was held."""
    code, out, err = _fed_live([PYTHON, "-c", HELD_AS_THE_READ_BEGINS])
    assert code == 143, err
    assert assert_valid_stream(decode_output(out))[-1].subtype == "interrupted"  # type: ignore[union-attr]


def test_a_second_signal_ends_a_convert_whose_stdout_is_not_read(tmp_path: Path) -> None:
    """Stuck writing to a full pipe, the first signal waits for the batch (and its ending); the second
    stops waiting."""

    def many_deltas(stream: Stream) -> None:
        for _ in range(3000):
            stream.message_delta("x" * 200, message_id="m1")

    source = tmp_path / "long.ndjson"
    source.write_bytes(canonical_session(many_deltas))
    command = [PYTHON, "-m", "agentstream", "convert", "--to", "claude", str(source)]
    code, err = signal_twice_with_stdout_unread(
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    )
    assert code == 130, err
    assert b"stdout is not being read" in err and b"Traceback" not in err
