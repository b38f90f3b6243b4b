"""Token, tool and cost totals over the agent CLIs' session logs (and the bus's runs), counted as billed.

Each CLI's logs are scanned by a reader made for speed: files are read whole,
lines that cannot carry usage are skipped by a byte search, and the rest are
decoded with typed ``msgspec`` structs that keep only the fields counted here.
The counting rules are the dialects' own (:mod:`agentstream.dialects.claude_log`,
:mod:`~agentstream.dialects.codex_log`, :mod:`~agentstream.dialects.gemini_log`):

- Claude Code logs one API response once per content block, each record
  repeating its ``usage``; a model call (message id + request id, across every
  file — a resumed session copies earlier records) counts once, with the largest
  figure seen for each kind of token. Records lacking either id count each time.
- Codex's ``token_count`` events count by the growth of the running total.
- Gemini's messages count once per message id, from their last copy.

Token kinds are kept apart in the billing sense: ``input`` is prompt tokens
neither read from nor written to the prompt cache, ``cache_read`` and
``cache_write`` the cached ones, ``output`` every generated token and
``reasoning`` the part of ``output`` spent thinking.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

import msgspec

from agentstream.agent.pricing import PriceTable

if TYPE_CHECKING:
    from agentstream.errors import AgentstreamError

__all__ = [
    "CLIS",
    "Call",
    "Scan",
    "Totals",
    "default_roots",
    "group_totals",
    "scan",
]

CLIS: Final = ("claude", "codex", "gemini")
GroupBy = Literal["day", "session", "model", "cli"]
_DIALECT_CLI: Final = {"claude-log": "claude", "codex-log": "codex", "gemini-log": "gemini"}


@dataclass
class Call:
    """One billed model call."""

    cli: str
    session: str
    model: str
    ts: str
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int = 0

    def widen(self, other: Call) -> None:
        """Another record of the same call: keep the largest figure of each kind."""
        self.input = max(self.input, other.input)
        self.output = max(self.output, other.output)
        self.cache_read = max(self.cache_read, other.cache_read)
        self.cache_write = max(self.cache_write, other.cache_write)
        self.reasoning = max(self.reasoning, other.reasoning)


@dataclass
class Session:
    """What is counted per session rather than per call, kept per UTC day so that ``--since`` can cut it."""

    cli: str
    session: str
    days: dict[str, tuple[str, str]] = field(default_factory=dict)
    """UTC day -> the first and last time of the session's records read that day."""
    tools: dict[str, int] = field(default_factory=dict)
    """UTC day (``""`` when the record had no time) -> the tool calls made that day."""
    wall_time_ms: int = 0
    """Given by the bus for its runs; otherwise from the first to the last time of the records counted."""

    def saw(self, ts: str) -> None:
        """A record at ``ts`` (canonical UTC, ``""`` when unknown)."""
        if ts:
            day = ts[:10]
            first, last = self.days.get(day, (ts, ts))
            self.days[day] = (min(first, ts), max(last, ts))

    def called(self, ts: str, count: int = 1) -> None:
        """``count`` tool calls in a record at ``ts``."""
        day = ts[:10]
        self.tools[day] = self.tools.get(day, 0) + count


def _utc(stamp: object) -> str:
    """A record's time as canonical UTC (``""`` when it has none that can be read): days are UTC days."""
    from agentstream.dialects.kit import rfc3339

    return rfc3339(stamp) or ""


@dataclass
class Scan:
    """Everything counted: calls, sessions, and what could not be read."""

    calls: list[Call] = field(default_factory=list)
    sessions: dict[tuple[str, str], Session] = field(default_factory=dict)
    files: int = 0
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)

    def session(self, cli: str, session: str) -> Session:
        key = (cli, session)
        found = self.sessions.get(key)
        if found is None:
            found = self.sessions[key] = Session(cli, session)
        return found


# -- where the logs are ------------------------------------------------------------------


