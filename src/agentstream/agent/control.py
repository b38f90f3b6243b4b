"""The two-way session: stdin is read on its own thread while the main thread runs turns.

``exec --input-format stream-json`` reads NDJSON from stdin (see "Input" in
``docs/protocol.md``). A reader thread parses every line as it arrives and
dispatches it at once:

* a user turn is queued; the main thread runs queued turns one after another,
  each as a stream of its own;
* an interrupt sets the running turn's :class:`~agentstream.agent.interrupt.TurnControl`;
* a permission decision wakes the tool call waiting for it;
* settings change the permission mode or the model for what comes next.

How lines are read and answered depends on the dialect: :class:`CanonicalInput`
here, :class:`agentstream.dialects.claude_control.ClaudeInput` for Claude Code's
control protocol. Both write through one :class:`OutputChannel`, which the
turn's Stream writes through too, so a control line never splits an event line.

A bad line never stops the session: during a turn it becomes a recoverable
``error`` event in the turn's stream; between turns, a short stream of its own
that ends in the error (or, in Claude's dialect, an error ``control_response``).
"""

from __future__ import annotations

import errno
import functools
import os
import queue
import select
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Final, Protocol

from agentstream import protocol as p
from agentstream._lines import UTF8_BOM
from agentstream._signals import start_thread
from agentstream._text import utf8_text
from agentstream.agent.interrupt import TurnControl, TurnInterrupted
from agentstream.agent.permissions import BYPASS_MODES, Decision
from agentstream.errors import AgentstreamError, ErrorCode, UsageError

if TYPE_CHECKING:
    from agentstream.agent.permissions import Approvals
    from agentstream.agent.providers.base import Provider, ToolCallDone
    from agentstream.agent.tools import Toolbox
    from agentstream.stream import Stream

__all__ = [
    "CanonicalInput",
    "HeartbeatTimer",
    "InputReader",
    "OutputChannel",
    "TwoWaySession",
    "user_text",
]

TURN_FIX: Final = 'send one JSON object per line, e.g. {"type":"message","role":"user","content":"..."}'
_POLL_S: Final = 0.05
_INPUT_TYPES: Final = frozenset({"message", "interrupt", "permission_decision", "settings"})


class OutputChannel:
    """The real stdout, shared by the turns' Streams and the control replies, one whole write at a time.

    Passed to :class:`~agentstream.stream.Stream` as ``out``.
    """

    def __init__(self) -> None:
        from agentstream.stream import _private_stdout

        self.fd = _private_stdout(isolate=True)
        self.closed = False
        self.on_closed: Callable[[], None] = _nothing
        """Called once when the reader goes away (the session interrupts the running turn)."""
        self._lock = threading.Lock()

    def write(self, data: bytes | bytearray) -> None:
        """Write whole lines; raises ``BrokenPipeError`` once the reader is gone (the Stream ends quietly)."""
        with self._lock:
            if self.closed:
                raise BrokenPipeError(errno.EPIPE, "the reader of stdout went away")
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(self.fd, view) :]
            except OSError as exc:
                if isinstance(exc, BrokenPipeError) or exc.errno in (errno.EPIPE, errno.EBADF):
                    self.closed = True
                    self.on_closed()
                    raise BrokenPipeError(errno.EPIPE, "the reader of stdout went away") from None
                raise

    def flush(self) -> None:
        """Every write is already on the descriptor."""

    def send(self, obj: dict[str, Any]) -> None:
        """One control line (not an event of any stream); dropped quietly once stdout is gone."""
        try:
            self.write(p.JSON_ENCODER.encode(obj) + b"\n")
        except BrokenPipeError:
            pass

    def wait_for_reader_to_leave(self) -> None:
        """Block until the reader of stdout goes away, then stop the running turn as a failed write would.

        A client that dies mid-turn is otherwise noticed only at the next write,
        which a long silent tool call may put off until the next heartbeat.
        Nothing ends the wait when stdout is a file: no reader can leave one.
        """
        poller = select.poll()
        poller.register(self.fd, select.POLLERR | select.POLLHUP)
        while not poller.poll():
            pass
        with self._lock:
            if self.closed:
                return
            self.closed = True
        self.on_closed()


