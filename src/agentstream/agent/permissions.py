"""Permission modes and the one place where a tool turns a path into an open file.

Every file tool goes through :func:`open_path`, so the workspace rules are written
once:

* A path is resolved against the workspace with every symlink followed
  (``os.path.realpath``). Outside ``full`` mode the result must lie inside the
  workspace, so ``..``, absolute paths and symlinks that lead out are refused.
* The check and the open are two steps, and a file can be swapped for a symlink in
  between. So the open does not trust the checked path: it walks the resolved path
  one component at a time from a descriptor of the root, with ``O_NOFOLLOW`` on
  every component. The resolved path holds no symlinks, so meeting one during the
  walk means the tree changed under us, and the call is refused.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

from agentstream.errors import AgentstreamError, ErrorCode

if TYPE_CHECKING:
    from agentstream.agent.providers.base import ToolCallDone
    from agentstream.stream import Stream

__all__ = [
    "ALL_PERMISSION_MODES",
    "CLAUDE_PERMISSION_MODES",
    "PERMISSION_MODES",
    "Access",
    "Approvals",
    "Decision",
    "PermissionDenied",
    "PermissionMode",
    "ResolvedPath",
    "allows",
    "names_note",
    "open_path",
    "resolve",
    "shown_name",
    "toolbox_mode",
    "unescaped_name",
]

PermissionMode: TypeAlias = Literal["read-only", "workspace-write", "full"]
Access: TypeAlias = Literal["read", "write", "execute"]

PERMISSION_MODES: Final[tuple[str, ...]] = ("read-only", "workspace-write", "full")

_ALLOWED: Final[dict[str, frozenset[str]]] = {
    "read-only": frozenset({"read"}),
    "workspace-write": frozenset({"read", "write", "execute"}),
    "full": frozenset({"read", "write", "execute"}),
}

_RACE_FIX: Final = "retry; if it persists, something is replacing files in the workspace"


class PermissionDenied(AgentstreamError):
    """A tool call the permission mode or the workspace rules refuse; the model sees the reason."""

    code = ErrorCode.PERMISSION_DENIED


def allows(mode: str, access: str) -> bool:
    """Whether ``mode`` lets a tool of kind ``access`` (read / write / execute) run at all."""
    return access in _ALLOWED[mode]


_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_BYTE_ESCAPE: Final = re.compile(r"\\x([89a-fA-F][0-9a-fA-F])")


def _escape_surrogate(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "\ufffd"


def shown_name(text: str) -> str:
    """``text`` as valid UTF-8 for the model, the stream and the session store.

    A file name that is not UTF-8 comes from the OS with each bad byte as a lone
    surrogate (``surrogateescape``), which no JSON encoder or API accepts. Such a
    byte is shown as ``\\xNN``, which :func:`unescaped_name` turns back into the
    byte, so the model can still name the file (and bash's ``$'...'`` reads it
    the same way). Any other lone surrogate becomes U+FFFD.
    """
    return _SURROGATE.sub(_escape_surrogate, text)


def unescaped_name(raw: str) -> str:
    """A path the model wrote, with each ``\\xNN`` (80-ff) of :func:`shown_name` back as the byte it stands for."""
    return _BYTE_ESCAPE.sub(lambda match: chr(0xDC00 + int(match.group(1), 16)), raw)


def names_note(names: Iterable[str]) -> str:
    """A last line telling the model how to use a shown name with ``\\xNN`` in it; empty when there is none."""
    if not any(_BYTE_ESCAPE.search(name) for name in names):
        return ""
    return (
        "\n[\\xNN in a name is a byte that is not UTF-8: the file tools take the name as shown; "
        "in shell write it inside $'...']"
    )


@dataclass(frozen=True)
class ResolvedPath:
    """A path after symlink resolution, split the way :func:`open_path` walks it."""

    absolute: Path
    """The real path (no symlinks, no ``..``)."""
    root: Path
    """Where the walk starts: the workspace, or ``/`` for a path outside it (``full`` mode only)."""
    parts: tuple[str, ...]
    """Components of ``absolute`` below ``root``; empty for the root itself."""

    @property
    def display(self) -> str:
        """How tools name the path to the model: relative inside the workspace, else absolute."""
        if self.root == Path("/"):
            return shown_name(str(self.absolute))
        return shown_name("/".join(self.parts)) or "."


def resolve(workspace: Path, mode: str, raw: str) -> ResolvedPath:
    """Resolve ``raw`` (relative to ``workspace``, or absolute) and apply the mode's path rule.

    ``workspace`` must already be a real path. Raises :class:`PermissionDenied` when the
    real path leaves the workspace outside ``full`` mode.
    """
    if not raw or "\x00" in raw:
        raise PermissionDenied("the path is empty or contains a NUL byte", fix="pass a file name")
    try:
        absolute = Path(os.path.realpath(workspace / os.path.expanduser(unescaped_name(raw))))
    except OSError:  # a symlink vanished between lstat and readlink: the tree is changing under us
        raise PermissionDenied(f"{raw!r} changed while it was being checked", fix=_RACE_FIX) from None
    if absolute == workspace or workspace in absolute.parents:
        return ResolvedPath(absolute, workspace, absolute.relative_to(workspace).parts)
    if mode != "full":
        raise PermissionDenied(
            f"{raw!r} resolves to {absolute}, outside the workspace {workspace}",
            fix="use a path inside the workspace (symlinks count where they lead), "
            "or run with --permission-mode full",
        )
    return ResolvedPath(absolute, Path("/"), absolute.parts[1:])


def open_path(
    workspace: Path,
    mode: str,
    raw: str,
    flags: int,
    *,
    make_parents: bool = False,
    file_mode: int = 0o666,
) -> tuple[int, ResolvedPath]:
    """Check ``raw`` against the rules, then open it without following any symlink.

    ``flags`` are ``os.open`` flags for the last component (add ``os.O_DIRECTORY`` to
    open a directory). With ``make_parents`` missing directories are created on the way.
    Returns the descriptor (the caller closes it) and the resolved path. Raises
    :class:`PermissionDenied` for a rule violation or a symlink swapped in after the
    check, and ``OSError`` for ordinary failures (missing file, not a directory…).
    """
    target = resolve(workspace, mode, raw)
    return _open_beneath(target, flags, make_parents, file_mode), target


def _open_beneath(target: ResolvedPath, flags: int, make_parents: bool, file_mode: int) -> int:
    """Walk from ``target.root`` to the target with ``O_NOFOLLOW`` at every step."""
    dir_flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(target.root, dir_flags)
    if not target.parts:  # the root itself: like open(2), a directory opens for reading only
        if flags & (os.O_WRONLY | os.O_RDWR) == 0:
            return fd
        os.close(fd)
        raise IsADirectoryError(errno.EISDIR, "is a directory", target.display)
    last = len(target.parts) - 1
    for index, name in enumerate(target.parts):
        try:
            if index < last:
                child = _step(fd, name, dir_flags, 0o777, make_parents, target)
            else:
                child = _step(fd, name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, file_mode, False, target)
        finally:
            os.close(fd)
        fd = child
    return fd


def _step(parent: int, name: str, flags: int, file_mode: int, make_dir: bool, target: ResolvedPath) -> int:
    """Open ``name`` under ``parent``, refusing a symlink found there."""
    try:
        try:
            return os.open(name, flags, file_mode, dir_fd=parent)
        except FileNotFoundError:
            if not make_dir:
                raise
            _mkdir_quietly(name, parent)
            return os.open(name, flags, dir_fd=parent)
    except OSError as exc:
        # Each open names one component, so ELOOP (EMLINK on BSD) can only mean it is a symlink;
        # a directory open of a symlink fails with ENOTDIR, which needs a look to tell apart.
        if exc.errno in (errno.ELOOP, errno.EMLINK) or (
            exc.errno == errno.ENOTDIR and _is_symlink(name, parent)
        ):
            raise PermissionDenied(
                f"{target.display!r} changed to a symlink while it was being opened", fix=_RACE_FIX
            ) from None
        raise


def _mkdir_quietly(name: str, parent: int) -> None:
    try:
        os.mkdir(name, 0o777, dir_fd=parent)
    except FileExistsError:
        pass  # made concurrently; the open that follows re-checks what it is


def _is_symlink(name: str, parent: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False


# -- asking before a tool runs ------------------------------------------------------

CLAUDE_PERMISSION_MODES: Final[tuple[str, ...]] = (
    "default",
    "acceptEdits",
    "plan",
    "bypassPermissions",
    "dontAsk",
    "auto",
)
"""Claude Code's modes, accepted too (``exec --dialect claude`` gets them from the Claude Agent SDK)."""

