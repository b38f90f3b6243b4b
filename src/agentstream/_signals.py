"""Signal handling shared by every part of agentstream that owns a process.

Five things, written once:

* :class:`SignalHandlers` installs one handler for SIGINT/SIGTERM/SIGHUP and puts
  the previous ones back (the producer, the followers and ``wrap`` each use it);
* :class:`HeldSignal` keeps a signal that arrived while the main thread must not be
  unwound — in the middle of writing a line, or inside an ``import`` (unwinding
  there leaves a half-initialised module behind) — and delivers it right after;
  a second signal while a line is still being written stops waiting for a reader
  that no longer reads (:func:`stop_waiting_for_output`);
* :func:`start_thread` starts every thread of ours with those signals blocked in
  it, so that the kernel delivers them to the main thread (the only one Python
  runs handlers in, and the one whose blocking wait a signal must cut short);
* :func:`wake_main_thread_on_signals` makes sure that wait is cut short even when
  the signal lands just before it starts;
* the command line's own handlers (:func:`install_cli_handlers`), installed
  before any heavy import, so that a signal at any moment of a run ends it as
  ``INTERRUPTED`` (or, once a ``result`` is written, with that result's code).

Cheap to import: the command line imports it first thing.
"""

from __future__ import annotations

import _thread
import os
import signal
import time

TYPE_CHECKING = False  # not ``typing``: this module is imported before anything else, and must be quick
if TYPE_CHECKING:
    from collections.abc import Callable
    from threading import Thread
    from types import FrameType, TracebackType
    from typing import Any, Final, TypeAlias

__all__ = [
    "HANDLED_SIGNALS",
    "HeldSignal",
    "Interrupted",
    "MainThreadSignals",
    "SignalAfterResult",
    "SignalHandlers",
    "SignalsHeld",
    "deliver_held",
    "ignore_late_signals",
    "inside",
    "inside_import",
    "install_cli_handlers",
    "note_final_exit",
    "start_thread",
    "wake_main_thread_on_signals",
]

HANDLED_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
Handler: TypeAlias = "Callable[[int, FrameType | None], Any]"
REDELIVER_S: Final = 0.02
"""How soon a signal held during an import is looked at again."""
NUDGE_SIGNAL: Final = signal.SIGURG
"""Sent to our own main thread to interrupt a blocking call; ignored by default, so it can do nothing else."""
NUDGE_FOR_S: Final = 2.0
"""How long the main thread is nudged for a signal whose handler has not run (one not installed by us)."""

_handled = 0
"""Handled signals that reached a handler installed through :class:`SignalHandlers`."""


