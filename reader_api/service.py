"""The read questions as rendered JSON bodies: the answer from one snapshot, encoded, and the top-page cache.

Kept apart from the HTTP layer so the benchmark and tests can reason about one place where Redis is read.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson
from redis.asyncio import Redis

from hotboard import board_store, keys
from hotboard.boards import DefinitionError
from reader_api.answers import BoardList
from reader_api.cache import PageCache
from reader_api.errors import corrupt
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

    async def boards(self, after: str | None, limit: int) -> bytes:
        """One page of the board index with each board's definition (two round trips, whatever the count)."""
        try:
            found, more = await board_store.page(self.redis, after, limit)
        except DefinitionError:
            raise await self._corrupt_definition(after, limit) from None
        listing: BoardList = {"boards": [{"board": name, **d.as_dict()} for name, d in found], "next": more}  # type: ignore[typeddict-item]
        return orjson.dumps(listing)

    async def _corrupt_definition(self, after: str | None, limit: int) -> Exception:
        """The 503 naming the listed board whose stored definition hotboard did not write (found one board at a
        time: only on this failure)."""
        start = "-" if after is None else f"({after}"
        for raw in await self.redis.zrangebylex(keys.BOARD_INDEX_KEY, start, "+", start=0, num=limit):
            name = raw.decode() if isinstance(raw, bytes) else raw
            try:
                await board_store.load(self.redis, [name])
            except DefinitionError as exc:
                return corrupt(keys.def_key(name), str(exc))
        return corrupt(keys.BOARD_INDEX_KEY, "a listed board's definition changed while being read")

    async def board(self, board: str) -> bytes:
        return orjson.dumps(await self.snapshots.board(board))

    async def ready(self) -> bool:
        return bool(await self.redis.ping())
