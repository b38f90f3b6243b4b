"""``agentstream serve``: the HTTP API against real server processes on a real bus (SQLite, and Redis)."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import msgspec
import pytest

from _bus_fixtures import CASSETTE, PRODUCER, RedisServer, cli, redis_server  # noqa: F401
from _serve_support import Server, SseStream, finished_run, publish, request, until, wait_for
from agentstream import protocol as p
from agentstream.bus import Record, open_bus


@pytest.fixture(scope="module")
def bus_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('serve-bus') / 'bus.sqlite3'}"


@pytest.fixture(scope="module")
def server(bus_url: str) -> Iterator[Server]:
    with Server(bus_url, "--heartbeat", "0.2") as running:
        yield running


def _json(body: object) -> bytes:
    return json.dumps(body).encode()


# -- listing -------------------------------------------------------------------------


def test_runs_is_the_envelope_runs_prints_with_duration_tokens_and_cost(server: Server, bus_url: str) -> None:
    finished_run(bus_url, "list-done")
    publish(
        bus_url,
        "list-live",
        [p.Start(command="exec live"), p.Usage(model="m", input_tokens=7, output_tokens=3)],
    )
    reply = request(server, "GET", "/api/runs?limit=50")
    assert reply.status == 200 and reply.headers["content-type"] == "application/json"
    assert "access-control-allow-origin" not in reply.headers
    envelope = reply.json()
    printed = msgspec.json.decode(cli("runs", "--bus", bus_url, "--limit", "50").stdout)
    # The CLI and the API print the same envelope; only a live run's duration moves between the two calls.
    for runs in (envelope["result"]["runs"], printed["result"]["runs"]):
        for run in runs:
            if run["status"] == "running":
                run.pop("duration_ms")
    assert envelope == printed
    rows = {run["run_id"]: run for run in envelope["result"]["runs"]}
    done, live = rows["list-done"], rows["list-live"]
    assert done["status"] == "succeeded" and done["command"] == "exec fix the tests"
    assert done["duration_ms"] == 1234 and done["tokens"] == 120 and done["cost_usd"] == 0.002
    assert done["created"].endswith("Z")
    assert live["status"] == "running" and live["tokens"] == 10 and live["cost_usd"] is None
    assert envelope["next_actions"][0]["command"].startswith("agentstream follow")


def test_runs_filters_by_status_and_limit_and_rejects_bad_values(server: Server, bus_url: str) -> None:
    finished_run(bus_url, "filter-a")
    finished_run(bus_url, "filter-b")
    # the running run it lists is its own, not one another test may or may not have left
    publish(bus_url, "filter-running", [p.Start(command="exec still going")])
    running = request(server, "GET", "/api/runs?status=running&limit=100").json()
    assert running["result"]["runs"] and {r["status"] for r in running["result"]["runs"]} == {"running"}
    one = request(server, "GET", "/api/runs?limit=1").json()
    assert one["result"]["count"] == 1
    bad = request(server, "GET", "/api/runs?limit=zero")
    assert bad.status == 400 and bad.json()["error"]["code"] == "INVALID_INPUT" and bad.json()["fix"]
    assert request(server, "GET", "/api/runs?status=done").status == 400


def test_one_run_unknown_run_and_odd_run_ids(server: Server, bus_url: str) -> None:
    odd = 'we ird <b>"id"<\\b> & 100% ü;?#'
    finished_run(bus_url, odd)
    reply = request(server, "GET", f"/api/runs/{quote(odd, safe='')}")
    assert reply.status == 200 and reply.json()["result"]["run"]["run_id"] == odd
    events = request(
        server, "GET", f"/api/runs/{quote(odd, safe='')}/events", headers={"Accept": "application/x-ndjson"}
    )
    assert [msgspec.json.decode(line)["session_id"] for line in events.body.splitlines()] == [odd] * 4

    missing = request(server, "GET", "/api/runs/no-such-run")
    assert missing.status == 404
    assert missing.json()["ok"] is False and missing.json()["error"]["code"] == "RUN_NOT_FOUND"
    assert request(server, "GET", "/api/runs/no-such-run/events").status == 404
    assert (
        request(server, "GET", "/api/runs/a%2F..%2F..%2Fetc").status == 404
    )  # a slash never reaches a handler
    control = request(server, "GET", "/api/runs/bad%0Aid")
    assert control.status == 400 and control.json()["error"]["code"] == "INVALID_INPUT"
    assert request(server, "GET", f"/api/runs/{'x' * 4097}").status == 400


UNUSUAL_RUN_IDS = (
    "nbsp\u00a0id",
    "ideographic\u3000space",
    "em\u2003space and\u2028line separator",
    "zero\u200bwidth",
    "ü" * 300,
    "y" * 4096,
)


def test_run_ids_exec_accepts_are_served_and_only_control_characters_are_refused(
    server: Server, bus_url: str
) -> None:
    """Any id the bus and ``exec --session-id`` take can be opened: Unicode spaces, and up to 4096 characters."""
    for run_id in UNUSUAL_RUN_IDS:
        finished_run(bus_url, run_id)
        path = f"/api/runs/{quote(run_id, safe='')}"
        reply = request(server, "GET", path)
        assert reply.status == 200, (run_id[:20], reply.body[:300])
        assert reply.json()["result"]["run"]["run_id"] == run_id
        lines = request(server, "GET", f"{path}/events", headers={"Accept": "application/x-ndjson"})
        assert lines.status == 200 and len(lines.body.splitlines()) == 4
        assert request(server, "POST", f"{path}/cancel").status == 409  # found, and already ended
    listed = {
        row["run_id"] for row in request(server, "GET", "/api/runs?limit=1000").json()["result"]["runs"]
    }
    assert set(UNUSUAL_RUN_IDS) <= listed

    finished_run(bus_url, "\ufffd(")  # what "%C3%28" would name, were its bytes read as U+FFFD
    not_utf8 = ("%C3%28", "%ED%A0%80", "%FF")
    for encoded in ("bad%0Aid", "nul%00", "del%7F", "nel%C2%85", "esc%1B%5B31m", "x" * 4097, *not_utf8):
        for path in (f"/api/runs/{encoded}", f"/api/runs/{encoded}/events"):
            refused = request(server, "GET", path)
            assert refused.status == 400, (encoded[:20], refused.body)
            assert refused.json()["error"]["code"] == "INVALID_INPUT" and refused.json()["fix"]
            assert len(refused.body) < 1000  # an id too long to be one is not repeated whole


def test_head_of_a_live_runs_events_answers_at_once_and_frees_the_connection(
    server: Server, bus_url: str
) -> None:
    publish(bus_url, "live-head", [p.Start(command="exec live")])
    for accept in ("application/x-ndjson", "text/event-stream"):
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        try:
            connection.request("HEAD", "/api/runs/live-head/events", headers={"Accept": accept})
            head = connection.getresponse()
            head.read()
            assert head.status == 200 and head.getheader("content-type", "").startswith(accept)
            connection.request("GET", "/api/runs/live-head")  # the same connection, free again
            after = connection.getresponse()
            assert after.status == 200 and json.loads(after.read())["result"]["run"]["run_id"] == "live-head"
        finally:
            connection.close()


def test_a_found_run_and_an_unknown_one_name_the_same_command(server: Server, bus_url: str) -> None:
    finished_run(bus_url, "named-run")
    found = request(server, "GET", "/api/runs/named-run").json()
    missing = request(server, "GET", "/api/runs/no-such-run").json()
    assert found["command"] == "agentstream runs named-run"
    assert missing["command"] == "agentstream runs no-such-run"
    assert missing["error"]["code"] == "RUN_NOT_FOUND"


@pytest.mark.parametrize(
    ("method", "path", "without"),
    [
        ("GET", "/api/runs/", "GET /api/runs"),
        ("POST", "/api/runs/", "POST /api/runs"),
        ("GET", "/api/runs/slash-run/", "GET /api/runs/slash-run"),
        ("GET", "/api/runs/slash-run/events/?from_seq=1", "GET /api/runs/slash-run/events?from_seq=1"),
        ("POST", "/api/runs/slash-run/cancel/", "POST /api/runs/slash-run/cancel"),
        ("GET", "/api/bogus/", None),
    ],
)
def test_a_trailing_slash_is_answered_with_the_envelope_not_a_bodiless_redirect(
    server: Server, method: str, path: str, without: str | None
) -> None:
    reply = request(server, method, path)
    assert reply.status == 404 and reply.headers["content-type"] == "application/json", reply.body
    envelope = reply.json()
    assert envelope["ok"] is False and envelope["error"]["code"] == "INVALID_INPUT"
    assert "location" not in reply.headers
    if without is None:
        assert envelope["fix"].startswith("use GET /api/runs")
    else:
        assert envelope["fix"] == f"drop the trailing slash: {without}"


def test_a_page_with_a_trailing_slash_still_redirects_to_the_page(server: Server) -> None:
    reply = request(server, "GET", "/runs/some-run/")
    assert reply.status == 307 and reply.headers["location"].endswith("/runs/some-run")


# -- events ----------------------------------------------------------------------------


def test_resuming_past_the_end_of_a_finished_run_is_204_so_event_source_stops_reconnecting(
    server: Server, bus_url: str
) -> None:
    finished_run(bus_url, "resume-past-end")  # seqs 0 to 3
    path = "/api/runs/resume-past-end/events"
    for query, headers in (
        ("", {"Last-Event-ID": "3"}),
        ("?from_seq=4", {}),
        ("?from_seq=99", {}),
        ("", {"Last-Event-ID": "3.0"}),
    ):
        reply = request(server, "GET", path + query, headers={"Accept": "text/event-stream", **headers})
        assert reply.status == 204 and reply.body == b"", (query, headers)
        assert reply.headers["cache-control"] == "no-store"
    # One event left is still a stream.
    last = SseStream(server, path, headers={"Last-Event-ID": "2"})
    assert last.status == 200 and [event.id for event in last.events()] == ["3"]
    # A dialect's stream: after its very last line, 204 too.
    agui = list(SseStream(server, f"{path}?dialect=agui").events())
    last_id = agui[-1].id
    assert last_id is not None
    reply = request(server, "GET", f"{path}?dialect=agui", headers={"Last-Event-ID": last_id})
    assert reply.status == 204 and reply.body == b""
    # NDJSON is read to its end, not reconnected: 200 with no lines.
    ndjson = request(server, "GET", f"{path}?from_seq=4", headers={"Accept": "application/x-ndjson"})
    assert ndjson.status == 200 and ndjson.body == b""
    assert ndjson.headers["content-type"].startswith("application/x-ndjson")


def _fds_on(path: Path) -> int:
    """Open file descriptors of this process on ``path`` (and its ``-wal`` and ``-shm`` files)."""
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            if os.readlink(fd).startswith(str(path)):
                count += 1
        except OSError:
            pass  # closed since it was listed
    return count


def test_bus_connections_stay_bounded_however_many_worker_threads_come_and_go(tmp_path: Path) -> None:
    """anyio's worker threads end (after a quiet spell, or with their event loop); their buses must not stay open.

    Each ``asyncio.run`` is a new loop with new worker threads, the old ones gone: the
    churn a long-running server sees, without waiting for anyio's idle timeout.
    """
    from agentstream.serve.hub import POOL_IDLE, RunHub

    bus_path = tmp_path / "bus.sqlite3"
    bus_url = f"sqlite:///{bus_path}"
    finished_run(bus_url, "pooled")
    hub = RunHub(bus_url)

    async def burst() -> None:
        found = await asyncio.gather(*(hub.call(lambda bus: bus.get_run("pooled")) for _ in range(8)))
        assert all(info is not None and info.terminal for info in found)

    try:
        for _ in range(40):
            asyncio.run(burst())
        # SQLite holds up to three descriptors per connection (the file, -wal, -shm).
        fds = _fds_on(bus_path)
        assert fds <= 3 * POOL_IDLE, f"{fds} descriptors open on the bus file"
        assert hub.open_buses <= POOL_IDLE
    finally:
        hub.close()
    assert hub.open_buses == 0 and _fds_on(bus_path) == 0


def test_a_follower_resuming_past_the_end_does_not_move_the_shared_tail_past_the_run(tmp_path: Path) -> None:
    """The tail a far-ahead follower starts reads from the run's stored end, so the others get each event from it."""
    from agentstream.serve.hub import RunHub

    bus_url = f"sqlite:///{tmp_path / 'bus.sqlite3'}"
    publish(bus_url, "shared-tail", [p.Start(command="exec live")])
    hub = RunHub(bus_url)

    async def scenario() -> None:
        async def seqs(from_seq: int) -> list[int]:
            return [record.seq async for batch in hub.batches("shared-tail", from_seq) for record in batch]

        ahead = asyncio.create_task(seqs(1000))  # resumes far past the run's last seq, 0
        await until(lambda: hub.tail_next_seq("shared-tail") is not None, "the far-ahead follower's tail")
        await until(lambda: hub.tail_next_seq("shared-tail") == 1, "the tail to start at the stored end")

        behind = hub.batches("shared-tail", 0)
        assert [record.seq for record in await anext(behind)] == [0]
        await asyncio.to_thread(
            publish, bus_url, "shared-tail", [p.Log(level="info", message="one")], first_seq=1
        )
        assert [record.seq for record in await anext(behind)] == [1]
        assert (hub.tail_next_seq("shared-tail") or 0) <= 2  # never past what the run has stored

        result = p.Result(ok=True, subtype="success", exit_code=0)
        await asyncio.to_thread(publish, bus_url, "shared-tail", [result], first_seq=2)
        assert [record.seq async for batch in behind for record in batch] == [2]
        assert await ahead == []  # the run ended below its resume point: it ends, empty

    try:
        asyncio.run(scenario())
    finally:
        hub.close()


