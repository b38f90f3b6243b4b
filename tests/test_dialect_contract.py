"""The contract every registered dialect keeps, checked the same way for each (a new dialect is covered by
registering it): liberal reading of fields, junk lines, detection, round trips, error wording.

Dialect-specific facts (what a given line becomes) stay in ``test_dialect_<name>.py``.
"""

from __future__ import annotations

import copy
import functools
import io
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _consumer_support import run_cli
from _dialect_kit import FIXTURES, SEEDS, codec_problems, decode, junk, junk_values, line, mutants, violations
from _strategies import full_sessions, sessions
from agentstream import protocol as p
from agentstream.dialects import DIALECT_NAMES, get_dialect
from agentstream.dialects.kit import EventDecoder
from agentstream.errors import MalformedEventError, UsageError

DECODED = [name for name in DIALECT_NAMES if name != "canonical"]
"""Every registered dialect read through the kit (canonical is the protocol itself, checked by the validator)."""
WRITABLE = [name for name in DIALECT_NAMES if get_dialect(name).can_encode]
"""Every dialect agentstream can also write (decode-only ones, such as session logs, promise only to read)."""
DECODE_ONLY = [name for name in DIALECT_NAMES if not get_dialect(name).can_encode]


def example_files(dialect: str) -> list[Path]:
    """Every NDJSON example of ``dialect``: its fixtures (``*.ndjson``, or ``*.jsonl`` for session logs) and its
    seed file."""
    folder = FIXTURES / dialect
    files = sorted([*folder.glob("*.ndjson"), *folder.glob("*.jsonl")])
    seed = SEEDS / f"{dialect}.ndjson"
    return [*files, seed] if seed.exists() else files


def _objects(path: Path) -> list[Any]:
    return [msgspec.json.decode(raw) for raw in path.read_bytes().splitlines() if raw.strip()]


def test_every_decoded_dialect_has_examples() -> None:
    """The property tests below are only as good as the lines they start from."""
    assert {name for name in DECODED if not example_files(name)} == set()


# -- liberal reading --------------------------------------------------------------------------

OTHER_KINDS: tuple[Any, ...] = (None, True, 1.5, "7", "x", [], {"x": 1})
"""A value of each JSON kind (a number with a fraction, a numeric string, a word) to put in a field."""


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        yield (*prefix, key)
        yield from _paths(inner, (*prefix, key))


def _dotted(path: tuple[Any, ...]) -> str:
    return ".".join("*" if isinstance(step, int) else str(step) for step in path)


def _identifies(decoder: EventDecoder, obj: dict[str, Any], path: tuple[Any, ...]) -> bool:
    """Whether the field at ``path`` is (or holds) a field the dialect declares identifying for this line."""
    dotted = _dotted(path)
    identifying = decoder.identifying_paths(decoder.rules_kind(obj))
    return any(ident == dotted or ident.startswith(dotted + ".") for ident in identifying)


DERIVED = frozenset({"usage", "tool_progress", "event"})
"""Events made only from figures, output or data a line carried: when that field is lost, none is made up."""
KIT_WARNINGS = ("the field was ignored", "kept as a string under")


def _types(events: list[p.AnyEvent]) -> list[str]:
    """Event types, without the warnings about what was lost, :data:`DERIVED` events and a made-up start (which
    comes with the first event, wherever that is)."""
    return [
        e.type
        for e in events
        if e.type not in DERIVED
        and not (isinstance(e, p.Log) and any(warning in e.message for warning in KIT_WARNINGS))
        and not (isinstance(e, p.Start) and e.synthetic)
    ]


def _each_line(dialect: str, objects: list[Any]) -> list[list[str]]:
    decoder = get_dialect(dialect).decoder("s")
    out = [_types(decoder.decode_line(line(obj)) or []) for obj in objects]
    return [*out, _types(decoder.finish())]


def _mutations(obj: Any) -> Iterator[tuple[tuple[Any, ...], Any]]:
    for path in _paths(obj):
        for value in OTHER_KINDS:
            mutant = copy.deepcopy(obj)
            *parents, key = path
            holder = mutant
            for step in parents:
                holder = holder[step]
            if type(holder[key]) is type(value) and not isinstance(value, (str, dict, list)):
                continue
            if type(holder[key]) is type(value) and (holder[key] in ("", []) or value in ("", [])):
                continue  # text or items where there were none (or none where there were) is other content,
                # such as a message or reasoning more or less, not a field of another kind
            holder[key] = value
            yield path, mutant


