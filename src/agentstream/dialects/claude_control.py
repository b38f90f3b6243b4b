"""Claude Code's control protocol on stdin, for ``exec --dialect claude --input-format stream-json``.

What the Claude Agent SDK writes to its CLI, and what it gets back:

* ``user`` lines: a turn each.
* ``control_request`` (SDK → CLI), answered with a ``control_response`` carrying
  the same ``request_id``: ``initialize`` (what this CLI offers; its ``PreToolUse``
  hooks are run before each tool call they match), ``interrupt`` (stop the running
  turn), ``set_permission_mode``, ``set_model``, ``mcp_status`` (no servers); any other subtype gets
  ``subtype: "error"`` naming it.
* ``control_response`` (SDK → CLI): the answer to a ``can_use_tool`` request the
  Claude encoder wrote for a canonical ``permission_request``
  (``{"behavior": "allow", "updatedInput": …}`` or ``{"behavior": "deny",
  "message": …, "interrupt"?: true}``), or to a ``hook_callback`` request
  (``{"continue"?, "decision"?: "block", "reason"?, "hookSpecificOutput"?:
  {"permissionDecision": "allow" | "deny" | "ask", "permissionDecisionReason"?,
  "updatedInput"?}}``).
* ``keep_alive`` and ``control_cancel_request`` are accepted and ignored.

A line that is none of these is a bad line (see :mod:`agentstream.agent.control`).
"""

from __future__ import annotations

import functools
import os
import re
import sys
from typing import TYPE_CHECKING, Any

from agentstream import protocol as p
from agentstream.agent.control import TURN_FIX, ToolHook, note_other_blocks, user_text
from agentstream.agent.permissions import Decision
from agentstream.errors import AgentstreamError, UsageError

if TYPE_CHECKING:
    from agentstream.agent.control import TwoWaySession
    from agentstream.agent.providers.base import ToolCallDone
    from agentstream.stream import Stream

__all__ = ["ClaudeInput"]

_IGNORED = frozenset({"keep_alive", "control_cancel_request"})
_CLAUDE_FIX = (
    'send Claude Code stream-json: {"type":"user","message":{"role":"user","content":"..."}} '
    'or {"type":"control_request","request_id":"...","request":{"subtype":"..."}}'
)


class ClaudeInput:
    """Reads Claude Code's stdin lines and answers control requests the way Claude Code does."""

    def handle(self, session: TwoWaySession, line: bytes, number: int) -> None:
        import msgspec

        try:
            obj = p.JSON_DECODER.decode(line)
        except msgspec.DecodeError as exc:
            session.bad_line(UsageError(f"stdin line {number} is not JSON: {exc}", fix=_CLAUDE_FIX))
            return
        kind = obj.get("type") if isinstance(obj, dict) else None
        if kind == "user":
            message = obj.get("message")
            content = message.get("content") if isinstance(message, dict) else None
            text = user_text(content)
            if text is None or not text.strip():
                session.bad_line(UsageError(f"stdin line {number} has no text content", fix=TURN_FIX))
            else:
                note_other_blocks(session, content, number)
                session.submit_turn(text)
        elif kind == "control_request":
            self._request(session, obj, number)
        elif kind == "control_response":
            self._response(session, obj, number)
        elif kind not in _IGNORED:
            what = f"type {kind!r}" if isinstance(kind, str) else "no string type"
            session.bad_line(
                UsageError(f"stdin line {number} is not a Claude Code input line ({what})", fix=_CLAUDE_FIX)
            )

    # -- requests from the client -------------------------------------------------------

    def _request(self, session: TwoWaySession, obj: dict[str, Any], number: int) -> None:
        request_id, request = obj.get("request_id"), obj.get("request")
        if not isinstance(request_id, str):
            session.bad_line(
                UsageError(
                    f"stdin line {number}: control_request without a string request_id", fix=_CLAUDE_FIX
                )
            )
            return
        if not isinstance(request, dict) or not isinstance(request.get("subtype"), str):
            _error(session, request_id, "the control request has no 'request' object with a string 'subtype'")
            return
        subtype = request["subtype"]
        try:
            if subtype == "initialize":
                session.tool_hooks = _tool_hooks(request.get("hooks"), session)
                _success(session, request_id, _server_info(session))
            elif subtype == "interrupt":
                session.interrupt()  # with no turn running there is nothing to stop; still a success
                _success(session, request_id, {})
            elif subtype == "set_permission_mode":
                session.set_permission_mode(str(request.get("mode")))
                _success(session, request_id, {})
            elif subtype == "mcp_status":
                _success(
                    session,
                    request_id,
                    {"mcpServers": session.mcp_servers},
                )
            elif subtype == "set_model":
                model = request.get("model")
                session.set_model(model if isinstance(model, str) and model else None)  # none: the default
                _success(session, request_id, {})
            else:
                _error(session, request_id, f"unsupported control request subtype: {subtype}")
        except AgentstreamError as exc:
            _error(session, request_id, exc.message)

    # -- answers to our can_use_tool requests -----------------------------------------------

    def _response(self, session: TwoWaySession, obj: dict[str, Any], number: int) -> None:
        response = obj.get("response")
        request_id = response.get("request_id") if isinstance(response, dict) else None
        if not isinstance(response, dict) or not isinstance(request_id, str):
            session.bad_line(
                UsageError(
                    f"stdin line {number}: control_response without a response.request_id", fix=_CLAUDE_FIX
                )
            )
            return
        if session.is_hook_request(request_id):
            decision = _hook_decision(response)
        else:
            decision = _decision(response)
            if decision.allow:
                _update_permissions(session, response.get("response"))
        if not session.decide(request_id, decision):
            session.note(f"stdin line {number}: control_response for {request_id!r}, which no one waits for")

    def permission_timed_out(self, session: TwoWaySession, request_id: str) -> None:
        """Tell the client to stop asking its user: Claude Code cancels the request it gave up on."""
        session.output.send({"type": "control_cancel_request", "request_id": request_id})


