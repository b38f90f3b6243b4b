"""Protocol v1: decoding, forward compatibility, the published schema."""

from __future__ import annotations

import gc
import json
import re
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentstream import protocol as p
from agentstream.errors import MalformedEventError

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_every_type_round_trips() -> None:
    seq = p.Sequencer("ses_1")
    events = [
        p.Start(command="exec", cwd="/w", model="m", provider="x", tools=["shell"]),
        p.MessageDelta(message_id="m1", content="He"),
        p.Message(message_id="m1", role="assistant", content="Hello"),
        p.ReasoningDelta(reasoning_id="r1", content="hm"),
        p.Reasoning(reasoning_id="r1", content="hmm"),
        p.ToolCall(call_id="c1", name="shell", arguments={"cmd": "ls"}),
        p.ToolProgress(call_id="c1", content="a\n"),
        p.ToolResult(
            call_id="c1", name="shell", status="success", output="a", duration_ms=3, truncated=False
        ),
        p.Step(name="turn", status="completed", duration_ms=5),
        p.Progress(name="dl", percent=50.0, current=5, total=10, message="half"),
        p.Log(level="warn", message="careful"),
        p.Status(status="streaming"),
        p.GenericEvent(name="video/download", data={"id": 1}),
        p.Usage(model="m", input_tokens=1, output_tokens=2, cost_usd=0.01),
        p.Error(code="RATE_LIMITED", message="slow down", recoverable=True, retry_in_ms=100),
        p.PermissionRequest(call_id="c1", name="shell", arguments={"command": "ls"}, timeout_ms=1000),
        p.Heartbeat(waiting_on="tool"),
        p.Result(
            ok=True, subtype="success", exit_code=0, next_actions=[p.NextAction(command="x", description="y")]
        ),
    ]
    assert {e.type for e in events} == p.EVENT_TYPES
    for event in events:
        seq.stamp(event)
        assert p.decode(p.encode(event)) == event


def test_events_are_not_walked_by_the_cycle_collector() -> None:
    """A reader holding a long session's events must not make every collection walk each of them."""
    built = p.ToolCall(call_id="c1", name="shell", arguments={"command": ["ls", "-l"]})  # a container inside
    decoded = p.decode_lines(
        b"".join(p.encode(p.Sequencer("s").stamp(event)) + b"\n" for event in (built, p.Status(status="x")))
    )
    for event in [built, *decoded, p.decode(p.encode(built))]:
        assert not gc.is_tracked(event), type(event).__name__
    for kind in p.EVENT_CLASSES:
        assert kind.__struct_config__.gc is False, kind.__name__


def test_optional_fields_are_omitted_not_null() -> None:
    line = p.encode(p.Sequencer("s").stamp(p.Status(status="ok")))
    assert b"null" not in line and b"message" not in line
    assert json.loads(line)["v"] == 1 and json.loads(line)["seq"] == 0


def test_unknown_fields_are_ignored() -> None:
    event = p.decode(
        b'{"type":"log","v":1,"session_id":"s","seq":3,"ts":"t","level":"info","message":"m","new":[1]}'
    )
    assert isinstance(event, p.Log) and event.message == "m"


def test_unknown_type_is_kept_whole() -> None:
    line = b'{"type":"rate_limit_event","v":1,"session_id":"s","seq":4,"info":{"x":1}}'
    event = p.decode(line)
    assert isinstance(event, p.UnknownEvent)
    assert event.type == "rate_limit_event" and event.seq == 4 and event.raw["info"] == {"x": 1}
    assert json.loads(p.encode(event)) == json.loads(line)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"not json", "not valid JSON"),
        (b"[1,2]", "JSON object"),
        (b'{"no_type":1}', "'type'"),
        (b'{"type":"log","level":"loud","message":"m"}', "bad 'log' event"),
        (b'{"type":"tool_call","call_id":"c"}', "bad 'tool_call' event"),
    ],
)
def test_malformed_lines_raise_a_precise_error(line: bytes, reason: str) -> None:
    with pytest.raises(MalformedEventError) as info:
        p.decode(line)
    assert reason in info.value.message and info.value.code == "MALFORMED_EVENT"


def test_published_schema_matches_the_code() -> None:
    from agentstream.cli.schema_cmd import schema_text

    published = (DOCS / "protocol.schema.json").read_text()
    assert published == schema_text(), (
        "docs/protocol.schema.json drifted: run `agentstream schema > docs/protocol.schema.json`"
    )


def test_published_input_schema_matches_the_code() -> None:
    from agentstream.cli.schema_cmd import schema_text

    published = (DOCS / "protocol.input.schema.json").read_text()
    assert published == schema_text(input_side=True), (
        "docs/protocol.input.schema.json drifted: run `agentstream schema --input > docs/protocol.input.schema.json`"
    )


def test_input_lines_decode_and_bad_ones_say_why() -> None:
    assert p.decode_input(b'{"type":"interrupt"}') == p.Interrupt()
    decision = p.decode_input(
        b'{"type":"permission_decision","call_id":"c1","decision":"deny","message":"no"}'
    )
    assert decision == p.PermissionDecision(call_id="c1", decision="deny", message="no")
    with pytest.raises(msgspec.ValidationError, match="decision"):
        p.decode_input(b'{"type":"permission_decision","call_id":"c1","decision":"maybe"}')


def test_schema_accepts_what_we_emit() -> None:
    schema = p.json_schema()
    names = {ref["$ref"].rsplit("/", 1)[1] for ref in schema["anyOf"]}
    assert len(names) == len(p.EVENT_TYPES)
    assert schema["discriminator"]["propertyName"] == "type"


