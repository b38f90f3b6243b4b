"""Canonical events → ACP ``session/update`` payloads, and the ACP names of canonical things.

Both ACP agents (agentstream's own and any agent CLI's) present their turns
through :class:`UpdateMapper`; the ACP client (``wrap --from acp``) uses the same
tables the other way (:func:`tool_status`, :data:`STOP_OUTCOMES`).

Field names and enums follow ACP v1's ``schema.json``: ``sessionUpdate`` is one
of ``agent_message_chunk``, ``agent_thought_chunk``, ``user_message_chunk``,
``tool_call``, ``tool_call_update``, ``plan``; a tool call has ``toolCallId``,
``title``, ``kind``, ``status`` (``pending``, ``in_progress``, ``completed``,
``failed``), ``content``, ``locations``, ``rawInput`` and ``rawOutput``.
"""

from __future__ import annotations

import os
from typing import Any, Final

from agentstream import protocol as p
from agentstream.errors import ErrorCode

__all__ = [
    "PROTOCOL_VERSION",
    "STOP_OUTCOMES",
    "UpdateMapper",
    "replay_conversation",
    "stop_reason",
    "tool_kind",
    "tool_status",
]

PROTOCOL_VERSION: Final = 1

_KINDS: Final[dict[str, str]] = {
    **dict.fromkeys(
        ("read_file", "read", "read_many_files", "list_dir", "list_directory", "ls", "notebookread"), "read"
    ),
    **dict.fromkeys(
        (
            "write_file",
            "write",
            "edit_file",
            "edit",
            "multiedit",
            "notebookedit",
            "replace",
            "apply_patch",
            "file_change",
        ),
        "edit",
    ),
    **dict.fromkeys(
        ("shell", "bash", "bashoutput", "run_shell_command", "command_execution", "exec_command"), "execute"
    ),
    **dict.fromkeys(
        ("grep", "glob", "search_file_content", "web_search", "websearch", "google_web_search"), "search"
    ),
    **dict.fromkeys(("webfetch", "web_fetch", "fetch"), "fetch"),
    **dict.fromkeys(("todowrite", "todo_write", "write_todos", "update_plan", "todo_list"), "think"),
}
"""Tool names (lower case) of agentstream and the CLIs it reads, by ACP tool kind; anything else is ``other``."""

_PATH_KEYS: Final = ("path", "file_path", "filePath", "absolute_path", "notebook_path")
_OLD_KEYS: Final = ("old_string", "oldText", "old_str")
_NEW_KEYS: Final = ("new_string", "newText", "new_str")
_TITLE_KEYS: Final = ("command", *_PATH_KEYS, "pattern", "query", "url", "description")
_PLAN_TOOLS: Final = frozenset({"todowrite", "todo_write", "write_todos", "update_plan"})

STOP_OUTCOMES: Final[dict[str, str]] = {
    ErrorCode.INTERRUPTED: "cancelled",
    ErrorCode.MAX_TURNS: "max_turn_requests",
    ErrorCode.CONTEXT_LIMIT: "max_tokens",
}
"""The canonical error codes that end an ACP turn normally, with their ``stopReason``."""


def tool_kind(name: str) -> str:
    return _KINDS.get(name.lower(), "other")


def tool_status(result: p.ToolResult) -> str:
    """ACP has no ``denied`` or ``cancelled`` status: anything but success is ``failed``."""
    return "completed" if result.status == "success" else "failed"