def test_a_bus_unusable_for_good_stops_the_tail_and_ends_its_followers_streams_with_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A permanent error is no outage: the run's tail stops at once (no retry loop) and each follower's stream
    ends with the follower's ending, the error's code, message and fix in it, whole (the open tool call closed)."""
    from agentstream.bus import BusUnusable
    from agentstream.bus.sqlite import SqliteBus
    from agentstream.serve import hub as hub_module
    from agentstream.serve.events import ResumePoint, run_lines
    from agentstream.serve.hub import RunHub

    bus_url = f"sqlite:///{tmp_path / 'bus.sqlite3'}"
    publish(bus_url, "doomed", [p.Start(command="exec live"), p.ToolCall(call_id="c1", name="bash")])
    unusable = BusUnusable("the bus file is no SQLite database any more", fix="move this file aside")
    tail_reads: list[float] = []

    class UnusableToTheTail(SqliteBus):
        """A blocking read is the tail's: it meets the permanent error. The followers' own reads still work."""

        def read(
            self, run_id: str, from_seq: int = 0, *, limit: int = 1000, block: float | None = None
        ) -> list[Record]:
            if block is not None:
                tail_reads.append(time.monotonic())
                raise unusable
            return super().read(run_id, from_seq, limit=limit, block=block)

    monkeypatch.setattr(hub_module, "open_bus", UnusableToTheTail)
    hub = RunHub(bus_url)

    async def follow() -> list[list[tuple[str | None, bytes]]]:
        lines = run_lines(hub, "doomed", ResumePoint(0), None, command="agentstream follow doomed")
        return [[(line.id, line.data) for line in batch] async for batch in lines]

    try:

        async def both() -> list[list[list[tuple[str | None, bytes]]]]:
            return await asyncio.wait_for(asyncio.gather(follow(), follow()), timeout=20)

        followed = asyncio.run(both())
    finally:
        hub.close()
    ended_after = len(tail_reads)  # one tail, or a second for a follower that came as the first stopped
    time.sleep(1.0)  # a tail that retried would read again within 0.5 s
    assert len(tail_reads) == ended_after <= 2 and hub.tail_next_seq("doomed") is None
    for batches in followed:
        own = [line_id for batch in batches for line_id, _ in batch if line_id is not None]
        assert own == ["0", "1"]  # the run's own lines
        ending = [msgspec.json.decode(data) for line_id, data in batches[-1] if line_id is None]
        assert [event["type"] for event in ending] == ["tool_result", "error", "result"]
        assert ending[0]["call_id"] == "c1" and ending[0]["status"] == "error"
        error, result = ending[1], ending[2]
        assert (error["code"], error["message"], error["fix"]) == (
            "BUS_UNAVAILABLE",
            unusable.message,
            unusable.fix,
        )
        assert result["ok"] is False and result["subtype"] == "bus_unavailable" and result["exit_code"] == 1
        assert result["session_id"].startswith("follow_") and error["details"]["resume_seq"] == 2


def test_a_follower_that_stops_taking_batches_is_held_to_a_few_and_loses_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past its share the tail drops a stalled follower's batches (memory stays bounded); the follower finds
    the hole when it reads again and takes the rest from the bus, each event once and in order."""
    from agentstream.serve import hub as hub_module

    monkeypatch.setattr(hub_module, "FOLLOWER_BATCHES", 2)
    bus_url = f"sqlite:///{tmp_path / 'bus.sqlite3'}"
    publish(bus_url, "stalled", [p.Start(command="exec live")])
    hub = hub_module.RunHub(bus_url)

    async def scenario() -> None:
        follower = hub.batches("stalled", 0)
        seen = [record.seq for record in await anext(follower)]
        pending = asyncio.ensure_future(anext(follower))  # subscribed, then waiting on its batches
        await until(lambda: hub.tail_next_seq("stalled") is not None, "the follower's tail")
        for seq in range(1, 41):  # one batch each, while the follower takes none
            await asyncio.to_thread(
                publish, bus_url, "stalled", [p.Log(level="info", message=f"{seq}")], first_seq=seq
            )
        await until(lambda: hub.tail_next_seq("stalled") == 41, "the tail to read them all")
        queued = max(queue.qsize() for queue in hub._tails["stalled"].followers)
        assert queued <= 2, queued
        result = p.Result(ok=True, subtype="success", exit_code=0)
        await asyncio.to_thread(publish, bus_url, "stalled", [result], first_seq=41)
        seen += [record.seq for record in await pending]
        seen += [record.seq async for batch in follower for record in batch]
        assert seen == list(range(42))

    try:
        asyncio.run(scenario())
    finally:
        hub.close()


