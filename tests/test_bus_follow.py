"""``agentstream follow`` in real processes, on both backends."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from _bus_fixtures import PRODUCER, bus_home, bus_url, cli, events, free_port, lines_of, spawn_cli  # noqa: F401
from agentstream import protocol as p
from agentstream.bus import Record, open_bus
from agentstream.envelope import fill
from agentstream.errors import ExitCode
from agentstream.validate import validate_stream
from conftest import signal_twice_with_stdout_unread


def produce(bus_url: str, plan: str, run_id: str) -> subprocess.CompletedProcess[bytes]:
    """Run the test producer to its end; its stdout is the run as the producer wrote it."""
    argv = [sys.executable, str(PRODUCER), plan, "--session-id", run_id, "--bus", bus_url]
    return subprocess.run(argv, capture_output=True, timeout=30)


def start_producer(bus_url: str, plan: str, run_id: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, str(PRODUCER), plan, "--session-id", run_id, "--bus", bus_url]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def terminal(output: bytes) -> p.Result:
    event = p.decode(output.splitlines()[-1])
    assert isinstance(event, p.Result)
    return event


def assert_one_terminal_last(output: bytes) -> None:
    kinds = [obj["type"] for obj in lines_of(output)]
    assert kinds.count("result") == 1 and kinds[-1] == "result", kinds


def made_up_part(output: bytes, run_id: str) -> list[dict]:  # type: ignore[type-arg]
    """The follower's own lines: its ending, in a session of its own (seq from 0), after all of the run's."""
    objs = lines_of(output)
    ours = [o for o in objs if o["session_id"] != run_id]
    assert ours and objs[-len(ours) :] == ours, "the follower's lines come last, together"
    assert len({o["session_id"] for o in ours}) == 1 and ours[0]["session_id"].startswith("follow_")
    assert [o["seq"] for o in ours] == list(range(len(ours))) and all(o["synthetic"] for o in ours)
    return ours


def as_the_runs_continuation(output: bytes, run_id: str) -> bytes:
    """The output with the follower's ending read as the rest of the run, to check that it closes what was open."""
    objs = lines_of(output)
    ours = made_up_part(output, run_id)
    printed = objs[: len(objs) - len(ours)]
    next_seq = printed[-1]["seq"] + 1 if printed else 0
    lines = output.splitlines()[: len(printed)]
    for offset, obj in enumerate(ours):
        lines.append(msgspec.json.encode({**obj, "session_id": run_id, "seq": next_seq + offset}))
    return b"".join(line + b"\n" for line in lines)


def resume_seq(end: p.Result) -> int:
    """The seq the first next action resumes at (``agentstream follow RUN --from-seq N``)."""
    argv = fill(end.next_actions[0])
    assert argv[:2] == ["agentstream", "follow"] and argv[3] == "--from-seq", argv
    return int(argv[4])


def test_follow_replays_the_producers_lines_verbatim_and_ends_with_its_result(bus_url: str) -> None:
    produced = produce(bus_url, "events=4", "run_a")
    assert produced.returncode == 0, produced.stderr
    followed = cli("follow", "run_a", "--bus", bus_url)
    assert followed.returncode == 0, followed.stderr
    mine, theirs = followed.stdout.splitlines(), produced.stdout.splitlines()
    assert mine[:-1] == theirs[:-1]  # byte for byte: same session, same seq, same ts
    end = terminal(followed.stdout)
    assert (end.session_id, end.seq, end.ok, end.synthetic) == ("run_a", 5, True, p.UNSET)
    replay = [a for a in end.next_actions if a.command.startswith("agentstream follow")]
    assert fill(replay[0])[:3] == ["agentstream", "follow", "run_a"]
    assert any(a.command.startswith("agentstream runs") for a in end.next_actions)


def test_follow_from_a_seq_and_past_the_end(bus_url: str) -> None:
    assert produce(bus_url, "events=4", "run_a").returncode == 0
    followed = cli("follow", "run_a", "--from-seq", "3", "--bus", bus_url)
    assert [o["seq"] for o in lines_of(followed.stdout)] == [3, 4, 5]
    past = cli("follow", "run_a", "--from-seq", "50", "--bus", bus_url)
    assert [o["type"] for o in lines_of(past.stdout)] == ["result"]  # still ends with the run's terminal
    assert past.returncode == 0


