"""A progress line on stderr for commands that read large files (never on stdout)."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable, Iterator
from typing import IO, TypeVar

T = TypeVar("T")

PROGRESS_MIN_BYTES = 16 << 20
"""Files smaller than this are read too fast for a progress line to help."""
PROGRESS_EVERY_S = 0.25


def is_regular_file(file: IO[bytes]) -> bool:
    try:
        return stat.S_ISREG(os.fstat(file.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):
        return False


def with_progress(items: Iterable[T], source: IO[bytes], err: IO[str], *, verb: str) -> Iterator[T]:
    """Pass ``items`` (batches of lines) through, drawing "verb: 12.0 MiB of 1.0 GiB (1%)" on ``err`` on a terminal.

    Only for regular files of at least :data:`PROGRESS_MIN_BYTES`; never on stdout.
    The line is erased when the input is done.
    """
    size = os.fstat(source.fileno()).st_size if is_regular_file(source) else 0
    if size < PROGRESS_MIN_BYTES or not err.isatty():
        yield from items
        return
    shown_at = float("-inf")  # draw it at once, then every PROGRESS_EVERY_S
    try:
        for item in items:
            yield item
            if time.monotonic() - shown_at >= PROGRESS_EVERY_S:
                shown_at = time.monotonic()
                done = source.tell()
                err.write(f"\r{verb}: {_size(done)} of {_size(size)} ({done * 100 // size}%)\x1b[K")
                err.flush()
    finally:
        err.write("\r\x1b[K")
        err.flush()


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"
