"""read() on broken input: bad lines become recoverable errors, the output is always a valid stream."""

from __future__ import annotations

import io
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _consumer_support import assert_valid_stream, canonical_session, is_synthetic
from agentstream import protocol as p
from agentstream.consumer import read

JUNK = [
    b"[SandboxDebug] seccomp filter installed",
    b"not json at all",
    b"[1, 2, 3]",
    b'{"no_type": true}',
    b'{"type": "message", "v": 1}',
    b"\xff\xfe garbage \x80",
    b"{",
]


def lines_of(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def kinds(events: list[p.AnyEvent]) -> list[str]:
    return [e.type for e in events]


def test_a_valid_stream_passes_through_unchanged() -> None:
    data = canonical_session()
    events = assert_valid_stream(read(data))
    assert b"".join(p.encode_line(e) for e in events) == data
    assert not any(is_synthetic(e) for e in events)


def test_junk_lines_mid_stream_become_recoverable_errors_and_nothing_is_lost() -> None:
    lines = lines_of(canonical_session())
    broken = [*lines[:2], b"[SandboxDebug] hello\n", b"{oops\n", *lines[2:]]
    events = assert_valid_stream(read(b"".join(broken)))
    errors = [e for e in events if isinstance(e, p.Error)]
    assert [(e.code, e.recoverable, e.details["line"]) for e in errors] == [
        ("MALFORMED_EVENT", True, 3),
        ("MALFORMED_EVENT", True, 4),
    ]
    assert errors[0].details["preview"] == "[SandboxDebug] hello"
    assert all(is_synthetic(e) for e in errors)
    originals = [p.decode(line) for line in lines]
    decoded = [e for e in events if not is_synthetic(e)]
    assert len(decoded) == len(originals)
    for index, (got, want) in enumerate(zip(decoded, originals, strict=False)):
        want.seq += 2 if index >= 2 else 0  # the two reports took seq 2 and 3; later events move up
        assert p.encode(got) == p.encode(want)
    assert events[-1].ok  # type: ignore[union-attr]


def test_preview_is_short() -> None:
    lines = lines_of(canonical_session())
    events = list(read(b"".join([lines[0], b"x" * 5000 + b"\n", *lines[1:]])))
    (error,) = [e for e in events if isinstance(e, p.Error)]
    assert len(error.details["preview"]) <= 120


def test_partial_last_line_is_reported_and_the_stream_is_closed() -> None:
    data = canonical_session(finish=False)
    lines = lines_of(data)
    cut = b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2]
    events = assert_valid_stream(read(cut))
    *_, partial, fatal, result = events
    assert (
        isinstance(partial, p.Error)
        and partial.code == "MALFORMED_EVENT"
        and partial.details["partial"] is True
    )
    assert isinstance(fatal, p.Error) and fatal.code == "STREAM_TRUNCATED" and not fatal.recoverable
    assert isinstance(result, p.Result) and result.synthetic is True and result.exit_code == 1
    assert result.error.code == "STREAM_TRUNCATED"  # type: ignore[union-attr]
    assert "cut off" in result.error.message  # type: ignore[union-attr]


def test_a_complete_last_line_without_newline_is_accepted() -> None:
    data = canonical_session()
    events = assert_valid_stream(read(data.rstrip(b"\n")))
    assert events[-1].ok and events[-1].synthetic is not True  # type: ignore[union-attr]


def test_truncated_stream_gets_a_result_with_the_totals_so_far() -> None:
    data = canonical_session(finish=False)
    events = assert_valid_stream(read(data))
    result = events[-1]
    assert isinstance(result, p.Result) and not result.ok and result.synthetic is True
    assert result.usage.input_tokens == 10 and result.turn_count == 1 and result.tools_used == ["calc"]
    assert result.result == "4"


def test_a_fatal_error_at_the_end_is_followed_only_by_a_result() -> None:
    def body(s):  # type: ignore[no-untyped-def]
        s.message("working")
        s.emit(p.Error(code="AUTH_EXPIRED", message="log in again", recoverable=False))

    events = assert_valid_stream(read(canonical_session(body, finish=False)))
    assert kinds(events)[-3:] == ["message", "error", "result"]
    assert events[-1].error.code == "AUTH_EXPIRED"  # type: ignore[union-attr]


