"""Real-shaped benchmark input: long seeded sessions in each dialect, built from the real lines in the fixtures.

    .venv/bin/python bench/realistic.py DIALECT [--turns N | --size 8MiB] [--seed S] [-o FILE]
    .venv/bin/python bench/realistic.py --check   # every dialect: convert, validate, no malformed lines

Every line is one of the real lines the CLIs wrote (``bench/claude-code-2.1.332.ndjson``,
what Claude Code 2.1.332 printed against a loopback model server, as
``tests/test_real_claude_code.py`` runs it; ``tests/fixtures/dialects/codex``,
``tests/fixtures/seeds/gemini.ndjson``) with its values replaced: fresh ids per line, message and tool call (uuid4 and
``msg_01…``/``toolu_01…`` shaped as Claude's), text of words of varied length,
deltas of a few to ~80 characters, tool outputs from empty to several KiB (some
multi-line), thinking in some turns, several tool calls per turn, usage that
grows as the context does. One seed gives the same bytes on every run.

* ``claude``: Claude Code 2.1.332 ``-p --output-format stream-json --verbose
  --include-partial-messages``: per API call a ``status`` line and
  ``message_start``, per content block ``content_block_start``, its deltas (a
  ``thinking_tokens`` line before each thinking delta), the complete
  ``assistant`` line and ``content_block_stop``, then
  ``message_delta``/``message_stop``; a ``user`` line per tool result; a
  ``result`` per turn.
* ``codex``: ``codex exec --json``: ``turn.started``, reasoning, command
  executions (started, updated, completed), file changes, MCP calls, web
  searches, the agent's messages, ``turn.completed`` with usage.
* ``gemini``: Gemini CLI ``--output-format stream-json``: the prompt, the
  answer as ``delta`` chunks, ``tool_use``/``tool_result``, a ``result`` with
  stats per turn.
* ``canonical``: the ``claude`` session read by agentstream and written as
  canonical lines (what a consumer stores or forwards).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import random
import re
import string
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import MIB, parse_size

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
CLAUDE_CODE = Path(__file__).resolve().parent / "claude-code-2.1.332.ndjson"
DIALECTS = ("claude", "codex", "gemini", "canonical")

_WORDS = [
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "it",
    "that",
    "for",
    "on",
    "with",
    "as",
    "this",
    "be",
    "are",
    "by",
    "or",
    "not",
    "was",
    "from",
    "at",
    "file",
    "function",
    "value",
    "return",
    "error",
    "test",
    "line",
    "code",
    "run",
    "build",
    "path",
    "output",
    "input",
    "stream",
    "event",
    "message",
    "tool",
    "call",
    "result",
    "session",
    "configure",
    "implementation",
    "dependency",
    "asynchronous",
    "initialise",
    "serialisation",
    "performance",
    "measurement",
    "parser",
    "decoder",
    "encoder",
    "buffer",
    "chunk",
    "newline",
    "timestamp",
    "sequence",
    "validation",
    "schema",
    "protocol",
    "dialect",
    "I",
    "we",
    "you",
    "they",
    "should",
    "would",
    "could",
    "will",
    "can",
    "may",
    "need",
    "check",
    "update",
    "read",
    "write",
    "open",
    "close",
    "start",
    "finish",
    "one",
    "two",
    "three",
    "first",
    "second",
    "last",
    "next",
    "before",
    "after",
    "because",
    "however",
    "therefore",
    "instead",
    "otherwise",
    "src/agentstream/consumer/reader.py",
    "tests/test_reader.py",
    "pyproject.toml",
    "README.md",
    "docs/usage.md",
    "`read()`",
    "`convert`",
    "`--include-partial-messages`",
    "`msgspec.json.Decoder`",
    "`os.write`",
    "`pytest",
    "-q",
    "-x`",
    "now",
    "here",
    "there",
    "each",
    "every",
    "some",
    "many",
    "few",
    "more",
    "most",
    "less",
    "least",
    "very",
    "quite",
    "rather",
    "only",
    "also",
    "still",
]
_ALPHANUM = string.ascii_letters + string.digits


def _fixture_lines(relative: str) -> list[dict[str, Any]]:
    with open(FIXTURES / relative, "rb") as file:
        return [json.loads(line) for line in file if line.strip()]


class _Templates:
    """The real lines each dialect's output is built from, loaded once."""

    def __init__(self) -> None:
        with open(
            CLAUDE_CODE, "rb"
        ) as file:  # one real turn: thinking, text and a Bash call, then the answer
            real = [json.loads(line) for line in file if line.strip()]
        self.claude_init = real[0]
        self.claude_status = real[1]
        self.claude_thinking_tokens = real[4]
        self.claude_message_start = real[2]
        self.claude_block_start = {"thinking": real[3], "text": real[17], "tool_use": real[23]}
        self.claude_delta = {"thinking": real[5], "text": real[18], "tool_use": real[24]}
        self.claude_assistant = {"thinking": real[15], "text": real[21], "tool_use": real[31]}
        self.claude_block_stop = real[16]
        self.claude_message_delta = real[33]
        self.claude_message_stop = real[34]
        self.claude_tool_result = real[35]
        self.claude_result = real[49]
        codex = _fixture_lines("dialects/codex/items.ndjson")
        doc = _fixture_lines("dialects/codex/exec-doc.ndjson")
        self.codex_thread = codex[0]
        self.codex_turn_started = codex[1]
        self.codex_reasoning = doc[2]
        self.codex_command = {"started": codex[3], "updated": codex[4], "completed": codex[6]}
        self.codex_todo = {"started": codex[2], "completed": codex[14]}
        self.codex_file_change = codex[8]
        self.codex_mcp = {"started": codex[9], "completed": codex[10]}
        self.codex_web_search = codex[11]
        self.codex_message = codex[15]
        self.codex_turn_completed = codex[16]
        gemini = _fixture_lines("seeds/gemini.ndjson")
        self.gemini_init, self.gemini_prompt, self.gemini_delta = gemini[0], gemini[1], gemini[2]
        self.gemini_tool_use, self.gemini_tool_ok, self.gemini_tool_error = gemini[4], gemini[5], gemini[6]
        self.gemini_result = gemini[8]


