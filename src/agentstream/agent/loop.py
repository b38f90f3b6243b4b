"""The agent loop: model call → streamed deltas → tool calls → results back to the model → again.

One :meth:`AgentLoop.run` answers one user prompt on a
:class:`~agentstream.stream.Stream` and returns its :class:`Outcome`: completed
when the model stops calling tools, ``max_turns`` when the turn limit is
reached, or failed with the provider's error when a call fails for good.
Signals are not handled here: the Stream raises ``Interrupted`` in the main
thread and this code lets it through (closing any open delta runs first).

How a model call reaches the stream (:class:`TurnWriter`):

* text and reasoning chunks become ``message_delta`` / ``reasoning_delta`` as
  they arrive (unless deltas are off);
* the complete ``reasoning`` / ``message`` events, the ``usage`` event and the
  tool calls follow only once the call has finished, so nothing of a call that
  fails part-way is ever presented as complete;
* when a call fails part-way, each delta run it opened is closed by a
  ``message`` / ``reasoning`` with empty content, meaning "discarded", and the
  retry starts new runs with new ids.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

import msgspec

from agentstream import protocol as p
from agentstream.agent.conversation import AssistantTurn, Conversation
from agentstream.agent.interrupt import interruptible
from agentstream.agent.pricing import cost_usd
from agentstream.agent.providers.base import (
    Provider,
    ReasoningBlock,
    ReasoningDelta,
    TextDelta,
    ToolCallDone,
    TurnEnd,
    TurnEvent,
    TurnUsage,
    stop_kind,
)
from agentstream.agent.tools import ToolOutcome
from agentstream.errors import ErrorCode, ExitCode, ProviderError

if TYPE_CHECKING:
    from agentstream.agent.interrupt import TurnControl
    from agentstream.agent.permissions import Approvals
    from agentstream.agent.tools import Toolbox
    from agentstream.stream import Stream, ToolCallScope

__all__ = [
    "AgentLoop",
    "LoopOptions",
    "Outcome",
    "ProgressRelay",
    "TurnWriter",
    "backoff_ms",
    "retry_settings",
]

MAX_BACKOFF_MS = 30_000
MAX_PAUSES = 5
"""Paused answers (Anthropic ``pause_turn``) in a row that are sent back to go on before the run gives up."""


@dataclass(frozen=True)
class LoopOptions:
    system: str
    max_turns: int = 0
    """Model calls allowed per prompt; 0 means no limit."""
    max_budget_usd: float = 0.0
    """What a prompt's model calls may cost, in US dollars; 0 means no limit."""
    deltas: bool = True
    max_retries: int = 3
    """Retries of a failed model call, so ``max_retries + 1`` attempts in all."""
    retry_base_ms: int = 500


def backoff_ms(attempt: int, base_ms: int) -> int:
    """Exponential backoff with jitter: about ``base * 2**(attempt-1)``, between half and all of it."""
    ceiling = min(base_ms * 2 ** (attempt - 1), MAX_BACKOFF_MS)
    return int(ceiling * random.uniform(0.5, 1.0))


class ProgressRelay:
    """The tools' progress callback; forwards output to whichever tool call is running."""

    def __init__(self) -> None:
        self.scope: ToolCallScope | None = None

    def __call__(self, text: str) -> None:
        if self.scope is not None and text:
            self.scope.progress(text)


@dataclass
class _Run:
    """One delta run: the chunks of one message or reasoning block."""

    kind: Literal["message", "reasoning"]
    run_id: str
    parts: list[str] = field(default_factory=list)
    block: ReasoningBlock | None = None

    @property
    def text(self) -> str:
        if self.block is not None:
            return self.block.text
        return "".join(self.parts)