def test_events_as_sse_ids_are_seqs_data_the_stored_lines_and_resume_after_last_event_id(
    server: Server, bus_url: str
) -> None:
    records = finished_run(bus_url, "sse-done")
    stream = SseStream(server, "/api/runs/sse-done/events")
    assert stream.status == 200 and stream.headers["content-type"].startswith("text/event-stream")
    got = list(stream.events())  # ends by itself after the result
    assert [(e.id, e.data.encode()) for e in got] == [(str(r.seq), r.line) for r in records]

    resumed = SseStream(server, "/api/runs/sse-done/events", headers={"Last-Event-ID": "1"})
    assert [e.id for e in resumed.events()] == ["2", "3"]
    from_seq = SseStream(server, "/api/runs/sse-done/events?from_seq=3")
    assert [e.id for e in from_seq.events()] == ["3"]
    past_end = SseStream(server, "/api/runs/sse-done/events?from_seq=99")
    assert past_end.status == 204 and list(past_end.events()) == []
    bad = request(server, "GET", "/api/runs/sse-done/events", headers={"Last-Event-ID": "x"})
    assert bad.status == 400


def test_a_live_run_streams_as_it_is_published_with_heartbeats_and_ends_after_its_result(
    server: Server, bus_url: str
) -> None:
    publish(bus_url, "sse-live", [p.Start(command="exec live")])
    stream = SseStream(server, "/api/runs/sse-live/events")
    events = stream.events()
    assert next(events).id == "0"

    def produce() -> None:
        time.sleep(0.5)  # idle long enough for a heartbeat (--heartbeat 0.2)
        publish(bus_url, "sse-live", [p.MessageDelta(message_id="m", content="Hel")], first_seq=1)
        publish(bus_url, "sse-live", [p.MessageDelta(message_id="m", content="lo")], first_seq=2)
        publish(bus_url, "sse-live", [p.Result(ok=True, subtype="success", exit_code=0)], first_seq=3)

    producer = threading.Thread(target=produce)
    producer.start()
    rest = list(events)
    producer.join()
    assert [e.id for e in rest] == ["1", "2", "3"]
    assert any(comment.startswith("ping") for comment in rest[0].comments)
    assert json.loads(rest[-1].data)["type"] == "result"


