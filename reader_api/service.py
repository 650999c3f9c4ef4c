"""The read questions as rendered JSON bodies: the answer from one snapshot, encoded, and the top-page cache.

Kept apart from the HTTP layer so the benchmark and tests can reason about one place where Redis is read.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson
from redis.asyncio import Redis

from reader_api.cache import PageCache
from reader_api.metrics import ApiMetrics
from reader_api.snapshot import Snapshots


class Reader:
    def __init__(self, redis: Redis, cache: PageCache, metrics: ApiMetrics) -> None:
        self.redis = redis
        self.cache = cache
        self.metrics = metrics
        self.snapshots = Snapshots(redis)

    async def top(self, board: str, offset: int, limit: int) -> bytes:
        if not self.cache.enabled:
            found = await self.snapshots.top(board, offset, limit)
            assert found is not None
            return orjson.dumps(found[1])
        key = (board, offset, limit)
        cached = self.cache.get(key)
        found = await self.snapshots.top(board, offset, limit, None if cached is None else cached.version)
        if found is None:
            assert cached is not None
            self.metrics.cache_hit.inc()
            return cached.body
        self.metrics.cache_miss.inc()
        header, page = found
        body = orjson.dumps(page)
        if header.version is None:
            self.cache.discard(key)
        else:
            self.cache.put(key, header.version, body)
        return body

    async def player(self, board: str, player: str) -> bytes:
        return orjson.dumps(await self.snapshots.player(board, player))

    async def around(self, board: str, player: str, radius: int) -> bytes:
        return orjson.dumps(await self.snapshots.around(board, player, radius))

    async def players(self, board: str, ids: Sequence[str]) -> bytes:
        return orjson.dumps(await self.snapshots.players(board, ids))

    async def ready(self) -> bool:
        return bool(await self.redis.ping())
