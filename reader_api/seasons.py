"""Seasons on the read side: which board a request's ``period`` means, and the kept periods that exist.

A period of board ``B`` is a board of its own, ``B@<period id>`` (:func:`hotboard.periods.period_board`), with
its own copy of B's definition, so the read scripts answer a period unchanged. Which period is *current* is
the API's clock's business (injected, so tests pin it); which periods exist is Redis's (a period exists once
its first window was applied, and expires after it left the kept ones).

The definition of the logical board says whether it is seasonal. Reads are not exactness-critical, so it is
cached for a few seconds (declared and undeclared boards alike): no extra round trip per read of a plain
board, and a board just declared seasonal is read as such within the TTL.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from hotboard import board_store, keys
from hotboard.boards import DEFAULT, BoardDef, DefinitionError
from hotboard.bounded import TtlCache
from hotboard.periods import Period, Schedule, period_board
from hotboard.redis_client import Client
from reader_api.errors import ApiError, invalid, not_found

#: ms since the epoch, UTC.
Clock = Callable[[], int]
CURRENT, PREVIOUS = "current", "previous"
DEFINITION_TTL_S = 5.0
DEFINITION_CACHE_SIZE = 65_536


#: Kept periods a 404 looks up and names at most (newest first).
NAMED_IN_404 = 10
#: How long ``/periods`` reuses what it read of the closed periods (past their grace). They change only through
#: a worker catching up on a backlog; the period change that makes one expire starts a new entry anyway.
CLOSED_ROWS_TTL_S = 30.0
CLOSED_ROWS_CACHE_SIZE = 128  # boards; one entry holds up to ``keep`` rows (~150 KB at 1,000)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class Target:
    """What a request reads: ``name`` is the board the scripts are asked about (``board`` or ``board@id``)."""

    board: str
    name: str
    period: Period | None = None
    definition: BoardDef = DEFAULT
    now_ms: int = 0

    @property
    def kept(self) -> tuple[Period, ...]:
        """The periods that may be asked for (current first), whether they exist or not; computed on the error
        path only (``keep`` may be 1000)."""
        d = self.definition
        return tuple(d.schedule.kept(self.now_ms, d.keep)) if d.seasonal else ()


class NotKept(Exception):
    """A well-formed period that is not among the kept ones: a 404 once Redis said which kept ones exist."""

    def __init__(self, board: str, period_id: str, kept: Sequence[Period]) -> None:
        super().__init__(period_id)
        self.board, self.period_id, self.kept = board, period_id, tuple(kept)


def _is_kept(schedule: Schedule, now_ms: int, wanted: Period, keep: int) -> bool:
    """``wanted`` (a period of ``schedule``) lies between the oldest kept period and the current one (the kept
    periods are memoised per current period: no walk back per request)."""
    kept = schedule.kept(now_ms, keep)
    return kept[-1].start_ms <= wanted.start_ms <= kept[0].start_ms


def resolve(board: str, definition: BoardDef, period: str | None, now_ms: int) -> Target:
    """``period`` (None: absent) of ``board`` at ``now_ms`` -> the board to read. 422 for a malformed id or a
    period asked of a board that never resets; :class:`NotKept` for a period outside the kept ones."""
    if not definition.seasonal:
        if period is None or period == CURRENT:
            return Target(board, board)
        raise invalid("period", f"board {board!r} never resets: only 'current' (or no period) is accepted")
    schedule = definition.schedule
    current = schedule.period_of(now_ms)
    if period is None or period == CURRENT:
        wanted = current
    elif period == PREVIOUS:
        wanted = schedule.previous(current)
    else:
        try:
            wanted = schedule.parse_id(period)
        except ValueError as exc:
            raise invalid("period", f"must be current, previous or a period id: {exc}") from None
    target = Target(board, period_board(board, wanted.id), wanted, definition, now_ms)
    if not _is_kept(schedule, now_ms, wanted, definition.keep):
        raise NotKept(board, wanted.id, target.kept)
    return target


@dataclass(frozen=True, slots=True)
class Existing:
    """A kept period that exists in Redis."""

    period: Period
    size: int
    as_of: bytes | None


async def existing(redis: Client, board: str, kept: Sequence[Period]) -> list[Existing]:
    """The ``kept`` periods that exist (sorted set or meta hash present), in order; one pipeline."""
    if not kept:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for p in kept:
            name = period_board(board, p.id)
            pipe.exists(keys.board_key(name), keys.meta_key(name))
            pipe.zcard(keys.board_key(name))
            pipe.hget(keys.meta_key(name), keys.META_AS_OF)
        replies = await pipe.execute()
    rows = [replies[i : i + 3] for i in range(0, len(replies), 3)]
    return [Existing(p, int(size), as_of) for p, (found, size, as_of) in zip(kept, rows, strict=True) if found]


async def period_not_found(redis: Client, board: str, period_id: str, kept: Sequence[Period]) -> ApiError:
    """The 404 naming the kept periods that exist, so a client can pick one."""
    # the newest few only: a keep of 1,000 must not make every 404 read 1,000 periods
    ids = [e.period.id for e in await existing(redis, board, kept[:NAMED_IN_404])]
    listed = ", ".join(ids) if ids else "none"
    return not_found(
        "period",
        f"board {board!r} has no period {period_id!r} (not kept, or not started); "
        f"kept periods that exist, newest first: {listed}",
    )


class Definitions:
    """Logical boards' definitions, cached ``ttl_s`` (LRU, bounded); a corrupt stored one is a 503, not cached."""

    def __init__(
        self,
        redis: Client,
        ttl_s: float = DEFINITION_TTL_S,
        max_entries: int = DEFINITION_CACHE_SIZE,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._redis = redis
        self._entries: TtlCache[str, BoardDef] = TtlCache(ttl_s, max_entries, monotonic)

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, board: str) -> BoardDef:
        hit = self._entries.get(board)
        if hit is not None:
            return hit
        found = (await self.lookup([board]))[board]
        if isinstance(found, DefinitionError):
            raise ApiError(503, "corrupt_data", str(found))
        return found

    async def lookup(self, boards: Iterable[str], fresh: bool = False) -> dict[str, BoardDef | DefinitionError]:
        """board -> its definition (the default for an undeclared board, as the worker folds it) or why the
        stored one cannot be read (not cached); the boards not cached (``fresh``: all) read in one round trip."""
        out: dict[str, BoardDef | DefinitionError] = {}
        missing: list[str] = []
        for board in boards:
            hit = None if fresh else self._entries.get(board)
            if hit is None:
                missing.append(board)
            else:
                out[board] = hit
        for board, found in (await board_store.load_declared(self._redis, missing)).items():
            definition = DEFAULT if found is None else found
            if not isinstance(definition, DefinitionError):
                self._entries.put(board, definition)
            out[board] = definition
        return out


