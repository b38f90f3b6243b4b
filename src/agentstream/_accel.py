"""The C twins of a few hot per-event steps (``_speedups.c``), or None where they were not built.

The extension is optional: an install without a compiler runs the same steps in Python, and each
module that has a twin keeps its Python version beside the choice. ``AGENTSTREAM_PURE_PYTHON=1``
keeps the C twins off (to compare the two, or to rule the extension out of a problem). A build of
another version of ``_speedups.c`` (an editable install not rebuilt since) is not used.
"""

from __future__ import annotations

import os
from types import ModuleType

INTERFACE = 12
"""The ``INTERFACE`` of the ``_speedups.c`` this code was written with."""


def _load() -> ModuleType | None:
    if os.environ.get("AGENTSTREAM_PURE_PYTHON"):
        return None
    try:
        from agentstream import _speedups
    except ImportError:
        return None
    return _speedups if getattr(_speedups, "INTERFACE", None) == INTERFACE else None


speedups = _load()
