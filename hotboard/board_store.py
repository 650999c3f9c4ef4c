"""Board definitions in Redis: declare, read, list (``hb:{B}:def``, layout in :mod:`hotboard.boards`).

Workers and API processes keep a bounded cache of definitions (:class:`DefinitionCache`). A cached definition is
safe to use because the flush scripts compare the ``spec`` the worker folded with against the stored one and
refuse the window when they differ (the worker then re-reads the definition and folds again from Redis's
checkpoint); once a board was written its definition never changes.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from redis.asyncio import Redis

from hotboard import keys, lua
from hotboard.boards import DEFAULT, BoardDef, DefinitionError, from_hash, from_spec

Outcome = Literal["created", "unchanged", "replaced"]
_DEFINE = lua.Script(lua.DEFINE)


@dataclass(frozen=True, slots=True)
class Declared:
    outcome: Outcome
    definition: BoardDef
    #: What the board had before (the default for a board never declared).
    previous: BoardDef


async def declare(redis: Redis, board: str, definition: BoardDef, now_ms: int | None = None) -> Declared:
    """Create or confirm a board's definition. Raises DefinitionError when the board was written already with
    a different one (its scores were computed under that one; change it on a new board)."""
    if not keys.is_valid_board(board):
        raise DefinitionError("board must be 1-64 characters of A-Z a-z 0-9 _ . : -")
    created = int(time.time() * 1000) if now_ms is None else now_ms
    args = [definition.spec, definition.order, definition.operator, definition.ties, created, DEFAULT.spec, board]
    board_keys = [keys.def_key(board), keys.board_key(board), keys.meta_key(board), keys.BOARD_INDEX_KEY]
    status, stored = (_text(v) for v in await _DEFINE(redis, board_keys, args))
    previous = from_spec(stored)
    if status == "refused":
        raise DefinitionError(
            f"board {board!r} already has scores under {previous.spec} (order/operator/ties); its definition "
            f"cannot change to {definition.spec}. Declare a new board instead."
        )
    return Declared(status, definition, previous)  # type: ignore[arg-type]  # the script's three other answers


async def load(redis: Redis, boards: Sequence[str]) -> dict[str, BoardDef]:
    """board -> its definition (the default when undeclared), in one round trip."""
    if not boards:
        return {}
    async with redis.pipeline(transaction=False) as pipe:
        for board in boards:
            pipe.hgetall(keys.def_key(board))
        rows = await pipe.execute()
    return {board: from_hash(row) for board, row in zip(boards, rows, strict=True)}


async def page(redis: Redis, after: str | None, limit: int) -> tuple[list[tuple[str, BoardDef]], str | None]:
    """Up to ``limit`` boards by name after ``after`` (exclusive), with their definitions, and the name to
    continue after (None on the last page). Two round trips, whatever the number of boards."""
    start = "-" if after is None else f"({after}"
    names = [_text(n) for n in await redis.zrangebylex(keys.BOARD_INDEX_KEY, start, "+", start=0, num=limit + 1)]
    more = len(names) > limit
    names = names[:limit]
    found = await load(redis, names)
    return [(n, found[n]) for n in names], (names[-1] if more else None)


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


class DefinitionCache:
    """LRU of definitions, bounded by entries: 100,000 boards must not mean 100,000 cached hashes forever."""

    def __init__(self, max_entries: int = 65_536) -> None:
        self._entries: OrderedDict[str, BoardDef] = OrderedDict()
        self._max = max_entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, board: str) -> BoardDef | None:
        found = self._entries.get(board)
        if found is not None:
            self._entries.move_to_end(board)
        return found

    def missing(self, boards: Iterable[str]) -> list[str]:
        return [b for b in dict.fromkeys(boards) if b not in self._entries]

    def put(self, found: dict[str, BoardDef]) -> None:
        for board, definition in found.items():
            self._entries[board] = definition
            self._entries.move_to_end(board)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    async def fetch(self, redis: Redis, boards: Iterable[str]) -> dict[str, BoardDef]:
        """The definitions of ``boards``, reading from Redis only those not cached."""
        wanted = list(dict.fromkeys(boards))
        missing = self.missing(wanted)
        if missing:
            self.put(await load(redis, missing))
        out: dict[str, BoardDef] = {}
        for board in wanted:
            definition = self.get(board)
            if definition is None:  # evicted by the put above (more boards than the cache holds)
                definition = (await load(redis, [board]))[board]
            out[board] = definition
        return out
