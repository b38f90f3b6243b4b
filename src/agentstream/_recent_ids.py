"""Closed ids kept for "used twice" checks, in a module of its own: the reader and the validator both need it,
and neither should pay for importing the other (start-up)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

__all__ = ["RecentIds"]

K = TypeVar("K", bound=Hashable)


class RecentIds(dict[K, None]):
    """The last ``limit`` ids seen, so "used twice" checks stay exact for recent ids and memory stays flat.

    A dict (keys in the order added), so that ``in`` on a hot path is no Python call. The reader's pairing
    rules and the validator both keep closed ids in one.
    """

    __slots__ = ("limit",)

    def __init__(self, limit: int = 10_000) -> None:
        super().__init__()
        self.limit = limit

    def add(self, key: K) -> None:
        self[key] = None
        if len(self) > self.limit:
            del self[next(iter(self))]
