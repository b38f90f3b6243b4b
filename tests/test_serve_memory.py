"""What a run with huge records costs the server: a follower a few megabytes, a poll of the list its new events.

Run on SQLite and on a real ``redis-server``. Records of 1 MiB each stand for a tool's
whole output; the bounds checked are those of :mod:`agentstream.serve.hub`.
"""

from __future__ import annotations

import asyncio

from _bus_fixtures import RedisServer, bus_home, bus_url, redis_server  # noqa: F401
from _serve_support import Server, publish, request, until
from agentstream import protocol as p
from agentstream.bus import Record
from agentstream.serve import hub as hub_module

MIB = 1 << 20
RECORDS = 40


def _huge(seq: int) -> p.Log:
    return p.Log(level="info", message=f"{seq:04d}" + "x" * MIB)


def _bytes_of(records: list[Record]) -> int:
    return sum(len(record.line) for record in records)


def test_reading_a_stored_run_of_huge_records_brings_a_few_megabytes_at_a_time(bus_url: str) -> None:
    publish(bus_url, "huge-stored", [p.Start(command="exec big"), *[_huge(n) for n in range(RECORDS)]])
    publish(
        bus_url, "huge-stored", [p.Result(ok=True, subtype="success", exit_code=0)], first_seq=RECORDS + 1
    )
    hub = hub_module.RunHub(bus_url)

    async def follow() -> list[list[Record]]:
        return [batch async for batch in hub.batches("huge-stored", 0)]

    try:
        batches = asyncio.run(follow())
    finally:
        hub.close()
    assert [record.seq for batch in batches for record in batch] == list(range(RECORDS + 2))
    largest = max(_bytes_of(batch) for batch in batches)
    assert largest <= hub_module.READ_BYTES + MIB + 1024, largest  # a read asked for 1000 records: 40 MiB


def test_a_stalled_follower_holds_a_few_megabytes_of_huge_records_and_loses_none(bus_url: str) -> None:
    publish(bus_url, "huge-live", [p.Start(command="exec big")])
    hub = hub_module.RunHub(bus_url)

    async def scenario() -> None:
        follower = hub.batches("huge-live", 0)
        seen = [record.seq for record in await anext(follower)]
        pending = asyncio.ensure_future(anext(follower))  # subscribed, then waiting on its batches
        await until(lambda: hub.tail_next_seq("huge-live") is not None, "the follower's tail", polls=3000)
        for seq in range(1, RECORDS + 1):  # one batch each, while the follower takes none
            await asyncio.to_thread(publish, bus_url, "huge-live", [_huge(seq)], first_seq=seq)
        await until(
            lambda: hub.tail_next_seq("huge-live") == RECORDS + 1, "the tail to read them all", polls=3000
        )
        held = max(
            sum(_bytes_of(batch) for batch in queue._queue)  # type: ignore[attr-defined]
            for queue in hub._tails["huge-live"].followers
        )
        assert held <= hub_module.FOLLOWER_BYTES + MIB + 1024, held  # 32 batches: 32 MiB
        result = p.Result(ok=True, subtype="success", exit_code=0)
        await asyncio.to_thread(publish, bus_url, "huge-live", [result], first_seq=RECORDS + 1)
        seen += [record.seq for record in await pending]
        seen += [record.seq async for batch in follower for record in batch]
        assert seen == list(range(RECORDS + 2))

    try:
        asyncio.run(scenario())
    finally:
        hub.close()


def test_polling_the_run_list_reads_only_a_live_runs_new_events(redis_server: RedisServer) -> None:
    """Every open page asks for the run list every 1.5 s: a live run's usage must not cost a read of the whole
    run (here 20 MiB of tool output) each time, only of what came since. Counted by the real Redis's bytes out."""
    import redis

    url = redis_server.url
    publish(
        url,
        "busy",
        [
            p.Start(command="exec busy"),
            p.ToolCall(call_id="c", name="shell", arguments={}),
            *[p.ToolProgress(call_id="c", content="y" * MIB) for _ in range(20)],
            p.Usage(model="m", input_tokens=10, output_tokens=1),
        ],
    )
    client = redis.Redis(host="127.0.0.1", port=redis_server.port)

    def bytes_out() -> int:
        return int(client.info("stats")["total_net_output_bytes"])

    def tokens() -> int:
        reply = request(server, "GET", "/api/runs")
        assert reply.status == 200
        (row,) = [run for run in reply.json()["result"]["runs"] if run["run_id"] == "busy"]
        return int(row["tokens"])

    with Server(url) as server:
        assert tokens() == 11
        publish(url, "busy", [p.Usage(model="m", input_tokens=5, output_tokens=1)], first_seq=23)
        before = bytes_out()
        assert tokens() == 17
        assert request(server, "GET", "/api/runs/busy").json()["result"]["run"]["tokens"] == 17
        read = bytes_out() - before
    client.close()
    assert read < MIB, read  # summing anew read the whole run each time: over 40 MiB
