"""A child's detached descendants are stopped with it.

Some CLIs start their tool commands in a session of their own (Gemini CLI's shell
tool: Node's ``detached: true``). A signal to the child's process group misses
them, and once the child exits they are init's. Real processes and signals here:
a fake CLI that starts ``sleep 300`` with ``start_new_session=True``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from _consumer_support import exited
from agentstream.consumer import Spawn
from agentstream.consumer.async_process import AsyncSpawn

CLI = [str(Path(sys.executable).with_name("agentstream"))]


def _fake_cli(
    tmp_path: Path,
    *,
    command: tuple[str, ...] | list[str] = ("sleep", "300"),
    holds_stdout: bool = False,
    then: str = "time.sleep(300)",
) -> list[str]:
    """A CLI that says it is working, starts ``command`` detached (its pid in ``stray``), then does ``then``."""
    script = tmp_path / "fake_cli.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, subprocess, sys, time
            from agentstream import Stream
            s = Stream("fake-cli", out=sys.stdout.buffer, owns_process=False).start()
            stray = subprocess.Popen(
                {list(command)!r}, start_new_session=True, stdout={"None" if holds_stdout else "subprocess.DEVNULL"}
            )
            with open({str(tmp_path / "stray.tmp")!r}, "w") as f:
                f.write(str(stray.pid))
            os.rename({str(tmp_path / "stray.tmp")!r}, {str(tmp_path / "stray")!r})
            s.message("working")
            sys.stdout.flush()
            {then}
            """
        )
    )
    return [sys.executable, str(script)]


def _stray_pid(tmp_path: Path, running: Callable[[], bool]) -> int:
    deadline = time.monotonic() + 30
    while not (tmp_path / "stray").exists():
        assert time.monotonic() < deadline and running(), "the fake CLI did not start its command"
        time.sleep(0.02)
    return int((tmp_path / "stray").read_text())


def _assert_gone_soon(pid: int) -> None:
    """The stray is gone, or goes within a few seconds (init reaps it); a survivor is killed, then reported."""
    bound = time.monotonic() + 5
    while not exited(pid) and time.monotonic() < bound:
        time.sleep(0.02)
    survived = not exited(pid)
    if survived:
        os.killpg(pid, signal.SIGKILL)  # it leads the group of its session, what it started included
    assert not survived, f"the detached command {pid} outlived the child it was stopped with"


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """A process of ours in a session of its own, started by no child: never to be signalled."""
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    yield proc
    alive = proc.poll() is None
    proc.kill()
    proc.wait()
    assert alive, f"an unrelated process was stopped (status {proc.returncode})"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_wrap_stops_what_the_child_started_detached(
    tmp_path: Path, signum: signal.Signals, bystander: subprocess.Popen[bytes]
) -> None:
    wrap = subprocess.Popen(
        [*CLI, "wrap", "--no-publish", "--", *_fake_cli(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    try:
        stray = _stray_pid(tmp_path, lambda: wrap.poll() is None)
        wrap.send_signal(signum)
        wrap.communicate(timeout=30)
    finally:
        wrap.kill()
    _assert_gone_soon(stray)


def test_spawn_cancel_stops_what_the_child_started_detached(
    tmp_path: Path, bystander: subprocess.Popen[bytes]
) -> None:
    with Spawn(_fake_cli(tmp_path), "canonical", new_process_group=True, cancel_grace_s=1) as child:
        for event in child:
            if event.type == "message":
                child.cancel()
    _assert_gone_soon(_stray_pid(tmp_path, lambda: True))


def test_a_command_that_ignores_sigterm_is_killed_after_the_grace_period(
    tmp_path: Path, bystander: subprocess.Popen[bytes]
) -> None:
    argv = _fake_cli(tmp_path, command=["sh", "-c", "trap '' TERM; sleep 300 & wait"])
    with Spawn(argv, "canonical", new_process_group=True, cancel_grace_s=1) as child:
        for event in child:
            if event.type == "message":
                child.cancel()
    _assert_gone_soon(_stray_pid(tmp_path, lambda: True))


def test_async_spawn_cancel_stops_what_the_child_started_detached(
    tmp_path: Path, bystander: subprocess.Popen[bytes]
) -> None:
    async def run() -> None:
        async with AsyncSpawn(
            _fake_cli(tmp_path), "canonical", new_process_group=True, cancel_grace_s=1
        ) as child:
            async for event in child:
                if event.type == "message":
                    child.cancel()

    asyncio.run(run())
    _assert_gone_soon(_stray_pid(tmp_path, lambda: True))


@pytest.mark.parametrize("spawner", ["sync", "async"])
def test_a_detached_command_holding_stdout_after_the_child_exits_is_stopped(
    tmp_path: Path, spawner: str, bystander: subprocess.Popen[bytes]
) -> None:
    """The child exits without a result; what it started detached still holds its stdout: a straggler."""
    argv = _fake_cli(tmp_path, holds_stdout=True, then="os._exit(0)")
    options = {"new_process_group": True, "cancel_grace_s": 1, "exit_timeout_s": 1}
    if spawner == "sync":
        with Spawn(argv, "canonical", **options) as child:
            events = list(child)
    else:

        async def run() -> list[object]:
            async with AsyncSpawn(argv, "canonical", **options) as child:
                return [event async for event in child]

        events = asyncio.run(run())
    assert events[-1].type == "result"  # type: ignore[attr-defined]
    _assert_gone_soon(_stray_pid(tmp_path, lambda: True))


def test_sigkill_of_wrap_stops_what_the_child_started_detached(
    tmp_path: Path, bystander: subprocess.Popen[bytes]
) -> None:
    """No ``finally`` runs in a SIGKILLed wrap: the watchdog that ends the child's group ends the strays too."""
    wrap = subprocess.Popen(
        [*CLI, "wrap", "--no-publish", "--grace", "1", "--", *_fake_cli(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    stray = _stray_pid(tmp_path, lambda: wrap.poll() is None)
    wrap.kill()
    wrap.wait()
    _assert_gone_soon(stray)
