"""Child processes: stopping them, keeping them from outliving us, and sharing the terminal.

* :func:`stop_process` — wait a little, then SIGTERM, then SIGKILL: the one
  terminate-then-kill sequence every part of agentstream uses;
* :class:`Strays` — what a child started outside its process group (a CLI's tool
  command in a session of its own), stopped with the child all the same;
* :func:`orphan_guard` — the argv prefix that makes Linux SIGTERM a child when its
  parent dies, even by SIGKILL (``PR_SET_PDEATHSIG``, set by a tiny shim before the
  real program is executed);
* :class:`GroupWatchdog` — a small process of its own that ends a child's whole
  process group (grandchildren included) if we die without saying goodbye, or
  when we ask it to;
* :class:`Foreground` — hands the controlling terminal to a child's process group
  while it runs, so a CLI that reads its TTY or sets raw mode is not stopped by
  job control (SIGTTIN/SIGTTOU), and takes it back afterwards.
"""

from __future__ import annotations

import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Final, NamedTuple

__all__ = ["Foreground", "GroupWatchdog", "Strays", "orphan_guard", "stop_process"]


def signal_child(pid: int, signum: int, *, group: bool, strays: Strays | None = None) -> None:
    """Send ``signum`` to a child, or to its whole process group; a child already gone is no error.

    With ``strays`` (the child's :class:`Strays`), the descendants that left its group are noted first, while
    the child still lives, and get the signal too, unless it is SIGINT: that one asks the child to interrupt
    itself, and what it leaves running is ended when it has exited (:meth:`Strays.end`).
    """
    if strays is not None:
        strays.note()
        if signum != signal.SIGINT:
            strays.signal(signum)
    try:
        if group:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except ProcessLookupError:
        pass


def stop_stragglers(pid: int, strays: Strays, stdout: int) -> None:
    """The child ``pid`` is gone but what it started still holds its ``stdout``: SIGTERM its process group,
    and the holders that left the group (held by ``strays``, which :meth:`Strays.end` finishes)."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    strays.note(pipe_holders(stdout))
    strays.signal(signal.SIGTERM)


def shell_status(returncode: int | None) -> int | None:
    """A child's exit status as a shell reports it (128 + N when killed by signal N); None while it runs."""
    if returncode is None:
        return None
    return 128 - returncode if returncode < 0 else returncode


def stop_process(
    proc: subprocess.Popen[bytes],
    *,
    wait_first: float = 0.0,
    grace: float = 3.0,
    send: Callable[[int], None] | None = None,
) -> int:
    """Wait ``wait_first`` for ``proc`` to exit, then SIGTERM, then SIGKILL after ``grace``; its status.

    ``send`` delivers a signal (e.g. to the whole process group); default: to ``proc``.
    """
    deliver = send or _sender(proc)
    wait = wait_first
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            return proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            deliver(signum)
            wait = grace
    return proc.wait()


def _sender(proc: subprocess.Popen[bytes]) -> Callable[[int], None]:
    def send(signum: int) -> None:
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    return send


class _Stat(NamedTuple):
    parent: int
    group: int
    started: int
    """Clock ticks after boot: with the pid, names one process, never another that reuses its pid."""


