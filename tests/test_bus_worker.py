"""``submit`` and ``worker`` in real processes: the real ``exec``, lost workers, signals, crashes."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec
import pytest

from _agent_tools_support import gone_soon, process_alive, wait_for_file
from _bus_fixtures import (  # noqa: F401
    CASSETTE,
    PRODUCER,
    RedisServer,
    bus_home,
    bus_url,
    cli,
    events,
    lines_of,
    redis_server,
    spawn_cli,
)
from agentstream import protocol as p
from agentstream._signals import Interrupted
from agentstream.bus import Bus, BusUnusable, Claim, Job, Record, open_bus
from agentstream.bus import queue as job_queue
from agentstream.bus.queue import EXEC_ENV, Worker, WorkerOptions, new_job
from agentstream.bus.sqlite import SqliteBus
from agentstream.stream import Stream
from agentstream.validate import validate_stream


@pytest.fixture
def producer_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs run the test producer instead of ``agentstream exec`` (the prompt is its plan)."""
    monkeypatch.setenv(EXEC_ENV, f"{sys.executable} {PRODUCER}")


def submit(url: str, prompt: str, *extra: str) -> dict:  # type: ignore[type-arg]
    done = cli("submit", prompt, *extra, "--bus", url)
    assert done.returncode == 0, done.stdout + done.stderr
    envelope = msgspec.json.decode(done.stdout)
    assert envelope["ok"] is True and envelope["result"]["status"] == "queued"
    return envelope["result"]