def default_roots() -> dict[str, list[Path]]:
    """Each CLI's default log directories that exist (``$CLAUDE_CONFIG_DIR``, ``$CODEX_HOME`` honoured)."""
    home = Path.home()
    claude_dirs = [d.strip() for d in os.environ.get("CLAUDE_CONFIG_DIR", "").split(",") if d.strip()]
    if not claude_dirs:
        xdg = os.environ.get("XDG_CONFIG_HOME") or str(home / ".config")
        claude_dirs = [str(Path(xdg) / "claude"), str(home / ".claude")]
    codex_home = os.environ.get("CODEX_HOME") or str(home / ".codex")
    roots = {
        "claude": [Path(d) / "projects" for d in claude_dirs],
        "codex": [Path(codex_home) / "sessions"],
        "gemini": [home / ".gemini" / "tmp"],
    }
    return {cli: [path for path in paths if path.is_dir()] for cli, paths in roots.items()}


def _log_files(root: Path, cli: str) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    pattern = "*.json*" if cli == "gemini" else "*.jsonl"
    for path in sorted(root.rglob(pattern)):
        if path.is_file() and path.suffix in (".jsonl", ".json"):
            yield path


def _sniff_cli(path: Path) -> str | None:
    """Which CLI wrote a file given by the user, from its first lines."""
    from agentstream.dialects import DETECT_LINES, detect_dialect_in_lines

    try:
        with path.open("rb") as file:
            head = [line for line in (file.readline() for _ in range(DETECT_LINES)) if line.strip()]
    except OSError:
        return None
    if head:
        head[0] = head[0].removeprefix(codecs.BOM_UTF8)
    if path.suffix == ".json" and head and head[0].strip() == b"{":
        return "gemini"  # the older, pretty-printed chat log
    return _DIALECT_CLI.get(detect_dialect_in_lines(head) or "")


# -- Claude Code --------------------------------------------------------------------------


MAX_TOKENS: Final = 10**12
"""More tokens than one model call has ever had: a figure past it, or below 0, is a corrupt record's, and is
dropped as a field of the wrong kind is (it would otherwise add, or take away, a fortune)."""
_TOKENS = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS)]


class _ClaudeUsage(msgspec.Struct):
    input_tokens: _TOKENS = 0
    output_tokens: _TOKENS = 0
    cache_creation_input_tokens: _TOKENS | None = None
    cache_read_input_tokens: _TOKENS | None = None


class _ClaudeBlock(msgspec.Struct):
    type: str = ""
    id: str | None = None


class _ClaudeMessage(msgspec.Struct):
    id: str | None = None
    model: str | None = None
    usage: _ClaudeUsage | None = None
    content: list[_ClaudeBlock] | str | None = None


class _ClaudeRecord(msgspec.Struct):
    timestamp: str | None = None
    sessionId: str | None = None
    requestId: str | None = None
    message: _ClaudeMessage | None = None


_claude_record = msgspec.json.Decoder(_ClaudeRecord).decode
_any_json = msgspec.json.Decoder().decode


def _claude_lenient(line: bytes) -> _ClaudeRecord | None:
    """A record with a field of an unexpected kind: keep what is usable, drop that field."""
    try:
        obj = _any_json(line)
    except msgspec.DecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("message"), dict):
        return None
    message, usage = obj["message"], obj["message"].get("usage")
    figures = _claude_figures(usage) if isinstance(usage, dict) else {}
    content = message.get("content")
    blocks = [
        _ClaudeBlock(type=str(b.get("type", "")), id=b.get("id") if isinstance(b.get("id"), str) else None)
        for b in (content if isinstance(content, list) else ())
        if isinstance(b, dict)
    ]

    def text(value: object) -> str | None:
        return value if isinstance(value, str) else None

    return _ClaudeRecord(
        timestamp=text(obj.get("timestamp")),
        sessionId=text(obj.get("sessionId")),
        requestId=text(obj.get("requestId")),
        message=_ClaudeMessage(
            id=text(message.get("id")),
            model=text(message.get("model")),
            usage=_ClaudeUsage(**figures) if isinstance(usage, dict) else None,
            content=blocks,
        ),
    )


def _claude_figures(usage: dict[str, Any]) -> dict[str, int]:
    """The token counts read as the dialects read numbers (``250.0`` is 250, ``"10"`` is 10); others are lost."""
    from agentstream.dialects.kit import Fields

    fields = Fields(usage, "usage")
    figures = {key: fields.opt_integer(key) for key in _ClaudeUsage.__struct_fields__}
    return {key: value for key, value in figures.items() if value is not None and 0 <= value <= MAX_TOKENS}