def test_the_follower_exits_with_the_runs_exit_code(bus_url: str) -> None:
    assert produce(bus_url, "events=1 fail", "run_f").returncode == 1
    followed = cli("follow", "run_f", "--bus", bus_url)
    end = terminal(followed.stdout)
    assert followed.returncode == end.exit_code == 1 and not end.ok and end.error.code == "TOOL_FAILED"


def test_many_followers_of_a_live_run_see_the_same_complete_stream(bus_url: str) -> None:
    followers = [spawn_cli("follow", "live", "--wait", "--timeout", "30", "--bus", bus_url) for _ in range(4)]
    time.sleep(0.3)  # let some followers start before the run exists
    producer = start_producer(bus_url, "events=30 interval=0.01", "live")
    produced, _ = producer.communicate(timeout=30)
    outputs = [f.communicate(timeout=30)[0] for f in followers]
    for follower, output in zip(followers, outputs, strict=False):
        assert follower.returncode == 0
        assert [o["seq"] for o in lines_of(output)] == list(range(32))
        assert output.splitlines()[:-1] == produced.splitlines()[:-1]


def test_timeout_ends_with_a_synthetic_terminal_that_says_how_to_resume(bus_url: str) -> None:
    with open_bus(bus_url) as bus:
        bus.append("slow", events("slow", 3))
    followed = cli("follow", "slow", "--timeout", "0.5", "--bus", bus_url)
    assert followed.returncode == ExitCode.TIMEOUT
    assert_one_terminal_last(followed.stdout)
    end = terminal(followed.stdout)
    assert (end.synthetic, end.ok, end.subtype, end.exit_code) == (True, False, "follow_timeout", 124)
    error, result = made_up_part(followed.stdout, "slow")  # in the follower's own session: no seq of the run
    assert error["details"] == {"run_id": "slow", "resume_seq": 3} and result["seq"] == end.seq == 1
    assert end.error.code == "TIMEOUT"
    with open_bus(bus_url) as bus:
        bus.append("slow", events("slow", 2, start=3, final=True))
    resume = fill(end.next_actions[0])  # agentstream follow slow --from-seq 3
    assert resume == ["agentstream", "follow", "slow", "--from-seq", "3"]
    rest = cli(*resume[1:], "--bus", bus_url)
    assert [o["seq"] for o in lines_of(rest.stdout)] == [3, 4] and rest.returncode == 0


def test_a_dead_run_followed_mid_tool_call_ends_whole(bus_url: str) -> None:
    """The follower gives up on a run whose producer died with a tool call and a delta run open."""
    open_work: list[p.BaseEvent] = [
        p.Start(command="test"),
        p.MessageDelta(message_id="m", content="half a thou"),
        p.ToolCall(call_id="c", name="shell"),
        p.ToolProgress(call_id="c", content="working"),
    ]
    sequencer = p.Sequencer("dead")
    records = [Record(e.seq, e.type, p.encode(e)) for e in map(sequencer.stamp, open_work)]
    with open_bus(bus_url) as bus:
        bus.append("dead", records)
    followed = cli("follow", "dead", "--timeout", "0.5", "--bus", bus_url)
    assert followed.returncode == ExitCode.TIMEOUT
    whole = as_the_runs_continuation(followed.stdout, "dead")
    assert [str(v) for v in validate_stream(io.BytesIO(whole))] == []
    made_up = made_up_part(followed.stdout, "dead")
    assert [o["type"] for o in made_up] == ["tool_result", "message", "error", "result"]
    assert made_up[0]["status"] == "error" and made_up[1]["content"] == "half a thou"


