"""One ``exec`` process: set up the provider, tools and session, then run each user turn as a stream.

The command line (``cli/exec_cmd.py``) only parses options into :class:`ExecOptions`;
everything that decides how a run behaves lives here, so other front ends (a
worker, a server, another protocol) can run the agent the same way.

Every run is one protocol stream. With ``input_format="stream-json"`` the run is
a two-way session (:mod:`agentstream.agent.control`): stdin is read on its own
thread, each user turn from it is its own stream (its own ``session_id``, ``seq``
from 0, one ``result``), all of them continue one stored session, and interrupts,
permission decisions and settings act on the turn that is running.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from agentstream._secrets import event_redactor
from agentstream._signals import Interrupted, SignalAfterResult, note_final_exit
from agentstream.agent.mcp import TOOL_PREFIX as MCP_TOOL_PREFIX
from agentstream.errors import AgentstreamError, ErrorCode, UsageError, error_text, exit_code_for_signal

if TYPE_CHECKING:
    import argparse

    from agentstream.agent.control import OutputChannel, TwoWaySession
    from agentstream.agent.conversation import Conversation
    from agentstream.agent.interrupt import TurnControl
    from agentstream.agent.loop import AgentLoop
    from agentstream.agent.mcp import McpServer, McpTools
    from agentstream.agent.permissions import Approvals
    from agentstream.agent.providers.base import Provider
    from agentstream.agent.sessions import SessionRecord, SessionStore
    from agentstream.agent.tools import Tool
    from agentstream.protocol import NextAction
    from agentstream.render import ColorChoice, OutputFormat
    from agentstream.stream import Stream

__all__ = ["DEFAULT_SYSTEM", "AgentRunner", "ExecOptions", "fail_before_start"]

DEFAULT_HEARTBEAT_S = 15.0
"""Seconds of silence after which a two-way session's turn emits a ``heartbeat``."""

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
    color: ColorChoice = "auto"
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
    max_budget_usd: float | None = None
    permission_mode: str = "workspace-write"
    allow_bypass: bool = False
    permission_prompt_tool: str | None = None
    permission_timeout: float = 300.0
    heartbeat: float | None = None
    include_partial_messages: bool = False
    append_system: str | None = None
    tools: str | None = None
    allowed_tools: str | None = None
    disallowed_tools: str | None = None
    no_deltas: bool = False
    session_id: str | None = None
    resume: str | None = None
    continue_: bool = False
    fork_session: bool = False
    bus: str | None = None
    no_publish: bool = False
    mcp_config: Sequence[str] | None = None
    """Claude Code's ``--mcp-config`` values (:func:`agentstream.agent.mcp.servers_from_config`)."""
    mcp_servers: Sequence[McpServer] = ()
    """MCP servers given otherwise (ACP's ``session/new``), connected as those of ``mcp_config``."""

    @classmethod
    def from_args(cls, args: argparse.Namespace, prompt: str | None = None) -> ExecOptions:
        """The options a command line gave: every field the parsed namespace has an option of the same name for
        (``exec`` has them all; ``acp`` the model and permission ones), the rest left at their defaults."""
        given = vars(args)
        return cls(
            prompt=prompt,
            **{
                field.name: given[field.name]
                for field in fields(cls)
                if field.name in given and field.name != "prompt"
            },
        )


def run(options: ExecOptions, stdin: IO[bytes] | None = None) -> int:
    """Run ``exec`` to the end; the exit code (every failure is still a valid stream)."""
    from agentstream._secrets import redact_stderr

    redact_stderr()
    try:
        agent = AgentRunner.prepare(options)
    except AgentstreamError as exc:
        return fail_before_start(options, exc)
    try:
        if options.input_format == "stream-json":
            return agent.run_session(stdin or _stdin_of_our_own())
        return agent.run_turn(options.prompt or "")
    finally:
        agent.close()


def _stdin_of_our_own() -> IO[bytes]:
    """Standard input for the session's reader thread, as an object apart from ``sys.stdin``.

    That thread may still be blocked in a read when the process exits (a signal,
    the last turn done). Were it reading ``sys.stdin``, the interpreter's shutdown
    would wait for the lock the read holds and abort the process (SIGABRT), after
    a stream that ended with another exit code.
    """
    try:
        return open(os.dup(sys.stdin.fileno()), "rb", closefd=True)  # the thread owns it
    except (AttributeError, OSError, ValueError):  # no usable stdin: let the session find that out
        return sys.stdin.buffer