def _stat(pid: int) -> _Stat | None:
    """Parent, process group and start time of ``pid`` from ``/proc/PID/stat``; None if gone (or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            data = file.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()  # after the command name, which may hold anything
    try:
        return _Stat(int(fields[1]), int(fields[2]), int(fields[19]))
    except (IndexError, ValueError):
        return None


def _all_pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def detached_descendants(pid: int) -> list[tuple[int, int]]:
    """The descendants of ``pid`` in a process group other than its own, as (pid, start time).

    A signal to ``pid``'s group misses them, and once ``pid`` exits nothing links them to it any more
    (init adopts them): they can only be found while it lives. Empty where there is no ``/proc``.
    """
    stats = {other: stat for other in _all_pids() if (stat := _stat(other)) is not None}
    if pid not in stats:
        return []
    children: dict[int, list[int]] = {}
    for other, stat in stats.items():
        children.setdefault(stat.parent, []).append(other)
    own_group = stats[pid].group
    found: list[tuple[int, int]] = []
    todo = list(children.get(pid, ()))
    while todo:
        descendant = todo.pop()
        if stats[descendant].group != own_group:
            found.append((descendant, stats[descendant].started))
        todo += children.get(descendant, ())
    return found


def pipe_holders(fd: int) -> list[tuple[int, int]]:
    """The other processes that have the pipe ``fd`` is an end of open, as (pid, start time).

    For a child's stdout once the child has exited: whatever still holds it was started by the child (it
    inherited the pipe), even if it left the child's process group. Empty where there is no ``/proc``.
    """
    try:
        target = f"pipe:[{os.fstat(fd).st_ino}]"
    except OSError:
        return []
    found: list[tuple[int, int]] = []
    for pid in _all_pids():
        if pid == os.getpid():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # gone, or not ours to look into
        if any(_link(f"/proc/{pid}/fd/{name}") == target for name in fds) and (stat := _stat(pid)):
            found.append((pid, stat.started))
    return found


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


class Strays:
    """A child's descendants that left its process group, held so that they can be stopped with the child.

    A CLI may start its tool commands detached, in a session of their own (Node's ``detached: true``): a
    signal to the child's group misses them, and when the child exits they are adopted by init and run on.
    :meth:`note` finds them while the child lives; each is held by a pidfd opened while its start time still
    matched, so a pid reused later is never signalled. :meth:`end`, once the child has exited, ends those
    still running: SIGTERM, then SIGKILL after the grace period. A stray that leads a process group is
    signalled as its group (its own children with it). Linux only; elsewhere nothing is found.

    Safe from several threads and from a signal handler: the held set is replaced, never changed in place.
    """

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._held: dict[int, int] = {}
        """pid → pidfd of each stray noted."""
        self._lock = threading.RLock()  # a signal handler may call in while its own thread holds it
        self._ended = False

    def note(self, found: Iterable[tuple[int, int]] | None = None) -> None:
        """Hold the child's detached descendants (or the ``found`` (pid, start time) pairs) not held yet."""
        with self._lock:
            if self._ended:
                return
            pairs = detached_descendants(self._pid) if found is None else found
            new = {
                pid: fd
                for pid, started in pairs
                if pid not in self._held and (fd := _open(pid, started)) >= 0
            }
            if new:
                self._held = {**self._held, **new}

    def signal(self, signum: int) -> None:
        """Send ``signum`` to each stray still running."""
        with self._lock:
            for pid, fd in self._held.items():
                _signal_stray(pid, fd, signum)

    def end(self, grace: float) -> None:
        """After the child's exit: SIGTERM the strays still running, SIGKILL those left after ``grace``."""
        with self._lock:
            held, self._held, self._ended = self._held, {}, True
        if not held:
            return
        try:
            for pid, fd in held.items():
                _signal_stray(pid, fd, signal.SIGTERM)
            left = _wait_gone(held, grace)
            for pid in left:
                _signal_stray(pid, held[pid], signal.SIGKILL)
        finally:
            for fd in held.values():
                os.close(fd)


def _open(pid: int, started: int) -> int:
    """A pidfd for ``pid`` if it is still the process that started at ``started``; else -1."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return -1
    stat = _stat(pid)  # read after the pidfd was opened: a match means the pidfd is that process
    if stat is None or stat.started != started:
        os.close(fd)
        return -1
    return fd


def _signal_stray(pid: int, fd: int, signum: int) -> None:
    """Signal a held stray (its whole group if it leads one) unless it has exited."""
    if _exited(fd):
        return
    stat = _stat(pid)  # the pid is the stray's while its pidfd shows it running
    try:
        if stat is not None and stat.group == pid:
            os.killpg(pid, signum)
        else:
            signal.pidfd_send_signal(fd, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _exited(fd: int) -> bool:
    """Whether the process behind pidfd ``fd`` has exited (its pidfd is readable)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def _wait_gone(held: dict[int, int], grace: float) -> list[int]:
    """Wait up to ``grace`` for the held processes to exit; the pids of those still running."""
    deadline = time.monotonic() + grace
    left = {fd: pid for pid, fd in held.items()}
    poller = select.poll()
    for fd in left:
        poller.register(fd, select.POLLIN)
    while left:
        timeout = deadline - time.monotonic()
        if timeout <= 0:
            break
        for fd, _ in poller.poll(math.ceil(timeout * 1000)):
            poller.unregister(fd)
            del left[fd]
    return list(left.values())


# Runs before the real program in the child: ask Linux to send SIGTERM when the parent dies;
# if the parent is already gone (it died between fork and prctl), do not start at all.
_GUARD: Final = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, 15)\n"
    "if os.getppid() != int(sys.argv[1]): sys.exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def orphan_guard(argv: Sequence[str]) -> list[str]:
    """``argv`` started so that the child gets SIGTERM when this process dies (Linux; elsewhere as is)."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    return [sys.executable, "-S", "-c", _GUARD, str(os.getpid()), *argv]


_WATCHDOG: Final = """
trap '' INT
read -r group || exit 0
case $group in ''|*[!0-9]*) exit 0;; esac
read -r said; [ -n "$said" ] && exit 0
"$2" -S -c "$3" "$4" "$group" "$5" </dev/null 2>/dev/null
kill -TERM "-$group" 2>/dev/null || exit 0
tick=0
while kill -0 "-$group" 2>/dev/null; do
  if [ "$tick" -ge "$1" ]; then kill -KILL "-$group" 2>/dev/null; exit 0; fi
  sleep 0.05; tick=$((tick + 1))
