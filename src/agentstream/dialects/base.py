"""What every dialect module provides: a stateful decoder and a stateful encoder.

A *dialect* is another tool's NDJSON wire format. Decoders turn its lines into
canonical events (stamped with one session id and a contiguous ``seq``);
encoders turn canonical events into its lines. Both are stateful because most
formats spread one canonical fact over several lines (deltas, start/complete
pairs) or the other way round.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

import msgspec

from agentstream import protocol as p
from agentstream._lines import LongLine, NotSure, is_long, parse_json, parse_long_line

__all__ = ["Dialect", "DialectDecoder", "DialectEncoder", "ExitMeaning", "NamedModel", "option_value"]

_decode_json = p.JSON_DECODER.decode  # bound once: it runs for every line

UNKNOWN_MODEL = "unknown"
"""What a usage event names as its model when the stream does not say and nobody told the reader."""


class NamedModel(NamedTuple):
    """The model a CLI's command line asks for, and its provider when the name gives one (``provider/model``)."""

    model: str
    provider: str | None = None


def option_value(argv: Sequence[str], program: str, names: Sequence[str]) -> str | None:
    """The value ``argv`` gives one of the options ``names`` (``--model V``, ``--model=V``, ``-m V``; the last one
    counts) after a word naming ``program`` (a path or package whose last part is ``program``, or starts with
    ``program.`` or ``program-``, as ``npx @openai/codex`` or a platform binary ``codex-x86_64-…``).

    ``None`` when no such word comes first (a script's own ``-m`` means what the script says), when the value
    is missing or looks like another option, and from a lone ``--`` on (what follows is arguments).
    """
    value: str | None = None
    named = False
    words = iter(argv)
    for word in words:
        if word == "--":
            break
        if not named:
            last = word.replace("\\", "/").rsplit("/", 1)[-1]
            named = last == program or last.startswith((program + ".", program + "-"))
            continue
        given = (
            next(words, "")
            if word in names
            else next((word[len(name) + 1 :] for name in names if word.startswith(name + "=")), None)
        )
        if given is not None and given[:1] not in ("", "-"):
            value = given
    return value


class DialectDecoder(ABC):
    """Turns one dialect line at a time into canonical events.

    Subclasses implement :meth:`decode_object`; lines that are not JSON objects
    are the reader's business (it reports them as ``MALFORMED_EVENT``), except in
    dialects whose framing is not plain NDJSON, which override :meth:`decode_line`.
    """

    session_named: bool = False
    """Whether the session id the events carry is the input's own (a CLI's, the one that resumes its session), not one
    made up for it: a decoder that takes the id from its input says so."""

    named_model: NamedModel | None = None
    """The model the command line that runs the CLI asks for (see :meth:`Dialect.named_model`), set by the reader
    of a spawned child: a dialect whose stream never names its model names this one in its start and usage."""

    @property
    def usage_model(self) -> str:
        """The model a usage event of a stream that never names its own carries: the command line's, or
        ``unknown``."""
        return self.named_model.model if self.named_model is not None else UNKNOWN_MODEL

    def started_with_model(self, command: str, *, synthetic: bool = False) -> p.Start:
        """A ``start`` naming the command line's model and provider, when it named them."""
        named = self.named_model
        return p.Start(
            command=command,
            model=named.model if named is not None else p.UNSET,
            provider=named.provider if named is not None and named.provider else p.UNSET,
            synthetic=True if synthetic else p.UNSET,
        )

    def __init__(self, session_id: str | None = None) -> None:
        self.sequencer = p.Sequencer(session_id)
        self._out: list[p.AnyEvent] = []

    def emit(self, event: p.Event, ts: str | None = None) -> None:
        """Stamp ``event`` (keeping the dialect's own timestamp when it has one) and queue it."""
        self._out.append(self.sequencer.stamp(event, ts))

    def drain(self) -> list[p.AnyEvent]:
        out, self._out = self._out, []
        return out

    def decode_line(self, line: bytes | bytearray) -> list[p.AnyEvent] | None:
        """Decode one raw line; ``None`` means "not mine: report it as malformed"."""
        if type(line) is LongLine and is_long(line):  # the type first: no call for other lines
            try:
                return parse_long_line(line, self._decode_parsed)
            except NotSure:
                pass  # the line is whole again: read it the usual way
        try:
            value = _decode_json(line)
        except msgspec.DecodeError:
            value = parse_json(line)  # read as liberally as other tools write it, or msgspec's error again
        return self._decode_parsed(value)

    def _decode_parsed(self, value: Any) -> list[p.AnyEvent] | None:
        if type(value) is not dict:
            return self.decode_other(value)
        self.decode_object(value)
        return self.drain()

    def decode_lines(
        self, lines: list[bytes | bytearray], start: int
    ) -> tuple[list[p.AnyEvent], int, BaseException | None]:
        """Decode ``lines[start:]`` in order until one cannot be read.

        Returns the events of the lines read, the index of the first line that could not be (``len(lines)``
        when all were) and why (``None`` for a line that is not the dialect's). The reader reports that line
        and goes on after it. One call per run of lines is what lets a dialect read its common lines in a
        tight loop (override it for that); the events must be exactly those of :meth:`decode_line`.
        """
        events: list[p.AnyEvent] = []
        decode = self.decode_line
        for index in range(start, len(lines)):
            try:
                decoded = decode(lines[index])
            except Exception as exc:  # a decoder failing on a line is that line's problem, not the reader's
                return events, index, exc
            if decoded is None:
                return events, index, None
            events += decoded
        return events, len(lines), None

    def decode_other(self, value: Any) -> list[p.AnyEvent] | None:
        """A line that is JSON but not an object: ``None`` (reported as malformed) unless the dialect reads it."""
        return None

    @abstractmethod
    def decode_object(self, obj: dict[str, Any]) -> None:
        """Decode one parsed JSON object, calling :meth:`emit` for each canonical event."""

    def decode_document(self, document: Any) -> list[p.AnyEvent] | None:
        """The whole run a CLI's single-document output describes (its ``--output-format json``: one JSON value,
        maybe pretty-printed), or ``None`` when the dialect has no such output or this is not one.

        The reader parses a document that spans many lines whole (its size is bounded) and hands it here;
        on ``None`` it reads the value as one stream line (an array: as its elements, in order). Raises
        :class:`~agentstream.errors.MalformedEventError` for a document of the dialect that cannot be read.
        """
        return None

    def finish(self) -> list[p.AnyEvent]:
        """Called at end of input: flush buffered state (e.g. deltas never closed by a message)."""
        return self.drain()


