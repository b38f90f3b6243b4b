"""The event bus: where runs are published, replayed, tailed and queued.

One interface (:class:`Bus`), backends chosen by the URL's scheme (:func:`open_bus`)
in the ``agentstream.bus`` entry-point group (:mod:`agentstream.plugins`); built in:

* ``sqlite:///path/bus.sqlite3`` (the default, in :func:`agentstream._paths.state_dir`):
  one file, WAL mode, safe for many processes on one machine.
* ``redis://[user:password@]host:port/db`` or ``rediss://…`` (TLS): Redis Streams,
  for runs, followers and workers spread over several machines.

A run is the NDJSON stream of one session. The bus stores each event's canonical
line (bytes, without the newline) under ``(run_id, seq)``; that key is unique, so
an append retried after a lost reply can never duplicate an event, and a reader
resumes exactly from any ``seq``. A run's status is derived from its events
(``start`` → running, ``result`` → succeeded / failed / interrupted) and, once a
``result`` is stored, the run is closed: later appends are refused, which fences
off a producer that was presumed dead.

See ``docs/bus.md`` for the data layout of each backend. A backend's entry point
names a :data:`BusFactory`.
"""

from __future__ import annotations

import abc
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, Literal, NamedTuple, Protocol, TypeAlias, get_args
from urllib.parse import parse_qs, urlsplit

import msgspec

from agentstream.errors import AgentstreamError, ErrorCode, UsageError
from agentstream.plugins import Registry

__all__ = [
    "BACKENDS",
    "BOUND_LINE_BYTES",
    "BUS_ENV",
    "CONNECT_TIMEOUT_ENV",
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_RETENTION_S",
    "DEFAULT_RETRY_S",
    "PRUNE_EVERY_S",
    "REACHED_ENV",
    "RETRY_ENV",
    "RUN_STATUSES",
    "TERMINAL_STATUSES",
    "Bus",
    "BusBusy",
    "BusFactory",
    "BusUnavailable",
    "BusUnusable",
    "Claim",
    "FeedItem",
    "Job",
    "ProducerConflict",
    "Record",
    "RunInfo",
    "RunStatus",
    "RunUpdate",
    "SeqConflict",
    "bus_seconds",
    "check_bus_url",
    "connect_timeout",
    "default_bus_url",
    "open_bus",
    "parse_duration",
    "prune_due",
    "redact_url",
    "run_update",
]

BUS_ENV: Final = "AGENTSTREAM_BUS"
"""Environment variable naming the bus URL when ``--bus`` is not given."""

RunStatus: TypeAlias = Literal["queued", "running", "succeeded", "failed", "interrupted"]
RUN_STATUSES: Final[tuple[RunStatus, ...]] = get_args(RunStatus)
TERMINAL_STATUSES: Final[frozenset[str]] = frozenset({"succeeded", "failed", "interrupted"})
_SIGNAL_EXITS: Final = frozenset({129, 130, 143})

DEFAULT_RETENTION_S: Final = 7 * 24 * 3600.0
"""A run is deleted this long after its last event, unless the URL says otherwise (a finished job too)."""
PRUNE_EVERY_S: Final = 60.0
"""How often at most a writer sweeps what retention has let go (a tenth of a shorter retention)."""

CONNECT_TIMEOUT_ENV: Final = "AGENTSTREAM_BUS_CONNECT_TIMEOUT"
DEFAULT_CONNECT_TIMEOUT_S: Final = 2.0
"""How long reaching a bus may take (``?connect_timeout=S`` in the URL, else ``$AGENTSTREAM_BUS_CONNECT_TIMEOUT``).

One connection attempt waits at most this long, and a bus that was never reached
is given up after this long, so a dead bus costs seconds, not minutes.
"""
RETRY_ENV: Final = "AGENTSTREAM_BUS_RETRY"
DEFAULT_RETRY_S: Final = 30.0
"""How long an outage of a bus that was reached before is retried (publisher, worker)."""
REACHED_ENV: Final = "AGENTSTREAM_BUS_REACHED"
"""Set to 1 by a worker for its jobs: the worker reached the bus, so a job's publisher retries an outage from its
first batch on for the retry window, instead of giving up a bus it takes for one never reached."""
BOUND_LINE_BYTES: Final = 1 << 20
"""Longer event lines are handed to a backend's store so that it makes no copy of them (each backend says how)."""