def test_invalid_utf8_is_reported_and_the_event_kept_with_replacement_characters() -> None:
    lines = lines_of(canonical_session())
    bad = p.encode_line(
        p.Message(message_id="m9", role="assistant", content="caf\u00e9", session_id="x", seq=1)
    )
    bad = bad.replace("é".encode(), b"\xe9")
    events = list(read(b"".join([lines[0], bad, *lines[1:]])))
    codes = [e.code for e in events if isinstance(e, p.Error)]
    assert codes == ["INVALID_UTF8"]
    (error,) = [e for e in events if isinstance(e, p.Error)]
    assert error.details == {"line": 2, "offset": len(bad.split(b"\xe9")[0])}
    assert [e.content for e in events if isinstance(e, p.Message) and e.message_id == "m9"] == ["caf\ufffd"]


def test_unknown_types_pass_through_whole() -> None:
    lines = lines_of(canonical_session())
    session_id = p.decode(lines[0]).session_id
    novel = (
        b'{"type":"hologram","v":1,"session_id":"%s","seq":1,"ts":"","beam":[1,2]}\n' % session_id.encode()
    )
    shifted = [p.decode(line) for line in lines[1:]]
    for event in shifted:
        event.seq += 1
    events = assert_valid_stream(read(b"".join([lines[0], novel, *(p.encode_line(e) for e in shifted)])))
    (unknown,) = [e for e in events if isinstance(e, p.UnknownEvent)]
    assert unknown.type == "hologram" and unknown.raw["beam"] == [1, 2]
    assert not any(isinstance(e, p.Error) for e in events)


def test_a_stream_that_lost_its_beginning_gets_a_start_and_counts_from_0() -> None:
    lines = lines_of(canonical_session())
    events = assert_valid_stream(read(b"".join(lines[3:])))
    assert isinstance(events[0], p.Start) and events[0].synthetic is True
    kept = [msgspec.structs.replace(e, seq=-1) for e in events[1:]]  # type: ignore[type-var]
    assert kept == [msgspec.structs.replace(p.decode(line), seq=-1) for line in lines[3:]]  # type: ignore[type-var]


def test_with_turns_one_reading_stops_at_the_result() -> None:
    data = canonical_session()
    trailing = p.encode_line(p.Message(message_id="late", role="assistant", content="late", seq=99))
    source = io.BytesIO(data + trailing + b"garbage\n")
    events = assert_valid_stream(read(source, turns="one"))
    assert events[-1].synthetic is not True and not any(isinstance(e, p.Error) for e in events)


def test_an_event_after_the_result_opens_the_next_turn_and_junk_alone_does_not() -> None:
    data = canonical_session()
    late = p.encode_line(p.Message(message_id="late", role="assistant", content="late", seq=99))
    events = assert_valid_stream(read(data + late + b"garbage\n"), turns=2)
    second = events[events.index(next(e for e in events if isinstance(e, p.Result))) + 1 :]
    assert isinstance(second[0], p.Start) and second[0].synthetic is True
    assert [e.content for e in second if isinstance(e, p.Message)] == ["late"]
    assert any(isinstance(e, p.Error) and e.code == "MALFORMED_EVENT" for e in second)
    reader = read(data + b"garbage\n")
    assert_valid_stream(reader, turns=1)
    reports, count = reader.after_end
    assert count == 1 and reports[0].code == "MALFORMED_EVENT"  # type: ignore[attr-defined]


def test_blank_lines_are_ignored() -> None:
    lines = lines_of(canonical_session())
    events = assert_valid_stream(read(b"\n \n".join(lines)))
    assert not any(isinstance(e, p.Error) for e in events)