def _decision(response: dict[str, Any]) -> Decision:
    if response.get("subtype") != "success":
        error = response.get("error")
        return Decision(False, f"the client could not decide: {error if isinstance(error, str) else 'error'}")
    inner = response.get("response")
    inner = inner if isinstance(inner, dict) else {}
    if inner.get("behavior") == "allow":
        updated = inner.get("updatedInput")
        return Decision(True, arguments=updated if isinstance(updated, dict) else None)
    message = inner.get("message")
    return Decision(
        False,
        message if isinstance(message, str) and message else "",
        interrupt=inner.get("interrupt") is True,
    )


def _update_permissions(session: TwoWaySession, answer: object) -> None:
    """An allow's ``updatedPermissions`` ("always allow"): ``setMode`` changes the session's permission mode,
    ``addRules`` with ``behavior: "allow"`` lets the named tools run without asking for the rest of the session.
    Rules with a ``ruleContent`` (``Bash(git:*)``) and other destinations' persistence are not kept."""
    updates = answer.get("updatedPermissions") if isinstance(answer, dict) else None
    for update in updates if isinstance(updates, list) else []:
        if not isinstance(update, dict):
            continue
        if update.get("type") == "setMode" and isinstance(update.get("mode"), str):
            try:
                session.set_permission_mode(update["mode"])
            except AgentstreamError as exc:
                session.note(f"updatedPermissions: {exc.message}")
        elif update.get("type") == "addRules" and update.get("behavior") == "allow":
            rules = update.get("rules")
            rules = rules if isinstance(rules, list) else []
            tools = {
                _our_name(rule["toolName"])
                for rule in rules
                if isinstance(rule, dict)
                and isinstance(rule.get("toolName"), str)
                and not rule.get("ruleContent")
            }
            session.approvals.always_allowed |= tools


def _our_name(tool: str) -> str:
    """A Claude Code tool name as agentstream's (``Bash`` → ``shell``); other names as they are."""
    from agentstream.agent.runner import CLAUDE_TOOL_NAMES

    return CLAUDE_TOOL_NAMES.get(tool, tool)