def wait_for(path: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def run_events(url: str, run_id: str) -> list[p.BaseEvent]:
    with open_bus(url) as bus:
        return [p.decode(r.line) for r in bus.read(run_id, limit=10_000)]  # type: ignore[misc]


def assert_well_formed(evs: list[p.BaseEvent]) -> None:
    assert [e.seq for e in evs] == list(range(len(evs)))
    assert evs[0].type == "start" and evs[-1].type == "result"
    assert [e.type for e in evs].count("result") == 1


def test_submitted_prompts_run_through_the_real_exec(bus_url: str, tmp_path: Path) -> None:
    cassette = tmp_path / "hello.cassette"
    cassette.write_text(CASSETTE)
    follower = spawn_cli("submit", "say hello", "--cassette", str(cassette), "--follow", "--bus", bus_url)
    worker = cli("worker", "--bus", bus_url, "--max-jobs", "1", "--idle-timeout", "5", timeout=60)
    followed, err = follower.communicate(timeout=60)
    assert worker.returncode == 0, worker.stderr
    assert follower.returncode == 0, err
    objs = lines_of(followed)
    assert objs[0]["type"] == "start" and objs[0]["command"] == "exec"
    assert objs[-1]["type"] == "result" and objs[-1]["ok"] and objs[-1]["result"] == "Hello from the queue."
    assert [o["seq"] for o in objs] == list(range(len(objs)))
    run_id = objs[0]["session_id"]
    with open_bus(bus_url) as bus:
        info = bus.get_run(run_id)
        assert info is not None and info.status == "succeeded" and info.attempt == 1
        job = bus.get_job(info.job_id)  # type: ignore[arg-type]
    assert job is not None and job.status == "succeeded"
    worker_events = lines_of(worker.stdout)
    assert [o["name"] for o in worker_events if o["type"] == "event"] == ["job.started", "job.succeeded"]


def test_a_job_a_worker_finished_on_redis_expires_with_the_retention_of_its_run(
    redis_server: RedisServer, producer_jobs: None
) -> None:
    """The job's record is set to expire as its run does, and its queue entry is gone: nothing of a finished job
    stays on the server for good."""
    import redis

    from agentstream.bus.redis_backend import JOBS_KEY

    url = redis_server.url + "?retention=1h"
    job = submit(url, "events=2")
    worker = cli("worker", "--bus", url, "--max-jobs", "1", "--idle-timeout", "5", timeout=60)
    assert worker.returncode == 0, worker.stderr
    client = redis.Redis(port=redis_server.port)
    try:
        assert client.hget(f"agentstream:job:{job['job_id']}", "status") == b"succeeded"
        assert 3590 < client.ttl(f"agentstream:job:{job['job_id']}") <= 3600
        assert 3590 < client.ttl(f"agentstream:runmeta:{job['run_id']}") <= 3600
        assert client.xlen(JOBS_KEY) == 0
    finally:
        client.close()


@pytest.mark.parametrize("bus_url", ["sqlite"], indirect=True)
def test_a_worker_without_a_model_provider_fails_its_jobs(
    bus_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No key, no Ollama: the real exec ends NO_PROVIDER, so the job fails; nothing pretends to answer."""
    from _agent_fakes import closed_port

    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{closed_port()}")
    job = submit(bus_url, "What is in this directory?")
    worker = cli("worker", "--bus", bus_url, "--max-jobs", "1", "--idle-timeout", "5", timeout=60)
    assert worker.returncode == 0, worker.stderr
    with open_bus(bus_url) as bus:
        stored = bus.get_job(job["job_id"])
        assert stored is not None and stored.status == "failed"
        info = bus.get_run(job["run_id"])
        assert info is not None and info.status == "failed"
    evs = run_events(bus_url, job["run_id"])
    assert_well_formed(evs)
    result = evs[-1]
    assert (result.ok, result.exit_code, result.error.code) == (False, 2, "NO_PROVIDER")  # type: ignore[attr-defined]
    names = [o["name"] for o in lines_of(worker.stdout) if o["type"] == "event"]
    assert names == ["job.started", "job.failed"]


def _start_worker(url: str, *extra: str, own_group: bool = False) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "agentstream", "worker", "--bus", url, "--idle-timeout", "1", *extra]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0, start_new_session=own_group
    )


def _job_pid(worker: subprocess.Popen[bytes]) -> int:
    """Read the worker's stream until its job has started; the child's pid."""
    while True:
        line = worker.stdout.readline()
        assert line, "the worker ended before starting the job"
        obj = msgspec.json.decode(line)
        if obj.get("name") == "job.started":
            return int(obj["data"]["pid"])


def _kill_machine(worker: subprocess.Popen[bytes], job_pid: int) -> None:
    """SIGKILL a worker and its job's process group together, as when their machine dies: nobody ends the run.

    The worker is frozen first, so it cannot see its child die and close the run itself.
    """
    os.killpg(worker.pid, signal.SIGSTOP)
    os.killpg(job_pid, signal.SIGKILL)
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(timeout=10)


@pytest.mark.parametrize("victim", ["worker", "machine"])
def test_a_job_whose_worker_is_killed_is_reclaimed_and_retried(
    bus_url: str, tmp_path: Path, producer_jobs: None, victim: str
) -> None:
    started = tmp_path / "started"
    # Long enough (2 s) that the kill lands mid-run on a busy machine, not as the run ends by itself.
    job = submit(bus_url, f"events=10 interval=0.2 touch={started}")
    first = _start_worker(bus_url, own_group=True)
    pid = _job_pid(first)
    wait_for(started)
    if victim == "worker":
        first.send_signal(signal.SIGKILL)  # only the worker: its child must not outlive it
        first.wait(timeout=10)
    else:
        _kill_machine(first, pid)
    assert gone_soon(pid, 10), "the job's child outlived its worker"

    second = cli("worker", "--bus", bus_url, "--idle-timeout", "1", "--max-jobs", "1", timeout=60)
    assert second.returncode == 0, second.stderr
    names = [o["name"] for o in lines_of(second.stdout) if o["type"] == "event"]
    assert names == ["job.reclaimed", "job.started", "job.succeeded"]

    lost = run_events(bus_url, job["run_id"])
    assert_well_formed(lost)
    end = lost[-1]
    assert isinstance(end, p.Result) and not end.ok
    if victim == "worker":  # the child heard SIGTERM from the kernel and ended its own run
        assert (end.subtype, end.exit_code) == ("interrupted", 143)
    else:  # nobody was left to end the run: the reclaiming worker did, pointing at the retry
        assert end.synthetic is True and end.subtype == "worker_lost" and end.error.code == "WORKER_LOST"
        assert lost[-2].details["retry_run_id"] == job["run_id"] + ".2"  # type: ignore[attr-defined]

    retry = run_events(bus_url, job["run_id"] + ".2")
    assert_well_formed(retry)
    assert retry[-1].ok is True and len(retry) == 12  # type: ignore[attr-defined]
    with open_bus(bus_url) as bus:
        final = bus.get_job(job["job_id"])
        assert bus.get_run(job["run_id"] + ".2").attempt == 2  # type: ignore[union-attr]
    assert final is not None and (final.status, final.attempt) == ("succeeded", 2)

    followed = cli("follow", job["run_id"], "--bus", bus_url)  # the lost run now points at its retry
    last = p.decode(followed.stdout.splitlines()[-1])
    assert any(a.params["run_id"]["value"] == job["run_id"] + ".2" for a in last.next_actions if a.params)  # type: ignore[union-attr]


def test_a_run_lost_mid_tool_call_gets_a_whole_ending_in_the_bus_and_in_follow(
    bus_home: Path, tmp_path: Path, producer_jobs: None
) -> None:
    """The machine dies while a tool call and a delta run are open: WORKER_LOST closes both, then ends."""
    from agentstream.validate import Validator

    url = f"sqlite:///{tmp_path / 'bus.sqlite3'}"
    started = tmp_path / "started"
    job = submit(url, f"tool events=200 interval=0.05 touch={started}")
    first = _start_worker(url, own_group=True)
    pid = _job_pid(first)
    wait_for(started)
    deadline = time.monotonic() + 20
    while "tool_call" not in [e.type for e in run_events(url, job["run_id"])]:  # published: now it is open
        assert time.monotonic() < deadline, "the tool call never reached the bus"
        time.sleep(0.05)
    _kill_machine(first, pid)
    second = cli(
        "worker", "--bus", url, "--idle-timeout", "1", "--max-attempts", "1", "--max-jobs", "1", timeout=60
    )
    assert second.returncode == 0, second.stderr
    lost = run_events(url, job["run_id"])
    assert_well_formed(lost)
    validator = Validator()
    for number, event in enumerate(lost, start=1):
        validator.feed(event, number)
    assert validator.close() == []
    closing = [e for e in lost if e.synthetic is True]
    assert [e.type for e in closing] == ["tool_result", "message", "error", "result"]
    assert closing[0].status == "cancelled" and closing[1].content == "working on it"  # type: ignore[attr-defined]
    assert closing[2].code == "WORKER_LOST"  # type: ignore[attr-defined]
    followed = cli("follow", job["run_id"], "--bus", url)
    assert [v.rule for v in validate_stream(io.BytesIO(followed.stdout))] == []


def test_a_job_out_of_attempts_fails_with_a_terminal_event(
    bus_home: Path, tmp_path: Path, producer_jobs: None
) -> None:
    url = f"sqlite:///{tmp_path / 'bus.sqlite3'}"
    started = tmp_path / "started"
    job = submit(url, f"events=50 interval=0.05 touch={started}")
    first = _start_worker(url, own_group=True)
    _kill_machine(first, _job_pid(first))
    second = cli(
        "worker", "--bus", url, "--idle-timeout", "1", "--max-attempts", "1", "--max-jobs", "1", timeout=60
    )
    assert second.returncode == 0, second.stderr
    names = [o["name"] for o in lines_of(second.stdout) if o["type"] == "event"]
    assert names == ["job.reclaimed", "job.failed"]
    lost = run_events(url, job["run_id"])
    assert_well_formed(lost)
    assert lost[-1].subtype == "worker_lost" and "not retried" in lost[-1].error.message  # type: ignore[attr-defined]
    with open_bus(url) as bus:
        assert bus.get_job(job["job_id"]).status == "failed"  # type: ignore[union-attr]
        assert bus.get_run(job["run_id"] + ".2") is None
    followed = lines_of(cli("follow", job["run_id"], "--bus", url).stdout)
    runs = [
        action["params"]["run_id"]["value"]
        for action in followed[-1]["next_actions"]
        if "run_id" in action["params"]
    ]
    assert runs == [job["run_id"]], runs  # its replay, and no next attempt: that attempt never ran


def test_sigterm_stops_the_worker_cleanly_and_leaves_the_job_for_another(
    bus_home: Path, tmp_path: Path, producer_jobs: None
) -> None:
    url = f"sqlite:///{tmp_path / 'bus.sqlite3'}"
    running = tmp_path / "running"
    job = submit(url, f"events=200 interval=0.05 touch={running}")
    worker = _start_worker(url, "--grace", "0.3")
    _job_pid(worker)
    wait_for(running)  # the job's run has started (a signal before that is the job's own start-up)
    worker.send_signal(signal.SIGTERM)
    rest, err = worker.communicate(timeout=30)
    assert worker.returncode == 143, err
    objs = lines_of(rest)
    assert (
        objs[-1]["type"] == "result" and objs[-1]["subtype"] == "interrupted" and objs[-1]["exit_code"] == 143
    )
    assert "job.cancelled" in [o.get("name") for o in objs]
    evs = run_events(url, job["run_id"])
    assert_well_formed(evs)
    assert evs[-1].subtype == "interrupted"  # type: ignore[attr-defined]
    with open_bus(url) as bus:
        assert bus.get_job(job["job_id"]).status == "running"  # type: ignore[union-attr]  # reclaimable


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_stopped_worker_leaves_no_grandchild_of_its_job_running(
    bus_home: Path, tmp_path: Path, signum: int
) -> None:
    """Killed outright, or cancelling its job: the job's whole process group goes, not just its child."""
    url = f"sqlite:///{tmp_path / 'bus.sqlite3'}"
    pid_file = tmp_path / "grandchild.pid"
    job = tmp_path / "job.sh"
    job.write_text(f"#!/bin/sh\nsleep 60 &\necho $! > {pid_file}.new && mv {pid_file}.new {pid_file}\nwait\n")
    job.chmod(0o755)
    submit(url, "anything")
    worker = _start_worker(url, "--grace", "0", "--exec-command", str(job))
    _job_pid(worker)
    grandchild = int(wait_for_file(pid_file))
    try:
        worker.send_signal(signum)
        worker.wait(timeout=30)
        assert gone_soon(grandchild), (
            f"the job's grandchild outlived its worker ({signal.Signals(signum).name})"
        )
    finally:
        if process_alive(grandchild):  # do not leave it behind when the test fails
            os.kill(grandchild, signal.SIGKILL)


def test_a_child_that_dies_without_a_result_gets_a_synthetic_ending(bus_home: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bus.sqlite3'}"
    job = submit(url, "anything")
    crash = f"{sys.executable} -c 'import sys; sys.exit(3)'"
    worker = cli("worker", "--bus", url, "--max-jobs", "1", "--exec-command", crash, timeout=60)
    assert worker.returncode == 0, worker.stderr
    evs = run_events(url, job["run_id"])
    assert [e.type for e in evs] == ["start", "error", "result"]
    assert evs[1].code == "PROCESS_CRASHED" and "status 3" in evs[1].message  # type: ignore[attr-defined]
    assert all(e.synthetic is True for e in evs)
    with open_bus(url) as bus:
        assert bus.get_job(job["job_id"]).status == "failed"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["submit", "hi", "--no-such-option"], "unrecognized arguments"),
        (["submit", "hi", "--session-id", "x"], "--session-id"),
        (["submit", "hi", "--bus", "ftp://x"], "unsupported bus URL"),
        (["submit", " "], "the prompt is empty"),
        (["submit", "-"], "stdin, which a job does not have"),
    ],
)
def test_submit_rejects_bad_input_with_an_error_envelope(
    bus_home: Path, argv: list[str], needle: str
) -> None:
    done = cli(*argv)
    envelope = msgspec.json.decode(done.stdout)
    assert done.returncode == 2 and envelope["ok"] is False
    assert envelope["error"]["code"] == "INVALID_INPUT" and needle in envelope["error"]["message"]
    assert envelope["fix"] and envelope["result"] is None


