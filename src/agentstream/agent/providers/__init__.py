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
from agentstream.errors import AgentstreamError, ErrorCode, ProviderError, UsageError
from agentstream.plugins import Registry, describe

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
    """The provider called ``name``; raises UsageError for an unknown one (or a plugin that fails to load).

    A plugin's factory that raises (but our own errors) or returns something that is no :class:`Provider`
    becomes a :class:`ProviderError` naming the plugin, so the run ends with a stream, not a traceback.
    """
    factory = PROVIDERS.get(name, report=False)  # a plugin's failure is the error below
    if factory is None:
        problem = PROVIDERS.missing(name)
        raise UsageError(problem.message, fix=problem.fix)
    if name in PROVIDERS.builtins:
        return factory(settings)
    try:
        provider = factory(settings)
    except AgentstreamError:
        raise  # the plugin's own error (a missing key, a bad setting): it says what went wrong
    except Exception as exc:
        raise ProviderError(
            f"{PROVIDERS.where(name)} could not be created ({type(exc).__name__}: {exc})",
            fix=PROVIDERS.fix_for(name, "its factory must return a Provider, or raise UsageError with a fix"),
        ) from exc
    if not isinstance(provider, Provider):
        raise ProviderError(
            f"{PROVIDERS.where(name)}: its factory returned {describe(provider)}, expected an "
            "agentstream.agent.providers.base.Provider",
            fix=PROVIDERS.fix_for(name, "its factory must return an instance of a Provider subclass"),
        )
    return provider


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
