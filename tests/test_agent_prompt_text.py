"""A prompt that is not valid UTF-8 is refused up front (INVALID_UTF8, exit 2) on every way in; never a crash.

The ways a prompt or turn enters: PROMPT and ``-p`` on argv (Python carries bad bytes
as lone surrogates), ``-`` on stdin, a stream-json turn whose bytes are not UTF-8,
a stream-json turn whose JSON escapes hold a lone surrogate, ``--system``, and
``submit``'s argv. Each is run as the real command in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from _agent_fakes import ExecRun, assert_json_object, assert_valid_stream, exec_env, split_streams
from agentstream._text import utf8_text
from agentstream.errors import UsageError

BAD = [b"r\xe9sum\xe9", b"\xff", b"ok \xe2\x82", b"\xc0\xaf", b"\xed\xa0\x80"]
"""Latin-1, a byte never valid, a cut multi-byte character, an overlong form, an encoded surrogate."""


@given(st.binary(max_size=40))
def test_bytes_are_accepted_exactly_when_they_are_utf8(data: bytes) -> None:
    try:
        expected: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        expected = None
    as_argv = os.fsdecode(data)  # how argv reaches Python
    for value in (data, as_argv):
        if expected is None:
            with pytest.raises(UsageError) as raised:
                utf8_text(value, "the prompt")
            assert raised.value.code == "INVALID_UTF8" and raised.value.exit_code == 2
        else:
            assert utf8_text(value, "the prompt") == expected


@given(st.text())
def test_any_text_either_passes_unchanged_or_is_refused(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        with pytest.raises(UsageError):
            utf8_text(text, "x")
    else:
        assert utf8_text(text, "x") is text


def _exec(
    args: list[bytes], env: dict[str, str], cwd: Path, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    argv = [os.fsencode(sys.executable), b"-m", b"agentstream", b"exec", b"--provider", b"demo", *args]
    return subprocess.run(argv, input=stdin, capture_output=True, env=env, cwd=cwd, timeout=60)


def _turn(content: bytes) -> bytes:
    return b'{"type":"message","role":"user","content":"' + content + b'"}\n'


WAYS = {
    "argv": lambda bad: ([bad], b""),
    "-p": lambda bad: ([b"-p", bad], b""),
    "stdin": lambda bad: ([b"-"], bad + b"\n"),
    "--system": lambda bad: ([b"hello", b"--system", bad], b""),
    "stream-json bytes": lambda bad: ([b"--input-format", b"stream-json"], _turn(bad)),
    "stream-json escape": lambda bad: (
        [b"--input-format", b"stream-json"],
        _turn(json.dumps(os.fsdecode(bad)).strip('"').encode()),
    ),
}


@pytest.mark.parametrize(
    ("way", "output", "bad"),
    [(way, "stream-json", BAD[n % len(BAD)]) for n, way in enumerate(WAYS)] + [("argv", "json", BAD[0])],
)
def test_every_way_in_refuses_bad_bytes_with_exit_2(
    way: str, output: str, bad: bytes, tmp_path: Path
) -> None:
    """The byte-level variety is covered in process above; here each way in, as a real process."""
    args, stdin = WAYS[way](bad)
    done = _exec([*args, b"-o", output.encode()], exec_env(tmp_path), tmp_path, stdin)
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    assert done.returncode == 2, done.stderr.decode(errors="replace")
    if output == "json":
        run = ExecRun(done.returncode, done.stdout, done.stderr.decode(errors="replace"))
        result = assert_json_object(run)
    else:
        (stream,) = split_streams(done.stdout.splitlines())
        result = assert_valid_stream(stream, done.returncode)[-1]
    assert result.error.code == "INVALID_UTF8", result
    assert "not valid UTF-8" in result.error.message and result.error.fix


def test_a_utf8_prompt_with_accents_runs(tmp_path: Path) -> None:
    done = _exec(["résumé ✓".encode()], exec_env(tmp_path), tmp_path)
    assert done.returncode == 0, done.stderr
    assert_valid_stream(done.stdout.splitlines(), 0)


def test_submit_refuses_bad_bytes_before_queueing(tmp_path: Path) -> None:
    env = {**exec_env(tmp_path), "AGENTSTREAM_BUS": f"sqlite:///{tmp_path / 'bus.sqlite3'}"}
    for args in ([b"\xff"], [b"hello", b"--system", b"r\xe9sum\xe9"]):
        done = subprocess.run(
            [os.fsencode(sys.executable), b"-m", b"agentstream", b"submit", *args],
            capture_output=True,
            env=env,
            timeout=60,
        )
        assert done.returncode == 2 and b"Traceback" not in done.stderr, done.stderr
        envelope = json.loads(done.stdout)
        assert envelope["ok"] is False and envelope["error"]["code"] == "INVALID_UTF8"
    runs = subprocess.run(
        [sys.executable, "-m", "agentstream", "runs", "--json"], capture_output=True, env=env, timeout=60
    )
    assert b"ses_" not in runs.stdout  # nothing was queued


def test_a_stream_json_turn_with_a_lone_surrogate_escape_is_named_so(tmp_path: Path) -> None:
    """msgspec calls such a line truncated; the client is told what is really wrong with it."""
    line = b'{"type":"message","role":"user","content":"cut \\ud83d"}\n'
    done = _exec([b"--input-format", b"stream-json"], exec_env(tmp_path), tmp_path, line)
    (stream,) = split_streams(done.stdout.splitlines())
    result = assert_valid_stream(stream, done.returncode)[-1]
    assert done.returncode == 2 and result.error.code == "INVALID_UTF8", result
    assert "lone UTF-16 surrogate escape" in result.error.message