def stop_reason(result: p.Result) -> str | None:
    """The ``stopReason`` of a turn that ended with ``result``; None when it failed (a JSON-RPC error)."""
    if result.ok:
        return "end_turn"
    if result.subtype in ("interrupted", "output_closed"):
        return "cancelled"
    if result.subtype == "refusal":
        return "refusal"
    code = result.error.code if isinstance(result.error, p.ErrorInfo) else ""
    if result.subtype == "max_turns":
        return "max_turn_requests"
    return STOP_OUTCOMES.get(code)


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _first(arguments: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = arguments.get(key)
        if isinstance(value, str):
            return value
    return None


class UpdateMapper:
    """Turns one session's canonical events into ``session/update`` payloads (the ``update`` object).

    Keeps what it needs across events: which message and reasoning runs were
    already streamed as deltas (their complete event then adds nothing), each
    tool call's diff (so the finished call still shows it), progress text so far
    (ACP replaces a tool call's content with each update), and the ids the
    client was given: a ``toolCallId`` or ``messageId`` is never reused in the
    session, though an agent CLI run per prompt numbers its items afresh each
    time (Codex's ``item_0``…), so an editor never mistakes a new turn's call
    for an old one's.

    Only the agent's side of a live turn is presented: the user's messages a
    stream carries (a CLI echoing the prompt, Claude Code's "[Request
    interrupted by user]") are already the editor's own, and ``session/load``
    replays the user's side by itself (:func:`replay_conversation`).
    """

    def __init__(self, cwd: str) -> None:
        self.cwd = cwd
        self._streamed: set[str] = set()
        self._calls: dict[str, p.ToolCall] = {}
        self._progress: dict[str, str] = {}
        self._client_ids: dict[str, str] = {}
        """This turn's ids (of calls, messages, reasoning) → the ids the client sees."""
        self._given: set[str] = set()
        """Every id the client has seen in the session."""

    def begin_turn(self) -> None:
        """A new prompt: what the last turn's ids meant is forgotten (an id used again gets a new client id)."""
        self._streamed, self._calls, self._progress, self._client_ids = set(), {}, {}, {}

    def client_id(self, agent_id: str) -> str:
        """The id the client knows this turn's call or message by: the agent's own, unless the session used it."""
        known = self._client_ids.get(agent_id)
        if known is not None:
            return known
        unique, number = agent_id, 1
        while unique in self._given:
            number += 1
            unique = f"{agent_id}~{number}"
        self._given.add(unique)
        self._client_ids[agent_id] = unique
        return unique

    def updates(self, event: p.AnyEvent) -> list[dict[str, Any]]:
        if isinstance(event, p.MessageDelta):
            self._streamed.add(event.message_id)
            if event.role != "assistant" or not event.content:
                return []
            return [self._chunk("agent_message_chunk", event.content, event.message_id)]
        if isinstance(event, p.Message):
            if event.message_id in self._streamed or not event.content or event.role != "assistant":
                return []
            return [self._chunk("agent_message_chunk", event.content, event.message_id)]
        if isinstance(event, p.ReasoningDelta):
            self._streamed.add(event.reasoning_id)
            if not event.content:
                return []
            return [self._chunk("agent_thought_chunk", event.content, event.reasoning_id)]
        if isinstance(event, p.Reasoning):
            if event.reasoning_id in self._streamed or not event.content:
                return []
            return [self._chunk("agent_thought_chunk", event.content, event.reasoning_id)]
        if isinstance(event, p.ToolCall):
            return self._tool_call(event)
        if isinstance(event, p.ToolProgress):
            text = self._progress.get(event.call_id, "") + event.content
            self._progress[event.call_id] = text
            update = {
                "sessionUpdate": "tool_call_update",
                "toolCallId": self.client_id(event.call_id),
                "status": "in_progress",
            }
            return [{**update, "content": [*self._diff(event.call_id), _block(text)]}]
        if isinstance(event, p.ToolResult):
            return [self._tool_result(event)]
        if isinstance(event, p.Progress) and event.name == "todo_list" and isinstance(event.message, str):
            return [_plan_from_checklist(event.message)]
        return []

    def knows(self, call_id: str) -> bool:
        """Whether this tool call was announced already."""
        return call_id in self._calls

    def tool_call_fields(self, call_id: str) -> dict[str, Any]:
        """The ``toolCall`` of a ``session/request_permission`` about a call already announced."""
        call = self._calls.get(call_id)
        if call is None:
            return {"toolCallId": self.client_id(call_id)}
        return {"toolCallId": self.client_id(call_id), **self._describe(call)}

    def _chunk(self, kind: str, text: str, message_id: str) -> dict[str, Any]:
        return _chunk(kind, text, self.client_id(message_id))

    def _tool_call(self, call: p.ToolCall) -> list[dict[str, Any]]:
        self._calls[call.call_id] = call
        update = {
            "sessionUpdate": "tool_call",
            "toolCallId": self.client_id(call.call_id),
            "status": "pending",
        }
        out = [{**update, **self._describe(call)}]
        plan = _plan_from_todos(call)
        if plan is not None:
            out.append(plan)
        return out

    def _describe(self, call: p.ToolCall) -> dict[str, Any]:
        arguments = call.arguments if isinstance(call.arguments, dict) else {}
        fields: dict[str, Any] = {
            "title": _title(call.name, arguments),
            "name": call.name,
            "kind": tool_kind(call.name),
            "rawInput": arguments,
        }
        path = _first(arguments, _PATH_KEYS)
        if path:
            fields["locations"] = [{"path": self._absolute(path)}]
        diff = self._diff(call.call_id)
        if diff:
            fields["content"] = diff
        return fields

    def _diff(self, call_id: str) -> list[dict[str, Any]]:
        """An edit's change as ACP shows it: the replaced text and its replacement, or a new file's content."""
        call = self._calls.get(call_id)
        if call is None or tool_kind(call.name) != "edit" or not isinstance(call.arguments, dict):
            return []
        path = _first(call.arguments, _PATH_KEYS)
        new = _first(call.arguments, _NEW_KEYS)
        old = _first(call.arguments, _OLD_KEYS) if new is not None else None
        if new is None:
            new = _first(call.arguments, ("content",))
        if not path or new is None:
            return []
        return [{"type": "diff", "path": self._absolute(path), "oldText": old, "newText": new}]

    def _tool_result(self, result: p.ToolResult) -> dict[str, Any]:
        self._progress.pop(result.call_id, None)
        text = result.output if isinstance(result.output, str) else ""
        if result.status != "success":
            error = result.error if isinstance(result.error, str) else result.status
            text = f"{error}\n{text}" if text else error
        content = [*self._diff(result.call_id), *([_block(text)] if text else [])]
        update: dict[str, Any] = {
            "sessionUpdate": "tool_call_update",
            "toolCallId": self.client_id(result.call_id),
            "status": tool_status(result),
            "rawOutput": {"status": result.status, "output": text},
        }
        if content:
            update["content"] = content
        return update

    def _absolute(self, path: str) -> str:
        return os.path.normpath(os.path.join(self.cwd, path)) if self.cwd else path


def _chunk(kind: str, text: str, message_id: str) -> dict[str, Any]:
    """A message or thought chunk; ``messageId`` tells a client where one message ends and the next begins."""
    return {"sessionUpdate": kind, "content": _text(text), "messageId": message_id}


def _block(text: str) -> dict[str, Any]:
    return {"type": "content", "content": _text(text)}


def _title(name: str, arguments: dict[str, Any]) -> str:
    detail = _first(arguments, _TITLE_KEYS)
    if not detail:
        return name
    detail = " ".join(detail.split())
    return f"{name}: {detail[:77] + '…' if len(detail) > 80 else detail}"


def _plan_from_todos(call: p.ToolCall) -> dict[str, Any] | None:
    """A to-do tool's list (Claude's TodoWrite, Gemini's write_todos, Codex's update_plan) as an ACP plan."""
    if call.name.lower() not in _PLAN_TOOLS or not isinstance(call.arguments, dict):
        return None
    items = call.arguments.get("todos", call.arguments.get("plan"))
    if not isinstance(items, list):
        return None
    entries = []
    for item in items:
        if isinstance(item, dict):
            text = item.get("content", item.get("description", item.get("step")))
            if isinstance(text, str):
                entries.append(_plan_entry(text, item.get("status")))
    return {"sessionUpdate": "plan", "entries": entries}


def _plan_from_checklist(message: str) -> dict[str, Any]:
    """Codex's ``todo_list`` progress: ``[x] done`` / ``[ ] to do`` lines."""
    entries = []
    for line in message.splitlines():
        done = line.startswith("[x]")
        entries.append(
            _plan_entry(line[3:].strip() if line[:1] == "[" else line, "completed" if done else None)
        )
    return {"sessionUpdate": "plan", "entries": entries}


def _plan_entry(content: str, status: object) -> dict[str, Any]:
    known = {"pending", "in_progress", "completed"}
    state = status if isinstance(status, str) and status in known else "pending"
    return {"content": content, "priority": "medium", "status": state}


def replay_conversation(messages: list[dict[str, Any]], cwd: str) -> list[dict[str, Any]]:
    """A stored agentstream conversation as the ``session/update`` payloads ``session/load`` replays."""
    mapper = UpdateMapper(cwd)
    names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for message in messages:
        role, content = message.get("role"), message.get("content")
        if role == "user" and isinstance(content, str) and content:
            out.append(_chunk("user_message_chunk", content, p.new_id("msg")))
        elif role == "assistant":
            out.extend(
                _chunk("agent_thought_chunk", block["text"], p.new_id("rsn"))
                for block in message.get("reasoning") or ()
                if isinstance(block, dict) and isinstance(block.get("text"), str) and block["text"]
            )
            if isinstance(content, str) and content:
                out.append(_chunk("agent_message_chunk", content, p.new_id("msg")))
            for call in message.get("tool_calls") or ():
                names[call["id"]] = call["name"]
                out += mapper.updates(
                    p.ToolCall(call_id=call["id"], name=call["name"], arguments=call["arguments"])
                )
        elif role == "tool":
            call_id, text = message.get("call_id", ""), content if isinstance(content, str) else ""
            name = names.get(call_id, message.get("name", ""))
            if message.get("is_error"):  # what the model read of a failure is its error, shown once
                result = p.ToolResult(call_id=call_id, name=name, status="error", error=text)
            else:
                result = p.ToolResult(call_id=call_id, name=name, status="success", output=text)
            out += mapper.updates(result)
    return out