@pytest.mark.parametrize("dialect", DECODED)
def test_a_field_of_another_kind_loses_that_field_never_the_event(dialect: str) -> None:
    """Every field of every example line, set to a value of each other JSON kind: the events decoded for that
    line (and the rest of the stream) keep their types, unless the field identifies the line."""
    decoder = get_dialect(dialect).decoder()
    assert isinstance(decoder, EventDecoder)
    tried = 0
    shapes_done: set[object] = set()  # one line of each shape (the first): the others have the same fields
    for path in example_files(dialect):
        objects = _objects(path)
        original = _each_line(dialect, objects)
        for index, obj in enumerate(objects):
            if not isinstance(obj, dict) or _shape(obj) in shapes_done:
                continue
            shapes_done.add(_shape(obj))
            for field, mutant in _mutations(obj):
                if _identifies(decoder, obj, field):
                    continue
                tried += 1
                mutated = [*objects[:index], mutant, *objects[index + 1 :]]
                try:
                    got = _each_line(dialect, mutated)
                except MalformedEventError as exc:
                    pytest.fail(f"{path.name}:{index + 1} {_dotted(field)}={mutant!r}: {exc.message}")
                assert got == original, f"{path.name}:{index + 1} {_dotted(field)} set to another kind"
    assert tried > 50


@pytest.mark.parametrize("dialect", DECODED)
def test_a_lost_field_is_reported_once_per_stream_as_a_warning(dialect: str) -> None:
    """A line with a field nulled, read twice: warnings the first time, none the second."""
    reported = 0
    for path in example_files(dialect):
        for obj in _objects(path):
            if not isinstance(obj, dict):
                continue
            for field, mutant in _mutations(obj):
                if mutant_value(mutant, field) is not None:
                    continue
                decoder = get_dialect(dialect).decoder()
                try:
                    first = decoder.decode_line(line(mutant)) or []
                except MalformedEventError:
                    continue
                second = decoder.decode_line(line(mutant)) or []
                warnings = [e for e in first if isinstance(e, p.Log) and "the field was ignored" in e.message]
                assert all(w.level == "warn" and w.message.startswith(dialect) for w in warnings)
                assert not [
                    e for e in second if isinstance(e, p.Log) and "the field was ignored" in e.message
                ]
                reported += len(warnings)
    assert reported > 0, f"no {dialect} example has a field whose loss is reported"


ID_KEY = re.compile(r"(?:^|_)(?:uu)?id$|Id$|Uuid$|ID$")
"""A field that holds an id (``id``, ``tool_use_id``, ``callID``, ``messageId``, ``uuid`` …)."""


def _ids_as_numbers(objects: list[Any]) -> tuple[list[Any], dict[str, int]]:
    """``objects`` with every id sent as a number instead (the same id, the same number, everywhere)."""
    numbers: dict[str, int] = {}

    def renumbered(value: Any) -> Any:
        if isinstance(value, list):
            return [renumbered(item) for item in value]
        if not isinstance(value, dict):
            return value
        return {
            key: numbers.setdefault(item, 1000 + len(numbers))
            if ID_KEY.search(key) and isinstance(item, str) and item
            else renumbered(item)
            for key, item in value.items()
        }

    return [renumbered(obj) for obj in objects], numbers


def _renumbered_examples(dialect: str) -> Iterator[tuple[str, list[Any], list[Any], set[str]]]:
    """Each example of ``dialect`` that has ids: its name, its lines, the lines with ids sent as numbers, and
    those ids."""
    for path in example_files(dialect):
        objects = _objects(path)
        renumbered, numbers = _ids_as_numbers(objects)
        if numbers:
            yield path.name, objects, renumbered, set(numbers)


WITH_IDS = [name for name in DECODED if any(_renumbered_examples(name))]


def test_nearly_every_dialect_has_examples_with_ids() -> None:
    assert len(WITH_IDS) >= len(DECODED) - 1


@pytest.mark.parametrize("dialect", WITH_IDS)
def test_ids_sent_as_numbers_are_read_as_their_text(dialect: str) -> None:
    """Every example stream with its ids (identifying ones too) sent as JSON numbers decodes to the same events,
    each id read as its number's text."""
    for name, objects, renumbered, texts in _renumbered_examples(dialect):
        try:
            got = _each_line(dialect, renumbered)
        except MalformedEventError as exc:
            pytest.fail(f"{name}: {exc.message}")
        assert got == _each_line(dialect, objects), name
        ids = {value for event in decode(dialect, map(line, renumbered)) for value in _ids_of(event)}
        assert not ids & texts, f"{name}: an id kept its old text"


