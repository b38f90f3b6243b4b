"""A stand-in for ``agentstream exec`` in bus tests: a real Stream published with attach_publisher.

Usage: ``python _bus_producer.py PROMPT [--session-id ID] [--bus URL] [--no-publish]``.
The prompt says what to do, as space-separated words:
``events=N`` (log events, default 3), ``interval=S`` (seconds between them),
``fail`` (end with a fatal error), ``tool`` (open a tool call and a delta run first,
left open while the events go out), ``touch=PATH`` (create PATH once running, so a
test knows the run has started).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from agentstream import protocol as p
from agentstream.cli._bus_options import add_publish_options, publish
from agentstream.stream import Stream


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("prompt")
    parser.add_argument("--session-id", default=None)
    add_publish_options(parser)
    args = parser.parse_args()
    plan = dict(word.split("=", 1) if "=" in word else (word, "1") for word in args.prompt.split())
    stream = Stream("producer", session_id=args.session_id)
    close = publish(stream, args)
    try:
        with stream:
            if "tool" in plan:
                stream.message_delta("working on it", message_id="m1")
                stream.emit(p.ToolCall(call_id="call_1", name="shell", arguments={"cmd": "sleep"}))
            if "touch" in plan:
                Path(plan["touch"]).write_text(stream.session_id)
            for n in range(int(plan.get("events", 3))):
                stream.log(f"event {n}")
                time.sleep(float(plan.get("interval", 0)))
            if "fail" in plan:
                stream.fail("TOOL_FAILED", "asked to fail", fix="drop 'fail' from the prompt")
    finally:
        close()


if __name__ == "__main__":
    sys.exit(main())
