"""The ``next_actions`` templates the temporal commands offer, in one place so they stay consistent."""

from __future__ import annotations

from agentstream.envelope import action
from agentstream.protocol import NextAction

__all__ = [
    "continue_action",
    "exec_action",
    "follow_action",
    "resume_action",
    "resume_session_action",
    "runs_action",
    "sessions_action",
    "submit_action",
    "watch_action",
    "worker_action",
]


def follow_action(run_id: str, *, from_seq: int | None = None, description: str | None = None) -> NextAction:
    seq = (
        {"description": "first seq to print", "default": 0}
        if from_seq is None
        else {
            "description": "first seq to print",
            "value": from_seq,
        }
    )
    return action(
        "agentstream follow <run_id> [--from-seq <seq>]",
        description or "replay this run's events and follow it live",
        run_id={"description": "the run to follow", "value": run_id, "required": True},
        seq=seq,
    )


def resume_action(run_id: str, next_seq: int) -> NextAction:
    """Pick up exactly where a follower stopped."""
    return follow_action(run_id, from_seq=next_seq, description=f"resume following from seq {next_seq}")


def runs_action() -> NextAction:
    return action(
        "agentstream runs [--status <status>] [--limit <limit>]",
        "list runs on the bus, newest first",
        status={
            "description": "only runs in this state",
            "enum": ["queued", "running", "succeeded", "failed", "interrupted"],
        },
        limit={"description": "how many runs", "default": 20},
    )


def watch_action(cursor: str | None = None) -> NextAction:
    since = {"description": "resume after this feed cursor"}
    if cursor is not None:
        since["value"] = cursor
    return action("agentstream watch [--since <cursor>]", "stream every run's events live", cursor=since)


def submit_action() -> NextAction:
    return action(
        "agentstream submit <prompt> [--follow]",
        "queue a prompt for a worker",
        prompt={"description": "what the agent should do", "required": True},
    )


def worker_action() -> NextAction:
    return action(
        "agentstream worker [--concurrency <n>]",
        "start a worker to run queued jobs (on any machine that reaches the bus)",
        n={"description": "jobs at once", "default": 1},
    )


_PROMPT = {"description": "what to ask the agent next", "required": True}


def exec_action() -> NextAction:
    return action("agentstream exec <prompt>", "start a new agent session", prompt=_PROMPT)


def resume_session_action(session_id: str, *, choices: list[str] | None = None) -> NextAction:
    """Continue a stored session with another prompt (``choices``: other ids the caller may pick)."""
    session = {"description": "the session to continue", "value": session_id, "required": True}
    if choices:
        session["enum"] = choices
    return action(
        "agentstream exec --resume <session_id> <prompt>",
        "continue this session with another prompt",
        session_id=session,
        prompt=_PROMPT,
    )


def continue_action() -> NextAction:
    return action(
        "agentstream exec --continue <prompt>",
        "continue the most recent session in the current directory",
        prompt=_PROMPT,
    )


def sessions_action(limit: int) -> NextAction:
    return action(
        "agentstream sessions --limit <n> --json",
        "list more sessions (there may be older ones)",
        n={"description": "how many to list", "default": limit},
    )
