"""Any agent CLI as an ACP agent: each prompt runs the CLI headless and its stream becomes ``session/update``.

The CLI's stream is read by agentstream's consumer (:func:`agentstream.consumer.spawn`
with the CLI's dialect), re-emitted into a Stream of our own (so the turn is
published to the bus like any run) and presented through the shared mapping.
The CLI's own session id (:attr:`~agentstream.consumer.Spawn.child_session`, known
at its stream's ``start``) is passed back with its resume flag on the next prompt.

Claude Code is driven over its stream-json input: the prompt is a ``user`` line
on stdin, ``session/cancel`` is a ``control_request`` interrupt, and its
``can_use_tool`` requests (``--permission-prompt-tool stdio``) become
``session/request_permission``. The others are stopped with SIGINT, then
SIGTERM and SIGKILL after a grace period.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import msgspec

from agentstream import protocol as p
from agentstream.acp.agent import AcpAgent, AcpSession, McpServer, NullSink
from agentstream.errors import AgentstreamError, ErrorCode, ExitCode

if TYPE_CHECKING:
    from agentstream.consumer import Spawn
    from agentstream.stream import Stream

__all__ = ["CLI_NAMES", "CliAgent", "CliSpec"]


@dataclass(frozen=True)
class CliSpec:
    """How to run one CLI headless for one prompt."""

    dialect: str
    argv: Callable[[str | None, list[str]], list[str]]
    """The CLI's session id to resume (or None) and the user's options (``-- ARGS``, permission flags) → the
    arguments after the binary, the options where the CLI's parser accepts them on a resumed run too."""
    prompt: Callable[[str], list[str]] = lambda text: []
    """The prompt → the last arguments, so written that the CLI never reads a prompt such as ``--fix it`` as
    an option (after ``--``, or as an option's ``=value``); nothing for a prompt sent on stdin."""
    control: bool = False
    """Claude Code's control protocol on stdin (prompt, interrupt, permission answers)."""
    mcp: Callable[[list[McpServer]], McpLaunch] | None = None
    """The session's MCP servers → how the CLI is given them; None: the CLI takes none from agentstream."""
    mcp_transports: frozenset[str] = frozenset()


def _claude(resume: str | None, options: list[str]) -> list[str]:
    base = ["--output-format", "stream-json", "--verbose", "--input-format", "stream-json"]
    base += ["--permission-prompt-tool", "stdio"]
    return [*base, *(["--resume", resume] if resume else []), *options]


def _gemini(resume: str | None, options: list[str]) -> list[str]:
    return [*(["--resume", resume] if resume else []), "--output-format", "stream-json", *options]


def _codex(resume: str | None, options: list[str]) -> list[str]:
    """``exec``'s options go before ``resume``: the ``resume`` subcommand refuses most of them (``-C``, ``-m``)."""
    return ["exec", "--json", *options, *(["resume", resume] if resume else [])]


def _cursor(resume: str | None, options: list[str]) -> list[str]:
    return ["-p", "--output-format", "stream-json", *(["--resume", resume] if resume else []), *options]


def _after_options(text: str) -> list[str]:
    return ["--", text]


class McpLaunch(NamedTuple):
    """A session's MCP servers as a CLI takes them: options, and variables added to its environment."""

    options: list[str]
    env: dict[str, str]


def _claude_mcp(servers: list[McpServer]) -> McpLaunch:
    """One ``--mcp-config`` of JSON in the shape of Claude Code's ``.mcp.json``, every value a ``${VARIABLE}`` it
    expands from its environment: the command line, which any local user can read, holds no token."""
    env: dict[str, str] = {}

    def hidden(value: str) -> str:
        name = f"AGENTSTREAM_MCP_{len(env)}"
        env[name] = value
        return "${" + name + "}"

    config: dict[str, dict[str, Any]] = {}
    for server in servers:
        if server.transport == "stdio":
            config[server.name] = {
                "command": hidden(server.command),
                "args": [hidden(arg) for arg in server.args],
                "env": {name: hidden(value) for name, value in server.env},
            }
        else:
            headers = {name: hidden(value) for name, value in server.headers}
            config[server.name] = {"type": server.transport, "url": hidden(server.url), "headers": headers}
    return McpLaunch(["--mcp-config", json.dumps({"mcpServers": config})], env)


_CODEX_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]+")
"""The server names a ``-c mcp_servers.NAME…`` override can carry (its key path is split at dots)."""


