"""``agentstream send NAME --data JSON [--follow]``: publish one ``event`` as its own small run.

The run is ``start``, ``event``, ``result``, stored in one append; ``--follow``
then prints it back from the bus (and ends like ``follow``).
"""

from __future__ import annotations

import argparse
from typing import Any

from agentstream._text import terminal_safe
from agentstream.cli._bus_options import add_bus_option
from agentstream.cli._follow import add_follow_options


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="the event's name, e.g. deploy/finished")
    parser.add_argument(
        "--data", default="null", metavar="JSON", help="the event's data as JSON (default null)"
    )
    parser.add_argument("--follow", action="store_true", help="print the run back from the bus as NDJSON")
    parser.add_argument("--json", action="store_true", help="print the JSON envelope even on a terminal")
    add_bus_option(parser)
    add_follow_options(parser)


def run(args: argparse.Namespace) -> int:
    from agentstream.actions import follow_action, runs_action, watch_action
    from agentstream.bus import open_bus
    from agentstream.cli._follow import follow_run
    from agentstream.envelope import ok_envelope, print_envelope, print_error
    from agentstream.errors import AgentstreamError

    command = f"agentstream send {args.name}"
    try:
        data = _data(args.data)
        with open_bus(args.bus) as bus:
            run_id, count = _publish(bus, args.name, data)
    except AgentstreamError as exc:
        return print_error(command, exc, [watch_action()], json_flag=args.json)
    if args.follow:
        return follow_run(args, run_id, command=command, wait=False)
    result = {"run_id": run_id, "name": args.name, "events": count}
    envelope = ok_envelope(command, result, [follow_action(run_id), watch_action(), runs_action()])
    return print_envelope(envelope, human=_sent, json_flag=args.json)


def _sent(result: dict[str, Any]) -> str:
    name, run_id = (terminal_safe(result[key], one_line=True) for key in ("name", "run_id"))
    return f"sent {name} as run {run_id}\n  follow it: agentstream follow {run_id}\n"


def _data(text: str) -> Any:
    import msgspec

    from agentstream.errors import UsageError

    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise UsageError(
            f"--data is not valid JSON: {exc}", fix="""quote it for the shell, e.g. --data '{"id": 42}'"""
        ) from None


def _publish(bus: Any, name: str, data: Any) -> tuple[str, int]:
    """Produce the run with a Stream (so it is well-formed) and store all of it in one append."""
    import os

    from agentstream import protocol as p
    from agentstream.bus import Record
    from agentstream.stream import Stream

    records: list[Record] = []
    with open(os.devnull, "wb") as sink:
        stream = Stream(f"send {name}", out=sink)
        stream.observe(lambda event: records.append(Record(event.seq, event.type, p.encode(event))))
        with stream:
            stream.event(name, data)
    bus.append(stream.session_id, records)
    return stream.session_id, len(records)
