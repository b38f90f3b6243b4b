"""``agentstream export otel [FILE|-]``: send a recorded stream or session log to an OpenTelemetry collector.

The file is read in any dialect (detected, or ``--from``) and each run in it
becomes one trace, exactly as ``exec``/``wrap``/``follow`` export it live, with
the events' own timestamps. One summary line goes to stderr. Exit 0 when every
span was accepted, 1 when the collector did not take them, 2 for a usage
problem (no endpoint or a malformed one, the ``[otel]`` extra missing, an
unreadable file, an input with no events: nothing is exported then).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

from agentstream.cli._options import add_input_argument

if TYPE_CHECKING:
    from agentstream.observe._otel_spans import OtelSink
    from agentstream.protocol import AnyEvent

TARGETS = ("otel",)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", choices=TARGETS, help="where to export: otel (OTLP/HTTP)")
    # Two positionals, the second optional: a plain parse takes both at TARGET (FILE as its
    # default) and then refuses the FILE that follows an option ("otel --endpoint URL FILE").
    parser.parse_args = parser.parse_intermixed_args  # type: ignore[method-assign]
    add_input_argument(parser)
    parser.add_argument(
        "--endpoint",
        metavar="URL",
        default=None,
        help="the collector's OTLP/HTTP base URL, e.g. http://localhost:4318 "
        "(default: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or $OTEL_EXPORTER_OTLP_ENDPOINT)",
    )


def run(args: argparse.Namespace) -> int:
    from agentstream.cli._options import check_dialect, note_after_end, open_input
    from agentstream.consumer import read
    from agentstream.errors import ExitCode, UsageError
    from agentstream.observe.otel import ENDPOINT_VARS, build_sink, endpoint_configured

    if not args.endpoint and not endpoint_configured():
        raise UsageError(
            "no OpenTelemetry endpoint is configured",
            fix=f"set {ENDPOINT_VARS[1]}=http://localhost:4318 (or pass --endpoint URL)",
        )
    check_dialect(args.from_dialect)
    sink = build_sink(live=False, endpoint=args.endpoint)  # its setup is checked before the input is opened
    try:
        source = open_input(args.file)
    except BaseException:
        sink.discard()
        raise
    reader = read(source, args.from_dialect, label=args.file)
    try:
        events = _feed(reader, sink)
    except BaseException:
        sink.close()  # what was read is still exported
        raise
    finally:
        if args.file != "-":  # stdin is not ours to close
            source.close()
    if not events:
        sink.discard()
        raise _no_events("stdin" if args.file == "-" else args.file, reader.line_number)
    note_after_end(reader)  # what no turn took is not exported either: said, as convert and view say it
    sink.close()
    exporter = sink.exporter
    where = exporter.endpoint
    if exporter.failed:
        sys.stderr.write(
            f"agentstream export: {exporter.failed} of {exporter.failed + exporter.exported} span(s) "
            f"were not accepted by {where}\n"
        )
        return int(ExitCode.ERROR)
    sys.stderr.write(
        f"agentstream export: {sink.runs} run(s), {exporter.exported} span(s) from {events} event(s) "
        f"exported to {where}\n"
    )
    return int(ExitCode.OK)


def _feed(events: Iterable[AnyEvent], sink: OtelSink) -> int:
    """Feed ``sink`` the events; how many of them the input held (made-up ones not counted).

    Made-up events (``synthetic``) that come after a run's last real event are its made-up ending — the
    reader's for a cut file, stamped with the time of reading — and are not fed: the sink then ends that
    run at its last real event, as not finished. Made-up events followed by a real one of the same run
    (a dialect's start, a call closed on the input's word) are fed in their place.
    """
    from agentstream import protocol as p

    count, held = 0, list[p.AnyEvent]()
    for event in events:
        if event.synthetic is True:
            held.append(event)
            continue
        count += 1
        if held and not isinstance(event, p.Start):
            ending = max((i for i, e in enumerate(held) if isinstance(e, p.Result)), default=-1)
            for earlier in held[ending + 1 :]:  # what came after a made-up result belongs to this run
                sink.on_event(earlier)
        held.clear()
        sink.on_event(event)
    return count


def _no_events(name: str, lines: int) -> Exception:
    from agentstream.errors import UsageError

    what = "it is empty" if not lines else f"its {lines} line(s) are blank, not events, or made-up events"
    return UsageError(
        f"{name} has no events to export: {what}; nothing was exported",
        fix="pass a recorded stream or session log; if its lines are in a dialect that was not "
        "detected, name it with --from NAME ('agentstream dialects' lists them)",
    )