def _ids_of(event: p.AnyEvent) -> Iterator[str]:
    for name in ("call_id", "message_id"):
        value = getattr(event, name, None)
        if value is not None:
            yield value


def mutant_value(obj: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        obj = obj[step]
    return obj


# -- junk ---------------------------------------------------------------------------------------


def _vocabulary(dialect: str) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """The line types, the keys (at any depth) and the lines of a dialect's examples, to aim junk at it."""
    if dialect == "canonical":
        return sorted(p.EVENT_TYPES), [], []
    bases = [obj for path in example_files(dialect) for obj in _objects(path) if isinstance(obj, dict)]
    kinds = sorted({obj["type"] for obj in bases if isinstance(obj.get("type"), str)})
    keys = sorted({str(path[-1]) for obj in bases for path in _paths(obj) if isinstance(path[-1], str)})
    return kinds, keys, bases


@functools.cache
def _junk_lines(dialect: str) -> st.SearchStrategy[Any]:
    kinds, keys, bases = _vocabulary(dialect)
    aimed = junk(kinds, keys) | mutants(bases) if bases else junk(kinds, keys)
    return aimed | junk_values


@pytest.mark.parametrize("dialect", DIALECT_NAMES)
@settings(
    max_examples=60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], deadline=None
)
@given(data=st.data())
def test_junk_lines_are_decoded_or_named_malformed_and_finish_never_fails(
    dialect: str, data: st.DataObject
) -> None:
    """Lines of the dialect's own types with junk in its own keys, mutated example lines and any JSON: a line
    may be rejected, but only as a MalformedEventError that names the dialect and says how to fix it; what comes
    out are events the canonical codec accepts, and ``finish()`` never fails."""
    objects = data.draw(st.lists(_junk_lines(dialect), min_size=1, max_size=4))
    decoder = get_dialect(dialect).decoder()
    out: list[p.AnyEvent] = []
    for obj in objects:
        if isinstance(obj, dict):
            assert 0.0 <= get_dialect(dialect).sniff(obj) <= 1.0
        try:
            out += decoder.decode_line(line(obj)) or []
        except MalformedEventError as exc:
            assert exc.message.startswith(dialect), exc.message
            assert exc.fix
    out += decoder.finish()
    assert not codec_problems(out)


# -- detection ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", DECODED)
def test_each_example_file_is_recognised_as_its_dialect(dialect: str) -> None:
    from agentstream.dialects import DETECT_LINES, detect_dialect_in_lines

    for path in example_files(dialect):
        lines = [raw for raw in path.read_bytes().splitlines() if raw.strip()]
        if path.parent == SEEDS:
            continue  # seed files are independent example lines, not streams
        assert detect_dialect_in_lines(lines[:DETECT_LINES]) == dialect, path.name


@pytest.mark.parametrize("dialect", DECODED)
def test_no_dialect_claims_another_dialects_first_line_more_surely(dialect: str) -> None:
    from agentstream.dialects import detect_dialect

    for path in example_files(dialect):
        if path.parent == SEEDS:
            continue
        first = _objects(path)[0]
        assert detect_dialect([first]) in (dialect, None), path.name


# -- round trips and our own output -------------------------------------------------------------


@pytest.mark.parametrize("dialect", WRITABLE)
@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(session=sessions())
def test_what_a_dialect_writes_it_reads_back_as_a_valid_stream(
    dialect: str, session: list[p.BaseEvent]
) -> None:
    encoder = get_dialect(dialect).encoder()
    lines = [out for event in session for out in encoder.encode(event)] + encoder.finish()
    events = decode(dialect, lines)
    assert not violations(events), violations(events)
    assert [e.type for e in events][-1] == "result"


@pytest.mark.parametrize("dialect", DECODE_ONLY)
def test_a_decode_only_dialect_refuses_to_write_with_a_fix(dialect: str) -> None:
    """Asking for a writer of a dialect agentstream only reads is a usage error that says what to do instead."""
    with pytest.raises(UsageError) as raised:
        get_dialect(dialect).encoder()
    assert raised.value.message.startswith(f"the {dialect} dialect is decode-only"), raised.value.message
    assert raised.value.fix