done
"""
"""The watchdog, in POSIX sh (a millisecond to start, where an interpreter takes tens): it reads its pipe,
whose first line is the group to watch (no group: nothing started, nothing to do); then a byte means we
finished, end of file that we died. Before it signals the group, :data:`_STRAYS_AT_FIRE` takes care of what
the group's leader started outside it. Arguments: the grace in 50 ms ticks, then that script's interpreter,
script and arguments (this file, the grace in seconds)."""

_STRAYS_AT_FIRE: Final = (
    "import importlib.util, os, sys\n"
    "spec = importlib.util.spec_from_file_location('agentstream_children', sys.argv[1])\n"
    "children = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(children)\n"
    "strays = children.Strays(int(sys.argv[2]))\n"
    "strays.note()\n"
    "if os.fork() == 0:\n"
    "    strays.end(float(sys.argv[3]))\n"
    "    os._exit(0)\n"
)
"""Run by the watchdog when it fires, while the group's leader still lives: notes the leader's descendants that
left its group (:class:`Strays`, from this very file, so without the package or its dependencies), then leaves
a process of its own to end them (SIGTERM, SIGKILL after the grace) while the watchdog ends the group."""

_ANNOUNCE: Final = """
printf '%s\n' "$$" >&0
exec "$@" </dev/null
"""
"""Runs first in a child the watchdog watches from its start: it writes the child's pid (its group, the
child being in a session of its own) into the watchdog's pipe, which is its stdin (a descriptor any sh can
name), then becomes the real program (the same process), reading nothing, with its copy of the pipe closed.
Arguments: the program's argv."""


class GroupWatchdog:
    """A process that ends process group ``pgid`` (SIGTERM, then SIGKILL) if this process dies first.

    It runs in its own session, so killing our process group does not kill it,
    and waits on a pipe: end of file means we died (or :meth:`fire`d); :meth:`release`
    (one byte) means we finished and the group is ours to deal with.

    Without ``pgid`` the watchdog is started before the child it watches, which names its group itself
    (start it with :meth:`announcing` and ``stdin=watchdog.child_stdin``, in a new session; the program
    reads nothing): a SIGKILL of ours at any moment, even between the child's start and our noting its pid,
    then leaves no child behind.
    """

    def __init__(self, pgid: int | None = None, *, grace: float = 3.0) -> None:
        self._grace = grace
        self._fired = False
        self._lock = threading.Lock()  # fire() and release() may come from different threads
        read_end, self._write_end = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [
                    "/bin/sh",
                    "-c",
                    _WATCHDOG,
                    "agentstream-watchdog",
                    str(math.ceil(grace / 0.05)),
                    sys.executable,
                    _STRAYS_AT_FIRE,
                    __file__,
                    str(grace),
                ],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            os.close(read_end)
        os.set_inheritable(self._write_end, False)
        if pgid is not None:
            os.write(self._write_end, f"{pgid}\n".encode())

    @property
    def child_stdin(self) -> int:
        """The pipe the child announces its group on, as the child's stdin (Popen dups it there)."""
        return self._write_end

    @staticmethod
    def announcing(argv: Sequence[str]) -> list[str]:
        """``argv`` run so that it first tells the watchdog on its stdin its process group (:data:`_ANNOUNCE`)."""
        return ["/bin/sh", "-c", _ANNOUNCE, "agentstream-child", *argv]

    def fire(self) -> None:
        """End the whole group now, as if we had died, without waiting: grandchildren go with the child."""
        self._hang_up(b"")

    def release(self) -> None:
        """We are done with the group: the watchdog exits without touching it (after :meth:`fire`: once it is gone)."""
        self._hang_up(b".")
        # A fired watchdog may need both of its grace periods; killing it sooner could spare a straggler.
        timeout = 2 * self._grace + 5.0 if self._fired else 5.0
        try:
            self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def _hang_up(self, last_word: bytes) -> None:
        """Close our end of the pipe, once: after ``last_word`` if any (a byte: leave the group alone)."""
        with self._lock:
            if self._write_end < 0:
                return
            if last_word:
                try:
                    os.write(self._write_end, last_word)
                except OSError:
                    pass
            else:
                self._fired = True
            os.close(self._write_end)
            self._write_end = -1


class Foreground:
    """While a child runs, its process group is the terminal's foreground group (if we had the terminal).

    A child in its own process group is otherwise a background job: the first
    time it reads its TTY or changes its modes, job control stops it, and whoever
    waits for it waits forever. Off a terminal (pipes, a supervisor) this does nothing.
    """

    def __init__(self) -> None:
        self._tty = -1
        self._ours = -1

    def give(self, pgid: int) -> None:
        """Make ``pgid`` the foreground group of our controlling terminal, if we are in the foreground now."""
        try:
            tty = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:
            return  # no controlling terminal
        try:
            if os.tcgetpgrp(tty) != os.getpgrp():
                os.close(tty)
                return  # we are a background job ourselves: the terminal is not ours to give
            _set_foreground(tty, pgid)
        except OSError:
            os.close(tty)
            return
        self._tty, self._ours = tty, os.getpgrp()
        try:
            os.killpg(pgid, signal.SIGCONT)  # in case it touched the terminal before it was its own
        except OSError:
            pass

    def take_back(self) -> None:
        if self._tty < 0:
            return
        try:
            _set_foreground(self._tty, self._ours)
        except OSError:
            pass
        os.close(self._tty)
        self._tty = -1


def _set_foreground(tty: int, pgid: int) -> None:
    """``tcsetpgrp`` with SIGTTOU blocked (in this thread): a background process may then still call it."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})
    try:
        os.tcsetpgrp(tty, pgid)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
