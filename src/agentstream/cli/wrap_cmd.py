"""``agentstream wrap -- CMD ARGS…``: run any agent CLI and re-emit its stream with every guarantee.

The wrap is a producer in its own right (a :class:`~agentstream.stream.Stream`):
its ``start`` comes first, the child's events follow re-stamped into the wrap's
session (the child's own session id, which it prints on a start line or on every
line, is kept in a ``status`` event named ``child_session``), and exactly one
``result`` ends it, whose exit code is the process's: the child's own exit status,
passed through (see :func:`exit_code_of`), and 128 + N when the wrap itself got
signal N. The first SIGINT/SIGTERM/SIGHUP is passed on to the child, whose last
events are still relayed (bounded by ``--grace``); a second one stops everything
at once. Like ``exec``, the run is published to the bus (``--bus``;
``--no-publish`` opts out), so ``follow``, ``watch`` and ``serve`` see it.

``--two-way`` (Claude's stream-json, ``--from claude --to claude``) lets a
client such as the Claude Agent SDK drive the child through the wrap: the
child reads the wrap's stdin itself, its control-protocol lines are written
out verbatim the moment they are read, and every turn is a stream of its own
(``start`` … ``result``) with the guarantees above. ``--stall-timeout`` stops a
child that goes silent.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from typing import TYPE_CHECKING, Any

from agentstream.cli._bus_options import add_publish_options, publish
from agentstream.cli._options import (
    add_output_options,
    add_to_alias,
    check_dialect,
    positive_seconds,
    seconds,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from types import FrameType

    from agentstream import protocol as p
    from agentstream.consumer import Spawn
    from agentstream.stream import Stream


def configure(parser: argparse.ArgumentParser) -> None:
    add_output_options(parser)
    add_to_alias(parser)
    parser.add_argument(
        "--from",
        dest="from_dialect",
        metavar="DIALECT",
        default="auto",
        help="the child's wire format (default: detect it from its first lines); acp: drive an ACP agent",
    )
    acp = parser.add_argument_group("--from acp (see docs/acp.md)")
    acp.add_argument("-p", "--prompt", metavar="PROMPT", help="the one prompt to send the ACP agent")
    acp.add_argument(
        "--permission-mode",
        default="default",
        metavar="MODE",
        help="full (or bypassPermissions) allows the agent's permission requests; any other mode rejects them",
    )
    acp.add_argument(
        "--idle-timeout",
        type=positive_seconds,
        default=600.0,
        metavar="SECONDS",
        help="stop an ACP agent that sends nothing this long while it owes an answer, more than 0 (default 600)",
    )
    parser.add_argument(
        "--stderr-as-logs",
        action="store_true",
        help="put the child's stderr lines in the stream as log events (default: pass them through to stderr)",
    )
    parser.add_argument(
        "--exit-timeout",
        type=seconds,
        default=5.0,
        metavar="SECONDS",
        help="how long the child may linger after its result or after closing stdout (default 5)",
    )
    parser.add_argument(
        "--grace",
        type=seconds,
        default=3.0,
        metavar="SECONDS",
        help="between SIGTERM and SIGKILL when the child has to be stopped (default 3)",
    )
    parser.add_argument(
        "--two-way",
        action="store_true",
        help="let a client drive the child over stdin (Claude's stream-json and control protocol;"
        " needs --from claude --to claude): control lines pass through verbatim, one stream per turn",
    )
    parser.add_argument(
        "--stall-timeout",
        type=seconds,
        default=0.0,
        metavar="SECONDS",
        help="stop a child that prints nothing this long while a turn runs; the stream ends STALLED,"
        " exit code 124 (default 0: off)",
    )
    parser.add_argument(
        "argv", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS ...]", help="the command to run"
    )
    add_publish_options(parser)


def run(args: argparse.Namespace) -> int:
    from agentstream._secrets import event_redactor, redact_stderr
    from agentstream.consumer import spawn
    from agentstream.observe.otel import attach_otel, traceparent_env
    from agentstream.stream import Stream

    redact_stderr()  # the child's stderr is echoed there, and it has its keys
    argv = _command(args.argv)
    acp = args.from_dialect == "acp"
    if not acp:
        check_dialect(args.from_dialect)
    elif args.stall_timeout:
        from agentstream.errors import UsageError

        raise UsageError(
            "--stall-timeout is for stream-printing children; an ACP agent's silence is bounded by --idle-timeout",
            fix="agentstream wrap --from acp --idle-timeout SECONDS -p PROMPT -- CMD ARGS",
        )
    elif not args.prompt:
        from agentstream.errors import UsageError

        raise UsageError(
            "--from acp needs a prompt to send", fix="agentstream wrap --from acp -p PROMPT -- CMD ARGS"
        )
    check_dialect(args.dialect, writing=True)
    if args.two_way:
        _check_two_way(args)
        return _run_two_way(args, argv)
    stream = Stream(
        shlex.join(argv),
        output_format=args.output_format,
        dialect=args.dialect,
        color=args.color,
        redact=event_redactor(),  # the child has its keys, and may print them
    )
    otel = attach_otel(stream)
    close_publisher = publish(stream, args)  # the run shows up in follow, watch and serve
    try:
        with stream:
            child = spawn(
                argv,
                args.from_dialect,
                stderr_as_logs=args.stderr_as_logs,
                on_stderr=None if args.stderr_as_logs else _echo,
                cancel_grace_s=args.grace,
                exit_timeout_s=args.exit_timeout,
                new_process_group=True,
                stdin=None,  # the child reads the wrap's stdin, as it would without the wrap
                env=traceparent_env(otel),  # a child that traces joins the wrap's trace
                **(_acp_options(args) if acp else {"stall_timeout_s": args.stall_timeout}),
            )
            _Relay(stream, child).run()
    finally:
        close_publisher()
    return stream.result.exit_code if stream.result is not None else 1


CONTROL_TYPES = frozenset({"control_request", "control_response", "control_cancel_request", "keep_alive"})
"""Claude's control-protocol lines: in two-way mode they pass between client and child unchanged."""
HOST_STATE = ("system", "session_state_changed")
"""Claude Code's lines on its session's state (``running``, ``idle`` …), which the Claude Agent SDK waits on to
end a run (it closes the child's stdin at ``idle``): in two-way mode they pass unchanged too, where the child
wrote them, since held for the next turn (as a reader holds them) the ``idle`` after a result would never come."""