def test_a_job_that_ends_leaves_nothing_of_it_running(bus_home: Path, tmp_path: Path) -> None:
    """A job whose child exits while something it started still runs: the rest of its group goes with it."""
    url = f"sqlite:///{tmp_path / 'bus.sqlite3'}"
    pid_file = tmp_path / "background.pid"
    job = tmp_path / "job.sh"
    job.write_text(
        f"#!/bin/sh\nsleep 60 &\necho $! > {pid_file}.new && mv {pid_file}.new {pid_file}\nexit 0\n"
    )
    job.chmod(0o755)
    submit(url, "anything")
    worker = cli(
        "worker", "--bus", url, "--max-jobs", "1", "--grace", "0.2", "--exec-command", str(job), timeout=60
    )
    background = int(wait_for_file(pid_file))
    try:
        assert worker.returncode == 0, worker.stderr
        assert gone_soon(background), "a process the job left running outlived the job"
    finally:
        if process_alive(background):
            os.kill(background, signal.SIGKILL)


@pytest.mark.parametrize("bus_url", ["sqlite"], indirect=True)
def test_a_job_counts_its_bus_as_reached_with_the_connect_timeout_of_any_client(
    bus_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker reached the bus, and says so to its job (whose publisher then waits out an outage from its
    first batch on: test_bus_redis_restart). The job's connect timeout stays the usual one: it also bounds each
    Redis reply, so the retry window there would let one stalled command hold the job that long."""
    seen = tmp_path / "environment.txt"
    script = f'echo "$AGENTSTREAM_BUS_CONNECT_TIMEOUT,$AGENTSTREAM_BUS_REACHED" > {seen}'
    monkeypatch.setenv(EXEC_ENV, f"sh -c '{script}' job")
    monkeypatch.setenv("AGENTSTREAM_BUS_RETRY", "45")
    monkeypatch.setenv("AGENTSTREAM_BUS_CONNECT_TIMEOUT", "3")
    submit(bus_url, "anything")
    worker = cli("worker", "--bus", bus_url, "--max-jobs", "1", "--idle-timeout", "5", timeout=60)
    assert seen.exists(), worker.stderr
    assert seen.read_text().strip() == "3,1"


def test_a_secret_in_a_prompt_never_reaches_the_bus_nor_a_bus_password_the_childs_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's prompt is stored redacted, as events are; the child finds its bus in its environment."""
    url = f"sqlite:///{tmp_path / 'bus.sqlite3'}"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-live-0123456789abcdef")
    job = submit(url, "deploy with sk-live-0123456789abcdef please")
    assert b"sk-live-0123456789abcdef" not in (tmp_path / "bus.sqlite3").read_bytes()
    with open_bus(url) as bus:
        assert "sk-live" not in bus.get_job(job["job_id"]).prompt  # type: ignore[union-attr]
    seen = tmp_path / "child.txt"
    command = tmp_path / "child.sh"
    command.write_text(f'#!/bin/sh\nprintf "%s\\n%s\\n" "$*" "$AGENTSTREAM_BUS" > {seen}\n')
    command.chmod(0o755)
    monkeypatch.setenv(EXEC_ENV, str(command))
    worker = cli("worker", "--bus", url, "--max-jobs", "1", "--idle-timeout", "5", timeout=60)
    assert worker.returncode == 0, worker.stderr
    argv, environment = seen.read_text().splitlines()
    assert url not in argv and "--bus" not in argv.split() and environment == url


def test_a_heartbeat_that_finds_the_bus_unusable_gives_the_job_up_with_that_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bus that no retry mends is no outage to wait out: the job's child is stopped at once and the worker's
    stream says why, with the fix, instead of a recoverable error while the job runs on unwatched."""
    url = f"sqlite:///{tmp_path / 'bus.sqlite3'}"
    with open_bus(url) as bus:
        bus.enqueue(new_job("anything", []))
    unusable = BusUnusable(f"{tmp_path / 'bus.sqlite3'} is not an SQLite bus", fix="move this file aside")

    class UnusableOnHeartbeat(SqliteBus):
        def heartbeat(self, claim: Claim) -> bool:
            raise unusable

    monkeypatch.setattr(job_queue, "open_bus", UnusableOnHeartbeat)
    options = WorkerOptions(url, idle_timeout=0.4, max_jobs=1, command=["sh", "-c", "sleep 20", "job"])
    out = io.BytesIO()
    started = time.monotonic()
    with Stream("worker", out=out) as stream:
        Worker(options, stream).serve()
    assert time.monotonic() - started < 10  # not the child's 20 s: it was stopped (SIGTERM) at once
    errors = [e for e in lines_of(out.getvalue()) if e["type"] == "error"]
    assert len(errors) == 1, errors
    assert errors[0]["code"] == "BUS_UNAVAILABLE" and "is not an SQLite bus" in errors[0]["message"]
    assert errors[0]["fix"] == "move this file aside" and "retry_in_ms" not in errors[0]


def test_a_signal_as_the_worker_claims_a_job_still_starts_that_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim counts the attempt: a signal that stopped the worker between the claim and the job's start
    would leave the job claimed, never run, until another worker reclaimed it as lost (its attempt used up)."""
    url = f"sqlite:///{tmp_path / 'bus.sqlite3'}"
    job = new_job("anything", [])
    with open_bus(url) as bus:
        bus.enqueue(job)
    ran = tmp_path / "ran"

    class SignalledAsItClaims(SqliteBus):
        def claim(self, worker: str, *, idle_timeout: float, block: float = 0.0) -> Claim | None:
            claim = super().claim(worker, idle_timeout=idle_timeout, block=block)
            if claim is not None:
                signal.raise_signal(signal.SIGTERM)  # the worker is told to stop as it takes the job
            return claim

    def interrupted(signum: int, frame: object) -> None:
        raise Interrupted(signum)  # what the command line's handler does

    monkeypatch.setattr(job_queue, "open_bus", SignalledAsItClaims)
    options = WorkerOptions(url, idle_timeout=5, command=["sh", "-c", f"touch {ran}", "job"])
    previous = signal.signal(signal.SIGTERM, interrupted)
    try:
        with Stream("worker", out=io.BytesIO()) as stream:
            worker = Worker(options, stream)
            with pytest.raises(Interrupted):
                worker.serve()
            assert worker.wait_all(20)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert worker.started == 1 and ran.exists()
    with open_bus(url) as bus:
        stored = bus.get_job(job.job_id)
    assert stored is not None and stored.status != "running" and stored.attempt == 1


def _frozen(pid: int) -> bool:
    """Whether ``pid`` is stopped (SIGSTOP): state ``T`` in /proc."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def _wait_frozen(pid: int) -> None:
    deadline = time.monotonic() + 20
    while not _frozen(pid):
        assert time.monotonic() < deadline, "the worker was never stopped"
        time.sleep(0.02)


def _thaw(worker: subprocess.Popen[bytes]) -> bytes:
    """Let a stopped worker go on to its end; its stdout."""
    os.kill(worker.pid, signal.SIGCONT)
    out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    return out


def _offered_runs(url: str, run_id: str) -> list[str]:
    """The runs the ``result`` of ``follow RUN`` points at."""
    followed = lines_of(cli("follow", run_id, "--bus", url).stdout)
    return [a["params"]["run_id"]["value"] for a in followed[-1]["next_actions"] if "run_id" in a["params"]]


@pytest.mark.parametrize(
    ("plan", "max_attempts", "status"),
    [("events=2", "1", "succeeded"), ("events=2", "2", "succeeded"), ("events=2 fail", "2", "failed")],
    ids=["succeeded-last-attempt", "succeeded-attempts-left", "failed-attempts-left"],
)
def test_a_job_whose_worker_froze_before_acknowledging_its_run_takes_that_runs_outcome(
    bus_url: str, tmp_path: Path, plan: str, max_attempts: str, status: str
) -> None:
    """The run ended on its own, then its worker froze (SIGSTOP) before it could say so, and another worker took
    the job over. The job is what the run says: not failed for want of attempts, its answer not run again, no
    attempt counted that never ran; and the frozen worker's acknowledgement, once it thaws, changes nothing."""
    script = (
        tmp_path / "job.sh"
    )  # the run, then (first attempt only) its worker frozen before it sees the exit
    script.write_text(
        f'#!/bin/sh\n{sys.executable} {PRODUCER} "$@"\nstatus=$?\n'
        'case "$3" in *.*) ;; *) kill -STOP "$PPID" ;; esac\nexit $status\n'
    )
    script.chmod(0o755)
    job = submit(bus_url, plan)
    first = _start_worker(
        bus_url, "--max-attempts", max_attempts, "--max-jobs", "1", "--exec-command", str(script)
    )
    try:
        _job_pid(first)
        _wait_frozen(first.pid)
        with open_bus(bus_url) as bus:
            assert bus.get_run(job["run_id"]).status == status  # type: ignore[union-attr]
        second = cli(
            "worker", "--bus", bus_url, "--idle-timeout", "1", "--max-attempts", max_attempts,
            "--max-jobs", "1", "--exec-command", str(script), timeout=60,
        )  # fmt: skip
        assert second.returncode == 0, second.stderr
        assert [o["name"] for o in lines_of(second.stdout) if o["type"] == "event"] == [
            "job.reclaimed",
            f"job.{status}",
        ]
        late = _thaw(first)
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGCONT)
            first.kill()
    assert [o["name"] for o in lines_of(late) if o["type"] == "event"] == []  # its claim was gone: no say
    with open_bus(bus_url) as bus:
        final = bus.get_job(job["job_id"])
        assert final is not None and (final.status, final.attempt) == (status, 1)
        assert bus.get_run(job["run_id"] + ".2") is None
    assert_well_formed(run_events(bus_url, job["run_id"]))
    assert _offered_runs(bus_url, job["run_id"]) == [job["run_id"]]  # its replay; no next attempt to follow


