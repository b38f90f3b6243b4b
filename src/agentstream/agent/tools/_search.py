"""Search tools: ``glob`` and ``grep``, in pure Python so no external binary is needed.

Both walk the tree with ``os.fwalk`` from a descriptor opened under the workspace
rules; ``fwalk`` does not follow symlinked directories and re-checks each directory
it enters, so a search cannot wander out of the workspace through a symlink.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from typing import Any, Final

from agentstream.agent.permissions import names_note, shown_name
from agentstream.agent.tools._base import Tool, ToolContext, ToolFailure, ToolOutcome, ToolSpec, cap_text
from agentstream.agent.tools._fs import is_binary, open_checked

__all__ = ["SEARCH_TOOLS", "glob_regex"]

SKIPPED_DIRS: Final = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".mypy_cache",
        ".pytest_cache",
    }
)
"""Never descended into (they are still searched when passed as ``path`` themselves)."""

MAX_GLOB_RESULTS: Final = 1000
MAX_GREP_MATCHES: Final = 200
MAX_GREP_FILE_BYTES: Final = 10 * 1024 * 1024
MAX_MATCH_CHARS: Final = 300
MAX_VISITED: Final = 200_000
"""A walk stops after this many entries, so a search of a huge tree still answers."""


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a glob over ``/``-separated relative paths.

    ``*`` and ``?`` stay within one path component, ``**`` spans any number of
    directories, ``[abc]``/``[!abc]`` are character classes and ``{a,b}`` alternatives.
    Unlike a shell, ``*`` also matches names that start with a dot.
    """
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise ToolFailure(
            f"pattern {pattern!r} must be relative and without '..'; choose the directory with path"
        )
    pieces = pattern.split("/")
    regex = []
    for index, piece in enumerate(pieces):
        last = index == len(pieces) - 1
        if piece == "**":
            regex.append(".*" if last else "(?:[^/]+/)*")
        else:
            regex.append(_component_regex(piece) + ("" if last else "/"))
    try:
        return re.compile("".join(regex) + r"\Z")
    except re.error as exc:
        raise ToolFailure(f"invalid glob pattern {pattern!r}: {exc}") from None