# -- validate: no false positives on our own output ------------------------------------------


def _validate_cli(stdin: bytes, capfd: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch):
    """``agentstream validate -`` in process, reading ``stdin``: (exit code, stdout, stderr)."""
    from agentstream.cli import main

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = main(["validate", "-"])
    out, err = capfd.readouterr()
    return code, out, err


ENCODED = [name for name in WRITABLE if name != "canonical"]


@pytest.mark.parametrize("dialect", ENCODED)
def test_demo_in_each_dialect_passes_validate(
    dialect: str, capfdbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``agentstream demo --dialect X | agentstream validate -``, detection included (demo owns its process)."""
    demo = run_cli("demo", "--dialect", dialect)
    assert demo.returncode == 0 and demo.stdout, demo.stderr.decode()
    code, out, err = _validate_cli(demo.stdout, capfdbinary, monkeypatch)
    assert (code, out) == (0, b""), out.decode()
    assert f"({dialect}), valid".encode() in err


def _validate_as_the_command_does(data: bytes) -> tuple[str, list[str]]:
    """What ``agentstream validate -`` does with ``data``: detect the dialect, read, check."""
    from agentstream.cli._options import detect_input
    from agentstream.consumer import read
    from agentstream.validate import Validator, validate_decoded

    source, dialect, _ = detect_input(io.BytesIO(data))
    checker = Validator(check_stamps=False)
    return dialect, [str(v) for v in validate_decoded(read(source, dialect), checker)]


@pytest.mark.parametrize("dialect", ENCODED)
@settings(max_examples=20, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(session=full_sessions())
def test_a_rich_stream_written_in_each_dialect_passes_validate(
    dialect: str, session: list[p.BaseEvent]
) -> None:
    """Tool calls, reasoning, deltas, errors and usage, encoded to the dialect, then validated as a user would."""
    encoder = get_dialect(dialect).encoder()
    lines = [out for event in session for out in encoder.encode(event)] + encoder.finish()
    detected, problems = _validate_as_the_command_does(b"".join(out + b"\n" for out in lines))
    assert detected == dialect
    assert problems == []


@pytest.mark.parametrize("dialect", ENCODED)
@settings(max_examples=10, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(session=full_sessions())
def test_a_reproducible_encoder_writes_the_same_lines_every_time(
    dialect: str, session: list[p.BaseEvent]
) -> None:
    """What an encoder makes up (line uuids, ``msg_…`` ids) follows the seed, so the same events give the same
    bytes (serve encodes a run again to resume it); two seeds never share a made-up id."""

    def written(seed: str) -> list[bytes]:
        encoder = get_dialect(dialect).encoder()
        encoder.reproducible(seed)
        events = [
            msgspec.structs.replace(event) for event in session
        ]  # an encoder may annotate what it is given
        return [out for event in events for out in encoder.encode(event)] + encoder.finish()

    first = written("run-1")
    assert written("run-1") == first
    made_up = re.compile(
        rb'"(?:[a-z]+_[0-9a-f]{16}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"'
    )
    ours = {match for line in first for match in made_up.findall(line)}
    other_seed = {match for line in written("run-2") for match in made_up.findall(line)}
    given_ids = {
        f'"{value}"'.encode()
        for event in session
        for value in msgspec.to_builtins(event).values()
        if isinstance(value, str)
    }
    assert not (ours & other_seed) - given_ids


# -- exit codes -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECT_NAMES)
def test_what_an_exit_status_means_is_a_known_code_with_a_message_and_a_fix(dialect: str) -> None:
    from agentstream.errors import ERROR_CODES

    for status in range(256):
        meaning = get_dialect(dialect).error_for_exit(status)
        if meaning is not None:
            assert status not in (0, 1), "0 and 1 say nothing beyond success and failure"
            assert meaning.code in ERROR_CODES and meaning.message and meaning.fix


# -- single-document outputs ----------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECT_NAMES)
@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    document=junk_values | st.fixed_dictionaries({}, optional={"response": junk_values, "type": junk_values})
)
def test_any_document_is_read_as_a_valid_run_disowned_or_named_malformed(dialect: str, document: Any) -> None:
    try:
        events = get_dialect(dialect).decoder().decode_document(document)
    except MalformedEventError as exc:
        assert exc.message.startswith(dialect) and exc.fix
        return
    if events is not None:
        assert not violations(events), violations(events)


# -- the kit a plugin builds on ----------------------------------------------------------------------------


def test_every_name_the_kit_exports_resolves_and_every_dialect_uses_the_kit() -> None:
    from agentstream.dialects import kit

    assert all(getattr(kit, name, None) is not None for name in kit.__all__)
    for name in DIALECT_NAMES:
        assert isinstance(get_dialect(name), kit.SimpleDialect), name


def test_the_kit_example_is_a_working_dialect() -> None:
    """The minimal dialect in the kit's docstring decodes, loses a bad field, rejects a line without its id."""
    from agentstream.dialects import kit

    assert kit.__doc__ is not None
    example = kit.__doc__.split("A minimal dialect::\n\n", 1)[1].split("\nWhat is here", 1)[0]
    namespace: dict[str, Any] = {}
    exec("\n".join(text[4:] for text in example.splitlines()), namespace)
    toy = namespace["DIALECT"]
    lines = [
        b'{"type":"said","id":"m1","text":"hi"}',
        b'{"type":"said","id":"m2","text":false}',
        b'{"type":"done","ok":true}',
    ]
    decoder = toy.decoder()
    events = [event for raw in lines for event in decoder.decode_line(raw) or []] + decoder.finish()
    assert [e.type for e in events] == ["start", "message", "log", "message", "result"]
    assert not violations(events)
    with pytest.raises(MalformedEventError, match="toy 'said' line: field 'id' is missing"):
        toy.decoder().decode_line(b'{"type":"said","text":"no id"}')
    encoder = toy.encoder()
    assert decode_with(toy, [out for e in events for out in encoder.encode(e)] + encoder.finish())[-1].ok


def decode_with(dialect: Any, lines: list[bytes]) -> list[p.AnyEvent]:
    decoder = dialect.decoder()
    return [event for raw in lines for event in decoder.decode_line(raw) or []] + decoder.finish()


# -- the typed path ------------------------------------------------------------------------------

TYPED = [name for name in DECODED if getattr(get_dialect(name).decoder(), "typed_lines", None) is not None]
"""Dialects that read their common lines with a typed decoder (the careful path takes the rest)."""
RANDOM_ID = re.compile(r"\b(?:msg|call|ses|rsn)_[0-9a-f]{16}\b")
_BAD_UTF8, _TOO_LARGE = "\x01bad utf-8", 1.25e-300
"""Stand-ins for what JSON values cannot hold, put in the line's bytes: see :func:`_raw`."""
EDGE_VALUES: tuple[Any, ...] = (*OTHER_KINDS, 2**63, -(2**63) - 1, 2**64, -1, 0, "", _BAD_UTF8, _TOO_LARGE)
"""Values of every kind, numbers at the edges of the 64-bit range and past a float's, empty text, and text
that is not UTF-8, to put in a field."""


def _raw(obj: Any) -> bytes:
    """``obj`` as a line, with the stand-ins replaced by invalid UTF-8 and by a number no float can hold."""
    return line(obj).replace(b'"\\u0001bad utf-8"', b'"\xff\xfe"').replace(b"1.25e-300", b"1e999")


def _comparable(events: list[p.AnyEvent]) -> list[str]:
    """The events as JSON without their clock readings, random ids named by their first appearance."""
    seen: dict[str, int] = {}
    out = []
    for event in events:
        data = msgspec.to_builtins(event)
        data.pop("ts", None)
        if isinstance(data.get("raw"), dict):  # an unknown event's stamps are in its raw object
            data["raw"].pop("ts", None)
        text = msgspec.json.encode(data).decode()
        out.append(RANDOM_ID.sub(lambda m: f"<id {seen.setdefault(m.group(), len(seen))}>", text))
    return out


_SHAPE_KEYS = frozenset({"type", "subtype", "role"})
"""Fields whose value, not only its kind, tells a line's shape: the decoders route lines by them."""


def _shape(value: Any) -> object:
    """What the typed and careful paths see of a line before its values: its fields at every depth, their
    kinds, and the values of the fields that route it (:data:`_SHAPE_KEYS`)."""
    if isinstance(value, dict):
        return tuple(
            (key, item if key in _SHAPE_KEYS and isinstance(item, str) else _shape(item))
            for key, item in sorted(value.items())
        )
    if isinstance(value, list):
        return ("list", frozenset(map(_shape, value)))
    return type(value).__name__


def _edge_mutations(obj: Any) -> Iterator[Any]:
    """``obj`` with one field (at any depth) deleted or set to each of :data:`EDGE_VALUES`, or with a field
    of its own added to one of its objects (a field no decoder reads, holding what a JSON parser rejects)."""
    for path in [(), *_paths(obj)]:
        if isinstance(mutant_value(obj, path), dict):
            for value in (_BAD_UTF8, _TOO_LARGE, 1):
                mutant = copy.deepcopy(obj)
                mutant_value(mutant, path)["unheard_of"] = value
                yield mutant
    for path in _paths(obj):
        *parents, key = path
        for value in (_DELETED, *EDGE_VALUES):
            mutant = copy.deepcopy(obj)
            holder = mutant
            for step in parents:
                holder = holder[step]
            if value is _DELETED:
                if isinstance(holder, dict):
                    del holder[key]
                    yield mutant
                continue
            holder[key] = value
            yield mutant


_DELETED = object()


@pytest.mark.parametrize("dialect", TYPED)
def test_some_example_line_of_each_typed_dialect_takes_the_typed_path(dialect: str) -> None:
    """Else the comparison below would compare the careful path with itself."""
    decoder_class = type(get_dialect(dialect).decoder())
    assert any(
        _typed_reads(decoder_class, line(obj)) for path in example_files(dialect) for obj in _objects(path)
    ), f"no {dialect} example line takes the typed path"


@pytest.mark.parametrize(
    ("dialect", "path"),
    [(dialect, path) for dialect in TYPED for path in example_files(dialect)],
    ids=lambda value: value.name if isinstance(value, Path) else value,
)
def test_the_typed_path_reads_every_line_as_the_careful_path_does(
    dialect: str, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An example stream, and every copy of it with one field of one line deleted or of another kind (edge
    numbers included), gives the same events whether the typed decoder is used or not. One line of each
    shape (:func:`_shape`) is mutated, in the first example stream that has it: the other lines of that
    shape have the same fields."""
    from agentstream.consumer import read

    decoder_class = type(get_dialect(dialect).decoder())
    tags = _typed_tags(decoder_class)
    objects = _objects(path)
    streams = [b"\n".join(map(line, objects))]
    earlier = example_files(dialect)[: example_files(dialect).index(path)]
    mutated = {_shape(obj) for other in earlier for obj in _objects(other)}  # their tests mutate those
    for index, obj in enumerate(objects):
        if isinstance(obj, dict) and obj.get("type") not in tags:
            continue  # no copy of a line of another type can take the typed path
        if _shape(obj) in mutated:
            continue
        mutated.add(_shape(obj))
        for mutant in _edge_mutations(obj):
            lines = [line(o) for o in objects]
            lines[index] = _raw(mutant)
            streams.append(b"\n".join(lines))

    def events(data: bytes) -> list[str]:
        return _comparable(list(read(data, dialect)))

    typed = [events(data) for data in streams]
    monkeypatch.setattr(decoder_class, "typed_lines", None)
    careful = [events(data) for data in streams]
    differ = [index for index, (one, other) in enumerate(zip(typed, careful, strict=True)) if one != other]
    if differ:
        first = differ[0]
        typed_only = [event for event in typed[first] if event not in careful[first]]
        careful_only = [event for event in careful[first] if event not in typed[first]]
        pytest.fail(
            f"{len(differ)} of {len(streams)} streams differ; the first:\n{streams[first]!r}\n"
            f"typed path only: {typed_only}\ncareful path only: {careful_only}"
        )


def _typed_tags(decoder_class: type[EventDecoder]) -> set[Any]:
    """The line types (``type`` values) the dialect's typed decoder knows."""
    typed = decoder_class.typed_lines
    assert typed is not None
    info = msgspec.inspect.type_info(typed.type)
    shapes = info.types if isinstance(info, msgspec.inspect.UnionType) else (info,)
    tags = {shape.tag for shape in shapes if isinstance(shape, msgspec.inspect.StructType)}
    assert tags and all(
        shape.tag_field == "type" for shape in shapes if isinstance(shape, msgspec.inspect.StructType)
    )
    return tags


def _typed_reads(decoder_class: type[EventDecoder], data: bytes) -> bool:
    typed = decoder_class.typed_lines
    assert typed is not None
    try:
        typed.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return False
    return True
