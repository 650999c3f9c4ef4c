"""The read questions as rendered JSON bodies: the answer from one snapshot, encoded, and the top-page cache.

Kept apart from the HTTP layer so the benchmark and tests can reason about one place where Redis is read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import orjson

from hotboard import board_store, keys
from hotboard.boards import DEFAULT, DefinitionError
from hotboard.periods import period_board
from hotboard.redis_client import Client
from reader_api.answers import BoardList, PeriodList
from reader_api.cache import PageCache
from reader_api.consistency import AfterWaits
from reader_api.errors import ApiError, corrupt, invalid, not_found
from reader_api.metrics import ApiMetrics
from reader_api.seasons import (
    Clock,
    Definitions,
    KeptPeriods,
    NotKept,
    Target,
    period_not_found,
    resolve,
    wall_clock_ms,
)
from reader_api.snapshot import Snapshots, meta_int

T = TypeVar("T")


def _label(answer: Any, target: Target) -> None:
    """A period's answer names the logical board and the period (the scripts saw the period board)."""
    if isinstance(answer, tuple):  # a top page: (header, page)
        answer = answer[1]
    if target.period is not None and answer is not None:
        answer["board"] = target.board
        answer["period"] = target.period.id


class Reader:
    def __init__(self, redis: Client, cache: PageCache, metrics: ApiMetrics, clock: Clock = wall_clock_ms) -> None:
        self.redis = redis
        self.cache = cache
        self.metrics = metrics
        self.clock = clock
        self.snapshots = Snapshots(redis)
        self.definitions = Definitions(redis)
        self.kept_periods = KeptPeriods(redis)
        #: Set by the app: how ``?after=`` waits (reader_api.consistency).
        self.after: AfterWaits | None = None

    async def target(self, board: str, period: str | None) -> Target:
        """The board (or period board) a request with ``?period=`` reads; 404/422 per :func:`resolve`."""
        definition = await self.definitions.get(board)
        try:
            return resolve(board, definition, period, self.clock())
        except NotKept as exc:
            raise await period_not_found(self.redis, exc.board, exc.period_id, exc.kept) from None

    async def read(self, target: Target, read: Callable[[str], Awaitable[T]]) -> T:
        """``read(name)``; a period board that does not exist (not started, or expired) is a period 404."""
        try:
            answer = await read(target.name)
        except ApiError as exc:
            if target.period is None or exc.code != "board_not_found":
                raise
            raise await period_not_found(self.redis, target.board, target.period.id, target.kept) from None
        _label(answer, target)
        return answer

    async def top(self, target: Target, offset: int, limit: int) -> bytes:
        name = target.name
        if not self.cache.enabled:
            found = await self.read(target, lambda n: self.snapshots.top(n, offset, limit))
            assert found is not None
            return orjson.dumps(found[1])
        key = (name, offset, limit)
        cached = self.cache.get(key)
        known = None if cached is None else cached.version
        found = await self.read(target, lambda n: self.snapshots.top(n, offset, limit, known))
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

    async def player(self, target: Target, player: str) -> bytes:
        return orjson.dumps(await self.read(target, lambda n: self.snapshots.player(n, player)))

    async def around(self, target: Target, player: str, radius: int) -> bytes:
        return orjson.dumps(await self.read(target, lambda n: self.snapshots.around(n, player, radius)))

    async def players(self, target: Target, ids: Sequence[str]) -> bytes:
        return orjson.dumps(await self.read(target, lambda n: self.snapshots.players(n, ids)))

    async def boards(self, after: str | None, limit: int) -> bytes:
        """One page of the board index with each board's definition (two round trips, whatever the count).
        Index members that are not board names and boards whose stored definition cannot be read are left
        out (those boards' own questions answer 503 naming the key): one corrupt board never stops the
        listing of the others."""
        try:
            found, more = await board_store.readable_page(self.redis, after, limit)
        except board_store.Unlistable as exc:
            raise corrupt(keys.BOARD_INDEX_KEY, str(exc)) from None
        listing: BoardList = {"boards": [{"board": name, **d.as_dict()} for name, d in found], "next": more}  # type: ignore[typeddict-item]
        return orjson.dumps(listing)

    async def board(self, target: Target) -> bytes:
        return orjson.dumps(await self.read(target, self.snapshots.board))

    async def periods(self, board: str) -> bytes:
        """The kept periods that exist, newest first (the definition read fresh; see :class:`KeptPeriods`)."""
        found = (await board_store.load_declared(self.redis, [board]))[board]
        if isinstance(found, DefinitionError):
            raise ApiError(503, "corrupt_data", str(found))
        if found is None:
            if not await self.redis.exists(keys.board_key(board), keys.meta_key(board)):
                raise not_found("board", f"board {board!r} does not exist")
            found = DEFAULT
        if not found.seasonal:
            raise invalid("board", f"board {board!r} never resets: it has no periods")
        rows = await self.kept_periods.existing(board, found, self.clock())
        listing: PeriodList = {
            "board": board,
            "reset": found.reset,
            "keep": found.keep,
            "grace_ms": found.grace_ms,
            "periods": [
                {
                    "id": e.period.id,
                    "start_ms": e.period.start_ms,
                    "end_ms": e.period.end_ms,
                    "size": e.size,
                    "as_of": meta_int(e.as_of, period_board(board, e.period.id), keys.META_AS_OF),
                }
                for e in rows
            ],
        }
        return orjson.dumps(listing)

    async def ready(self) -> bool:
        """Redis answers a read. Not PING: that is ``@connection``, which the API's read-only ACL user
        (``+@read +@scripting -@write``) is not granted; EXISTS on a key of ours is ``@read`` and O(1)."""
        return isinstance(await self.redis.exists(keys.BOARD_INDEX_KEY), int)
