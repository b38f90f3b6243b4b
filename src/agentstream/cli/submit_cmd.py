"""``agentstream submit PROMPT [exec options] [--follow]``: queue a prompt for a worker.

Options after PROMPT that ``submit`` does not know are ``exec`` options, stored
with the job and checked now against ``exec``'s own parser. The run id is fixed
at submit time, so the job can be followed before any worker has taken it.
"""

from __future__ import annotations

import argparse
from typing import Any

from agentstream.cli._bus_options import add_bus_option
from agentstream.cli._follow import add_follow_options


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
    from agentstream.actions import runs_action
    from agentstream.bus import open_bus
    from agentstream.cli._follow import follow_run
    from agentstream.cli._submit import SUBMIT_COMMAND, submit_job, submitted_envelope
    from agentstream.envelope import print_envelope, print_error
    from agentstream.errors import AgentstreamError

    try:
        exec_args = _split_own(args)
        with open_bus(args.bus) as bus:
            job = submit_job(bus, args.prompt, exec_args)
    except AgentstreamError as exc:
        return print_error(SUBMIT_COMMAND, exc, [runs_action()], json_flag=args.json)
    if args.follow:
        return follow_run(args, job.run_id, command=f"agentstream follow {job.run_id}", wait=True)
    return print_envelope(submitted_envelope(job), human=_queued, json_flag=args.json)


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