def test_events_as_ndjson(server: Server, bus_url: str) -> None:
    records = finished_run(bus_url, "ndjson-done")
    reply = request(
        server, "GET", "/api/runs/ndjson-done/events?from_seq=1", headers={"Accept": "application/x-ndjson"}
    )
    assert reply.status == 200 and reply.headers["content-type"].startswith("application/x-ndjson")
    assert reply.body == b"".join(r.line + b"\n" for r in records[1:])


def test_events_in_the_agui_dialect_validate_with_ag_ui_and_unknown_dialects_list_the_names(
    server: Server, bus_url: str
) -> None:
    from ag_ui.core import Event, RunFinishedEvent, RunStartedEvent, TextMessageContentEvent
    from pydantic import TypeAdapter

    finished_run(bus_url, "agui-done", answer="It is 18°C")
    adapter = TypeAdapter(Event)
    stream = SseStream(server, "/api/runs/agui-done/events?dialect=agui")
    got = list(stream.events())
    models = [adapter.validate_json(event.data) for event in got]
    assert isinstance(models[0], RunStartedEvent) and models[0].run_id == "agui-done"
    assert any(isinstance(m, TextMessageContentEvent) and m.delta == "Looking at the tests." for m in models)
    assert isinstance(models[-1], RunFinishedEvent) and models[-1].result == "It is 18°C"
    assert all(event.id is not None and re.fullmatch(r"\d+\.\d+", event.id) for event in got)

    # Resuming a dialect stream sends only what follows, encoded as in the full stream.
    last_id = got[-1].id
    assert last_id is not None
    last_seq = last_id.split(".")[0]
    resumed = list(
        SseStream(
            server,
            "/api/runs/agui-done/events?dialect=agui",
            headers={"Last-Event-ID": str(int(last_seq) - 1)},
        ).events()
    )
    assert [e.data for e in resumed] == [e.data for e in got if e.id and e.id.startswith(f"{last_seq}.")]

    claude = request(
        server, "GET", "/api/runs/agui-done/events?dialect=claude", headers={"Accept": "application/x-ndjson"}
    )
    assert msgspec.json.decode(claude.body.splitlines()[-1])["type"] == "result"

    unknown = request(server, "GET", "/api/runs/agui-done/events?dialect=klingon")
    assert unknown.status == 400
    assert (
        unknown.json()["error"]["message"] == "unknown dialect 'klingon'" and "agui" in unknown.json()["fix"]
    )


def _tool_run(bus_url: str, run_id: str) -> None:
    """A run whose events become several lines in most dialects: deltas, a tool call, reasoning, a result."""
    publish(
        bus_url,
        run_id,
        [
            p.Start(command="exec check the weather"),
            p.ReasoningDelta(reasoning_id="r1", content="The user wants"),
            p.Reasoning(reasoning_id="r1", content="The user wants the weather."),
            p.MessageDelta(message_id="m1", content="Let me "),
            p.Message(message_id="m1", role="assistant", content="Let me look."),
            p.ToolCall(call_id="c1", name="weather", arguments={"city": "Oslo"}),
            p.ToolResult(call_id="c1", name="weather", status="success", output="18°C", duration_ms=5),
            p.Message(message_id="m2", role="assistant", content="It is 18°C."),
            p.Usage(model="m", input_tokens=10, output_tokens=5),
            p.Result(ok=True, subtype="success", exit_code=0, result="It is 18°C."),
        ],
    )