def _nothing() -> None:
    pass


class InputReader(Protocol):
    """Parses one dialect's input lines and hands what they ask for to the session."""

    def handle(self, session: TwoWaySession, line: bytes, number: int) -> None: ...

    def permission_timed_out(self, session: TwoWaySession, request_id: str) -> None: ...


@dataclass
class _Pending:
    """A permission request (or a hook's call) waiting for its answer."""

    call_id: str
    request_id: str
    arguments: dict[str, Any]
    hook: bool = False
    answered: threading.Event = field(default_factory=threading.Event)
    decision: Decision | None = None
    """The answer; for a hook, None when it had no opinion about the call."""


@dataclass(frozen=True)
class ToolHook:
    """A client's hook run before each tool call it matches (Claude Code's ``PreToolUse``)."""

    matches: Callable[[str], bool]
    """Whether the hook wants a call of this tool."""
    request: Callable[[str, Stream, ToolCallDone], dict[str, Any]]
    """The line asking the client to run the hook for a call (given the request id)."""
    timeout_s: float
    fail_closed: bool
    """A hook that fails or gives no answer in time denies the call (else: no opinion)."""


_END: Final = object()


class TwoWaySession:
    """Turns, interrupts, permission decisions and settings from one input, dispatched as they arrive."""

    def __init__(
        self,
        source: IO[bytes],
        reader: InputReader,
        output: OutputChannel,
        *,
        control: TurnControl,
        approvals: Approvals,
        toolbox: Toolbox,
        provider: Provider,
        permission_timeout_s: float,
        bypass_allowed: bool = False,
        mcp_servers: Sequence[dict[str, Any]] = (),
    ) -> None:
        self.source = source
        self.mcp_servers = list(mcp_servers)
        """The MCP servers the client configured, connected or not, as ``mcp_status`` reports them."""
        self.bypass_allowed = bypass_allowed
        """Whether the client may switch to a mode that runs every tool call unasked (``bypassPermissions``,
        ``full``): only a session started in one, or allowed to with ``--allow-dangerously-skip-permissions``."""
        self.reader = reader
        self.output = output
        self.control = control
        self.approvals = approvals
        self.toolbox = toolbox
        self.provider = provider
        self.permission_timeout_s = permission_timeout_s
        self.stream: Stream | None = None
        """The running turn's stream (None between turns)."""
        self._due = 0
        """Turns sent and not begun yet (queued, or being started): what an interrupt between turns may stop."""
        self._interrupt_next = False
        self.input_closed = threading.Event()
        self._turns: queue.Queue[object] = queue.Queue()
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, name="agentstream-control", daemon=True)
        self._first_model = provider.model
        self.tool_hooks: list[ToolHook] = []
        """Set by the reader when the client registers hooks (Claude Code's ``initialize``)."""
        self._hook_requests = 0
        approvals.ask = self.ask
        approvals.before = self.before_tool
        output.on_closed = control.cancel.set

    def start(self, first_prompt: str | None) -> None:
        if first_prompt:
            self.submit_turn(first_prompt)
        start_thread(self._thread)

    def turns(self) -> Iterator[str | UsageError]:
        """Each queued turn (its text, or the error of a bad line between turns) until the input ends."""
        while True:
            item = self._turns.get()
            if item is _END:
                return
            yield item  # type: ignore[misc]

    # -- the reader thread -----------------------------------------------------------

    def _read(self) -> None:
        number = 0
        try:
            for number, line in enumerate(self.source, 1):
                if number == 1 and line.startswith(UTF8_BOM):  # see agentstream._lines.LeadingBom
                    line = line[len(UTF8_BOM) :]
                if line.strip():
                    try:
                        self.reader.handle(self, line, number)
                    except Exception as exc:  # a reader bug must cost one line, not the session
                        self.bad_line(UsageError(f"stdin line {number} could not be handled: {exc}"))
        except (OSError, ValueError):
            pass  # stdin went away: the same as its end
        finally:
            self.input_closed.set()
            self._turns.put(_END)
        self.output.wait_for_reader_to_leave()  # from here this thread has nothing else to do

    # -- what readers call -------------------------------------------------------------

    def submit_turn(self, text: str) -> None:
        with self._lock:
            self._due += 1
        self._turns.put(text)

    def begin_turn(self, stream: Stream) -> bool:
        """The next turn runs in ``stream`` now; True when the client interrupted it before it began."""
        with self._lock:
            self._due = max(0, self._due - 1)
            self.stream = stream
            interrupted, self._interrupt_next = self._interrupt_next, False
        return interrupted

    def bad_line(self, error: UsageError) -> None:
        """Report a line that asks for nothing valid, in the running turn's stream or a stream of its own."""
        stream = self.stream  # read once: the turn may end meanwhile
        if stream is not None and not stream.finished:
            stream.error(error.code, error.message, fix=error.fix)
        else:
            self._turns.put(error)

    def note(self, message: str) -> None:
        """A harmless oddity (an interrupt with no turn running): said on stderr, not in any stream."""
        sys.stderr.write(f"agentstream exec: {message}\n")
        sys.stderr.flush()

    @property
    def turn_running(self) -> bool:
        """Whether a turn's stream is open (its result not yet written): what :meth:`bad_line` writes into."""
        stream = self.stream
        return stream is not None and not stream.finished

    def interrupt(self) -> bool:
        """Stop the running turn, or the one sent and not begun yet (a client interrupts right after sending);
        False when there is neither."""
        with self._lock:
            if not self.turn_running:  # none yet, or its result is written (the next one may be due)
                if not self._due:
                    return False
                self._interrupt_next = True
                return True
        self.control.cancel.set()
        return True

    def is_hook_request(self, request_id: str) -> bool:
        with self._lock:
            return any(item.hook and item.request_id == request_id for item in self._pending.values())

    def decide(self, key: str, decision: Decision | None) -> bool:
        """Answer the pending request with this call id or request id; False when none waits."""
        with self._lock:
            pending = self._pending.get(key) or next(
                (item for item in self._pending.values() if item.request_id == key), None
            )
            if pending is None or pending.answered.is_set():
                return False
            pending.decision = decision
            pending.answered.set()
        return True

    def set_permission_mode(self, mode: str) -> None:
        """The mode from the next tool call on: what runs by itself, what the model is offered and where it may
        write, as if the session had started in it. Raises AgentstreamError for an unknown mode, and for a
        mode that asks nothing when the session may not switch to one (as Claude Code refuses it)."""
        from agentstream.agent.permissions import toolbox_mode

        if mode in BYPASS_MODES and not self.bypass_allowed:
            raise AgentstreamError(
                f"cannot switch to {mode}: this session was not started with it",
                code=ErrorCode.PERMISSION_DENIED,
                fix="start the session with --permission-mode bypassPermissions, --dangerously-skip-permissions "
                "or --allow-dangerously-skip-permissions",
            )
        self.approvals.set_mode(mode)
        self.toolbox.set_mode(toolbox_mode(mode, grantable=True))  # a two-way session can always grant

    def set_model(self, model: str | None) -> None:
        """Switch the model for the next calls; None goes back to the one the session started with."""
        self.provider.model = model if model is not None else self._first_model

    # -- what the agent loop calls (main thread) ------------------------------------------

    def ask(self, stream: Stream, call: ToolCallDone) -> Decision:
        """Emit a ``permission_request`` and wait for its decision, the timeout, an interrupt or EOF."""
        if self.input_closed.is_set():
            return Decision(False, "the input is closed, so no one can answer a permission request")
        pending = _Pending(call.call_id, f"perm_{call.call_id}", call.arguments)
        timeout_s = self.permission_timeout_s

        def send() -> None:
            stream.emit(
                p.PermissionRequest(
                    call_id=call.call_id,
                    name=call.name,
                    arguments=call.arguments,
                    request_id=pending.request_id,
                    reason=f"permission mode {self.approvals.mode} does not let {call.name} run by itself",
                    timeout_ms=int(timeout_s * 1000),
                )
            )

        failed = self._wait(pending, send, timeout_s)
        return failed if failed is not None else pending.decision or Decision(False, "no decision")

    def before_tool(self, stream: Stream, call: ToolCallDone) -> Decision | None:
        """Run the client's hooks that want this call, in turn: the first denial stands; an allow (which may edit
        the arguments) lets the call run without asking; no opinion leaves the call to the permission mode."""
        allowed: Decision | None = None
        for hook in self.tool_hooks:
            if not hook.matches(call.name):
                continue
            self._hook_requests += 1
            pending = _Pending(call.call_id, f"hook_{self._hook_requests}", call.arguments, hook=True)
            current = call if allowed is None or allowed.arguments is None else _with(call, allowed.arguments)
            line = hook.request(pending.request_id, stream, current)
            failed = self._wait(pending, functools.partial(self.output.send, line), hook.timeout_s)
            if failed is None and pending.decision is not None and pending.decision.failed:
                failed = pending.decision
            if failed is not None:
                self.note(f"a hook gave no decision about {call.name}: {failed.message}")
                if hook.fail_closed:
                    return Decision(False, f"a hook gave no decision: {failed.message}")
                continue
            decision = pending.decision
            if decision is not None and not decision.allow:
                return decision
            if decision is not None:
                allowed = Decision(
                    True, arguments=decision.arguments or (allowed.arguments if allowed else None)
                )
        return allowed

    def _wait(self, pending: _Pending, send: Callable[[], None], timeout_s: float) -> Decision | None:
        """Send a request and wait for its answer (None once it came), or the denial that ends the wait."""
        key = pending.request_id if pending.hook else pending.call_id  # a call may have a hook and a prompt
        with self._lock:
            self._pending[key] = pending
        previous, self.control.waiting_on = self.control.waiting_on, "permission"
        try:
            send()
            deadline = time.monotonic() + timeout_s
            while not pending.answered.wait(_POLL_S):
                if self.control.cancel.is_set():
                    self.reader.permission_timed_out(self, pending.request_id)
                    raise TurnInterrupted()
                if self.input_closed.is_set():
                    return Decision(False, "the input closed before anyone answered")
                if time.monotonic() >= deadline:
                    self.reader.permission_timed_out(self, pending.request_id)
                    return Decision(False, f"no decision within {timeout_s:g}s")
            return None
        finally:
            self.control.waiting_on = previous
            with self._lock:
                self._pending.pop(key, None)


