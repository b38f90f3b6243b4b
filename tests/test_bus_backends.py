"""The Bus contract, checked against both backends (SQLite file, real redis-server)."""

from __future__ import annotations

import time

import pytest

from _bus_fixtures import RedisServer, bus_home, bus_url, events, free_port, redis_server  # noqa: F401
from agentstream import protocol as p
from agentstream.bus import (
    BusUnavailable,
    Job,
    ProducerConflict,
    Record,
    SeqConflict,
    open_bus,
    parse_duration,
)
from agentstream.bus.queue import close_run
from agentstream.errors import AgentstreamError, ErrorCode, UsageError


def test_append_is_idempotent_by_seq_and_reads_resume_from_any_seq(bus_url: str) -> None:
    with open_bus(bus_url) as bus:
        assert bus.append("r1", events("r1", 5)) == 5
        assert bus.append("r1", events("r1", 5)) == 0  # a retried batch stores nothing twice
        assert bus.append("r1", events("r1", 3, start=4)) == 2  # overlapping batch: only 5 and 6 are new
        assert [r.seq for r in bus.read("r1")] == list(range(7))
        assert [r.seq for r in bus.read("r1", 4)] == [4, 5, 6]
        assert [r.seq for r in bus.read("r1", 2, limit=2)] == [2, 3]
        stored = bus.read("r1", 3, limit=1)[0]
        assert stored == events("r1", 1, start=3)[0]._replace(line=stored.line)
        assert p.decode(stored.line).seq == 3


def test_status_follows_the_events_and_a_finished_run_refuses_more(bus_url: str) -> None:
    with open_bus(bus_url) as bus:
        bus.append("r1", events("r1", 2))
        info = bus.get_run("r1")
        assert info is not None and (info.status, info.command, info.last_seq) == ("running", "test", 1)
        bus.append("r1", events("r1", 2, start=2, final=True))
        info = bus.get_run("r1")
        assert info is not None and (info.status, info.exit_code, info.last_seq) == ("succeeded", 0, 3)
        assert bus.append("r1", events("r1", 1, start=4)) == 0
        assert [r.seq for r in bus.read("r1")] == [0, 1, 2, 3]
        assert bus.get_run("nope") is None


@pytest.mark.parametrize(
    ("result", "status"),
    [
        (p.Result(ok=False, subtype="error", exit_code=1), "failed"),
        (p.Result(ok=False, subtype="interrupted", exit_code=130), "interrupted"),
        (p.Result(ok=False, subtype="error", exit_code=143), "interrupted"),
    ],
)
def test_failed_and_interrupted_runs(bus_url: str, result: p.Result, status: str) -> None:
    result.session_id, result.seq = "r1", 1
    with open_bus(bus_url) as bus:
        bus.append("r1", [*events("r1", 1), Record(1, "result", p.encode(result))])
        info = bus.get_run("r1")
        assert info is not None and info.status == status and info.exit_code == result.exit_code


def test_a_second_producer_of_a_run_is_refused_and_the_run_stays_the_firsts(bus_url: str) -> None:
    mine, theirs = events("r1", 4, final=True), events("r1", 3)
    with open_bus(bus_url) as bus:
        bus.register_run("r1", command="exec")  # a job's run, registered before its producer starts
        assert bus.append_from("me", "r1", mine[:2]) == 2
        assert bus.append_from("me", "r1", mine[:2]) == 0  # my own batch again (a lost reply): no error
        with pytest.raises(ProducerConflict) as refused:
            bus.append_from("other", "r1", theirs)  # its seq 2 is new, and still refused
        assert refused.value.code == ErrorCode.SEQ_CONFLICT and refused.value.fix
        assert bus.append_from("me", "r1", mine) == 2
        assert bus.append_from("me", "r1", mine) == 0  # closed by my own result: a retry is no error
        with pytest.raises(ProducerConflict):
            bus.append_from("other", "r1", events("r1", 1, start=4))
        assert [r.line for r in bus.read("r1")] == [r.line for r in mine]
        info = bus.get_run("r1")
        assert info is not None and info.status == "succeeded" and info.last_seq == 3
        # an ending written for a lost producer names none, and is not refused
        bus.append_from("me", "r2", events("r2", 2))
        lost = AgentstreamError("gone", code=ErrorCode.PRODUCER_LOST)
        assert close_run(bus, "r2", lost, subtype="producer_lost", command="test")
        assert [r.type for r in bus.read("r2")][-2:] == ["error", "result"]


def test_conditional_append_detects_a_concurrent_producer(bus_url: str) -> None:
    with open_bus(bus_url) as bus:
        bus.append("r1", events("r1", 3))
        with pytest.raises(SeqConflict):
            bus.append("r1", events("r1", 1, start=3), if_next_seq=2)
        assert bus.append("r1", events("r1", 1, start=3), if_next_seq=3) == 1


