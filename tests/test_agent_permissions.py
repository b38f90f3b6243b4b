"""Permission modes and the workspace rules: every escape attempt is a ``denied`` outcome."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from _agent_tools_support import OUTSIDE_SECRET, make_outside, make_toolbox
from agentstream.agent import permissions
from agentstream.agent.permissions import PermissionDenied, allows, open_path, resolve
from agentstream.agent.tools import Toolbox, ToolContext


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    workspace, outside = make_outside(tmp_path)
    (workspace / "inside.txt").write_text("inside\n")
    (workspace / "sub").mkdir()
    (workspace / "link_dir").symlink_to(outside)
    (workspace / "link_file").symlink_to(outside / "secret.txt")
    (workspace / "sub" / "up").symlink_to("../../outside")
    return workspace, outside


def test_modes_allow_the_right_kinds_of_tool() -> None:
    assert [allows("read-only", kind) for kind in ("read", "write", "execute")] == [True, False, False]
    assert all(
        allows(mode, kind) for mode in ("workspace-write", "full") for kind in ("read", "write", "execute")
    )
    assert permissions.PERMISSION_MODES == ("read-only", "workspace-write", "full")


# --- resolve -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "display"),
    [
        ("inside.txt", "inside.txt"),
        ("sub/../inside.txt", "inside.txt"),
        ("./sub", "sub"),
        (".", "."),
        ("new/file", "new/file"),
    ],
)
def test_resolve_inside(dirs: tuple[Path, Path], raw: str, display: str) -> None:
    workspace, _ = dirs
    assert resolve(workspace, "workspace-write", raw).display == display


def test_resolve_absolute_inside_and_inner_symlinks_are_fine(dirs: tuple[Path, Path]) -> None:
    workspace, _ = dirs
    (workspace / "alias").symlink_to("inside.txt")
    assert resolve(workspace, "read-only", str(workspace / "inside.txt")).display == "inside.txt"
    assert resolve(workspace, "read-only", "alias").display == "inside.txt"


ESCAPES = [
    "../outside/secret.txt",
    "sub/../../outside/secret.txt",
    "ABSOLUTE",  # the secret's absolute path
    "link_file",  # a symlink to the secret
    "link_dir/secret.txt",  # through a symlink to the outside directory
    "sub/up/secret.txt",  # through a relative symlink climbing out
    "~/x",
]


def _raw(escape: str, outside: Path) -> str:
    return str(outside / "secret.txt") if escape == "ABSOLUTE" else escape


@pytest.mark.parametrize("escape", ESCAPES)
@pytest.mark.parametrize("mode", ["read-only", "workspace-write"])
def test_resolve_refuses_escapes(dirs: tuple[Path, Path], escape: str, mode: str) -> None:
    workspace, outside = dirs
    with pytest.raises(PermissionDenied) as info:
        resolve(workspace, mode, _raw(escape, outside))
    assert "outside the workspace" in info.value.message and info.value.fix


def test_full_mode_reaches_outside(dirs: tuple[Path, Path]) -> None:
    workspace, outside = dirs
    target = resolve(workspace, "full", "link_file")
    assert target.absolute == outside / "secret.txt" and target.display == str(outside / "secret.txt")
    box = make_toolbox(workspace, mode="full")
    assert OUTSIDE_SECRET in box.run("read_file", {"path": str(outside / "secret.txt")}).output
    assert box.run("write_file", {"path": "../outside/new.txt", "content": "ok"}).status == "success"
    assert (outside / "new.txt").read_text() == "ok"


def test_empty_and_nul_paths_are_refused(dirs: tuple[Path, Path]) -> None:
    workspace, _ = dirs
    for raw in ("", "a\x00b"):
        with pytest.raises(PermissionDenied):
            resolve(workspace, "full", raw)


# --- every tool, every escape --------------------------------------------------------------------


def _calls(raw: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("read_file", {"path": raw}),
        ("write_file", {"path": raw, "content": "pwned"}),
        ("edit_file", {"path": raw, "old_string": OUTSIDE_SECRET, "new_string": "pwned"}),
        ("list_dir", {"path": os.path.dirname(raw) or raw}),
        ("glob", {"pattern": "*", "path": os.path.dirname(raw) or raw}),
        ("grep", {"pattern": "outside", "path": raw}),
    ]


@pytest.mark.parametrize("escape", [e for e in ESCAPES if e != "~/x"])
def test_every_file_tool_denies_every_escape(dirs: tuple[Path, Path], escape: str) -> None:
    workspace, outside = dirs
    box = make_toolbox(workspace)
    for name, arguments in _calls(_raw(escape, outside)):
        if name in ("list_dir", "glob") and escape in ("link_file",):
            continue  # its directory is the workspace itself, which is allowed
        out = box.run(name, arguments)
        assert out.status == "denied", (name, arguments, out)
        assert "outside the workspace" in (out.error or "")
        assert OUTSIDE_SECRET not in out.output
    assert (outside / "secret.txt").read_text() == OUTSIDE_SECRET + "\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_write_through_a_symlinked_directory_creates_nothing_outside(dirs: tuple[Path, Path]) -> None:
    workspace, outside = dirs
    box = make_toolbox(workspace)
    out = box.run("write_file", {"path": "link_dir/deeper/planted.txt", "content": "x"})
    assert out.status == "denied"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_searches_do_not_follow_symlinks_out(dirs: tuple[Path, Path]) -> None:
    workspace, _ = dirs
    box = make_toolbox(workspace)
    found = box.run("glob", {"pattern": "**/*"}).output.splitlines()
    assert "link_dir/secret.txt" not in found and "sub/up/secret.txt" not in found
    assert "link_dir/" in found  # listed, not entered
    assert "no matches" in box.run("grep", {"pattern": "outside-the-workspace"}).output


# --- modes through the toolbox ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("write_file", {"path": "n.txt", "content": "x"}),
        ("edit_file", {"path": "inside.txt", "old_string": "inside", "new_string": "x"}),
        ("shell", {"command": "touch n.txt"}),
    ],
)
def test_read_only_denies_changes(dirs: tuple[Path, Path], name: str, arguments: dict[str, Any]) -> None:
    workspace, _ = dirs
    box = make_toolbox(workspace, mode="read-only")
    assert name not in [spec.name for spec in box.specs]
    out = box.run(name, arguments)
    assert out.status == "denied" and "read-only does not allow" in (out.error or "")
    assert not (workspace / "n.txt").exists() and (workspace / "inside.txt").read_text() == "inside\n"
    assert box.run("read_file", {"path": "inside.txt"}).status == "success"


def test_workspace_write_allows_changes_inside(dirs: tuple[Path, Path]) -> None:
    workspace, _ = dirs
    box = make_toolbox(workspace)
    assert box.run("write_file", {"path": "n.txt", "content": "x"}).status == "success"
    assert box.run("edit_file", {"path": "n.txt", "old_string": "x", "new_string": "y"}).status == "success"
    assert box.run("shell", {"command": "cat n.txt"}).output == "y"


# --- the check-then-use race ---------------------------------------------------------------------


def _swap_after_check(monkeypatch: pytest.MonkeyPatch, victim: Path, replacement: Path) -> None:
    """Make the path check pass, then replace ``victim`` with a symlink before the open."""
    real_resolve = permissions.resolve

    def resolve_then_swap(workspace: Path, mode: str, raw: str) -> permissions.ResolvedPath:
        checked = real_resolve(workspace, mode, raw)
        staged = victim.with_name(victim.name + ".swap")
        staged.symlink_to(replacement)
        os.replace(staged, victim)
        return checked

    monkeypatch.setattr(permissions, "resolve", resolve_then_swap)


@pytest.mark.parametrize("name", ["read_file", "write_file", "edit_file", "grep"])
def test_file_swapped_for_symlink_between_check_and_open(
    dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    workspace, outside = dirs
    (workspace / "victim.txt").write_text(OUTSIDE_SECRET + " decoy\n")
    _swap_after_check(monkeypatch, workspace / "victim.txt", outside / "secret.txt")
    arguments = {
        "path": "victim.txt",
        "content": "pwned",
        "old_string": OUTSIDE_SECRET,
        "new_string": "pwned",
        "pattern": ".",
    }
    spec = next(spec for spec in make_toolbox(workspace).specs if spec.name == name)
    out = make_toolbox(workspace).run(
        name, {k: v for k, v in arguments.items() if k in spec.parameters["properties"]}
    )
    assert out.status == "denied", out
    assert "changed to a symlink" in (out.error or "")
    assert (outside / "secret.txt").read_text() == OUTSIDE_SECRET + "\n"


def test_directory_swapped_for_symlink_between_check_and_open(
    dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace, outside = dirs
    (workspace / "d").mkdir()
    (workspace / "d" / "f.txt").write_text("in d\n")
    real_resolve = permissions.resolve

    def resolve_then_swap(workspace_: Path, mode: str, raw: str) -> permissions.ResolvedPath:
        checked = real_resolve(workspace_, mode, raw)
        (workspace / "d").rename(workspace / "d.moved")
        (workspace / "d").symlink_to(outside)
        return checked

    monkeypatch.setattr(permissions, "resolve", resolve_then_swap)
    out = make_toolbox(workspace).run("write_file", {"path": "d/secret.txt", "content": "pwned"})
    assert out.status == "denied"
    assert (outside / "secret.txt").read_text() == OUTSIDE_SECRET + "\n"


def test_open_path_without_a_race_opens_the_file(dirs: tuple[Path, Path]) -> None:
    workspace, _ = dirs
    fd, target = open_path(workspace, "read-only", "sub/../inside.txt", os.O_RDONLY)
    try:
        assert os.read(fd, 100) == b"inside\n" and target.display == "inside.txt"
    finally:
        os.close(fd)


def _swapper(victim: Path, outside: Path, stop: threading.Event) -> None:
    """Flip ``victim`` between a real file and a symlink to the secret as fast as possible."""
    staged_link, staged_file = victim.with_name("l.tmp"), victim.with_name("f.tmp")
    while not stop.is_set():
        staged_link.symlink_to(outside / "secret.txt")
        os.replace(staged_link, victim)
        staged_file.write_text("harmless\n")
        os.replace(staged_file, victim)


@pytest.mark.parametrize("name", ["read_file", "write_file"])
def test_concurrent_swapper_never_leaks_or_writes_outside(dirs: tuple[Path, Path], name: str) -> None:
    workspace, outside = dirs
    victim = workspace / "victim.txt"
    victim.write_text("harmless\n")
    box = make_toolbox(workspace)
    stop = threading.Event()
    thread = threading.Thread(target=_swapper, args=(victim, outside, stop), daemon=True)
    arguments = (
        {"path": "victim.txt"} if name == "read_file" else {"path": "victim.txt", "content": "pwned\n"}
    )
    statuses: dict[str, int] = {}
    thread.start()
    try:
        deadline = time.monotonic() + 0.75
        while time.monotonic() < deadline:
            out = box.run(name, arguments)
            statuses[out.status] = statuses.get(out.status, 0) + 1
            assert OUTSIDE_SECRET not in out.output
            assert out.status in ("success", "denied"), out
    finally:
        stop.set()
        thread.join()
    assert sum(statuses.values()) > 10
    assert statuses.get("denied", 0) > 0  # the symlink was seen (at the check or at the open) and refused
    assert (outside / "secret.txt").read_text() == OUTSIDE_SECRET + "\n"


def test_toolbox_workspace_given_through_a_symlink_is_resolved(tmp_path: Path) -> None:
    workspace, _ = make_outside(tmp_path)
    (workspace / "a.txt").write_text("a\n")
    alias = tmp_path / "alias"
    alias.symlink_to(workspace)
    box = Toolbox(ToolContext(alias))
    assert box.ctx.workspace == workspace
    assert box.run("read_file", {"path": "a.txt"}).status == "success"


@pytest.mark.parametrize(
    ("argv", "mode"),
    [
        (["hi"], "workspace-write"),  # exec's own documented default
        (["--dialect", "claude", "hi"], "default"),  # as Claude Code: ask before shell and writes
        (["--dialect", "claude", "--permission-mode", "full", "hi"], "full"),
        (["--dialect", "claude", "--dangerously-skip-permissions", "hi"], "bypassPermissions"),
        (["--permission-mode", "read-only", "hi"], "read-only"),
    ],
)
def test_the_default_permission_mode_follows_the_dialect(argv: list[str], mode: str) -> None:
    import argparse

    from agentstream.cli import exec_cmd
    from agentstream.cli._exec_options import resolve_permission_mode

    parser = argparse.ArgumentParser()
    exec_cmd.configure(parser)
    args = parser.parse_args(argv)
    assert resolve_permission_mode(args) == mode
    assert args.permission_mode == mode
