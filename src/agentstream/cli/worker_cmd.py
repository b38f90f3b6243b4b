"""``agentstream worker``: run queued prompts, any number of workers on any number of machines.

The worker reports on its own stream (``job.*`` events, then one ``result``). The
first SIGINT/SIGTERM stops claiming, lets running jobs finish for ``--grace``
seconds, then cancels the rest (their runs end interrupted and their jobs are
reclaimed by another worker after ``--idle-timeout``); a second signal exits at once.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from agentstream.cli._bus_options import add_bus_option
from agentstream.cli._options import add_output_options, positive_int, positive_seconds, seconds

if TYPE_CHECKING:
    from agentstream.bus.queue import Worker
    from agentstream.stream import Stream


def configure(parser: argparse.ArgumentParser) -> None:
    add_bus_option(parser)
    add_output_options(parser)
    parser.add_argument(
        "--concurrency", type=positive_int, default=1, metavar="N", help="jobs at once (default 1)"
    )
    parser.add_argument(
        "--idle-timeout",
        type=positive_seconds,
        default=30.0,
        metavar="S",
        help="reclaim a job whose worker has not heartbeaten for S seconds (default 30; use one value everywhere)",
    )
    parser.add_argument(
        "--max-attempts", type=positive_int, default=3, metavar="N", help="attempts per job (default 3)"
    )
    parser.add_argument(
        "--max-jobs", type=positive_int, default=None, metavar="N", help="exit after taking N jobs"
    )
    parser.add_argument(
        "--grace", type=seconds, default=30.0, metavar="S", help="on a signal, wait S s for jobs (default 30)"
    )
    parser.add_argument(
        "--exec-command",
        metavar="CMD",
        default=None,
        help="run jobs with this command line instead of 'python -m agentstream exec' ($AGENTSTREAM_WORKER_EXEC)",
    )


def run(args: argparse.Namespace) -> int:
    from agentstream.bus import check_bus_url
    from agentstream.bus.queue import Worker, WorkerOptions, exec_command
    from agentstream.stream import Interrupted, Stream

    check_bus_url(args.bus)  # a malformed URL is a usage error before anything runs
    options = WorkerOptions(
        bus_url=args.bus,
        concurrency=args.concurrency,
        idle_timeout=args.idle_timeout,
        max_attempts=args.max_attempts,
        max_jobs=args.max_jobs,
        grace=args.grace,
        command=exec_command(args.exec_command),
    )
    with Stream("worker", output_format=args.output_format, dialect=args.dialect, color=args.color) as stream:
        worker = Worker(options, stream)
        stream.status("ready", f"worker {worker.name}, concurrency {options.concurrency}")
        try:
            worker.serve()
        except Interrupted as stop:
            _stop(worker, stream, stop.signum)
    return stream.result.exit_code if stream.result else 1


def _stop(worker: Worker, stream: Stream, signum: int) -> None:
    """Let running jobs finish for the grace period, cancel the rest, end the stream as interrupted."""
    import signal

    from agentstream.errors import ErrorCode, exit_code_for_signal

    grace = worker.options.grace
    stream.status("stopping", f"no new jobs; waiting up to {grace:g}s for running ones")
    if not worker.wait_all(grace):
        worker.cancel_all()
        worker.wait_all(10.0)
    stream.fail(
        ErrorCode.INTERRUPTED,
        f"worker stopped by {signal.Signals(signum).name}",
        exit_code=exit_code_for_signal(signum),
        subtype="interrupted",
    )