def _lines(stream: SseStream) -> list[tuple[str | None, str]]:
    """Every line with its id: a resumed stream is encoded again, made-up ids (line uuids, ``msg_…``) included,
    and must give the same lines."""
    return [(e.id, e.data) for e in stream.events()]


def test_resuming_any_dialect_from_any_line_loses_none_and_repeats_none(server: Server, bus_url: str) -> None:
    from agentstream.dialects import writable_dialects

    _tool_run(bus_url, "resume-every-line")
    path = "/api/runs/resume-every-line/events"
    for dialect in writable_dialects():
        full = _lines(SseStream(server, f"{path}?dialect={dialect}"))
        ids = [event_id for event_id, _ in full]
        assert len(set(ids)) == len(ids), (dialect, ids)  # one id per line: a resume point is never ambiguous
        for index, (event_id, _) in enumerate(full):
            assert event_id is not None
            resumed = SseStream(server, f"{path}?dialect={dialect}", headers={"Last-Event-ID": event_id})
            assert _lines(resumed) == full[index + 1 :], (dialect, event_id)
        # A plain seq (the canonical id, or from_seq) still names a whole event.
        seqs = sorted({int(event_id.split(".")[0]) for event_id in ids if event_id})
        for seq in seqs:
            after = [line for line in full if line[0] and int(line[0].split(".")[0]) > seq]
            resumed = SseStream(server, f"{path}?dialect={dialect}", headers={"Last-Event-ID": str(seq)})
            assert _lines(resumed) == after, (dialect, seq)
            starting = SseStream(server, f"{path}?dialect={dialect}&from_seq={seq}")
            assert _lines(starting) == [
                line for line in full if line[0] and int(line[0].split(".")[0]) >= seq
            ], (dialect, seq)
    agui = [e.id for e in SseStream(server, f"{path}?dialect=agui").events()]
    assert len(agui) > len(
        {event_id.split(".")[0] for event_id in agui if event_id}
    )  # some event made several

    canonical = [e.id for e in SseStream(server, path, headers={"Last-Event-ID": "4.0"}).events()]
    assert canonical == [str(seq) for seq in range(5, 10)]
    for bad in ("4.", ".1", "4.1.2", "4.x", "-1"):
        reply = request(server, "GET", path, headers={"Last-Event-ID": bad})
        assert reply.status == 400 and "Last-Event-ID" in reply.json()["error"]["message"], bad


def test_dialects_are_those_that_can_be_written_and_decode_only_ones_are_refused_saying_so(
    server: Server, bus_url: str
) -> None:
    from agentstream.dialects import available_dialects

    finished_run(bus_url, "dialect-names")
    decode_only = [d.name for d in available_dialects() if not d.can_encode]
    writable = [d.name for d in available_dialects() if d.can_encode]
    assert decode_only and writable
    unknown = request(server, "GET", "/api/runs/dialect-names/events?dialect=klingon").json()
    listed = unknown["fix"].removeprefix("use one of: ").split(", ")
    assert listed == writable
    for name in decode_only:
        reply = request(server, "GET", f"/api/runs/dialect-names/events?dialect={name}")
        assert reply.status == 400 and "decode-only" in reply.json()["error"]["message"], name
        assert reply.json()["fix"] == unknown["fix"]
    for name in writable:
        reply = request(
            server,
            "GET",
            f"/api/runs/dialect-names/events?dialect={name}",
            headers={"Accept": "application/x-ndjson"},
        )
        assert reply.status == 200 and reply.body, name


# -- submit and cancel ----------------------------------------------------------------------


def test_post_runs_submits_a_job_that_a_worker_runs(server: Server, bus_url: str, tmp_path: Path) -> None:
    cassette = tmp_path / "turn.jsonl"
    cassette.write_text(CASSETTE)
    body = _json(
        {"prompt": "say hello", "args": ["--cassette", str(cassette), "--permission-mode", "read-only"]}
    )
    reply = request(server, "POST", "/api/runs", body=body, headers={"Content-Type": "application/json"})
    assert reply.status == 202, reply.body
    envelope = reply.json()
    assert envelope["ok"] and envelope["command"] == "agentstream submit"
    run_id = envelope["result"]["run_id"]
    assert request(server, "GET", f"/api/runs/{run_id}").json()["result"]["run"]["status"] == "queued"

    worker = cli("worker", "--max-jobs", "1", "--bus", bus_url, timeout=60)
    assert worker.returncode == 0, worker.stderr
    lines = request(server, "GET", f"/api/runs/{run_id}/events", headers={"Accept": "application/x-ndjson"})
    result = msgspec.json.decode(lines.body.splitlines()[-1])
    assert result["type"] == "result" and result["ok"] and result["result"] == "Hello from the queue."
    row = request(server, "GET", f"/api/runs/{run_id}").json()["result"]["run"]
    assert row["status"] == "succeeded" and row["tokens"] == 15