def test_a_decoder_failing_at_end_of_input_is_reported_and_what_it_queued_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentstream.dialects.gemini import GeminiDecoder

    def fail(self: GeminiDecoder) -> None:
        raise RuntimeError("run table corrupted")

    monkeypatch.setattr(
        GeminiDecoder, "close_named_runs", fail
    )  # runs after finish() queued the closing message
    lines = [
        b'{"type":"init","timestamp":"2026-01-01T00:00:00.000Z","session_id":"s1","model":"m"}',
        b'{"type":"message","timestamp":"2026-01-01T00:00:00.100Z","role":"assistant","content":"Hel","delta":true}',
        b'{"type":"message","timestamp":"2026-01-01T00:00:00.200Z","role":"assistant","content":"lo","delta":true}',
    ]
    events = assert_valid_stream(read(b"\n".join(lines) + b"\n", dialect="gemini"))
    assert kinds(events) == ["start", "message_delta", "message_delta", "message", "error", "error", "result"]
    assert events[3].content == "Hello"  # type: ignore[union-attr]
    failed, truncated = events[4], events[5]
    assert isinstance(failed, p.Error) and failed.code == "MALFORMED_EVENT" and failed.recoverable
    assert "run table corrupted" in failed.message and failed.synthetic is True
    assert isinstance(truncated, p.Error) and truncated.code == "STREAM_TRUNCATED"


def test_an_empty_input_still_gives_a_whole_stream() -> None:
    events = assert_valid_stream(read(b""))
    assert kinds(events) == ["start", "error", "result"]
    assert all(is_synthetic(e) for e in events)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_junk_anywhere_keeps_the_output_valid_and_every_event(data: st.DataObject) -> None:
    lines = lines_of(canonical_session())
    broken = list(lines)
    inserts = data.draw(st.lists(st.tuples(st.integers(0, len(lines)), st.sampled_from(JUNK)), max_size=6))
    for position, junk in sorted(inserts, reverse=True):
        broken.insert(position, junk + b"\n")
    truncate = data.draw(st.booleans())
    if truncate:
        broken = broken[: data.draw(st.integers(0, len(broken)))]
    events = assert_valid_stream(read(b"".join(broken)))
    kept = [e for e in events if not is_synthetic(e)]
    expected = [p.decode(line) for line in broken if line in lines]
    assert [(e.type, getattr(e, "message_id", None)) for e in kept] == [
        (e.type, getattr(e, "message_id", None)) for e in expected
    ]


def test_an_event_without_a_time_gets_the_time_it_was_read() -> None:
    """Inside a turn too, where events go through the reader in one loop (an empty ``ts`` is not one to keep)."""
    lines = [
        b'{"type":"start","v":1,"session_id":"s","seq":0,"ts":"2026-02-19T08:25:00.000Z","command":"x"}',
        b'{"type":"step","v":1,"session_id":"s","seq":1,"name":"download","status":"started"}',
        b'{"type":"step","v":1,"session_id":"s","seq":2,"ts":"","name":"download","status":"completed"}',
        b'{"type":"result","v":1,"session_id":"s","seq":3,"ts":"2026-02-19T08:26:00.000Z","ok":true,'
        b'"subtype":"success","exit_code":0}',
    ]
    events = list(read(b"\n".join(lines) + b"\n", "canonical"))
    assert [e.type for e in events] == ["start", "step", "step", "result"]
    assert all(p.is_timestamp(e.ts) for e in events)
    assert events[0].ts == "2026-02-19T08:25:00.000Z"


