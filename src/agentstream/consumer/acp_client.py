"""An ACP agent as an input: drive it through one prompt and read its answer as canonical events.

``spawn(argv, dialect="acp", prompt=...)`` (and ``wrap --from acp -p PROMPT``)
start the agent, send ``initialize``, ``session/new`` and one ``session/prompt``,
and turn what comes back into the canonical stream:

* ``session/new``'s ``sessionId`` → ``start``; ``agent_message_chunk`` /
  ``agent_thought_chunk`` → ``message_delta`` / ``reasoning_delta`` (each run
  closed by its complete ``message`` / ``reasoning``); ``tool_call`` →
  ``tool_call``; ``tool_call_update`` with ``completed`` / ``failed`` →
  ``tool_result``; ``plan`` → ``progress`` named ``plan``;
* ``session/request_permission`` → ``permission_request``, answered by the
  permission mode: allowed (``allow_once``) in ``full`` / ``bypassPermissions``,
  rejected (``reject_once``) in every other mode;
* the ``stopReason`` → the one ``result`` (``end_turn`` ok; ``cancelled``
  INTERRUPTED, 130; ``max_turn_requests`` MAX_TURNS, 3; ``max_tokens``
  CONTEXT_LIMIT, 1; ``refusal`` subtype ``refusal``, 1), and a JSON-RPC error →
  the fatal ``error`` (its ``data.code`` when that is a canonical code) and result.

Every line is fed through the canonical :class:`~agentstream.consumer.pipeline.Pipeline`,
so the guarantees are the same as for any input: ``start`` first, one
``result`` last, a made-up end when the agent crashes, hangs (nothing for
``idle_timeout_s`` while it owes an answer) or answers garbage.
"""

from __future__ import annotations

import os
import queue
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

from agentstream import protocol as p
from agentstream._children import Strays, signal_child
from agentstream._signals import SignalsHeld, start_thread
from agentstream.acp.mapping import PROTOCOL_VERSION, STOP_OUTCOMES
from agentstream.acp.server import PeerClosed, RpcError, RpcPeer
from agentstream.consumer.pipeline import Ending, Pipeline
from agentstream.consumer.process import _STDERR_REST_S, PopenChild, _StderrTail, command_words
from agentstream.errors import ERROR_CODES, ErrorCode, ExitCode

__all__ = ["AcpSpawn"]

_ALLOWING: Final = frozenset({"full", "bypassPermissions"})
_STOPS: Final[dict[str, tuple[str, int, str]]] = {
    # stopReason -> (error code, exit code, result subtype), the reverse of acp.mapping.stop_reason
    **{reason: (code, ExitCode.ERROR, "error") for code, reason in STOP_OUTCOMES.items()},
    "cancelled": (ErrorCode.INTERRUPTED, ExitCode.SIGINT, "interrupted"),
    "max_turn_requests": (ErrorCode.MAX_TURNS, ExitCode.MAX_TURNS, "max_turns"),
    "refusal": (ErrorCode.PROVIDER_ERROR, ExitCode.ERROR, "refusal"),
}
_DONE: Final = object()
_SPAWN_ONLY_OPTIONS: Final = frozenset({"stdin", "turns", "stall_timeout_s", "max_line_bytes", "passthrough"})
"""Options of :class:`Spawn` that mean nothing to an ACP agent (its stdin carries the protocol, its silence is
bounded by ``idle_timeout_s``): accepted and left unused, so one call serves either; any other name is a typo."""


