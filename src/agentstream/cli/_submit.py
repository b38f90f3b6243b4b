"""Submitting a job to the bus, shared by ``agentstream submit`` and ``POST /api/runs``.

A job's exec options are checked against ``exec``'s own parser when it is
submitted, so a job that no worker could run is refused at once.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from agentstream.bus import Bus, Job
    from agentstream.envelope import Envelope

__all__ = ["SUBMIT_COMMAND", "submit_job", "submitted_envelope"]

SUBMIT_COMMAND = "agentstream submit"

RESERVED = ("--session-id", "--bus", "--no-publish", "--resume", "--continue")
"""exec options a job may not set: the worker sets them itself."""


def submit_job(bus: Bus, prompt: str, exec_args: Sequence[str]) -> Job:
    """Check the exec options, then register the job's run and queue the job."""
    from agentstream._secrets import configured_redactor
    from agentstream._text import utf8_text
    from agentstream.bus.queue import new_job

    utf8_text(prompt, "the prompt")
    _refuse_nul(prompt, "the prompt")
    if not prompt.strip() or prompt == "-":  # exec would read "-" from stdin: a job has none
        from agentstream.errors import UsageError

        raise UsageError(
            "the prompt is empty"
            if prompt != "-"
            else "the prompt '-' means stdin, which a job does not have",
            fix='pass the prompt\'s text: agentstream submit "what to do"',
        )
    for arg in exec_args:
        utf8_text(arg, f"the exec option {arg!r}")
        _refuse_nul(arg, f"the exec option {arg!r}")
    _check_exec_args(prompt, exec_args)
    redact = configured_redactor()  # the bus holds no secret: a key pasted into a prompt included
    job = new_job(redact(prompt), [redact(arg) for arg in exec_args])
    bus.register_run(job.run_id, command="exec", job_id=job.job_id, attempt=1)
    bus.enqueue(job)
    return job


def _refuse_nul(text: str, what: str) -> None:
    """A worker passes the prompt and options as its child's arguments, which cannot hold a NUL: such a
    job would be queued and then never run, so it is refused now (only the API can send one)."""
    if "\x00" in text:
        from agentstream.errors import UsageError

        raise UsageError(
            f"{what} holds a NUL character (U+0000) at character {text.index(chr(0))}, which no command "
            "line can carry",
            fix="remove the NUL characters",
        )


def submitted_envelope(job: Job) -> Envelope:
    from agentstream.actions import follow_action, runs_action, worker_action
    from agentstream.envelope import ok_envelope

    result = {"job_id": job.job_id, "run_id": job.run_id, "status": "queued", "args": job.args}
    actions = [
        follow_action(job.run_id, description="follow the job's run (it starts when a worker takes it)")
    ]
    return ok_envelope(SUBMIT_COMMAND, result, [*actions, worker_action(), runs_action()])


class _Strict(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        from agentstream.errors import UsageError

        raise UsageError(
            f"bad exec option: {message}", fix="see 'agentstream exec --help' for the options a job takes"
        )


def _check_exec_args(prompt: str, exec_args: Sequence[str]) -> None:
    """Reject what a worker could not run: options exec lacks, and the ones the worker sets itself."""
    from agentstream.cli._exec_options import add_exec_options
    from agentstream.errors import UsageError

    reserved = [arg for arg in exec_args if arg.split("=", 1)[0] in RESERVED]
    if reserved:
        raise UsageError(
            f"{reserved[0]} cannot be set on a job", fix="the worker sets the session and the bus itself"
        )
    parser = _Strict(prog="agentstream exec", add_help=False)
    add_exec_options(parser)
    parser.parse_args([prompt, *exec_args])
