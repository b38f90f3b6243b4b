"""The agent's tools: each one's success and failure paths, shell process handling, caps, secrets."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from _agent_tools_support import agent_running_shell, gone_soon, make_toolbox, process_alive, wait_for_file
from agentstream.agent.tools import (
    TOOL_NAMES,
    Toolbox,
    ToolContext,
    _fs,
    _search,
    _toolbox,
    is_secret,
    scrubbed_environ,
)
from agentstream.agent.tools._base import HeadTail, cap_text
from agentstream.agent.tools._search import glob_regex
from agentstream.agent.tools._shell import _ProgressPump
from agentstream.errors import UsageError


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return Path(os.path.realpath(root))


@pytest.fixture
def box(ws: Path) -> Toolbox:
    return make_toolbox(ws)


# --- read_file -------------------------------------------------------------------------------


def test_read_file_numbers_lines(ws: Path, box: Toolbox) -> None:
    (ws / "a.txt").write_text("alpha\nbeta\r\ngamma")
    out = box.run("read_file", {"path": "a.txt"})
    assert out.status == "success" and not out.truncated
    assert out.output == "     1\talpha\n     2\tbeta\n     3\tgamma"


@pytest.mark.parametrize(
    ("args", "first", "last"),
    [
        ({"offset": 3, "limit": 2}, 3, 4),
        ({"start_line": 2, "end_line": 5}, 2, 5),
        ({"start_line": 9}, 9, 10),
        ({"offset": 10, "limit": 50}, 10, 10),
    ],
)
def test_read_file_ranges(ws: Path, box: Toolbox, args: dict[str, Any], first: int, last: int) -> None:
    (ws / "n.txt").write_text("".join(f"line{i}\n" for i in range(1, 11)))
    out = box.run("read_file", {"path": "n.txt", **args})
    assert out.status == "success"
    rows = [row for row in out.output.splitlines() if not row.startswith("[")]
    assert rows == [f"{i:6}\tline{i}" for i in range(first, last + 1)]
    assert ("the file continues" in out.output) == (last < 10)
    assert not out.truncated  # a range the caller chose is not a truncation


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ({"offset": 2, "start_line": 2}, "not both"),
        ({"start_line": 5, "end_line": 2}, "before start_line"),
        ({"start_line": 40}, "only 3 lines"),
        ({"limit": 0}, "at least 1"),
        ({"offset": True}, "must be of type integer"),
    ],
)
def test_read_file_bad_ranges(ws: Path, box: Toolbox, args: dict[str, Any], needle: str) -> None:
    (ws / "t.txt").write_text("a\nb\nc\n")
    out = box.run("read_file", {"path": "t.txt", **args})
    assert out.status == "error" and needle in (out.error or "")


def test_read_file_past_the_end_of_a_one_line_file(ws: Path, box: Toolbox) -> None:
    (ws / "one.txt").write_text("a\n")
    out = box.run("read_file", {"path": "one.txt", "start_line": 3})
    assert out.error == "one.txt has only 1 line; start_line 3 is past the end"
    assert (
        box.run("write_file", {"path": "one.txt", "content": "b"}).output
        == "wrote 1 bytes (1 line) to one.txt"
    )


def test_read_file_empty_and_missing(ws: Path, box: Toolbox) -> None:
    (ws / "empty").write_text("")
    assert box.run("read_file", {"path": "empty"}).output == "(empty file)"
    missing = box.run("read_file", {"path": "nope.txt"})
    assert missing.status == "error" and "no such file" in (missing.error or "")


def test_read_file_refuses_binary_directories_and_fifos(ws: Path, box: Toolbox) -> None:
    (ws / "blob.bin").write_bytes(b"\x89PNG\x00\x01\x02")
    (ws / "d").mkdir()
    os.mkfifo(ws / "pipe")
    binary = box.run("read_file", {"path": "blob.bin"})
    assert binary.status == "error" and "binary" in (binary.error or "")
    assert "is a directory" in (box.run("read_file", {"path": "d"}).error or "")
    fifo = box.run("read_file", {"path": "pipe"})  # must not block waiting for a writer
    assert fifo.status == "error" and "not a regular file" in (fifo.error or "")


def test_read_file_caps_bytes_and_long_lines(ws: Path) -> None:
    box = make_toolbox(ws, output_cap_bytes=2000)
    (ws / "big.txt").write_text("".join(f"{i:04d} " + "x" * 90 + "\n" for i in range(1, 501)))
    out = box.run("read_file", {"path": "big.txt"})
    assert out.status == "success" and out.truncated
    assert len(out.output.encode()) <= 2000 and "bytes omitted" not in out.output
    assert out.output.splitlines()[-1].startswith("[lines 1-")  # the hint survives the cap
    (ws / "wide.txt").write_text("y" * (_fs.MAX_LINE_CHARS + 50) + "\n")
    wide = box.run("read_file", {"path": "wide.txt"})
    assert wide.truncated and "[line cut]" in wide.output


def test_read_file_huge_line_costs_no_more_than_a_short_one(ws: Path, box: Toolbox) -> None:
    (ws / "minified.js").write_bytes(b"v" * 5_000_000 + b"\nsecond\n")
    tracemalloc.start()
    try:
        out = box.run("read_file", {"path": "minified.js"})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000  # the 5 MB line is never held whole
    first, second = out.output.splitlines()
    assert first == f"{1:6}\t" + "v" * _fs.MAX_LINE_CHARS + " [line cut]"
    assert second == f"{2:6}\tsecond" and out.truncated


def test_read_file_default_window(ws: Path, box: Toolbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_fs, "DEFAULT_LINES", 5)
    (ws / "n.txt").write_text("".join(f"{i}\n" for i in range(1, 21)))
    out = box.run("read_file", {"path": "n.txt"})
    assert out.truncated and out.output.count("\n") == 5
    assert out.output.endswith("read on with start_line=6]")


# --- write_file / edit_file ----------------------------------------------------------------------


def test_write_file_creates_parents_and_overwrites(ws: Path, box: Toolbox) -> None:
    out = box.run("write_file", {"path": "deep/er/f.txt", "content": "one\ntwo\n"})
    assert out.status == "success" and out.output == "wrote 8 bytes (2 lines) to deep/er/f.txt"
    assert (ws / "deep/er/f.txt").read_text() == "one\ntwo\n"
    assert box.run("write_file", {"path": "deep/er/f.txt", "content": "z"}).status == "success"
    assert (ws / "deep/er/f.txt").read_text() == "z"


def test_write_file_failures(ws: Path, box: Toolbox) -> None:
    (ws / "d").mkdir()
    (ws / "plain").write_text("")
    assert "is a directory" in (box.run("write_file", {"path": "d", "content": "x"}).error or "")
    under_file = box.run("write_file", {"path": "plain/x.txt", "content": "x"})
    assert under_file.status == "error" and "not a directory" in (under_file.error or "")
    assert (
        box.run("write_file", {"path": "x.txt"}).error == "write_file: missing required argument(s) content"
    )


def test_edit_file_unique_replacement(ws: Path, box: Toolbox) -> None:
    (ws / "code.py").write_text("def f():\n    return 1\n\ndef g():\n    return 2\n")
    out = box.run("edit_file", {"path": "code.py", "old_string": "return 2", "new_string": "return 3"})
    assert out.status == "success" and out.output == "replaced 1 occurrence in code.py (at line 5)"
    assert (ws / "code.py").read_text() == "def f():\n    return 1\n\ndef g():\n    return 3\n"


def test_edit_file_not_unique_then_replace_all(ws: Path, box: Toolbox) -> None:
    (ws / "c.txt").write_text("x = 1\nx = 1\nx = 1\n")
    out = box.run("edit_file", {"path": "c.txt", "old_string": "x = 1", "new_string": "x = 2"})
    assert out.status == "error"
    assert out.error == "old_string appears 3 times in c.txt; give more context or replace_all"
    assert (ws / "c.txt").read_text() == "x = 1\nx = 1\nx = 1\n"
    every = box.run(
        "edit_file", {"path": "c.txt", "old_string": "x = 1", "new_string": "y", "replace_all": True}
    )
    assert every.status == "success" and "replaced 3 occurrences" in every.output
    assert (ws / "c.txt").read_text() == "y\ny\ny\n"


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [("absent", "x", "was not found"), ("", "x", "old_string is empty"), ("same", "same", "the same")],
)
def test_edit_file_failures(ws: Path, box: Toolbox, old: str, new: str, needle: str) -> None:
    (ws / "f.txt").write_text("same text\n")
    out = box.run("edit_file", {"path": "f.txt", "old_string": old, "new_string": new})
    assert out.status == "error" and needle in (out.error or "")
    assert (ws / "f.txt").read_text() == "same text\n"


def test_edit_file_keeps_undecodable_bytes_and_refuses_binary(ws: Path, box: Toolbox) -> None:
    (ws / "latin.txt").write_bytes(b"caf\xe9 = 1\nname = old\n")
    out = box.run("edit_file", {"path": "latin.txt", "old_string": "old", "new_string": "new"})
    assert out.status == "success"
    assert (ws / "latin.txt").read_bytes() == b"caf\xe9 = 1\nname = new\n"
    (ws / "b.bin").write_bytes(b"old\x00old")
    assert "binary" in (
        box.run("edit_file", {"path": "b.bin", "old_string": "o", "new_string": "n"}).error or ""
    )


def test_edit_file_shrinking_truncates(ws: Path, box: Toolbox) -> None:
    (ws / "s.txt").write_text("keep LONG-LONG-LONG tail\n")
    box.run("edit_file", {"path": "s.txt", "old_string": "LONG-LONG-LONG ", "new_string": ""})
    assert (ws / "s.txt").read_text() == "keep tail\n"


# --- list_dir ------------------------------------------------------------------------------------


def test_list_dir_marks_kinds_and_sorts(ws: Path, box: Toolbox) -> None:
    (ws / "b.txt").write_text("")
    (ws / "a").mkdir()
    (ws / "link").symlink_to("b.txt")
    (ws / ".hidden").write_text("")
    out = box.run("list_dir", {})
    assert out.output.splitlines() == [".hidden", "a/", "b.txt", "link@"]
    assert box.run("list_dir", {"path": "a"}).output == "a: (empty directory)"
    assert box.run("list_dir", {"path": "b.txt"}).status == "error"
    assert box.run("list_dir", {"path": "zzz"}).status == "error"


def test_list_dir_cap(ws: Path, box: Toolbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_fs, "MAX_DIR_ENTRIES", 3)
    for i in range(5):
        (ws / f"f{i}").write_text("")
    out = box.run("list_dir", {"path": "."})
    assert out.truncated and out.output.splitlines()[:3] == ["f0", "f1", "f2"]
    assert "2 more entries" in out.output


# --- glob ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "matches", "misses"),
    [
        ("**/*.py", ["a.py", "x/y/a.py", ".hidden.py"], ["a.pyc", "x/a.txt"]),
        ("src/*.{ts,tsx}", ["src/a.ts", "src/b.tsx"], ["src/c.js", "src/d/e.ts"]),
        ("f?le[0-9].[!c]*", ["file1.txt"], ["file1.c", "fiile1.txt", "filex.txt"]),
        ("src/**", ["src/a", "src/b/c"], ["other/a"]),
        ("a+b(c).txt", ["a+b(c).txt"], ["aab(c).txt"]),
    ],
)
def test_glob_regex(pattern: str, matches: list[str], misses: list[str]) -> None:
    regex = glob_regex(pattern)
    assert all(regex.match(path) for path in matches), pattern
    assert not any(regex.match(path) for path in misses), pattern


def test_glob_sorted_skips_noise_and_marks_dirs(ws: Path, box: Toolbox) -> None:
    for name in ("src/b.py", "src/a.py", "src/pkg/c.py", ".git/hooks/x.py", "node_modules/m/i.py", "top.py"):
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text("")
    out = box.run("glob", {"pattern": "**/*.py"})
    assert out.output.splitlines() == ["src/a.py", "src/b.py", "src/pkg/c.py", "top.py"]
    assert box.run("glob", {"pattern": "*", "path": "src"}).output.splitlines() == [
        "src/a.py",
        "src/b.py",
        "src/pkg/",
    ]
    inside_skipped = box.run("glob", {"pattern": "**/*.py", "path": "node_modules"})
    assert inside_skipped.output == "node_modules/m/i.py"


def test_glob_failures_and_empty(ws: Path, box: Toolbox) -> None:
    assert "no paths match" in box.run("glob", {"pattern": "*.nothing"}).output
    for pattern in ("../*", "/etc/*", "a/../../b"):
        bad = box.run("glob", {"pattern": pattern})
        assert bad.status == "error" and "must be relative" in (bad.error or "")
    assert box.run("glob", {"pattern": "*", "path": "missing"}).status == "error"
    for tool, args in (("glob", {"pattern": "[z-a]"}), ("grep", {"pattern": "x", "glob": "[z-a]"})):
        bad = box.run(tool, args)
        assert bad.status == "error" and (bad.error or "").startswith("invalid glob pattern '[z-a]': ")


def test_glob_cap(ws: Path, box: Toolbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_search, "MAX_GLOB_RESULTS", 2)
    for i in range(4):
        (ws / f"{i}.txt").write_text("")
    out = box.run("glob", {"pattern": "*.txt"})
    assert out.truncated and out.output.splitlines()[:2] == ["0.txt", "1.txt"] and "2 more" in out.output


# --- grep ----------------------------------------------------------------------------------------


@pytest.fixture
def tree(ws: Path) -> Path:
    files = {
        "src/app.py": "import os\nTODO: fix\nprint('todo')\n",
        "src/lib/util.py": "def todo():\n    pass\n",
        "notes.md": "TODO write docs\n",
        ".git/config": "TODO in git\n",
        "image.png": "TODO\x00binary",
    }
    for name, text in files.items():
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text(text)
    return ws


def test_grep_finds_lines_skipping_git_and_binary(tree: Path, box: Toolbox) -> None:
    out = box.run("grep", {"pattern": "TODO"})
    assert out.status == "success"
    assert out.output.splitlines() == ["notes.md:1:TODO write docs", "src/app.py:2:TODO: fix"]


def test_grep_options(tree: Path, box: Toolbox) -> None:
    insensitive = box.run("grep", {"pattern": "todo", "case_insensitive": True, "glob": "*.py"})
    assert insensitive.output.splitlines() == [
        "src/app.py:2:TODO: fix",
        "src/app.py:3:print('todo')",
        "src/lib/util.py:1:def todo():",
    ]
    by_path = box.run("grep", {"pattern": "todo", "glob": "src/lib/*.py"})
    assert by_path.output == "src/lib/util.py:1:def todo():"
    one_file = box.run("grep", {"pattern": r"^import \w+$", "path": "src/app.py"})
    assert one_file.output == "src/app.py:1:import os"
    assert "no matches" in box.run("grep", {"pattern": "zzz"}).output


def test_grep_failures(tree: Path, box: Toolbox) -> None:
    bad = box.run("grep", {"pattern": "(unclosed"})
    assert bad.status == "error" and "invalid regular expression" in (bad.error or "")
    assert box.run("grep", {"pattern": "x", "path": "missing"}).status == "error"


def test_grep_cap(ws: Path, box: Toolbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_search, "MAX_GREP_MATCHES", 3)
    (ws / "many.txt").write_text("hit\n" * 10)
    out = box.run("grep", {"pattern": "hit"})
    assert out.truncated and out.output.count("many.txt:") == 3 and "more not shown" in out.output


# --- shell ---------------------------------------------------------------------------------------


def test_shell_success_runs_in_workspace_with_stdin_closed(ws: Path, box: Toolbox) -> None:
    out = box.run("shell", {"command": "pwd; cat; echo done >&2"})
    assert out.status == "success"
    assert out.output == f"{ws}\ndone\n"


def test_shell_nonzero_exit_is_an_error_with_output(box: Toolbox) -> None:
    out = box.run("shell", {"command": "echo partial; echo oops >&2; exit 7"})
    assert out.status == "error" and out.error == "exit code 7"
    assert out.output == "partial\noops\n[exit code 7]"
    assert box.run("shell", {"command": "true"}).output == "(no output)"
    assert box.run("shell", {"command": "kill -TERM $$"}).error == "killed by signal SIGTERM"


def test_shell_capped_failure_keeps_its_exit_line_within_the_cap(ws: Path) -> None:
    box = make_toolbox(ws, output_cap_bytes=1000)
    out = box.run("shell", {"command": "seq 1 100000; exit 4"})
    assert out.status == "error" and out.truncated and out.output.count("bytes omitted") == 1
    assert out.output.endswith("100000\n[exit code 4]") and len(out.output.encode()) <= 1000


def test_shell_timeout_kills_the_whole_process_group(ws: Path) -> None:
    box = make_toolbox(ws, shell_timeout_s=30)
    command = "echo started; (sleep 60 & echo $! > grandchild.pid; wait) & wait"
    out = box.run("shell", {"command": command, "timeout_s": 1})
    assert out.status == "error" and "timed out after 1s" in (out.error or "")
    assert out.output.startswith("started\n")
    pid = int((ws / "grandchild.pid").read_text())
    assert gone_soon(pid)


def test_shell_timeout_is_capped_by_the_context(ws: Path) -> None:
    box = make_toolbox(ws, shell_timeout_s=0.5)
    out = box.run("shell", {"command": "sleep 30", "timeout_s": 1000})
    assert out.status == "error" and "timed out after 0.5s" in (out.error or "")


def test_shell_background_children_end_with_the_command(ws: Path, box: Toolbox) -> None:
    out = box.run("shell", {"command": "sleep 60 > /dev/null 2>&1 & echo $!"})
    assert out.status == "success"
    pid = int(out.output)
    assert gone_soon(pid)


def test_shell_output_cap_keeps_head_and_tail(ws: Path) -> None:
    box = make_toolbox(ws, output_cap_bytes=1000)
    out = box.run("shell", {"command": "seq 1 100000"})
    assert out.status == "success" and out.truncated
    assert out.output.startswith("1\n2\n3\n")
    assert out.output.endswith("99999\n100000\n")
    assert out.output.count("bytes omitted") == 1  # capped once, by the tool, to fit the cap exactly
    assert len(out.output.encode()) <= 1000


def test_shell_progress_is_streamed_live(ws: Path) -> None:
    chunks: list[str] = []

    def progress(text: str) -> None:
        chunks.append(text)
        if "first" in text:
            (ws / "go").write_text("")  # the command waits for this, so progress must arrive mid-run

    box = make_toolbox(ws, progress=progress, shell_timeout_s=20)
    out = box.run("shell", {"command": "echo first; until [ -e go ]; do sleep 0.02; done; echo second"})
    assert out.status == "success" and out.output == "first\nsecond\n"
    assert "".join(chunks) == out.output
    assert chunks[0] == "first\n"


def test_shell_progress_is_coalesced_and_bounded(ws: Path) -> None:
    chunks: list[str] = []
    box = make_toolbox(ws, progress=chunks.append, output_cap_bytes=20_000)
    out = box.run("shell", {"command": "seq 1 50000"})
    assert out.truncated
    streamed = "".join(chunks)
    assert len(chunks) < 50
    assert len(streamed.encode()) <= 20_000 + 100
    assert streamed.startswith("1\n2\n3\n") and "not streamed" in chunks[-1]
    *whole, last = streamed.split("\n[")[0].split()
    assert [int(n) for n in whole] == list(range(1, len(whole) + 1))  # in order, nothing lost before the cap
    assert str(len(whole) + 1).startswith(
        last
    )  # the last line: whole, or the part a pause in the output showed


NOT_STREAMED = "[further output is not streamed; the result has it]"


def test_the_note_that_ends_streamed_progress_is_on_a_line_of_its_own() -> None:
    """A slow command's progress may stop mid-line; the budget may then run out inside the next line."""
    chunks: list[str] = []
    pump = _ProgressPump(chunks.append, cap=12)
    pump.feed(b"1\n2\n3\n4\n12")
    pump.flush()  # the select timed out: what is pending goes out, a partial line included
    pump.feed(b"345\n6\n")
    pump.flush()
    assert "".join(chunks) == "1\n2\n3\n4\n12\n" + NOT_STREAMED