PARTIAL_MESSAGES = "--include-partial-messages"
"""The child's flag (the Claude Agent SDK's ``include_partial_messages``) that asks for ``stream_event`` lines:
in two-way mode the wrap writes them only when its client asked the child for them, as Claude Code does."""


def _check_two_way(args: argparse.Namespace) -> None:
    from agentstream.errors import UsageError

    if args.from_dialect != "claude" or args.dialect != "claude" or args.output_format != "stream-json":
        raise UsageError(
            "--two-way relays Claude's control protocol, so it needs --from claude --to claude (stream-json)",
            fix="agentstream wrap --two-way --from claude --to claude -- CMD ARGS",
        )


def _run_two_way(args: argparse.Namespace, argv: list[str]) -> int:
    """A session of many turns: control lines out verbatim and at once, each turn a Stream of its own."""
    from agentstream.consumer import Spawn

    out = _ControlOut(sys.stdout.fileno())
    child = Spawn(
        argv,
        "claude",
        stderr_as_logs=args.stderr_as_logs,
        on_stderr=None if args.stderr_as_logs else _echo,
        cancel_grace_s=args.grace,
        exit_timeout_s=args.exit_timeout,
        new_process_group=True,
        stdin=None,  # the client writes to the child directly: nothing is held or parsed on the way in
        turns="many",
        stall_timeout_s=args.stall_timeout,
        passthrough=out.take,
    )
    return _TwoWayRelay(argv, args, child, out.fd).run_session()


class _ControlOut:
    """Writes the child's control and session-state lines to stdout unchanged, between the turns' own events."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def take(self, line: bytes) -> bool:
        import json

        if b'"type"' not in line:
            return False
        try:
            obj = json.loads(line)
            kind = obj.get("type")
        except (ValueError, AttributeError):
            return False
        if kind not in CONTROL_TYPES and (kind, obj.get("subtype")) != HOST_STATE:
            return False
        view = memoryview(line)
        while view:
            view = view[os.write(self.fd, view) :]
        return True


def _nothing() -> None:
    """No bus publisher attached (between turns)."""


def _acp_options(args: argparse.Namespace) -> dict[str, object]:
    return {
        "prompt": args.prompt,
        "permission_mode": args.permission_mode,
        "idle_timeout_s": args.idle_timeout,
    }


def _command(argv: list[str]) -> list[str]:
    from agentstream.errors import UsageError

    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        raise UsageError("no command to run", fix="agentstream wrap [OPTIONS] -- CMD [ARGS ...]")
    return argv


def _chunks_guarded(events: Iterable[p.AnyEvent]) -> Iterator[p.AnyEvent]:
    """The child's events with a secret it split across two deltas (or progress chunks) still redacted."""
    from agentstream._secrets import configured_redactor, guard_chunks

    return guard_chunks(events, configured_redactor())


