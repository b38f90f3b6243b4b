"""The distributed bus: Redis Streams, for runs, followers and workers on many machines.

Keys (``{id}`` is a run or job id)::

    agentstream:run:{id}      stream, one entry per event, entry ID 0-(seq+1), fields t (type), l (line)
    agentstream:runmeta:{id}  hash: status, command, created, updated, alive, last_seq, exit_code, subtype, job_id, attempt,
                              producer
    agentstream:runs          sorted set of run ids by creation time (the index behind ``runs``)
    agentstream:events        stream of every run's events (r, s, t, l), capped with MAXLEN ~ (``watch``)
    agentstream:jobs          stream of job ids, consumed by the group ``workers``; a finished job's entry is deleted
    agentstream:job:{id}      hash: the job and its state; expires ``retention`` after the job finished

An append is one Lua script per batch, so a batch is stored whole or not at all,
an entry ID equal to or below the stream's top is skipped (a retried append is a
no-op), the feed gets exactly the new events, a closed run refuses more, and
so does a run another producer writes (:meth:`~agentstream.bus.Bus.append_from`).
Retention: every append sets the run's keys to expire ``retention`` seconds
later, so a run disappears that long after its last event, and a finished job's
record expires as long after it finished. A writer that ends a run sweeps the
rest at most once a minute (:func:`~agentstream.bus.prune_due`): the index
entries of expired runs, and the consumers of workers gone for as long, which
hold no job.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any, Final, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import msgspec

from agentstream._extras import require
from agentstream.bus import (
    BOUND_LINE_BYTES,
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_RETENTION_S,
    TERMINAL_STATUSES,
    Bus,
    BusUnavailable,
    Claim,
    FeedItem,
    Job,
    ProducerConflict,
    Record,
    RunInfo,
    SeqConflict,
    prune_due,
    redact_url,
    run_update,
)
from agentstream.errors import UsageError

if TYPE_CHECKING:
    import redis
    from redis.typing import EncodableT, FieldT

__all__ = ["RedisBus", "open_redis"]

PREFIX: Final = "agentstream:"
FEED_KEY: Final = PREFIX + "events"
RUNS_KEY: Final = PREFIX + "runs"
JOBS_KEY: Final = PREFIX + "jobs"
GROUP: Final = "workers"
DEFAULT_MAXLEN: Final = 100_000
MAX_BLOCK_S: Final = 1.0
"""Longest single blocking command: a longer ``block`` is waited out in slices of this, so that a server
that stops answering is noticed within this plus the connect timeout, whatever the caller's ``block``."""
_OUR_QUERY: Final = frozenset({"retention", "maxlen", "connect_timeout"})
PRUNE_PAGE: Final = 500
"""Index entries checked per round trip of a sweep."""

# KEYS: run stream, run meta, runs index, feed
# ARGV: run_id, now, maxlen, retention, if_next_seq (-1: none), status, command, exit_code, subtype,
#       producer (Bus.append_from; empty: not checked), records as one MessagePack array of
#       [seq, type, line] (one argument instead of three per record: the client's command packing
#       was the bottleneck). Empty strings mean "unchanged". Returns {added, last}; added -1 is a
#       seq conflict, -2 another producer's run.
#       A line over BOUND_LINE_BYTES comes as an argument of its own after that (the client sends it
#       as it is, where packing would copy it twice); its record holds that argument's index.
_RECORDS_ARG: Final = 11
"""The records argument's index in the append script's ARGV (Lua counts from 1); the script reads it here."""
_APPEND: Final = """
local status = redis.call('HGET', KEYS[2], 'status')
local last = tonumber(redis.call('HGET', KEYS[2], 'last_seq') or '-1')
local expect = tonumber(ARGV[5])
if expect >= 0 and last + 1 ~= expect then return {-1, last} end
local owner = redis.call('HGET', KEYS[2], 'producer')
if ARGV[10] ~= '' and owner and owner ~= ARGV[10] then return {-2, last} end
if status == 'succeeded' or status == 'failed' or status == 'interrupted' then return {0, last} end
local added = 0
for _, record in ipairs(cmsgpack.unpack(ARGV[RECORDS_ARG])) do
  local seq, line = record[1], record[3]
  if type(line) == 'number' then line = ARGV[line] end
  if seq > last then
    redis.call('XADD', KEYS[1], '0-' .. (seq + 1), 't', record[2], 'l', line)
    redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[3], '*', 'r', ARGV[1], 's', seq, 't', record[2], 'l', line)
    last = seq
    added = added + 1
  end
end
redis.call('HSET', KEYS[2], 'run_id', ARGV[1], 'last_seq', last, 'updated', ARGV[2], 'alive', ARGV[2])
if redis.call('HSETNX', KEYS[2], 'created', ARGV[2]) == 1 then
  redis.call('ZADD', KEYS[3], 'NX', ARGV[2], ARGV[1])
end
if ARGV[6] ~= '' then
  redis.call('HSET', KEYS[2], 'status', ARGV[6])
elseif status == false or status == 'queued' then
  redis.call('HSET', KEYS[2], 'status', 'running')
end
if ARGV[7] ~= '' then redis.call('HSET', KEYS[2], 'command', ARGV[7]) end
if ARGV[10] ~= '' and not owner then redis.call('HSET', KEYS[2], 'producer', ARGV[10]) end
if ARGV[8] ~= '' then redis.call('HSET', KEYS[2], 'exit_code', ARGV[8], 'subtype', ARGV[9]) end
if tonumber(ARGV[4]) > 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[4])
  redis.call('EXPIRE', KEYS[2], ARGV[4])
end
return {added, last}
""".replace("RECORDS_ARG", str(_RECORDS_ARG))