def test_a_short_line_the_cap_falls_inside_is_not_streamed_in_part() -> None:
    """ "4222" cut at the cap would read as "42": the progress stops at the last whole line."""
    chunks: list[str] = []
    pump = _ProgressPump(chunks.append, cap=10)
    pump.feed(b"1\n2\n3\n4\n")
    pump.flush(whole_lines=True)
    pump.feed(b"4222\n4223\n")  # past the cap: only its first bytes are kept
    pump.flush()  # the command ended
    assert "".join(chunks) == "1\n2\n3\n4\n" + NOT_STREAMED


def test_shell_interrupted_by_exception_kills_group(ws: Path) -> None:
    def progress(text: str) -> None:
        if "ready" in text:
            raise KeyboardInterrupt

    box = make_toolbox(ws, progress=progress)
    command = "sleep 60 & echo $! > bg.pid; echo ready; wait"
    with pytest.raises(KeyboardInterrupt):
        box.run("shell", {"command": command})
    pid = int(wait_for_file(ws / "bg.pid"))
    assert gone_soon(pid)


def test_shell_interrupted_while_starting_kills_group(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Popen() waits on a pipe for the child's exec; an interrupt there must not orphan the command.
    real_read, real_fork_exec = os.read, subprocess._fork_exec  # type: ignore[attr-defined]
    forked_the_command = False

    def fork_exec(*args: Any) -> int:
        nonlocal forked_the_command
        forked_the_command = forked_the_command or COMMAND in args[0][-1]  # not the watchdog's fork
        return real_fork_exec(*args)  # type: ignore[no-any-return]

    def read(fd: int, size: int) -> bytes:
        if size == 50000 and forked_the_command:  # Popen's wait for the command's exec
            wait_for_file(ws / "early.pid")
            raise KeyboardInterrupt
        return real_read(fd, size)

    COMMAND = "sleep 60 & echo $! > early.pid; wait"
    monkeypatch.setattr(subprocess, "_fork_exec", fork_exec)
    monkeypatch.setattr(os, "read", read)
    with pytest.raises(KeyboardInterrupt):
        make_toolbox(ws).run("shell", {"command": COMMAND})
    monkeypatch.undo()
    assert gone_soon(int((ws / "early.pid").read_text()))


def test_shell_real_sigint_to_agent_kills_group(ws: Path, tmp_path: Path) -> None:
    agent = agent_running_shell(ws, "sleep 60 & echo $! > bg.pid; wait")
    try:
        pid = int(wait_for_file(ws / "bg.pid"))
        assert process_alive(pid)
        agent.send_signal(signal.SIGINT)
        assert agent.wait(timeout=10) != 0
    finally:
        agent.kill()
    assert gone_soon(pid)


def test_a_signal_between_the_fork_and_the_pid_being_known_still_kills_the_group(ws: Path) -> None:
    """The signal lands right after the fork, before ``Popen`` has stored the pid (a loaded machine can
    leave the parent there while the command runs): the group is killed all the same."""
    script = textwrap.dedent(
        f"""
        import os, signal, subprocess, time
        from pathlib import Path
        from agentstream.agent.tools import Toolbox, ToolContext

        fork_exec = subprocess._fork_exec

        def fork_exec_then_interrupted(*args):
            pid = fork_exec(*args)
            if "bg.pid" not in args[0][-1]:
                return pid  # the watchdog's start, before the command's
            Path({str(ws)!r}, "shell.pid").write_text(str(pid))
            deadline = time.monotonic() + 10
            while not Path({str(ws)!r}, "bg.pid").exists() and time.monotonic() < deadline:
                time.sleep(0.01)  # the command runs while the parent has not stored its pid yet
            os.kill(os.getpid(), signal.SIGINT)
            return pid

        subprocess._fork_exec = fork_exec_then_interrupted
        box = Toolbox(ToolContext(Path({str(ws)!r})))
        box.run("shell", {{"command": "sleep 60 & echo $! > bg.pid; wait"}})
        """
    )
    agent = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE)
    try:
        assert agent.wait(timeout=20) != 0
    finally:
        agent.kill()
    assert b"KeyboardInterrupt" in (agent.stderr.read() if agent.stderr else b"")
    pids = [int(wait_for_file(ws / name)) for name in ("shell.pid", "bg.pid")]
    try:
        assert all(gone_soon(pid) for pid in pids), "the shell or its background job outlived the interrupt"
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