def test_very_long_lines_are_followed_and_watched_byte_for_byte(bus_url: str) -> None:
    """Lines over a mebibyte (no copy is made to store or print them) come out as stored, and a closed call
    or reasoning run, however long its text, is not closed again by the follower's made-up ending."""
    output = 'a long tool output \\ " é\n' * 60_000
    work: list[p.BaseEvent] = [
        p.Start(command="test"),
        p.Reasoning(reasoning_id="r", content="thought " * 150_000),
        p.ToolCall(call_id="done", name="shell"),
        p.ToolResult(call_id="done", name="shell", status="success", output=output),
        p.ToolCall(call_id="open", name="shell"),
    ]
    sequencer = p.Sequencer("long")
    records = [Record(e.seq, e.type, p.encode(e)) for e in map(sequencer.stamp, work)]
    assert len(records[1].line) > 1 << 20 and len(records[3].line) > 1 << 20
    with open_bus(bus_url) as bus:
        bus.append("long", records)
    followed = cli("follow", "long", "--timeout", "0.5", "--bus", bus_url)
    assert followed.returncode == ExitCode.TIMEOUT, followed.stderr
    printed = followed.stdout.splitlines()
    assert printed[:5] == [r.line for r in records]
    whole = as_the_runs_continuation(followed.stdout, "long")
    assert [str(v) for v in validate_stream(io.BytesIO(whole))] == []
    made_up = made_up_part(followed.stdout, "long")
    assert [(o["type"], o.get("call_id")) for o in made_up] == [
        ("tool_result", "open"),
        ("error", None),
        ("result", None),
    ]
    watched = cli("watch", "--from-start", "--count", "5", "--bus", bus_url)
    assert watched.stdout.splitlines()[:5] == [r.line for r in records], watched.stderr


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_ends_the_follower_with_exactly_one_terminal(bus_url: str, sig: int, code: int) -> None:
    with open_bus(bus_url) as bus:
        bus.append("open", events("open", 2))
    follower = spawn_cli("follow", "open", "--bus", bus_url)
    first = follower.stdout.readline()  # it is running and has printed seq 0
    assert msgspec.json.decode(first)["seq"] == 0
    time.sleep(0.2)
    follower.send_signal(sig)
    rest, err = follower.communicate(timeout=10)
    output = first + rest
    assert follower.returncode == code, err
    assert_one_terminal_last(output)
    end = terminal(output)
    assert (end.subtype, end.exit_code, end.synthetic) == ("follow_interrupted", code, True)
    assert end.session_id != "open" and resume_seq(end) == 2  # both of the run's events were printed
    assert b"Traceback" not in err


@pytest.mark.parametrize("command", [["follow", "big"], ["watch", "--from-start"]])
def test_a_second_signal_ends_a_follower_whose_stdout_is_not_read(bus_url: str, command: list[str]) -> None:
    """A follower stuck writing to a full pipe holds the first signal for its line; the second ends it."""
    with open_bus(bus_url) as bus:
        bus.append("big", events("big", 3000))  # far more than a pipe holds
    code, err = signal_twice_with_stdout_unread(spawn_cli(*command, "--bus", bus_url))
    assert code == 130, err
    assert b"stdout is not being read" in err and b"Traceback" not in err


def assert_resumed_whole(stopped: bytes, resumed: bytes, run_id: str, produced: list[bytes]) -> None:
    """A stopped follower's output, then its resume's: no (session_id, seq) twice, every event of the run once."""
    both = lines_of(stopped) + lines_of(resumed)
    keys = [(o["session_id"], o["seq"]) for o in both]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    lines = (stopped + resumed).splitlines()
    runs = [line for line, o in zip(lines, both, strict=True) if o["session_id"] == run_id]
    assert runs[:-1] == produced[:-1]  # byte for byte; the last is the run's result, with next actions added
    assert [msgspec.json.decode(line)["seq"] for line in runs] == list(range(len(produced)))