_TEMPLATES: _Templates | None = None


def _templates() -> _Templates:
    global _TEMPLATES
    if _TEMPLATES is None:
        _TEMPLATES = _Templates()
    return _TEMPLATES


def _dumps(obj: object) -> bytes:
    """Compact JSON with non-ASCII kept, as the CLIs write it."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


# -- the session, independent of any dialect ------------------------------------


@dataclass
class ToolUse:
    name: str
    arguments: dict[str, Any]
    output: str
    failed: bool


@dataclass
class Step:
    """One model call: optional thinking, optional text, then tool calls (none on a turn's last step)."""

    thinking: str | None
    text: str | None
    tools: list[ToolUse]
    output_tokens: int


@dataclass
class Turn:
    prompt: str
    steps: list[Step] = field(default_factory=list)


class Writer:
    """Seeded words, texts, tool calls and ids."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def words(self, count: int) -> str:
        rng = self.rng
        out = []
        for i in range(count):
            word = rng.choice(_WORDS)
            if i and rng.random() < 0.08:
                out.append(rng.choice((".", ",", ":", "?")))
                if rng.random() < 0.2:
                    out.append("\n\n")
            out.append(word if not out or out[-1] == "\n\n" else " " + word)
        return "".join(out)

    def text(self, low: int, high: int) -> str:
        return self.words(self.rng.randint(low, high))

    def chunks(self, text: str) -> list[str]:
        """Stream chunks as the APIs send them: mostly a few words, sometimes up to ~80 characters."""
        rng, out, at = self.rng, [], 0
        while at < len(text):
            size = rng.choice((3, 5, 8, 12, 16, 20, 28, 40, 60, 80))
            out.append(text[at : at + size])
            at += size
        return out or [""]

    def token(self, prefix: str, length: int) -> str:
        return prefix + "".join(self.rng.choice(_ALPHANUM) for _ in range(length))

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def path(self) -> str:
        rng = self.rng
        parts = [rng.choice(("src", "tests", "docs", "bench", "lib")), rng.choice(_WORDS).strip("`./")]
        return "/".join(p for p in parts if p) + rng.choice((".py", ".md", ".ts", ".json", ".toml"))

    def output(self) -> str:
        """A tool's output: empty, one line, or a numbered file / command output of up to several KiB."""
        rng = self.rng
        kind = rng.random()
        if kind < 0.1:
            return ""
        if kind < 0.35:
            return self.text(3, 25)
        lines = rng.choice((3, 8, 20, 40, 80, 150))
        if kind < 0.7:
            return "\n".join(f"{i:6}\t{self.text(0, 12)}" for i in range(1, lines + 1))
        return "\n".join(f"{self.path()}:{rng.randint(1, 900)}: {self.text(2, 10)}" for _ in range(lines))

    def tool(self) -> ToolUse:
        rng = self.rng
        name = rng.choice(("Read", "Bash", "Grep", "Edit", "Glob", "TodoWrite", "WebFetch"))
        if name == "Read":
            arguments: dict[str, Any] = {"file_path": "/home/dev/project/" + self.path()}
        elif name == "Bash":
            arguments = {
                "command": f"pytest -q {self.path()} -k {rng.choice(_WORDS)}",
                "description": self.text(3, 8),
            }
        elif name == "Grep":
            arguments = {"pattern": rng.choice(_WORDS), "path": "src", "output_mode": "content", "-n": True}
        elif name == "Edit":
            arguments = {
                "file_path": "/home/dev/project/" + self.path(),
                "old_string": self.text(5, 40),
                "new_string": self.text(5, 40),
            }
        elif name == "Glob":
            arguments = {"pattern": f"**/*{rng.choice(('.py', '.md', '.ts'))}"}
        elif name == "TodoWrite":
            arguments = {
                "todos": [
                    {
                        "content": self.text(3, 8),
                        "status": rng.choice(("pending", "in_progress", "completed")),
                    }
                    for _ in range(rng.randint(1, 5))
                ]
            }
        else:
            arguments = {"url": f"https://example.org/{rng.choice(_WORDS)}", "prompt": self.text(5, 15)}
        return ToolUse(name, arguments, self.output(), rng.random() < 0.08)

    def turn(self) -> Turn:
        rng = self.rng
        turn = Turn(self.text(4, 60))
        thinking_turn = rng.random() < 0.5
        for _ in range(rng.randint(1, 5)):
            turn.steps.append(
                Step(
                    self.text(10, 120) if thinking_turn and rng.random() < 0.7 else None,
                    self.text(3, 60) if rng.random() < 0.6 else None,
                    [self.tool() for _ in range(rng.choice((1, 1, 2, 3, 4)))],
                    rng.randint(20, 900),
                )
            )
        turn.steps.append(Step(None, self.text(20, 400), [], rng.randint(50, 1500)))
        return turn


# -- Claude Code ------------------------------------------------------------------


class _Claude:
    def __init__(self, writer: Writer) -> None:
        self.w, self.t = writer, _templates()
        self.session_id = writer.uuid()
        self.model = "claude-sonnet-4-5-20250929"
        self.context = 12_000
        self.totals = {"input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 0}
        self.message_id = ""
        """The API message the stream lines being written belong to (their ``api_message_id``)."""

    def line(self, template: dict[str, Any], **values: Any) -> bytes:
        line = copy.deepcopy(template)
        line.update(values)
        line["session_id"] = self.session_id
        line["uuid"] = self.w.uuid()
        if "api_message_id" in line:
            line["api_message_id"] = self.message_id
        return _dumps(line)

    def header(self) -> list[bytes]:
        return [self.line(self.t.claude_init, cwd="/home/dev/project", model=self.model)]

    def event(self, template: dict[str, Any], **values: Any) -> bytes:
        """A ``stream_event`` line like ``template`` with these values in its ``event``."""
        event = copy.deepcopy(template["event"])
        event.update(values)
        return self.line(template, event=event)

    def usage(self, output_tokens: int) -> dict[str, Any]:
        rng = self.w.rng
        fresh = rng.randint(2, 12)
        written = rng.randint(0, 3000)
        return {
            "input_tokens": fresh,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": self.context,
            "cache_creation": {"ephemeral_5m_input_tokens": written, "ephemeral_1h_input_tokens": 0},
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }

    def turn(self, turn: Turn) -> list[bytes]:
        w, t, out = self.w, self.t, []
        for step in turn.steps:
            message_id = self.message_id = w.token("msg_01", 22)
            usage = self.usage(1)
            out.append(self.line(t.claude_status))
            message = copy.deepcopy(t.claude_message_start["event"]["message"])
            message.update(id=message_id, model=self.model, usage=usage)
            out.append(self.event(t.claude_message_start, message=message))
            blocks: list[dict[str, Any]] = []
            if step.thinking is not None:
                blocks.append({"type": "thinking", "thinking": step.thinking, "signature": w.token("", 300)})
            if step.text is not None:
                blocks.append({"type": "text", "text": step.text})
            for tool in step.tools:
                block = {
                    "type": "tool_use",
                    "id": w.token("toolu_01", 22),
                    "name": tool.name,
                    "input": tool.arguments,
                }
                blocks.append(block)
            for index, block in enumerate(blocks):
                kind = block["type"]
                first = copy.deepcopy(t.claude_block_start[kind]["event"]["content_block"])
                if kind == "tool_use":
                    first.update(id=block["id"], name=block["name"])
                out.append(self.event(t.claude_block_start[kind], index=index, content_block=first))
                if kind == "tool_use":
                    text = json.dumps(block["input"], ensure_ascii=False, separators=(",", ":"))
                    deltas = [
                        {"type": "input_json_delta", "partial_json": piece} for piece in ["", *w.chunks(text)]
                    ]
                else:
                    deltas = [{"type": f"{kind}_delta", kind: piece} for piece in w.chunks(block[kind])]
                for number, delta in enumerate(deltas, 1):
                    if kind == "thinking":  # Claude Code's estimate goes out before each thinking delta
                        estimate = {"estimated_tokens": number, "estimated_tokens_delta": 1}
                        out.append(self.line(t.claude_thinking_tokens, **estimate))
                    out.append(self.event(t.claude_delta[kind], index=index, delta=delta))
                message = copy.deepcopy(t.claude_assistant[kind]["message"])
                message.update(id=message_id, model=self.model, content=[block], usage=usage)
                out.append(self.line(t.claude_assistant[kind], message=message))
                out.append(self.event(t.claude_block_stop, index=index))
            stop = {"stop_reason": "tool_use" if step.tools else "end_turn", "stop_sequence": None}
            out.append(
                self.event(t.claude_message_delta, delta=stop, usage={"output_tokens": step.output_tokens})
            )
            out.append(self.event(t.claude_message_stop))
            for tool, block in zip(step.tools, blocks[len(blocks) - len(step.tools) :], strict=True):
                template = t.claude_tool_result
                message = copy.deepcopy(template["message"])
                message["content"][0].update(
                    tool_use_id=block["id"], content=tool.output, is_error=tool.failed
                )
                meta = copy.deepcopy(template["tool_result_meta"])
                meta[0]["id"] = block["id"]
                ran = {**template["tool_use_result"], "stdout": "" if tool.failed else tool.output}
                ran["stderr"] = tool.output if tool.failed else ""
                out.append(self.line(template, message=message, tool_use_result=ran, tool_result_meta=meta))
                self.context += len(tool.output) // 4
            self.context += step.output_tokens
            for key, value in (
                ("input_tokens", usage["input_tokens"]),
                ("output_tokens", step.output_tokens),
            ):
                self.totals[key] += value
            self.totals["cache_read_input_tokens"] += self.context
        result = copy.deepcopy(t.claude_result)
        duration = w.rng.randint(3_000, 240_000)
        result.update(
            duration_ms=duration,
            duration_api_ms=duration - w.rng.randint(0, 2_000),
            num_turns=len(turn.steps),
            result=turn.steps[-1].text,
            total_cost_usd=round(w.rng.uniform(0.01, 2.0), 6),
        )
        result["usage"].update(self.totals)
        out.append(self.line(result))
        return out


# -- Codex ----------------------------------------------------------------------------


class _Codex:
    def __init__(self, writer: Writer) -> None:
        self.w, self.t = writer, _templates()
        self.items = 0
        self.usage = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0}

    def header(self) -> list[bytes]:
        thread = copy.deepcopy(self.t.codex_thread)
        thread.update(thread_id=self.w.uuid(), timestamp="2025-10-02T10:00:00.000Z")
        return [_dumps(thread)]

    def item(self, template: dict[str, Any], item_id: str, **values: Any) -> bytes:
        line = copy.deepcopy(template)
        line["item"].update(id=item_id, **values)
        return _dumps(line)

    def next_id(self) -> str:
        self.items += 1
        return f"item_{self.items}"

    def turn(self, turn: Turn) -> list[bytes]:
        w, t, rng = self.w, self.t, self.w.rng
        out = [_dumps(t.codex_turn_started)]
        for step in turn.steps:
            if step.thinking is not None:
                title = w.text(2, 6)
                out.append(
                    self.item(t.codex_reasoning, self.next_id(), text=f"**{title}**\n\n{step.thinking}")
                )
            if step.text is not None and step.tools:
                out.append(self.item(t.codex_message, self.next_id(), text=step.text))
            for tool in step.tools:
                item_id = self.next_id()
                kind = rng.random()
                if kind < 0.65:
                    command = t.codex_command
                    line = f"bash -lc '{tool.arguments.get('command') or 'cat ' + w.path()}'"
                    out.append(self.item(command["started"], item_id, command=line))
                    lines = tool.output.split("\n")
                    for cut in sorted(
                        rng.sample(range(len(lines)), min(len(lines), rng.choice((0, 0, 1, 3))))
                    ):
                        partial = "\n".join(lines[:cut]) + "\n"
                        out.append(
                            self.item(command["updated"], item_id, command=line, aggregated_output=partial)
                        )
                    code = 1 if tool.failed else 0
                    out.append(
                        self.item(
                            command["completed"],
                            item_id,
                            command=line,
                            aggregated_output=tool.output,
                            exit_code=code,
                            status="failed" if code else "completed",
                        )
                    )
                elif kind < 0.75:
                    changes = [
                        {"path": w.path(), "kind": rng.choice(("update", "add", "delete"))}
                        for _ in range(rng.randint(1, 4))
                    ]
                    out.append(self.item(t.codex_file_change, item_id, changes=changes))
                elif kind < 0.85:
                    arguments = {"query": w.text(2, 6)}
                    out.append(self.item(t.codex_mcp["started"], item_id, arguments=arguments))
                    result = {"content": [{"type": "text", "text": tool.output}], "structured_content": None}
                    out.append(
                        self.item(t.codex_mcp["completed"], item_id, arguments=arguments, result=result)
                    )
                elif kind < 0.93:
                    out.append(self.item(t.codex_web_search, item_id, query=w.text(2, 8)))
                else:
                    todo = [{"text": w.text(2, 6), "completed": False} for _ in range(rng.randint(2, 4))]
                    out.append(self.item(t.codex_todo["started"], item_id, items=todo))
                    for entry in todo:
                        entry["completed"] = True
                    out.append(self.item(t.codex_todo["completed"], item_id, items=todo))
            self.usage["input_tokens"] += rng.randint(2_000, 30_000)
            self.usage["cached_input_tokens"] = int(self.usage["input_tokens"] * 0.9)
            self.usage["output_tokens"] += step.output_tokens
        out.append(self.item(t.codex_message, self.next_id(), text=turn.steps[-1].text))
        done = copy.deepcopy(t.codex_turn_completed)
        done["usage"] = dict(self.usage)
        out.append(_dumps(done))
        return out


# -- Gemini CLI -------------------------------------------------------------------------


class _Gemini:
    def __init__(self, writer: Writer) -> None:
        self.w, self.t = writer, _templates()
        self.clock = _Clock(writer.rng)
        self.tokens = {"input_tokens": 0, "output_tokens": 0, "cached": 0}
        self.model = "gemini-2.5-pro"

    def line(self, template: dict[str, Any], **values: Any) -> bytes:
        line = copy.deepcopy(template)
        line.update(values, timestamp=self.clock.stamp())
        return _dumps(line)

    def header(self) -> list[bytes]:
        return [self.line(self.t.gemini_init, session_id=self.w.uuid(), model=self.model)]

    def turn(self, turn: Turn) -> list[bytes]:
        w, t, rng = self.w, self.t, self.w.rng
        out = [self.line(t.gemini_prompt, content=turn.prompt)]
        tool_calls = 0
        for step in turn.steps:
            if step.text is not None:
                out += [self.line(t.gemini_delta, content=piece) for piece in w.chunks(step.text)]
            for tool in step.tools:
                name = rng.choice(
                    ("read_file", "run_shell_command", "search_file_content", "replace", "glob")
                )
                tool_id = f"{name}-{self.clock.ms}-{w.token('', 13).lower()}"
                out.append(
                    self.line(t.gemini_tool_use, tool_name=name, tool_id=tool_id, parameters=tool.arguments)
                )
                if tool.failed:
                    error = {"type": "Error", "message": w.text(3, 12)}
                    out.append(self.line(t.gemini_tool_error, tool_id=tool_id, error=error))
                else:
                    out.append(self.line(t.gemini_tool_ok, tool_id=tool_id, output=tool.output))
                tool_calls += 1
            self.tokens["input_tokens"] += rng.randint(2_000, 30_000)
            self.tokens["cached"] = int(self.tokens["input_tokens"] * 0.8)
            self.tokens["output_tokens"] += step.output_tokens
        tokens = dict(self.tokens)
        stats = {
            "total_tokens": tokens["input_tokens"] + tokens["output_tokens"],
            **tokens,
            "input": tokens["input_tokens"] - tokens["cached"],
            "duration_ms": rng.randint(2_000, 200_000),
            "tool_calls": tool_calls,
            "models": {self.model: dict(tokens)},
        }
        out.append(self.line(t.gemini_result, stats=stats))
        return out


_RENDERERS: dict[str, Callable[[Writer], _Claude | _Codex | _Gemini]] = {
    "claude": _Claude,
    "codex": _Codex,
    "gemini": _Gemini,
}


def session(
    dialect: str, *, seed: int = 0, turns: int | None = None, size: int | None = None
) -> Iterator[bytes]:
    """The lines of one seeded session in ``dialect``: ``turns`` turns, or whole turns until ``size`` bytes."""
    if dialect == "canonical":
        yield from _canonical(session("claude", seed=seed, turns=turns, size=size), seed)
        return
    writer = Writer(random.Random(seed))
    renderer = _RENDERERS[dialect](writer)
    written = 0
    for line in renderer.header():
        written += len(line)
        yield line
    done = 0
    while (turns is None or done < turns) and (size is None or written < size):
        for line in renderer.turn(writer.turn()):
            written += len(line)
            yield line
        done += 1
        if turns is None and size is None:
            break


def _canonical(lines: Iterator[bytes], seed: int) -> Iterator[bytes]:
    """Claude lines read by agentstream, written as canonical lines.

    The ids the reader makes up (``rsn_…``, ``msg_…``) and the times it stamps
    are replaced by seeded ones, so that one seed gives the same bytes.
    """
    from agentstream import protocol as p
    from agentstream.consumer import read

    rng = random.Random(seed)
    made_up: dict[bytes, bytes] = {}

    def fresh(match: re.Match[bytes]) -> bytes:
        token = match[0]
        if token not in made_up:
            made_up[token] = match[1] + b"_" + b"%016x" % rng.getrandbits(64)
        return made_up[token]

    clock = _Clock(rng)
    for batch in read(_Chunks(lines), "claude").batches():
        for event in batch:
            event.ts = clock.stamp()  # type: ignore[union-attr]
            yield _MADE_UP_ID.sub(fresh, p.encode_line(event))


_MADE_UP_ID = re.compile(rb"\b([a-z]+)_[0-9a-f]{16}\b")


class _Clock:
    """Seeded RFC 3339 times that move forward by up to ``step_ms`` a call, from 2025-11-01T12:00:00Z."""

    def __init__(self, rng: random.Random, step_ms: int = 900) -> None:
        self.rng, self.step_ms, self.ms = rng, step_ms, 1_761_998_400_000

    def stamp(self) -> str:
        self.ms += self.rng.randint(0, self.step_ms)
        moment = datetime.fromtimestamp(self.ms / 1000, tz=UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self.ms % 1000:03d}Z"


class _Chunks(io.RawIOBase):
    """A file over a line iterator, so that a whole session need not be in memory."""

    def __init__(self, lines: Iterator[bytes]) -> None:
        self._lines, self._rest = lines, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        want = len(buffer)
        data = self._rest
        while len(data) < want:
            line = next(self._lines, None)
            if line is None:
                break
            data += line
        buffer[: min(want, len(data))] = data[:want]
        self._rest = data[want:]
        return min(want, len(data))


def generate(dialect: str, *, seed: int = 0, turns: int | None = None, size: int | None = None) -> bytes:
    return b"".join(session(dialect, seed=seed, turns=turns, size=size))


def write(path: Path, dialect: str, *, size: int, seed: int = 0) -> int:
    """Write whole turns of a session until the file has about ``size`` bytes; return the number of lines."""
    count = 0
    with open(path, "wb", buffering=MIB) as out:
        for line in session(dialect, seed=seed, size=size):
            out.write(line)
            count += 1
    return count


def write_long_line(path: Path, dialect: str, *, size: int, seed: int = 0) -> int:
    """A short session whose one long line (a tool's output, or a message in canonical) has about ``size``
    bytes; return that line's length."""
    writer = Writer(random.Random(seed))
    block = "\n".join(writer.output() for _ in range(64))
    text = block * (size // len(block.encode()) + 1)
    if dialect == "canonical":
        return _write_canonical_long_line(path, text)
    if dialect != "claude":
        raise ValueError(f"no long-line session for {dialect!r}")
    claude = _Claude(writer)
    tool = ToolUse("Read", {"file_path": "/home/dev/project/big.log"}, text, False)
    turn = Turn("read the log", [Step(None, "Reading it.", [tool], 30), Step(None, "Done.", [], 5)])
    lines = claude.header() + claude.turn(turn)
    with open(path, "wb") as out:
        out.writelines(lines)
    return max(map(len, lines))


def _write_canonical_long_line(path: Path, text: str) -> int:
    from agentstream.stream import Stream

    with open(path, "wb") as out, Stream("bench-agent", out=out, model="m") as stream:
        stream.message(text)
    with open(path, "rb") as file:
        return max(map(len, file))


def check(seed: int = 0, turns: int = 30) -> list[str]:
    """What is wrong with the generated streams: each must read without a malformed line or warning, and its
    canonical conversion must validate."""
    from agentstream import protocol as p
    from agentstream.cli.convert_cmd import convert
    from agentstream.consumer import read
    from agentstream.validate import validate_stream

    problems = []
    for dialect in DIALECTS:
        data = generate(dialect, seed=seed, turns=turns)
        for event in read(data, dialect):
            if isinstance(event, p.Error) or (isinstance(event, p.Log) and event.level in ("warn", "error")):
                problems.append(f"{dialect}: {p.encode_line(event).decode().strip()[:300]}")
        canonical = io.BytesIO()
        convert(io.BytesIO(data), canonical, from_dialect=dialect, to_dialect="canonical")
        for violation in validate_stream(io.BytesIO(canonical.getvalue())):
            problems.append(f"{dialect} → canonical: {violation}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dialect", nargs="?", choices=DIALECTS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--turns", type=int, default=None)
    parser.add_argument("--size", type=parse_size, default=None, help="whole turns up to about this size")
    parser.add_argument("-o", "--output", type=Path, default=None)
    parser.add_argument("--check", action="store_true", help="check every dialect's stream and exit")
    args = parser.parse_args()
    if args.check:
        problems = check(args.seed)
        for problem in problems:
            print(problem)
        print(f"{len(problems)} problems")
        return 1 if problems else 0
    if args.dialect is None:
        parser.error("name a dialect, or pass --check")
    size = args.size or (None if args.turns else 8 * MIB)
    with open(args.output, "wb") if args.output else contextlib.nullcontext(sys.stdout.buffer) as out:
        out.writelines(session(args.dialect, seed=args.seed, turns=args.turns, size=size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
