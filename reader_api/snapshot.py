"""Atomic reads: every answer comes from one Lua script (:mod:`hotboard.lua`), so one snapshot of the board.

The flusher applies a window (scores + ``version`` + ``as_of``) in one script; a read script runs between
two of them, never during one. So rank, score, neighbours, total and meta returned by one call below always
describe the same board state, which several separate commands (or a non-transactional pipeline) would not.
All keys of a board share one hash tag, so the scripts also run unchanged on Redis Cluster.

Every script answers ``{exists, total, version, as_of, ...}``; ``exists`` is 0 only when neither the sorted
set nor the meta hash exist (an unknown board). Redis deletes an empty sorted set, so a board whose players
all left is still "known" through its meta hash and answers with ``total`` 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from hotboard import keys, lua
from reader_api.errors import corrupt

#: Largest offset worth sending: no sorted set holds more members, and Lua numbers stay exact below it.
MAX_OFFSET = 2**53


@dataclass(frozen=True, slots=True)
class Entry:
    rank: int
    player: str
    score: int


@dataclass(frozen=True, slots=True)
class Header:
    exists: bool
    total: int
    version: int | None
    as_of: int | None


@dataclass(frozen=True, slots=True)
class Page:
    header: Header
    entries: list[Entry]


@dataclass(frozen=True, slots=True)
class PlayerView:
    header: Header
    entry: Entry | None


@dataclass(frozen=True, slots=True)
class Around:
    header: Header
    #: None when the player is not on the board.
    entries: list[Entry] | None


@dataclass(frozen=True, slots=True)
class Friends:
    header: Header
    entries: list[Entry]
    missing: list[str]


#: Scores are exact integers stored as doubles, exact within ±(2^53 - 1). Beyond that (a total ≥ 2^53, up to
#: ±inf) a score is no longer exact and answers saturated at these bounds, so every stored score has one
#: JSON integer answer that any client (a JavaScript number too) holds exactly.
MAX_SCORE = 2**53 - 1
#: ``version`` and ``as_of`` are non-negative 64-bit integers (the flusher's HINCRBY and Redis TIME in ms).
_META_INT = re.compile(rb"[0-9]{1,19}")
_META_MAX = 2**63 - 1


def parse_score(raw: bytes | str) -> int:
    """Redis prints a score as an integer below 1e17, else as ``%.17g`` (``1.8446744073709552e+19``, ``inf``);
    a fractional score (written by something other than the flusher) is truncated towards zero."""
    try:
        value = int(raw)
    except ValueError:
        number = float(raw)
        if math.isnan(number):  # Redis refuses NaN scores; mapped anyway so no reply can raise here
            return 0
        value = MAX_SCORE if number > MAX_SCORE else -MAX_SCORE if number < -MAX_SCORE else int(number)
    return max(-MAX_SCORE, min(MAX_SCORE, value))


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


def _meta_int(raw: bytes | str | None, board: str, field: str) -> int | None:
    if raw is None:
        return None
    data = raw.encode() if isinstance(raw, str) else raw
    if _META_INT.fullmatch(data) is None or int(data) > _META_MAX:
        raise corrupt(keys.meta_key(board), f"{field} must be a non-negative 64-bit integer, got {data[:40]!r}")
    return int(data)


def parse_header(reply: Sequence[Any], board: str) -> Header:
    """A 503 naming the meta key when ``version`` or ``as_of`` is not an integer the flusher could write."""
    version = _meta_int(reply[2], board, keys.META_VERSION)
    return Header(bool(reply[0]), int(reply[1]), version, _meta_int(reply[3], board, keys.META_AS_OF))


def parse_page(first_rank0: int, flat: Sequence[bytes | str]) -> list[Entry]:
    """``ZREVRANGE ... WITHSCORES`` (member, score, member, score...) -> entries with 1-based ranks."""
    return [Entry(first_rank0 + i + 1, _text(flat[2 * i]), parse_score(flat[2 * i + 1])) for i in range(len(flat) // 2)]


_TOP, _PLAYER, _AROUND, _PLAYERS = (lua.Script(t) for t in (lua.TOP, lua.PLAYER, lua.AROUND, lua.PLAYERS))


class Snapshots:
    """The four read questions, each one EVALSHA of a read-only script."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    @staticmethod
    def _keys(board: str) -> list[str]:
        return [keys.board_key(board), keys.meta_key(board)]

    async def top(self, board: str, offset: int, limit: int, cached_version: int | None = None) -> Page | None:
        """A page of the board, or None when ``cached_version`` is still the board's version."""
        known = "" if cached_version is None else str(cached_version)
        reply = await _TOP(self._redis, self._keys(board), [min(offset, MAX_OFFSET), limit, known])
        if int(reply[0]) == 2:
            return None
        return Page(parse_header(reply, board), parse_page(offset, reply[4]))

    async def player(self, board: str, player: str) -> PlayerView:
        reply = await _PLAYER(self._redis, self._keys(board), [player])
        entry = Entry(int(reply[4]) + 1, player, parse_score(reply[5])) if len(reply) > 4 else None
        return PlayerView(parse_header(reply, board), entry)

    async def around(self, board: str, player: str, radius: int) -> Around:
        reply = await _AROUND(self._redis, self._keys(board), [player, radius])
        entries = parse_page(int(reply[4]), reply[5]) if len(reply) > 4 else None
        return Around(parse_header(reply, board), entries)

    async def players(self, board: str, ids: Sequence[str]) -> Friends:
        """The given players sorted by rank; ids not on the board under ``missing`` (in the order asked)."""
        reply = await _PLAYERS(self._redis, self._keys(board), list(ids))
        found: list[Entry] = []
        missing: list[str] = []
        for player, rank, score in zip(ids, reply[4], reply[5], strict=True):
            if rank is None:
                missing.append(player)
            else:
                found.append(Entry(int(rank) + 1, player, parse_score(score)))
        found.sort(key=lambda e: e.rank)
        return Friends(parse_header(reply, board), found, missing)
