"""The agent's tools: file access, search and shell, under a permission mode.

The agent loop needs only :class:`Toolbox` (``specs`` to offer, ``run`` to execute)
and :class:`ToolContext`; the rest is exported for tests and for other producers
that want the same tools. See ``docs/tools.md``.
"""

from __future__ import annotations

from agentstream.agent.permissions import PERMISSION_MODES, PermissionDenied, PermissionMode
from agentstream.agent.tools._base import ToolContext, ToolFailure, ToolOutcome, ToolSpec
from agentstream.agent.tools._secrets import Redactor, is_secret, scrubbed_environ
from agentstream.agent.tools._toolbox import TOOL_NAMES, Toolbox

__all__ = [
    "PERMISSION_MODES",
    "TOOL_NAMES",
    "PermissionDenied",
    "PermissionMode",
    "Redactor",
    "ToolContext",
    "ToolFailure",
    "ToolOutcome",
    "ToolSpec",
    "Toolbox",
    "is_secret",
    "scrubbed_environ",
]