class _ClaudeCounter:
    def __init__(self, out: Scan) -> None:
        self.out = out
        self.calls: dict[tuple[str, str], Call] = {}
        self.tools: set[str] = set()

    def file(self, path: Path, data: bytes) -> None:
        from agentstream.dialects.claude_log import call_key

        fallback = path.stem
        for line in data.split(b"\n"):
            if b'"usage"' not in line:
                continue  # no usage, no tool call: nothing to count on this line
            record: _ClaudeRecord | None
            try:
                record = _claude_record(line)
            except msgspec.ValidationError:
                record = _claude_lenient(line)
            except msgspec.DecodeError:
                continue
            if record is None or record.message is None or record.message.usage is None:
                continue
            message, usage = record.message, record.message.usage
            session = self.out.session("claude", record.sessionId or fallback)
            ts = _utc(record.timestamp)
            session.saw(ts)
            if isinstance(message.content, list):
                for block in message.content:
                    if block.type == "tool_use" and (block.id is None or block.id not in self.tools):
                        session.called(ts)
                        if block.id is not None:
                            self.tools.add(block.id)
            if message.model == "<synthetic>":
                continue  # Claude Code's own stand-in for a failed request: nothing was billed
            call = Call(
                "claude",
                session.session,
                message.model or "unknown",
                ts,
                input=usage.input_tokens,
                output=usage.output_tokens,
                cache_read=usage.cache_read_input_tokens or 0,
                cache_write=usage.cache_creation_input_tokens or 0,
            )
            key = call_key(message.id, record.requestId)
            if key is None:
                self.out.calls.append(call)
            elif key in self.calls:
                self.calls[key].widen(call)
            else:
                self.calls[key] = call
                self.out.calls.append(call)


# -- Codex ----------------------------------------------------------------------------------

_CODEX_MARKS: Final = (b'"token_count"', b'"turn_context"', b'"session_meta"', b"_call")
_CODEX_CALLS: Final = frozenset({"function_call", "custom_tool_call", "local_shell_call", "web_search_call"})


class _CodexCounter:
    def __init__(self, out: Scan) -> None:
        self.out = out

    def file(self, path: Path, data: bytes) -> None:
        from agentstream.dialects.codex_log import usage_step

        model, total = "unknown", None
        session = self.out.session("codex", path.stem.removeprefix("rollout-"))
        for line in data.split(b"\n"):
            if not any(mark in line for mark in _CODEX_MARKS):
                continue
            try:
                obj = _any_json(line)
            except msgspec.DecodeError:
                continue
            payload = obj.get("payload") if isinstance(obj, dict) else None
            if not isinstance(payload, dict):
                continue
            kind, ts = obj.get("type"), _utc(obj.get("timestamp"))
            if kind == "session_meta" and isinstance(payload.get("id"), str):
                if not session.days and not session.tools:
                    del self.out.sessions[("codex", session.session)]
                    session = self.out.session("codex", payload["id"])
            elif kind == "turn_context" and isinstance(payload.get("model"), str):
                model = payload["model"]
            elif kind == "response_item" and payload.get("type") in _CODEX_CALLS:
                session.called(ts)
            elif kind == "event_msg" and payload.get("type") == "token_count":
                total, step = usage_step(total, payload.get("info"))
                if step is not None:
                    self.out.calls.append(
                        Call(
                            "codex",
                            session.session,
                            model,
                            ts,
                            input=max(step.input - step.cached - step.cache_write, 0),
                            output=step.output,
                            cache_read=step.cached,
                            cache_write=step.cache_write,
                            reasoning=step.reasoning,
                        )
                    )
            session.saw(ts)


# -- Gemini CLI ---------------------------------------------------------------------------------


