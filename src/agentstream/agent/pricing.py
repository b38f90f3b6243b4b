"""What a model call cost, from a versioned price table a user can override.

The table ships as package data (``agentstream/data/pricing.json``): a
``version`` date and, per model family, US dollars per million tokens for
``input``, ``cache_read``, ``cache_write`` (Anthropic's prompt-cache writes;
absent means no separate charge, so they cost plain input) and ``output``. A
model matches the longest family it equals or starts with followed by ``-``, so
dated snapshots (``gpt-4.1-mini-2025-04-14``, ``claude-sonnet-4-5-20250929``)
find their family and ``gpt-5.1`` does not pass for ``gpt-5``. An unknown model
(a local one, a new one) gets no cost at all, never a guess.

A user file in the same format (``--pricing FILE`` or ``$AGENTSTREAM_PRICING``)
is laid over the shipped table: its models replace or add to the shipped ones.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Final, NamedTuple

from agentstream.errors import UsageError

__all__ = ["PRICING_ENV", "PriceTable", "Rates", "cost_usd", "load_table", "price_table"]

PRICING_ENV: Final = "AGENTSTREAM_PRICING"
_MILLION: Final = 1_000_000
_FIX: Final = (
    'write a JSON object {"version": "...", "models": {"NAME": {"input": 3.0, "output": 15.0, '
    '"cache_read": 0.3, "cache_write": 3.75}}} in US dollars per million tokens'
)


class Rates(NamedTuple):
    """US dollars per million tokens of each kind."""

    input: float
    output: float
    cache_read: float
    cache_write: float

    def cost(self, *, fresh: int, output: int, cache_read: int = 0, cache_write: int = 0) -> float:
        """The cost of tokens already split by kind (``fresh`` = prompt tokens neither read from nor written to cache)."""
        total = (
            fresh * self.input
            + output * self.output
            + cache_read * self.cache_read
            + cache_write * self.cache_write
        )
        return total / _MILLION


class PriceTable(NamedTuple):
    version: str
    models: dict[str, Rates]
    source: str
    """Where the table came from: the shipped file, or the shipped file and the user's."""

    def rates(self, model: str) -> Rates | None:
        """The rates of ``model`` (a provider prefix such as ``anthropic/`` is ignored), or ``None``."""
        name = model.rsplit("/", 1)[-1].lower()
        best: str | None = None
        for family in self.models:
            if (name == family or name.startswith(family + "-")) and (
                best is None or len(family) > len(best)
            ):
                best = family
        return self.models[best] if best is not None else None


def _read(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read the {what} {str(path)!r}: {exc.strerror}", fix=_FIX) from exc
    except ValueError as exc:
        raise UsageError(f"the {what} {str(path)!r} is not JSON: {exc}", fix=_FIX) from exc
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise UsageError(f"the {what} {str(path)!r} has no 'models' object", fix=_FIX)
    return data


def _rates(name: str, entry: object, path: Path) -> Rates:
    def number(key: str, default: float | None) -> float:
        value = entry.get(key, default) if isinstance(entry, dict) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise UsageError(
                f"{str(path)!r}: model {name!r} needs a non-negative number for {key!r}", fix=_FIX
            )
        return float(value)

    fresh = number("input", None)
    return Rates(fresh, number("output", None), number("cache_read", fresh), number("cache_write", fresh))


def load_table(user_file: str | os.PathLike[str] | None = None) -> PriceTable:
    """The shipped table, with ``user_file`` (else ``$AGENTSTREAM_PRICING``, when set) laid over it."""
    shipped = Path(__file__).resolve().parent.parent / "data" / "pricing.json"
    data = _read(shipped, "shipped price table")
    models = {name.lower(): _rates(name, entry, shipped) for name, entry in data["models"].items()}
    version, source = str(data.get("version", "")), "shipped"
    override = user_file if user_file is not None else os.environ.get(PRICING_ENV, "").strip() or None
    if override is not None:
        path = Path(override).expanduser()
        user = _read(path, "price file")
        models.update({name.lower(): _rates(name, entry, path) for name, entry in user["models"].items()})
        version = f"{version}+{user.get('version', path.name)}"
        source = f"shipped+{path}"
    return PriceTable(version, models, source)


_TABLE: PriceTable | None = None


def price_table() -> PriceTable:
    """The table in force for this process (read once)."""
    global _TABLE
    if _TABLE is None:
        _TABLE = load_table()
    return _TABLE


def cost_usd(
    model: str,
    *,
    input_tokens: int,
    output_tokens: int,
    cached_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> float | None:
    """The cost of one call in canonical terms, or ``None`` when the model's price is unknown.

    ``input_tokens`` counts every prompt token; ``cached_tokens`` and
    ``cache_write_tokens`` are the parts of it billed at the cache rates.
    """
    rates = price_table().rates(model)
    if rates is None:
        return None
    fresh = max(input_tokens - cached_tokens - cache_write_tokens, 0)
    cost = rates.cost(
        fresh=fresh, output=output_tokens, cache_read=cached_tokens, cache_write=cache_write_tokens
    )
    return round(cost, 10)