def fail_before_start(options: ExecOptions, exc: AgentstreamError) -> int:
    """Setup failed (bad option, missing session, no provider…): still one valid stream, ending in the error.

    The stream is published like any run, under ``--session-id`` when one was given
    (a worker names its job's run that way), so a follower sees why the run failed.
    """
    from agentstream import stream
    from agentstream.bus.publish import attach_publisher

    sys.stderr.write(error_text("agentstream exec", exc.code, exc.message, exc.fix))  # stdout has the stream
    return stream.fail_before_start(
        "exec",
        exc,
        output_format=options.output_format,
        dialect=options.dialect,
        color=options.color,
        session_id=options.session_id if not isinstance(exc, SessionExistsError) else None,
        redact=event_redactor(),
        attach=lambda started: attach_publisher(started, options.bus, enabled=not options.no_publish),
    )


class SessionExistsError(UsageError):
    """``--session-id`` names a session that already exists (so that id is not this run's)."""


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
    control: TurnControl
    session: TwoWaySession | None = None
    output: OutputChannel | None = None
    client_interrupted: bool = False
    """The last turn was stopped by the client (the session goes on), not by a signal."""
    sink: IO[bytes] | None = None
    """Where each turn's stream goes instead of stdout, for front ends that present the events
    themselves (ACP); such streams do not own the process."""
    previous: Stream | None = None
    """The last turn's stream, which the next one follows (a dialect's session-wide figures carry on)."""

    mcp: McpTools | None = None
    """The run's MCP servers, when it was given any."""

    @property
    def mcp_statuses(self) -> list[dict[str, Any]]:
        """Each MCP server given, connected or not, as Claude Code's ``mcp_status`` describes one."""
        return [status.as_claude() for status in self.mcp.statuses] if self.mcp is not None else []

    def close(self) -> None:
        """Release the model client and stop the MCP servers."""
        self.loop.provider.close()
        if self.mcp is not None:
            self.mcp.close()

    @classmethod
    def prepare(cls, options: ExecOptions) -> AgentRunner:
        from agentstream.agent.conversation import Conversation
        from agentstream.agent.sessions import SessionRecord, SessionStore

        if options.dialect:  # the command line's own mistakes first, before the environment's
            from agentstream.dialects import get_writable_dialect

            get_writable_dialect(options.dialect)
        prompt = options.prompt
        cwd = _workspace(options.cwd)
        store = SessionStore()
        previous = _previous_session(store, options, cwd)
        provider = _provider(options)
        from agentstream.agent.interrupt import TurnControl

        conversation = Conversation(previous.messages if previous else ())
        control = TurnControl()
        mcp = _mcp_tools(options, cwd)
        try:
            loop = _loop(options, provider, conversation, cwd, control, mcp.tools if mcp is not None else ())
        except BaseException:
            if mcp is not None:  # a bad option found after the servers started: they stop with the run
                mcp.close()
            raise
        record = previous or SessionRecord.new(
            session_id=options.session_id or _new_session_id(),
            cwd=str(cwd),
            provider=provider.name,
            model=provider.model,
            prompt=prompt or "",
        )
        record.provider, record.model = provider.name, provider.model
        runner = cls(options, loop, store, record, previous is not None, prompt, cwd, control)
        runner.mcp = mcp
        return runner

    def run_turn(self, prompt: str, *, first: bool = True) -> int:
        """One prompt, one stream. Returns its exit code (raises SystemExit for a non-zero one it owns)."""
        from agentstream.bus.publish import attach_publisher
        from agentstream.observe.otel import attach_otel

        stream = self._stream(first)
        close_publisher = attach_publisher(stream, self.options.bus, enabled=not self.options.no_publish)
        attach_otel(stream)
        self.client_interrupted = False
        try:
            with stream:
                if not self.record.title:
                    from agentstream.agent.sessions import shorten_title

                    self.record.title = shorten_title(prompt)
                self._run_loop(stream, prompt)
        finally:
            close_publisher()
            if self.session is not None:
                self.session.stream = None
        return stream.result.exit_code if stream.result else 1

    def _cancelled_before_it_began(self, stream: Stream) -> bool:
        """Whether the client interrupted the turn that runs in ``stream`` before it began."""
        return self.session is not None and self.session.begin_turn(stream)

    def _run_loop(self, stream: Stream, prompt: str) -> None:
        from agentstream.agent.interrupt import TurnInterrupted

        self.control.begin()
        if self._cancelled_before_it_began(stream):
            self.control.cancel.set()  # it stops at its first step
        try:
            with self._heartbeats(stream):
                outcome = self.loop.run(stream, prompt)
        except TurnInterrupted:
            self._save(stream, "interrupted")
            self._end_interrupted(stream)
            return
        except BaseException as exc:
            self._save(stream, _status_of(exc))
            raise
        self._save(stream, outcome.status)
        outcome.finish(stream, self._next_actions())

    def _end_interrupted(self, stream: Stream) -> None:
        """The client stopped the turn, or went away (stdout closed): end this turn's stream accordingly."""
        from agentstream.errors import ExitCode

        if self.output is not None and self.output.closed:
            stream.finish(ok=False, exit_code=ExitCode.SIGPIPE, subtype="output_closed")
            return
        self.client_interrupted = True
        stream.fail(
            ErrorCode.INTERRUPTED,
            "interrupted by the client",
            exit_code=ExitCode.SIGINT,
            subtype="interrupted",
            next_actions=self._next_actions(),
        )

    def _heartbeats(self, stream: Stream) -> Any:
        """Heartbeats while the turn waits (two-way sessions: on unless ``--heartbeat 0``)."""
        from contextlib import nullcontext

        from agentstream.agent.control import HeartbeatTimer

        every = self.options.heartbeat
        if every is None:
            every = DEFAULT_HEARTBEAT_S if self.session is not None else 0.0
        return HeartbeatTimer(stream, every, self.control) if every > 0 else nullcontext()

    def run_session(self, source: IO[bytes]) -> int:
        """A two-way session on ``source``: one stream per user turn; the last turn's code.

        Each turn's Stream owns the process while it runs (signals) and hands the
        signals back when it ends. A turn the client interrupted does not end the
        session; a signal or a vanished reader does.
        """
        from agentstream.agent.control import CanonicalInput, OutputChannel, TwoWaySession

        self.output = OutputChannel()
        reader: Any
        if self.options.dialect == "claude":
            from agentstream.dialects.claude_control import ClaudeInput

            reader = ClaudeInput()
        else:
            reader = CanonicalInput()
        assert self.loop.approvals is not None, "a two-way session always has approvals"
        from agentstream.agent.permissions import BYPASS_MODES

        self.session = TwoWaySession(
            source,
            reader,
            self.output,
            control=self.control,
            approvals=self.loop.approvals,
            toolbox=self.loop.toolbox,
            provider=self.loop.provider,
            permission_timeout_s=self.options.permission_timeout,
            bypass_allowed=self.options.allow_bypass or self.options.permission_mode in BYPASS_MODES,
            mcp_servers=self.mcp_statuses,
        )
        if not _prompts_on(self.options):
            self.loop.approvals.ask = None
        self.session.start(self.first_prompt)
        code = 0
        first = True  # the first real turn of a new session carries the session's id
        turns = self.session.turns()
        while True:
            try:
                turn = next(turns)  # waiting for the client
            except StopIteration:
                return code
            except Interrupted as stop:
                from agentstream.stream import stream_was_written

                if not stream_was_written():
                    raise  # before any turn: the command's own ending says so
                return self._interrupted_between_turns(stop.signum)
            try:
                code = self._turn_or_error(turn, first)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
                if isinstance(exc, SignalAfterResult) or (code >= 128 and not self.client_interrupted):
                    raise  # a signal (during the turn or as it ended), or the reader went away
            first = first and not isinstance(turn, str)
            # The turn is over: a signal now interrupts the session, in a stream of its own.
            note_final_exit(None)

    def _interrupted_between_turns(self, signum: int) -> int:
        """A signal while the session waited for its next turn: a stream of its own says so, with the code."""
        import signal

        code = exit_code_for_signal(signum)
        with self._stream(first=False) as stream:
            stream.fail(
                ErrorCode.INTERRUPTED,
                f"interrupted by {signal.Signals(signum).name} between turns",
                exit_code=code,
                subtype="interrupted",
            )
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
        self.previous = Stream(
            "exec",
            output_format=self.options.output_format,
            dialect=self.options.dialect,
            color=self.options.color,
            out=self.sink or cast("IO[bytes] | None", self.output),  # it has the write/flush a Stream uses
            owns_process=self.sink is None,
            session_id=self.record.session_id if own_id else None,
            parent_session_id=None if own_id else self.record.session_id,
            cwd=str(self.cwd),
            model=provider.model,
            provider=provider.name,
            tools=self.loop.toolbox.names,
            permission_mode=self._permission_mode(),
            redact=event_redactor(),
            follows=self.previous,
            dialect_options=self._dialect_options(),
        )
        return self.previous

    def _dialect_options(self) -> dict[str, Any] | None:
        """Claude Code's lines are written as ``claude -p`` writes them: ``stream_event`` lines only when asked, and
        the MCP servers it was given in ``init``, connected or not."""
        if self.options.dialect != "claude":
            return None
        return {"partial_messages": self.options.include_partial_messages, "mcp_servers": self.mcp_statuses}

    def _permission_mode(self) -> str:
        """The mode the next turn runs in: a two-way session's client may have changed it."""
        approvals = self.loop.approvals
        return approvals.mode if approvals is not None else self.options.permission_mode

    def _save(self, stream: Stream, status: str) -> None:
        """Store the conversation so far (an interrupted turn's with a note that says so, for the next turn or a
        resume); a store failure costs a warning, never the run."""
        record = self.record
        record.status = status
        if status == "interrupted":
            self.loop.conversation.note_interrupted(in_tool=self.loop.stopped_in_tool)
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
    picked = options.resume or options.continue_
    if options.fork_session and not picked:
        raise UsageError(
            "--fork-session copies a stored session", fix="name it with --resume ID or --continue"
        )
    if options.session_id and picked and not options.fork_session:
        raise UsageError(
            "--session-id names a new session", fix="drop it when resuming, or add --fork-session"
        )
    if options.session_id:
        _require_new(store, options.session_id)
    if options.resume:
        previous = store.load(options.resume)
    elif options.continue_:
        latest = store.latest(str(cwd))
        if latest is None:
            raise AgentstreamError(
                f"no stored session for {cwd}",
                code=ErrorCode.SESSION_NOT_FOUND,
                fix="start one without --continue",
            )
        previous = latest
    else:
        return None
    if options.fork_session:  # the copy goes on; the stored one stays as it was
        return dataclasses.replace(previous, session_id=options.session_id or _new_session_id())
    return previous