class KeptPeriods:
    """The kept periods of a board that exist, for ``/periods``. Reading every one of ``keep`` = 1,000 periods
    cost 3,000 Redis commands and ~55 ms of the event loop per request; here the live periods (the current one
    and those still inside their grace) are read on every request, and the closed ones' rows are reused for
    :data:`CLOSED_ROWS_TTL_S`, keyed by the definition and the live periods (bounded LRU)."""

    def __init__(
        self,
        redis: Client,
        ttl_s: float = CLOSED_ROWS_TTL_S,
        max_entries: int = CLOSED_ROWS_CACHE_SIZE,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._redis = redis
        self._closed: TtlCache[tuple[str, BoardDef, str, int], list[Existing]] = TtlCache(ttl_s, max_entries, monotonic)

    async def existing(self, board: str, definition: BoardDef, now_ms: int) -> list[Existing]:
        kept = definition.schedule.kept(now_ms, definition.keep)
        live = next((i for i, p in enumerate(kept) if p.end_ms + definition.grace_ms <= now_ms), len(kept))
        key = (board, definition, kept[0].id, live)  # a period leaving its grace or the kept ones: a new entry
        closed = self._closed.get(key)
        if closed is None:
            closed = await existing(self._redis, board, kept[live:])
            self._closed.put(key, closed)
        return [*await existing(self._redis, board, kept[:live]), *closed]