class DialectEncoder(ABC):
    """Turns canonical events into dialect lines (each without its trailing newline)."""

    @abstractmethod
    def encode(self, event: p.AnyEvent) -> list[bytes]:
        """The lines for one event; may be empty (the dialect cannot carry it, or buffers it)."""

    def encode_batch(self, events: list[p.AnyEvent]) -> list[bytes]:
        """The lines of each of ``events`` in turn, as :meth:`encode` writes them (a dialect whose hot lines
        come in runs writes a run in one loop). An event that cannot be encoded raises, and the batch's lines
        go with it: pass one event at a time where each line must survive the next one's failure."""
        lines: list[bytes] = []
        for event in events:
            lines += self.encode(event)
        return lines

    def finish(self) -> list[bytes]:
        """Lines still owed when the stream ends."""
        return []

    def reproducible(self, seed: str) -> None:
        """Make every id this encoder makes up (one its lines need and no event gives) depend only on ``seed``
        and the events, so that encoding the same events again gives the same lines (``serve`` encodes a run
        again from its start to resume it). An encoder that makes up no ids has nothing to do."""


class ExitMeaning(NamedTuple):
    """What a CLI's own exit status means, as the canonical error of a run that ended without its result."""

    code: str
    message: str
    fix: str


class Dialect(ABC):
    """A named wire format: how to recognise it, decode it and encode it."""

    name: ClassVar[str]
    summary: ClassVar[str]
    can_encode: ClassVar[bool] = True
    """False for decode-only dialects (session logs), whose :meth:`encoder` raises a ``UsageError``."""
    exact_exit_code: ClassVar[bool] = False
    """Whether a result in this dialect carries the producer's exit status exactly. Most CLIs' formats carry
    success or failure only (or their own CLI's codes), so ``validate --expect-exit`` compares just that."""
    json_output_is_result_line: ClassVar[bool] = False
    """Whether the CLI's ``--output-format json`` prints its stream's ``result`` line alone (Claude Code,
    Cursor): ``-o json`` in this dialect then writes that line, so a script that reads the CLI's one object
    reads ours."""
    has_start_line: ClassVar[bool] = True
    """Whether the dialect's streams open with a line that becomes ``start``. Without one (opencode), the
    decoder always makes ``start`` up (``synthetic``), and ``validate`` does not count that as a repair."""

    @abstractmethod
    def sniff(self, obj: dict[str, Any]) -> float:
        """How sure (0.0 to 1.0) we are that this parsed first-line object is in this dialect."""

    def named_model(self, argv: Sequence[str]) -> NamedModel | None:
        """The model the command line ``argv`` that runs this dialect's CLI asks for, for a CLI whose stream never
        names its model (``None``: it names none, or the stream names its own). Only an explicit option counts:
        the CLI's config and built-in default are its own business, and a guess would be worse than ``unknown``."""
        return None

    def error_for_exit(self, status: int) -> ExitMeaning | None:
        """The canonical error a documented exit status of the dialect's CLI stands for (``None``: nothing known).

        Used when the child ended without a terminal line, even with nothing on stdout: a CLI that fails at
        start-up (no credentials, an untrusted folder) often exits before it writes its first line.
        """
        return None

    def sniff_document(self, document: dict[str, Any]) -> float:
        """How sure we are that a whole JSON document (not a stream line) is this dialect's single-object output.

        Used by :func:`~agentstream.dialects.detect_document` when no line sniffer knows the document; the
        decoder then reads it with :meth:`DialectDecoder.decode_document`.
        """
        return 0.0

    @abstractmethod
    def decoder(self, session_id: str | None = None) -> DialectDecoder: ...

    @abstractmethod
    def encoder(self) -> DialectEncoder: ...

    def check_writable(self) -> None:
        """Raise the usage error that says what to write instead, for a dialect agentstream only reads."""
        if not self.can_encode:
            from agentstream.dialects import writable_dialects
            from agentstream.errors import UsageError

            raise UsageError(
                f"the {self.name} dialect is decode-only: agentstream reads it but does not write it",
                fix=f"use one of: {', '.join(writable_dialects())}",
            )
