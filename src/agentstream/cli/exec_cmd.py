"""``agentstream exec``: run the agent on a prompt and stream what it does.

Every run is one protocol stream. With ``--input-format stream-json`` each user
turn read from stdin is its own stream (its own ``session_id``, ``seq`` from 0,
one ``result``), and all of them continue one stored session; the process exits
with the last turn's code. See ``docs/agent.md``.

Only light modules are imported at the top, so ``exec --help`` stays fast; the
provider SDKs load on the first model call.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from agentstream.agent.permissions import PERMISSION_MODES
from agentstream.agent.providers import PROVIDER_NAMES
from agentstream.bus.publish import add_publish_options, attach_publisher
from agentstream.cli._options import add_output_options
from agentstream.errors import AgentstreamError, ErrorCode, UsageError
from agentstream.observe.otel import attach_otel

if TYPE_CHECKING:
    from agentstream.agent.conversation import Conversation
    from agentstream.agent.loop import AgentLoop
    from agentstream.agent.providers.base import Provider
    from agentstream.agent.sessions import SessionRecord, SessionStore
    from agentstream.protocol import NextAction
    from agentstream.stream import Stream

DEFAULT_SYSTEM = (
    "You are a careful software agent working in the directory {cwd}. Use the tools to look before you act, "
    "keep changes small, and finish with a short summary of what you found or changed."
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", nargs="?", help="what to do; - reads it from stdin")
    parser.add_argument(
        "-p", "--prompt", dest="prompt_option", metavar="PROMPT", help="the prompt, as an option"
    )
    add_output_options(parser)
    parser.add_argument(
        "--input-format",
        choices=("text", "stream-json"),
        default="text",
        help="stream-json: read user turns as NDJSON from stdin, one result per turn",
    )
    model = parser.add_argument_group("model")
    model.add_argument("--provider", choices=PROVIDER_NAMES, help="default: picked from the environment")
    model.add_argument("--model", help="model name (default: the provider's; or $AGENTSTREAM_MODEL)")
    model.add_argument(
        "--base-url", metavar="URL", help="an OpenAI-compatible server (vLLM, llama.cpp, LM Studio…)"
    )
    model.add_argument("--system", metavar="TEXT", help="replace the default system prompt")
    model.add_argument(
        "--max-tokens",
        type=int,
        default=8192,
        metavar="N",
        help="answer tokens per Anthropic call (default 8192)",
    )
    model.add_argument(
        "--thinking-budget", type=int, default=0, metavar="N", help="Anthropic extended thinking tokens"
    )
    model.add_argument(
        "--timeout", type=float, default=600.0, metavar="S", help="seconds per model call (default 600)"
    )
    model.add_argument(
        "--max-retries",
        type=int,
        default=None,
        metavar="N",
        help="retries of a failed call (default 3, $AGENTSTREAM_MAX_RETRIES)",
    )
    model.add_argument("--cassette", metavar="FILE", help="replay this cassette instead of calling a model")
    model.add_argument("--record", metavar="FILE", help="also record the model's turns to this cassette")
    agent = parser.add_argument_group("agent")
    agent.add_argument("--cwd", metavar="DIR", help="the workspace the tools work in (default: here)")
    agent.add_argument(
        "--max-turns", type=int, default=0, metavar="N", help="model calls per prompt (default: no limit)"
    )
    agent.add_argument("--permission-mode", choices=PERMISSION_MODES, default="workspace-write")
    agent.add_argument("--tools", metavar="LIST", help="comma-separated allow-list of tools")
    agent.add_argument(
        "--no-deltas", action="store_true", help="only complete messages, no message_delta events"
    )
    session = parser.add_argument_group("session")
    session.add_argument("--session-id", metavar="ID", help="the id of the new session")
    session.add_argument("--resume", metavar="ID", help="continue this stored session")
    session.add_argument(
        "--continue", dest="continue_", action="store_true", help="continue the latest session here"
    )
    add_publish_options(parser)


def run(args: argparse.Namespace) -> int:
    try:
        agent = _Agent.prepare(args)
    except AgentstreamError as exc:
        return _failed_before_start(args, exc)
    try:
        if args.input_format == "stream-json":
            return agent.run_turns(sys.stdin.buffer)
        return agent.run_turn(agent.first_prompt or "")
    finally:
        agent.loop.provider.close()


def _failed_before_start(args: argparse.Namespace, exc: AgentstreamError) -> int:
    """Setup failed (bad option, missing session…): still one valid stream, ending in the error."""
    from agentstream.stream import Stream

    with Stream("exec", output_format=args.output_format, dialect=args.dialect) as stream:
        stream.fail(exc.code, exc.message, fix=exc.fix, exit_code=exc.exit_code)
    return exc.exit_code


@dataclass
class _Agent:
    """Everything one ``exec`` process needs across its turns."""

    args: argparse.Namespace
    loop: AgentLoop
    store: SessionStore
    record: SessionRecord
    resumed: bool
    first_prompt: str | None
    cwd: Path

    @classmethod
    def prepare(cls, args: argparse.Namespace) -> _Agent:
        from agentstream.agent.conversation import Conversation
        from agentstream.agent.sessions import SessionRecord, SessionStore

        prompt = _first_prompt(args)
        cwd = _workspace(args.cwd)
        store = SessionStore()
        previous = _previous_session(store, args, cwd)
        provider = _provider(args)
        conversation = Conversation(previous.messages if previous else ())
        loop = _loop(args, provider, conversation, cwd)
        record = previous or SessionRecord.new(
            session_id=args.session_id or _new_session_id(),
            cwd=str(cwd),
            provider=provider.name,
            model=provider.model,
            prompt=prompt or "",
        )
        record.provider, record.model = provider.name, provider.model
        return cls(args, loop, store, record, previous is not None, prompt, cwd)

    def run_turn(self, prompt: str, *, first: bool = True) -> int:
        """One prompt, one stream. Returns its exit code (raises SystemExit for a non-zero one it owns)."""
        stream = self._stream(first)
        close_publisher = attach_publisher(stream, self.args)
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
            output_format=self.args.output_format,
            dialect=self.args.dialect,
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


def _first_prompt(args: argparse.Namespace) -> str | None:
    if args.prompt is not None and args.prompt_option is not None:
        raise UsageError("the prompt was given twice", fix="pass it either as PROMPT or with -p, not both")
    prompt = args.prompt if args.prompt is not None else args.prompt_option
    if prompt == "-":
        if args.input_format == "stream-json":
            raise UsageError(
                "with --input-format stream-json, stdin carries the turns", fix="drop the - prompt"
            )
        prompt = sys.stdin.read()
    if args.input_format == "text" and not (prompt or "").strip():
        raise UsageError("no prompt", fix="pass PROMPT, -p PROMPT, or - to read it from stdin")
    return prompt


def _workspace(cwd: str | None) -> Path:
    path = Path(cwd or os.getcwd()).resolve()
    if not path.is_dir():
        raise UsageError(f"--cwd {cwd} is not a directory", fix="pass an existing directory")
    return path


def _new_session_id() -> str:
    from agentstream.protocol import new_id

    return new_id("ses")


def _previous_session(store: SessionStore, args: argparse.Namespace, cwd: Path) -> SessionRecord | None:
    """The session to continue (``--resume`` / ``--continue``), after checking the options agree."""
    if args.resume and args.continue_:
        raise UsageError("--resume and --continue both pick a session", fix="use one of them")
    if args.session_id and (args.resume or args.continue_):
        raise UsageError("--session-id names a new session", fix="drop it when resuming")
    if args.resume:
        return store.load(args.resume)
    if args.continue_:
        latest = store.latest(str(cwd))
        if latest is None:
            raise AgentstreamError(
                f"no stored session for {cwd}",
                code=ErrorCode.SESSION_NOT_FOUND,
                fix="start one without --continue",
            )
        return latest
    if args.session_id:
        _require_new(store, args.session_id)
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


def _provider(args: argparse.Namespace) -> Provider:
    from agentstream.agent.providers import ProviderSettings, select_provider

    settings = ProviderSettings(
        model=args.model,
        base_url=args.base_url,
        timeout_s=args.timeout,
        max_tokens=args.max_tokens,
        thinking_budget=args.thinking_budget,
        cassette=args.cassette,
    )
    selection = select_provider(args.provider, settings)
    if selection.notice:
        sys.stderr.write(selection.notice + "\n")
    if not args.record:
        return selection.provider
    from agentstream.agent.providers.replay import RecordingProvider

    return RecordingProvider(selection.provider, args.record)


def _loop(args: argparse.Namespace, provider: Provider, conversation: Conversation, cwd: Path) -> AgentLoop:
    from agentstream.agent.loop import AgentLoop, LoopOptions, ProgressRelay, retry_settings
    from agentstream.agent.tools import Toolbox, ToolContext

    relay = ProgressRelay()
    allow = None if args.tools is None else [name.strip() for name in args.tools.split(",") if name.strip()]
    toolbox = Toolbox(ToolContext(workspace=cwd, mode=args.permission_mode, progress=relay), allow)
    max_retries, retry_base_ms = retry_settings()
    options = LoopOptions(
        system=args.system if args.system is not None else DEFAULT_SYSTEM.format(cwd=cwd),
        max_turns=max(args.max_turns, 0),
        deltas=not args.no_deltas,
        max_retries=max(args.max_retries if args.max_retries is not None else max_retries, 0),
        retry_base_ms=retry_base_ms,
    )
    return AgentLoop(provider, toolbox, conversation, options, relay)


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
