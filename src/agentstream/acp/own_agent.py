"""agentstream's own agent (``exec``'s loop, tools and session store) as an ACP agent.

Each ACP session is an :class:`~agentstream.agent.runner.AgentRunner` prepared as a
two-way session would be, so the existing mechanisms do the work: the
interrupt (:class:`~agentstream.agent.interrupt.TurnControl`) stops a turn on
``session/cancel``, the approvals hook (:class:`~agentstream.agent.permissions.Approvals`)
asks ``session/request_permission`` before a tool call the permission mode does
not let run by itself, and each prompt is a stream of its own, published to the
bus and saved in the session store like any ``exec`` turn. Its events reach the
client as ``session/update`` notifications instead of stdout.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agentstream import protocol as p
from agentstream.acp.agent import AcpAgent, AcpSession, McpServer, NullSink
from agentstream.agent.mcp import CONNECTED_TRANSPORTS
from agentstream.agent.runner import AgentRunner, ExecOptions

if TYPE_CHECKING:
    from agentstream.agent.permissions import Decision
    from agentstream.agent.providers.base import ToolCallDone
    from agentstream.stream import Stream

__all__ = ["OwnAgent"]


class _Runner(AgentRunner):
    """An AgentRunner whose turns' events also go to the ACP session."""

    acp: OwnSession

    def _stream(self, first: bool) -> Stream:
        stream = super()._stream(first)
        stream.observe(self.acp.seen)
        return stream

    def _cancelled_before_it_began(self, stream: Stream) -> bool:
        """A ``session/cancel`` read right after its prompt, before the turn began, still cancels it."""
        return super()._cancelled_before_it_began(stream) or self.acp.cancelled.is_set()


class OwnSession(AcpSession):
    """One ACP session of agentstream's own agent."""

    def __init__(self, agent: OwnAgent, runner: _Runner) -> None:
        super().__init__(agent, runner.record.session_id, str(runner.cwd))
        self.runner = runner
        self.first = not runner.resumed
        self.result: p.Result | None = None
        runner.acp = self
        assert runner.loop.approvals is not None, "prepared as a two-way session, so it has approvals"
        runner.loop.approvals.ask = self.ask

    def run_prompt(self, text: str) -> p.Result:
        self.result = None
        self.runner.run_turn(text, first=self.first)
        self.first = False
        assert self.result is not None, "every turn's stream ends with a result"
        return self.result

    def cancel(self) -> None:
        self.runner.control.cancel.set()

    def seen(self, event: p.Event) -> None:
        if isinstance(event, p.Result):
            self.result = event
        self.present(event)

    def ask(self, stream: Stream, call: ToolCallDone) -> Decision:
        """The approvals hook: the request is in the stream (for the bus) and goes to the client."""
        from agentstream.agent.interrupt import TurnInterrupted
        from agentstream.agent.permissions import Decision

        approvals = self.runner.loop.approvals
        assert approvals is not None
        stream.emit(
            p.PermissionRequest(
                call_id=call.call_id,
                name=call.name,
                arguments=call.arguments,
                request_id=f"perm_{call.call_id}",
                reason=f"permission mode {approvals.mode} does not let {call.name} run by itself",
            )
        )
        self.runner.control.waiting_on = "permission"
        answer = self.ask_permission(call.call_id)
        self.runner.control.waiting_on = ""
        if answer.cancelled:
            raise TurnInterrupted()
        if answer.always:
            approvals.always_allowed = approvals.always_allowed | {call.name}
        return Decision(answer.allow, answer.reason)


class OwnAgent(AcpAgent):
    """``agentstream acp``: sessions run by agentstream's agent loop."""

    title = "agentstream agent"
    mcp_transports = CONNECTED_TRANSPORTS

    def __init__(self, options: ExecOptions) -> None:
        super().__init__()
        self.options = replace(
            options, input_format="stream-json", permission_prompt_tool="stdio", heartbeat=0.0, prompt=None
        )

    def make_session(self, cwd: str, session_id: str | None, servers: list[McpServer]) -> AcpSession:
        runner = _Runner.prepare(
            replace(self.options, cwd=cwd, resume=session_id, mcp_servers=tuple(servers))
        )
        assert isinstance(runner, _Runner)
        runner.sink = NullSink()  # type: ignore[assignment]
        return OwnSession(self, runner)

    def history(self, session: AcpSession) -> list[dict[str, Any]]:
        from agentstream.acp.mapping import replay_conversation

        assert isinstance(session, OwnSession)
        return replay_conversation(session.runner.loop.conversation.to_json(), session.cwd)

    def close(self) -> None:
        for session in self.sessions.values():
            if isinstance(session, OwnSession):
                session.runner.close()