class Interrupted(SystemExit):
    """Raised in the main thread when a handled signal arrives; exits with 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


class SignalAfterResult(SystemExit):
    """Raised in the main thread when a handled signal arrives after a ``result`` was written.

    The process ends, with that result's exit code (a signal does not change a
    code already reported). A two-way session ends too, rather than going on to
    its next turn as it does after an ordinary failed turn.
    """


class SignalHandlers:
    """``handler`` for the handled signals while installed; :meth:`restore` puts the previous ones back."""

    def __init__(self, handler: Handler, signals: tuple[int, ...] = HANDLED_SIGNALS) -> None:
        self.handler = handler
        self.signals = signals
        self.previous: dict[int, Any] = {}

    def install(self) -> bool:
        """Only the main thread can set handlers; elsewhere this does nothing and returns False."""
        for signum in self.signals:
            try:
                self.previous[signum] = signal.signal(signum, self._dispatch)
            except ValueError:  # not the main thread
                return False
        return True

    def _dispatch(self, signum: int, frame: FrameType | None) -> Any:
        global _handled
        _handled += 1  # tells the wake-up thread the signal was seen (see wake_main_thread_on_signals)
        return self.handler(signum, frame)

    def restore(self, final_exit: int | None = None, *, keep_exit_code: bool = False) -> None:
        """Put the previous handlers back; with ``final_exit`` (the run's code, its ending written), note it first
        (:func:`note_final_exit`), so that a signal landing as the command line's handler comes back finds it
        there rather than ending a finished run as interrupted.

        ``keep_exit_code`` (a library's Stream that owns the process): where the previous handler was Python's
        default, put :func:`_end_with_final_exit` instead, so a signal while the program winds down ends it
        with the run's code rather than 130/143; a handler the program installed itself is handed back as is.
        """
        if final_exit is not None:
            note_final_exit(final_exit)
        for signum, handler in self.previous.items():
            if keep_exit_code and final_exit is not None and handler in _DEFAULT_DISPOSITIONS:
                handler = _end_with_final_exit
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self.previous.clear()

    def call_previous(self, signum: int, frame: FrameType | None) -> None:
        """Hand a signal to whoever had it before us (a second signal escalating, say)."""
        previous = self.previous.get(signum)
        owner = getattr(previous, "__self__", None)
        if isinstance(owner, SignalHandlers):
            owner.handler(signum, frame)  # not its ``_dispatch``: this delivery is counted already
        elif callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            raise Interrupted(signum)


class SignalsHeld:
    """Steps that must happen together: the handled signals only wait while the block runs (in the main
    thread; in another, no handler runs anyway), then go to their handlers. Starting a child and storing what
    stops it is one such: a handler that raised between the two would leave the child running unstoppable."""

    def __init__(self) -> None:
        self.arrived: list[int] = []
        self._holding = SignalHandlers(lambda signum, frame: self.arrived.append(signum))

    def __enter__(self) -> None:
        self._holding.install()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._holding.restore()
        if self.arrived:
            signal.raise_signal(self.arrived[0])


class MainThreadSignals:
    """Threads started inside this block leave the handled signals to the main thread.

    A process-directed signal goes to any thread that does not block it. Python
    runs the handler in the main thread only, but if another thread took the
    signal, the main thread's blocking wait (``select``, a lock, ``waitpid``) is
    not interrupted, and the handler waits with it, possibly forever. A new
    thread inherits its creator's signal mask, so blocking the signals here while
    threads start (ours, or a library's) keeps them off those threads for good.
    """

    __slots__ = ("previous",)

    def __init__(self) -> None:
        self.previous: set[int] = set()

    def __enter__(self) -> None:
        self.previous = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, self.previous)  # a signal held meanwhile arrives now


def start_thread(thread: Thread) -> Thread:
    """Start ``thread`` with the handled signals blocked in it (see :class:`MainThreadSignals`).

    Not for a thread that starts processes: a child keeps its parent thread's
    signal mask across ``exec``, and would ignore the SIGTERM meant to stop it.
    """
    with MainThreadSignals():
        thread.start()
    return thread


def wake_main_thread_on_signals() -> None:
    """Make every handled signal cut the main thread's blocking call short, even one that came just before it.

    CPython's C-level handler only marks a signal; the Python handler runs when the
    main thread next executes bytecode. A signal that lands between that check and
    a blocking call (``select``, ``read``, a lock) finds nothing to interrupt, and
    the call blocks on, for ever if nothing else wakes it. The C handler also writes
    every signal to the wake-up descriptor; a thread reading it interrupts the main
    thread with :data:`NUDGE_SIGNAL` until the Python handler has run. For the
    command line only (once, from its main thread): a process has one wake-up
    descriptor, which a library must not take from the program using it.
    """
    taken = signal.set_wakeup_fd(-1)
    if taken != -1:  # someone else's: leave it, and this process, as they were
        signal.set_wakeup_fd(taken)
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    signal.signal(NUDGE_SIGNAL, _nudged)
    with MainThreadSignals():
        _thread.start_new_thread(_nudge_main_thread, (read_end, _thread.get_ident()))


def _nudged(signum: int, frame: FrameType | None) -> None:
    """The nudge has done its work by interrupting the call; the handlers due run after this one."""


def _nudge_main_thread(read_end: int, main_thread: int) -> None:
    """Read each signal from the wake-up pipe; until its handler runs, keep interrupting the main thread."""
    received = 0
    while data := os.read(read_end, 512):
        received += sum(1 for signum in data if signum in HANDLED_SIGNALS)
        pause, deadline = 0.001, time.monotonic() + NUDGE_FOR_S
        while _handled < received and time.monotonic() < deadline:
            time.sleep(pause)  # the usual case: the signal interrupted the main thread and is being handled
            if _handled < received:
                try:
                    signal.pthread_kill(main_thread, NUDGE_SIGNAL)
                except OSError:  # the main thread is gone: the process is ending
                    return
            pause = min(pause * 2, 0.05)
        received = min(received, _handled)  # a handler that is not ours took it: stop waiting for it


class HeldSignal:
    """A signal kept until the main thread reaches a point where it can be unwound safely."""

    __slots__ = ("_resent", "pending")

    def __init__(self) -> None:
        self.pending = 0
        self._resent = False

    def hold(self, signum: int, frame: FrameType | None = None, *, redeliver: bool = False) -> bool:
        """Keep ``signum`` (the first one wins); inside an import, or with ``redeliver``, look at it again shortly.

        Returns whether a signal was already held (not counting the one sent again here): a second signal,
        which a caller stuck waiting (a write to a pipe nobody reads) takes as "stop waiting".
        """
        again = self.pending != 0 and not self._resent
        self._resent = False
        self.pending = self.pending or signum
        if redeliver or inside_import(frame):
            # ``_thread``, not ``threading``: the import being interrupted may be threading's own.
            with MainThreadSignals():
                _thread.start_new_thread(self._redeliver, ())
        return again

    def hold_or_stop_waiting(
        self, signum: int, frame: FrameType | None = None, *, redeliver: bool = False
    ) -> None:
        """:meth:`hold`, where the hold is for a line being written: a second signal meanwhile means nobody
        reads it, and the process stops waiting (:func:`stop_waiting_for_output`)."""
        if self.hold(signum, frame, redeliver=redeliver):
            stop_waiting_for_output(self.pending)

    def _redeliver(self) -> None:
        """In a moment, send the held signal to this process again, unless it was delivered meanwhile."""
        time.sleep(REDELIVER_S)
        if self.pending:
            self._resent = True
            os.kill(os.getpid(), self.pending)

    def take(self) -> int:
        signum, self.pending, self._resent = self.pending, 0, False
        return signum


def stop_waiting_for_output(signum: int) -> None:
    """A second signal while a line is still being written: exit now, with 128 + the first signal's number.

    The write waits on a reader that stopped reading (a full pipe); holding signals until it is done would
    leave the process deaf to everything but SIGKILL. Its last lines, ending included, are not written.
    """
    try:
        os.write(
            2,
            b"agentstream: stdout is not being read; a second signal ended the process without its ending\n",
        )
    finally:
        os._exit(128 + signum)


def inside(frame: FrameType | None, codes: frozenset[Any]) -> bool:
    """Is one of ``codes`` on the interrupted stack (only walked when a signal arrives)?"""
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


def inside_import(frame: FrameType | None) -> bool:
    """Is the interrupted main thread executing an ``import``? (Every import runs under importlib.)"""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


# -- the command line's handlers -------------------------------------------------

_held = HeldSignal()
_parsing = True
_final_exit: int | None = None


def install_cli_handlers() -> SignalHandlers:
    """First thing the command does: from here on, no signal can cut a run short unreported.

    Until :func:`deliver_held` (the command line parsed) a signal is only held.
    After it, a signal outside a stream raises :class:`Interrupted` (the command
    turns it into its ``INTERRUPTED`` ending); once a stream's ``result`` is
    written (:func:`note_final_exit`), a signal exits with that result's code.
    """
    global _parsing, _final_exit
    _parsing, _final_exit = True, None
    _held.take()
    handlers = SignalHandlers(_on_cli_signal)
    handlers.install()
    return handlers


def ignore_late_signals() -> None:
    """The command is over and its exit code decided: from here to the process's end, signals change nothing."""
    for signum in HANDLED_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def deliver_held() -> None:
    """The command line is parsed: stop holding, and deliver what arrived meanwhile."""
    global _parsing
    _parsing = False
    if _held.pending:
        raise Interrupted(_held.take())


def note_final_exit(code: int | None) -> None:
    """A stream that owns the process wrote its ``result``: later signals must not change the exit code.

    ``None`` takes that back, for a session waiting for its next turn: a signal then interrupts the session.
    """
    global _final_exit
    _final_exit = code


_DEFAULT_DISPOSITIONS: Final = (None, signal.SIG_DFL, signal.default_int_handler)


def _end_with_final_exit(signum: int, frame: FrameType | None) -> None:
    """After a run's ending, in a program without handlers of its own: end with that run's code."""
    raise SignalAfterResult(_final_exit if _final_exit is not None else 128 + signum)


def _on_cli_signal(signum: int, frame: FrameType | None) -> None:
    if _final_exit is not None:
        raise SignalAfterResult(_final_exit)
    if _parsing or inside_import(frame):
        _held.hold(signum, frame)
        return
    _held.take()
    raise Interrupted(signum)
