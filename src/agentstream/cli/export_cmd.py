"""``agentstream export otel [FILE|-]``: send a recorded stream or session log to an OpenTelemetry collector.

The file is read in any dialect (detected, or ``--from``) and each run in it
becomes one trace, exactly as ``exec``/``wrap``/``follow`` export it live, with
the events' own timestamps. One summary line goes to stderr. Exit 0 when every
span was accepted, 1 when the collector did not take them, 2 for a usage
problem (no endpoint, the ``[otel]`` extra missing, an unreadable file).
"""

from __future__ import annotations

import argparse
import sys

from agentstream.cli._options import add_input_argument

TARGETS = ("otel",)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", choices=TARGETS, help="where to export: otel (OTLP/HTTP)")
    add_input_argument(parser)
    parser.add_argument(
        "--endpoint",
        metavar="URL",
        default=None,
        help="the collector's OTLP/HTTP base URL, e.g. http://localhost:4318 "
        "(default: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or $OTEL_EXPORTER_OTLP_ENDPOINT)",
    )


def run(args: argparse.Namespace) -> int:
    from agentstream.cli._options import check_dialect, open_input
    from agentstream.consumer import read
    from agentstream.errors import ExitCode, UsageError
    from agentstream.observe.otel import ENDPOINT_VARS, build_sink, endpoint_configured

    if not args.endpoint and not endpoint_configured():
        raise UsageError(
            "no OpenTelemetry endpoint is configured",
            fix=f"set {ENDPOINT_VARS[1]}=http://localhost:4318 (or pass --endpoint URL)",
        )
    check_dialect(args.from_dialect)
    source = open_input(args.file)
    sink = build_sink(live=False, endpoint=args.endpoint)
    events = 0
    try:
        for event in read(source, args.from_dialect, label=args.file):
            sink.on_event(event)
            events += 1
    finally:
        sink.close()
        if args.file != "-":  # stdin is not ours to close
            source.close()
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