def test_a_made_up_result_after_a_huge_last_message_carries_its_first_mebibyte() -> None:
    """The reader keeps no more than that for its made-up ending, whatever the message's size."""
    from agentstream.transcript import OPEN_TEXT_LIMIT

    text = "word " * (OPEN_TEXT_LIMIT // 5 + 100)
    session = canonical_session(lambda s: s.message(text), finish=False)
    events = list(read(session))
    result = events[-1]
    assert isinstance(result, p.Result) and result.synthetic is True
    assert result.result == text[:OPEN_TEXT_LIMIT] + "…"
    assert [e.content for e in events if isinstance(e, p.Message)] == [text]  # the message itself is whole


def test_interrupted_ends_the_open_turn_whole_from_either_reader() -> None:
    """What a program stopped mid-read writes last: the open work closed, INTERRUPTED, a result with 128 + n."""
    import asyncio
    import signal

    from agentstream.consumer import aread

    session = canonical_session(lambda s: s.message_delta("half", message_id="m"), finish=False)

    def check(events: list[p.AnyEvent]) -> None:
        assert_valid_stream(events)
        closed, error, result = events[-3:]
        assert isinstance(closed, p.Message) and closed.content == "half" and closed.synthetic is True
        assert isinstance(error, p.Error) and error.code == "INTERRUPTED" and "SIGINT" in error.message
        assert isinstance(result, p.Result) and (result.subtype, result.exit_code) == ("interrupted", 130)

    reader = read(session)
    first = next(reader.batches())  # the whole session is one chunk: read, not yet finished
    check(first + reader.interrupted(signal.SIGINT))
    assert reader.interrupted(signal.SIGINT) == []  # ended once

    async def read_then_stop() -> list[p.AnyEvent]:
        areader = aread(session)
        batches = areader.batches()
        events = await batches.__anext__()
        return events + areader.interrupted(signal.SIGINT)

    check(asyncio.run(read_then_stop()))


@pytest.mark.parametrize("blank", [b"", b"  \n"], ids=["alone", "beside-a-blank-line"])
def test_a_line_of_two_events_reads_alike_in_a_block_and_alone(blank: bytes) -> None:
    """The canonical fast path (a block in one call) must not pass what the line-by-line path calls malformed
    (a blank line beside it would even make the block's count of events match its count of lines)."""
    lines = canonical_session().splitlines(keepends=True)
    two_on_one = lines[1].rstrip(b"\n") + b" " + lines[2]
    data = [lines[0], two_on_one, *([blank] if blank else []), *lines[3:]]
    in_blocks = list(read([data[0], b"".join(data[1:])]))  # the turn open: the rest is one block
    alone = list(read(data))  # one line per chunk
    assert [e.type for e in in_blocks] == [e.type for e in alone]
    bad = [e for e in in_blocks if isinstance(e, p.Error)]
    assert bad[0].code == "MALFORMED_EVENT" and bad[0].details["line"] == 2  # type: ignore[index]


def _canonical_line(kind: str, **fields: object) -> bytes:
    stamps = {"v": 1, "session_id": "s1", "seq": 0, "ts": "2025-01-01T00:00:00Z"}
    return msgspec.json.encode({"type": kind, **stamps, **fields})


def test_a_canonical_field_of_the_wrong_kind_loses_that_field_not_the_event() -> None:
    """The canonical reader is as liberal as the dialects'; ``validate`` is what holds a stream to the letter."""
    usage = {"input_tokens": "10", "output_tokens": 1, "cached_tokens": 0, "reasoning_tokens": 0}
    data = b"\n".join(
        [
            _canonical_line("start", command="x", tools="all"),
            _canonical_line("message", message_id="m", role="assistant", content="hi", seq="two"),
            _canonical_line("message", message_id="m2", role="assistant", content="again", seq="three"),
            _canonical_line(
                "result", ok=True, subtype="success", exit_code=0, duration_ms="fast", turn_count=1,
                tools_used=[True, "Bash"], usage=usage,
            ),
        ]
    ) + b"\n"  # fmt: skip
    events = assert_valid_stream(read(data), turns=None)
    assert kinds(events) == ["start", "log", "log", "message", "message", "log", "log", "log", "result"]
    warnings = [e.message for e in events if isinstance(e, p.Log)]
    assert warnings[0] == "canonical 'start' line: field 'tools' was ignored (Expected `array`, got `str`)"
    assert [w.split("'")[3] for w in warnings] == [
        "tools",
        "seq",
        "duration_ms",
        "tools_used[0]",
        "usage.input_tokens",
    ]
    assert all(e.level == "warn" for e in events if isinstance(e, p.Log))  # 'seq' told once, for two lines
    result = events[-1]
    assert isinstance(result, p.Result) and result.ok and not is_synthetic(result)
    assert (result.duration_ms, result.tools_used, result.usage.input_tokens) == (0, ["Bash"], 0)


def test_a_canonical_number_where_text_is_meant_is_read_as_its_text() -> None:
    """As in every dialect: ids sent as numbers keep their event, and a call pairs with its result by them."""
    data = b"\n".join(
        [
            _canonical_line("start", command="x", tools=["Bash", 7]),
            _canonical_line("tool_call", call_id=5, name="Bash", arguments={}),
            _canonical_line("tool_result", call_id="5", name="Bash", status="success", output=2.5),
            _canonical_line("message", message_id=6, role="assistant", content=8),
        ]
    ) + b"\n"  # fmt: skip
    events = list(read(data))
    assert kinds(events)[:4] == ["start", "tool_call", "tool_result", "message"]
    start, call, result, message = events[:4]
    assert isinstance(start, p.Start) and start.tools == ["Bash", "7"]
    assert isinstance(call, p.ToolCall) and call.call_id == "5"
    assert isinstance(result, p.ToolResult) and (result.call_id, result.output) == ("5", "2.5")
    assert not is_synthetic(result)
    assert isinstance(message, p.Message) and (message.message_id, message.content) == ("6", "8")


def test_a_canonical_event_without_a_field_it_cannot_do_without_is_reported_by_name() -> None:
    data = _canonical_line("message", message_id=True, role="assistant", content="hi") + b"\n"
    errors = [e for e in read(data) if isinstance(e, p.Error) and e.code == "MALFORMED_EVENT"]
    assert len(errors) == 1 and "`$.message_id`" in errors[0].message and errors[0].fix


@pytest.mark.parametrize(
    ("value", "kind"), [(b"1e400", "an infinite number"), (b"-1e400", "an infinite number"), (b"NaN", "NaN")]
)
def test_a_number_other_parsers_take_loses_its_field_not_the_line(value: bytes, kind: str) -> None:
    """JSON allows any exponent; Python's json.dumps writes NaN. Neither is a number a field can take."""
    init = b'{"type":"system","subtype":"init","cwd":"/p","session_id":"s-1","tools":[],"model":"m"}'
    result = (
        b'{"type":"result","subtype":"success","is_error":false,"duration_ms":%s,"result":"done"}' % value
    )
    events = assert_valid_stream(read(init + b"\n" + result + b"\n", "claude"), turns=None)
    end = events[-1]
    assert isinstance(end, p.Result) and end.ok and not is_synthetic(end) and end.duration_ms == 0
    assert [e.message for e in events if isinstance(e, p.Log)] == [
        f"claude 'result' line: field 'duration_ms' must be an integer, not {kind}; the field was ignored"
    ]


def test_a_lone_surrogate_escape_keeps_its_event_with_a_replacement_character() -> None:
    """JavaScript's JSON.stringify writes one for a string cut mid-emoji; msgspec refuses it, the reader does not."""
    line = b'{"type":"item.completed","item":{"id":"i1","type":"agent_message","text":"half \\ud83d, whole \\ud83d\\ude00"}}'
    events = list(read(b'{"type":"thread.started","thread_id":"t"}\n' + line + b"\n", "codex"))
    messages = [e for e in events if isinstance(e, p.Message)]
    assert [m.content for m in messages] == ["half \ufffd, whole \U0001f600"]
    assert not [e for e in events if isinstance(e, p.Error) and e.code == "MALFORMED_EVENT"]


# -- text sources: encoded as UTF-8, the protocol's encoding ---------------------------------


def _session(text: str) -> bytes:
    return canonical_session(lambda s: s.message(text))


def _text_sources(text: str) -> dict[str, object]:
    return {
        "StringIO": io.StringIO(text),
        "str chunks": [text[:7], text[7:]],
        "str lines": io.StringIO(text).readlines(),
        "generator": (line for line in text.splitlines(keepends=True)),
    }


@pytest.mark.parametrize("kind", ["StringIO", "str chunks", "str lines", "generator"])
def test_text_sources_read_as_their_utf8_bytes(kind: str) -> None:
    data = _session("é ✓ 𝄞 everywhere")
    expected = list(read(data))
    assert list(read(_text_sources(data.decode())[kind])) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["StringIO", "str chunks", "str lines", "async generator"])