def _echo(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class _Forwarder:
    """First signal: pass it to the child and let its stream end (bounded). Second: the Stream's own handler,
    told of the first, so that it does not wait for a line stuck on a stdout nobody reads."""

    def __init__(self, child: Spawn, stream: Callable[[], Stream | None]) -> None:
        from agentstream._signals import SignalHandlers

        self.child = child
        self.stream = stream
        self.signum = 0
        self.handlers = SignalHandlers(self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if not self.signum:
            self.signum = signum
            self.child.cancel(signum)
            return
        self.child.kill()
        stream = self.stream()
        if stream is not None:
            stream.note_signal(self.signum)
        self.handlers.call_previous(signum, frame)


class _Relay:
    """Moves the child's events into the wrap's stream, then ends it with one result."""

    def __init__(self, stream: Stream, child: Spawn) -> None:
        self.stream = stream
        self.child = child
        self.forwarder = _Forwarder(child, lambda: self.stream)
        self.held: p.Error | None = None
        """The child's fatal error, kept so that it lands right before our result."""
        self.answered = False
        """Whether the child's own result came before any signal: its outcome is known, and a signal while
        it lingers after it (as Claude Code can) changes nothing."""

    def run(self) -> None:
        from agentstream import protocol as p

        final: p.Result | None = None
        with self.child:
            self.forwarder.handlers.install()
            for event in _chunks_guarded(self.child):
                if isinstance(event, p.Result):
                    final = event
                    self.answered = event.synthetic is not True and not self.forwarder.signum
                else:
                    self._relay(event)
        self._finish(final)

    def _relay(self, event: p.AnyEvent) -> None:
        from agentstream import protocol as p

        if self.held is not None:
            self.stream.emit(self.held)
            self.held = None
        if isinstance(event, p.Error) and not event.recoverable:
            self.held = event
        elif isinstance(event, p.Start):
            if self.child.child_session is not None:
                self.stream.status("child_session", self.child.child_session)
        elif isinstance(event, p.UnknownEvent):
            from agentstream.dialects.kit import as_generic

            self.stream.emit(as_generic(event))  # as convert --to writes it
        else:
            self.stream.emit(event)

    def _finish(self, final: p.Result | None) -> None:
        from agentstream import protocol as p
        from agentstream.errors import ErrorCode, ExitCode, exit_code_for_signal
        from agentstream.transcript import has_usage

        stream, held = self.stream, self.held
        if self.child.stalled:
            stream.fail(
                ErrorCode.STALLED,
                f"the child printed nothing for {self.child.stall_timeout_s:g}s and was stopped",
                exit_code=ExitCode.TIMEOUT,
                fix="raise --stall-timeout, or make the child show progress",
            )
            return
        if self.forwarder.signum and not self.answered:
            signum = self.forwarder.signum
            stream.fail(
                ErrorCode.INTERRUPTED,
                f"interrupted by {signal.Signals(signum).name}; the signal was passed on to the child",
                exit_code=exit_code_for_signal(signum),
                subtype="interrupted",
                details={"child_error": {"code": held.code, "message": held.message}} if held else p.UNSET,
            )
            return
        assert final is not None, "spawn() always ends with a result"
        if has_usage(final.usage):
            stream.usage = final.usage
        # The child's own count, where it gave one (its usage events may be fewer than its turns).
        stream.tally.turn_count = max(stream.tally.turn_count, final.turn_count)
        if held is not None:
            stream.emit(held)
        code = exit_code_of(final, self.child)
        if code != 0 and final.ok:
            message = f"the child reported success but exited with status {code}"
            stream.fail(ErrorCode.PROCESS_CRASHED, message, exit_code=code, next_actions=final.next_actions)
            return
        stream.finish(
            ok=code == 0,
            exit_code=code,
            subtype=final.subtype,
            result=final.result if isinstance(final.result, str) else None,
            error=final.error if isinstance(final.error, p.ErrorInfo) else None,
            next_actions=final.next_actions,
        )


def exit_code_of(final: p.Result, child: Spawn) -> int:
    """wrap's one exit-code policy (docs/consumer.md): the child's own exit status, passed through.

    Exceptions, so that wrap never reports a success that did not happen and
    never blames the child for what wrap did: a child that exits 0 after a
    failed ``result`` gives that result's code (or 1); a child wrap had to stop
    (it lingered after its result), or that never ran, gives its stream's outcome.
    """
    from agentstream.errors import ExitCode

    stream_code = 0 if final.ok else (final.exit_code or ExitCode.ERROR)
    status = child.exit_status
    if status is None or child.stopped:
        return stream_code
    return status if status != 0 else stream_code


class _TwoWayRelay(_Relay):
    """One Stream per turn of the child's session, opened at the turn's first event, ended by its result."""

    def __init__(self, argv: list[str], args: argparse.Namespace, child: Spawn, fd: int) -> None:
        self.argv, self.args, self.fd = argv, args, fd
        self.child = child
        self.forwarder = _Forwarder(child, lambda: self.turn)
        self.held = None
        self.answered = False  # a signal ends the session, and the turn it lands in is interrupted
        self.turn: Stream | None = None
        self.previous: Stream | None = None
        """The last turn's stream, which the next one follows (Claude's running cost carries on)."""
        self.child_start: p.Start | None = None
        """The child's last own ``start`` (its ``init``): what the session runs as, which each turn's says."""
        self.close_publisher: Callable[[], None] = _nothing
        self.exit_code = 0
        self.turns = 0

    @property
    def stream(self) -> Stream:  # type: ignore[override]  # the base's attribute, one per turn here
        """The running turn's stream, opened on demand."""
        if self.turn is None:
            from agentstream._secrets import event_redactor
            from agentstream.stream import Stream

            self.turn = Stream(
                shlex.join(self.argv),
                dialect="claude",
                out=self.fd,
                owns_process=False,
                redact=event_redactor(),
                follows=self.previous,
                dialect_options={"partial_messages": PARTIAL_MESSAGES in self.argv},
                **_as_the_child_runs(self.child_start),
            )
            self.close_publisher = publish(self.turn, self.args)
            self.turn.start()
        return self.turn

    def run_session(self) -> int:
        from agentstream.errors import ErrorCode, exit_code_for_signal

        before_any_turn: list[p.AnyEvent] = []
        with self.child:
            self.forwarder.handlers.install()
            for event in _chunks_guarded(self.child):
                if not self.turns and self.turn is None and event.synthetic is True:
                    before_any_turn.append(event)  # the reader's own making; see below
                    continue
                for held in (*before_any_turn, event):
                    self._dispatch(held)
                before_any_turn.clear()
        if before_any_turn and self.child.exit_status != 0:
            for (
                event
            ) in before_any_turn:  # a session that ended cleanly before any turn is empty, else it failed
                self._dispatch(event)
        if self.turn is not None:  # the reader ends every turn with a result; this is a last safeguard
            self.stream.fail(ErrorCode.STREAM_TRUNCATED, "the child's session ended inside a turn")
            self._close_turn()
        if self.forwarder.signum and self.exit_code != exit_code_for_signal(self.forwarder.signum):
            self._finish(None)  # signalled between turns: a turn of its own says so, and sets the exit code
            self._close_turn()
        # With the last turn's code noted first: a signal from here on keeps it.
        self.forwarder.handlers.restore(self.exit_code if self.turns else None)
        return self.exit_code

    def _dispatch(self, event: p.AnyEvent) -> None:
        from agentstream import protocol as p

        if isinstance(event, p.Result):
            self._finish(event)
            self._close_turn()
            return
        if isinstance(event, p.Start) and event.synthetic is not True:
            self.child_start = event  # before the turn's stream opens on it (a made-up one keeps the last)
        self._relay(event)

    def _close_turn(self) -> None:
        assert self.turn is not None
        self.exit_code = self.turn.exit_code
        self.turns += 1
        self.close_publisher()
        self.previous, self.turn, self.held, self.close_publisher = self.turn, None, None, _nothing


def _as_the_child_runs(start: p.Start | None) -> dict[str, Any]:
    """A turn's ``start`` settings from the child's own: the client set the child's model and permission mode
    (flags, ``set_permission_mode``, ``set_model``) and reads them in the turn's ``init``; the wrap has none.

    The child's session is the turn's parent, so the turn's Claude lines name it (as ``exec`` names its stored
    session): a client resumes the ``session_id`` of a result, and ``--resume`` reaches the child.
    """
    from agentstream import protocol as p

    if start is None:
        return {}
    return {
        "parent_session_id": start.session_id,
        "cwd": start.cwd or None,
        "model": start.model if start.model is not p.UNSET else None,
        "tools": start.tools,
        "permission_mode": start.permission_mode if start.permission_mode is not p.UNSET else None,
    }