_PEAK_RSS_SCRIPT = """
import json, sys
from pathlib import Path
from agentstream.agent.tools import Toolbox, ToolContext

def peak_kib():
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))

progress = []
box = Toolbox(ToolContext(Path(sys.argv[1]), progress=progress.append))
box.run("shell", {"command": "echo warm-up"})
before = peak_kib()
out = box.run("shell", {"command": sys.argv[2]})
print(json.dumps({"before": before, "after": peak_kib(), "status": out.status, "output": len(out.output),
                  "truncated": out.truncated, "progress": sum(len(p) for p in progress), "tail": out.output[-40:]}))
"""


@pytest.mark.parametrize(
    "command",
    [
        "head -c 100000000 /dev/zero | tr '\\0' a",  # one line of 100 MB
        "head -c 100000000 /dev/zero | tr '\\0' a; echo; head -c 50000000 /dev/zero | tr '\\0' b",
        "yes 0123456789abcdef | head -c 100000000",  # many short lines
    ],
    ids=["one-line", "two-long-lines", "short-lines"],
)
def test_shell_output_of_any_size_keeps_memory_flat(ws: Path, command: str) -> None:
    """A command printing 100 MB: the agent's peak RSS (VmHWM, in its own process) barely moves."""
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_RSS_SCRIPT, str(ws), command],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "success" and report["truncated"], report
    cap = ToolContext(ws).output_cap_bytes
    assert report["output"] <= cap and report["progress"] <= cap + 100, report
    assert report["tail"].strip("ab0123456789cdef\n") == "", report  # the end of the output is kept
    grown_mib = (report["after"] - report["before"]) / 1024
    assert grown_mib < 16, f"peak RSS grew by {grown_mib:.1f} MiB for 100 MB of output: {report}"