def test_aread_takes_text_as_read_does(kind: str) -> None:
    import asyncio

    from agentstream.consumer import aread

    data = _session("é ✓")
    text = data.decode()

    async def lines():  # type: ignore[no-untyped-def]
        for line in text.splitlines(keepends=True):
            yield line

    source = lines() if kind == "async generator" else _text_sources(text)[kind]

    async def collect() -> list[p.AnyEvent]:
        return [event async for event in aread(source)]  # type: ignore[arg-type]

    assert asyncio.run(collect()) == list(read(data))


@pytest.mark.parametrize(
    "source", [[1, 2], [None], 3.5, [{"type": "start"}]], ids=["ints", "none", "float", "dicts"]
)
def test_a_source_of_neither_bytes_nor_text_is_a_clear_type_error(source: object) -> None:
    with pytest.raises(TypeError, match="pass a path, a file object, or chunks of bytes or of str"):
        list(read(source))  # type: ignore[arg-type]


# -- noise before a pretty-printed JSON document (a CLI's banner before its -o json output) ----------

GEMINI_DOCUMENT = b"""{
  "session_id": "s9",
  "response": "Hello world",
  "stats": {
    "models": {
      "gemini-2.5-pro": {
        "api": {"totalRequests": 1, "totalErrors": 0, "totalLatencyMs": 100},
        "tokens": {"input": 10, "prompt": 12, "candidates": 5, "total": 17, "cached": 2, "thoughts": 0, "tool": 0}
      }
    },
    "tools": {"totalCalls": 0, "totalSuccess": 0, "totalFail": 0, "totalDurationMs": 0, "totalDecisions": {}, "byName": {}},
    "files": {"totalLinesAdded": 0, "totalLinesRemoved": 0}
  }
}
"""


