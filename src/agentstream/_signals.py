"""Signal handling shared by every part of agentstream that owns a process.

Three things, written once:

* :class:`SignalHandlers` installs one handler for SIGINT/SIGTERM/SIGHUP and puts
  the previous ones back (the producer, the followers and ``wrap`` each use it);
* :class:`HeldSignal` keeps a signal that arrived while the main thread must not be
  unwound — in the middle of writing a line, or inside an ``import`` (unwinding
  there leaves a half-initialised module behind) — and delivers it right after;
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
    from types import FrameType
    from typing import Any, Final, TypeAlias

__all__ = [
    "HANDLED_SIGNALS",
    "HeldSignal",
    "Interrupted",
    "SignalHandlers",
    "deliver_held",
    "ignore_late_signals",
    "inside",
    "inside_import",
    "install_cli_handlers",
    "note_final_exit",
]

HANDLED_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
Handler: TypeAlias = "Callable[[int, FrameType | None], Any]"
REDELIVER_S: Final = 0.02
"""How soon a signal held during an import is looked at again."""


class Interrupted(SystemExit):
    """Raised in the main thread when a handled signal arrives; exits with 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


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
                self.previous[signum] = signal.signal(signum, self.handler)
            except ValueError:  # not the main thread
                return False
        return True

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self.previous.clear()

    def call_previous(self, signum: int, frame: FrameType | None) -> None:
        """Hand a signal to whoever had it before us (a second signal escalating, say)."""
        previous = self.previous.get(signum)
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            raise Interrupted(signum)


class HeldSignal:
    """A signal kept until the main thread reaches a point where it can be unwound safely."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending = 0

    def hold(self, signum: int, frame: FrameType | None = None) -> None:
        """Keep ``signum`` (the first one wins); inside an import, look at it again shortly."""
        self.pending = self.pending or signum
        if inside_import(frame):
            # ``_thread``, not ``threading``: the import being interrupted may be threading's own.
            _thread.start_new_thread(self._redeliver, ())

    def _redeliver(self) -> None:
        """In a moment, send the held signal to this process again, unless it was delivered meanwhile."""
        time.sleep(REDELIVER_S)
        if self.pending:
            os.kill(os.getpid(), self.pending)

    def take(self) -> int:
        signum, self.pending = self.pending, 0
        return signum


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


def note_final_exit(code: int) -> None:
    """A stream that owns the process wrote its ``result``: later signals must not change the exit code."""
    global _final_exit
    _final_exit = code


def _on_cli_signal(signum: int, frame: FrameType | None) -> None:
    if _final_exit is not None:
        raise SystemExit(_final_exit)
    if _parsing or inside_import(frame):
        _held.hold(signum, frame)
        return
    _held.take()
    raise Interrupted(signum)
