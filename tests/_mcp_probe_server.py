"""A stdio MCP server with one tool, for the tests where a real agent CLI connects to MCP servers it was given.

    python _mcp_probe_server.py LOG

Speaks MCP's stdio transport (JSON-RPC 2.0, one message per line) as far as a client needs for tools:
``initialize`` (answered with the client's protocol version), ``tools/list`` (``echo``, taking ``text``, and
``wait``, which takes nothing and answers after a minute) and ``tools/call`` (``echo`` answers
``probe heard: TEXT``). Each request's method, and each call's
arguments and the environment variable ``PROBE_TOKEN``, are appended to LOG as JSON lines, so a test can
see that the CLI started it with what the client gave.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

TOOLS = [
    {
        "name": "echo",
        "description": "Repeats the text it is given.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    },
    {"name": "wait", "description": "Answers after a minute.", "inputSchema": {"type": "object"}},
]


def answer(request: dict[str, Any]) -> dict[str, Any] | None:
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "probe", "version": "1.0.0"},
        }
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call" and params.get("name") == "wait":
        time.sleep(60)
        return {"content": [{"type": "text", "text": "waited"}]}
    if method == "tools/call":
        text = (params.get("arguments") or {}).get("text", "")
        return {"content": [{"type": "text", "text": f"probe heard: {text}"}], "isError": False}
    if method == "ping":
        return {}
    return None


def main() -> None:
    log_path = sys.argv[1]
    for raw in sys.stdin:
        if not raw.strip():
            continue
        request = json.loads(raw)
        with open(log_path, "a") as log:
            record = {"method": request.get("method"), "token": os.environ.get("PROBE_TOKEN")}
            if request.get("method") == "tools/call":
                record["arguments"] = (request.get("params") or {}).get("arguments")
            log.write(json.dumps(record) + "\n")
        if "id" not in request:
            continue  # a notification
        result = answer(request)
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"]}
        if result is None:
            reply["error"] = {"code": -32601, "message": f"no method {request.get('method')}"}
        else:
            reply["result"] = result
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
