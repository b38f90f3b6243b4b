"""``agentstream submit PROMPT [exec options] [--follow]``: queue a prompt for a worker.

Options after PROMPT that ``submit`` does not know are ``exec`` options, stored
with the job and checked now against ``exec``'s own parser. The run id is fixed
at submit time, so the job can be followed before any worker has taken it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NoReturn

from agentstream.cli._bus_options import add_bus_option
from agentstream.cli._follow import add_follow_options

_RESERVED = ("--session-id", "--bus", "--no-publish", "--resume", "--continue")


def _own_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the JSON envelope even on a terminal")
    add_bus_option(parser)
    parser.add_argument("--follow", action="store_true", help="stream the run's events until it ends")
    add_follow_options(parser, timeout_flag="--follow-timeout")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", metavar="PROMPT", help="what the agent should do")
    parser.add_argument("exec_args", nargs=argparse.REMAINDER, metavar="EXEC_OPTION", help="options for exec")
    _own_options(parser)


def run(args: argparse.Namespace) -> int:
    from agentstream.actions import follow_action, runs_action, worker_action
    from agentstream.bus import open_bus
    from agentstream.bus.queue import new_job
    from agentstream.cli._follow import follow_run
    from agentstream.envelope import ok_envelope, print_envelope, print_error
    from agentstream.errors import AgentstreamError

    command = "agentstream submit"
    try:
        exec_args = _split_own(args)
        _check_exec_args(args.prompt, exec_args)
        job = new_job(args.prompt, exec_args)
        with open_bus(args.bus) as bus:
            bus.register_run(job.run_id, command="exec", job_id=job.job_id, attempt=1)
            bus.enqueue(job)
    except AgentstreamError as exc:
        return print_error(command, exc, [runs_action()], json_flag=args.json)
    if args.follow:
        return follow_run(args, job.run_id, command=f"agentstream follow {job.run_id}", wait=True)
    result = {"job_id": job.job_id, "run_id": job.run_id, "status": "queued", "args": exec_args}
    actions = [
        follow_action(job.run_id, description="follow the job's run (it starts when a worker takes it)")
    ]
    envelope = ok_envelope(command, result, [*actions, worker_action(), runs_action()])
    return print_envelope(envelope, human=_queued, json_flag=args.json)


def _queued(result: dict[str, Any]) -> str:
    run_id = result["run_id"]
    return (
        f"queued job {result['job_id']} as run {run_id}\n"
        f"  follow it: agentstream follow {run_id}\n  run it:    agentstream worker\n"
    )


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
    from agentstream.cli._exec_options import add_exec_options

    parser = _Strict(prog="agentstream exec", add_help=False)
    add_exec_options(parser)
    parser.parse_args([prompt, *exec_args])