# KEYS: run meta. ARGV: now. Only a running run: a touch must not bring back a run retention removed.
_TOUCH: Final = """
if redis.call('HGET', KEYS[1], 'status') == 'running' then redis.call('HSET', KEYS[1], 'alive', ARGV[1]) end
"""

# KEYS: jobs stream, job hash. ARGV: group, consumer, entry id, attempt, action, now, retention, final status.
# Succeeds (1) only while this consumer owns the entry for this attempt. Action 'beat' resets the entry's idle
# time; 'retry' counts the next attempt and resets it too; 'finish' sets the final status, acknowledges and
# deletes the entry, and sets the job to expire ``retention`` later (0: never), as its runs do.
_OWNED: Final = """
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #pending == 0 or pending[1][2] ~= ARGV[2] then return 0 end
if redis.call('HGET', KEYS[2], 'attempt') ~= ARGV[4] then return 0 end
if ARGV[5] == 'finish' then
  redis.call('HSET', KEYS[2], 'status', ARGV[8], 'updated', ARGV[6])
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
  redis.call('XDEL', KEYS[1], ARGV[3])
  if tonumber(ARGV[7]) > 0 then redis.call('EXPIRE', KEYS[2], ARGV[7]) end
  return 1
end
if ARGV[5] == 'retry' then
  redis.call('HSET', KEYS[2], 'attempt', tonumber(ARGV[4]) + 1, 'updated', ARGV[6])
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
return 1
"""


# KEYS: jobs stream, job hash. ARGV: group, entry id, worker, now.
# A queued job: its first attempt counted and the job marked running, in one step. A running one (its worker
# stopped heartbeating): taken over as it stands, nothing counted. Returns {1 for a queued job, else 0, the job's
# fields}; {-1} when there is nothing to run (the job's record is gone, or it has finished), its entry dropped.
_TAKE: Final = """
local status = redis.call('HGET', KEYS[2], 'status')
if status ~= 'queued' and status ~= 'running' then
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
  redis.call('XDEL', KEYS[1], ARGV[2])
  return {-1}
end
local queued = 0
if status == 'queued' then
  queued = 1
  redis.call('HSET', KEYS[2], 'attempt', 1, 'status', 'running')
end
redis.call('HSET', KEYS[2], 'worker', ARGV[3], 'updated', ARGV[4])
return {queued, redis.call('HGETALL', KEYS[2])}
"""

# KEYS: jobs stream. ARGV: group, idle milliseconds. Deletes the group's consumers that hold no job and were not
# seen for that long (workers gone): a consumer is made again by its worker's next read, but its pending jobs
# would be dropped with it, so one that holds any is kept. Returns how many were deleted.
_PRUNE_CONSUMERS: Final = """
local listed = redis.pcall('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if listed.err then return 0 end
local deleted = 0
for _, flat in ipairs(listed) do
  local consumer = {}
  for i = 1, #flat, 2 do consumer[flat[i]] = flat[i + 1] end
  if consumer.pending == 0 and consumer.idle > tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], consumer.name)
    deleted = deleted + 1
  end
end
return deleted
"""


