"""The consumer: read any agent CLI's stream as canonical events, and never hang or crash on it.

* :func:`read` — a file, a pipe, a binary file object or an iterable of byte chunks.
* :func:`aread` — the same for asyncio (``StreamReader``, async byte iterators, files).
* :func:`spawn` — run a child process and read its stdout, with bounded waits everywhere.
* :func:`aspawn` — the same for asyncio.

Whatever the input, the output is a valid canonical stream: each turn opens
with ``start`` (made up if the input had none) and ends with exactly one
``result`` (made up if the input ended without one), ``seq`` contiguous. Every
event the reader makes up carries ``synthetic: true``. Bad lines become
recoverable ``error`` events and reading goes on. A session of many turns is
read to its end; ``turns="one"`` stops at the first ``result`` (see
``docs/consumer.md``).
"""

from typing import TYPE_CHECKING, Any

from agentstream.consumer.pipeline import DETECT_LINES, Ending
from agentstream.consumer.reader import AsyncReader, Reader, aread, read

if TYPE_CHECKING:
    from agentstream.consumer.async_process import AsyncSpawn, aspawn
    from agentstream.consumer.process import Spawn, spawn

__all__ = [
    "DETECT_LINES",
    "AsyncReader",
    "AsyncSpawn",
    "Ending",
    "Reader",
    "Spawn",
    "aread",
    "aspawn",
    "read",
    "spawn",
]


def __getattr__(name: str) -> Any:
    """Spawning imports subprocess, threading and selectors (asyncio for the async one), which reading a file
    (and the CLI's start-up) should not pay for."""
    if name in ("AsyncSpawn", "aspawn"):
        from agentstream.consumer import async_process

        return getattr(async_process, name)
    if name in ("Spawn", "spawn"):
        from agentstream.consumer import process

        return getattr(process, name)
    raise AttributeError(f"module 'agentstream.consumer' has no attribute {name!r}")
