"""The one bounded cache: what a process remembers of an unbounded key space (boards, definitions) without
growing with it. Past ``max_entries`` the least recently used entry goes; forgetting one only costs a read
(or an idempotent write) again, never correctness."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """A least-recently-used map of at most ``max_entries`` (0: it holds nothing). ``get`` and ``put`` make an
    entry the most recent; ``in`` only asks."""

    __slots__ = ("_entries", "_max")

    def __init__(self, max_entries: int) -> None:
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._max = max_entries

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[K]:
        """The keys, least recently used first."""
        return iter(self._entries)

    def get(self, key: K) -> V | None:
        entries = self._entries
        found = entries.get(key)
        if found is not None:
            entries.move_to_end(key)
        return found

    def put(self, key: K, value: V) -> None:
        entries = self._entries
        entries[key] = value
        entries.move_to_end(key)
        if len(entries) > self._max:
            entries.popitem(last=False)

    def discard(self, key: K) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()


class TtlCache(Generic[K, V]):
    """A :class:`BoundedCache` whose values are kept ``ttl_s`` on an injected monotonic clock."""

    __slots__ = ("_entries", "_monotonic", "_ttl_s")

    def __init__(self, ttl_s: float, max_entries: int, monotonic: Callable[[], float]) -> None:
        self._ttl_s = ttl_s
        self._monotonic = monotonic
        self._entries: BoundedCache[K, tuple[float, V]] = BoundedCache(max_entries)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        hit = self._entries.get(key)
        if hit is None or hit[0] <= self._monotonic():
            return None
        return hit[1]

    def put(self, key: K, value: V) -> None:
        self._entries.put(key, (self._monotonic() + self._ttl_s, value))