def test_post_runs_rejects_what_submit_rejects(server: Server) -> None:
    bad_option = request(server, "POST", "/api/runs", body=_json({"prompt": "x", "args": ["--no-such-flag"]}))
    assert bad_option.status == 400 and "bad exec option" in bad_option.json()["error"]["message"]
    reserved = request(
        server, "POST", "/api/runs", body=_json({"prompt": "x", "args": ["--bus", "redis://x"]})
    )
    assert reserved.status == 400 and "cannot be set on a job" in reserved.json()["error"]["message"]
    for body in (b"not json", b"[]", _json({"prompt": ""}), _json({"prompt": "x", "args": [1]})):
        reply = request(server, "POST", "/api/runs", body=body)
        assert reply.status == 400 and reply.json()["fix"].startswith("send JSON")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"prompt": 5}, "prompt must be a string, not a number"),
        ({"prompt": None}, "prompt must be a string, not null"),
        ({"prompt": ["x"]}, "prompt must be a string, not a list"),
        ({"prompt": "   "}, "prompt is empty"),
        ({}, "no prompt: the body needs a prompt"),
        ({"prompt": "x", "args": "--max-turns 3"}, "args must be a list of strings, not a string"),
        ({"prompt": "x", "args": {"max-turns": 3}}, "args must be a list of strings, not an object"),
        ({"prompt": "x", "args": ["--max-turns", 3]}, "args must be a list of strings: args[1] is a number"),
        (
            {"prompt": "x", "arg": ["--max-turns", "3"]},
            "unknown field 'arg': the body has only prompt and args",
        ),
        (5, "the body must be a JSON object, not a number"),
    ],
)
def test_post_runs_says_which_field_is_wrong_and_how(server: Server, body: object, message: str) -> None:
    reply = request(server, "POST", "/api/runs", body=_json(body))
    assert reply.status == 400 and reply.json()["error"] == {"code": "INVALID_INPUT", "message": message}
    assert reply.json()["fix"].startswith("send JSON")


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"prompt": "hi\x00there"}, "the prompt holds a NUL character (U+0000) at character 2"),
        (
            {"prompt": "x", "args": ["--model", "m\x00"]},
            "the exec option 'm\\x00' holds a NUL character (U+0000) at character 1",
        ),
    ],
)
def test_post_runs_refuses_a_nul_that_no_workers_command_line_could_carry(
    server: Server, bus_url: str, body: object, where: str
) -> None:
    """A worker passes the prompt and options as its child's arguments: such a job would be queued, never run."""
    reply = request(server, "POST", "/api/runs", body=_json(body))
    assert reply.status == 400
    assert reply.json()["error"] == {
        "code": "INVALID_INPUT",
        "message": f"{where}, which no command line can carry",
    }
    assert reply.json()["fix"] == "remove the NUL characters"


@pytest.mark.parametrize(
    ("method", "path", "status", "allow"),
    [
        ("GET", "/api/bogus", 404, None),
        ("GET", "/api/runs/%2Fetc", 404, None),
        ("GET", "/api/runs/x/events/more", 404, None),
        ("DELETE", "/api/runs/some-run", 405, "GET, HEAD"),
        ("POST", "/api/runs/some-run/events", 405, "GET, HEAD"),
        ("PUT", "/api/runs", 405, "GET, HEAD, POST"),
        ("GET", "/api/runs/some-run/cancel", 405, "POST"),
    ],
)
def test_every_api_answer_is_the_envelope_even_for_unknown_routes_and_methods(
    server: Server, method: str, path: str, status: int, allow: str | None
) -> None:
    reply = request(server, method, path)
    assert reply.status == status and reply.headers["content-type"] == "application/json"
    envelope = reply.json()
    assert envelope["ok"] is False and envelope["result"] is None
    assert envelope["error"]["code"] == "INVALID_INPUT" and envelope["error"]["message"] and envelope["fix"]
    assert reply.headers.get("allow") == allow
    if allow is not None:
        assert envelope["fix"] == f"use {allow} on this path"
    # Outside the API, Starlette's own answers stay.
    assert request(server, "GET", "/no-such-page").status == 404