def test_close_run_ends_a_run_without_result_exactly_once(bus_url: str) -> None:
    error = AgentstreamError("gone", code="WORKER_LOST")
    with open_bus(bus_url) as bus:
        bus.append("r1", events("r1", 3))
        assert close_run(bus, "r1", error, subtype="worker_lost", command="exec")
        assert not close_run(bus, "r1", error, subtype="worker_lost", command="exec")
        lines = [p.decode(r.line) for r in bus.read("r1")]
        assert [e.type for e in lines] == ["start", "log", "log", "error", "result"]
        assert [e.seq for e in lines] == [0, 1, 2, 3, 4]
        assert lines[-1].synthetic is True and lines[-1].subtype == "worker_lost"
        # A run with no events at all still gets a well-formed stream.
        assert close_run(bus, "empty", error, subtype="worker_lost", command="exec")
        assert [r.type for r in bus.read("empty")] == ["start", "error", "result"]
        assert bus.get_run("empty").status == "failed"  # type: ignore[union-attr]


def test_list_runs_newest_first_with_status_filter_and_registration(bus_url: str) -> None:
    with open_bus(bus_url) as bus:
        bus.append("old", events("old", 2, final=True))
        time.sleep(0.01)
        bus.append("mid", events("mid", 2))
        time.sleep(0.01)
        bus.register_run("new", command="exec", job_id="job_1", attempt=1)
        assert [r.run_id for r in bus.list_runs()] == ["new", "mid", "old"]
        assert [r.run_id for r in bus.list_runs(limit=2)] == ["new", "mid"]
        assert [r.run_id for r in bus.list_runs(statuses=["running", "succeeded"])] == ["mid", "old"]
        queued = bus.get_run("new")
        assert queued is not None and (queued.status, queued.job_id, queued.attempt) == ("queued", "job_1", 1)
        bus.append("new", events("new", 1))
        assert bus.get_run("new").status == "running"  # type: ignore[union-attr]


def test_feed_carries_every_run_in_order_from_a_cursor(bus_url: str) -> None:
    with open_bus(bus_url) as bus:
        bus.append("a", events("a", 2))
        cursor = bus.feed_end()
        bus.append("b", events("b", 2))
        bus.append("a", events("a", 1, start=2))
        bus.append("a", events("a", 1, start=2))  # duplicate: not in the feed either
        items = bus.read_feed(cursor)
        assert [(i.run_id, i.record.seq) for i in items] == [("b", 0), ("b", 1), ("a", 2)]
        assert bus.read_feed(items[-1].cursor) == []
        assert len(bus.read_feed("0")) == 5


def test_blocking_read_wakes_up_for_an_append_from_another_connection(bus_url: str) -> None:
    import threading

    with open_bus(bus_url) as reader, open_bus(bus_url) as writer:
        writer.append("r1", events("r1", 1))
        timer = threading.Timer(0.2, lambda: writer.append("r1", events("r1", 1, start=1)))
        timer.start()
        began = time.monotonic()
        got = reader.read("r1", 1, block=5.0)
        timer.join()
        assert [r.seq for r in got] == [1]
        assert time.monotonic() - began < 4.0  # woke on the append, not at the end of the block
        assert reader.read("r1", 2, block=0.05) == []


def test_jobs_are_claimed_once_taken_over_when_idle_and_fenced(bus_url: str) -> None:
    with open_bus(bus_url) as bus:
        bus.enqueue(Job(job_id="j1", run_id="run1", prompt="hi", args=["--model", "m"]))
        first = bus.claim("w1", idle_timeout=60)
        assert first is not None and (first.attempt, first.run_id, first.previous_run_id) == (1, "run1", None)
        assert first.job.args == ["--model", "m"]
        assert bus.claim("w2", idle_timeout=60) is None  # nothing else queued, nothing idle
        assert bus.heartbeat(first)
        time.sleep(0.3)
        second = bus.claim("w2", idle_timeout=0.2)
        # Taken over as it stands: the lost attempt to settle, nothing counted, nothing decided.
        assert second is not None
        assert (second.attempt, second.run_id, second.previous_run_id) == (1, None, "run1")
        job = bus.get_job("j1")
        assert job is not None and (job.status, job.attempt, job.worker) == ("running", 1, "w2")
        assert not bus.heartbeat(first)  # the old owner learns it lost the job
        assert not bus.finish_job(first, "succeeded")
        assert bus.retry_job(first) is None
        third = bus.retry_job(second)
        assert third is not None
        assert (third.attempt, third.run_id, third.previous_run_id) == (2, "run1.2", "run1")
        assert not bus.heartbeat(second) and bus.retry_job(second) is None  # that attempt is over
        assert bus.heartbeat(third)
        assert bus.finish_job(third, "succeeded")
        job = bus.get_job("j1")
        assert job is not None and (job.status, job.attempt) == ("succeeded", 2)
        assert not bus.finish_job(third, "failed")  # a finished job is no one's to change
        time.sleep(0.3)
        assert bus.claim("w3", idle_timeout=0.2) is None


