"""A remote MCP server made with the official MCP Python SDK (``mcp``), over streamable HTTP on loopback.

    python _mcp_http_server.py PORT LOG [--json | --sse] [--token TOKEN]

Serves ``/mcp`` on 127.0.0.1:PORT (with ``--sse``, MCP's older transport instead: its event stream at
``/sse``, messages POSTed where that stream says) with two tools: ``add`` (``a`` and ``b``; answers ``the sum is N`` and
logs it) and ``wait`` (answers after a minute, unless the client gives up first). Answers come as event
streams, or as plain JSON with ``--json``. With ``--token``, a request without ``Authorization: Bearer TOKEN``
is a 401 that echoes what it got. Each request's method, session header and protocol-version header are appended to LOG as JSON
lines, so a test sees what the client sent.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer

port, log = int(sys.argv[1]), sys.argv[2]
options = sys.argv[3:]
token = options[options.index("--token") + 1] if "--token" in options else None

server = MCPServer("remote")


@server.tool()
def add(a: int, b: int) -> str:
    """Adds two whole numbers."""
    return f"the sum is {a + b}"


@server.tool()
async def wait() -> str:
    """Answers after a minute."""
    await anyio.sleep(60)
    return "waited"


app = (
    server.sse_app() if "--sse" in options else server.streamable_http_app(json_response="--json" in options)
)


async def logged(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The SDK's app behind a log of each request (and the token check)."""
    if scope["type"] != "http":
        await app(scope, receive, send)
        return
    headers = {name.decode().lower(): value.decode() for name, value in scope["headers"]}
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    try:
        method = json.loads(body).get("method") if body else None
    except ValueError:
        method = None
    entry = {
        "http": scope["method"],
        "path": scope["path"],
        "method": method,
        "session": headers.get("mcp-session-id"),
        "version": headers.get("mcp-protocol-version"),
    }
    async with await anyio.open_file(log, "a") as out:
        await out.write(json.dumps(entry) + "\n")
    if token is not None and headers.get("authorization") != f"Bearer {token}":
        await send(
            {"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]}
        )
        refused = headers.get("authorization", "nothing")  # echoed, as careless servers do
        await send(
            {"type": "http.response.body", "body": f"a bearer token is needed, not {refused}".encode()}
        )
        return
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    await app(scope, replay, send)


uvicorn.run(logged, host="127.0.0.1", port=port, log_level="warning")