def open_redis(url: str, *, retention: float, maxlen: int | None, connect_timeout: float) -> RedisBus:
    """The factory of the ``redis``, ``rediss`` and ``unix`` schemes."""
    return RedisBus(
        url, retention=retention, maxlen=maxlen or DEFAULT_MAXLEN, connect_timeout=connect_timeout
    )


def _packed(records: Sequence[Record]) -> list[bytes]:
    """The append script's records argument, then each long line as an argument of its own (see ``_APPEND``)."""
    # Redis's Lua MessagePack has no binary type: lines travel as str (canonical lines are UTF-8 JSON).
    if all(len(r.line) <= BOUND_LINE_BYTES for r in records):
        return [msgspec.msgpack.encode([(r.seq, r.type, r.line.decode()) for r in records])]
    long_lines: list[bytes] = []
    packed: list[tuple[int, str, str | int]] = []
    for r in records:
        if len(r.line) <= BOUND_LINE_BYTES:
            packed.append((r.seq, r.type, r.line.decode()))
        else:
            long_lines.append(r.line)
            packed.append((r.seq, r.type, _RECORDS_ARG + len(long_lines)))
    return [msgspec.msgpack.encode(packed), *long_lines]


class RedisBus(Bus):
    """The Redis Streams backend (redis-py, imported on first use).

    redis-py types each reply for every client set-up (bytes or str, classic or
    RESP3-native shapes); ours returns bytes in the classic (RESP2) shapes, so
    replies are cast to those where they are read.
    """

    def __init__(
        self,
        url: str,
        *,
        retention: float = DEFAULT_RETENTION_S,
        maxlen: int = DEFAULT_MAXLEN,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
    ) -> None:
        self.url = url
        self.retention = math.ceil(
            retention
        )  # whole seconds for EXPIRE; a fraction must not become 0 (forever)
        self.maxlen = maxlen
        self.connect_timeout = connect_timeout
        self._client = _client(url, connect_timeout, connect_timeout)
        self._append = self._client.register_script(_APPEND)
        self._owned = self._client.register_script(_OWNED)
        self._touch = self._client.register_script(_TOUCH)
        self._take_job = self._client.register_script(_TAKE)
        self._prune_consumers = self._client.register_script(_PRUNE_CONSUMERS)
        self._group_ready = False
        self._last_prune = 0.0

    @cached_property
    def _blocking_client(self) -> redis.Redis:
        """The client of blocking reads, which may wait for a reply :data:`MAX_BLOCK_S` longer (made on first use)."""
        return _client(self.url, self.connect_timeout, self.connect_timeout + MAX_BLOCK_S)

    def close(self) -> None:
        self._client.close()
        if "_blocking_client" in self.__dict__:
            self._blocking_client.close()

    @contextmanager
    def _translated(self) -> Iterator[None]:
        import redis

        try:
            yield
        except redis.AuthenticationError as exc:  # a ConnectionError subclass: test it first
            raise UsageError(
                f"Redis refused the connection's credentials: {exc}",
                fix="put the right password in the URL: redis://:PASSWORD@HOST:PORT (or USER:PASSWORD@)",
            ) from exc
        except redis.TimeoutError as exc:
            raise BusUnavailable(
                f"Redis at {redact_url(self.url)} did not answer within its connect timeout"
                f" ({self.connect_timeout:g}s): {exc}",
                fix="check that redis-server at that host and port is running and not stopped or overloaded;"
                " over a slow link, raise ?connect_timeout=S in --bus / $AGENTSTREAM_BUS",
            ) from exc
        except redis.ConnectionError as exc:
            raise BusUnavailable(
                f"cannot reach Redis at {redact_url(self.url)}: {exc}",
                fix="start redis-server or check host, port and password in --bus / $AGENTSTREAM_BUS",
            ) from exc

    # -- runs ------------------------------------------------------------------

    def append(self, run_id: str, records: Sequence[Record], *, if_next_seq: int | None = None) -> int:
        return self._append_batch(run_id, records, if_next_seq, None)

    def append_from(self, producer: str, run_id: str, records: Sequence[Record]) -> int:
        return self._append_batch(run_id, records, None, producer)

    def _append_batch(
        self, run_id: str, records: Sequence[Record], if_next_seq: int | None, producer: str | None
    ) -> int:
        if not records:
            return 0
        update = run_update(records)
        args: list[Any] = [
            run_id,
            repr(time.time()),
            self.maxlen,
            self.retention,
            -1 if if_next_seq is None else if_next_seq,
            update.status or "",
            update.command or "",
            "" if update.exit_code is None else update.exit_code,
            update.subtype or "",
            producer or "",
            *_packed(records),
        ]
        with self._translated():
            added, last = self._append(
                keys=[_run_key(run_id), _meta_key(run_id), RUNS_KEY, FEED_KEY], args=args
            )
        if added == -2:
            raise ProducerConflict(run_id)
        if added < 0:
            raise SeqConflict(f"run {run_id} is at seq {int(last) + 1}, not {if_next_seq}")
        if update.status in TERMINAL_STATUSES:
            self._maybe_prune()
        return int(added)

    def _maybe_prune(self) -> None:
        """Sweep what expiry leaves behind: index entries of expired runs, consumers of workers long gone.

        A run can only have expired once ``retention`` has passed since it was made (its keys expire that long
        after its last write), so only older index entries are looked at.
        """
        now = time.time()
        if not prune_due(self._last_prune, now, self.retention):
            return
        self._last_prune = now
        with self._translated():
            kept = 0
            while True:
                ids = cast(
                    "list[bytes]",
                    self._client.zrangebyscore(
                        RUNS_KEY, "-inf", now - self.retention, start=kept, num=PRUNE_PAGE
                    ),
                )
                pipe = self._client.pipeline(transaction=False)
                for run_id in ids:
                    pipe.exists(_meta_key(run_id.decode()))
                expired = [run_id for run_id, exists in zip(ids, pipe.execute(), strict=True) if not exists]
                if expired:
                    self._client.zrem(RUNS_KEY, *expired)
                kept += len(ids) - len(expired)
                if len(ids) < PRUNE_PAGE:
                    break
            self._prune_consumers(keys=[JOBS_KEY], args=[GROUP, self.retention * 1000])

    def touch(self, run_id: str) -> None:
        with self._translated():
            self._touch(keys=[_meta_key(run_id)], args=[repr(time.time())])

    def read(
        self, run_id: str, from_seq: int = 0, *, limit: int = 1000, block: float | None = None
    ) -> list[Record]:
        entries = self._xread(_run_key(run_id), f"0-{max(from_seq, 0)}", limit, block)
        return [_record(entry_id, fields) for entry_id, fields in entries]

    def _xread(
        self, key: str, after: str, limit: int, block: float | None
    ) -> list[tuple[bytes, dict[bytes, bytes]]]:
        """Entries after ``after`` (exclusive); with ``block``, wait up to that long for one."""
        return self._read_stream(
            lambda client, block_ms: client.xread({key: after}, count=limit, block=block_ms), block
        )

    def _read_stream(
        self, read: Callable[[redis.Redis, int | None], Any], block: float | None
    ) -> list[tuple[bytes, dict[bytes, bytes]]]:
        """The entries of one stream read ``read(client, block_ms)``; with ``block``, wait up to that long for one.

        A wait is made of blocking reads of at most :data:`MAX_BLOCK_S` each, so each reply is due within that
        and the connect timeout: a server that stops answering is noticed that soon, whatever ``block`` is.
        """
        if not block:
            with self._translated():
                reply = read(self._client, None)
        else:
            deadline = time.monotonic() + block
            while True:
                remaining = deadline - time.monotonic()
                with self._translated():
                    reply = read(self._blocking_client, max(1, int(min(remaining, MAX_BLOCK_S) * 1000)))
                if reply or remaining <= MAX_BLOCK_S:
                    break
        return list(cast("list[list[Any]]", reply)[0][1]) if reply else []

    def get_run(self, run_id: str) -> RunInfo | None:
        with self._translated():
            fields = cast("dict[bytes, bytes]", self._client.hgetall(_meta_key(run_id)))
        return _run_info(fields) if fields else None

    def list_runs(self, *, statuses: Sequence[str] = (), limit: int = 50) -> list[RunInfo]:
        found: list[RunInfo] = []
        start, page = 0, max(limit, 100)
        with self._translated():
            while len(found) < limit:
                ids = cast("list[bytes]", self._client.zrevrange(RUNS_KEY, start, start + page - 1))
                if not ids:
                    break
                start += page
                found += self._runs_page(ids, statuses)
        return found[:limit]

    def _runs_page(self, ids: list[bytes], statuses: Sequence[str]) -> list[RunInfo]:
        pipe = self._client.pipeline(transaction=False)
        for run_id in ids:
            pipe.hgetall(_meta_key(run_id.decode()))
        infos: list[RunInfo] = []
        expired: list[bytes] = []
        for run_id, fields in zip(ids, pipe.execute(), strict=False):
            if not fields:
                expired.append(run_id)
                continue
            info = _run_info(fields)
            if not statuses or info.status in statuses:
                infos.append(info)
        if expired:
            self._client.zrem(RUNS_KEY, *expired)
        return infos

    def register_run(
        self, run_id: str, *, command: str, job_id: str | None = None, attempt: int | None = None
    ) -> None:
        now = repr(time.time())
        meta = _meta_key(run_id)
        optional = (("job_id", job_id), ("attempt", attempt))
        extra: dict[FieldT, EncodableT] = {k: v for k, v in optional if v is not None}
        with self._translated():
            pipe = self._client.pipeline(transaction=True)
            pipe.hsetnx(meta, "status", "queued")
            pipe.hsetnx(meta, "command", command)
            pipe.hsetnx(meta, "created", now)
            pipe.hset(meta, mapping={"run_id": run_id, "updated": now, **extra})
            pipe.zadd(RUNS_KEY, {run_id: float(now)}, nx=True)
            if self.retention:
                pipe.expire(meta, self.retention)
            pipe.execute()

    # -- feed ------------------------------------------------------------------

    def feed_end(self) -> str:
        with self._translated():
            last = cast("list[tuple[bytes, dict[bytes, bytes]]]", self._client.xrevrange(FEED_KEY, count=1))
        return last[0][0].decode() if last else "0-0"

    def read_feed(self, cursor: str, *, limit: int = 1000, block: float | None = None) -> list[FeedItem]:
        import redis

        try:
            entries = self._xread(FEED_KEY, cursor, limit, block)
        except redis.ResponseError as exc:
            raise UsageError(
                f"bad feed cursor {cursor!r}: {exc}", fix="pass a cursor printed by this bus, or 0"
            ) from exc
        return [
            FeedItem(entry_id.decode(), f[b"r"].decode(), Record(int(f[b"s"]), f[b"t"].decode(), f[b"l"]))
            for entry_id, f in entries
        ]

    # -- jobs ------------------------------------------------------------------

    def _ensure_group(self) -> None:
        import redis

        if self._group_ready:
            return
        with self._translated():
            try:
                self._client.xgroup_create(JOBS_KEY, GROUP, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
        self._group_ready = True

    def enqueue(self, job: Job) -> None:
        self._ensure_group()
        now = repr(time.time())
        fields: dict[FieldT, EncodableT] = {
            "job_id": job.job_id,
            "run_id": job.run_id,
            "prompt": job.prompt,
            "args": msgspec.json.encode(job.args),
            "status": "queued",
            "attempt": 0,
            "created": now,
            "updated": now,
        }
        with self._translated():
            pipe = self._client.pipeline(transaction=True)
            pipe.hset(_job_key(job.job_id), mapping=fields)
            pipe.xadd(JOBS_KEY, {"job": job.job_id})
            pipe.execute()

    def claim(self, worker: str, *, idle_timeout: float, block: float = 0.0) -> Claim | None:
        self._ensure_group()
        with self._translated():
            reply = self._client.xautoclaim(JOBS_KEY, GROUP, worker, int(idle_timeout * 1000), "0-0", count=1)
            entries = [e for e in reply[1] if e and e[1]]
        if not entries:
            entries = self._read_stream(
                lambda client, block_ms: client.xreadgroup(
                    GROUP, worker, {JOBS_KEY: ">"}, count=1, block=block_ms
                ),
                block,
            )
        if not entries:
            return None
        entry_id, fields = entries[0]
        with self._translated():
            return self._take(worker, entry_id.decode(), fields[b"job"].decode())

    def _take(self, worker: str, entry_id: str, job_id: str) -> Claim | None:
        """Start a queued job's first attempt, or take a running one over (one script, ``_TAKE``)."""
        reply = self._take_job(
            keys=[JOBS_KEY, _job_key(job_id)], args=[GROUP, entry_id, worker, repr(time.time())]
        )
        queued = int(reply[0])
        if queued < 0:  # nothing left to run
            return None
        flat = cast("list[bytes]", reply[1])
        job = _job(dict(zip(flat[::2], flat[1::2], strict=True)))
        token = f"{worker}\n{entry_id}"
        return Claim.first(job, token) if queued else Claim.takeover(job, token)

    def heartbeat(self, claim: Claim) -> bool:
        return self._if_owned(claim, "beat")

    def retry_job(self, claim: Claim) -> Claim | None:
        return claim.next_attempt() if self._if_owned(claim, "retry") else None

    def finish_job(self, claim: Claim, status: str) -> bool:
        return self._if_owned(claim, "finish", status)

    def _if_owned(self, claim: Claim, action: str, status: str = "") -> bool:
        """Run ``action`` of the ``_OWNED`` script; False if the claim no longer owns the job."""
        worker, entry_id = claim.token.split("\n", 1)
        with self._translated():
            done = self._owned(
                keys=[JOBS_KEY, _job_key(claim.job.job_id)],
                args=[
                    GROUP,
                    worker,
                    entry_id,
                    claim.attempt,
                    action,
                    repr(time.time()),
                    self.retention,
                    status,
                ],
            )
        return bool(done)

    def get_job(self, job_id: str) -> Job | None:
        with self._translated():
            fields = cast("dict[bytes, bytes]", self._client.hgetall(_job_key(job_id)))
        return _job(fields) if fields else None


def _client(url: str, connect_timeout: float, reply_timeout: float) -> redis.Redis:
    """A client for ``url`` minus our own query parameters; a malformed URL is a usage error.

    Connecting, and then each reply, waits at most the given timeouts: a server that accepts connections but
    never answers (stopped, overloaded) costs that long, not redis-py's default. A dropped connection is retried
    once, at once (a restarted server closed a pooled one); a timeout is not, since the caller's deadline, not
    the client, decides whether there is time for another try.
    """
    redis = require("redis", "redis")
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry

    parts = urlsplit(url)
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k not in _OUR_QUERY])
    try:
        return redis.Redis.from_url(
            urlunsplit(parts._replace(query=query)),
            socket_connect_timeout=connect_timeout,
            socket_timeout=reply_timeout,
            retry=Retry(ExponentialBackoff(cap=0.2, base=0.05), 1, supported_errors=(redis.ConnectionError,)),
            health_check_interval=0,
        )
    except (ValueError, TypeError) as exc:
        raise UsageError(
            f"malformed Redis URL {redact_url(url)!r}: {exc}",
            fix="use redis://[[USER]:PASSWORD@]HOST:PORT[/DB] or rediss://… for TLS",
        ) from exc