def _lone_surrogate(line: bytes) -> bool:
    """Whether a line msgspec refused is JSON whose only fault is a lone surrogate escape (which it calls
    truncated input)."""
    import re

    from agentstream._lines import SURROGATE_ESCAPE, lenient_json

    if re.search(SURROGATE_ESCAPE.encode(), line) is None:
        return False
    try:
        lenient_json(line)
    except (ValueError, RecursionError):
        return False
    return True


def _with(call: ToolCallDone, arguments: dict[str, Any]) -> ToolCallDone:
    """The call as an earlier hook edited it."""
    from agentstream.agent.providers.base import ToolCallDone

    return ToolCallDone(call_id=call.call_id, name=call.name, arguments=dict(arguments))


# -- the canonical input -----------------------------------------------------------------


class CanonicalInput:
    """Input lines of the canonical protocol (``docs/protocol.input.schema.json``), plus Claude ``user`` lines."""

    def handle(self, session: TwoWaySession, line: bytes, number: int) -> None:
        import msgspec

        try:
            utf8_text(line, f"stdin line {number}")  # named as bad bytes, not as bad JSON
        except UsageError as exc:
            session.bad_line(exc)
            return
        try:
            obj = p.JSON_DECODER.decode(line)
        except msgspec.DecodeError as exc:
            if _lone_surrogate(line):  # a JSON escape of half a character: text no model or store can take
                error = UsageError(
                    f"stdin line {number} is not valid UTF-8 text: it holds a lone UTF-16 surrogate escape"
                    " (half a character)",
                    code=ErrorCode.INVALID_UTF8,
                    fix=TURN_FIX,
                )
            else:
                error = UsageError(f"stdin line {number} is not JSON: {exc}", fix=TURN_FIX)
            session.bad_line(error)
            return
        if isinstance(obj, dict) and obj.get("type") == "user":  # Claude's shape of a user turn
            self._turn(session, obj.get("message"), number, "content")
            return
        try:
            item = msgspec.convert(obj, p.InputLine)
        except msgspec.ValidationError as exc:
            kind = obj.get("type") if isinstance(obj, dict) else None
            if kind in _INPUT_TYPES:
                problem = f"is not a valid {kind!r} line: {exc}"
            else:
                problem = f"is not a user message or a control line (type {kind!r})"
            session.bad_line(UsageError(f"stdin line {number} {problem}", fix=TURN_FIX))
            return
        if isinstance(item, p.InputMessage):
            self._turn(session, {"content": item.content}, number, "content")
        elif isinstance(item, p.Interrupt):
            if not session.interrupt():
                session.note(f"stdin line {number}: interrupt, but no turn is running")
        elif isinstance(item, p.PermissionDecision):
            decision = Decision(
                item.decision == "allow",
                item.message if isinstance(item.message, str) else "",
                item.arguments if isinstance(item.arguments, dict) else None,
            )
            if session.decide(item.call_id, decision):
                return
            if not session.turn_running:  # late (after a timeout) or twice: nothing is left to answer
                session.note(f"stdin line {number}: a permission decision, but no turn is running")
            else:
                session.bad_line(
                    UsageError(
                        f"stdin line {number}: no permission request is waiting for call {item.call_id!r}",
                        fix="answer the call_id of a permission_request that has no tool_result yet",
                    )
                )
        else:
            self._settings(session, item, number)

    def _turn(self, session: TwoWaySession, message: object, number: int, key: str) -> None:
        content = message.get(key) if isinstance(message, dict) else None
        text = user_text(content)
        if text is None or not text.strip():
            session.bad_line(UsageError(f"stdin line {number} has no text content", fix=TURN_FIX))
            return
        note_other_blocks(session, content, number)
        try:  # a JSON escape can hold a lone surrogate, which no model or store can take
            session.submit_turn(utf8_text(text, f"the text of stdin line {number}"))
        except UsageError as exc:
            session.bad_line(exc)

    def _settings(self, session: TwoWaySession, item: p.InputSettings, number: int) -> None:
        try:
            if isinstance(item.permission_mode, str):
                session.set_permission_mode(item.permission_mode)
            if isinstance(item.model, str):
                session.set_model(item.model)
        except AgentstreamError as exc:
            session.bad_line(UsageError(f"stdin line {number}: {exc.message}", fix=exc.fix))

    def permission_timed_out(self, session: TwoWaySession, request_id: str) -> None:
        """The ``tool_result`` (status ``denied``) that follows says so; nothing else to send."""


