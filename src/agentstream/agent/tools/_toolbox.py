"""The toolbox the agent loop talks to: which tools are offered, and running one safely.

Tools come in toolsets found by name in the ``agentstream.tools`` entry-point group
(:mod:`agentstream.plugins`): each names a :class:`Tool` or a sequence of them. The
built-in toolsets come first, so a plugin's tool cannot replace a built-in one of
the same name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any, Final

from agentstream._secrets import DeltaGuard, configured_redactor
from agentstream.agent.permissions import (
    PERMISSION_MODES,
    PermissionDenied,
    PermissionMode,
    allows,
    shown_name,
)
from agentstream.agent.tools._base import (
    Tool,
    ToolContext,
    ToolFailure,
    ToolOutcome,
    ToolSpec,
    cap_text,
    check_arguments,
)
from agentstream.agent.tools._fs import FS_TOOLS
from agentstream.agent.tools._search import SEARCH_TOOLS
from agentstream.agent.tools._shell import SHELL_TOOLS
from agentstream.errors import UsageError
from agentstream.plugins import Registry, describe, report_once

__all__ = ["TOOLSETS", "TOOL_NAMES", "Toolbox", "installed_tools"]

TOOL_NAMES: Final[tuple[str, ...]] = tuple(
    tool.spec.name for tool in (*FS_TOOLS, *SEARCH_TOOLS, *SHELL_TOOLS)
)
"""Every built-in tool, in the order they are offered."""


_TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What both providers take as a tool's name (Anthropic and OpenAI alike)."""
_ACCESS: Final = ("read", "write", "execute")


def _check_toolset(name: str, value: object) -> str | None:
    """What keeps a plugin's object from being a toolset, or ``None``.

    Checked once, at load: a tool whose spec a provider would refuse (a name it rejects, a schema that is no
    object) fails every run that offers it, and one of an unknown ``access`` would never be offered at all.
    """
    tools = (value,) if isinstance(value, Tool) else value if isinstance(value, (tuple, list)) else None
    if tools is None:
        return f"is not a toolset: expected a Tool or a sequence of them, got {describe(value)}"
    for tool in tools:
        if not isinstance(tool, Tool):
            return f"is not a toolset: it holds {describe(tool)}, not a Tool"
        spec = tool.spec
        if not isinstance(spec, ToolSpec):
            return f"has a tool whose spec is {describe(spec)}, not a ToolSpec"
        if not isinstance(spec.name, str) or not _TOOL_NAME.fullmatch(spec.name):
            return f"has a tool named {spec.name!r}: a name is 1 to 64 letters, digits, '_' or '-'"
        if spec.access not in _ACCESS:
            return f"has a tool {spec.name!r} of access {spec.access!r}, not one of {', '.join(_ACCESS)}"
        if not isinstance(spec.parameters, dict) or spec.parameters.get("type", "object") != "object":
            return f"has a tool {spec.name!r} whose parameters are not a JSON Schema of an object"
        if not isinstance(spec.description, str):
            return f"has a tool {spec.name!r} whose description is {describe(spec.description)}, not text"
        if not callable(tool.handler):
            return f"has a tool {spec.name!r} whose handler is {describe(tool.handler)}, not callable"
    return None


TOOLSETS: Registry[Tool | Sequence[Tool]] = Registry(
    "agentstream.tools",
    {
        "files": "agentstream.agent.tools._fs:FS_TOOLS",
        "search": "agentstream.agent.tools._search:SEARCH_TOOLS",
        "shell": "agentstream.agent.tools._shell:SHELL_TOOLS",
    },
    kind="toolset",
    check=_check_toolset,
)


@cache
def installed_tools() -> dict[str, Tool]:
    """Every tool by name: the built-ins, then the plugins' (a name already taken is reported and skipped)."""
    tools: dict[str, Tool] = {}
    for toolset_name, toolset in TOOLSETS.load_all().items():
        for tool in (toolset,) if isinstance(toolset, Tool) else toolset:
            if tool.spec.name in tools:
                report_once(f"tool {tool.spec.name!r} of the toolset {toolset_name!r} is ignored: taken")
                continue
            tools[tool.spec.name] = tool
    return tools