class TurnWriter:
    """Writes one model call's events to the stream and collects what the call produced."""

    def __init__(self, stream: Stream, *, deltas: bool) -> None:
        self.stream = stream
        self.deltas = deltas
        self.runs: list[_Run] = []
        self.open: _Run | None = None
        self.calls: list[ToolCallDone] = []
        self.usage = TurnUsage()
        self.stop = ""

    def feed(self, event: TurnEvent) -> None:
        if isinstance(event, TextDelta):
            self._chunk("message", event.text)
        elif isinstance(event, ReasoningDelta):
            self._chunk("reasoning", event.text)
        elif isinstance(event, ReasoningBlock):
            self._reasoning_block(event)
        elif isinstance(event, ToolCallDone):
            self.open = None
            self.calls.append(event)
        elif isinstance(event, TurnUsage):
            self.usage = event
        elif isinstance(event, TurnEnd):
            self.stop = event.reason

    def _chunk(self, kind: Literal["message", "reasoning"], text: str) -> None:
        if not text:
            return
        run = self.open
        if run is None or run.kind != kind:
            run = self.open = _Run(kind, p.new_id("msg" if kind == "message" else "rsn"))
            self.runs.append(run)
        run.parts.append(text)
        if self.deltas:
            if kind == "message":
                self.stream.message_delta(text, message_id=run.run_id)
            else:
                self.stream.reasoning_delta(text, reasoning_id=run.run_id)

    def _reasoning_block(self, block: ReasoningBlock) -> None:
        run = self.open
        if run is None or run.kind != "reasoning":
            run = _Run("reasoning", p.new_id("rsn"))
            self.runs.append(run)
        run.block = block
        self.open = None

    def finish(self, model: str) -> AssistantTurn:
        """The call completed: emit the complete events and its usage; return what it produced."""
        texts = []
        for run in self.runs:
            if run.kind == "message":
                self.stream.message(run.text, message_id=run.run_id)
                texts.append(run.text)
            elif run.text or run.parts:
                self.stream.reasoning(run.text, reasoning_id=run.run_id)
        self._emit_usage(model)
        blocks = [run.block or ReasoningBlock(text=run.text) for run in self.runs if run.kind == "reasoning"]
        return AssistantTurn(text="\n\n".join(texts), reasoning=blocks, tool_calls=self.calls, stop=self.stop)

    def discard(self) -> None:
        """The call failed part-way: close every delta run it opened as discarded (empty content)."""
        if not self.deltas:
            return
        for run in self.runs:
            if not run.parts:
                continue
            if run.kind == "message":
                self.stream.message("", message_id=run.run_id)
            else:
                self.stream.reasoning("", reasoning_id=run.run_id)

    def _emit_usage(self, model: str) -> None:
        u = self.usage
        cost = cost_usd(
            model,
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cached_tokens=u.cached_tokens,
            cache_write_tokens=u.cache_write_tokens,
        )
        self.stream.emit(
            p.Usage(
                model=model,
                input_tokens=u.input_tokens,
                output_tokens=u.output_tokens,
                cached_tokens=u.cached_tokens,
                reasoning_tokens=u.reasoning_tokens,
                cost_usd=cost if cost is not None else p.UNSET,
                cache_write_tokens=u.cache_write_tokens or p.UNSET,
            )
        )


@dataclass(frozen=True)
class Outcome:
    """How one prompt's run ended; ``status`` is also the session's status."""

    status: Literal["completed", "failed", "max_turns", "max_budget"]
    error: ProviderError | None = None
    subtype: str | None = None
    """The ``result`` subtype when the status alone does not give it (``refusal``)."""

    def finish(self, stream: Stream, next_actions: Sequence[p.NextAction] = ()) -> None:
        """Emit the result (after a fatal error, if any)."""
        error = self.error
        if error is None:
            stream.finish(next_actions=next_actions)
            return
        max_turns = self.status == "max_turns"
        stream.fail(
            error.code,
            error.message,
            fix=error.fix,
            exit_code=ExitCode.MAX_TURNS if max_turns else error.exit_code,
            subtype=self.subtype or _SUBTYPES.get(self.status, "error"),
            next_actions=next_actions,
        )


_SUBTYPES = {"max_turns": "max_turns", "max_budget": "max_budget_usd"}
"""The ``result`` subtype of a run a limit stopped (Claude Code's names, without ``error_``)."""