class _GeminiCounter:
    def __init__(self, out: Scan) -> None:
        self.out = out

    def file(self, path: Path, data: bytes) -> None:
        messages: dict[str, dict[str, Any]] = {}
        session_id = path.stem
        for obj in _gemini_records(data):
            if isinstance(obj.get("sessionId"), str):
                session_id = obj["sessionId"]
            nested = obj.get("messages")
            update = obj.get("$set")
            if isinstance(update, dict):
                nested = update.get("messages")
            for message in [obj, *(nested if isinstance(nested, list) else [])]:
                if isinstance(message.get("id"), str) and isinstance(message.get("type"), str):
                    messages[message["id"]] = message  # a message's last copy is its complete one
        self._count(session_id, messages.values())

    def _count(self, session_id: str, messages: Iterable[dict[str, Any]]) -> None:
        from agentstream.dialects.gemini_log import GeminiTokens

        session = self.out.session("gemini", session_id)
        for message in messages:
            model, ts = message.get("model"), _utc(message.get("timestamp"))
            session.saw(ts)
            if message.get("type") != "gemini":
                continue
            calls = message.get("toolCalls")
            if isinstance(calls, list) and calls:
                session.called(ts, len(calls))
            tokens = GeminiTokens.read(message.get("tokens"))
            if tokens is None:
                continue
            self.out.calls.append(
                Call(
                    "gemini",
                    session_id,
                    model if isinstance(model, str) else "unknown",
                    ts,
                    input=max(tokens.input - tokens.cached, 0),
                    output=tokens.output,
                    cache_read=tokens.cached,
                    reasoning=tokens.reasoning,
                )
            )


def _gemini_records(data: bytes) -> Iterator[dict[str, Any]]:
    """The records of a chat log: JSONL, or the older single JSON document (pretty-printed or not)."""
    try:
        whole = _any_json(data)
    except msgspec.DecodeError:
        whole = None
    if isinstance(whole, dict):
        yield whole
        return
    for line in data.split(b"\n"):
        try:
            obj = _any_json(line)
        except msgspec.DecodeError:
            continue
        if isinstance(obj, dict):
            yield obj


# -- the bus ------------------------------------------------------------------------------------


def scan_bus(out: Scan, url: str | None, warn: Callable[[str], None]) -> None:
    """Count the finished runs on the bus: each run's ``result`` carries its usage totals.

    A run that wrapped an agent CLI whose own session log was counted (its ``child_session``
    status names a session read from the logs) is left out: the log already counts those
    calls, each with its model. A SQLite bus whose file does not exist yet holds nothing to
    count, and is not created (said on stderr when the bus was named with ``--bus`` or
    ``$AGENTSTREAM_BUS``).
    """
    from agentstream import protocol as p
    from agentstream.bus import BUS_ENV, BusUnavailable, missing_local_bus, open_bus
    from agentstream.errors import AgentstreamError, MalformedEventError

    try:
        missing = missing_local_bus(url)
    except BusUnavailable as exc:  # a path where no bus can be (under a file): not one without runs
        warn(_not_counted(exc))
        return
    if missing is not None:
        if (
            url or os.environ.get(BUS_ENV, "").strip()
        ):  # a bus named on purpose: a typo must not pass silently
            warn(f"no bus at {missing}: no run was recorded there")
        return
    logged = {session for _, session in out.sessions}
    try:
        with open_bus(url) as bus:
            for run in bus.list_runs(statuses=("succeeded", "failed", "interrupted"), limit=1_000_000):
                try:
                    result = _stored_event(bus, run.run_id, max(run.last_seq, 0))
                    if not isinstance(result, p.Result):
                        continue
                    told = _RunTold.read(bus, run.run_id, run.last_seq)
                except MalformedEventError as exc:
                    warn(
                        f"run {run.run_id} is not counted: its stored events are not readable ({exc.message})"
                    )
                    continue
                if told.child_session in logged:
                    continue
                usage, stamp = result.usage, _bus_time(run.updated)
                written = usage.cache_write_tokens if usage.cache_write_tokens is not p.UNSET else 0
                session = out.session("agentstream", run.run_id)
                session.saw(stamp)
                if told.tool_calls:
                    session.called(stamp, told.tool_calls)
                session.wall_time_ms = result.duration_ms
                out.calls.append(
                    Call(
                        "agentstream",
                        run.run_id,
                        told.model,
                        stamp,
                        input=max(usage.input_tokens - usage.cached_tokens - written, 0),
                        output=usage.output_tokens,
                        cache_read=usage.cached_tokens,
                        cache_write=written,
                        reasoning=usage.reasoning_tokens,
                    )
                )
    except AgentstreamError as exc:
        warn(_not_counted(exc))


