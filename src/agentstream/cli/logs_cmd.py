"""``agentstream logs [--follow] FILE``: a file's lines as ``log`` events on a canonical stream.

``--follow`` keeps reading new lines like ``tail -F``: it survives rotation (the
file renamed and a new one created: the old one is read to its end, then the new
one from its start) and truncation (read again from the start), and waits for a
file that does not exist yet. New data is polled for every 10 ms, backing off to
250 ms while the file is quiet.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from typing import TYPE_CHECKING, Final

from agentstream import _signals
from agentstream.cli._bus_options import add_publish_options
from agentstream.cli._options import add_output_options, seconds

if TYPE_CHECKING:
    from io import BufferedReader

    from agentstream.protocol import LogLevel
    from agentstream.stream import Stream

POLL_MIN_S: Final = 0.01
POLL_MAX_S: Final = 0.25
_LEVEL: Final = re.compile(
    r"\b(DEBUG|INFO|NOTICE|WARN(?:ING)?|ERROR|ERR|CRITICAL|FATAL|PANIC)\b|\[(\w+)\]|level=(\w+)"
    r"|\b((?i:debug|info|notice|warn(?:ing)?|error|err|critical|fatal|panic)):"  # git's "fatal:", "Warning:"
)
_LEVELS: Final[dict[str, LogLevel]] = {
    "debug": "debug",
    "info": "info",
    "notice": "info",
    "warn": "warn",
    "warning": "warn",
    "error": "error",
    "err": "error",
    "critical": "error",
    "fatal": "error",
    "panic": "error",
}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "file",
        metavar="FILE",
        help="the file to read ('-': stdin; a FIFO or <(cmd) is read line by line as it comes)",
    )
    parser.add_argument(
        "-f", "--follow", action="store_true", help="keep streaming new lines (survives rotation)"
    )
    parser.add_argument(
        "--from-start", action="store_true", help="with --follow, begin with the existing lines"
    )
    parser.add_argument(
        "--level",
        choices=sorted(set(_LEVELS.values())),
        default=None,
        help="the level of every line (default: guessed)",
    )
    parser.add_argument(
        "--timeout", type=seconds, default=None, metavar="S", help="with --follow, stop after S seconds"
    )
    add_output_options(parser)
    add_publish_options(parser, default=False)


def run(args: argparse.Namespace) -> int:
    from agentstream._secrets import event_redactor
    from agentstream.cli._bus_options import publish
    from agentstream.errors import UsageError
    from agentstream.stream import Stream

    if not args.follow and (args.timeout is not None or args.from_start):
        given = "--timeout" if args.timeout is not None else "--from-start"
        raise UsageError(f"{given} applies to --follow only", fix=f"add --follow, or drop {given}")
    stream = Stream(
        f"logs {args.file}",
        output_format=args.output_format,
        dialect=args.dialect,
        color=args.color,
        redact=event_redactor(),  # a log may print a key from the environment; the bus must not keep it
    )
    close = publish(stream, args)
    try:
        with stream:
            if not args.follow:
                with _opened(args.file) as source:
                    _emit_all(stream, source, args.level)
            else:
                _Tail(stream, args.file, args.level, args.from_start).run(args.timeout)
    finally:
        close()
    return stream.result.exit_code if stream.result else 1


def _opened(path: str) -> BufferedReader:
    """``path`` (a file, a FIFO, ``/dev/stdin``, ``<(cmd)``; ``-``: stdin) to read once to its end."""
    from agentstream.cli._options import stdin_bytes
    from agentstream.errors import UsageError

    if path == "-":
        return os.fdopen(os.dup(stdin_bytes(fix="pass FILE, or pipe the log in").fileno()), "rb")
    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory", fix="pass one log file")
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise UsageError(
            f"no such file: {path}", fix="check the path, or use --follow to wait for it"
        ) from None
    except PermissionError:
        raise UsageError(
            f"cannot read {path}: permission denied", fix="check the file's permissions"
        ) from None


def _emit_all(stream: Stream, source: BufferedReader, level: LogLevel | None) -> None:
    """Each line as soon as it is whole (a pipe's lines go out live), the unterminated last one at the end."""
    pending = bytearray()
    while chunk := source.read1(1 << 16):  # what a pipe has now, without waiting for more
        pending += chunk
        end = pending.rfind(b"\n") + 1
        if end:
            _emit_lines(stream, bytes(pending[:end]), level, final=False)
            del pending[:end]
    _emit_lines(stream, bytes(pending), level, final=True)


def level_of(line: str) -> LogLevel:
    """The level a line announces near its start (``ERROR``, ``[warn]``, ``level=debug``…), else info."""
    for match in _LEVEL.finditer(line, 0, 120):
        level = _LEVELS.get(next(word for word in match.groups() if word).lower())
        if level is not None:
            return level
    return "info"


def _emit_lines(stream: Stream, data: bytes, level: LogLevel | None, *, final: bool) -> bytes:
    """Emit each complete line of ``data``; return the unfinished rest (emitted too when ``final``)."""
    *complete, rest = data.split(b"\n")
    if final and rest:
        complete.append(rest)
        rest = b""
    for raw in complete:
        text = raw.rstrip(b"\r").decode("utf-8", errors="replace")
        stream.log(text, level=level or level_of(text))
    return rest


ANCHOR_BYTES: Final = 256
"""How much of what was read last is compared with the file before reading on (see ``_Tail``)."""


class _Tail:
    """Follows one path across rotation and truncation.

    Truncation is found even when the file was truncated and written past our
    offset again between two polls (its size alone would not tell): the last
    ``ANCHOR_BYTES`` bytes read are compared with what the file holds there now,
    before and after each read. If they differ, the file was rewritten and is
    read again from its start, so a line is never cut at a stale offset.
    """

    def __init__(self, stream: Stream, path: str, level: LogLevel | None, from_start: bool) -> None:
        self.stream, self.path, self.level = stream, path, level
        self.fd = -1
        self.offset = 0
        self.anchor = b""
        self.inode: tuple[int, int] | None = None
        self.partial = b""
        self.from_start = from_start
        self.poll = POLL_MIN_S

    def run(self, timeout: float | None) -> None:
        deadline = time.monotonic() + timeout if timeout is not None else None
        if self._open(at_end=not self.from_start):
            self.stream.status("following", f"reading new lines of {self.path}")
        else:
            self.stream.status("waiting", f"{self.path} does not exist yet")
        try:
            while deadline is None or time.monotonic() < deadline:
                if self._read_new() or self._reopen_if_replaced():
                    self.poll = POLL_MIN_S
                    continue
                time.sleep(self.poll)
                self.poll = min(self.poll * 2, POLL_MAX_S)
            self._read_new()
        except _signals.Interrupted:
            self._emit_partial()  # a signal stops following, not the line already read
            raise
        finally:
            self._close()
        self._emit_partial()
        self.stream.finish(ok=True, subtype="timeout")

    def _emit_partial(self) -> None:
        """The last line read, unterminated so far: when following stops it is a line too, as without -f."""
        self.partial = _emit_lines(self.stream, self.partial, self.level, final=True)

    def _open(self, *, at_end: bool) -> bool:
        try:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        info = os.fstat(self.fd)
        self.inode = (info.st_dev, info.st_ino)
        self.offset = info.st_size if at_end else 0
        self.anchor = os.pread(
            self.fd, min(ANCHOR_BYTES, self.offset), self.offset - min(ANCHOR_BYTES, self.offset)
        )
        return True

    def _close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _unchanged(self) -> bool:
        """Does the file still hold, just before our offset, what we read there?"""
        if os.fstat(self.fd).st_size < self.offset:
            return False
        start = self.offset - len(self.anchor)
        return not self.anchor or os.pread(self.fd, len(self.anchor), start) == self.anchor

    def _restart(self) -> None:
        self.stream.status("truncated", f"{self.path} was truncated; reading from its start")
        self.offset, self.anchor, self.partial = 0, b"", b""

    def _read_new(self) -> bool:
        if self.fd < 0:
            return False
        if not self._unchanged():
            self._restart()
        data = os.pread(self.fd, 1 << 20, self.offset)
        if not data:
            return False
        if not self._unchanged():  # rewritten while we read: what we read may start mid-line
            self._restart()
            return True
        self.offset += len(data)
        self.anchor = (self.anchor + data)[-ANCHOR_BYTES:]
        self.partial = _emit_lines(self.stream, self.partial + data, self.level, final=False)
        return True

    def _reopen_if_replaced(self) -> bool:
        """When the path now names another file (rotation), finish the old one and switch."""
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return False
        if (info.st_dev, info.st_ino) == self.inode:
            return False
        if self.fd >= 0:
            while self._read_new():
                pass
            self._emit_partial()
            self._close()
            self.stream.status("rotated", f"{self.path} was replaced; reading the new file")
        return self._open(at_end=False)
