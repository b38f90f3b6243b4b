"""``agentstream demo``: a short, real producer run that shows every output format."""

from __future__ import annotations

import argparse
import time

from agentstream.cli._options import add_output_options, seconds


def configure(parser: argparse.ArgumentParser) -> None:
    add_output_options(parser)
    parser.add_argument("--delay", type=seconds, default=0.05, help="seconds between chunks (default 0.05)")
    parser.add_argument("--fail", action="store_true", help="end with a fatal error, to see the failure path")


def run(args: argparse.Namespace) -> int:
    from agentstream import protocol as p
    from agentstream.stream import Stream

    words = ["agentstream", "always", "ends", "its", "stream", "with", "exactly", "one", "result", "event."]
    with Stream(
        "demo",
        output_format=args.output_format,
        dialect=args.dialect,
        tools=["count_words"],
        color=args.color,
    ) as s:
        with s.step("turn 1"):
            s.reasoning("The user wants a demonstration; I will count some words.")
            with s.tool_call("count_words", {"text": " ".join(words)}) as call:
                for n in range(1, len(words) + 1, 4):
                    call.progress(f"counted {n} words")
                    time.sleep(args.delay)
                call.succeed(str(len(words)))
            s.record_usage("demo-model", input_tokens=42, output_tokens=len(words))
        if args.fail:
            s.fail("PROVIDER_ERROR", "the demo was asked to fail", fix="run without --fail")
            return s.result.exit_code if s.result else 1
        with s.step("turn 2"):
            message_id = p.new_id("msg")
            for i, word in enumerate(words):
                s.message_delta(word if i == 0 else " " + word, message_id=message_id)
                time.sleep(args.delay)
            s.message(" ".join(words), message_id=message_id)
            s.record_usage("demo-model", input_tokens=60, output_tokens=len(words))
    return s.result.exit_code if s.result else 0
