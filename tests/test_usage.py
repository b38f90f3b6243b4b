"""``agentstream usage``: totals equal ccusage's on the same Claude Code logs; every CLI's logs counted once per call."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests._claude_log_gen import MODELS, write_tree

from _codex_log_cases import unreadable_totals, with_bad_token_count

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "dialects"
CLAUDE_LOG = FIXTURES / "claude-log" / "project-log.jsonl"
CODEX_LOG = FIXTURES / "codex-log" / "rollout.jsonl"
GEMINI_LOG = FIXTURES / "gemini-log" / "chat.jsonl"
EVERY_LOG = [str(CLAUDE_LOG), str(CODEX_LOG), str(GEMINI_LOG)]
"""The session-log fixtures, one per CLI (named one by one: the folder holds the other dialects' too)."""
CCUSAGE = ROOT / "tests" / "peers" / "node_modules" / "ccusage" / "dist" / "index.js"


def usage(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentstream", "usage", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def envelope(*args: str, env: dict[str, str] | None = None) -> dict:
    done = usage(*args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def ccusage(config_dir: Path, *options: str) -> dict:
    node = shutil.which("node")
    if node is None or not CCUSAGE.exists():
        pytest.fail("ccusage is the oracle here: install node and run 'npm install' in tests/peers")
    done = subprocess.run(
        [node, str(CCUSAGE), "daily", "--json", "--offline", *options],
        capture_output=True,
        text=True,
        env={**os.environ, "CLAUDE_CONFIG_DIR": str(config_dir), "TZ": "UTC"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_claude_totals_equal_ccusage(tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "claude", seed=11, sessions=14, turns=12)
    theirs = ccusage(tree)
    ours = envelope(str(tree), "--cli", "claude")["result"]
    totals, reference = ours["totals"], theirs["totals"]
    assert (totals["input_tokens"], totals["output_tokens"]) == (
        reference["inputTokens"],
        reference["outputTokens"],
    )
    assert totals["cache_write_tokens"] == reference["cacheCreationTokens"]
    assert totals["cache_read_tokens"] == reference["cacheReadTokens"]
    # ccusage --offline prices these models from its own table, at the same list rates as ours.
    assert totals["cost_usd"] == pytest.approx(reference["totalCost"], abs=1e-5)
    days = {group["key"]: group for group in ours["groups"]}
    assert sorted(days) == [day["date"] for day in theirs["daily"]]
    for day in theirs["daily"]:
        group = days[day["date"]]
        assert (group["input_tokens"], group["output_tokens"]) == (day["inputTokens"], day["outputTokens"])
        assert group["cost_usd"] == pytest.approx(day["totalCost"], abs=1e-5)
    by_model = envelope(str(tree), "--cli", "claude", "--by", "model")["result"]["groups"]
    assert {group["key"] for group in by_model} == set(MODELS)


def test_each_call_counts_once_whatever_the_cli() -> None:
    groups = {group["key"]: group for group in envelope(*EVERY_LOG, "--by", "cli")["result"]["groups"]}
    claude, codex, gemini = groups["claude"], groups["codex"], groups["gemini"]
    # Claude: three records of msg_01A and one of msg_01B are two calls.
    assert (
        claude["calls"],
        claude["input_tokens"],
        claude["cache_write_tokens"],
        claude["output_tokens"],
    ) == (
        2,
        16,
        1800,
        245,
    )
    # Codex: the token_count written twice counts once; input excludes the cached part.
    assert (codex["calls"], codex["input_tokens"], codex["cache_read_tokens"], codex["reasoning_tokens"]) == (
        2,
        3000,
        8000,
        300,
    )
    # Gemini: message g-2 appended twice counts once; thoughts are output.
    assert (gemini["calls"], gemini["output_tokens"], gemini["reasoning_tokens"], gemini["tool_calls"]) == (
        2,
        172,
        120,
        1,
    )


def test_the_older_gemini_json_form_is_counted(tmp_path: Path) -> None:
    records = [json.loads(line) for line in GEMINI_LOG.read_text().splitlines()]
    messages = [record for record in records if "id" in record]
    legacy = {**records[0], "messages": messages}
    path = tmp_path / "chats" / "session-2026-11-04T08-00-5b6c7d8e.json"
    path.parent.mkdir()
    path.write_text(json.dumps(legacy, indent=2))
    totals = envelope(str(path))["result"]["totals"]
    assert (totals["calls"], totals["cache_read_tokens"], totals["tool_calls"]) == (2, 14000, 1)


def test_since_and_a_user_price_file(tmp_path: Path) -> None:
    late = envelope(*EVERY_LOG, "--since", "2026-11-03")["result"]
    assert [group["key"] for group in late["groups"]] == ["2026-11-03", "2026-11-04"]
    prices = tmp_path / "prices.json"
    prices.write_text(
        json.dumps({"version": "mine", "models": {"gpt-5-codex": {"input": 1000, "output": 0}}})
    )
    mine = envelope(str(CODEX_LOG), "--pricing", str(prices))["result"]
    # 3000 fresh + 8000 cached tokens, cache reads at the input rate when the file names none.
    assert mine["totals"]["cost_usd"] == pytest.approx(11.0)
    assert mine["pricing"] == {"version": "2026-11-01+mine", "source": f"shipped+{prices}"}
    env = envelope(str(CODEX_LOG), env={"AGENTSTREAM_PRICING": str(prices)})
    assert env["result"]["totals"]["cost_usd"] == pytest.approx(11.0)


def test_bad_input_gets_a_clear_error(tmp_path: Path) -> None:
    broken = tmp_path / "prices.json"
    broken.write_text('{"models": {"x": {"input": "cheap"}}}')
    # Usage errors, as every data command has them: exit 2, the message and its fix on stderr, nothing on stdout.
    done = usage(*EVERY_LOG, "--pricing", str(broken), "--json")
    assert (done.returncode, done.stdout) == (2, "")
    assert "'input'" in done.stderr and "fix:" in done.stderr
    for not_a_day in ("last week", "2026-13-45", "20260230", "٢٠٢٦-11-01"):
        done = usage(*EVERY_LOG, "--since", not_a_day, "--json")
        assert (done.returncode, done.stdout) == (2, "") and "--since" in done.stderr, not_a_day
    done = usage(str(tmp_path / "no-such-dir"), "--json")
    assert (done.returncode, done.stdout) == (2, "") and "no-such-dir" in done.stderr


def test_unknown_files_are_skipped_and_said_so(tmp_path: Path) -> None:
    (tmp_path / "notes.jsonl").write_text('{"hello": "world"}\n')
    done = usage(str(tmp_path), "--json")
    assert done.returncode == 0 and "not a session log" in done.stderr
    assert json.loads(done.stdout)["result"]["totals"]["calls"] == 0


def test_default_locations_are_every_cli_s(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_tree(home / ".claude", seed=3, sessions=2, turns=3)
    day = home / ".codex" / "sessions" / "2026" / "11" / "03"
    day.mkdir(parents=True)
    shutil.copy(CODEX_LOG, day / "rollout-2026-11-03T10-00-00-0199a1b2.jsonl")
    chats = home / ".gemini" / "tmp" / "9f86d081" / "chats"
    chats.mkdir(parents=True)
    shutil.copy(GEMINI_LOG, chats / "session-2026-11-04T08-00-5b6c7d8e.jsonl")
    env = {
        "HOME": str(home),
        "AGENTSTREAM_HOME": str(tmp_path / "state"),
        "CLAUDE_CONFIG_DIR": "",
        "CODEX_HOME": "",
    }
    env.pop("AGENTSTREAM_BUS", None)
    groups = envelope("--by", "cli", env={**env, "AGENTSTREAM_BUS": ""})["result"]["groups"]
    assert [group["key"] for group in groups] == ["claude", "codex", "gemini"]
    assert not (tmp_path / "state").exists()  # no bus yet: nothing counted, nothing created


def test_the_bus_s_finished_runs_are_counted_and_an_unreadable_one_alone_is_left_out(tmp_path: Path) -> None:
    """Each finished run's result carries its totals; a bad stored result costs that run, said on stderr."""
    from agentstream import protocol as p
    from agentstream.bus import Record, open_bus

    url = f"sqlite:///{tmp_path / 'bus.sqlite3'}"

    def store(bus: Any, run_id: str, tokens: tuple[int, int], *, readable: bool = True) -> None:
        sequencer = p.Sequencer(run_id)
        start = sequencer.stamp(p.Start(command="exec", model="claude-sonnet-4-5"))
        totals = p.UsageTotals(input_tokens=tokens[0], output_tokens=tokens[1])
        result = p.encode(sequencer.stamp(p.Result(ok=True, subtype="success", exit_code=0, usage=totals)))
        if not readable:
            result = result.replace(b'"usage":{', b'"usage":{"input_tokens":"many",', 1)
        bus.append(run_id, [Record(0, "start", p.encode(start)), Record(1, "result", result)])

    with open_bus(url) as bus:
        store(bus, "one", (100, 20))
        store(bus, "two", (50, 5))
        store(bus, "broken", (7, 7), readable=False)
    env = {"HOME": str(tmp_path / "home"), "AGENTSTREAM_BUS": "", "CLAUDE_CONFIG_DIR": "", "CODEX_HOME": ""}
    done = usage("--bus", url, "--by", "model", "--json", env=env)
    assert done.returncode == 0, done.stderr
    (group,) = json.loads(done.stdout)["result"]["groups"]
    assert (group["key"], group["calls"], group["input_tokens"], group["output_tokens"]) == (
        "claude-sonnet-4-5",
        2,
        150,
        25,
    )
    assert "run broken is not counted" in done.stderr and "the bus's runs are not counted" not in done.stderr


def test_a_bus_run_s_tool_calls_are_its_calls_not_the_tools_it_named(tmp_path: Path) -> None:
    """A run that ran one command three times and read one file made four tool calls; its result's
    ``tools_used`` names two tools."""
    from agentstream import protocol as p
    from agentstream.bus import Record, open_bus

    url = f"sqlite:///{tmp_path / 'bus.sqlite3'}"
    sequencer = p.Sequencer("run")
    events: list[p.AnyEvent] = [p.Start(command="codex exec")]
    for number, name in enumerate(["shell", "shell", "read", "shell"]):
        events += [
            p.ToolCall(call_id=f"c{number}", name=name, arguments={}),
            p.ToolResult(call_id=f"c{number}", name=name, status="success", output="ok"),
        ]
    events.append(p.Result(ok=True, subtype="success", exit_code=0, tools_used=["shell", "read"]))
    with open_bus(url) as bus:
        bus.append("run", [Record(n, e.type, p.encode(sequencer.stamp(e))) for n, e in enumerate(events)])
    env = {"HOME": str(tmp_path / "home"), "AGENTSTREAM_BUS": "", "CLAUDE_CONFIG_DIR": "", "CODEX_HOME": ""}
    (group,) = envelope("--bus", url, "--by", "session", env=env)["result"]["groups"]
    assert (group["key"], group["tool_calls"]) == ("agentstream:run", 4)


def test_a_token_figure_below_zero_or_past_any_call_is_dropped_not_counted(tmp_path: Path) -> None:
    """One corrupt record must not take usage away (a negative count) or add a fortune (10**30 tokens)."""
    lines = [line for line in CLAUDE_LOG.read_text().splitlines() if line.strip()]
    model_line = next(json.loads(line) for line in lines if '"usage"' in line and '"assistant"' in line)
    bad = []
    for index, tokens in enumerate([-100, 10**30]):
        record = json.loads(json.dumps(model_line))
        record["uuid"], record["requestId"] = f"u-bad{index}", f"req_bad{index}"
        record["message"]["id"] = f"msg_bad{index}"
        record["message"]["usage"] = {"input_tokens": tokens, "output_tokens": 10}
        bad.append(json.dumps(record))
    corrupt = tmp_path / "corrupt.jsonl"
    corrupt.write_text("\n".join([*lines, *bad]) + "\n")
    clean = envelope(str(CLAUDE_LOG))["result"]["totals"]
    totals = envelope(str(corrupt))["result"]["totals"]
    assert totals["input_tokens"] == clean["input_tokens"]  # the bad figures lost, not counted
    assert totals["output_tokens"] == clean["output_tokens"] + 20  # what the records had right still counts
    assert totals["cost_usd"] < clean["cost_usd"] + 0.01


def test_a_fifo_in_a_scanned_folder_is_not_waited_on(tmp_path: Path) -> None:
    shutil.copy(CLAUDE_LOG, tmp_path / "session.jsonl")
    os.mkfifo(tmp_path / "pipe.jsonl")
    totals = envelope(str(tmp_path))["result"]["totals"]  # usage() bounds the run's time
    assert totals["calls"] == envelope(str(CLAUDE_LOG))["result"]["totals"]["calls"]


@unreadable_totals
def test_an_unreadable_codex_running_total_is_lost_whole_not_read_as_zeros(
    tmp_path: Path, total: dict | None, last: dict
) -> None:
    """Read as zeros, it made the next token_count count the whole session again (usage doubled); its
    last_token_usage counted, the next good total counted that call again."""
    corrupt = tmp_path / "rollout-corrupt.jsonl"
    corrupt.write_bytes(with_bad_token_count(CODEX_LOG, total, last))
    clean = envelope(str(CODEX_LOG))["result"]["totals"]
    assert (
        clean["input_tokens"] == 3000 and clean["cache_read_tokens"] == 8000 and clean["output_tokens"] == 520
    )
    assert envelope(str(corrupt))["result"]["totals"] == clean


def claude_record(
    ts: str, message_id: str, usage: dict[str, Any], *, tool: bool = False, **extra: Any
) -> dict[str, Any]:
    """One assistant record of a Claude Code log (session ``s-1``), with a tool call when ``tool``."""
    block = (
        {"type": "tool_use", "id": f"toolu_{message_id}", "name": "Bash", "input": {"command": "ls"}}
        if tool
        else {"type": "text", "text": "ok"}
    )
    return {
        "parentUuid": None,
        "isSidechain": False,
        "type": "assistant",
        "sessionId": "s-1",
        "uuid": f"u-{message_id}-{ts}",
        "timestamp": ts,
        "requestId": f"req_{message_id}",
        "message": {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-20250514",
            "content": [block],
            "usage": usage,
        },
        **extra,
    }


def write_log(path: Path, records: list[dict[str, Any]], *, prefix: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(prefix + "".join(json.dumps(r) + "\n" for r in records).encode())
    return path


SMALL = {"input_tokens": 10, "output_tokens": 20}


def test_since_counts_only_the_tool_calls_and_wall_time_on_or_after_it(tmp_path: Path) -> None:
    log = write_log(
        tmp_path / "s-1.jsonl",
        [
            claude_record("2026-10-01T10:00:00.000Z", "m1", SMALL, tool=True),
            claude_record("2026-10-01T10:10:00.000Z", "m2", SMALL, tool=True),
            claude_record("2026-10-02T09:00:00.000Z", "m3", SMALL, tool=True),
            claude_record("2026-10-02T09:30:00.000Z", "m4", SMALL),
        ],
    )
    every = envelope(str(log))["result"]["totals"]
    assert (every["calls"], every["tool_calls"]) == (4, 3)
    late = envelope(str(log), "--since", "2026-10-02")["result"]
    assert (late["totals"]["calls"], late["totals"]["tool_calls"]) == (2, 1)
    assert (
        late["totals"]["wall_time_ms"] == 30 * 60 * 1000
    )  # from its first record that day, not the day before
    assert [group["key"] for group in late["groups"]] == ["2026-10-02"]


def test_days_are_utc_days_whatever_offset_a_time_is_written_with(tmp_path: Path) -> None:
    log = write_log(
        tmp_path / "s-1.jsonl",
        [
            claude_record("2025-09-05T01:04:00+02:00", "m1", SMALL),  # 2025-09-04T23:04Z
            claude_record("2025-09-05T00:30:00.000Z", "m2", SMALL),
        ],
    )
    days = envelope(str(log))["result"]["groups"]
    assert [(day["key"], day["calls"]) for day in days] == [("2025-09-04", 1), ("2025-09-05", 1)]
    assert envelope(str(log), "--since", "2025-09-05")["result"]["totals"]["calls"] == 1


def test_token_counts_written_as_a_float_or_a_string_are_counted(tmp_path: Path) -> None:
    """As the dialects read numbers: an integral float is that integer, a numeric string its number."""
    log = write_log(
        tmp_path / "s-1.jsonl",
        [
            claude_record("2026-10-01T10:00:00.000Z", "m1", {"input_tokens": "10", "output_tokens": 250.0}),
            claude_record("2026-10-01T10:01:00.000Z", "m2", {"input_tokens": "many", "output_tokens": 5}),
        ],
    )
    totals = envelope(str(log))["result"]["totals"]
    assert (totals["calls"], totals["input_tokens"], totals["output_tokens"]) == (2, 10, 255)


def test_a_log_that_starts_with_a_byte_order_mark_loses_no_record(tmp_path: Path) -> None:
    records = [
        claude_record("2026-10-01T10:00:00.000Z", "m1", SMALL),
        claude_record("2026-10-01T10:01:00.000Z", "m2", SMALL),
    ]
    home = tmp_path / "home"
    log = write_log(home / ".claude" / "projects" / "p" / "s-1.jsonl", records, prefix=b"\xef\xbb\xbf")
    assert envelope(str(log))["result"]["totals"]["calls"] == 2
    env = {"HOME": str(home), "CLAUDE_CONFIG_DIR": "", "CODEX_HOME": "", "AGENTSTREAM_BUS": ""}
    assert envelope("--cli", "claude", env=env)["result"]["totals"]["calls"] == 2


def test_gemini_s_prompt_history_is_no_session_log_wherever_it_is_found(tmp_path: Path) -> None:
    """``~/.gemini/tmp/<project>/logs.json`` holds the prompts typed, no usage: never a file counted."""
    home = tmp_path / "home"
    project = home / ".gemini" / "tmp" / "9f86d081"
    (project / "chats").mkdir(parents=True)
    shutil.copy(GEMINI_LOG, project / "chats" / "session-2026-11-04T08-00-5b6c7d8e.jsonl")
    prompts = [{"sessionId": "s", "messageId": 0, "type": "user", "message": "hi", "timestamp": "2026-11-04"}]
    (project / "logs.json").write_text(json.dumps(prompts, indent=2))
    env = {"HOME": str(home), "CLAUDE_CONFIG_DIR": "", "CODEX_HOME": "", "AGENTSTREAM_BUS": ""}
    by_default = envelope("--cli", "gemini", env=env)["result"]
    named = envelope(str(home / ".gemini"), env=env)["result"]
    assert by_default["files"] == named["files"] == 1
    assert by_default["totals"] == named["totals"] and named["totals"]["calls"] == 2


def test_where_ccusage_counts_otherwise_it_is_as_the_docs_say(tmp_path: Path) -> None:
    """docs/usage.md: the largest figure of a call's records against ccusage's first; our table against a
    record's ``costUSD`` (ccusage's default mode), the same cost as ccusage's ``--mode calculate``."""
    grown = tmp_path / "grown"
    write_log(
        grown / "projects" / "p" / "s-1.jsonl",
        [
            claude_record("2026-10-01T10:00:00.000Z", "m1", {"input_tokens": 10, "output_tokens": 12}),
            claude_record("2026-10-01T10:00:01.000Z", "m1", {"input_tokens": 10, "output_tokens": 250}),
        ],
    )
    ours = envelope(str(grown), "--cli", "claude")["result"]["totals"]
    assert (ours["output_tokens"], ccusage(grown)["totals"]["outputTokens"]) == (250, 12)

    priced = tmp_path / "priced"
    write_log(
        priced / "projects" / "p" / "s-1.jsonl",
        [claude_record("2026-10-01T10:00:00.000Z", "m1", SMALL, costUSD=1.0)],
    )
    ours = envelope(str(priced), "--cli", "claude")["result"]["totals"]
    assert ccusage(priced)["totals"]["totalCost"] == pytest.approx(1.0)
    assert ccusage(priced, "--mode", "calculate")["totals"]["totalCost"] == pytest.approx(
        ours["cost_usd"], abs=1e-6
    )
    assert ours["cost_usd"] < 0.01