class AgentLoop:
    """Runs prompts against a provider with a toolbox, writing everything to one stream per prompt."""

    def __init__(
        self,
        provider: Provider,
        toolbox: Toolbox,
        conversation: Conversation,
        options: LoopOptions,
        progress: ProgressRelay,
        *,
        approvals: Approvals | None = None,
        control: TurnControl | None = None,
    ) -> None:
        self.provider = provider
        self.toolbox = toolbox
        self.conversation = conversation
        self.options = options
        self.progress = progress
        self.approvals = approvals
        """Which tool calls must be asked about first (None: the toolbox's mode decides alone)."""
        self.control = control
        """Set in a two-way session: lets the client interrupt the turn."""
        self.call_ids: set[str] = set()
        """The protocol call ids used in this run's stream, each once (a model may repeat its own)."""
        self.stopped_in_tool = False
        """Whether the run was stopped (interrupted, or failed) while a tool call was decided on or ran."""

    def run(self, stream: Stream, prompt: str) -> Outcome:
        """Answer ``prompt``, writing to ``stream``; say how the run should end without ending it.

        The caller finishes the stream with :meth:`Outcome.finish` — after saving the
        session, so that a resume offered in the result always finds it.
        """
        self.conversation.add_user(prompt)
        self.call_ids = set()
        self.stopped_in_tool = False
        try:
            stopped = self._turns(stream)
        except _Refused as exc:
            return Outcome("failed", exc, subtype="refusal")
        except ProviderError as exc:
            return Outcome("failed", exc)
        if stopped is None:
            return Outcome("completed")
        if stopped == "max_budget":
            budget = self.options.max_budget_usd
            spent = stream.usage.cost_usd
            return Outcome(
                "max_budget",
                ProviderError(
                    f"stopped after spending ${spent if isinstance(spent, float) else 0:.4f} of the "
                    f"${budget:g} budget (--max-budget-usd {budget:g})",
                    code=ErrorCode.MAX_BUDGET,
                    fix="raise --max-budget-usd, or resume the session to let the agent go on",
                ),
            )
        limit = self.options.max_turns
        error = ProviderError(
            f"stopped after {limit} model turn{'s' if limit != 1 else ''} (--max-turns {limit})",
            code=ErrorCode.MAX_TURNS,
            fix="raise --max-turns, or resume the session to let the agent go on",
        )
        return Outcome("max_turns", error)

    def _turns(self, stream: Stream) -> Literal["max_turns", "max_budget"] | None:
        """Model and tools back and forth; the limit that stopped the agent, or None when it was done."""
        turn = pauses = 0
        while True:
            if self.options.max_turns and turn >= self.options.max_turns:
                return "max_turns"
            turn += 1
            with stream.step(f"turn {turn}"):
                answer = self._call_model(stream)
                kind = stop_kind(answer.stop)
                if kind in ("truncated", "refused"):
                    # Kept for a resume, but without its tool calls: a cut-off call is never run as complete.
                    self.conversation.add_assistant(
                        replace(answer, tool_calls=[]), provider=self.provider.name
                    )
                    raise _stopped_error(kind, answer.stop)
                self.conversation.add_assistant(answer, provider=self.provider.name)
                for call in answer.tool_calls:
                    self._run_tool(stream, call)
            pauses = pauses + 1 if kind == "paused" else 0
            if pauses > MAX_PAUSES:
                raise ProviderError(
                    f"the model paused its answer {pauses} times in a row (stop reason {answer.stop})",
                    code=ErrorCode.PROVIDER_ERROR,
                    fix="resume the session to let the agent go on",
                )
            if not answer.tool_calls and kind != "paused":
                return None
            spent, budget = stream.usage.cost_usd, self.options.max_budget_usd
            if budget and isinstance(spent, float) and spent >= budget:
                return "max_budget"

    def _call_model(self, stream: Stream) -> AssistantTurn:
        """One model call, retried with backoff while the failure is recoverable."""
        tools = self.toolbox.specs
        attempts = self.options.max_retries + 1
        for attempt in range(1, attempts + 1):
            writer = TurnWriter(stream, deltas=self.options.deltas)
            try:
                events = self.provider.stream_turn(self.conversation, tools, self.options.system)
                if self.control is not None:
                    self.control.waiting_on = "model"
                    events = interruptible(events, self.control)
                for event in events:
                    writer.feed(event)
                return writer.finish(self.provider.model)
            except ProviderError as exc:
                writer.discard()
                if not exc.recoverable:
                    raise
                if attempt == attempts:
                    tries = f"{attempts} attempts" if attempts != 1 else "1 attempt (retries are off)"
                    raise ProviderError(
                        f"gave up after {tries}: {exc.message}", code=exc.code, fix=exc.fix
                    ) from exc
                self._wait(stream, exc, attempt, attempts)
            except BaseException:
                writer.discard()
                raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _wait(self, stream: Stream, exc: ProviderError, attempt: int, attempts: int) -> None:
        delay = (
            exc.retry_in_ms
            if exc.retry_in_ms is not None
            else backoff_ms(attempt, self.options.retry_base_ms)
        )
        stream.error(
            exc.code, f"{exc.message} (attempt {attempt} of {attempts}, retrying)", retry_in_ms=delay
        )
        if self.control is not None:
            self.control.pause(delay / 1000)
        else:
            time.sleep(delay / 1000)

    def _run_tool(self, stream: Stream, call: ToolCallDone) -> None:
        """Run one call under a protocol id unique in the stream; the model reads the result under its own id."""
        try:
            self._decide_and_run(stream, call)
        except BaseException:
            self.stopped_in_tool = True
            raise

    def _decide_and_run(self, stream: Stream, call: ToolCallDone) -> None:
        stop_after = False
        shown = msgspec.structs.replace(call, call_id=self._protocol_id(call.call_id))
        with stream.tool_call(call.name, call.shown_arguments, call_id=shown.call_id) as scope:
            self.progress.scope = scope
            try:
                outcome, stop_after = self._outcome(stream, shown)
            finally:
                self.progress.scope = None
            _report(scope, outcome)
        self.conversation.add_tool_result(
            call.call_id, call.name, _for_model(outcome), is_error=outcome.status != "success"
        )
        if stop_after and self.control is not None:
            self.control.cancel.set()
            self.control.check()

    def _protocol_id(self, call_id: str) -> str:
        """``call_id``, or ``call_id_N`` with the first N that makes it new in this stream."""
        unique, n = call_id, 1
        while unique in self.call_ids:
            n += 1
            unique = f"{call_id}_{n}"
        self.call_ids.add(unique)
        return unique

    def _outcome(self, stream: Stream, call: ToolCallDone) -> tuple[ToolOutcome, bool]:
        """The call's outcome, and whether the decision about it also stops the turn."""
        if call.error is not None:
            return ToolOutcome("error", error=call.error), False
        arguments = call.arguments
        access = self.toolbox.access(call.name)
        before = self.approvals.before if self.approvals is not None else None
        hooked = before(stream, call) if before is not None else None
        if hooked is not None and not hooked.allow:
            return ToolOutcome("denied", error=f"denied by a hook: {hooked.message or 'no reason given'}"), (
                hooked.interrupt
            )
        if hooked is not None and hooked.arguments is not None:
            arguments = _rewritten(stream, arguments, hooked.arguments, call.name, "a hook")
        if (
            hooked is None
            and self.approvals is not None
            and access
            and self.approvals.needs_asking(call.name, access)
        ):
            if not self.approvals.asks or self.approvals.ask is None:
                return ToolOutcome("denied", error=self.approvals.refusal(call.name, access)), False
            decision = self.approvals.ask(stream, call)
            if not decision.allow:
                reason = decision.message or "the user denied it"
                return ToolOutcome("denied", error=f"permission denied: {reason}"), decision.interrupt
            if decision.arguments is not None:
                arguments = _rewritten(
                    stream, arguments, decision.arguments, call.name, "the permission decision"
                )
        if self.control is not None:
            self.control.waiting_on = "tool"
        return self.toolbox.run(call.name, arguments), False


