"""In-process cache of rendered top pages, keyed by the board's change marker.

A board only changes when a window lands, and the flusher bumps ``meta.version`` in the same script as the
scores. A cached page remembers the version it was rendered from; the read script compares that version
with the board's current one inside Redis and answers "unchanged" instead of the page. So a cached answer is
served only after Redis confirmed, in this very request, that the board has not moved since: it is never
older than the board. The cost of a hit is one tiny round trip instead of a range read plus JSON encoding.

Boards written without a ``version`` (nothing but the flusher should write them) are never cached.

The key holds ``offset`` and ``limit``, so any client can make new keys at will (``?limit=1&offset=N``): with a
plain LRU, a loop of such requests emptied the cache for everyone. So it is a segmented LRU: a page enters on
probation and is protected once asked again while cached; eviction takes the oldest page on probation first.
Pages asked once only push each other out; a popular page leaves only when no page on probation is left, or
after as many pages as protection holds were each asked twice while it was not asked at all.
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
    """Segmented LRU bounded by entry count and by total body bytes; a size of 0 disables it. At most four fifths
    of the entries are protected, so a new page always has room on probation."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self._probation: OrderedDict[PageKey, CachedPage] = OrderedDict()
        self._protected: OrderedDict[PageKey, CachedPage] = OrderedDict()
        self._max_entries = max_entries
        self._max_protected = max_entries - max(1, max_entries // 5)
        self._max_bytes = max_bytes
        self._bytes = 0

    @property
    def enabled(self) -> bool:
        return self._max_entries > 0 and self._max_bytes > 0

    @property
    def size(self) -> int:
        return len(self._probation) + len(self._protected)

    @property
    def total_bytes(self) -> int:
        return self._bytes

    def get(self, key: PageKey) -> CachedPage | None:
        page = self._protected.get(key)
        if page is not None:
            self._protected.move_to_end(key)
            return page
        page = self._probation.pop(key, None)
        if page is not None:  # asked again while cached: protected, the oldest protected page back on probation
            self._protected[key] = page
            if len(self._protected) > self._max_protected:
                old_key, old = self._protected.popitem(last=False)
                self._probation[old_key] = old
        return page

    def put(self, key: PageKey, version: int, body: bytes) -> None:
        if not self.enabled or len(body) > self._max_bytes:
            return
        segment = self._protected if key in self._protected else self._probation  # a new version keeps its place
        self.discard(key)
        segment[key] = CachedPage(version, body)
        self._bytes += len(body)
        while self.size > self._max_entries or self._bytes > self._max_bytes:
            on_probation = len(self._probation) - (key in self._probation)  # never the page just put
            _, evicted = (self._probation if on_probation > 0 else self._protected).popitem(last=False)
            self._bytes -= len(evicted.body)

    def discard(self, key: PageKey) -> None:
        old = self._probation.pop(key, None) or self._protected.pop(key, None)
        if old is not None:
            self._bytes -= len(old.body)
