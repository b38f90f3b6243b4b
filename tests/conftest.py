"""Fixtures shared by every test module: running Python code as a real producer process."""

from __future__ import annotations

import fcntl
import os
import signal
import struct
import subprocess
import sys
import termios
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent

# No per-example deadline (a loaded 2-core machine is slow, not wrong); in CI the
# examples are derived from each test's name, so a run is reproducible.
settings.register_profile(
    "agentstream", deadline=None, print_blob=True, derandomize=bool(os.environ.get("CI"))
)
settings.load_profile("agentstream")

# A shell starts background jobs (``pytest … &``) with SIGINT ignored, and an ignored signal
# is inherited by every child: the producers these tests start would then never see the
# SIGINT a test sends them. Give this process, and so its children, the default disposition.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config: pytest.Config) -> None:
    """Compile the package once, up front, where this environment writes no bytecode
    (``PYTHONDONTWRITEBYTECODE``): every process a test starts would compile it anew."""
    if sys.dont_write_bytecode and not hasattr(config, "workerinput"):  # xdist workers: the controller did
        import compileall

        compileall.compile_dir(ROOT / "src", quiet=1)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[object]:
    """Let pytest keep the test modules it rewrote for assertions as bytecode, which it does not do where
    no bytecode is written: each worker would otherwise parse and rewrite every test module, every run
    (about 4 s of CPU a worker)."""
    writes_none = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = writes_none


@pytest.fixture(autouse=True)
def _private_state(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Every test gets its own state directory, so no test touches the user's sessions or bus."""
    monkeypatch.setenv("AGENTSTREAM_HOME", str(tmp_path_factory.mktemp("agentstream-home")))
    yield


def python_script(tmp_path: Path, code: str) -> Path:
    """Write dedented ``code`` to a script file and return its path."""
    script = tmp_path / "producer.py"
    script.write_text(textwrap.dedent(code))
    return script


def start_python(script: Path, **kwargs: object) -> subprocess.Popen[bytes]:
    """Start ``script`` with this interpreter, stdout and stderr piped."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **kwargs.pop("env", {})}  # type: ignore[dict-item]
    return subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        **kwargs,  # type: ignore[arg-type]
    )


def wait_until_stdout_is_full(proc: subprocess.Popen[bytes]) -> None:
    """Wait until ``proc`` has filled its stdout pipe, which nobody reads, and is stuck writing to it."""
    assert proc.stdout is not None
    deadline = time.monotonic() + 20
    waiting = b"\0\0\0\0"
    while struct.unpack("i", fcntl.ioctl(proc.stdout.fileno(), termios.FIONREAD, waiting))[0] < 4096:
        assert time.monotonic() < deadline and proc.poll() is None, "it never filled its stdout"
        time.sleep(0.05)
    time.sleep(0.3)  # past the first few KiB: the rest of the pipe fills, and the write blocks


def exit_after(proc: subprocess.Popen[bytes], seconds: float = 10) -> tuple[int, bytes]:
    """``proc``'s exit code and stderr; one still running ``seconds`` on is killed and fails the test."""
    assert proc.stderr is not None
    try:
        code = proc.wait(timeout=seconds)
    finally:
        proc.kill()
    return code, proc.stderr.read()


def signal_twice_with_stdout_unread(proc: subprocess.Popen[bytes]) -> tuple[int, bytes]:
    """SIGINT ``proc`` twice once it is stuck writing to a stdout nobody reads; its exit code and stderr."""
    wait_until_stdout_is_full(proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    return exit_after(proc)
