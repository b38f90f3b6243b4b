"""File tools: ``read_file``, ``write_file``, ``edit_file``, ``list_dir``.

Each opens its path through :func:`agentstream.agent.permissions.open_path`, so the
workspace rules and the symlink-swap defence apply to all of them alike.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any, Final

from agentstream.agent.permissions import ResolvedPath, names_note, open_path, shown_name
from agentstream.agent.tools._base import Tool, ToolContext, ToolFailure, ToolOutcome, ToolSpec

__all__ = ["FS_TOOLS", "is_binary", "open_checked"]

DEFAULT_LINES: Final = 2000
MAX_LINE_CHARS: Final = 2000
MAX_EDIT_BYTES: Final = 10 * 1024 * 1024
MAX_DIR_ENTRIES: Final = 1000
_SNIFF_BYTES: Final = 8192
_HINT_ROOM: Final = 120
"""Bytes of the output cap kept free for read_file's "read on with start_line=" line."""


@contextmanager
def open_checked(
    ctx: ToolContext, raw: str, flags: int, *, regular: bool = True, make_parents: bool = False
) -> Iterator[tuple[int, ResolvedPath]]:
    """Open ``raw`` under the workspace rules and turn OS errors into messages a model can act on.

    ``O_NONBLOCK`` is always added so that a FIFO cannot hang the agent; with
    ``regular`` anything but a regular file is refused after the open.
    """
    try:
        fd, path = open_path(ctx.workspace, ctx.mode, raw, flags | os.O_NONBLOCK, make_parents=make_parents)
    except OSError as exc:
        raise ToolFailure(_describe_os_error(exc, raw)) from None
    try:
        if regular:
            _require_regular(fd, path)
        yield fd, path
    except OSError as exc:
        raise ToolFailure(_describe_os_error(exc, path.display)) from None
    finally:
        os.close(fd)


def _require_regular(fd: int, path: ResolvedPath) -> None:
    kind = os.fstat(fd).st_mode
    if stat.S_ISDIR(kind):
        raise ToolFailure(f"{path.display} is a directory (use list_dir)")
    if not stat.S_ISREG(kind):
        raise ToolFailure(f"{path.display} is not a regular file (a device, FIFO or socket)")


_OS_ERROR_HINTS: Final = {
    errno.ENOENT: "no such file or directory (list_dir or glob shows what exists)",
    errno.EISDIR: "is a directory (use list_dir)",
    errno.ENOTDIR: "a part of the path is not a directory",
    errno.EACCES: "permission denied by the operating system",
    errno.EPERM: "permission denied by the operating system",
    errno.ENXIO: "is a special file that cannot be opened this way",
}


def _describe_os_error(exc: OSError, name: str) -> str:
    return f"{name}: {_OS_ERROR_HINTS.get(exc.errno or 0, exc.strerror or str(exc))}"


def is_binary(head: bytes) -> bool:
    """Text files do not contain NUL bytes; nearly every binary format does, early on."""
    return b"\x00" in head


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _line_window(args: dict[str, Any]) -> tuple[int, int, bool]:
    """First line, last line (inclusive) and whether the caller chose the end (else it is the default window's)."""
    by_offset = args["offset"] is not None or args["limit"] is not None
    by_range = args["start_line"] is not None or args["end_line"] is not None
    if by_offset and by_range:
        raise ToolFailure("read_file: give offset/limit or start_line/end_line, not both")
    first: int = args["offset"] or args["start_line"] or 1
    if args["limit"] is not None:
        return first, first + args["limit"] - 1, True
    if args["end_line"] is not None:
        if args["end_line"] < first:
            raise ToolFailure(f"read_file: end_line {args['end_line']} is before start_line {first}")
        return first, args["end_line"], True
    return first, first + DEFAULT_LINES - 1, False