ALL_PERMISSION_MODES: Final[tuple[str, ...]] = PERMISSION_MODES + CLAUDE_PERMISSION_MODES

BYPASS_MODES: Final = frozenset({"full", "bypassPermissions"})
"""Modes in which every tool call runs unasked: a session enters one only if it started in one or was allowed to."""

_RUNS_BY_ITSELF: Final[dict[str, frozenset[str]]] = {
    **_ALLOWED,
    "default": frozenset({"read"}),
    "auto": frozenset({"read"}),
    "dontAsk": frozenset({"read"}),
    "plan": frozenset({"read"}),
    "acceptEdits": frozenset({"read", "write"}),
    "bypassPermissions": frozenset({"read", "write", "execute"}),
}
"""Per mode, the kinds of tool call that run without asking anyone."""

_NEVER_ASKS: Final = frozenset({"dontAsk", "plan"})
"""Modes in which a call the mode does not run by itself is denied without asking (see :attr:`Approvals.asks`)."""

_TOOLBOX_MODE: Final[dict[str, PermissionMode]] = {
    "default": "read-only",
    "auto": "read-only",
    "dontAsk": "read-only",
    "plan": "read-only",
    "acceptEdits": "workspace-write",
    "bypassPermissions": "full",
}


def toolbox_mode(mode: str, *, grantable: bool) -> PermissionMode:
    """The mode the toolbox runs in: what the model is offered and the path rule.

    When someone could grant a call the mode does not run by itself (a permission
    prompt, a client's hook, ``--allowedTools``), every tool is offered, so the
    grant can take effect; :class:`Approvals` still denies what nobody grants.
    ``plan`` stays read-only; without any grant, only what the mode runs is offered.
    """
    if mode in PERMISSION_MODES:
        base: PermissionMode = mode  # type: ignore[assignment]
    else:
        base = _TOOLBOX_MODE[mode]
    if grantable and base == "read-only" and mode != "plan":
        return "workspace-write"
    return base