def _not_counted(exc: AgentstreamError) -> str:
    """The warning for a bus whose runs cannot be counted: what went wrong, and the fix."""
    fix = f" (fix: {exc.fix})" if exc.fix else ""
    return f"the bus's runs are not counted: {exc.code}: {exc.message}{fix}"


@dataclass
class _RunTold:
    """What a stored run says beyond its result: the model it used, how many tools it called (the result's
    ``tools_used`` names each tool once, however often it was called) and the agent CLI session it wrapped."""

    model: str = "unknown"
    tool_calls: int = 0
    child_session: str | None = None

    @classmethod
    def read(cls, bus: Any, run_id: str, last_seq: int) -> _RunTold:
        """The run's ``start`` model, else the model most of its ``usage`` events name (a wrapped CLI's
        ``start`` is the wrap's own, which names none); its ``tool_call`` events, counted; and its
        ``child_session`` status, if any.

        Only ``start``, ``usage`` and ``status`` events are decoded. Raises MalformedEventError.
        """
        from collections import Counter

        from agentstream import protocol as p

        told, models = cls(), Counter[str]()
        seq = 0
        while seq <= last_seq:
            records = bus.read(run_id, seq, limit=_PAGE)
            if not records:
                break
            for record in records:
                if record.type == "tool_call":
                    told.tool_calls += 1
                elif record.type in _TOLD_TYPES:
                    event = p.decode(record.line)
                    if isinstance(event, p.Start) and isinstance(event.model, str) and event.model:
                        told.model = event.model
                    elif isinstance(event, p.Usage) and event.model:
                        models[event.model] += 1
                    elif isinstance(event, p.Status) and event.status == "child_session":
                        told.child_session = event.message if isinstance(event.message, str) else None
            seq = records[-1].seq + 1
        if told.model == "unknown" and models:
            told.model = models.most_common(1)[0][0]
        return told


_PAGE: Final = 1000
"""Events read from the bus per call while a run is looked through."""
_TOLD_TYPES: Final = frozenset({"start", "usage", "status"})


def _stored_event(bus: Any, run_id: str, seq: int) -> Any:
    """The run's event at ``seq`` on the bus (None when there is none); raises MalformedEventError."""
    from agentstream import protocol as p

    records = bus.read(run_id, seq, limit=1)
    return p.decode(records[0].line) if records else None


def _bus_time(unix: float) -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(unix)) if unix else ""


# -- scanning and totals ------------------------------------------------------------------------

_COUNTERS: Final[dict[str, type[_ClaudeCounter | _CodexCounter | _GeminiCounter]]] = {
    "claude": _ClaudeCounter,
    "codex": _CodexCounter,
    "gemini": _GeminiCounter,
}


def scan(
    paths: Iterable[str | os.PathLike[str]] = (),
    *,
    clis: Iterable[str] = CLIS,
    progress: Callable[[int, int], None] | None = None,
) -> Scan:
    """Scan ``paths`` (files and directories, recursively), or every CLI's default log locations when none.

    ``progress(files_done, bytes_done)`` is called after each file.
    """
    out = Scan()
    wanted = set(clis)
    counters: dict[str, _ClaudeCounter | _CodexCounter | _GeminiCounter] = {
        cli: _COUNTERS[cli](out) for cli in CLIS if cli in wanted
    }
    targets: list[tuple[str | None, Path]] = []
    given = [Path(path) for path in paths]
    if given:
        for path in given:
            if not path.exists():
                out.skipped.append(f"{path}: no such file or directory")
            elif path.is_file():
                targets.append((None, path))
            else:
                targets += [
                    (None, file)
                    for file in sorted(path.rglob("*.json*"))
                    if file.suffix in (".jsonl", ".json") and file.is_file()  # a FIFO would block the scan
                ]
    else:
        for owner, roots in default_roots().items():
            if owner in wanted:
                targets += [(owner, file) for root in roots for file in _log_files(root, owner)]
    for named, path in targets:
        cli = _sniff_cli(path) if named is None or named == "gemini" else named
        if cli is None:
            if named is None:  # a file of Gemini's own that is no chat (its prompt history) is passed over
                out.skipped.append(f"{path}: not a session log agentstream knows")
            continue
        if cli not in counters:
            continue
        try:
            data = path.read_bytes()
        except OSError as exc:
            out.skipped.append(f"{path}: {exc.strerror}")
            continue
        counters[cli].file(path, data.removeprefix(codecs.BOM_UTF8))
        out.files += 1
        out.bytes += len(data)
        if progress is not None:
            progress(out.files, out.bytes)
    return out


