"""The agent's tools: file access, search and shell, under a permission mode.

The agent loop needs only :class:`Toolbox` (``specs`` to offer, ``run`` to execute)
and :class:`ToolContext`; the rest is exported for tests and for other producers
that want the same tools, and :class:`Tool` for plugins that add tools (``docs/plugins.md``).
See ``docs/tools.md``.
"""

from __future__ import annotations

from agentstream._secrets import Redactor, is_secret, scrubbed_environ
from agentstream.agent.permissions import PERMISSION_MODES, PermissionDenied, PermissionMode
from agentstream.agent.tools._base import Tool, ToolContext, ToolFailure, ToolOutcome, ToolSpec
from agentstream.agent.tools._toolbox import TOOL_NAMES, TOOLSETS, Toolbox, installed_tools

__all__ = [
    "PERMISSION_MODES",
    "TOOLSETS",
    "TOOL_NAMES",
    "PermissionDenied",
    "PermissionMode",
    "Redactor",
    "Tool",
    "ToolContext",
    "ToolFailure",
    "ToolOutcome",
    "ToolSpec",
    "Toolbox",
    "installed_tools",
    "is_secret",
    "scrubbed_environ",
]
