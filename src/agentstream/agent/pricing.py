"""What a model call cost, for the models whose list prices we know.

Prices are US dollars per million tokens: (input, cached input, output). A model
matches the longest known name it starts with, so dated snapshots
(``gpt-4.1-mini-2025-04-14``, ``claude-sonnet-4-5-20250929``) find their family.
An unknown model (a local one, a new one) gets no ``cost_usd`` at all, never a
guess. Cache writes are charged at the plain input price here, so Anthropic runs
that write the prompt cache are slightly under-counted.
"""

from __future__ import annotations

from typing import Final

__all__ = ["PRICES", "cost_usd"]

PRICES: Final[dict[str, tuple[float, float, float]]] = {
    # OpenAI
    "gpt-5": (1.25, 0.125, 10.0),
    "gpt-5-mini": (0.25, 0.025, 2.0),
    "gpt-5-nano": (0.05, 0.005, 0.40),
    "gpt-4.1": (2.0, 0.50, 8.0),
    "gpt-4.1-mini": (0.40, 0.10, 1.60),
    "gpt-4.1-nano": (0.10, 0.025, 0.40),
    "gpt-4o": (2.50, 1.25, 10.0),
    "gpt-4o-mini": (0.15, 0.075, 0.60),
    "o3": (2.0, 0.50, 8.0),
    "o3-mini": (1.10, 0.55, 4.40),
    "o4-mini": (1.10, 0.275, 4.40),
    # Anthropic
    "claude-opus-4-5": (5.0, 0.50, 25.0),
    "claude-opus-4-1": (15.0, 1.50, 75.0),
    "claude-opus-4": (15.0, 1.50, 75.0),
    "claude-sonnet-4-5": (3.0, 0.30, 15.0),
    "claude-sonnet-4": (3.0, 0.30, 15.0),
    "claude-3-7-sonnet": (3.0, 0.30, 15.0),
    "claude-haiku-4-5": (1.0, 0.10, 5.0),
    "claude-3-5-haiku": (0.80, 0.08, 4.0),
}

_BY_LENGTH: Final = sorted(PRICES, key=len, reverse=True)


def cost_usd(model: str, *, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float | None:
    """The cost of one call, or None when the model's price is unknown.

    ``input_tokens`` includes ``cached_tokens``, which are billed at the cached rate.
    """
    name = model.rsplit("/", 1)[-1].lower()
    family = next((known for known in _BY_LENGTH if name == known or name.startswith(known + "-")), None)
    if family is None:
        return None
    fresh, cached, output = PRICES[family]
    uncached = max(input_tokens - cached_tokens, 0)
    total = (uncached * fresh + cached_tokens * cached + output_tokens * output) / 1_000_000
    return round(total, 10)
