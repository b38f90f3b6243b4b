"""Model providers: the registry and how ``exec`` picks one.

Selection order (:func:`select_provider`): an explicit ``--provider``; else a
cassette given with ``--cassette``; else ``ANTHROPIC_API_KEY`` (or
``ANTHROPIC_AUTH_TOKEN``) → anthropic; else ``OPENAI_API_KEY``,
``OPENAI_BASE_URL`` or ``--base-url`` → openai; else a local Ollama that answers
within 200 ms; else no provider: ``NO_PROVIDER`` (exit 2). The bundled demo
conversation plays only when asked for by name (``--provider demo``), so it can
never stand in for a model unnoticed. SDKs are imported only when a provider
makes its first call.

A provider is found by name in the ``agentstream.providers`` entry-point group
(:mod:`agentstream.plugins`): a callable that takes :class:`ProviderSettings` and
returns a :class:`Provider` (a subclass's constructor is one).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Final, TypeAlias

from agentstream.agent.providers.base import Provider, ProviderSettings
from agentstream.agent.providers.replay import DEMO_CASSETTE
from agentstream.errors import ErrorCode, UsageError
from agentstream.plugins import Registry

__all__ = [
    "DEMO_CASSETTE",
    "PROVIDERS",
    "PROVIDER_NAMES",
    "NoProviderError",
    "ProviderFactory",
    "ProviderSettings",
    "create_provider",
    "select_provider",
]

ProviderFactory: TypeAlias = Callable[[ProviderSettings], Provider]
"""What a ``agentstream.providers`` entry point names: settings in, a ready provider out."""

PROVIDERS: Registry[ProviderFactory] = Registry(
    "agentstream.providers",
    {
        "openai": "agentstream.agent.providers.openai:OpenAIProvider",
        "anthropic": "agentstream.agent.providers.anthropic:AnthropicProvider",
        "ollama": "agentstream.agent.providers.openai:OllamaProvider",
        "replay": "agentstream.agent.providers.replay:from_settings",
        "demo": "agentstream.agent.providers.replay:demo_from_settings",
    },
    kind="provider",
    accepts=callable,
)
PROVIDER_NAMES: Final = PROVIDERS.builtin_names
"""The built-in providers; an installed plugin may add more."""
OLLAMA_PROBE_S: Final = 0.2

NO_PROVIDER_FIX: Final = (
    "set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN) or OPENAI_API_KEY; or pass --base-url URL for an "
    "OpenAI-compatible server; or start Ollama (ollama serve); or replay a recording with --cassette FILE; "
    "or try the bundled demo with --provider demo"
)


class NoProviderError(UsageError):
    """No model provider is configured, and none was named: nothing may pretend to answer."""

    code = ErrorCode.NO_PROVIDER


def create_provider(name: str, settings: ProviderSettings) -> Provider:
    """The provider called ``name``; raises UsageError for an unknown one."""
    factory = PROVIDERS.get(name)
    if factory is None:
        raise UsageError(f"unknown provider {name!r}", fix=f"use one of: {', '.join(PROVIDERS.names())}")
    return factory(settings)


def select_provider(
    name: str | None, settings: ProviderSettings, environ: Mapping[str, str] = os.environ
) -> Provider:
    """Pick a provider by the documented order (module docstring); raise NoProviderError when none is."""
    if settings.cassette and name not in (None, "replay"):
        raise UsageError(
            f"--cassette replays a recording; it cannot be used with --provider {name}",
            fix="drop one of them",
        )
    if name:
        return create_provider(name, settings)
    if settings.cassette:
        return create_provider("replay", settings)
    if environ.get("ANTHROPIC_API_KEY") or environ.get("ANTHROPIC_AUTH_TOKEN"):
        return create_provider("anthropic", settings)
    if environ.get("OPENAI_API_KEY") or environ.get("OPENAI_BASE_URL") or settings.base_url:
        return create_provider("openai", settings)
    from agentstream.agent.providers.openai import OllamaProvider, ollama_models

    models = ollama_models(OLLAMA_PROBE_S)
    if models:
        return OllamaProvider(settings, models)
    raise NoProviderError(
        "no model provider is configured (no API key, no --base-url, no Ollama answering)",
        fix=NO_PROVIDER_FIX,
    )