def _component_regex(piece: str) -> str:
    out, i, in_braces = [], 0, False
    while i < len(piece):
        char = piece[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and (end := piece.find("]", i + 2)) != -1:
            body = piece[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end
        elif char == "{" and not in_braces and "}" in piece[i:]:
            out.append("(?:")
            in_braces = True
        elif char == "," and in_braces:
            out.append("|")
        elif char == "}" and in_braces:
            out.append(")")
            in_braces = False
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def _walk(fd: int, counter: list[int]) -> Iterator[tuple[str, str, bool, int]]:
    """Yield ``(relative path, name, is_dir, dir_fd)`` for every entry below ``fd``, sorted, bounded.

    The relative path is as the model sees it (:func:`shown_name`), so a glob matches what it was shown;
    ``name`` is the real one, to open.
    """
    for top, dirs, files, dir_fd in os.fwalk(".", dir_fd=fd):
        dirs.sort()
        prefix = "" if top == "." else shown_name(top[2:]) + "/"
        dir_names = set(dirs)
        for name in sorted(dirs + files):
            counter[0] += 1
            if counter[0] > MAX_VISITED:
                return
            yield prefix + shown_name(name), name, name in dir_names, dir_fd
        dirs[:] = [name for name in dirs if name not in SKIPPED_DIRS]


def _joined(base: str, relative: str) -> str:
    return relative if base == "." else f"{base.rstrip('/')}/{relative}"


def glob(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    regex = glob_regex(args["pattern"])
    counter = [0]
    with open_checked(ctx, args["path"], os.O_RDONLY | os.O_DIRECTORY, regular=False) as (fd, base):
        found = [
            _joined(base.display, rel) + ("/" if is_dir else "")
            for rel, _, is_dir, _ in _walk(fd, counter)
            if regex.match(rel)
        ]
    found.sort()
    notes = _limit_notes(len(found), MAX_GLOB_RESULTS, counter[0], "narrow the pattern")
    if not found:
        return ToolOutcome("success", f"no paths match {args['pattern']!r} under {base.display}" + notes)
    shown = found[:MAX_GLOB_RESULTS]
    return ToolOutcome("success", "\n".join(shown) + notes + names_note(shown), truncated=bool(notes))


def _limit_notes(count: int, limit: int, visited: int, advice: str) -> str:
    notes = []
    if count > limit:
        notes.append(f"[{count - limit} more not shown; {advice}]")
    if visited > MAX_VISITED:
        notes.append(f"[stopped after {MAX_VISITED} entries; pass a narrower path]")
    return "".join("\n" + note for note in notes)


def grep(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    try:
        regex = re.compile(args["pattern"], re.IGNORECASE if args["case_insensitive"] else 0)
    except re.error as exc:
        raise ToolFailure(f"grep: invalid regular expression {args['pattern']!r}: {exc}") from None
    name_filter = glob_regex(args["glob"]) if args["glob"] else None
    matches: list[str] = []
    matched_files: list[str] = []
    counter = [0]
    with open_checked(ctx, args["path"], os.O_RDONLY, regular=False) as (fd, base):
        if stat.S_ISREG(os.fstat(fd).st_mode):
            _grep_fd(fd, base.display, regex, matches)
        elif stat.S_ISDIR(os.fstat(fd).st_mode):
            for rel, name, is_dir, dir_fd in _walk(fd, counter):
                filtered = rel if "/" in (args["glob"] or "") else rel.rpartition("/")[2]
                if is_dir or (name_filter and not name_filter.match(filtered)):
                    continue
                before = len(matches)
                _grep_entry(dir_fd, name, _joined(base.display, rel), regex, matches)
                if len(matches) > before:
                    matched_files.append(rel)
                if len(matches) > MAX_GREP_MATCHES:
                    break
    notes = _limit_notes(len(matches), MAX_GREP_MATCHES, counter[0], "refine the pattern, path or glob")
    if not matches:
        return ToolOutcome("success", f"no matches for {args['pattern']!r} under {base.display}" + notes)
    shown = "\n".join(matches[:MAX_GREP_MATCHES]) + notes + names_note(matched_files)
    text, cut = cap_text(shown, ctx.output_cap_bytes)
    return ToolOutcome("success", text, truncated=cut or bool(notes))


def _grep_entry(dir_fd: int, name: str, shown: str, regex: re.Pattern[str], matches: list[str]) -> None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return  # symlinks, sockets, unreadable files: skipped, as grep -r does
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_size <= MAX_GREP_FILE_BYTES:
            _grep_fd(fd, shown, regex, matches)
    finally:
        os.close(fd)


def _grep_fd(fd: int, shown: str, regex: re.Pattern[str], matches: list[str]) -> None:
    data = os.read(fd, MAX_GREP_FILE_BYTES + 1)[:MAX_GREP_FILE_BYTES]
    if is_binary(data[:8192]):
        return
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
        if regex.search(line):
            text = line if len(line) <= MAX_MATCH_CHARS else line[:MAX_MATCH_CHARS] + " [cut]"
            matches.append(f"{shown}:{number}:{text}")
            if len(matches) > MAX_GREP_MATCHES:
                return


SEARCH_TOOLS: Final = (
    Tool(
        ToolSpec(
            "glob",
            "Find files and directories whose path (relative to `path`) matches a glob pattern such as "
            "`**/*.py` or `src/*.{ts,tsx}`. Results are sorted, directories end with `/`; at most "
            f"{MAX_GLOB_RESULTS} are shown. Skips {', '.join(sorted(SKIPPED_DIRS))}.",
            {
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Glob pattern, relative to path."},
                    "path": {"type": "string", "default": ".", "description": "Directory to search from."},
                },
                "required": ["pattern"],
            },
            "read",
        ),
        glob,
    ),
    Tool(
        ToolSpec(
            "grep",
            "Search file contents with a Python regular expression, line by line. Returns "
            f"`path:line:text` for up to {MAX_GREP_MATCHES} matches. Skips binary files, files over "
            f"{MAX_GREP_FILE_BYTES // (1024 * 1024)} MB and the directories glob skips.",
            {
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression (Python syntax)."},
                    "path": {"type": "string", "default": ".", "description": "File or directory to search."},
                    "glob": {
                        "type": "string",
                        "description": "Only search files matching this glob (matched against the file name, "
                        "or against the relative path if it contains '/'), e.g. `*.py`.",
                    },
                    "case_insensitive": {"type": "boolean", "default": False, "description": "Ignore case."},
                },
                "required": ["pattern"],
            },
            "read",
        ),
        grep,
    ),
)
