"""The consumer: read any agent CLI's stream as canonical events, and never hang or crash on it.

* :func:`read` — a file, a pipe, a binary file object or an iterable of byte chunks.
* :func:`aread` — the same for asyncio (``StreamReader``, async byte iterators, files).
* :func:`spawn` — run a child process and read its stdout, with bounded waits everywhere.

Whatever the input, the output is a valid canonical stream: ``start`` first
(made up if the input had none), exactly one ``result`` last (made up if the
input ended without one), contiguous ``seq``. Every event the reader makes up
carries ``synthetic: true``. Bad lines become recoverable ``error`` events and
reading goes on. Reading stops at the first ``result``; anything after it is
not read (see ``docs/consumer.md``).
"""

from agentstream.consumer.pipeline import DETECT_LINES, Ending
from agentstream.consumer.process import Spawn, spawn
from agentstream.consumer.reader import AsyncReader, Reader, aread, read

__all__ = ["DETECT_LINES", "AsyncReader", "Ending", "Reader", "Spawn", "aread", "read", "spawn"]