# --- secrets -------------------------------------------------------------------------------------


def test_shell_environment_has_no_secrets(box: Toolbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_API_KEY", "fake-key-value-9d2e")
    monkeypatch.setenv("DATABASE_URL", "postgres://app:hunter2pass@db/app")
    monkeypatch.setenv("HARMLESS_SETTING", "visible-value")
    out = box.run("shell", {"command": "env"})
    assert out.status == "success"
    assert "fake-key-value-9d2e" not in out.output and "FAKE_API_KEY" not in out.output
    assert "hunter2pass" not in out.output
    assert "HARMLESS_SETTING=visible-value" in out.output


def test_secret_values_are_redacted_from_outcomes_and_progress(ws: Path) -> None:
    # The agent must be started with the secret for it to be in /proc/<agent>/environ.
    script = textwrap.dedent(
        f"""
        import json
        from pathlib import Path
        from agentstream.agent.tools import Toolbox, ToolContext
        chunks = []
        box = Toolbox(ToolContext(Path({str(ws)!r}), progress=chunks.append))
        shell = box.run("shell", {{"command": "tr '\\\\0' '\\\\n' < /proc/$PPID/environ | grep FAKE_"}})
        read = box.run("read_file", {{"path": ".env"}})
        print(json.dumps([shell.output, chunks, read.output]))
        """
    )
    (ws / ".env").write_text("FAKE_API_KEY=fake-key-value-9d2e\n")
    env = {**os.environ, "FAKE_API_KEY": "fake-key-value-9d2e"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "fake-key-value-9d2e" not in done.stdout
    shell_output, chunks, read_output = json.loads(done.stdout)
    assert shell_output == "FAKE_API_KEY=[redacted:FAKE_API_KEY]\n"
    assert chunks == [shell_output]
    assert read_output == "     1\tFAKE_API_KEY=[redacted:FAKE_API_KEY]"


@pytest.mark.parametrize(
    ("name", "value", "secret"),
    [
        ("OPENAI_API_KEY", "sk-x", True),
        ("GITHUB_TOKEN", "ghp", True),
        ("AWS_SECRET_ACCESS_KEY", "x", True),
        ("AWS_ACCESS_KEY_ID", "x", True),
        ("AWS_SESSION_TOKEN", "x", True),
        ("DB_PASSWORD", "x", True),
        ("SIGNING_KEY", "x", True),
        ("GITLAB_PAT", "x", True),
        ("MY_CREDENTIALS_FILE", "x", True),
        ("REDIS_URL", "redis://:s3cret@host:6380", True),
        ("PATH", "/usr/bin", False),
        ("HOME", "/root", False),
        ("PWD", "/work", False),
        ("KEYBOARD_LAYOUT", "us", False),
        ("REDIS_URL", "redis://localhost:6380/0", False),
    ],
)
def test_secret_rule(name: str, value: str, secret: bool) -> None:
    assert is_secret(name, value) is secret


def test_scrubbed_environ_adds_non_interactive_defaults() -> None:
    env = scrubbed_environ({"PATH": "/bin", "X_TOKEN": "t", "PAGER": "less"})
    assert env == {"PATH": "/bin", "PAGER": "less", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"}


def test_explicit_env_is_used_as_given(ws: Path) -> None:
    box = make_toolbox(ws, env={"ONLY_THIS": "1", "PATH": os.environ["PATH"]})
    out = box.run("shell", {"command": "env"})
    names = sorted(line.split("=")[0] for line in out.output.splitlines())
    assert names == ["ONLY_THIS", "PATH", "PWD", "SHLVL", "_"]  # the last three are bash's own


# --- Toolbox -------------------------------------------------------------------------------------


def test_specs_are_json_schema_objects_for_both_providers(box: Toolbox) -> None:
    assert [spec.name for spec in box.specs] == list(TOOL_NAMES)
    for spec in box.specs:
        schema = spec.parameters
        assert schema["type"] == "object" and isinstance(schema["properties"], dict)
        assert set(schema.get("required", [])) <= set(schema["properties"])
        assert all(
            prop["type"] in ("string", "integer", "number", "boolean")
            for prop in schema["properties"].values()
        )
        assert spec.description and spec.access in ("read", "write", "execute")


def test_allow_list(ws: Path) -> None:
    box = Toolbox(ToolContext(ws), allow=["grep", "read_file"])
    assert [spec.name for spec in box.specs] == ["read_file", "grep"]
    denied = box.run("shell", {"command": "true"})
    assert denied.status == "denied" and "not enabled for this run" in (denied.error or "")
    with pytest.raises(UsageError) as info:
        Toolbox(ToolContext(ws), allow=["read_file", "bash"])
    assert "bash" in info.value.message and "read_file, write_file" in (info.value.fix or "")
    with pytest.raises(UsageError) as conflict:
        Toolbox(ToolContext(ws, mode="read-only"), allow=["shell"])
    assert "read-only forbids" in conflict.value.message


def test_bad_context_is_a_usage_error(ws: Path) -> None:
    with pytest.raises(UsageError):
        Toolbox(ToolContext(ws, mode="yolo"))  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        Toolbox(ToolContext(ws / "missing"))


@pytest.mark.parametrize(
    ("name", "arguments", "needle"),
    [
        ("fly", {}, "no tool named 'fly'"),
        ("read_file", {"path": "a", "colour": "red"}, "unknown argument(s) colour"),
        ("read_file", {"path": 3}, "must be of type string"),
        (
            "edit_file",
            {"path": "a", "old_string": "x", "new_string": "y", "replace_all": "yes"},
            "type boolean",
        ),
        ("read_file", ["a"], "JSON object"),
    ],
)
def test_bad_calls_are_errors_the_model_can_act_on(
    box: Toolbox, name: str, arguments: Any, needle: str
) -> None:
    out = box.run(name, arguments)
    assert out.status == "error" and needle in (out.error or "")


def test_null_optional_arguments_mean_absent(ws: Path, box: Toolbox) -> None:
    (ws / "a").write_text("x\n")
    assert box.run("read_file", {"path": "a", "offset": None, "limit": None}).output == "     1\tx"


def test_a_crashing_tool_becomes_an_error(box: Toolbox, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(ctx: Any, args: Any) -> Any:
        raise RuntimeError("kaboom")

    tool = _toolbox.installed_tools()["list_dir"]
    monkeypatch.setitem(_toolbox.installed_tools(), "list_dir", type(tool)(tool.spec, broken))
    out = box.run("list_dir", {})
    assert out.status == "error" and out.error == "list_dir failed unexpectedly: RuntimeError: kaboom"


def test_every_outcome_respects_the_output_cap(ws: Path) -> None:
    box = make_toolbox(ws, output_cap_bytes=500)
    for i in range(200):
        (ws / f"file-with-a-long-name-{i:03d}.txt").write_text("")
    out = box.run("list_dir", {})
    assert out.truncated and len(out.output.encode()) <= 500


def test_head_tail_bounded_memory_and_exact_small() -> None:
    kept = HeadTail(100)
    for _ in range(10_000):
        kept.feed(b"0123456789")
    assert kept.truncated and kept.tail_len < 200 and len(kept.head) == 50
    text = kept.text()
    head, marker, tail = text.split("\n")
    omitted = int(marker.split()[1])
    assert len(text.encode()) <= 100 and head.startswith("0123") and tail.endswith("6789")
    assert omitted + len(head) + len(tail) == 100_000
    assert cap_text("short", 100) == ("short", False)
    assert cap_text("x" * 100, 100) == ("x" * 100, False)


@pytest.mark.parametrize("cap", [100, 101, 102, 103, 200, 333])
def test_cap_text_never_splits_a_character(cap: int) -> None:
    text, cut = cap_text("é€😀" * 100, cap)
    assert cut and "\ufffd" not in text and len(text.encode()) <= cap
    assert text.startswith("é€") and text.endswith("😀")