def read_file(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    first, last, chosen = _line_window(args)
    with open_checked(ctx, args["path"], os.O_RDONLY) as (fd, path), os.fdopen(fd, "rb", closefd=False) as fh:
        if is_binary(fh.read(_SNIFF_BYTES)):
            raise ToolFailure(
                f"{path.display} looks like a binary file (it contains NUL bytes); read_file shows text"
            )
        fh.seek(0)
        return _numbered_lines(_bounded_lines(fh), path.display, first, last, chosen, ctx.output_cap_bytes)


def _bounded_lines(fh: IO[bytes]) -> Iterator[bytes]:
    """The file's lines, each at most a little over ``MAX_LINE_CHARS`` characters, so that a
    one-line 1 GB file costs no more memory than a short one (the cut is marked later)."""
    limit = 4 * MAX_LINE_CHARS + 8  # enough bytes for MAX_LINE_CHARS + 2 characters of any UTF-8
    while line := fh.readline(limit):
        if len(line) == limit and not line.endswith(b"\n"):
            while (rest := fh.readline(limit)) and not rest.endswith(b"\n"):
                pass  # skip the rest of an over-long line
        yield line


def _numbered_lines(
    lines: Iterator[bytes], name: str, first: int, last: int, chosen: bool, cap: int
) -> ToolOutcome:
    out: list[str] = []
    used, number, truncated, more = 0, 0, False, False
    for number, raw in enumerate(lines, start=1):
        if number < first:
            continue
        if number > last:
            more = True
            break
        text = raw.rstrip(b"\r\n").decode("utf-8", "replace")
        if len(text) > MAX_LINE_CHARS:
            text, truncated = text[:MAX_LINE_CHARS] + " [line cut]", True
        row = f"{number:6}\t{text}"
        used += len(row.encode()) + 1
        if used > cap - _HINT_ROOM and out:  # the first line always shows, however long (it is cut above)
            more = truncated = True
            break
        out.append(row)
    if number < first and not (number == 0 and first == 1):
        raise ToolFailure(
            f"{name} has only {number} line{'s' * (number != 1)}; start_line {first} is past the end"
        )
    if not out:
        return ToolOutcome("success", "(empty file)")
    shown_last = first + len(out) - 1
    truncated = truncated or (more and not chosen)
    if more:
        out.append(
            f"[lines {first}-{shown_last} shown; the file continues: read on with start_line={shown_last + 1}]"
        )
    return ToolOutcome("success", "\n".join(out), truncated=truncated)


def write_file(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    data = args["content"].encode("utf-8", "surrogateescape")
    flags = os.O_WRONLY | os.O_CREAT
    with open_checked(ctx, args["path"], flags, make_parents=True) as (fd, path):
        os.ftruncate(fd, 0)
        _write_all(fd, data)
    lines = data.count(b"\n") + (not data.endswith(b"\n") and bool(data))
    return ToolOutcome(
        "success", f"wrote {len(data)} bytes ({lines} line{'s' * (lines != 1)}) to {path.display}"
    )


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def edit_file(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    old, new, replace_all = args["old_string"], args["new_string"], args["replace_all"]
    if not old:
        raise ToolFailure("edit_file: old_string is empty; use write_file to create or overwrite a file")
    if old == new:
        raise ToolFailure("edit_file: old_string and new_string are the same; nothing to change")
    with open_checked(ctx, args["path"], os.O_RDWR) as (fd, path):
        if os.fstat(fd).st_size > MAX_EDIT_BYTES:
            raise ToolFailure(
                f"{path.display} is larger than {MAX_EDIT_BYTES} bytes; edit it with shell tools"
            )
        data = _read_all(fd)
        if is_binary(data[:_SNIFF_BYTES]):
            raise ToolFailure(f"{path.display} looks like a binary file; edit_file changes text files")
        text = data.decode("utf-8", "surrogateescape")
        count = text.count(old)
        if count == 0:
            raise ToolFailure(
                f"old_string was not found in {path.display}; read the file again and copy the text exactly "
                "(whitespace and indentation matter)"
            )
        if count > 1 and not replace_all:
            raise ToolFailure(
                f"old_string appears {count} times in {path.display}; give more context or replace_all"
            )
        at_line = text.count("\n", 0, text.index(old)) + 1
        updated = text.replace(old, new).encode("utf-8", "surrogateescape")
        os.lseek(fd, 0, os.SEEK_SET)
        _write_all(fd, updated)
        os.ftruncate(fd, len(updated))
    where = f"first at line {at_line}" if count > 1 else f"at line {at_line}"
    return ToolOutcome(
        "success", f"replaced {count} occurrence{'s' * (count > 1)} in {path.display} ({where})"
    )


def list_dir(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    with (
        open_checked(ctx, args["path"], os.O_RDONLY | os.O_DIRECTORY, regular=False) as (fd, path),
        os.scandir(fd) as entries,
    ):
        names = sorted(_entry_label(entry) for entry in entries)
    if not names:
        return ToolOutcome("success", f"{path.display}: (empty directory)")
    shown = names[:MAX_DIR_ENTRIES]
    note = names_note(shown)
    if len(names) > len(shown):
        shown.append(f"[{len(names) - len(shown)} more entries not shown; use glob to narrow down]")
    return ToolOutcome("success", "\n".join(shown) + note, truncated=len(names) > MAX_DIR_ENTRIES)


def _entry_label(entry: os.DirEntry[str]) -> str:
    """``name/`` for a directory, ``name@`` for a symlink, ``name`` for anything else."""
    name = shown_name(entry.name)
    if entry.is_symlink():
        return name + "@"
    return name + "/" if entry.is_dir(follow_symlinks=False) else name


_PATH = {"type": "string", "description": "File path, relative to the workspace (or absolute inside it)."}

FS_TOOLS: Final = (
    Tool(
        ToolSpec(
            "read_file",
            "Read a text file. Returns numbered lines (`     N<TAB>text`). Reads at most "
            f"{DEFAULT_LINES} lines unless you give a range; use offset/limit or start_line/end_line "
            "to read a part of a large file. Binary files are refused.",
            {
                "type": "object",
                "properties": {
                    "path": _PATH,
                    "offset": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "First line to read (1-based).",
                    },
                    "limit": {"type": "integer", "minimum": 1, "description": "How many lines to read."},
                    "start_line": {"type": "integer", "minimum": 1, "description": "First line (1-based)."},
                    "end_line": {"type": "integer", "minimum": 1, "description": "Last line, inclusive."},
                },
                "required": ["path"],
            },
            "read",
        ),
        read_file,
    ),
    Tool(
        ToolSpec(
            "write_file",
            "Create a file or replace its whole content. Missing parent directories are created. "
            "To change part of an existing file prefer edit_file.",
            {
                "type": "object",
                "properties": {
                    "path": _PATH,
                    "content": {"type": "string", "description": "The complete new content of the file."},
                },
                "required": ["path", "content"],
            },
            "write",
        ),
        write_file,
    ),
    Tool(
        ToolSpec(
            "edit_file",
            "Replace an exact piece of text in a file. old_string must match the file exactly, "
            "whitespace included, and must be unique unless replace_all is true; include surrounding "
            "lines to make it unique.",
            {
                "type": "object",
                "properties": {
                    "path": _PATH,
                    "old_string": {"type": "string", "description": "Exact text to replace."},
                    "new_string": {"type": "string", "description": "Replacement text."},
                    "replace_all": {
                        "type": "boolean",
                        "default": False,
                        "description": "Replace every occurrence instead of requiring exactly one.",
                    },
                },
                "required": ["path", "old_string", "new_string"],
            },
            "write",
        ),
        edit_file,
    ),
    Tool(
        ToolSpec(
            "list_dir",
            "List a directory's entries, sorted; directories end with `/`, symlinks with `@`.",
            {
                "type": "object",
                "properties": {
                    "path": {
                        **_PATH,
                        "default": ".",
                        "description": "Directory; default the workspace root.",
                    },
                },
            },
            "read",
        ),
        list_dir,
    ),
)