class Toolbox:
    """The tools of one run.

    ``specs`` offers only the tools that are both in the allow-list and permitted by the
    mode, so a model in ``read-only`` mode is never tempted by ``shell``. A call to a tool
    that exists but was not offered still gets a ``denied`` outcome with the reason,
    not an error, because the model may have invented it from training.
    """

    def __init__(
        self, ctx: ToolContext, allow: Sequence[str] | None = None, extra: Sequence[Tool] = ()
    ) -> None:
        """``extra``: this run's own tools besides the installed ones (its MCP servers'), offered after them and
        not subject to ``allow``, which names installed tools."""
        if ctx.mode not in PERMISSION_MODES:
            raise UsageError(
                f"unknown permission mode {ctx.mode!r}", fix=f"use one of: {', '.join(PERMISSION_MODES)}"
            )
        workspace = Path(os.path.realpath(ctx.workspace))
        if not workspace.is_dir():
            raise UsageError(
                f"the workspace {ctx.workspace} is not a directory", fix="pass an existing directory"
            )
        self._redact = configured_redactor()
        installed = installed_tools()
        self._tools = {**installed, **{tool.spec.name: tool for tool in extra}} if extra else installed
        self._extra = frozenset(tool.spec.name for tool in extra)
        self._progress = _RedactedProgress(ctx.progress, DeltaGuard(self._redact))
        self.ctx = replace(ctx, workspace=workspace, progress=self._progress)
        self._check_allow_list(allow)
        self._requested = None if allow is None else frozenset(allow)
        self._allowed = self._offered()

    def set_mode(self, mode: PermissionMode) -> None:
        """The permission mode from now on (a two-way session's client changed it): what the next model call
        is offered, and the path rule, as if the run had started in it."""
        self.ctx = replace(self.ctx, mode=mode)
        self._allowed = self._offered()

    def _offered(self) -> tuple[str, ...]:
        """The tools the mode permits, of those asked for with ``--tools`` (all, without it), in order."""
        return tuple(
            name
            for name, tool in self._tools.items()
            if (self._requested is None or name in self._requested or name in self._extra)
            and allows(self.ctx.mode, tool.spec.access)
        )

    def _check_allow_list(self, allow: Sequence[str] | None) -> None:
        if allow is None:
            return
        unknown = [name for name in allow if name not in self._tools]
        if unknown:
            raise UsageError(
                f"unknown tool(s) in --tools: {', '.join(unknown)}",
                fix=f"valid tools: {', '.join(self._tools)}",
            )
        forbidden = [name for name in allow if not allows(self.ctx.mode, self._tools[name].spec.access)]
        if forbidden:
            raise UsageError(
                f"--tools asks for {', '.join(forbidden)}, which permission mode {self.ctx.mode} forbids",
                fix="drop them from --tools, or choose --permission-mode workspace-write",
            )

    @property
    def specs(self) -> list[ToolSpec]:
        """The tools offered to the model for this run."""
        return [self._tools[name].spec for name in self._allowed]

    @property
    def names(self) -> list[str]:
        """Names of the offered tools (for the ``start`` event's ``tools``)."""
        return list(self._allowed)

    def access(self, name: str) -> str | None:
        """What kind of tool ``name`` is (read / write / execute); None for a tool that does not exist."""
        tool = self._tools.get(name)
        return tool.spec.access if tool is not None else None

    def run(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        """Run one call. Tool-level problems come back as an outcome; only BaseException propagates."""
        try:
            outcome = self._run(name, arguments)
        except PermissionDenied as exc:
            outcome = ToolOutcome("denied", error=_with_fix(exc.message, exc.fix))
        except ToolFailure as exc:
            outcome = ToolOutcome("error", exc.output, error=exc.message, truncated=exc.truncated)
        except OSError as exc:
            outcome = ToolOutcome("error", error=f"{name}: {exc.strerror or exc}")
        except Exception as exc:  # a bug in a tool must not end the run; the model sees what broke
            outcome = ToolOutcome("error", error=f"{name} failed unexpectedly: {type(exc).__name__}: {exc}")
        finally:
            self._progress.flush()
        return self._finish(outcome)

    def _run(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        tool = self._tools.get(name)
        if tool is None:
            raise ToolFailure(f"there is no tool named {name!r}; available: {', '.join(self._allowed)}")
        if name not in self._allowed:
            reason = (
                f"permission mode {self.ctx.mode} does not allow {tool.spec.access} tools"
                if not allows(self.ctx.mode, tool.spec.access)
                else "it is not enabled for this run"
            )
            raise PermissionDenied(
                f"{name} is not available: {reason}", fix=f"use one of: {', '.join(self._allowed)}"
            )
        return tool.handler(
            self.ctx, arguments if tool.raw_arguments else check_arguments(tool.spec, arguments)
        )

    def _finish(self, outcome: ToolOutcome) -> ToolOutcome:
        """Redact secrets, keep to valid UTF-8 (:func:`shown_name`) and enforce the output cap, whatever the tool did."""
        output, cut = cap_text(shown_name(self._redact(outcome.output)), self.ctx.output_cap_bytes)
        error = shown_name(self._redact(outcome.error)) if outcome.error is not None else None
        return ToolOutcome(outcome.status, output, error, outcome.truncated or cut)


class _RedactedProgress:
    """A tool's progress output with secrets redacted, including one split across two pieces."""

    def __init__(self, sink: Callable[[str], None], guard: DeltaGuard) -> None:
        self.sink = sink
        self.guard = guard

    def __call__(self, text: str) -> None:
        safe = self.guard.feed(text)
        if safe:
            self.sink(safe)

    def flush(self) -> None:
        held = self.guard.flush()
        if held:
            self.sink(held)


def _with_fix(message: str, fix: str | None) -> str:
    return f"{message} ({fix})" if fix else message