def test_timestamps_are_rfc3339_utc_ms() -> None:
    ts = p.now_ts()
    assert msgspec.convert(ts, type=__import__("datetime").datetime, strict=False).tzinfo is not None
    assert len(ts) == 24 and ts.endswith("Z") and ts[19] == "."


_START = {
    "type": "start",
    "v": 1,
    "session_id": "s",
    "seq": 0,
    "ts": "2026-11-21T08:15:46.929Z",
    "command": "c",
}
_RESULT = {
    **_START,
    "type": "result",
    "seq": 1,
    "ok": True,
    "subtype": "success",
    "exit_code": 0,
}


@pytest.mark.parametrize(
    "line",
    [
        {**_START, "v": 2},
        {**_START, "seq": -1},
        {**_START, "ts": "yesterday"},
        {**_START, "ts": "2026-11-21 08:15:46"},
        {**_START, "ts": "٢٠٢٦-11-21T08:15:46.929Z"},
        {**_RESULT, "exit_code": 256},
        {**_RESULT, "ok": False, "exit_code": -1},
    ],
    ids=[
        "v-2",
        "seq-negative",
        "ts-not-a-time",
        "ts-no-zone",
        "ts-other-digits",
        "exit-256",
        "exit-negative",
    ],
)
def test_the_published_schema_refuses_what_the_protocol_forbids_and_the_reader_still_decodes(
    line: dict,
) -> None:
    """The schema states docs/protocol.md's rules; the reader stays liberal, and leaves them to the validator."""
    import jsonschema

    published = json.loads((DOCS / "protocol.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(published, format_checker=jsonschema.FormatChecker())
    assert list(validator.iter_errors(line)), f"the schema takes {line}"
    for good in (_START, _RESULT):
        assert not list(validator.iter_errors(good))
    assert p.decode(json.dumps(line).encode()).type == line["type"]


TIMESTAMP_EDGES = [
    "2026-11-27T03:04:58.123Z",
    "2026-11-27T03:04:58Z",
    "2026-11-27t03:04:58Z",
    "2026-11-27 03:04:58Z",
    "2026-11-27T03:04:58z",
    "2026-11-27T03:04:58.123456789+05:30",
    "2026-11-27T03:04:58.1234567891Z",
    "2026-11-27T03:04:58-23:59",
    "2026-11-27T03:04:58+24:00",
    "2026-11-27T03:04:58+0000",
    "2026-11-27T03:04:58",
    "2026-02-30T00:00:00Z",  # not a real day, but RFC 3339's grammar admits it
    "2026-11-27T23:59:60Z",  # a leap second
    "0000-01-01T00:00:00Z",
    "2026-13-01T00:00:00Z",
    "2026-00-10T00:00:00Z",
    "2026-11-32T00:00:00Z",
    "2026-11-27T24:00:00Z",
    "2026-11-27T03:60:00Z",
    "2026-11-27T03:04:61Z",
    "٢٠٢٦-11-27T03:04:58Z",
    '2026-11-27T03:04:58Z","2026-11-27T03:04:58Z',
    "2026-11-27T03:04:58Z\\",
    "2026-11-27T03:04:58Z\n2026-11-27T03:04:58Z",
    "\ud83d",
    "",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(TIMESTAMP_EDGES), min_size=1, max_size=6), st.integers(0, 40))
def test_a_block_of_timestamps_gets_the_verdict_of_each_alone(values: list[str], shift: int) -> None:
    """The block check (a shape comparison and a typed decode, else one regex) agrees with the check per value."""
    block = [value.replace("04:58", f"{shift // 60:02}:{shift % 60:02}", 1) for value in values]
    assert p.are_timestamps(block) == all(map(p.is_timestamp, block))


def test_a_block_of_one_shape_is_still_checked_value_by_value() -> None:
    same_shape = ["2026-11-27T03:04:58Z", "2026-11-27T03:04:59Z"]
    assert p.are_timestamps(same_shape)
    assert p.are_timestamps([*same_shape, "2026-02-30T00:00:00Z", "2026-11-27T23:59:60Z"])
    for wrong in (
        "2026-13-01T00:00:00Z",
        "2026-11-27T24:00:00Z",
        "2026-11-27T03:60:00Z",
        "2026-11-32T00:00:00Z",
    ):
        assert not p.are_timestamps([*same_shape, wrong]), wrong


def test_made_up_ids_are_unique_across_threads_and_a_fork() -> None:
    """Ids come from a pool of random bytes read many at a time: threads taking from it at once, and a child
    forked with part of it left, still never make an id twice."""
    import os
    import threading

    made: list[list[str]] = [[] for _ in range(8)]

    def make(into: list[str]) -> None:
        into.extend(p.new_id("msg") for _ in range(3 * p._IDS_PER_READ))

    threads = [threading.Thread(target=make, args=(into,)) for into in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [made_id for into in made for made_id in into]
    assert len(set(every)) == len(every) == 8 * 3 * p._IDS_PER_READ
    assert all(re.fullmatch(r"msg_[0-9a-f]{16}", made_id) for made_id in every)

    p.new_id("msg")  # part of a pool left for the child to inherit
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.write(write_end, p.new_id("msg").encode())
        os._exit(0)
    os.close(write_end)
    os.waitpid(child, 0)
    in_child = os.read(read_end, 100).decode()
    os.close(read_end)
    assert re.fullmatch(r"msg_[0-9a-f]{16}", in_child)
    assert in_child != p.new_id("msg")