@pytest.mark.parametrize("dialect", ["auto", "gemini"])
@pytest.mark.parametrize("max_line_bytes", [None, 1 << 20])
@pytest.mark.parametrize("chunk", [1 << 16, 7])
def test_noise_before_a_document_is_reported_and_the_document_read(
    dialect: str, max_line_bytes: int | None, chunk: int
) -> None:
    data = b"Loaded cached credentials.\n\n" + GEMINI_DOCUMENT + b"OpenTelemetry SDK shut down successfully\n"
    chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)]
    reader = read(chunks, dialect, max_line_bytes=max_line_bytes)
    events = assert_valid_stream(reader)
    assert reader.dialect == "gemini"
    assert kinds(events) == ["start", "error", "message", "usage", "result"]
    noise = events[1]
    assert isinstance(noise, p.Error) and noise.code == "MALFORMED_EVENT" and noise.details["line"] == 1
    assert isinstance(events[2], p.Message) and events[2].content == "Hello world"
    result = events[-1]
    assert isinstance(result, p.Result) and result.ok and result.usage.output_tokens == 5
    assert reader.after_end[1] == 1  # the trailing OTel line: noise after the run, reported aside


def test_a_document_after_too_much_noise_is_read_line_by_line() -> None:
    """Noise before a document is bounded like noise before detection: past it, lines are lines."""
    from agentstream.consumer.pipeline import DETECT_NOISE_LINES

    data = b"noise\n" * DETECT_NOISE_LINES + GEMINI_DOCUMENT
    for dialect in ("auto", "gemini"):
        events = assert_valid_stream(read(data, dialect))
        assert not any(isinstance(e, p.Message) for e in events)
        assert isinstance(events[-1], p.Result) and not events[-1].ok


def test_a_brace_line_after_the_first_event_opens_no_document() -> None:
    data = canonical_session()
    first, rest = data.split(b"\n", 1)
    events = assert_valid_stream(read(first + b"\nnoise\n{\n" + rest, "canonical"))
    assert [e.details["line"] for e in events if isinstance(e, p.Error) and e.code == "MALFORMED_EVENT"] == [
        2,
        3,
    ]


# -- a fatal error followed by a result that says ok ---------------------------------------------------


def _fatal_then(result: p.Result) -> bytes:
    sequencer = p.Sequencer("s1")
    events = [
        p.Start(command="t"),
        p.Error(code="UPSTREAM", message="rate limited", recoverable=False, fix="wait"),
        result,
    ]
    return b"".join(p.encode_line(sequencer.stamp(e)) for e in events)