def note_other_blocks(session: TwoWaySession, content: object, number: int) -> None:
    """Say on stderr which blocks of a turn's content the model will not see (only text goes to it)."""
    if not isinstance(content, list):
        return
    kinds = sorted({str(b.get("type")) for b in content if isinstance(b, dict) and b.get("type") != "text"})
    if kinds:
        session.note(
            f"stdin line {number}: {', '.join(kinds)} content is not sent to the model (only text is)"
        )


def user_text(content: object) -> str | None:
    """A string, or the text blocks of a content list joined; None for anything else."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        texts = [part for part in parts if isinstance(part, str)]
        if parts and len(texts) == len(parts):
            return "\n".join(texts)
    return None


# -- heartbeats --------------------------------------------------------------------------


class HeartbeatTimer:
    """Emits ``heartbeat`` into a turn's stream whenever it has been silent for ``every_s``."""

    def __init__(self, stream: Stream, every_s: float, control: TurnControl) -> None:
        self.stream = stream
        self.every_s = every_s
        self.control = control
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="agentstream-heartbeat", daemon=True)

    def __enter__(self) -> HeartbeatTimer:
        self.stream.observe(self._seen)
        start_thread(self._thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _seen(self, event: p.Event) -> None:
        self._last = time.monotonic()

    def _beat(self) -> None:
        tick = min(self.every_s / 4, 1.0)
        while not self._stop.wait(tick):
            if time.monotonic() - self._last >= self.every_s:
                waiting = self.control.waiting_on
                try:
                    self.stream.emit(p.Heartbeat(waiting_on=waiting or p.UNSET))
                except BaseException:  # the reader went away (OutputClosed): the turn ends on its own
                    return
