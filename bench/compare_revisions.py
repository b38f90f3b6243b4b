"""Old and new code, line by line, on thousands of mutated streams: the same events, the same error wording.

    .venv/bin/python bench/compare_revisions.py OLD_SRC NEW_SRC [--streams 3000] [--seed 0] [--show 5]

``OLD_SRC`` and ``NEW_SRC`` are two ``src`` directories (say a worktree of the
commit before a change, and the change). The streams, made here from a seed:
every fixture under ``tests/fixtures/dialects`` and ``tests/fixtures/seeds``,
short sessions from ``bench/realistic.py`` in each dialect, and ``--streams``
copies of them with one to three mutations each: a field deleted, a value
replaced by another kind (string, number, bool, null, list, object), a number
written as a string, a float for an int, a huge int, a line cut short,
duplicated, swapped with another, a blank line, invalid UTF-8, a line that is
JSON but not an object.

Each side runs in its own process (``PYTHONPATH`` set to its ``src``) and, for
every stream, reads it with ``agentstream.consumer.read`` in every dialect
(``auto`` and each fixture's) and converts it from its own dialect to
``claude`` and ``codex`` (and Gemini streams to ``claude``, canonical ones to
both: the encoders), and checks it with ``validate_stream`` (the violations it
finds, in order). The canonical lines each side gives are compared one by
one, after replacing what is random: ids made up by ``new_id`` (``msg_``,
``call_``, ``rsn_``… and 16 hex digits) and UUIDs that are not in the input
become their order of first appearance, and times read from the clock during
the run become ``<now>`` (times taken from the input are kept). Exits 1 on any
difference and prints the first ones.

With ``--long-lines`` both sides get their input 61 bytes per read, and the
side whose code has ``LONG_LINE_BYTES`` reads every line that grew across reads
as a very long one: the check that the path for very long lines gives the
events and errors of the usual one.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import realistic

FIXTURES = realistic.FIXTURES
HERE = Path(__file__).resolve().parent
CONVERT_TARGETS = ("claude", "codex")


class Stream(NamedTuple):
    origin: str
    dialect: str
    data: bytes


# -- the streams ---------------------------------------------------------------


def fixture_streams() -> list[Stream]:
    """Every fixture file, named by its dialect (the folder, or a seed file's name)."""
    streams = []
    for path in sorted((FIXTURES / "dialects").glob("*/*")):
        if path.is_file() and path.suffix != ".md":
            streams.append(Stream(str(path.relative_to(FIXTURES)), path.parent.name, path.read_bytes()))
    for path in sorted((FIXTURES / "seeds").glob("*.ndjson")):
        streams.append(Stream(str(path.relative_to(FIXTURES)), path.stem, path.read_bytes()))
    return streams


def realistic_streams(seed: int, count: int) -> list[Stream]:
    return [
        Stream(
            f"realistic {dialect} seed {seed + i}",
            dialect,
            realistic.generate(dialect, seed=seed + i, turns=2),
        )
        for dialect in realistic.DIALECTS
        for i in range(count)
    ]


_KINDS: tuple[Any, ...] = ("", "text", 0, -1, 7, 2.5, True, False, None, [], [1, "a"], {}, {"type": "x"})
_HUGE = (2**63, -(2**63) - 1, 2**64 + 1, 10**30, -(10**40))
_NOT_OBJECTS = (b"[]", b'[{"type":"result"}]', b"42", b"-1.5e3", b'"text"', b"null", b"true")


def _places(value: Any, out: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Every (container, key) in a JSON value, depth first."""
    if isinstance(value, dict):
        for key, item in value.items():
            out.append((value, key))
            _places(item, out)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out.append((value, index))
            _places(item, out)
    return out


def _change_value(rng: random.Random, line: bytes, how: str, words: dict[str, list[str]]) -> bytes | None:
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    places = _places(obj, [])
    if how in ("number as string", "float for int", "huge int"):
        places = [(c, k) for c, k in places if type(c[k]) in (int, float)]
        if how != "number as string":
            places = [(c, k) for c, k in places if type(c[k]) is int]
    if how == "delete":
        places = [(c, k) for c, k in places if isinstance(c, dict)]
    if how == "other word":
        places = [(c, k) for c, k in places if type(c[k]) is str]
    if not places:
        return None
    container, key = rng.choice(places)
    value = container[key]
    if how == "delete":
        del container[key]
    elif how == "other kind":
        container[key] = rng.choice([kind for kind in _KINDS if type(kind) is not type(value)])
    elif how == "other word":
        same_key = words.get(key) if type(key) is str else None
        container[key] = rng.choice(same_key if same_key and rng.random() < 0.8 else words[""])
    elif how == "number as string":
        container[key] = str(value)
    elif how == "float for int":
        container[key] = rng.choice((float(value), value + 0.5))
    else:
        container[key] = rng.choice(_HUGE)
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def mutate(rng: random.Random, data: bytes, words: dict[str, list[str]]) -> tuple[bytes, list[str]]:
    """One to three random mutations of a stream, and what they were (``words``: values another string
    field may take, such as a status or a role, so that every branch on them is reached)."""
    lines = data.split(b"\n")
    done = []
    for _ in range(rng.randint(1, 3)):
        filled = [i for i, line in enumerate(lines) if line.strip()] or [0]
        at = rng.choice(filled)
        how = rng.choice(
            (
                "delete",
                "delete",
                "other kind",
                "other kind",
                "other word",
                "other word",
                "number as string",
                "float for int",
                "huge int",
                "cut",
                "duplicate",
                "swap",
                "blank",
                "invalid utf-8",
                "not an object",
            )
        )
        line = lines[at]
        if how in ("delete", "other kind", "other word", "number as string", "float for int", "huge int"):
            changed = _change_value(rng, line, how, words)
            if changed is None:
                continue
            lines[at] = changed
        elif how == "cut":
            lines[at] = line[: rng.randrange(len(line) + 1)]
        elif how == "duplicate":
            lines.insert(at, line)
        elif how == "swap":
            other = rng.choice(filled)
            lines[at], lines[other] = lines[other], line
        elif how == "blank":
            lines.insert(at, rng.choice((b"", b"   ", b"\t", b"\r")))
        elif how == "invalid utf-8":
            cut = rng.randrange(len(line) + 1)
            lines[at] = line[:cut] + rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xfe\xff")) + line[cut:]
        else:
            lines[at] = rng.choice(_NOT_OBJECTS)
        done.append(f"{how} @{at + 1}")
    return b"\n".join(lines), done


def corpus(seed: int, count: int) -> list[Stream]:
    """The fixtures, realistic sessions, and ``count`` mutated copies of them."""
    originals = fixture_streams() + realistic_streams(seed, 4)
    rng = random.Random(seed)
    words = _words(originals)
    mutated = []
    for i in range(count):
        original = rng.choice(originals)
        data, done = mutate(rng, original.data, words)
        mutated.append(
            Stream(f"#{i} {original.origin}: {', '.join(done) or 'unchanged'}", original.dialect, data)
        )
    return originals + mutated


_MORE_WORDS = ("denied", "declined", "cancelled", "interrupted", "rejected", "timeout", "error", "")
_ENUM_KEYS = ("type", "subtype", "status", "role", "kind", "severity", "level", "stop_reason")


def _words(streams: list[Stream]) -> dict[str, list[str]]:
    """The short string values of the fixtures by key (statuses, roles, types, subtypes…), a few more for the
    keys that name a kind, and every one of them under ``""``."""
    words: dict[str, set[str]] = {key: set(_MORE_WORDS) for key in _ENUM_KEYS}
    for stream in streams:
        if "realistic" in stream.origin:
            continue
        for line in stream.data.splitlines():
            try:
                places = _places(json.loads(line), [])
            except ValueError:
                continue
            for container, key in places:
                if type(container[key]) is str and len(container[key]) <= 24 and type(key) is str:
                    words.setdefault(key, set()).add(container[key])
    everything = set().union(*words.values())
    return {"": sorted(everything), **{key: sorted(values) for key, values in words.items()}}


class Job(NamedTuple):
    stream: int
    kind: str  # "read", "convert" or "validate"
    dialect: str  # read in / convert from
    target: str  # convert to ("" for read)


def jobs_for(streams: list[Stream]) -> list[Job]:
    """Fixture streams are read in every dialect; the (longer) realistic ones in theirs, ``auto`` and canonical."""
    every = sorted({stream.dialect for stream in streams} | {"auto"})
    jobs = []
    for index, stream in enumerate(streams):
        dialects = sorted({stream.dialect, "auto", "canonical"}) if "realistic" in stream.origin else every
        jobs += [Job(index, "read", dialect, "") for dialect in dialects]
        jobs += [Job(index, "convert", stream.dialect, target) for target in CONVERT_TARGETS]
        jobs.append(Job(index, "validate", "canonical", ""))
    return jobs


# -- each side ---------------------------------------------------------------

WORKER = """
import io, pickle, sys, time
sys.path.insert(0, sys.argv[3])
import agentstream
from agentstream import protocol as p
from agentstream.cli.convert_cmd import convert
from agentstream.consumer import read
from agentstream.validate import validate_stream
from compare_revisions import inputs_tokens, normalise

class Trickle(io.RawIOBase):  # a few bytes per read, as a slow pipe gives them: most lines grow across chunks

    def __init__(self, data):
        self._data, self._at = data, 0

    def readable(self):
        return True

    def read1(self, size=-1):
        piece = self._data[self._at : self._at + 61]
        self._at += len(piece)
        return piece

    read = read1


long_lines = sys.argv[4] == "long"
if long_lines:  # every line that grew across chunks takes the long-line path, where the code has one
    import importlib
    for name in ("agentstream._lines", "agentstream.validate", "agentstream.consumer.pipeline"):
        module = importlib.import_module(name)
        if hasattr(module, "LONG_LINE_BYTES"):
            module.LONG_LINE_BYTES = 1
source = Trickle if long_lines else io.BytesIO

with open(sys.argv[1], "rb") as file:
    streams, jobs = pickle.load(file)
began = time.time()
out = []
for job in jobs:
    data = streams[job[0]]
    try:
        if job[1] == "read":
            lines = [p.encode_line(event) for event in read(source(data), job[2])]
        elif job[1] == "validate":
            lines = [str(violation).encode() + b"\\n" for violation in validate_stream(source(data))]
        else:
            sink = io.BytesIO()
            convert(source(data), sink, from_dialect=job[2], to_dialect=job[3])
            lines = sink.getvalue().splitlines(keepends=True)
        out.append([line.decode("utf-8", "backslashreplace").rstrip("\\n") for line in lines])
    except Exception as exc:
        out.append([f"raised {type(exc).__name__}: {exc}"])
window = (began - 2, time.time() + 2)
tokens = {}
for i, (job, lines) in enumerate(zip(jobs, out)):
    if job[0] not in tokens:
        tokens[job[0]] = inputs_tokens(streams[job[0]])
    out[i] = normalise(lines, tokens[job[0]], window)
with open(sys.argv[2], "wb") as file:
    pickle.dump((agentstream.__file__, out), file)
"""


def run_sides(
    sources: list[Path], streams: list[Stream], jobs: list[Job], tmp: Path, *, long_lines: bool = False
) -> list[list[list[str]]]:
    """Both sides at once, each in its own process; what each gave."""
    given = tmp / "jobs.pickle"
    with open(given, "wb") as file:
        pickle.dump(([stream.data for stream in streams], [tuple(job) for job in jobs]), file)
    procs = []
    for i, src in enumerate(sources):
        env = {**os.environ, "PYTHONPATH": str(src)}
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    WORKER,
                    str(given),
                    str(tmp / f"side{i}.pickle"),
                    str(HERE),
                    "long" if long_lines else "",
                ],
                env=env,
            )
        )
    results = []
    for i, (src, proc) in enumerate(zip(sources, procs, strict=True)):
        if proc.wait() != 0:
            raise SystemExit(f"the side at {src} failed")
        with open(tmp / f"side{i}.pickle", "rb") as file:
            where, output = pickle.load(file)
        results.append(output)
        if not Path(where).resolve().is_relative_to(src.resolve()):
            raise SystemExit(f"the side at {src} imported agentstream from {where}")
    return results


# -- comparing -----------------------------------------------------------------

_RANDOM = re.compile(
    r"\b[a-z]+_[0-9a-f]{16}\b|\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"
    r"|\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)"
)


def inputs_tokens(data: bytes) -> set[str]:
    """The id-, UUID- and time-shaped values of an input: where an output has them, they are not random."""
    return set(_RANDOM.findall(data.decode("utf-8", "replace")))


_SHORT = 300
"""Longer strings are content carried over from the input; only shorter ones can be or hold made-up values."""


def normalise(lines: list[str], given: set[str], window: tuple[float, float]) -> list[str]:
    """One output with what is random replaced: made-up ids and UUIDs by their order of first appearance,
    times within ``window`` (read from the clock during the run) by ``<now>``; the values in ``given`` stay."""
    seen: dict[str, str] = {}
    first, last = window

    def replace(match: re.Match[str]) -> str:
        token = match[0]
        if token in given:
            return token
        if token[0].isdigit() and token[4] == "-" and "T" in token:
            try:
                moment = datetime.fromisoformat(token.replace("Z", "+00:00")).timestamp()
            except ValueError:
                return token
            return "<now>" if first <= moment <= last else token
        return seen.setdefault(token, f"<random {len(seen)}>")

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return _RANDOM.sub(replace, value) if len(value) <= _SHORT else value
        if isinstance(value, dict):
            return {key: walk(item) for key, item in value.items()}
        if isinstance(value, list):
            return [walk(item) for item in value]
        return value

    out = []
    for line in lines:
        try:
            out.append(json.dumps(walk(json.loads(line)), ensure_ascii=False, separators=(",", ":")))
        except ValueError:
            out.append(_RANDOM.sub(replace, line))
    return out


def compare(
    streams: list[Stream], jobs: list[Job], old: list[list[str]], new: list[list[str]], show: int
) -> tuple[int, int, list[str]]:
    """(lines compared, outputs that differ, the first differences, described)."""
    compared, differing, shown = 0, 0, []
    for job, a, b in zip(jobs, old, new, strict=True):
        compared += max(len(a), len(b))
        if a == b:
            continue
        differing += 1
        if len(shown) < show:
            stream = streams[job.stream]
            at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            what = f"{job.kind} {job.dialect}" + (f" → {job.target}" if job.target else "")
            shown.append(
                f"stream {stream.origin} ({stream.dialect}), {what}, output line {at + 1}"
                f" ({len(a)} old lines, {len(b)} new):\n"
                f"  old: {a[at][:400] if at < len(a) else '(none)'}\n"
                f"  new: {b[at][:400] if at < len(b) else '(none)'}"
            )
    return compared, differing, shown


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("old", type=Path, help="the old code's src directory")
    parser.add_argument("new", type=Path, help="the new code's src directory")
    parser.add_argument("--streams", type=int, default=3000, help="mutated streams (default 3000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--show", type=int, default=5, help="differences to print (default 5)")
    parser.add_argument(
        "--long-lines",
        action="store_true",
        help="feed the input 61 bytes at a time, and let every line that grew across reads take the path"
        " for very long lines (LONG_LINE_BYTES set to 1) where the code has one",
    )
    args = parser.parse_args()
    for src in (args.old, args.new):
        if not (src / "agentstream" / "__init__.py").is_file():
            parser.error(f"{src} is not a src directory with agentstream in it")
    began = time.perf_counter()
    streams = corpus(args.seed, args.streams)
    jobs = jobs_for(streams)
    print(
        f"{len(streams)} streams ({args.streams} mutated), {len(jobs)} reads and conversions per side",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="agentstream-compare-") as tmp:
        old, new = run_sides([args.old, args.new], streams, jobs, Path(tmp), long_lines=args.long_lines)
    compared, differing, shown = compare(streams, jobs, old, new, args.show)
    print(
        f"{compared} output lines compared, {differing} of {len(jobs)} outputs differ ({time.perf_counter() - began:.0f} s)"
    )
    for text in shown:
        print(text)
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