def test_a_follower_stopped_mid_tool_call_and_its_resume_see_each_event_once(bus_url: str) -> None:
    """SIGINT to a follower while the run's tool call is open; following on from its resume point
    loses nothing, and the follower's made-up ending takes none of the run's (session_id, seq)."""
    # The call stays open for 3 s after the first log: time enough for the SIGINT on a loaded machine.
    producer = start_producer(bus_url, "tool events=6 interval=0.5", "live")
    follower = spawn_cli("follow", "live", "--wait", "--bus", bus_url)
    assert follower.stdout is not None
    printed = b""
    while b'"type":"log"' not in printed:  # the tool call is out, and a log after it: the call is open
        line = follower.stdout.readline()
        assert line, follower.communicate(timeout=10)
        printed += line
    follower.send_signal(signal.SIGINT)
    rest, err = follower.communicate(timeout=10)
    stopped = printed + rest
    assert follower.returncode == 130, err
    produced, _ = producer.communicate(timeout=30)
    assert producer.returncode == 0
    end = terminal(stopped)
    assert (end.subtype, end.synthetic) == ("follow_interrupted", True)
    resumed = cli(*fill(end.next_actions[0])[1:], "--bus", bus_url)
    assert resumed.returncode == 0, resumed.stderr
    assert_resumed_whole(stopped, resumed.stdout, "live", produced.splitlines())
    closing = made_up_part(
        stopped, "live"
    )  # the open call is closed for the reader, in the follower's session
    assert (closing[0]["type"], closing[0]["call_id"], closing[0]["status"]) == (
        "tool_result",
        "call_1",
        "error",
    )
    assert closing[-2]["details"] == {"run_id": "live", "resume_seq": resume_seq(end)}


def test_a_follower_of_a_queued_run_takes_none_of_its_seqs(bus_url: str) -> None:
    """Nothing of the run printed: the follower's whole made-up stream (start, error, result) is its own."""
    with open_bus(bus_url) as bus:
        bus.register_run("queued", command="exec")
    stopped = cli("follow", "queued", "--timeout", "0.3", "--bus", bus_url)
    assert stopped.returncode == ExitCode.TIMEOUT
    end = terminal(stopped.stdout)
    assert resume_seq(end) == 0
    produced = produce(bus_url, "events=3", "queued")
    assert produced.returncode == 0, produced.stderr
    resumed = cli(*fill(end.next_actions[0])[1:], "--bus", bus_url)
    assert_resumed_whole(stopped.stdout, resumed.stdout, "queued", produced.stdout.splitlines())
    assert [o["type"] for o in made_up_part(stopped.stdout, "queued")] == ["start", "error", "result"]
    assert [str(v) for v in validate_stream(io.BytesIO(stopped.stdout))] == []  # one whole stream