def test_a_job_cancelled_while_its_worker_is_frozen_is_not_run_again(
    bus_url: str, tmp_path: Path, producer_jobs: None
) -> None:
    """The run was cancelled, its worker frozen before it could see that: the worker taking the job over ends it
    as cancelled, where a retry would run what its user stopped."""
    started = tmp_path / "started"
    job = submit(bus_url, f"events=100 interval=0.05 touch={started}")
    first = _start_worker(bus_url, "--max-jobs", "1")
    try:
        child = _job_pid(first)
        wait_for(started)
        os.kill(first.pid, signal.SIGSTOP)
        with open_bus(bus_url) as bus:
            assert job_queue.cancel_run(bus, job["run_id"], by="a test")
        second = cli("worker", "--bus", bus_url, "--idle-timeout", "1", "--max-jobs", "1", timeout=60)
        assert second.returncode == 0, second.stderr
        names = [o["name"] for o in lines_of(second.stdout) if o["type"] == "event"]
        assert names == ["job.reclaimed", "job.cancelled"]
        _thaw(first)
        assert gone_soon(child, 10)
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGCONT)
            first.kill()
    with open_bus(bus_url) as bus:
        final = bus.get_job(job["job_id"])
        assert final is not None and (final.status, final.attempt) == ("failed", 1)
        assert bus.get_run(job["run_id"] + ".2") is None
    evs = run_events(bus_url, job["run_id"])
    assert_well_formed(evs)
    assert evs[-1].subtype == "cancelled"  # type: ignore[attr-defined]