def _hook_decision(response: dict[str, Any]) -> Decision | None:
    """What a ``PreToolUse`` hook said about the call: deny (``decision: "block"``, ``permissionDecision:
    "deny"``, or ``continue: false``, which also stops the turn), allow (perhaps with edited input), or nothing."""
    if response.get("subtype") != "success":
        error = response.get("error")
        return Decision(
            False, f"the hook failed: {error if isinstance(error, str) else 'error'}", failed=True
        )
    output = response.get("response")
    output = output if isinstance(output, dict) else {}
    specific = output.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    said = specific.get("permissionDecision")
    reason = next(
        (
            text
            for text in (
                specific.get("permissionDecisionReason"),
                output.get("reason"),
                output.get("stopReason"),
            )
            if isinstance(text, str) and text
        ),
        "",
    )
    if output.get("continue") is False:
        return Decision(False, reason or "a hook stopped the run", interrupt=True)
    if said == "deny" or output.get("decision") == "block":
        return Decision(False, reason)
    if said == "allow":
        updated = specific.get("updatedInput")
        return Decision(True, arguments=updated if isinstance(updated, dict) else None)
    return None


def _claude_name(tool: str) -> str:
    """An agentstream tool name as Claude Code's (what a hook's matcher and its input name): ``shell`` → ``Bash``."""
    return _claude_names().get(tool, tool)


@functools.cache
def _claude_names() -> dict[str, str]:
    from agentstream.agent.runner import CLAUDE_TOOL_NAMES

    return {ours: theirs for theirs, ours in reversed(CLAUDE_TOOL_NAMES.items())}  # Edit before MultiEdit


def _tool_hooks(config: object, session: TwoWaySession) -> list[ToolHook]:
    """The ``PreToolUse`` hooks of ``initialize``; hooks of other events are not run, and said so on stderr."""
    if not isinstance(config, dict):
        return []
    others = sorted(str(event) for event, matchers in config.items() if event != "PreToolUse" and matchers)
    if others:
        sys.stderr.write(f"agentstream-claude: debug: hooks for {', '.join(others)} are not run\n")
    hooks = []
    for matcher in config.get("PreToolUse") or []:
        if not isinstance(matcher, dict):
            continue
        timeout = matcher.get("timeout")
        timeout_s = float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else 60.0
        matches = _matcher(matcher.get("matcher"))
        fail_closed = matcher.get("onFailure", "continue") != "continue"
        hooks += [
            ToolHook(matches, _hook_request(callback_id, session), timeout_s, fail_closed)
            for callback_id in matcher.get("hookCallbackIds") or []
            if isinstance(callback_id, str)
        ]
    return hooks


def _matcher(pattern: object) -> Any:
    """Claude Code's matcher: none, ``""`` or ``*`` for every tool, else a tool name or a regular expression,
    matched against the tool's Claude Code name and its own."""
    if pattern in (None, "", "*"):
        return lambda tool: True
    text = str(pattern)
    try:
        compiled = re.compile(text)
    except re.error:
        return lambda tool: text in (tool, _claude_name(tool))
    return lambda tool: any(compiled.fullmatch(name) for name in (tool, _claude_name(tool)))


def _hook_request(callback_id: str, session: TwoWaySession) -> Any:
    def request(request_id: str, stream: Stream, call: ToolCallDone) -> dict[str, Any]:
        opened = stream.start_event
        parent = opened.parent_session_id
        hook_input = {
            "session_id": parent if isinstance(parent, str) else stream.session_id,
            "transcript_path": "",
            "cwd": opened.cwd,
            "permission_mode": session.approvals.mode,
            "hook_event_name": "PreToolUse",
            "tool_name": _claude_name(call.name),
            "tool_input": call.arguments,
            "tool_use_id": call.call_id,
        }
        return {
            "type": "control_request",
            "request_id": request_id,
            "request": {
                "subtype": "hook_callback",
                "callback_id": callback_id,
                "input": hook_input,
                "tool_use_id": call.call_id,
            },
        }

    return request


def _server_info(session: TwoWaySession) -> dict[str, Any]:
    """The ``initialize`` answer: what this CLI offers (no slash commands, agents or output styles of its own)."""
    model = session.provider.model
    return {
        "commands": [],
        "agents": [],
        "output_style": "default",
        "available_output_styles": ["default"],
        "models": [{"value": model, "displayName": model, "description": f"{session.provider.name} model"}],
        "pid": os.getpid(),
    }


def _success(session: TwoWaySession, request_id: str, response: dict[str, Any]) -> None:
    session.output.send(
        {
            "type": "control_response",
            "response": {"subtype": "success", "request_id": request_id, "response": response},
        }
    )


def _error(session: TwoWaySession, request_id: str, message: str) -> None:
    session.output.send(
        {
            "type": "control_response",
            "response": {"subtype": "error", "request_id": request_id, "error": message},
        }
    )
