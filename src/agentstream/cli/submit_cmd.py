"""``agentstream submit PROMPT [exec options] [--follow]``: queue a prompt for a worker.

Options after PROMPT that ``submit`` does not know are ``exec`` options, stored
with the job and checked now against ``exec``'s own parser. The run id is fixed
at submit time, so the job can be followed before any worker has taken it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from agentstream.bus.publish import add_bus_option
from agentstream.cli.follow_cmd import add_follow_options

if TYPE_CHECKING:
    from agentstream.bus import Bus, Job
    from agentstream.envelope import Envelope

SUBMIT_COMMAND = "agentstream submit"

_RESERVED = ("--session-id", "--bus", "--no-publish", "--resume", "--continue")


def _own_options(parser: argparse.ArgumentParser) -> None:
    add_bus_option(parser)
    parser.add_argument("--follow", action="store_true", help="stream the run's events until it ends")
    add_follow_options(parser, timeout_flag="--follow-timeout")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", metavar="PROMPT", help="what the agent should do")
    parser.add_argument("exec_args", nargs=argparse.REMAINDER, metavar="EXEC_OPTION", help="options for exec")
    _own_options(parser)


def run(args: argparse.Namespace) -> int:
    from agentstream.actions import runs_action
    from agentstream.bus import open_bus
    from agentstream.cli.follow_cmd import follow_run
    from agentstream.envelope import print_envelope, print_error
    from agentstream.errors import AgentstreamError

    try:
        exec_args = _split_own(args)
        with open_bus(args.bus) as bus:
            job = submit_job(bus, args.prompt, exec_args)
    except AgentstreamError as exc:
        return print_error(SUBMIT_COMMAND, exc, [runs_action()])
    if args.follow:
        return follow_run(args, job.run_id, command=f"agentstream follow {job.run_id}", wait=True)
    return print_envelope(submitted_envelope(job))


def submit_job(bus: Bus, prompt: str, exec_args: Sequence[str]) -> Job:
    """Check the exec options, then register the job's run and queue the job (``submit``, ``POST /api/runs``)."""
    from agentstream.bus.queue import new_job

    _check_exec_args(prompt, exec_args)
    job = new_job(prompt, exec_args)
    bus.register_run(job.run_id, command="exec", job_id=job.job_id, attempt=1)
    bus.enqueue(job)
    return job


def submitted_envelope(job: Job) -> Envelope:
    from agentstream.actions import follow_action, runs_action, worker_action
    from agentstream.envelope import ok_envelope

    result = {"job_id": job.job_id, "run_id": job.run_id, "status": "queued", "args": job.args}
    actions = [
        follow_action(job.run_id, description="follow the job's run (it starts when a worker takes it)")
    ]
    return ok_envelope(SUBMIT_COMMAND, result, [*actions, worker_action(), runs_action()])


def _split_own(args: argparse.Namespace) -> list[str]:
    """Take submit's own options out of the exec options that followed PROMPT."""
    own = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    _own_options(own)
    found, rest = own.parse_known_args(args.exec_args)
    for name, value in vars(found).items():
        if value != own.get_default(name):
            setattr(args, name, value)
    return rest


class _Strict(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        from agentstream.errors import UsageError

        raise UsageError(
            f"bad exec option: {message}", fix="see 'agentstream exec --help' for the options a job takes"
        )


def _check_exec_args(prompt: str, exec_args: Sequence[str]) -> None:
    """Reject what a worker could not run: options exec lacks, and the ones the worker sets itself."""
    from agentstream.errors import UsageError

    reserved = [arg for arg in exec_args if arg.split("=", 1)[0] in _RESERVED]
    if reserved:
        raise UsageError(
            f"{reserved[0]} cannot be set on a job", fix="the worker sets the session and the bus itself"
        )
    try:
        from agentstream.cli import exec_cmd
    except ImportError:
        return
    parser = _Strict(prog="agentstream exec", add_help=False)
    exec_cmd.configure(parser)
    parser.parse_args([prompt, *exec_args])