@dataclass
class Totals:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    tool_calls: int = 0
    wall_time_ms: int = 0
    cost_usd: float = 0.0
    unpriced_models: list[str] = field(default_factory=list)
    """Models with no price in the table: their tokens are counted, their cost is not."""

    def add_call(self, call: Call, prices: PriceTable) -> None:
        self.calls += 1
        self.input_tokens += call.input
        self.output_tokens += call.output
        self.cache_read_tokens += call.cache_read
        self.cache_write_tokens += call.cache_write
        self.reasoning_tokens += call.reasoning
        rates = prices.rates(call.model)
        if rates is None:
            if call.model not in self.unpriced_models:
                self.unpriced_models.append(call.model)
            return
        self.cost_usd += rates.cost(
            fresh=call.input, output=call.output, cache_read=call.cache_read, cache_write=call.cache_write
        )

    def as_dict(self) -> dict[str, Any]:
        data = {key: getattr(self, key) for key in self.__dataclass_fields__}
        data["cost_usd"] = round(self.cost_usd, 6)
        data["unpriced_models"] = sorted(self.unpriced_models)
        return data


@dataclass
class _Window:
    """What a session did on or after the first day counted: its tool calls and the span of its records."""

    tool_calls: int
    first_ts: str
    last_ts: str

    @classmethod
    def of(cls, session: Session, since: str | None) -> _Window:
        spans = [span for day, span in session.days.items() if not since or day >= since]
        tools = sum(count for day, count in session.tools.items() if not since or day >= since)
        if not spans:
            return cls(tools, "", "")
        return cls(tools, min(first for first, _ in spans), max(last for _, last in spans))

    def wall_ms(self, session: Session) -> int:
        """The bus's own figure for its runs; else from the first to the last record counted."""
        if not self.first_ts:
            return 0
        if session.wall_time_ms:
            return session.wall_time_ms
        from agentstream.dialects.kit import epoch_ms

        return max(epoch_ms(self.last_ts) - epoch_ms(self.first_ts), 0)


def group_totals(
    found: Scan, prices: PriceTable, *, by: GroupBy = "day", since: str | None = None
) -> tuple[Totals, list[tuple[str, Totals]]]:
    """The totals and the groups (sorted by key) of what was done on or after ``since`` (``YYYY-MM-DD``, UTC).

    Tool calls and wall time belong to sessions: what each session did in that window goes to the group of
    its first call there (or, for a session with no call there, of its first record there).
    """

    def key_of(call: Call) -> str:
        if by == "day":
            return call.ts[:10] or "unknown"
        if by == "session":
            return f"{call.cli}:{call.session}"
        if by == "model":
            return call.model
        return call.cli

    totals, groups = Totals(), dict[str, Totals]()
    session_group: dict[tuple[str, str], str] = {}
    for call in sorted(found.calls, key=lambda c: c.ts):
        if since and call.ts[:10] < since:
            continue  # a call without a time has none in the window either
        key = key_of(call)
        group = groups.get(key)
        if group is None:
            group = groups[key] = Totals()
        group.add_call(call, prices)
        totals.add_call(call, prices)
        session_group.setdefault((call.cli, call.session), key)
    for session_key, session in found.sessions.items():
        window = _Window.of(session, since)
        found_key = session_group.get(session_key)
        if found_key is not None:
            key = found_key
        else:
            if not window.tool_calls:
                continue
            key = key_of(Call(session.cli, session.session, "unknown", window.first_ts))
            groups.setdefault(key, Totals())
        wall = window.wall_ms(session)
        for target in (groups[key], totals):
            target.tool_calls += window.tool_calls
            target.wall_time_ms += wall
    return totals, sorted(groups.items())