def test_post_runs_refuses_a_body_over_1_mib_without_waiting_for_all_of_it(server: Server) -> None:
    """A declared length over the limit is refused before the body comes; a chunked one once it passes it."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as conn:
        conn.sendall(
            b"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n{" % (server.port, 64 << 20)
        )  # and nothing more: a server that waited for the whole body would never answer
        head = conn.recv(65536)
    assert head.startswith(b"HTTP/1.1 413 "), head[:200]
    chunk = b"x" * (1 << 16)
    chunked = iter([b'{"prompt": "', *([chunk] * 24), b'"}'])  # 1.5 MiB, no Content-Length
    reply = request(server, "POST", "/api/runs", body=chunked, headers={"Content-Type": "application/json"})  # type: ignore[arg-type]
    assert reply.status == 413 and "too large" in reply.json()["error"]["message"]
    assert reply.json()["fix"].startswith("send JSON")


def test_cancel_ends_a_live_run_its_follower_sees_it_and_unknown_or_ended_runs_are_refused(
    server: Server, bus_url: str
) -> None:
    publish(bus_url, "to-cancel", [p.Start(command="exec long job")])
    stream = SseStream(server, "/api/runs/to-cancel/events")
    events = stream.events()
    assert next(events).id == "0"
    reply = request(server, "POST", "/api/runs/to-cancel/cancel")
    assert reply.status == 200 and reply.json()["result"]["run"]["status"] == "interrupted"
    rest = [json.loads(event.data) for event in events]
    assert [e["type"] for e in rest] == ["error", "result"]
    assert rest[-1]["subtype"] == "cancelled" and rest[-1]["exit_code"] == 130 and rest[-1]["synthetic"]
    with open_bus(bus_url) as bus:  # the producer is fenced off
        late = [p.Log(level="info", message="late", session_id="to-cancel", seq=3, ts=p.now_ts())]
        assert bus.append("to-cancel", [p_record(e) for e in late]) == 0

    again = request(server, "POST", "/api/runs/to-cancel/cancel")
    assert again.status == 409 and "already ended" in again.json()["error"]["message"]
    unknown = request(server, "POST", "/api/runs/nobody/cancel")
    assert unknown.status == 404
    assert unknown.json() | {"next_actions": None} == {
        "ok": False,
        "command": "POST /api/runs/nobody/cancel",
        "result": None,
        "error": {"code": "RUN_NOT_FOUND", "message": "no run 'nobody' on this bus"},
        "fix": "list runs with 'agentstream runs' (same --bus)",
        "next_actions": None,
    }


def p_record(event: p.Event) -> object:
    from agentstream.bus import Record

    return Record(event.seq, event.type, p.encode(event))


def test_cancelling_a_job_stops_the_workers_child(server: Server, bus_url: str, tmp_path: Path) -> None:
    touch = tmp_path / "started"
    body = _json({"prompt": f"events=1000 interval=0.05 touch={touch}"})
    env = {"AGENTSTREAM_WORKER_EXEC": f"{sys.executable} {PRODUCER}"}
    reply = request(server, "POST", "/api/runs", body=body)
    assert reply.status == 202
    run_id = reply.json()["result"]["run_id"]
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentstream",
            "worker",
            "--max-jobs",
            "1",
            "--idle-timeout",
            "1",
            "--bus",
            bus_url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**__import__("os").environ, **env},
    )
    try:
        wait_for(touch.exists, timeout=30, what="the job's child to start")
        assert request(server, "POST", f"/api/runs/{run_id}/cancel").status == 200
        out, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, err
    names = [e.get("name") for e in map(json.loads, out.splitlines()) if e["type"] == "event"]
    assert "job.cancelled" in names
    with open_bus(bus_url) as bus:
        info = bus.get_run(run_id)
        assert info is not None and info.subtype == "cancelled"
        assert info.job_id is not None
        job = bus.get_job(info.job_id)
        assert job is not None and job.status == "failed"


# -- security ---------------------------------------------------------------------------------


def test_binding_beyond_loopback_without_a_token_is_refused() -> None:
    done = cli("serve", "--host", "0.0.0.0", "--port", "0")
    assert done.returncode == 2
    assert b"refusing to listen on 0.0.0.0 without a token" in done.stderr and b"--token" in done.stderr


def test_a_missing_extra_exits_2_with_the_install_command() -> None:
    code = "import sys; sys.modules['starlette'] = None; from agentstream.cli import main; sys.exit(main(['serve', '--port', '0']))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)
    assert done.returncode == 2 and b"pip install 'agentstream[serve]'" in done.stderr


def test_with_a_token_every_route_needs_it_and_the_login_cookie_is_httponly_strict(bus_url: str) -> None:
    token = "s3cret-token-value"
    with Server(bus_url, env={"AGENTSTREAM_TOKEN": token}) as server:
        for path in ("/api/runs", "/api/runs/x", "/api/runs/x/events"):
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {token}"}):
                reply = request(server, "GET", path, headers=headers)
                assert reply.status == 401 and reply.json()["error"]["code"] == "UNAUTHORIZED", (
                    path,
                    headers,
                )
        assert request(server, "POST", "/api/runs", body=b"{}").status == 401
        assert request(server, "POST", "/api/runs/x/cancel").status == 401
        page = request(server, "GET", "/")
        assert page.status == 401 and b'action="/login"' in page.body  # the token form, not the page
        authorized = {"Authorization": f"Bearer {token}"}
        assert request(server, "GET", "/api/runs", headers=authorized).status == 200
        assert b"app.js" in request(server, "GET", "/runs/x", headers=authorized).body

        wrong = request(
            server,
            "POST",
            "/login",
            body=b"token=nope&next=/",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert wrong.status == 401
        login = request(
            server,
            "POST",
            "/login",
            body=f"token={token}&next=/runs/abc".encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert login.status == 303 and login.headers["location"] == "/runs/abc"
        cookie = login.headers["set-cookie"]
        assert (
            "HttpOnly" in cookie
            and "SameSite=strict" in cookie.replace("Strict", "strict")
            and token not in cookie
        )
        pair = cookie.split(";", 1)[0]
        assert request(server, "GET", "/api/runs", headers={"Cookie": pair}).status == 200
        assert request(server, "GET", "/api/runs", headers={"Cookie": pair + "x"}).status == 401
        offsite = request(server, "POST", "/login", body=f"token={token}&next=//evil.example".encode())
        assert offsite.headers["location"] == "/"
    assert token.encode() not in server.stderr


def test_cross_site_writes_are_refused_and_no_cors_is_offered(server: Server, bus_url: str) -> None:
    finished_run(bus_url, "csrf-target")
    evil = {"Origin": "http://evil.example", "Content-Type": "application/json"}
    for path, body in (("/api/runs", _json({"prompt": "x"})), ("/api/runs/csrf-target/cancel", b"")):
        reply = request(server, "POST", path, body=body, headers=evil)
        assert reply.status == 403 and reply.json()["error"]["code"] == "FORBIDDEN"
        assert "access-control-allow-origin" not in reply.headers
        fetch_site = request(server, "POST", path, body=body, headers={"Sec-Fetch-Site": "cross-site"})
        assert fetch_site.status == 403
    same = {"Origin": f"http://127.0.0.1:{server.port}", "Sec-Fetch-Site": "same-origin"}
    assert (
        request(server, "POST", "/api/runs/csrf-target/cancel", headers=same).status == 409
    )  # allowed, run ended
    preflight = request(
        server,
        "OPTIONS",
        "/api/runs",
        headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status in (403, 405) and "access-control-allow-origin" not in preflight.headers
    page = request(server, "GET", "/")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"


# -- several servers, one Redis ------------------------------------------------------------------


def test_two_servers_on_one_redis_serve_the_same_runs(redis_server: RedisServer) -> None:
    url = redis_server.url
    with Server(url) as first, Server(url) as second:
        publish(url, "shared", [p.Start(command="exec shared")])
        streams = [SseStream(first, "/api/runs/shared/events"), SseStream(second, "/api/runs/shared/events")]
        readers = [s.events() for s in streams]
        assert [next(r).id for r in readers] == ["0", "0"]
        publish(
            url,
            "shared",
            [
                p.Message(message_id="m", role="assistant", content="hi"),
                p.Result(ok=True, subtype="success", exit_code=0),
            ],
            first_seq=1,
        )
        seen = [[e.id for e in reader] for reader in readers]
        assert seen == [["1", "2"], ["1", "2"]]

        submitted = request(first, "POST", "/api/runs", body=_json({"prompt": "later"})).json()
        run_id = submitted["result"]["run_id"]
        listed = request(second, "GET", "/api/runs").json()["result"]["runs"]
        assert {"shared", run_id} <= {run["run_id"] for run in listed}
        assert request(second, "POST", f"/api/runs/{run_id}/cancel").status == 200
        assert request(first, "GET", f"/api/runs/{run_id}").json()["result"]["run"]["status"] == "interrupted"


# -- wrap publishes ------------------------------------------------------------------------------


def test_a_wrapped_cli_shows_up_in_the_api_and_no_publish_keeps_it_out(server: Server, bus_url: str) -> None:
    child = ["--", sys.executable, "-m", "agentstream", "demo"]
    wrapped = cli("wrap", "--bus", bus_url, *child, timeout=60)
    assert wrapped.returncode == 0, wrapped.stderr
    run_id = msgspec.json.decode(wrapped.stdout.splitlines()[0])["session_id"]
    row = request(server, "GET", f"/api/runs/{run_id}").json()["result"]["run"]
    assert row["status"] == "succeeded" and "agentstream demo" in row["command"]
    published = request(
        server, "GET", f"/api/runs/{run_id}/events", headers={"Accept": "application/x-ndjson"}
    )
    assert published.body == wrapped.stdout  # the run on the bus is what the wrap printed

    quiet = cli("wrap", "--bus", bus_url, "--no-publish", *child, timeout=60)
    assert quiet.returncode == 0, quiet.stderr
    quiet_id = msgspec.json.decode(quiet.stdout.splitlines()[0])["session_id"]
    assert request(server, "GET", f"/api/runs/{quiet_id}").status == 404


def test_sigterm_ends_the_server_while_a_client_follows_a_run_that_never_ends(bus_url: str) -> None:
    """Open responses get a short grace on a signal: a follower of a live run cannot keep the server up."""
    publish(bus_url, "endless", [p.Start(command="exec live")])
    with Server(bus_url) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
        try:
            connection.request("GET", "/api/runs/endless/events", headers={"Accept": "application/x-ndjson"})
            following = connection.getresponse()
            assert json.loads(following.readline())["type"] == "start"
            assert server.proc is not None
            began = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            server.proc.wait(timeout=15)
            assert time.monotonic() - began < 10
        finally:
            connection.close()


def _whole_reply(conn: socket.socket) -> bytes:
    """One response with a Content-Length, read to its last byte (so that nothing of it is left unread)."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += conn.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: (\d+)", head)[1])  # type: ignore[index]
    while len(body) < length:
        body += conn.recv(65536)
    return head + b"\r\n\r\n" + body