class AcpSpawn(PopenChild):
    """An ACP agent run for one prompt; iterate it for canonical events (the same surface as :class:`Spawn`)."""

    dialect = "acp"
    stalled = False
    """Never: an ACP agent's silence is bounded by ``idle_timeout_s`` instead (wrap reads this of every child)."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        prompt: str,
        permission_mode: str = "default",
        idle_timeout_s: float = 600.0,
        cancel_grace_s: float = 3.0,
        exit_timeout_s: float = 5.0,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stderr_as_logs: bool = False,
        on_stderr: Callable[[str], None] | None = None,
        new_process_group: bool = False,
        stderr_limit: int = 1 << 20,
        **not_for_acp: Any,
    ) -> None:
        if not prompt:
            raise ValueError("an ACP agent needs a prompt: spawn(argv, dialect='acp', prompt='...')")
        unknown = sorted(set(not_for_acp) - _SPAWN_ONLY_OPTIONS)
        if unknown:
            raise TypeError(f"spawn(dialect='acp') got unexpected keyword argument(s): {', '.join(unknown)}")
        self.argv, self.prompt = command_words(argv), prompt
        self.permission_mode = permission_mode
        self.idle_timeout_s, self.cancel_grace_s, self.exit_timeout_s = (
            idle_timeout_s,
            cancel_grace_s,
            exit_timeout_s,
        )
        self.cwd = os.path.abspath(cwd or os.getcwd())
        self.env, self.new_process_group = env, new_process_group
        self.proc: subprocess.Popen[bytes] | None = None
        self._strays: Strays | None = None
        self._pipeline = Pipeline("canonical", label=shlex.join(self.argv), cwd=self.cwd)
        self._logs: queue.Queue[object] = queue.Queue()
        self._stderr = _StderrTail(stderr_limit, on_stderr, self._log if stderr_as_logs else None)
        self._lines: queue.Queue[object] = queue.Queue()
        self._last_heard = time.monotonic()
        self._peer: RpcPeer | None = None
        self._session_id = ""
        self._cancelled_with = 0
        self._stopped_hung = False
        self._runs: dict[str, list[Any]] = {}
        self._open_run: tuple[str, str, object] | None = None
        """(kind, our run id, the agent's ``messageId``) of the message or thought being streamed."""
        self._unshown: set[str] = set()
        """Content block types the agent sent in a message that canonical text cannot hold (said once each)."""
        self._open_calls: dict[str, str] = {}
        self._seq = -1
        self._early: list[dict[str, Any]] = []
        self._call_arguments: dict[str, dict[str, Any]] = {}
        self._call_content: dict[str, object] = {}
        """Each open call's latest ``content``: ACP's updates replace it, and one without it keeps it."""
        self._state = threading.RLock()
        """Updates (reader thread), permission requests (their own threads) and the turn's end take turns."""

    # -- the Spawn surface -----------------------------------------------------------

    @property
    def child_session(self) -> str | None:
        """The agent's session (``session/new``'s ``sessionId``) once it answered; ``None`` before."""
        return self._session_id or None

    def start(self) -> AcpSpawn:
        if self.proc is not None:
            return self
        with SignalsHeld():  # a signal cannot unwind this before the child is stored, where close() finds it
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.cwd,
                env=self.env,
                process_group=0 if self.new_process_group else None,
            )
            if self.new_process_group:
                self._strays = Strays(self.proc.pid)
        assert self.proc.stderr is not None
        self._stderr.start(self.proc.stderr.fileno())
        return self

    def __enter__(self) -> AcpSpawn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def stopped(self) -> bool:
        """Whether the run was ended from here (cancelled, or stopped for hanging): its outcome, not the status."""
        return bool(self._cancelled_with) or self._stopped_hung

    @property
    def stderr(self) -> str:
        return self._stderr.text()

    def send_signal(self, signum: int) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        signal_child(proc.pid, signum, group=self.new_process_group, strays=self._strays)

    def cancel(self, signum: int = signal.SIGTERM) -> None:
        """ACP's own way first (``session/cancel``); the process is signalled if it has not answered in the grace period."""
        self._cancelled_with = self._cancelled_with or signum
        if self._strays is not None:
            self._strays.note()  # while the agent lives: what it started detached is ended with it (close)
        if self._peer is not None and self._session_id:
            self._peer.notify("session/cancel", {"sessionId": self._session_id})
        timer = threading.Timer(self.cancel_grace_s, self._stop_process)
        timer.daemon = True
        start_thread(timer)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def close(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=self.exit_timeout_s)
        except subprocess.TimeoutExpired:
            self._stop_process()
        if self._strays is not None:
            self._strays.end(self.cancel_grace_s)
        self._stderr.settle(_STDERR_REST_S)
        if proc.stdout is not None:
            proc.stdout.close()
        if proc.stderr is not None:
            self._stderr.close_when_done(proc.stderr)

    def _stop_process(self) -> None:
        """SIGTERM, then SIGKILL after the grace period."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        self.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=self.cancel_grace_s)
        except subprocess.TimeoutExpired:
            self.send_signal(signal.SIGKILL)
            proc.wait()

    # -- events -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[p.AnyEvent]:
        try:
            self.start()
        except OSError as exc:
            from agentstream.consumer.process import _launch_failure

            yield from self._pipeline.finish(_launch_failure(self.argv[0], exc))
            return
        try:
            yield from self._run()
        finally:
            self.close()

    def _run(self) -> Iterator[p.AnyEvent]:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self._peer = RpcPeer(
            self.proc.stdout,
            self.proc.stdin,
            requests={"session/request_permission": self._permission},
            notifications={"session/update": self._update},
            on_bad_line=self._bad_line,
            on_message=self._heard,
            label=f"ACP agent {self.argv[0]}",
        )
        self._peer.start()
        start_thread(threading.Thread(target=self._drive, name="agentstream-acp-client", daemon=True))
        pipeline = self._pipeline
        while True:
            try:
                item = self._lines.get(timeout=0.1)
            except queue.Empty:
                yield from self._flush_logs()
                if time.monotonic() - self._last_heard > self.idle_timeout_s:
                    yield from self._wind_up(pipeline, self._hung())
                    self._stop_process()
                    return
                continue
            yield from self._flush_logs()
            if item is _DONE:
                return
            if isinstance(item, Ending):
                yield from self._wind_up(pipeline, item)
                return
            yield from pipeline.feed_chunk(item)  # type: ignore[arg-type]
            if pipeline.finished:
                return

    def _hung(self) -> Ending:
        self._stopped_hung = True
        return Ending(
            ErrorCode.TIMEOUT,
            f"the ACP agent sent nothing for {self.idle_timeout_s:g}s while it owed an answer; it was stopped",
            ExitCode.TIMEOUT,
            fix="raise --idle-timeout if the agent is just slow; see its stderr (details.stderr_tail)",
            details={"stderr_tail": self._stderr.tail(2000)},
        )

    # -- the protocol, on the driver thread ----------------------------------------------------

    def _drive(self) -> None:
        assert self._peer is not None
        peer = self._peer
        try:
            init = peer.request(
                "initialize",
                {
                    "protocolVersion": PROTOCOL_VERSION,
                    "clientCapabilities": {
                        "fs": {"readTextFile": False, "writeTextFile": False},
                        "terminal": False,
                    },
                    "clientInfo": {"name": "agentstream", "version": _version()},
                },
            )
            if not isinstance(init, dict) or not isinstance(init.get("protocolVersion"), int):
                raise _Garbage(f"initialize answered {_preview(init)} (no protocolVersion)")
            if init["protocolVersion"] > PROTOCOL_VERSION:  # ACP: the client disconnects
                raise _Garbage(
                    f"the agent speaks ACP version {init['protocolVersion']} only;"
                    f" agentstream speaks version {PROTOCOL_VERSION}"
                )
            created = peer.request("session/new", {"cwd": self.cwd, "mcpServers": []})
            session_id = created.get("sessionId") if isinstance(created, dict) else None
            if not isinstance(session_id, str) or not session_id:
                raise _Garbage(f"session/new answered {_preview(created)} (no sessionId)")
            self._session_id = session_id
            self._emit(
                {"type": "start", "session_id": session_id, "command": shlex.join(self.argv), "cwd": self.cwd}
            )
            answer = peer.request(
                "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": self.prompt}]}
            )
            with self._state:
                self._end_of_turn(answer)
        except RpcError as exc:
            code = exc.data.get("code") if isinstance(exc.data, dict) else None
            code = code if isinstance(code, str) and code in ERROR_CODES else ErrorCode.PROVIDER_ERROR
            fix = (
                exc.data.get("fix")
                if isinstance(exc.data, dict) and isinstance(exc.data.get("fix"), str)
                else None
            )
            self._end(
                Ending(
                    code,
                    f"the ACP agent answered with an error: {exc.message} ({exc.code})",
                    ExitCode.ERROR,
                    fix=fix,
                )
            )
        except PeerClosed:
            self._end(self._crashed())
        except _Garbage as exc:
            self._end(
                Ending(
                    ErrorCode.MALFORMED_EVENT,
                    str(exc),
                    ExitCode.ERROR,
                    fix="the agent does not speak ACP v1 correctly; see its stderr",
                )
            )

    def _end_of_turn(self, answer: object) -> None:
        reason = answer.get("stopReason") if isinstance(answer, dict) else None
        self._close_runs()
        if reason == "end_turn":
            self._close_open_calls("error", "the turn ended before this tool call finished")
            self._emit(
                {
                    "type": "result",
                    "ok": True,
                    "subtype": "success",
                    "exit_code": 0,
                    "command": shlex.join(self.argv),
                }
            )
            self._lines.put(_DONE)
            return
        if not isinstance(reason, str) or reason not in _STOPS:
            raise _Garbage(f"session/prompt answered {_preview(answer)} (no known stopReason)")
        code, exit_code, subtype = _STOPS[reason]
        message = f"the ACP agent stopped the turn: {reason}"
        self._end(Ending(code, message, exit_code, subtype=subtype))

    def _crashed(self) -> Ending:
        assert self.proc is not None
        try:
            status = self.proc.wait(timeout=self.exit_timeout_s)
        except subprocess.TimeoutExpired:
            status = None
        details = {"exit_status": status, "stderr_tail": self._stderr.tail(2000)}
        if self._cancelled_with:
            return Ending(
                ErrorCode.INTERRUPTED,
                "cancelled: the ACP agent ended before answering",
                128 + self._cancelled_with,
                "interrupted",
                details=details,
            )
        died = f"exit status {status}" if status is not None and status >= 0 else f"signal {-(status or 0)}"
        return Ending(
            ErrorCode.PROCESS_CRASHED,
            f"the ACP agent closed the connection ({died}) before the turn ended",
            status if status and status > 0 else ExitCode.ERROR,
            fix="see the agent's stderr (details.stderr_tail)",
            details=details,
        )

    def _end(self, ending: Ending) -> None:
        for early in self._early:  # no start yet: the pipeline makes one up for them
            self._lines.put(p.JSON_ENCODER.encode(early) + b"\n")
        self._early = []
        self._lines.put(ending)

    # -- what the agent sends ---------------------------------------------------------------

    def _heard(self) -> None:
        self._last_heard = time.monotonic()

    def _bad_line(self, line: bytes, reason: str) -> None:
        preview = line[:120].decode("utf-8", "replace").strip()
        self._emit(
            {
                "type": "error",
                "code": ErrorCode.MALFORMED_EVENT,
                "message": f"the ACP agent sent a line that is {reason}: {preview}",
                "recoverable": True,
            }
        )

    def _update(self, params: dict[str, Any]) -> None:
        with self._state:
            self._on_update(params)

    def _on_update(self, params: dict[str, Any]) -> None:
        update = params.get("update")
        if (
            not isinstance(update, dict)
            or not self._session_id
            or params.get("sessionId") != self._session_id
        ):
            return  # another session's (an agent may run several): not this turn's
        kind = update.get("sessionUpdate")
        content = update.get("content")
        if kind in ("agent_message_chunk", "agent_thought_chunk"):
            block = content.get("type") if isinstance(content, dict) else None
            if block != "text":
                self._unshown_block(block)
                return
            text = content.get("text")  # type: ignore[union-attr]  # a dict: its type is "text"
            if isinstance(text, str) and text:
                run = "message" if kind == "agent_message_chunk" else "reasoning"
                self._chunk(run, text, update.get("messageId"))
            return
        if kind == "user_message_chunk":
            return
        self._close_runs()
        if kind == "tool_call":
            self._tool_call(update)
        elif kind == "tool_call_update":
            self._tool_update(update)
        elif kind == "plan":
            entries = [e for e in update.get("entries") or [] if isinstance(e, dict)]
            done = sum(e.get("status") == "completed" for e in entries)
            lines = [
                f"[{'x' if e.get('status') == 'completed' else ' '}] {e.get('content', '')}" for e in entries
            ]
            self._emit(
                {
                    "type": "progress",
                    "name": "plan",
                    "current": done,
                    "total": len(entries),
                    "message": "\n".join(lines),
                }
            )

    def _chunk(self, kind: str, text: str, message_id: object) -> None:
        """One chunk of the open run; a new run when the kind changes, or the agent's ``messageId`` does."""
        open_run = self._open_run
        if open_run is None or open_run[0] != kind or (message_id is not None and message_id != open_run[2]):
            self._close_runs()
            open_run = self._open_run = (kind, p.new_id("msg" if kind == "message" else "rsn"), message_id)
            self._runs[open_run[1]] = []
        run_id = open_run[1]
        self._runs[run_id].append(text)
        if kind == "message":
            self._emit({"type": "message_delta", "message_id": run_id, "role": "assistant", "content": text})
        else:
            self._emit({"type": "reasoning_delta", "reasoning_id": run_id, "content": text})

    def _close_runs(self) -> None:
        if self._open_run is None:
            return
        kind, run_id, _ = self._open_run
        self._open_run = None
        text = "".join(self._runs.pop(run_id, []))
        if kind == "message":
            self._emit({"type": "message", "message_id": run_id, "role": "assistant", "content": text})
        else:
            self._emit({"type": "reasoning", "reasoning_id": run_id, "content": text})

    def _unshown_block(self, block: object) -> None:
        name = block if isinstance(block, str) else "untyped"
        if name in self._unshown:
            return
        self._unshown.add(name)
        self._emit(
            {
                "type": "log",
                "level": "warn",
                "message": f"the ACP agent sent a {name!r} content block in a message; only text is kept",
            }
        )

    def _tool_call(self, update: dict[str, Any]) -> None:
        call_id = update.get("toolCallId")
        if not isinstance(call_id, str) or call_id in self._open_calls:
            return
        name = _tool_name(update)
        raw = update.get("rawInput")
        if "content" in update:
            self._call_content[call_id] = update["content"]
        self._open_calls[call_id] = name
        self._call_arguments[call_id] = raw if isinstance(raw, dict) else {}
        self._emit(
            {
                "type": "tool_call",
                "call_id": call_id,
                "name": name,
                "arguments": self._call_arguments[call_id],
            }
        )
        if update.get("status") in ("completed", "failed"):
            self._tool_update(update)

    def _tool_update(self, update: dict[str, Any]) -> None:
        call_id = update.get("toolCallId")
        status = update.get("status")
        if not isinstance(call_id, str):
            return
        if call_id not in self._open_calls:
            self._tool_call({**update, "status": None})
        elif "content" in update:
            self._call_content[call_id] = update["content"]
        if status not in ("completed", "failed"):
            return
        name = self._open_calls.pop(call_id, "tool")
        text = _content_text(self._call_content.pop(call_id, None))
        event: dict[str, Any] = {"type": "tool_result", "call_id": call_id, "name": name}
        if status == "completed":
            event.update(status="success", output=text)
        else:
            event.update(status="error", error=text or "the tool call failed")
        self._emit(event)

    def _close_open_calls(self, status: str, why: str) -> None:
        for call_id, name in list(self._open_calls.items()):
            self._emit(
                {"type": "tool_result", "call_id": call_id, "name": name, "status": status, "error": why}
            )
        self._open_calls.clear()

    def _wind_up(self, pipeline: Pipeline, ending: Ending) -> Iterator[p.AnyEvent]:
        """Before a made-up end: close the open message run and give every announced call its result."""
        with self._state:
            self._close_runs()
            cancelled = ending.code == ErrorCode.INTERRUPTED
            self._close_open_calls(
                "cancelled" if cancelled else "error", "the turn ended before this tool call finished"
            )
        while True:
            try:
                item = self._lines.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, bytes):
                yield from pipeline.feed_chunk(item)
        yield from pipeline.finish(ending)

    def _permission(self, params: dict[str, Any]) -> dict[str, Any]:
        """Answered by the permission mode: allowed only in full / bypassPermissions."""
        with self._state:
            return self._answer_permission(params)

    def _answer_permission(self, params: dict[str, Any]) -> dict[str, Any]:
        found = params.get("toolCall")
        tool: dict[str, Any] = found if isinstance(found, dict) else {}
        given = tool.get("toolCallId")
        call_id = given if isinstance(given, str) else p.new_id("call")
        self._close_runs()
        if call_id not in self._open_calls:
            self._tool_call({**tool, "toolCallId": call_id, "status": None})
        raw = tool.get("rawInput")
        raw = raw if isinstance(raw, dict) else self._call_arguments.get(call_id, {})
        allow = self.permission_mode in _ALLOWING
        if self._cancelled_with:  # ACP: after session/cancel, every permission request is answered cancelled
            reason = "the turn was cancelled: answered cancelled"
        else:
            reason = (
                f"answered by --permission-mode {self.permission_mode}: {'allowed' if allow else 'rejected'}"
            )
        self._emit(
            {
                "type": "permission_request",
                "call_id": call_id,
                "name": self._open_calls.get(call_id, _tool_name(tool)),
                "arguments": raw,
                "reason": reason,
            }
        )
        if self._cancelled_with:
            return {"outcome": {"outcome": "cancelled"}}
        options = [o for o in params.get("options") or [] if isinstance(o, dict)]
        wanted = ("allow_once", "allow_always") if allow else ("reject_once", "reject_always")
        for kind in wanted:
            for option in options:
                if option.get("kind") == kind and isinstance(option.get("optionId"), str):
                    return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}
        return {"outcome": {"outcome": "cancelled"}}

    # -- plumbing --------------------------------------------------------------------------------

    def _emit(self, event: dict[str, Any]) -> None:
        """Queue one canonical line, numbered in the agent's session once ``start`` is out (held until then)."""
        if event["type"] == "start":
            self._seq = 0
        elif self._seq < 0:
            self._early.append(event)
            return
        self._lines.put(
            p.JSON_ENCODER.encode({**event, "session_id": self._session_id, "seq": self._seq}) + b"\n"
        )
        self._seq += 1
        if event["type"] == "start":
            held, self._early = self._early, []
            for early in held:
                self._emit(early)

    def _log(self, text: str) -> None:
        self._logs.put(text)

    def _flush_logs(self) -> Iterator[p.AnyEvent]:
        while True:
            try:
                text = self._logs.get_nowait()
            except queue.Empty:
                return
            yield from self._pipeline.synthetic(p.Log(level="info", message=str(text)))


class _Garbage(Exception):
    """The agent answered something that is not what ACP says it must be."""


def _tool_name(update: dict[str, Any]) -> str:
    for key in ("name", "title", "kind"):
        value = update.get(key)
        if isinstance(value, str) and value:
            return value
    return "tool"


def _content_text(content: object) -> str:
    """The text of a tool call's content: text blocks, and diffs as ``path`` plus their new text."""
    if not isinstance(content, list):
        return ""
    parts = []
    for item in content:
        if not isinstance(item, dict):
            continue
        inner = item.get("content")
        if item.get("type") == "content" and isinstance(inner, dict) and isinstance(inner.get("text"), str):
            parts.append(inner["text"])
        elif item.get("type") == "diff" and isinstance(item.get("path"), str):
            parts.append(f"{item['path']}:\n{item.get('newText', '')}")
    return "\n".join(parts)


def _preview(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:119] + "…"


def _version() -> str:
    from agentstream._version import __version__

    return __version__
