"""One ``exec`` process: set up the provider, tools and session, then run each user turn as a stream.

The command line (``cli/exec_cmd.py``) only parses options into :class:`ExecOptions`;
everything that decides how a run behaves lives here, so other front ends (a
worker, a server, another protocol) can run the agent the same way.

Every run is one protocol stream. With ``input_format="stream-json"`` each user
turn read from stdin is its own stream (its own ``session_id``, ``seq`` from 0,
one ``result``), and all of them continue one stored session.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from agentstream.errors import AgentstreamError, ErrorCode, UsageError

if TYPE_CHECKING:
    from agentstream.agent.permissions import PermissionMode
    from agentstream.render import OutputFormat
    from agentstream.agent.conversation import Conversation
    from agentstream.agent.loop import AgentLoop
    from agentstream.agent.providers.base import Provider
    from agentstream.agent.sessions import SessionRecord, SessionStore
    from agentstream.protocol import NextAction
    from agentstream.stream import Stream

__all__ = ["DEFAULT_SYSTEM", "AgentRunner", "ExecOptions", "fail_before_start"]

DEFAULT_SYSTEM = (
    "You are a careful software agent working in the directory {cwd}. Use the tools to look before you act, "
    "keep changes small, and finish with a short summary of what you found or changed."
)


@dataclass(frozen=True)
class ExecOptions:
    """What one ``exec`` run was asked to do (the names match ``exec``'s option names)."""

    prompt: str | None
    input_format: str = "text"
    output_format: OutputFormat = "stream-json"
    dialect: str | None = None
    provider: str | None = None
    model: str | None = None
    base_url: str | None = None
    system: str | None = None
    max_tokens: int = 8192
    thinking_budget: int = 0
    timeout: float = 600.0
    max_retries: int | None = None
    cassette: str | None = None
    record: str | None = None
    cwd: str | None = None
    max_turns: int = 0
    permission_mode: PermissionMode = "workspace-write"
    tools: str | None = None
    no_deltas: bool = False
    session_id: str | None = None
    resume: str | None = None
    continue_: bool = False
    bus: str | None = None
    no_publish: bool = False


def run(options: ExecOptions, stdin: IO[bytes] | None = None) -> int:
    """Run ``exec`` to the end; the exit code (every failure is still a valid stream)."""
    try:
        agent = AgentRunner.prepare(options)
    except AgentstreamError as exc:
        return fail_before_start(options, exc)
    try:
        if options.input_format == "stream-json":
            return agent.run_turns(stdin or sys.stdin.buffer)
        return agent.run_turn(options.prompt or "")
    finally:
        agent.loop.provider.close()


def fail_before_start(options: ExecOptions, exc: AgentstreamError) -> int:
    """Setup failed (bad option, missing session…): still one valid stream, ending in the error."""
    from agentstream import stream

    return stream.fail_before_start("exec", exc, output_format=options.output_format, dialect=options.dialect)


@dataclass
class AgentRunner:
    """Everything one ``exec`` process needs across its turns."""

    options: ExecOptions
    loop: AgentLoop
    store: SessionStore
    record: SessionRecord
    resumed: bool
    first_prompt: str | None
    cwd: Path

    @classmethod
    def prepare(cls, options: ExecOptions) -> AgentRunner:
        from agentstream.agent.conversation import Conversation
        from agentstream.agent.sessions import SessionRecord, SessionStore

        prompt = options.prompt
        cwd = _workspace(options.cwd)
        store = SessionStore()
        previous = _previous_session(store, options, cwd)
        provider = _provider(options)
        conversation = Conversation(previous.messages if previous else ())
        loop = _loop(options, provider, conversation, cwd)
        record = previous or SessionRecord.new(
            session_id=options.session_id or _new_session_id(),
            cwd=str(cwd),
            provider=provider.name,
            model=provider.model,
            prompt=prompt or "",
        )
        record.provider, record.model = provider.name, provider.model
        return cls(options, loop, store, record, previous is not None, prompt, cwd)

    def run_turn(self, prompt: str, *, first: bool = True) -> int:
        """One prompt, one stream. Returns its exit code (raises SystemExit for a non-zero one it owns)."""
        from agentstream.bus.publish import attach_publisher
        from agentstream.observe.otel import attach_otel

        stream = self._stream(first)
        close_publisher = attach_publisher(stream, self.options.bus, enabled=not self.options.no_publish)
        attach_otel(stream)
        try:
            with stream:
                if not self.record.title:
                    from agentstream.agent.sessions import shorten_title

                    self.record.title = shorten_title(prompt)
                try:
                    outcome = self.loop.run(stream, prompt)
                except BaseException as exc:
                    self._save(stream, _status_of(exc))
                    raise
                self._save(stream, outcome.status)
                outcome.finish(stream, self._next_actions())
        finally:
            close_publisher()
        return stream.result.exit_code if stream.result else 1

    def run_turns(self, source: IO[bytes]) -> int:
        """User turns from NDJSON on ``source``, one stream each; the last turn's code.

        Each turn's Stream owns the process while it runs (signals, stdout
        isolation) and hands the signals back when it ends.
        """
        code = 0
        first = True  # the first real turn of a new session carries the session's id
        for turn in _user_turns(source, self.first_prompt):
            try:
                code = self._turn_or_error(turn, first)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
                if code >= 128:  # interrupted, or the reader went away: stop reading turns
                    raise
            first = first and not isinstance(turn, str)
        return code

    def _turn_or_error(self, turn: str | UsageError, first: bool) -> int:
        if isinstance(turn, str):
            return self.run_turn(turn, first=first)
        with self._stream(first=False) as stream:
            stream.fail(turn.code, turn.message, fix=turn.fix, exit_code=turn.exit_code)
        return turn.exit_code

    def _stream(self, first: bool) -> Stream:
        """The first stream of a new session carries the session's id; later ones point back to it."""
        from agentstream.stream import Stream

        own_id = first and not self.resumed
        provider = self.loop.provider
        return Stream(
            "exec",
            output_format=self.options.output_format,
            dialect=self.options.dialect,
            session_id=self.record.session_id if own_id else None,
            parent_session_id=None if own_id else self.record.session_id,
            cwd=str(self.cwd),
            model=provider.model,
            provider=provider.name,
            tools=self.loop.toolbox.names,
        )

    def _save(self, stream: Stream, status: str) -> None:
        """Store the conversation so far; a store failure costs a warning, never the run."""
        record = self.record
        record.status = status
        record.messages = self.loop.conversation.to_json()
        record.turn_count += stream.turn_count
        record.usage = _add_usage(record.usage, stream)
        try:
            self.store.save(record)
        except AgentstreamError as exc:
            sys.stderr.write(f"agentstream exec: warning: the session was not saved: {exc.message}\n")

    def _next_actions(self) -> list[NextAction]:
        from agentstream.actions import resume_session_action

        return [resume_session_action(self.record.session_id)]


# -- setup helpers ------------------------------------------------------------------


def _workspace(cwd: str | None) -> Path:
    path = Path(cwd or os.getcwd()).resolve()
    if not path.is_dir():
        raise UsageError(f"--cwd {cwd} is not a directory", fix="pass an existing directory")
    return path


def _new_session_id() -> str:
    from agentstream.protocol import new_id

    return new_id("ses")


def _previous_session(store: SessionStore, options: ExecOptions, cwd: Path) -> SessionRecord | None:
    """The session to continue (``--resume`` / ``--continue``), after checking the options agree."""
    if options.resume and options.continue_:
        raise UsageError("--resume and --continue both pick a session", fix="use one of them")
    if options.session_id and (options.resume or options.continue_):
        raise UsageError("--session-id names a new session", fix="drop it when resuming")
    if options.resume:
        return store.load(options.resume)
    if options.continue_:
        latest = store.latest(str(cwd))
        if latest is None:
            raise AgentstreamError(
                f"no stored session for {cwd}",
                code=ErrorCode.SESSION_NOT_FOUND,
                fix="start one without --continue",
            )
        return latest
    if options.session_id:
        _require_new(store, options.session_id)
    return None


def _require_new(store: SessionStore, session_id: str) -> None:
    try:
        existing = store.load(session_id)
    except AgentstreamError:
        return
    if existing.session_id == session_id:
        raise UsageError(
            f"session {session_id} already exists", fix=f"continue it with --resume {session_id}"
        )


def _provider(options: ExecOptions) -> Provider:
    from agentstream.agent.providers import ProviderSettings, select_provider

    settings = ProviderSettings(
        model=options.model,
        base_url=options.base_url,
        timeout_s=options.timeout,
        max_tokens=options.max_tokens,
        thinking_budget=options.thinking_budget,
        cassette=options.cassette,
    )
    selection = select_provider(options.provider, settings)
    if selection.notice:
        sys.stderr.write(selection.notice + "\n")
    if not options.record:
        return selection.provider
    from agentstream.agent.providers.replay import RecordingProvider

    return RecordingProvider(selection.provider, options.record)


def _loop(options: ExecOptions, provider: Provider, conversation: Conversation, cwd: Path) -> AgentLoop:
    from agentstream.agent.loop import AgentLoop, LoopOptions, ProgressRelay, retry_settings
    from agentstream.agent.tools import Toolbox, ToolContext

    relay = ProgressRelay()
    allow = (
        None if options.tools is None else [name.strip() for name in options.tools.split(",") if name.strip()]
    )
    toolbox = Toolbox(ToolContext(workspace=cwd, mode=options.permission_mode, progress=relay), allow)
    max_retries, retry_base_ms = retry_settings()
    loop_options = LoopOptions(
        system=options.system if options.system is not None else DEFAULT_SYSTEM.format(cwd=cwd),
        max_turns=max(options.max_turns, 0),
        deltas=not options.no_deltas,
        max_retries=max(options.max_retries if options.max_retries is not None else max_retries, 0),
        retry_base_ms=retry_base_ms,
    )
    return AgentLoop(provider, toolbox, conversation, loop_options, relay)


def _status_of(exc: BaseException) -> str:
    from agentstream.stream import Interrupted

    return "interrupted" if isinstance(exc, (Interrupted, KeyboardInterrupt)) else "failed"


def _add_usage(totals: dict[str, Any], stream: Stream) -> dict[str, Any]:
    import msgspec

    merged = dict(totals)
    for name, value in msgspec.structs.asdict(stream.usage).items():
        if isinstance(value, (int, float)):
            merged[name] = round(merged.get(name, 0) + value, 10)
    return merged


# -- stream-json input ----------------------------------------------------------------


def _user_turns(source: IO[bytes], first: str | None) -> Iterator[str | UsageError]:
    """Each user turn's text, or the UsageError that says why a line is not one."""
    if first:
        yield first
    for number, line in enumerate(source, 1):
        if line.strip():
            try:
                yield _user_text(line, number)
            except UsageError as exc:
                yield exc


_TURN_FIX = 'send one JSON object per line: {"type":"message","role":"user","content":"..."}'


def _user_text(line: bytes, number: int) -> str:
    """The text of a canonical ``message`` line or a Claude-style ``user`` line."""
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise UsageError(f"stdin line {number} is not JSON: {exc}", fix=_TURN_FIX) from None
    if not isinstance(obj, dict):
        raise UsageError(f"stdin line {number} is not a JSON object", fix=_TURN_FIX)
    if obj.get("type") == "message" and obj.get("role") == "user":
        content = obj.get("content")
    elif obj.get("type") == "user" and isinstance(obj.get("message"), dict):
        content = obj["message"].get("content")
    else:
        raise UsageError(
            f"stdin line {number} is not a user message (type {obj.get('type')!r})", fix=_TURN_FIX
        )
    text = _content_text(content)
    if text is None or not text.strip():
        raise UsageError(f"stdin line {number} has no text content", fix=_TURN_FIX)
    return text


def _content_text(content: object) -> str | None:
    """A string, or the text blocks of a content list joined; None for anything else."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        texts = [part for part in parts if isinstance(part, str)]
        if parts and len(texts) == len(parts):
            return "\n".join(texts)
    return None
