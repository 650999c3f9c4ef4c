"""In-process cache of rendered top pages, keyed by the board's change marker.

A board only changes when a window lands, and the flusher bumps ``meta.version`` in the same script as the
scores. A cached page remembers the version it was rendered from; the read script compares that version
with the board's current one inside Redis and answers "unchanged" instead of the page. So a cached answer is
served only after Redis confirmed, in this very request, that the board has not moved since: it is never
older than the board. The cost of a hit is one tiny round trip instead of a range read plus JSON encoding.

Boards written without a ``version`` (nothing but the flusher should write them) are never cached.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

#: (board, offset, limit)
PageKey = tuple[str, int, int]


@dataclass(frozen=True, slots=True)
class CachedPage:
    version: int
    body: bytes


class PageCache:
    """LRU bounded by entry count and by total body bytes; a size of 0 disables it."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self._entries: OrderedDict[PageKey, CachedPage] = OrderedDict()
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._bytes = 0

    @property
    def enabled(self) -> bool:
        return self._max_entries > 0 and self._max_bytes > 0

    @property
    def size(self) -> int:
        return len(self._entries)

    @property
    def total_bytes(self) -> int:
        return self._bytes

    def get(self, key: PageKey) -> CachedPage | None:
        page = self._entries.get(key)
        if page is not None:
            self._entries.move_to_end(key)
        return page

    def put(self, key: PageKey, version: int, body: bytes) -> None:
        if not self.enabled or len(body) > self._max_bytes:
            return
        self.discard(key)
        self._entries[key] = CachedPage(version, body)
        self._bytes += len(body)
        while len(self._entries) > self._max_entries or self._bytes > self._max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= len(evicted.body)

    def discard(self, key: PageKey) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= len(old.body)
