"""Optional dependencies: a clear exit 2 with the exact install command when one is missing.

The core install is what a stream reader needs (msgspec). Model SDKs, the Redis
client, the web server and OpenTelemetry are extras, imported only by the commands
that use them.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from agentstream.errors import ErrorCode, UsageError

__all__ = ["MissingExtraError", "require"]


class MissingExtraError(UsageError):
    """A command needs a package from an extra that is not installed."""

    code = ErrorCode.MISSING_DEPENDENCY


def require(module: str, extra: str) -> ModuleType:
    """Import ``module``, or raise :class:`MissingExtraError` naming ``agentstream[extra]``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.partition(".")[0]
        raise MissingExtraError(
            f"this needs the Python package {top!r}, which is not installed ({exc})",
            fix=f"pip install 'agentstream[{extra}]'",
        ) from None