def test_a_taken_over_job_is_finished_by_its_new_owner_without_counting_an_attempt(bus_url: str) -> None:
    with open_bus(bus_url) as bus:
        bus.enqueue(Job(job_id="j1", run_id="run1", prompt="hi"))
        assert bus.claim("w1", idle_timeout=0.1) is not None
        time.sleep(0.2)
        taken = bus.claim("w2", idle_timeout=0.1)
        assert taken is not None and taken.run_id is None and taken.previous_run_id == "run1"
        assert bus.finish_job(taken, "succeeded")
        job = bus.get_job("j1")
        assert job is not None and (job.status, job.attempt) == ("succeeded", 1)
        time.sleep(0.2)
        assert bus.claim("w3", idle_timeout=0.1) is None


def test_redis_claiming_a_job_whose_record_is_gone_counts_no_attempt_and_leaves_nothing(
    redis_server: RedisServer,
) -> None:
    """The queue entry of a job whose record was deleted is dropped, not taken: no attempt is counted
    on a record made up for it."""
    import redis

    client = redis.Redis(port=redis_server.port)
    with open_bus(redis_server.url) as bus:
        bus.enqueue(Job(job_id="j1", run_id="run1", prompt="hi"))
        client.delete("agentstream:job:j1")
        assert bus.claim("w1", idle_timeout=60) is None
        assert bus.claim("w2", idle_timeout=0) is None  # nothing left pending to reclaim
    assert client.exists("agentstream:job:j1") == 0
    client.close()


def test_claim_blocks_until_a_job_arrives(bus_url: str) -> None:
    import threading

    with open_bus(bus_url) as worker, open_bus(bus_url) as client:
        worker.claim("w1", idle_timeout=60)  # creates the group on Redis
        timer = threading.Timer(0.2, lambda: client.enqueue(Job(job_id="j1", run_id="run1", prompt="x")))
        timer.start()
        claim = worker.claim("w1", idle_timeout=60, block=4.0)
        timer.join()
        assert claim is not None and claim.job.job_id == "j1"


def test_bad_urls_are_usage_errors_with_a_fix(bus_home: object) -> None:
    for url in (
        "http://example.com",
        "redis://127.0.0.1:notaport",
        "sqlite://host/path",
        "redis://h:1/?maxlen=x",
    ):
        with pytest.raises(UsageError) as caught:
            open_bus(url).get_run("x")
        assert caught.value.code == ErrorCode.INVALID_INPUT and caught.value.fix


def test_an_unreachable_redis_is_bus_unavailable(bus_home: object) -> None:
    bus = open_bus(f"redis://127.0.0.1:{free_port()}")
    with pytest.raises(BusUnavailable) as caught:
        bus.list_runs()
    assert caught.value.code == ErrorCode.BUS_UNAVAILABLE and "redis-server" in (caught.value.fix or "")


def test_default_bus_is_sqlite_in_the_state_directory(bus_home: object) -> None:
    with open_bus() as bus:
        bus.append("r", events("r", 1))
    assert (bus_home / "bus.sqlite3").exists()  # type: ignore[operator]


def test_durations() -> None:
    assert parse_duration("90") == 90 and parse_duration("15m") == 900 and parse_duration("7d") == 7 * 86400
    assert parse_duration("none") == 0
    for bad in ("soon", "nan", "inf", "-inf", "1e400", "-5"):
        with pytest.raises(UsageError):
            parse_duration(bad)


@pytest.mark.parametrize("query", ["maxlen=²", "maxlen=٣", "maxlen=0", "retention=nan", "retention=inf"])
def test_bad_bus_url_options_are_usage_errors_before_anything_is_opened(query: str) -> None:
    with pytest.raises(UsageError):
        open_bus(f"redis://127.0.0.1:1/0?{query}")


def test_sqlite_retention_deletes_old_runs(tmp_path: object, bus_home: object) -> None:
    from agentstream.bus.sqlite import SqliteBus

    url = f"sqlite:///{tmp_path}/bus.sqlite3"  # type: ignore[str-format]
    with SqliteBus(url, retention=0.2) as bus:
        bus.append("old", events("old", 2, final=True))
        time.sleep(0.3)
        bus.append("new", events("new", 2, final=True))  # a finished run triggers the prune
        assert bus.get_run("old") is None and bus.read("old") == []
        assert bus.get_run("new") is not None


