"""Stopping one turn of a two-way session without stopping the session.

An interrupt arrives on the control channel's reader thread while the main
thread runs the turn. It only sets :attr:`TurnControl.cancel`; the turn's own
code notices at its next safe point and raises :class:`TurnInterrupted`:

* a model call runs its provider stream on a worker thread and the main thread
  waits on a queue, polling the flag (:func:`interruptible`), so a stream stuck
  in a socket read is abandoned at once;
* the ``shell`` tool polls the flag while it pumps output, and its process
  group is killed on the way out;
* a permission wait and a retry pause wait on the flag itself.

No exception is ever raised into the main thread from outside, so a line being
written is never torn.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Final, TypeVar

__all__ = ["TurnControl", "TurnInterrupted", "interruptible"]

T = TypeVar("T")

_POLL_S: Final = 0.05


class TurnInterrupted(KeyboardInterrupt):
    """The client interrupted the running turn.

    A ``KeyboardInterrupt`` so that ``except Exception`` in tools cannot swallow it,
    and the Stream marks a tool call it unwinds as ``cancelled``. Its message is what
    that call's ``error`` says.
    """

    def __init__(self, message: str = "interrupted by the client") -> None:
        super().__init__(message)


class TurnControl:
    """What the control channel can do to the running turn, and what the turn is waiting on."""

    def __init__(self) -> None:
        self.cancel = threading.Event()
        self.waiting_on = ""
        """``model``, ``tool`` or ``permission`` while the turn waits on it (heartbeats say so)."""

    def begin(self) -> None:
        """A new turn: an interrupt that arrived between turns does not stop it."""
        self.cancel.clear()
        self.waiting_on = ""

    def check(self) -> None:
        if self.cancel.is_set():
            raise TurnInterrupted()

    def pause(self, seconds: float) -> None:
        """Sleep, unless the turn is interrupted first."""
        if self.cancel.wait(seconds):
            raise TurnInterrupted()


_END = object()


def interruptible(events: Iterator[T], control: TurnControl) -> Iterator[T]:
    """Iterate ``events`` on a worker thread; raise :class:`TurnInterrupted` as soon as the turn is.

    The worker stops at its next item once abandoned (closing the generator, and
    with it the HTTP response); exceptions it meets are re-raised here.
    """
    items: queue.Queue[object] = queue.Queue()
    abandoned = threading.Event()

    def pump() -> None:
        try:
            for item in events:
                if abandoned.is_set():
                    break
                items.put(item)
            items.put(_END)
        except BaseException as exc:
            items.put(_Raised(exc))
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:
                    pass  # closing an abandoned stream is best effort

    # Not start_thread: a provider (a plugin's, say) may start processes, which would inherit a blocked mask.
    threading.Thread(target=pump, name="agentstream-model-call", daemon=True).start()
    try:
        while True:
            try:
                item = items.get(timeout=_POLL_S)
            except queue.Empty:
                control.check()
                continue
            if item is _END:
                return
            if isinstance(item, _Raised):
                raise item.exc
            yield item  # type: ignore[misc]
            control.check()
    finally:
        abandoned.set()


class _Raised:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