def test_a_result_saying_ok_after_a_fatal_error_becomes_its_failure() -> None:
    events = assert_valid_stream(read(_fatal_then(p.Result(ok=True, subtype="success", exit_code=0))))
    fatal, result = events[-2:]
    assert isinstance(fatal, p.Error) and not fatal.recoverable
    assert isinstance(result, p.Result)
    assert (result.ok, result.exit_code, result.subtype) == (False, 1, "error")
    assert result.error == p.ErrorInfo(code="UPSTREAM", message="rate limited", fix="wait")


def test_a_locus_error_chunk_before_a_successful_done_fails_the_run() -> None:
    """Locus 0.16 sends its stream error, then ``done`` with exit code 0 and success."""
    lines = [
        {"type": "start", "payload": {"command": "exec"}},
        {"type": "text_delta", "payload": {"content": "Hi"}},
        {
            "type": "error",
            "payload": {"error": {"code": "UNKNOWN", "message": "rate limited", "recoverable": False}},
        },
        {"type": "done", "payload": {"exitCode": 0, "duration": 3, "success": True}},
    ]
    data = b"".join(
        msgspec.json.encode({"protocol": 1, "sessionId": "s1", "timestamp": 1771000000000 + i, **line})
        + b"\n"
        for i, line in enumerate(lines)
    )
    events = assert_valid_stream(read(data))
    result = events[-1]
    assert isinstance(result, p.Result) and not result.ok and result.exit_code == 1
    assert not isinstance(result.error, msgspec.UnsetType) and result.error.code == "UNKNOWN"


def test_a_failed_result_after_a_fatal_error_keeps_its_own_error_and_exit_code() -> None:
    own = p.ErrorInfo(code="MAX_TURNS", message="too many turns")
    events = assert_valid_stream(
        read(_fatal_then(p.Result(ok=False, subtype="error", exit_code=3, error=own)))
    )
    fatal, result = events[-2:]
    assert isinstance(fatal, p.Error) and fatal.recoverable  # a notice: the result says why the run failed
    assert isinstance(result, p.Result) and result.error == own and result.exit_code == 3
    silent = assert_valid_stream(read(_fatal_then(p.Result(ok=False, subtype="error", exit_code=3))))[-1]
    assert isinstance(silent, p.Result) and silent.exit_code == 3
    assert not isinstance(silent.error, msgspec.UnsetType) and silent.error.code == "UPSTREAM"


def test_a_text_file_read_partly_is_read_on_from_where_its_reader_stopped(tmp_path: Path) -> None:
    """After a readline() the text layer holds bytes its buffer has passed: they are read, not lost."""
    lines = [
        b'{"type":"start","v":1,"session_id":"s","seq":0,"ts":"2026-01-01T00:00:00Z","command":"t"}\n',
        b'{"type":"message","v":1,"session_id":"s","seq":1,"ts":"2026-01-01T00:00:00Z","message_id":"m",'
        b'"role":"assistant","content":"kept"}\n',
        b'{"type":"result","v":1,"session_id":"s","seq":2,"ts":"2026-01-01T00:00:00Z","ok":true,'
        b'"subtype":"success","exit_code":0}\n',
    ]
    path = tmp_path / "run.ndjson"
    path.write_bytes(b'{"note":"a header line the caller reads itself"}\n' + b"".join(lines))
    with open(path, encoding="utf-8") as text:
        text.readline()
        events = list(read(text, "canonical"))
    assert [e.type for e in events] == ["start", "message", "result"]


def test_a_reader_read_twice_says_so() -> None:
    """An input is read once: a second pass would silently be empty (or fail on the closed file)."""
    reader = read(
        b'{"type":"start","v":1,"session_id":"s","seq":0,"ts":"2026-01-01T00:00:00Z","command":"t"}\n'
    )
    assert [e.type for e in reader] == ["start", "error", "result"]  # cut off: its ending made up
    with pytest.raises(RuntimeError, match="read already"):
        list(reader)