def _lost_attempt(url: str) -> tuple[Job, str]:
    """A job whose first attempt is mid-run (start and one event stored) under a worker that stopped heartbeating."""
    job = new_job("anything", [])
    with open_bus(url) as bus:
        bus.enqueue(job)
        claim = bus.claim("frozen-worker", idle_timeout=60)
        assert claim is not None and claim.run_id == job.run_id
        bus.register_run(job.run_id, command="exec", job_id=job.job_id, attempt=1)
        bus.append(job.run_id, events(job.run_id, 2))
    return job, job.run_id


def _racing_bus(run_id: str, child_writes: Callable[[Bus], None]) -> Callable[[str | None], Bus]:
    """``open_bus`` for the worker, whose every conditional append to ``run_id`` (the takeover ending it) finds
    the lost attempt's child has just written first (``child_writes``)."""

    def racing(url: str | None) -> Bus:
        bus = open_bus(url)
        append = bus.append

        def append_after_the_child(
            target: str, records: Sequence[Record], *, if_next_seq: int | None = None
        ) -> int:
            if target == run_id and if_next_seq is not None:
                child_writes(bus)
            return append(target, records, if_next_seq=if_next_seq)

        bus.append = append_after_the_child  # type: ignore[method-assign]
        return bus

    return racing