def _codex_mcp(servers: list[McpServer]) -> McpLaunch:
    """``-c`` overrides of ``mcp_servers.NAME`` (a JSON string or list of strings is a TOML value too).

    A server's environment is passed in Codex's own (``env_vars`` names what it forwards), not on the
    command line; only a variable two servers need with different values goes there for the second. An http
    server's headers are too (``env_http_headers`` names the variable of each); its URL is on the command line.
    """
    options: list[str] = []
    env: dict[str, str] = {}
    for server in servers:
        if not _CODEX_SERVER_NAME.fullmatch(server.name):
            _echo(
                f"agentstream acp: codex takes MCP server names of letters, digits, _ and -, not {server.name!r}"
            )
            continue
        key = f"mcp_servers.{server.name}"
        if server.transport == "http":
            options += ["-c", f"{key}.url={json.dumps(server.url)}"]
            headers = []
            for name, value in server.headers:
                variable = f"AGENTSTREAM_MCP_HEADER_{len(env)}"
                env[variable] = value
                headers.append(f"{json.dumps(name)} = {json.dumps(variable)}")
            if headers:
                options += ["-c", f"{key}.env_http_headers={{{', '.join(headers)}}}"]
            continue
        options += ["-c", f"{key}.command={json.dumps(server.command)}"]
        options += ["-c", f"{key}.args={json.dumps(list(server.args))}"]
        forwarded, inline = [], []
        for name, value in server.env:
            if env.setdefault(name, value) == value:
                forwarded.append(name)
            else:
                inline.append(f"{json.dumps(name)} = {json.dumps(value)}")
        if forwarded:
            options += ["-c", f"{key}.env_vars={json.dumps(forwarded)}"]
        if inline:
            options += ["-c", f"{key}.env={{{', '.join(inline)}}}"]
    return McpLaunch(options, env)


CLIS: Final[dict[str, CliSpec]] = {
    "claude": CliSpec(
        "claude", _claude, control=True, mcp=_claude_mcp, mcp_transports=frozenset({"stdio", "http", "sse"})
    ),
    "gemini": CliSpec("gemini", _gemini, lambda text: [f"--prompt={text}"]),
    "codex": CliSpec(
        "codex", _codex, _after_options, mcp=_codex_mcp, mcp_transports=frozenset({"stdio", "http"})
    ),
    "cursor-agent": CliSpec("cursor", _cursor, _after_options),
}
CLI_NAMES: Final = tuple(CLIS)


class CliSession(AcpSession):
    """One ACP session: a run of the CLI per prompt, each continuing the CLI's own session."""

    agent: CliAgent

    def __init__(self, agent: CliAgent, session_id: str, cwd: str, servers: list[McpServer]) -> None:
        super().__init__(agent, session_id, cwd)
        spec = agent_spec(agent.name)
        self.mcp = spec.mcp(servers) if spec.mcp is not None and servers else McpLaunch([], {})
        """The session's MCP servers, given to every run of the CLI (a resumed run starts them again)."""
        self.cli_session: str | None = None
        self.child: Spawn | None = None
        self._stdin_lock = threading.Lock()

    def run_prompt(self, text: str) -> p.Result:
        from agentstream.bus.publish import attach_publisher
        from agentstream.stream import Stream

        agent = self.agent
        stream = Stream(f"acp --cli {agent.name}", out=NullSink(), owns_process=False, cwd=self.cwd)  # type: ignore[arg-type]
        stream.observe(self.present)
        close_publisher = attach_publisher(stream, agent.bus, enabled=agent.publish)
        try:
            with stream:
                self._relay(stream, text)
        finally:
            close_publisher()
            self.child = None
        assert stream.result is not None, "the Stream always ends with a result"
        return stream.result

    def _relay(self, stream: Stream, text: str) -> None:
        from agentstream.consumer import spawn

        spec, agent = agent_spec(self.agent.name), self.agent
        # MCP options first: Claude Code's --mcp-config takes every value up to the next option
        options = [*self.mcp.options, *agent.permission_args(), *agent.extra]
        argv = [agent.binary, *spec.argv(self.cli_session, options), *spec.prompt(text)]
        child = spawn(
            argv,
            spec.dialect,
            cwd=self.cwd,
            new_process_group=True,
            env={**os.environ, **self.mcp.env} if self.mcp.env else None,
            stdin=subprocess.PIPE if spec.control else subprocess.DEVNULL,
            on_stderr=_echo,
        )
        self.child = child
        held: p.Error | None = None
        final: p.Result | None = None
        with child:
            if spec.control:
                self._write({"type": "user", "message": {"role": "user", "content": text}})
            if self.cancelled.is_set():
                self.cancel()
            for event in child:
                if isinstance(event, p.Result):
                    final = event
                    self._close_stdin()
                    continue
                if held is not None:
                    stream.emit(held)
                    held = None
                if isinstance(event, p.Error) and not event.recoverable:
                    held = event
                elif isinstance(event, p.Start):
                    if child.child_session is not None:
                        self.cli_session = child.child_session
                        stream.status("child_session", child.child_session)
                elif isinstance(event, p.UnknownEvent):
                    self._unknown(event)
                else:
                    stream.emit(event)
        _finish(stream, final, held, cancelled=self.cancelled.is_set(), stderr=child.stderr)

    def _unknown(self, event: p.UnknownEvent) -> None:
        """Claude Code's control lines: answer ``can_use_tool``; acknowledgements need nothing."""
        request = event.raw.get("request")
        if event.type != "control_request" or not isinstance(request, dict):
            return
        request_id = event.raw.get("request_id")
        if request.get("subtype") != "can_use_tool" or not isinstance(request_id, str):
            return
        call_id = request.get("tool_use_id")
        tool_name, tool_input = request.get("tool_name"), request.get("input")
        name = tool_name if isinstance(tool_name, str) else "tool"
        arguments: dict[str, Any] = tool_input if isinstance(tool_input, dict) else {}
        if not isinstance(call_id, str) or not call_id:
            call_id = request_id
        if not self.mapper.knows(call_id):  # not announced yet: announce it so the client can show it
            self.present(p.ToolCall(call_id=call_id, name=name, arguments=arguments))
        answer = self.ask_permission(call_id)
        if answer.allow:
            response: dict[str, Any] = {"behavior": "allow", "updatedInput": arguments}
        else:
            response = {"behavior": "deny", "message": answer.reason or "the user rejected it"}
            if answer.cancelled:
                response["interrupt"] = True
        self._write(
            {
                "type": "control_response",
                "response": {"subtype": "success", "request_id": request_id, "response": response},
            }
        )

    def cancel(self) -> None:
        child = self.child
        if child is None:
            return
        if agent_spec(self.agent.name).control:
            self._write(
                {
                    "type": "control_request",
                    "request_id": p.new_id("int"),
                    "request": {"subtype": "interrupt"},
                }
            )
        else:
            child.cancel(signal.SIGINT)

    def _write(self, message: dict[str, Any]) -> None:
        child = self.child
        stdin = child.proc.stdin if child is not None and child.proc is not None else None
        if stdin is None:
            return
        with self._stdin_lock:
            try:
                stdin.write(p.JSON_ENCODER.encode(message) + b"\n")
                stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass  # the CLI is gone; its stream says how it ended

    def _close_stdin(self) -> None:
        child = self.child
        if child is not None and child.proc is not None and child.proc.stdin is not None:
            with self._stdin_lock:
                try:
                    child.proc.stdin.close()
                except OSError:
                    pass