@pytest.mark.parametrize("given", ["--bus", "$AGENTSTREAM_BUS"])
@pytest.mark.parametrize("command", [["follow", "some-run"], ["watch"]])
def test_a_malformed_bus_url_is_the_one_line_of_a_usage_error(
    given: str, command: list[str], bus_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As docs/cli.md says of every usage error of follow and watch: one synthetic terminal line, the error on
    stderr."""
    if given == "--bus":
        followed = cli(*command, "--bus", "bogus://x")
    else:
        monkeypatch.setenv("AGENTSTREAM_BUS", "bogus://x")
        followed = cli(*command)
    assert followed.returncode == 2
    (line,) = lines_of(followed.stdout)
    assert (line["type"], line["synthetic"], line["subtype"]) == ("result", True, "invalid_input")
    assert line["error"]["code"] == "INVALID_INPUT" and line["error"]["fix"]
    assert b"INVALID_INPUT: unsupported bus URL 'bogus://x'" in followed.stderr and b"fix:" in followed.stderr


def test_unknown_run_and_bad_input_end_with_a_terminal_that_has_a_code_and_a_fix(bus_url: str) -> None:
    unknown = cli("follow", "nope", "--bus", bus_url)
    end = terminal(unknown.stdout)
    assert unknown.returncode == 1 and end.subtype == "run_not_found" and end.error.code == "RUN_NOT_FOUND"
    assert "agentstream runs" in end.error.fix
    bad = cli("follow", "x", "--bus", "redis://127.0.0.1:port")
    end = terminal(bad.stdout)
    assert bad.returncode == 2 and end.error.code == "INVALID_INPUT" and end.error.fix


def test_unreachable_bus_gives_up_after_the_reconnect_timeout(bus_home: object) -> None:
    url = f"redis://127.0.0.1:{free_port()}"
    began = time.monotonic()
    followed = cli("follow", "x", "--bus", url, "--reconnect-timeout", "0.5")
    assert time.monotonic() - began < 10
    end = terminal(followed.stdout)
    assert (
        followed.returncode == 1 and end.subtype == "bus_unavailable" and end.error.code == "BUS_UNAVAILABLE"
    )
    # nothing of the run was printed: the whole made-up stream, start, error, result
    assert [o["type"] for o in lines_of(followed.stdout)] == ["start", "error", "result"]


def test_a_hole_in_seq_is_reported_not_skipped_silently(bus_url: str) -> None:
    records = events("gappy", 6, final=True)
    with open_bus(bus_url) as bus:
        bus.append("gappy", [records[0], records[1]])
        bus.append("gappy", records[4:])
    followed = cli("follow", "gappy", "--bus", bus_url)
    objs = lines_of(followed.stdout)
    assert [(o["type"], o["seq"]) for o in objs] == [
        ("start", 0),
        ("log", 1),
        ("error", 2),
        ("log", 4),
        ("result", 5),
    ]
    gap = objs[2]
    assert gap["code"] == "EVENTS_MISSING" and gap["recoverable"] and gap["synthetic"]
    assert gap["details"] == {"from_seq": 2, "to_seq": 3}


def test_result_enrichment_keeps_the_runs_own_next_actions(bus_url: str) -> None:
    own = p.NextAction(command="agentstream exec --resume r1 <prompt>", description="continue")
    result = p.Result(ok=True, subtype="success", exit_code=0, next_actions=[own], session_id="r1", seq=1)
    with open_bus(bus_url) as bus:
        bus.append("r1", [*events("r1", 1), Record(1, "result", p.encode(result))])
    end = terminal(cli("follow", "r1", "--bus", bus_url).stdout)
    assert end.next_actions[0] == own and len(end.next_actions) >= 3


def test_follow_uses_agentstream_bus_from_the_environment(bus_home: object, tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/env.sqlite3"  # type: ignore[str-format]
    with open_bus(url) as bus:
        bus.append("r1", events("r1", 2, final=True))
    env_run = subprocess.run(
        [sys.executable, "-m", "agentstream", "follow", "r1"],
        capture_output=True,
        env={**os.environ, "AGENTSTREAM_BUS": url},
        timeout=30,
    )
    assert env_run.returncode == 0 and len(env_run.stdout.splitlines()) == 2


LATE_SIGNAL = """
import os, signal, sys
from agentstream import _signals
from agentstream.bus import follow
from agentstream.cli import entry
moment = sys.argv.pop(1)
if moment == "as-the-terminal-is-written":
    write = follow._Output.write
    def write_then_signal(self, data):
        write(self, data)
        if b'"type":"result"' in data:
            signal.raise_signal(signal.SIGTERM)  # its handler runs on the next line of Python
    follow._Output.write = write_then_signal
else:
    restore = _signals.SignalHandlers.restore
    def restore_then_signal(self, *args):
        restore(self, *args)
        if getattr(self.handler, "__qualname__", "") == "_Output._on_signal":
            signal.raise_signal(signal.SIGTERM)  # lands the moment the command line's handler is back
    _signals.SignalHandlers.restore = restore_then_signal
sys.argv[0] = "agentstream"
entry()
"""


@pytest.mark.parametrize("moment", ["as-the-terminal-is-written", "as-the-signals-are-handed-back"])
@pytest.mark.parametrize("command", ["follow", "watch"])
def test_a_signal_once_the_terminal_is_decided_changes_nothing(
    tmp_path: object, command: str, moment: str
) -> None:
    """No second terminal line and no other exit code: the follower's ending is let be once it is under way."""
    url = f"sqlite:///{tmp_path}/bus.sqlite3"
    with open_bus(url) as bus:
        bus.append("done", events("done", 3, final=True))
    args = ["follow", "done"] if command == "follow" else ["watch", "--from-start", "--count", "2"]
    driver = [sys.executable, "-c", LATE_SIGNAL, moment, *args, "--bus", url]
    done = subprocess.run(driver, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    assert_one_terminal_last(done.stdout)
    end = terminal(done.stdout)
    assert (done.returncode, end.exit_code, end.ok) == (0, 0, True), done.stderr.decode()
    assert b"Traceback" not in done.stderr