def _closed_after(conn: socket.socket, trickle: bytes, every_s: float, within_s: float) -> float | None:
    """Send ``trickle`` a byte at a time; the seconds until the server closed the connection (None: it did not)."""
    began = time.monotonic()
    conn.settimeout(every_s)
    for byte in trickle:
        if time.monotonic() - began > within_s:
            return None
        try:
            conn.sendall(bytes([byte]))
            if conn.recv(1) == b"":
                return time.monotonic() - began
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - began
    return None


def test_a_client_trickling_its_request_is_disconnected_but_a_long_answer_is_not(bus_url: str) -> None:
    """Slowloris: uvicorn's keep-alive timeout starts again with each byte, so only the deadline ends it; the
    deadline covers a request (head and body), never the answer (a followed run outlives it many times over)."""
    publish(bus_url, "long-answer", [p.Start(command="exec long job")])
    with Server(bus_url, "--request-timeout", "0.5", "--heartbeat", "0.2") as server:
        head = b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-Slow: " % server.port + b"x" * 200
        with socket.create_connection(("127.0.0.1", server.port)) as silent:
            silent.settimeout(5)
            assert silent.recv(1) == b""  # a connection that says nothing is closed too
        with socket.create_connection(("127.0.0.1", server.port)) as slow:
            took = _closed_after(slow, head, every_s=0.05, within_s=5)
        assert took is not None and took < 3, took
        with socket.create_connection(("127.0.0.1", server.port)) as slow_body:
            slow_body.sendall(
                b"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                b"Content-Length: 300\r\n\r\n" % server.port
            )
            took = _closed_after(slow_body, b'{"prompt": "' + b"x" * 286 + b'"}', every_s=0.05, within_s=5)
        assert took is not None and took < 3, took
        with socket.create_connection(("127.0.0.1", server.port)) as answered_once:  # then slow on its next
            answered_once.sendall(b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % server.port)
            answered_once.settimeout(5)
            assert _whole_reply(answered_once).startswith(b"HTTP/1.1 200 ")
            took = _closed_after(answered_once, head, every_s=0.05, within_s=5)
        assert took is not None and took < 3, took
        with socket.create_connection(
            ("127.0.0.1", server.port)
        ) as pipelined:  # a follow behind another request
            host = b"Host: 127.0.0.1:%d\r\n" % server.port
            pipelined.sendall(
                b"GET /api/runs HTTP/1.1\r\n"
                + host
                + b"\r\nGET /api/runs/long-answer/events HTTP/1.1\r\n"
                + host
                + b"\r\n"
            )
            pipelined.settimeout(5)
            began, received = time.monotonic(), b""
            while time.monotonic() - began < 1.5:  # three deadlines: heartbeats keep coming, the follow stays
                chunk = pipelined.recv(65536)
                assert chunk, received[-300:]
                received += chunk
            assert received.count(b"HTTP/1.1 200 ") == 2 and b"text/event-stream" in received
        stream = SseStream(server, "/api/runs/long-answer/events")
        events = stream.events()
        assert next(events).id == "0"
        time.sleep(1.5)  # three deadlines, heartbeats going out
        publish(bus_url, "long-answer", [p.Result(ok=True, subtype="success", exit_code=0)], first_seq=1)
        assert [json.loads(event.data)["type"] for event in events] == ["result"]
        kept = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)  # one connection kept alive
        try:
            for _ in range(2):
                kept.request("GET", "/api/runs")
                reply = kept.getresponse()
                assert (reply.status, json.loads(reply.read())["ok"]) == (200, True)
                time.sleep(0.3)  # under the deadline between requests
        finally:
            kept.close()