def _finish(
    stream: Stream, final: p.Result | None, held: p.Error | None, *, cancelled: bool, stderr: str
) -> None:
    """End our stream the way the CLI's ended (the consumer always gives one result).

    A CLI that ended without a result said why on stderr only, which an editor does not show next to the
    turn's error: its last line joins the error's message.
    """
    if cancelled and (final is None or not final.ok):
        stream.fail(
            ErrorCode.INTERRUPTED, "cancelled by the client", exit_code=ExitCode.SIGINT, subtype="interrupted"
        )
        return
    assert final is not None, "spawn() always ends with a result"
    if held is not None:
        stream.emit(held)
    error = final.error if isinstance(final.error, p.ErrorInfo) else None
    last_words = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
    if error is not None and error.code == ErrorCode.PROCESS_CRASHED and last_words:
        error = msgspec.structs.replace(
            error, message=f"{error.message}; its stderr ends: {last_words[:300]}"
        )
    stream.finish(
        ok=final.ok,
        exit_code=0 if final.ok else (final.exit_code or ExitCode.ERROR),
        subtype=final.subtype,
        result=final.result if isinstance(final.result, str) else None,
        error=error,
    )


def agent_spec(name: str) -> CliSpec:
    return CLIS[name]


class CliAgent(AcpAgent):
    """``agentstream acp --cli NAME``."""

    can_load = False

    def __init__(
        self,
        name: str,
        path: str | None,
        extra: Sequence[str],
        *,
        permission_mode: str,
        bus: str | None,
        publish: bool,
    ) -> None:
        super().__init__()
        if name not in CLIS:
            raise AgentstreamError(
                f"agentstream cannot run {name!r} as an ACP agent",
                code=ErrorCode.INVALID_INPUT,
                fix=f"use one of: {', '.join(CLI_NAMES)}",
            )
        self.name = name
        self.title = f"{name} (through agentstream)"
        self.mcp_transports = agent_spec(name).mcp_transports
        self.binary = _find(name, path)
        self.extra = list(extra)
        self.permission_mode = permission_mode
        self.bus, self.publish = bus, publish

    def permission_args(self) -> list[str]:
        """Claude Code gets the mode (its own names); the others keep their own defaults or ``-- ARGS``."""
        if self.name != "claude":
            return []
        from agentstream.dialects.claude import CLAUDE_PERMISSION_MODE_OF

        return [
            "--permission-mode",
            CLAUDE_PERMISSION_MODE_OF.get(self.permission_mode, self.permission_mode),
        ]

    def make_session(self, cwd: str, session_id: str | None, servers: list[McpServer]) -> AcpSession:
        return CliSession(self, p.new_id("ses"), cwd, servers)


def _find(name: str, path: str | None) -> str:
    binary = os.path.abspath(path) if path else shutil.which(name)  # absolute: each session runs in its cwd
    if not binary or not os.access(binary, os.X_OK):
        error = AgentstreamError(
            f"{path or name}: no such executable" if path else f"{name} is not on PATH",
            code=ErrorCode.CLI_NOT_FOUND,
            fix=f"install {name}, or point --cli-path at its binary",
        )
        error.exit_code = ExitCode.NOT_FOUND  # the shell's code for a command that is not there
        raise error
    return binary


def _echo(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