def _job(fields: dict[bytes, bytes]) -> Job:
    text = {k.decode(): v.decode() for k, v in fields.items()}
    return Job(
        job_id=text["job_id"],
        run_id=text["run_id"],
        prompt=text["prompt"],
        args=msgspec.json.decode(text["args"]),
        status=text["status"],
        attempt=int(text.get("attempt", 0)),
        worker=text.get("worker"),
        created=float(text["created"]),
        updated=float(text["updated"]),
    )


def _run_key(run_id: str) -> str:
    return f"{PREFIX}run:{run_id}"


def _meta_key(run_id: str) -> str:
    return f"{PREFIX}runmeta:{run_id}"


def _job_key(job_id: str) -> str:
    return f"{PREFIX}job:{job_id}"


def _record(entry_id: bytes, fields: dict[bytes, bytes]) -> Record:
    return Record(int(entry_id.split(b"-", 1)[1]) - 1, fields[b"t"].decode(), fields[b"l"])


def _run_info(fields: dict[bytes, bytes]) -> RunInfo:
    text = {k.decode(): v.decode() for k, v in fields.items()}

    def number(name: str) -> int | None:
        return int(text[name]) if text.get(name, "") != "" else None

    return RunInfo(
        run_id=text.get("run_id", ""),
        status=text.get("status", "running"),
        command=text.get("command", ""),
        created=float(text.get("created", 0)),
        updated=float(text.get("updated", 0)),
        alive=float(text.get("alive", 0)),
        last_seq=int(text.get("last_seq", -1)),
        exit_code=number("exit_code"),
        subtype=text.get("subtype") or None,
        job_id=text.get("job_id"),
        attempt=number("attempt"),
    )
