"""``agentstream serve``: the runs on the bus over HTTP and SSE, and a live web page of every run."""

from __future__ import annotations

import argparse
import socket
from typing import Final

from agentstream.cli._bus_options import add_bus_option
from agentstream.cli._options import non_negative_int, positive_seconds

MAX_PORT = 65535
MIN_HEARTBEAT_S = 0.1


def configure(parser: argparse.ArgumentParser) -> None:
    add_bus_option(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument(
        "--port",
        type=_port,
        default=8765,
        help="port to listen on, 0 to 65535 (default 8765; 0 picks a free one)",
    )
    parser.add_argument(
        "--token",
        default=None,
        metavar="T",
        help="require 'Authorization: Bearer T' (default: $AGENTSTREAM_TOKEN); needed off loopback "
        "and to answer to host names other than 127.0.0.1, localhost and [::1]",
    )
    parser.add_argument(
        "--heartbeat",
        type=_heartbeat,
        default=15.0,
        metavar="S",
        help=f"seconds between keep-alive comments on an idle event stream, {MIN_HEARTBEAT_S} or more "
        "(default 15)",
    )
    parser.add_argument(
        "--request-timeout",
        type=positive_seconds,
        default=REQUEST_TIMEOUT_S,
        metavar="S",
        help="seconds a client has to send a whole request (line, headers and body), from connecting or from "
        f"the answer to its last request; a slower one is disconnected (default {REQUEST_TIMEOUT_S:g})",
    )


def run(args: argparse.Namespace) -> int:
    import sys

    from agentstream._extras import require
    from agentstream.bus import check_bus_url, open_bus, redact_url
    from agentstream.serve.app import ServeSettings, create_app, server_url
    from agentstream.serve.security import check_bind, request_deadline_protocol, resolve_token

    token = resolve_token(args.token)
    check_bind(args.host, token)
    uvicorn = require("uvicorn", "serve")
    bus_url = check_bus_url(args.bus)  # the URL opened, as given: a plugin's Bus need not keep it
    with open_bus(bus_url):  # a bad URL fails here, before listening
        pass
    app = create_app(ServeSettings(bus_url=args.bus, token=token, heartbeat_s=args.heartbeat))
    listener = _listen(args.host, args.port)
    port = listener.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        server_header=False,
        limit_concurrency=_connection_limit(),
        http=request_deadline_protocol(args.request_timeout),
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
    note = " (token required)" if token else ""
    sys.stderr.write(
        f"agentstream serve: bus {redact_url(bus_url)}; listening on {server_url(args.host, port)}{note}\n"
    )
    sys.stderr.flush()
    uvicorn.Server(config).run(sockets=[listener])
    return 0


REQUEST_TIMEOUT_S: Final = 10.0
"""The default of ``--request-timeout``: far longer than any client on a working network needs."""
SHUTDOWN_GRACE_S: Final = 3.0
"""How long a signal waits for open responses (a follower of a run that never ends) before closing them."""


def _connection_limit() -> int:
    """Connections served at once: half the descriptors this process may open, so that clients (even ones
    that never finish a request) cannot take those the bus and the server need; the rest are answered 503."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(64, (soft if soft != resource.RLIM_INFINITY else 65536) // 2)


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the server starts (so ``--port 0`` can say which port it got)."""
    from agentstream.errors import UsageError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host.strip("[]"), port))
    except (OSError, UnicodeError, TypeError) as exc:  # the last two: a name that cannot be encoded
        listener.close()
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise UsageError(
            f"cannot listen on {host}:{port}: {reason}",
            fix="pick another --port (0 takes a free one) or --host",
        ) from None
    listener.listen(1024)
    return listener


def _port(text: str) -> int:
    """A TCP port, checked while parsing: out of range, ``bind()`` fails with no usable message."""
    value = non_negative_int(text)
    if value > MAX_PORT:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to {MAX_PORT}; 0 picks a free one)")
    return value


def _heartbeat(text: str) -> float:
    """Seconds between pings, with a floor: a tiny interval floods every idle client with comments."""
    value = positive_seconds(text)
    if value < MIN_HEARTBEAT_S:
        raise argparse.ArgumentTypeError(
            f"{text!r} is too short a heartbeat: use {MIN_HEARTBEAT_S} seconds or more (default 15)"
        )
    return value