@dataclass(frozen=True)
class Decision:
    """What was decided about one tool call."""

    allow: bool
    message: str = ""
    """Why it was denied (the model reads it)."""
    arguments: dict[str, object] | None = None
    """Run with these arguments instead (an allow may edit the call)."""
    interrupt: bool = False
    """Deny and also stop the turn."""
    failed: bool = False
    """No decision: the one asked failed to make one (a hook whose callback raised)."""


class Approvals:
    """Which tool calls need a decision before they run, and who is asked.

    ``ask`` is set by a two-way session (it emits a ``permission_request`` and waits
    for the answer); without it a call that needs asking is denied, as Claude Code
    does in print mode without a permission prompt tool.
    """

    def __init__(
        self, mode: str, *, always_allowed: frozenset[str] = frozenset(), claude_words: bool = False
    ) -> None:
        self.set_mode(mode)
        self.always_allowed = always_allowed
        self.claude_words = claude_words
        """Deny what nobody granted as Claude Code does (a run that speaks as Claude Code)."""
        self.ask: Callable[[Stream, ToolCallDone], Decision] | None = None
        self.before: Callable[[Stream, ToolCallDone], Decision | None] | None = None
        """The client's hooks on every call, asked first (a two-way session whose client registered some)."""

    def set_mode(self, mode: str) -> None:
        if mode not in _RUNS_BY_ITSELF:
            raise PermissionDenied(
                f"unknown permission mode {mode!r}", fix=f"use one of: {', '.join(ALL_PERMISSION_MODES)}"
            )
        self.mode = mode
        self._by_itself = _RUNS_BY_ITSELF[mode]

    def runs_by_itself(self, access: str) -> bool:
        """Whether the mode lets a tool of kind ``access`` run without anyone's decision."""
        return access in self._by_itself

    def needs_asking(self, tool: str, access: str) -> bool:
        return not self.runs_by_itself(access) and tool not in self.always_allowed

    @property
    def asks(self) -> bool:
        """Whether a call that needs a decision is put to anyone: not in ``dontAsk`` (it denies what was not
        granted beforehand, as Claude Code does) nor in ``plan`` (its tools only read: an allow could not run it)."""
        return self.ask is not None and self.mode not in _NEVER_ASKS

    def refusal(self, tool: str, access: str) -> str:
        """Why a call that needs a decision nobody can make here is denied, naming the mode the user chose."""
        if self.claude_words:
            from agentstream.agent.runner import CLAUDE_TOOL_NAMES

            name = next((theirs for theirs, ours in CLAUDE_TOOL_NAMES.items() if ours == tool), tool)
            return f"Claude requested permissions to use {name}, but you haven't granted it yet."
        return (
            f"permission denied: permission mode {self.mode} does not let {access} tools run by themselves, "
            f"and no one can be asked in this run (allow it with --allowedTools {tool}, "
            "or choose another --permission-mode)"
        )