class BusUnavailable(AgentstreamError):
    """The bus could not be reached or used (server down, file unwritable)."""

    code = ErrorCode.BUS_UNAVAILABLE


class BusBusy(BusUnavailable):
    """The bus answered but could not take the write in time: another process holds its lock (a long
    transaction, a backup). The bus is there, so a producer waits it out as it does an outage."""


class BusUnusable(BusUnavailable):
    """The bus cannot work as it is (a file that is no database, one this process may not write, a directory):
    no retry can help, so callers give it up at once, and the fix says what to change."""


class SeqConflict(AgentstreamError):
    """A conditional append found the run's next ``seq`` different from the one expected."""

    code = ErrorCode.SEQ_CONFLICT


class ProducerConflict(AgentstreamError):
    """Another producer writes this run: two producers picked the same run id, and their events, each
    numbered from 0, would be merged into one run. The run stays the first one's; the other stores nothing."""

    code = ErrorCode.SEQ_CONFLICT

    def __init__(self, run_id: str) -> None:
        super().__init__(
            f"run {run_id} on the bus is written by another producer (two producers chose the same run id);"
            " the bus keeps that one's events and refuses this one's",
            fix="give each producer a run id of its own: a new --session-id, or none (one is made up)",
        )


class Record(NamedTuple):
    """One stored event: its ``seq``, wire ``type`` and canonical line (no newline)."""

    seq: int
    type: str
    line: bytes


class FeedItem(NamedTuple):
    """One event from the all-runs feed, with the cursor that resumes right after it."""

    cursor: str
    run_id: str
    record: Record