def _require_new(store: SessionStore, session_id: str) -> None:
    try:
        existing = store.load(session_id)
    except AgentstreamError:
        return
    if existing.session_id == session_id:
        raise SessionExistsError(
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
    provider = select_provider(options.provider, settings)
    if not options.record:
        return provider
    from agentstream.agent.providers.replay import RecordingProvider

    return RecordingProvider(provider, options.record)


def _mcp_tools(options: ExecOptions, cwd: Path) -> McpTools | None:
    """The run's MCP servers started, or None without any; what was not connected is said on stderr."""
    from agentstream.agent.mcp import McpTools, servers_from_config

    servers, problems = servers_from_config(options.mcp_config)
    servers += [server for server in options.mcp_servers if server.name not in {s.name for s in servers}]
    for problem in problems:
        sys.stderr.write(f"agentstream exec: warning: {problem}\n")
    if not servers:
        return None
    mcp = McpTools(servers, cwd)
    for status in mcp.statuses:
        if status.status != "connected":
            sys.stderr.write(
                f"agentstream exec: warning: MCP server {status.name} not connected: {status.error}\n"
            )
    for server, tool, offered in mcp.renamed:
        sys.stderr.write(
            f"agentstream exec: warning: MCP tool {tool!r} of server {server} is offered as {offered}: its name, "
            "made safe for the model's API, is another tool's\n"
        )
    return mcp


def _loop(
    options: ExecOptions,
    provider: Provider,
    conversation: Conversation,
    cwd: Path,
    control: TurnControl,
    mcp_tools: Sequence[Tool] = (),
) -> AgentLoop:
    from agentstream.agent.loop import AgentLoop, LoopOptions, ProgressRelay, retry_settings
    from agentstream.agent.permissions import Approvals, toolbox_mode
    from agentstream.agent.tools import Toolbox, ToolContext

    relay = ProgressRelay()
    two_way = options.input_format == "stream-json"
    mode = options.permission_mode
    approvals = Approvals(
        mode,
        always_allowed=frozenset(_names(options.allowed_tools, options) or ()),
        claude_words=options.dialect == "claude",
    )
    context = ToolContext(
        workspace=cwd,
        mode=toolbox_mode(mode, grantable=two_way or _grants_more(approvals)),
        progress=relay,
        interrupt=control.cancel if two_way else None,
    )
    denied = set(_names(options.disallowed_tools, options) or ())
    toolbox = Toolbox(context, _tool_list(options), extra=[t for t in mcp_tools if t.spec.name not in denied])
    max_retries, retry_base_ms = retry_settings()
    loop_options = LoopOptions(
        system=_system_prompt(options, cwd),
        max_turns=max(options.max_turns, 0),
        max_budget_usd=options.max_budget_usd or 0.0,
        deltas=not options.no_deltas,
        max_retries=max(options.max_retries if options.max_retries is not None else max_retries, 0),
        retry_base_ms=retry_base_ms,
    )
    return AgentLoop(
        provider,
        toolbox,
        conversation,
        loop_options,
        relay,
        approvals=approvals,
        control=control if two_way else None,
    )


def _grants_more(approvals: Approvals) -> bool:
    """Whether ``--allowedTools`` lets a tool run that the mode would not run by itself.

    (In a two-way session a prompt, a hook or a new mode may grant one at any time.)
    """
    from agentstream.agent.tools import installed_tools

    tools = installed_tools()
    return any(
        not approvals.runs_by_itself(tools[name].spec.access)
        for name in approvals.always_allowed
        if name in tools
    )


def _prompts_on(options: ExecOptions) -> bool:
    """Permission prompts over stdio: asked on stdout, answered on stdin (two-way sessions only)."""
    return options.permission_prompt_tool == "stdio" and options.input_format == "stream-json"


def _system_prompt(options: ExecOptions, cwd: Path) -> str:
    """``--system`` replaces the default (Claude's SDK sends ``--system-prompt ""`` for "the default")."""
    system = options.system
    if system is None or (system == "" and options.dialect == "claude"):
        system = DEFAULT_SYSTEM.format(cwd=cwd)
    if options.append_system:
        system = f"{system}\n\n{options.append_system}"
    return system


CLAUDE_TOOL_NAMES: dict[str, str] = {
    "Bash": "shell",
    "Read": "read_file",
    "Write": "write_file",
    "Edit": "edit_file",
    "MultiEdit": "edit_file",
    "Glob": "glob",
    "Grep": "grep",
    "LS": "list_dir",
}
"""Claude Code's tool names for the tools agentstream has (``--tools``, ``--allowedTools`` in its dialect)."""


def _names(text: str | None, options: ExecOptions) -> list[str] | None:
    """A comma-separated tool list; in Claude's dialect its tool names are translated, others dropped."""
    if text is None:
        return None
    names = [name.strip() for name in text.split(",") if name.strip()]
    if options.dialect != "claude":
        return names
    from agentstream.agent.tools import TOOL_NAMES

    kept = []
    for name in names:
        ours = CLAUDE_TOOL_NAMES.get(name, name)
        if ours in TOOL_NAMES or ours.startswith(MCP_TOOL_PREFIX):
            kept.append(ours)
        else:
            sys.stderr.write(f"agentstream exec: debug: no tool here matches {name!r}; ignored\n")
    return kept


def _tool_list(options: ExecOptions) -> list[str] | None:
    """The allow-list of offered installed tools: ``--tools`` (``default`` is all of them) minus
    ``--disallowedTools``. MCP tools are not in it: they are offered unless disallowed (:func:`_loop`)."""
    tools = None if options.tools == "default" else _names(options.tools, options)
    if tools is not None:
        tools = [name for name in tools if not name.startswith(MCP_TOOL_PREFIX)]
    denied = set(_names(options.disallowed_tools, options) or ())
    if not denied:
        return tools
    from agentstream.agent.tools import TOOL_NAMES

    return [name for name in (tools if tools is not None else TOOL_NAMES) if name not in denied]


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