def _rewritten(
    stream: Stream, before: dict[str, object], after: dict[str, object], tool: str, by: str
) -> dict[str, object]:
    """The arguments a decision replaced the call's with; the stream says so, since its ``tool_call``
    shows the model's and the ``tool_result`` comes from these."""
    if after != before:
        shown = msgspec.json.encode(after).decode()
        stream.log(f"{tool} runs with the arguments {by} gave: {shown}")
    return dict(after)


class _Refused(ProviderError):
    """The model (or the provider's filter) refused: the ``result`` subtype is ``refusal``."""


def _stopped_error(kind: str, reason: str) -> ProviderError:
    """The fatal error of an answer that ended without being complete (cut off, or refused)."""
    if kind == "truncated":
        return ProviderError(
            f"the model's answer was cut off at its token limit (stop reason {reason})",
            code=ErrorCode.CONTEXT_LIMIT,
            fix="raise --max-tokens, or start a new session if the context is full",
        )
    return _Refused(
        f"the model's answer was refused (stop reason {reason})",
        code=ErrorCode.PROVIDER_ERROR,
        fix="rephrase the request",
    )


def _report(scope: ToolCallScope, outcome: ToolOutcome) -> None:
    if outcome.status == "success":
        scope.succeed(outcome.output, truncated=outcome.truncated or None)
    else:
        scope.fail(outcome.error or outcome.status, status=outcome.status, output=outcome.output or None)


def _for_model(outcome: ToolOutcome) -> str:
    """What the model reads back: the output, or the error with whatever output there was."""
    if outcome.status == "success":
        return outcome.output
    head = f"{outcome.status}: {outcome.error or 'no details'}"
    return f"{head}\n{outcome.output}" if outcome.output else head


def retry_settings() -> tuple[int, int]:
    """(max retries, base backoff ms) from ``AGENTSTREAM_MAX_RETRIES`` / ``AGENTSTREAM_RETRY_BASE_MS``."""
    return env_int("AGENTSTREAM_MAX_RETRIES", 3), env_int("AGENTSTREAM_RETRY_BASE_MS", 500)


def env_int(name: str, default: int) -> int:
    """A whole number from the environment; ``default`` when unset or not one."""
    value = os.environ.get(name, "")
    return int(value) if value.strip().isdigit() else default