def _serve_once(url: str, max_attempts: int) -> list[str]:
    """One worker taking one job (a retry would crash), in this process; the names of its job events."""
    options = WorkerOptions(
        url, idle_timeout=0.2, max_attempts=max_attempts, max_jobs=1, command=["sh", "-c", "exit 3", "job"]
    )
    out = io.BytesIO()
    with Stream("worker", out=out) as stream:
        Worker(options, stream).serve()
    return [o["name"] for o in lines_of(out.getvalue()) if o["type"] == "event"]


@pytest.mark.parametrize("max_attempts", [1, 2])
def test_a_result_that_lands_as_the_takeover_ends_the_lost_run_decides_the_job(
    bus_url: str, monkeypatch: pytest.MonkeyPatch, max_attempts: int
) -> None:
    """The lost attempt's child writes its successful result just before the takeover's ending: the ending is
    refused, and the job takes the run's success — with no attempts left, and with some (nothing runs again)."""
    job, run_id = _lost_attempt(bus_url)
    result = events(run_id, 1, start=2, final=True)

    def child_ends(bus: Bus) -> None:
        bus.append(run_id, result)

    monkeypatch.setattr(job_queue, "open_bus", _racing_bus(run_id, child_ends))
    time.sleep(0.3)  # the frozen worker's claim is idle
    assert _serve_once(bus_url, max_attempts) == ["job.reclaimed", "job.succeeded"]
    with open_bus(bus_url) as bus:
        final = bus.get_job(job.job_id)
        assert final is not None and (final.status, final.attempt) == ("succeeded", 1)
        assert bus.get_run(run_id).status == "succeeded"  # type: ignore[union-attr]
        assert bus.get_run(job.attempt_run_id(2)) is None