class RunInfo(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What the bus knows about a run without reading its events."""

    run_id: str
    status: str
    command: str = ""
    created: float = 0.0
    """Unix time of the first write (registration or first event)."""
    updated: float = 0.0
    """Unix time of the last event."""
    alive: float = 0.0
    """Unix time its producer last proved alive (an append, or a touch while quiet); 0 when nobody
    keeps this record (an older producer, or a backend without :meth:`Bus.touch`)."""
    last_seq: int = -1
    exit_code: int | None = None
    subtype: str | None = None
    job_id: str | None = None
    attempt: int | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class RunUpdate(NamedTuple):
    """Run metadata implied by a batch of records (``None`` = unchanged)."""

    status: str | None
    command: str | None
    exit_code: int | None
    subtype: str | None


class Job(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A queued prompt. Attempt ``k`` runs as ``run_id`` (k = 1) or ``f"{run_id}.{k}"``."""

    job_id: str
    run_id: str
    prompt: str
    args: list[str] = []
    """Extra ``exec`` options, passed through verbatim."""
    status: str = "queued"
    """queued, running, succeeded, failed."""
    attempt: int = 0
    worker: str | None = None
    created: float = 0.0
    updated: float = 0.0

    def attempt_run_id(self, attempt: int) -> str:
        return self.run_id if attempt <= 1 else f"{self.run_id}.{attempt}"


class Claim(NamedTuple):
    """A job a worker now owns: a queued job's first attempt to run (``run_id``), or a job taken over from a
    worker that stopped heartbeating (``run_id`` None), whose lost attempt ``attempt`` is to be settled first.

    A takeover decides nothing and counts nothing: how the lost attempt's run ended says whether the job
    succeeded, failed or runs again (:mod:`agentstream.bus.queue`), and only then is it finished
    (:meth:`Bus.finish_job`) or given its next attempt (:meth:`Bus.retry_job`).
    """

    job: Job
    attempt: int
    run_id: str | None
    previous_run_id: str | None
    """The lost attempt's run, when the job was taken over from a worker that stopped heartbeating."""
    token: str
    """Backend handle used to fence heartbeats and completion (the owner's identity)."""

    @classmethod
    def first(cls, job: Job, token: str) -> Claim:
        """The claim of a queued job, whose first attempt the backend counted as it took the job."""
        return cls(job, 1, job.attempt_run_id(1), None, token)

    @classmethod
    def takeover(cls, job: Job, token: str) -> Claim:
        """The claim of a job taken over from a lost worker: its attempt as it stands, no run to start yet."""
        return cls(job, job.attempt, None, job.attempt_run_id(job.attempt), token)

    def next_attempt(self) -> Claim:
        """This claim once the backend has counted the job's next attempt (:meth:`Bus.retry_job`)."""
        number = self.attempt + 1
        job = msgspec.structs.replace(self.job, attempt=number)
        return Claim(job, number, job.attempt_run_id(number), self.previous_run_id, self.token)


class Bus(abc.ABC):
    """Append, replay, tail and list runs; queue jobs. One instance per thread."""

    url: str

    # -- runs ----------------------------------------------------------------

    @abc.abstractmethod
    def append(self, run_id: str, records: Sequence[Record], *, if_next_seq: int | None = None) -> int:
        """Store records in ``seq`` order; return how many were new.

        Records whose ``seq`` is already stored are skipped (so retries are safe).
        Nothing is stored once the run has a ``result``. With ``if_next_seq``,
        raise :class:`SeqConflict` unless the run's next ``seq`` is exactly that.
        """

    @abc.abstractmethod
    def read(
        self, run_id: str, from_seq: int = 0, *, limit: int = 1000, block: float | None = None
    ) -> list[Record]:
        """Records with ``seq >= from_seq`` in order; with ``block``, wait up to that long for one."""

    @abc.abstractmethod
    def get_run(self, run_id: str) -> RunInfo | None: ...

    @abc.abstractmethod
    def list_runs(self, *, statuses: Sequence[str] = (), limit: int = 50) -> list[RunInfo]:
        """Newest first."""

    def append_from(self, producer: str, run_id: str, records: Sequence[Record]) -> int:
        """:meth:`append` from the run's producer, named by a token of its own (a :class:`~agentstream.bus.publish.Publisher`'s).

        The first append that names a producer makes the run that producer's (also a run registered
        before its first event); from then on an append from any other raises :class:`ProducerConflict`
        and stores nothing, checked in the same transaction as the append, so two producers that chose
        the same run id are never merged into one run. Appends without a producer (an ending written for
        a lost producer, a cancel) are not checked. A backend that keeps no producer may leave this as is:
        it appends unchecked.
        """
        return self.append(run_id, records)

    def touch(self, run_id: str) -> None:
        """Stamp a running run's ``alive`` time: its producer is quiet, not dead (:mod:`agentstream.bus.liveness`).

        A backend that keeps no such record may leave this as is: its runs are never declared lost.
        """

    @abc.abstractmethod
    def register_run(
        self, run_id: str, *, command: str, job_id: str | None = None, attempt: int | None = None
    ) -> None:
        """Make a run known before its first event (status ``queued``), e.g. for a submitted job."""

    # -- the all-runs feed ----------------------------------------------------

    @abc.abstractmethod
    def feed_end(self) -> str:
        """A cursor at the current end of the feed (read from it to see only new events)."""

    @abc.abstractmethod
    def read_feed(self, cursor: str, *, limit: int = 1000, block: float | None = None) -> list[FeedItem]:
        """Events of every run stored after ``cursor`` (``"0"`` = the oldest kept)."""

    # -- jobs ----------------------------------------------------------------

    @abc.abstractmethod
    def enqueue(self, job: Job) -> None: ...

    @abc.abstractmethod
    def claim(self, worker: str, *, idle_timeout: float, block: float = 0.0) -> Claim | None:
        """Take a job whose owner stopped heartbeating for ``idle_timeout``, else a queued one.

        A queued job's first attempt is counted as it is taken (:meth:`Claim.first`); a running job is only
        taken over (:meth:`Claim.takeover`): its attempt, status and outcome stay as they are.
        """

    @abc.abstractmethod
    def heartbeat(self, claim: Claim) -> bool:
        """Prove the claim is alive; False if another worker has taken the job since."""

    @abc.abstractmethod
    def retry_job(self, claim: Claim) -> Claim | None:
        """Count the next attempt of a job this claim took over (:meth:`Claim.next_attempt`); None (and no
        change) if the claim was lost."""

    @abc.abstractmethod
    def finish_job(self, claim: Claim, status: str) -> bool:
        """Record the job's final status; False (and no change) if the claim was lost.

        A finished job is kept as long as a run (the bus's retention after it finished), then deleted.
        """

    @abc.abstractmethod
    def get_job(self, job_id: str) -> Job | None: ...

    def close(self) -> None:
        """Release connections. Idempotent."""

    def __enter__(self) -> Bus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def prune_due(last_prune: float, now: float, retention: float) -> bool:
    """Whether a writer that just ended a run sweeps now: never when runs are kept forever, else at most once
    every :data:`PRUNE_EVERY_S`, so that many runs ending at once cost one sweep."""
    return bool(retention) and now - last_prune >= min(PRUNE_EVERY_S, retention / 10)


def run_update(records: Sequence[Record]) -> RunUpdate:
    """The metadata a batch implies. Decodes only ``start`` and ``result`` lines."""
    status = command = subtype = None
    exit_code = None
    for record in records:
        if record.type == "start":
            status = status or "running"
            command = _field(record.line, "command")
        elif record.type == "result":
            fields = msgspec.json.decode(record.line, type=_ResultFields)
            exit_code, subtype = fields.exit_code, fields.subtype
            if fields.ok:
                status = "succeeded"
            elif fields.subtype == "interrupted" or fields.exit_code in _SIGNAL_EXITS:
                status = "interrupted"
            else:
                status = "failed"
    return RunUpdate(status, command, exit_code, subtype)


class _ResultFields(msgspec.Struct):
    ok: bool = False
    exit_code: int = 1
    subtype: str = ""


def _field(line: bytes, name: str) -> str | None:
    value = msgspec.json.decode(line).get(name)
    return value if isinstance(value, str) else None


# -- choosing a backend --------------------------------------------------------


class BusFactory(Protocol):
    """Opens a backend: the whole URL, and the options every backend is given.

    ``retention`` is in seconds (0 keeps forever); ``maxlen`` is the URL's cap on a
    run's stored events, ``None`` when the URL sets none (a backend may ignore it);
    ``connect_timeout`` is how long a networked backend may wait to connect.
    """

    def __call__(self, url: str, *, retention: float, maxlen: int | None, connect_timeout: float) -> Bus: ...


BACKENDS: Registry[BusFactory] = Registry(
    "agentstream.bus",
    {
        "sqlite": "agentstream.bus.sqlite:open_sqlite",
        "redis": "agentstream.bus.redis_backend:open_redis",
        "rediss": "agentstream.bus.redis_backend:open_redis",
        "unix": "agentstream.bus.redis_backend:open_redis",
    },
    kind="bus backend",
    accepts=callable,
    expected="a callable (url, *, retention, maxlen, connect_timeout) -> Bus",
)
"""Bus backends by URL scheme."""

_URL_FIX: Final = (
    "use sqlite:///ABSOLUTE/PATH.sqlite3, redis://[:PASSWORD@]HOST:PORT[/DB] or rediss://… "
    f"(via --bus or ${BUS_ENV}); leave both unset for the embedded default"
)


DEFAULT_BUS_FILE: Final = "bus.sqlite3"
"""The embedded bus's file, in the state directory."""


def default_bus_url() -> str:
    """``$AGENTSTREAM_BUS``, else the embedded SQLite bus in the state directory."""
    explicit = os.environ.get(BUS_ENV, "").strip()
    if explicit:
        return explicit
    from agentstream._paths import state_dir

    return f"sqlite:///{state_dir() / DEFAULT_BUS_FILE}"


def check_bus_url(url: str | None) -> str:
    """The URL to use (``url``, else the default), after checking its form without connecting.

    Raises :class:`UsageError` (INVALID_INPUT, exit 2) for a malformed URL or a scheme
    no backend (built-in or plugin) serves, so a command can refuse it before anything runs.
    """
    url = (url or "").strip() or default_bus_url()
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if not scheme or BACKENDS.get(scheme, report=False) is None:
        problem = BACKENDS.problem(scheme) if scheme else None
        if problem is not None:
            raise UsageError(f"unsupported bus URL {redact_url(url)!r}: {problem.message}", fix=problem.fix)
        plugins = [name for name in BACKENDS.usable_names() if name not in BACKENDS.builtins]
        also = (
            f"; or an installed plugin's scheme: {', '.join(f'{name}://…' for name in plugins)}"
            if plugins
            else ""
        )
        raise UsageError(f"unsupported bus URL {redact_url(url)!r}", fix=_URL_FIX + also)
    parts = urlsplit(url)
    try:
        port = parts.port  # raises ValueError for a port that is not a number in range
    except ValueError:
        port = -1
    if scheme in ("redis", "rediss"):
        db = parts.path.strip("/")
        if port == -1 or not parts.hostname or (db and not db.isdigit()):
            raise UsageError(f"malformed Redis URL {redact_url(url)!r}", fix=_URL_FIX)
    elif scheme in ("sqlite", "unix") and (not parts.path or parts.path == "/"):
        raise UsageError(f"the bus URL {redact_url(url)!r} names no path", fix=_URL_FIX)
    _bus_options(url)
    return url


def missing_local_bus(url: str | None) -> Path | None:
    """The file of a SQLite bus that does not exist yet, else ``None`` (it exists, or the bus is a server).

    A command that only reads the bus (``runs``, ``usage``) checks this first: opening would create the
    file and its directories, and a mistyped ``--bus`` would then pass for an empty bus. Only a path that
    is absent counts: one that cannot be (under a file, in a directory this user may not search) raises
    the error opening it would (:class:`BusUnusable`), rather than pass for a bus not made yet.
    """
    if not (url or "").strip() and not os.environ.get(BUS_ENV, "").strip():
        from agentstream._paths import state_path

        path = state_path() / DEFAULT_BUS_FILE  # the default bus: its directory is not made either
    else:
        url = check_bus_url(url)
        if url.split(":", 1)[0].lower() != "sqlite":
            return None
        from agentstream.bus.sqlite import sqlite_path

        path = sqlite_path(url)
    try:
        path.stat()
    except FileNotFoundError:
        return path
    except OSError as exc:
        from agentstream.bus.sqlite import bus_error

        raise bus_error(exc, path) from exc
    return None


def open_bus(url: str | None = None) -> Bus:
    """Open the bus at ``url`` (default: :func:`default_bus_url`), importing only that backend.

    Raises :class:`UsageError` (code INVALID_INPUT) for a malformed URL and
    :class:`BusUnavailable` when a local bus file cannot be opened. Redis
    connects on first use, so an unreachable server surfaces on the first call
    (after at most :func:`connect_timeout` seconds).
    """
    url = check_bus_url(url)
    scheme = url.split(":", 1)[0].lower()
    factory = BACKENDS.get(scheme)
    assert factory is not None  # check_bus_url found it
    options = _bus_options(url)
    if scheme in BACKENDS.builtins:
        return factory(
            url,
            retention=options.get("retention", DEFAULT_RETENTION_S),
            maxlen=options.get("maxlen"),
            connect_timeout=connect_timeout(url),
        )
    return _open_plugin_bus(scheme, factory, url, options)


def _open_plugin_bus(scheme: str, factory: BusFactory, url: str, options: dict[str, Any]) -> Bus:
    """A plugin backend's bus: what its factory raises (but our own errors) or returns that is no
    :class:`Bus` becomes a :class:`BusUnavailable` naming the plugin, not a traceback in the command."""
    where = f"{BACKENDS.where(scheme)} could not open {redact_url(url)!r}"
    try:
        bus = factory(
            url,
            retention=options.get("retention", DEFAULT_RETENTION_S),
            maxlen=options.get("maxlen"),
            connect_timeout=connect_timeout(url),
        )
    except AgentstreamError:
        raise  # the backend's own message (BusUnavailable, UsageError): it says what went wrong
    except Exception as exc:
        raise BusUnavailable(
            f"{where} ({type(exc).__name__}: {exc})",
            fix=BACKENDS.fix_for(
                scheme, "its factory must raise BusUnavailable with a reason, or return a Bus"
            ),
        ) from exc
    if not isinstance(bus, Bus):
        from agentstream.plugins import describe

        raise BusUnavailable(
            f"{where}: its factory returned {describe(bus)}, expected an agentstream.bus.Bus",
            fix=BACKENDS.fix_for(scheme, "its factory must return an instance of agentstream.bus.Bus"),
        )
    return bus


def connect_timeout(url: str | None) -> float:
    """The connect timeout for ``url``: its ``?connect_timeout=``, else the environment, else 2 s."""
    raw = parse_qs(urlsplit((url or "").strip() or default_bus_url()).query).get("connect_timeout")
    if raw:
        return _positive_seconds(raw[-1], "connect_timeout in the bus URL")
    return bus_seconds(CONNECT_TIMEOUT_ENV, DEFAULT_CONNECT_TIMEOUT_S)


def bus_seconds(env: str, default: float) -> float:
    """A duration from the environment; a value that is not a positive number is a usage error."""
    raw = os.environ.get(env, "").strip()
    return _positive_seconds(raw, f"${env}") if raw else default


def _positive_seconds(raw: str, what: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise UsageError(f"bad {what}: {raw!r}", fix="give a positive number of seconds, e.g. 2")
    return value


def _bus_options(url: str) -> dict[str, Any]:
    """Our own query parameters (``retention``, ``maxlen``, ``connect_timeout``), checked."""
    query = parse_qs(urlsplit(url).query)
    options: dict[str, Any] = {}
    if "connect_timeout" in query:
        options["connect_timeout"] = connect_timeout(url)
    if "retention" in query:
        options["retention"] = parse_duration(query["retention"][-1], what="retention")
    if "maxlen" in query:
        raw = query["maxlen"][-1]
        if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:  # "²" and "٣" are digits, not numbers
            raise UsageError(
                f"bad maxlen {raw!r} in the bus URL", fix="use a positive integer, e.g. ?maxlen=100000"
            )
        options["maxlen"] = int(raw)
    return options


_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_FOREVER_S: Final = 100 * 365 * 86400.0
"""Past a century a duration is no duration (write 0 to keep forever)."""


def parse_duration(text: str, *, what: str = "duration") -> float:
    """``90``, ``90s``, ``15m``, ``12h``, ``7d`` → seconds; ``0``/``none``/``forever`` → 0 (keep forever)."""
    raw = text.strip().lower()
    if raw in ("0", "none", "forever", "never"):
        return 0.0
    number, unit = (raw[:-1], raw[-1]) if raw and raw[-1] in _UNITS else (raw, "s")
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        value = -1.0
    if not 0 < value < _FOREVER_S:  # NaN, infinities and 1e400 included
        raise UsageError(
            f"bad {what} {text!r}", fix="use seconds or a number with s/m/h/d, e.g. 7d; 0 keeps forever"
        )
    return value


_SECRET_QUERY: Final = re.compile(r"(?i)([?&](?:password|passwd|pass|token|secret|auth)[^=&#]*=)[^&#]*")
"""A query parameter that holds a secret (redis-py takes ``?password=`` as the password)."""


def redact_url(url: str) -> str:
    """The URL without its secrets (the password in ``user:pass@`` or in the query), for messages."""
    parts = urlsplit(url)
    if parts.password:
        url = url.replace(f":{parts.password}@", ":***@", 1)
    return _SECRET_QUERY.sub(r"\1***", url)