def test_redis_retention_expires_runs_and_cleans_the_index(redis_server: RedisServer) -> None:
    with open_bus(redis_server.url + "?retention=1") as bus:
        bus.append("old", events("old", 2, final=True))
        assert [r.run_id for r in bus.list_runs()] == ["old"]
        time.sleep(1.2)
        assert bus.get_run("old") is None and bus.read("old") == []
        assert bus.list_runs() == []


def test_a_finished_job_is_kept_as_long_as_a_run_and_a_waiting_one_until_it_runs(bus_url: str) -> None:
    """Retention applies to a job once it has finished, as to a run once it has ended; a queued job is work
    still to do, kept however long it waits."""
    with open_bus(bus_url + "?retention=1") as bus:
        bus.enqueue(Job(job_id="done", run_id="r-done", prompt="x"))
        claim = bus.claim("w1", idle_timeout=60)
        assert claim is not None and bus.finish_job(claim, "succeeded")
        bus.enqueue(Job(job_id="waiting", run_id="r-waiting", prompt="x"))
        time.sleep(1.3)
        bus.append("r-new", events("r-new", 2, final=True))  # a run ends: its writer applies the retention
        assert bus.get_job("done") is None
        assert bus.get_job("waiting") is not None


def test_redis_sweeps_what_expiry_leaves_behind(redis_server: RedisServer) -> None:
    """A long-lived Redis does not grow with every run and job: a finished job's queue entry is deleted, and the
    writer that ends a run sweeps the index entries of expired runs (which a `runs` that lists only the newest
    never meets) and the consumers of workers gone for the retention that hold no job."""
    import redis

    from agentstream.bus.redis_backend import GROUP, JOBS_KEY, RUNS_KEY

    client = redis.Redis(port=redis_server.port)
    with open_bus(redis_server.url + "?retention=1") as bus:
        for run_id in ("a", "b", "c"):
            bus.append(run_id, events(run_id, 2, final=True))
        bus.enqueue(Job(job_id="j1", run_id="r1", prompt="x"))
        bus.enqueue(Job(job_id="j2", run_id="r2", prompt="x"))
        finished = bus.claim("gone-worker", idle_timeout=60)
        assert finished is not None and bus.finish_job(finished, "succeeded")
        held = bus.claim("busy-worker", idle_timeout=60)
        assert held is not None and held.job.job_id == "j2"
        assert client.xlen(JOBS_KEY) == 1  # only the job still held
        time.sleep(1.3)
        bus.append("d", events("d", 2, final=True))
        assert client.zrange(RUNS_KEY, 0, -1) == [b"d"]
        assert [c["name"] for c in client.xinfo_consumers(JOBS_KEY, GROUP)] == [b"busy-worker"]
        assert bus.heartbeat(held)  # the job it holds is untouched
    client.close()


def test_a_very_long_line_is_stored_whole_in_order_and_once(
    bus_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines over BOUND_LINE_BYTES take each backend's no-copy way in (SQLite: written into their row in
    place; Redis: an argument of their own); nothing else about them changes."""
    from agentstream.bus import BOUND_LINE_BYTES, redis_backend, sqlite

    long_text = "a tool's output \\ \" é\n" * 60_000  # over a mebibyte once encoded, escapes and all
    message = p.Message(message_id="m", role="assistant", content=long_text)
    message.session_id, message.seq, message.ts = "r", 2, p.now_ts()
    records = [*events("r", 2), Record(2, "message", p.encode(message)), *events("r", 3, start=3, final=True)]
    assert len(records[2].line) > BOUND_LINE_BYTES
    with open_bus(bus_url) as bus:
        assert bus.append("r", records[:4]) == 4
        assert bus.append("r", records) == 2  # a retried batch: the long line is not stored twice
        assert bus.read("r") == records
        assert p.decode(bus.read("r", 2, limit=1)[0].line).content == long_text  # type: ignore[union-attr]
        assert [item.record.seq for item in bus.read_feed("0")] == list(range(6))
    with monkeypatch.context() as every_line_long:  # short and long lines interleaved in one batch
        for backend in (sqlite, redis_backend):
            every_line_long.setattr(backend, "BOUND_LINE_BYTES", 112)
        with open_bus(bus_url) as bus:
            mixed = events("s", 6, final=True)
            assert [len(r.line) > 112 for r in mixed] == [True, False, False, False, False, True]
            assert bus.append("s", mixed) == 6
            assert bus.read("s") == mixed
            assert [item.record.seq for item in bus.read_feed("0") if item.run_id == "s"] == list(range(6))