def test_a_lost_attempt_whose_child_still_writes_is_left_until_its_run_ends(
    bus_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The takeover cannot end the lost run while its child keeps writing it: nothing is decided nor run again
    beside it; once the child ends the run, the next takeover settles the job by that ending."""
    job, run_id = _lost_attempt(bus_url)

    def child_writes_on(bus: Bus) -> None:
        info = bus.get_run(run_id)
        assert info is not None
        bus.append(run_id, events(run_id, 1, start=info.last_seq + 1))

    monkeypatch.setattr(job_queue, "open_bus", _racing_bus(run_id, child_writes_on))
    time.sleep(0.3)
    assert _serve_once(bus_url, 2) == ["job.unsettled"]
    with open_bus(bus_url) as bus:
        waiting = bus.get_job(job.job_id)
        assert waiting is not None and (waiting.status, waiting.attempt) == ("running", 1)
        info = bus.get_run(run_id)
        assert info is not None and not info.terminal
        assert bus.get_run(job.attempt_run_id(2)) is None
        bus.append(run_id, events(run_id, 1, start=info.last_seq + 1, final=True))  # the child's own ending
    monkeypatch.setattr(job_queue, "open_bus", open_bus)
    time.sleep(0.3)
    assert _serve_once(bus_url, 2) == ["job.reclaimed", "job.succeeded"]
    with open_bus(bus_url) as bus:
        final = bus.get_job(job.job_id)
        assert final is not None and (final.status, final.attempt) == ("succeeded", 1)


def test_a_job_with_a_nul_in_its_prompt_or_options_fails_its_run_instead_of_crashing_the_worker(
    bus_url: str,
) -> None:
    """``submit`` refuses such a job, but one queued by anything else (an older submitter) reaches a worker:
    no command line can carry it, so its run ends with that error and the worker goes on."""
    jobs = [new_job("hi\x00there", []), new_job("hi", ["--model", "m\x00"])]
    with open_bus(bus_url) as bus:
        for job in jobs:
            bus.register_run(job.run_id, command="exec", job_id=job.job_id, attempt=1)
            bus.enqueue(job)
    worker = cli("worker", "--bus", bus_url, "--max-jobs", "2", "--idle-timeout", "5", timeout=60)
    assert worker.returncode == 0 and b"Traceback" not in worker.stderr, worker.stderr
    for job in jobs:
        with open_bus(bus_url) as bus:
            stored = bus.get_job(job.job_id)
            assert stored is not None and stored.status == "failed"
        evs = run_events(bus_url, job.run_id)
        assert_well_formed(evs)
        result = evs[-1]
        assert (result.ok, result.error.code) == (False, "INVALID_INPUT")  # type: ignore[attr-defined]
        assert "embedded null byte" in result.error.message  # type: ignore[attr-defined]
