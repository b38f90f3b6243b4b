"""File names that are not UTF-8: every tool shows them as valid text the model can hand back."""

from __future__ import annotations

import json
from pathlib import Path

from _agent_fakes import FakeModelServer, openai_env, openai_reply, run_exec
from _agent_tools_support import make_toolbox
from agentstream.agent.sessions import SessionStore

BAD = b"bad\xff\xfe.txt"
SHOWN = "bad\\xff\\xfe.txt"


def workspace_with_bad_name(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    with open(bytes(workspace / "sub") + b"/" + BAD, "wb") as fh:
        fh.write(b"needle\n")
    return workspace


def test_listing_and_search_tools_show_such_names_escaped_and_file_tools_take_them_back(
    tmp_path: Path,
) -> None:
    workspace = workspace_with_bad_name(tmp_path)
    box = make_toolbox(workspace)
    outcomes = {
        "list_dir": box.run("list_dir", {"path": "sub"}),
        "glob": box.run("glob", {"pattern": "**/bad\\xff*"}),
        "grep": box.run("grep", {"pattern": "needle", "glob": "bad\\xff*"}),
    }
    for name, out in outcomes.items():
        assert out.status == "success", (name, out)
        out.output.encode()  # valid UTF-8: no lone surrogate
        assert SHOWN in out.output and "in shell write it inside $'...'" in out.output, (name, out.output)
    assert outcomes["grep"].output.startswith(f"sub/{SHOWN}:1:needle")

    read = box.run("read_file", {"path": f"sub/{SHOWN}"})
    assert read.status == "success" and read.output == "     1\tneedle"
    edited = box.run("edit_file", {"path": f"sub/{SHOWN}", "old_string": "needle", "new_string": "pin"})
    assert edited.status == "success" and SHOWN in edited.output
    assert (workspace / "sub" / BAD.decode("utf-8", "surrogateescape")).read_bytes() == b"pin\n"
    shell = box.run("shell", {"command": f"cat $'sub/{SHOWN}'"})
    assert shell.output == "pin\n"


def test_plain_names_get_no_note(tmp_path: Path) -> None:
    (tmp_path / "plain.txt").write_text("x\n")
    out = make_toolbox(tmp_path).run("list_dir", {})
    assert out.output == "plain.txt"


def test_a_run_that_lists_such_a_name_goes_on_and_saves_its_session(tmp_path: Path) -> None:
    workspace = workspace_with_bad_name(tmp_path)
    script = [openai_reply(tool_calls=[("call_1", "list_dir", {"path": "sub"})]), openai_reply("done")]
    with FakeModelServer(script) as server:
        run = run_exec(["list it", "--no-publish"], openai_env(tmp_path / "home", server), cwd=workspace)
    assert run.returncode == 0, run.stderr
    assert run.result.ok and not run.of_type("error")
    assert len(server.posts) == 2, "the second model call was never sent"
    said = json.dumps(server.posts[1].body)
    assert SHOWN.replace("\\", "\\\\") in said
    stored = SessionStore(tmp_path / "home" / "state" / "sessions.sqlite3").load(run.result.session_id)
    assert SHOWN in json.dumps(stored.messages, ensure_ascii=False).replace("\\\\", "\\")
