"""The async twin of :func:`~agentstream.consumer.spawn`: an asyncio child process read as canonical events.

Same guarantees as the sync one, with the same pipeline and the same endings: a
missing binary, a crash, a hang or a cancel all end in a well-formed stream; the
child gets ``exit_timeout_s`` after its ``result`` (or after closing its stdout)
to exit, then SIGTERM, then SIGKILL after ``cancel_grace_s``. The child's exit is
watched on its own (a pidfd where Linux has one), because asyncio's ``wait()``
also waits for the pipes, which a grandchild may hold open forever.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import IO, Any

from agentstream import protocol as p
from agentstream._children import Strays, signal_child, stop_stragglers
from agentstream.consumer.pipeline import CHUNK_BYTES, Turns
from agentstream.consumer.process import _ChildBase, _launch_failure, _pidfd

__all__ = ["AsyncSpawn", "aspawn"]

_EXIT_POLL_S = 0.1
"""How often the child's exit is polled where there is no pidfd."""
_STREAM_LIMIT = 1 << 16
"""The pipes' buffer limit, asyncio's default (``create_subprocess_exec``'s ``limit``)."""


class AsyncSpawn(_ChildBase):
    """A child process whose stdout is read as a stream: ``async for event in child``.

    Use it as an async context manager (``async with aspawn(argv) as child``) so the
    child is stopped, bounded, however the loop over it ends.
    """

    def __init__(
        self,
        argv: Sequence[str],
        dialect: str = "auto",
        *,
        stderr_as_logs: bool = False,
        on_stderr: Callable[[str], None] | None = None,
        cancel_grace_s: float = 3.0,
        exit_timeout_s: float = 5.0,
        max_line_bytes: int | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: int | IO[Any] | None = subprocess.DEVNULL,
        new_process_group: bool = False,
        stderr_limit: int = 1 << 20,
        turns: Turns = "one",
    ) -> None:
        super().__init__(
            argv,
            dialect,
            stderr_as_logs=stderr_as_logs,
            on_stderr=on_stderr,
            cancel_grace_s=cancel_grace_s,
            exit_timeout_s=exit_timeout_s,
            max_line_bytes=max_line_bytes,
            cwd=cwd,
            new_process_group=new_process_group,
            stderr_limit=stderr_limit,
            turns=turns,
        )
        self._spawn_kwargs: dict[str, Any] = {"cwd": cwd, "env": env, "stdin": stdin}
        self.proc: asyncio.subprocess.Process | None = None
        self._transport: asyncio.SubprocessTransport | None = None
        self._launch_error: OSError | None = None
        self._exited: asyncio.Future[int] | None = None
        self._exited_at = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self._kill_handle: asyncio.TimerHandle | None = None
        self._strays: Strays | None = None
        self._log_ready = asyncio.Event()

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> AsyncSpawn:
        """Start the child (``__aenter__`` and the first iteration do it); a missing binary is not raised."""
        if self._started_at:
            return self
        self._started_at = time.monotonic()
        loop = asyncio.get_running_loop()
        try:
            # ``create_subprocess_exec`` without hiding the transport: aclose() closes it (see there)
            self._transport, protocol = await loop.subprocess_exec(
                lambda: asyncio.subprocess.SubprocessStreamProtocol(limit=_STREAM_LIMIT, loop=loop),
                *self.argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                process_group=0 if self.new_process_group else None,
                **self._spawn_kwargs,
            )
        except OSError as exc:
            self._launch_error = exc
            return self
        self.proc = asyncio.subprocess.Process(self._transport, protocol, loop)
        if self.new_process_group:
            self._strays = Strays(self.proc.pid)
        self._exited = asyncio.get_running_loop().create_future()
        self._tasks = [asyncio.create_task(self._drain_stderr()), asyncio.create_task(self._watch_exit())]
        return self

    async def __aenter__(self) -> AsyncSpawn:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def returncode(self) -> int | None:
        """The child's exit status once it has exited (negative: killed by that signal)."""
        return self.proc.returncode if self.proc is not None else None

    def send_signal(self, signum: int) -> None:
        """Signal the child (its whole process group with ``new_process_group``) if it still runs."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        signal_child(proc.pid, signum, group=self.new_process_group, strays=self._strays)

    def cancel(self, signum: int = signal.SIGTERM) -> None:
        """Ask the child to stop, and SIGKILL it if it is still there after the grace period.

        Call it from the event loop's thread. The stream then ends with the child's
        own result if it sends one, else a synthetic ``INTERRUPTED`` one.
        """
        self._cancelled_with = self._cancelled_with or signum
        self.send_signal(signum)
        if self._kill_handle is None and self.proc is not None:
            loop = asyncio.get_running_loop()
            self._kill_handle = loop.call_later(self.cancel_grace_s, self.send_signal, signal.SIGKILL)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def aclose(self) -> None:
        """Make sure the child is gone (bounded: terminate, then kill), stop the helper tasks, close the pipes.

        The transport is closed here, while the loop runs: a grandchild holding the
        child's stdout or stderr would otherwise keep it open until the interpreter
        collects it, after the loop has closed ("Event loop is closed" at exit).
        """
        if self.proc is None or self._transport is None or self._transport.is_closing():
            return
        if self.proc.returncode is None:
            await self._reap(self.exit_timeout_s if self._pipeline.finished else 0.0)
        if self._strays is not None:
            await asyncio.to_thread(self._strays.end, self.cancel_grace_s)
        if self._kill_handle is not None:
            self._kill_handle.cancel()
        _, pending = await asyncio.wait(self._tasks, timeout=self._linger_left())
        for task in pending:  # stderr held open by a grandchild: stop reading it
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        self._transport.close()
        await asyncio.sleep(0)  # the pipes' connection_lost callbacks run now, not on a closed loop

    async def _reap(self, wait_s: float) -> int:
        """Wait up to ``wait_s`` for the child to exit, then SIGTERM, then SIGKILL; return its status."""
        for signum in (signal.SIGTERM, signal.SIGKILL):
            status = await self._wait_exit(wait_s)
            if status is not None:
                return status
            self.send_signal(signum)
            wait_s = self.cancel_grace_s
        status = await self._wait_exit(None)
        assert status is not None
        return status

    async def _wait_exit(self, timeout_s: float | None) -> int | None:
        assert self._exited is not None
        try:
            return await asyncio.wait_for(asyncio.shield(self._exited), timeout_s)
        except TimeoutError:
            return None

    # -- events ------------------------------------------------------------------

    async def __aiter__(self) -> AsyncIterator[p.AnyEvent]:
        await self.start()
        pipeline = self._pipeline
        try:
            if self._launch_error is not None:
                for event in pipeline.finish(_launch_failure(self.argv[0], self._launch_error)):
                    yield event
                return
            async for event in self._pump():
                yield event
            if pipeline.finished:
                await self._discard_until_exit()
                return
            status = await self._wait_after_eof()
            await asyncio.wait(
                self._tasks[:1], timeout=self._linger_left()
            )  # the rest of stderr, for the ending
            for event in [*self._logs_now(), *pipeline.finish(self._ending(status))]:
                yield event
        finally:
            await self.aclose()

    async def _pump(self) -> AsyncIterator[p.AnyEvent]:
        """Read stdout until the child's result, or EOF, or its exit with the pipe held open by a grandchild."""
        assert self.proc is not None and self.proc.stdout is not None and self._exited is not None
        pipeline, stdout = self._pipeline, self.proc.stdout
        read = asyncio.ensure_future(stdout.read(CHUNK_BYTES))
        try:
            while True:
                chunk = await self._next_chunk(read)
                for event in self._logs_now():
                    yield event
                if chunk is None:
                    continue
                for event in pipeline.feed_chunk(chunk) if chunk else pipeline.end_of_input():
                    yield event
                if pipeline.finished or not chunk:
                    return
                read = asyncio.ensure_future(stdout.read(CHUNK_BYTES))
        finally:
            read.cancel()

    async def _next_chunk(self, read: asyncio.Future[bytes]) -> bytes | None:
        """The next stdout chunk; ``None`` when logs are waiting; ``b""`` at EOF or for a held-open pipe.

        Once the child has exited, its stdout gets ``exit_timeout_s`` to close.
        """
        assert self._exited is not None
        if self._logs:
            return None
        self._log_ready.clear()
        log = asyncio.ensure_future(self._log_ready.wait())
        try:
            waiting: set[asyncio.Future[Any]] = {read, log}
            timeout = None
            if self._exited.done():
                timeout = max(0.0, self._exited_at + self.exit_timeout_s - time.monotonic())
            else:
                waiting.add(self._exited)
            done, _ = await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if read in done:
                return read.result()
            if not done:  # exited, and something it started still holds the pipe
                self._stop_stragglers()
                return b""
            return None
        finally:
            log.cancel()

    def _stop_stragglers(self) -> None:
        """The child is gone but something it started still holds our pipe: end that too."""
        if self._strays is not None and self._transport is not None and self.proc is not None:
            stdout = self._transport.get_pipe_transport(1)
            pipe = stdout.get_extra_info("pipe") if stdout is not None else None
            if pipe is not None:
                stop_stragglers(self.proc.pid, self._strays, pipe.fileno())

    async def _discard_until_exit(self) -> None:
        """After the result: drop further output until the child exits; stop it if it does not in time."""
        drain = asyncio.ensure_future(self._discard_output())
        try:
            await self._reap(self.exit_timeout_s)
        finally:
            drain.cancel()

    async def _discard_output(self) -> None:
        """Read and drop stdout until it closes."""
        assert self.proc is not None and self.proc.stdout is not None
        while await self.proc.stdout.read(CHUNK_BYTES):
            pass

    def _linger_left(self) -> float:
        """What is left of the ``exit_timeout_s`` the child's pipes get to close after its exit.

        The loop reads the pipes all along, so what the child wrote is read by then;
        only the end of a pipe a grandchild holds is given up on.
        """
        return max(0.0, self._exited_at + self.exit_timeout_s - time.monotonic())

    async def _wait_after_eof(self) -> int:
        status = await self._wait_exit(self.exit_timeout_s)
        if status is not None:
            return status
        self._stopped_hung = True
        return await self._reap(0.0)

    # -- helper tasks ------------------------------------------------------------

    async def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while True:
            chunk = await self.proc.stderr.read(CHUNK_BYTES)
            self._stderr.feed(chunk)
            if not chunk:
                return

    def _wake(self) -> None:
        self._log_ready.set()

    async def _watch_exit(self) -> None:
        """Resolve ``_exited`` with the status as soon as the child exits, whatever its pipes do."""
        assert self.proc is not None and self._exited is not None
        pidfd = _pidfd(self.proc.pid)
        try:
            if pidfd >= 0:
                readable = asyncio.Event()
                loop = asyncio.get_running_loop()
                loop.add_reader(pidfd, readable.set)
                try:
                    await readable.wait()
                finally:
                    loop.remove_reader(pidfd)
            # The loop's child watcher records the status a moment after the pidfd fires
            # (and is all there is without a pidfd); asyncio offers no event for it.
            while self.proc.returncode is None:  # noqa: ASYNC110
                await asyncio.sleep(_EXIT_POLL_S if pidfd < 0 else 0.005)
        finally:
            if pidfd >= 0:
                os.close(pidfd)
        if not self._exited.done():
            self._exited_at = time.monotonic()
            self._exited.set_result(self.proc.returncode)


def aspawn(argv: Sequence[str], dialect: str = "auto", **options: Any) -> AsyncSpawn:
    """Run ``argv`` and read its stdout as canonical events in asyncio; see :class:`AsyncSpawn`.

    ``async with aspawn(["gemini", "-p", "hi", "-o", "stream-json"]) as child: async for event in child: ...``
    """
    return AsyncSpawn(argv, dialect, **options)
