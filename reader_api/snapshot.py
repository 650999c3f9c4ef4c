"""Atomic reads: every answer comes from one Lua script (:mod:`hotboard.lua`), so one snapshot of the board.

The flusher applies a window (scores + ``version`` + ``as_of``) in one script; a read script runs between
two of them, never during one. So rank, score, neighbours, total and meta returned by one call below always
describe the same board state, which several separate commands (or a non-transactional pipeline) would not.
All keys of a board share one hash tag, so the scripts also run unchanged on Redis Cluster.

Every script answers ``{exists, total, version, as_of, ...}``; ``exists`` is 0 only when neither the sorted
set nor the meta hash exist (an unknown board). Redis deletes an empty sorted set, so a board whose players
all left is still "known" through its meta hash and answers with ``total`` 0.

A reply becomes its answer (:mod:`reader_api.answers`) in one pure function per question, tested without
Redis. Ranks are 1-based positions, highest score first; equal scores keep Redis's order (ZREVRANGE/ZREVRANK:
reverse lexicographic by the bytes of the id), so every rank is distinct and paging is stable.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from hotboard import keys, lua
from reader_api.answers import MAX_SCORE, Entry, FriendsList, Neighbourhood, PlayerRank, TopPage
from reader_api.errors import corrupt, not_found

#: Largest offset worth sending: no sorted set holds more members, and Lua numbers stay exact below it.
MAX_OFFSET = 2**53
#: ``version`` and ``as_of`` are non-negative 64-bit integers (the flusher's HINCRBY and Redis TIME in ms).
_META_INT = re.compile(rb"[0-9]{1,19}")
_META_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Header:
    """The board's side of every reply (not an answer: ``version`` keys the cache, ``exists`` the 404)."""

    exists: bool
    total: int
    version: int | None
    as_of: int | None


def parse_score(raw: bytes | str) -> int:
    """Redis prints a score as an integer below 1e17, else as ``%.17g`` (``1.8446744073709552e+19``, ``inf``);
    a fractional score (written by something other than the flusher) is truncated towards zero. Beyond
    ±MAX_SCORE a score answers saturated (README, "Read API")."""
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
    """A 503 naming the meta key when ``version`` or ``as_of`` is not an integer the flusher could write; then
    a 404 when the board does not exist."""
    version = _meta_int(reply[2], board, keys.META_VERSION)
    header = Header(bool(reply[0]), int(reply[1]), version, _meta_int(reply[3], board, keys.META_AS_OF))
    if not header.exists:
        raise not_found("board", f"board {board!r} does not exist")
    return header


def parse_page(first_rank0: int, flat: Sequence[bytes | str]) -> list[Entry]:
    """``ZREVRANGE ... WITHSCORES`` (member, score, member, score...) -> entries with 1-based ranks."""
    return [
        {"rank": first_rank0 + i + 1, "player": _text(flat[2 * i]), "score": parse_score(flat[2 * i + 1])}
        for i in range(len(flat) // 2)
    ]


def _not_on_board(board: str, player: str) -> Exception:
    return not_found("player", f"player {player!r} is not on board {board!r}")


def top(board: str, offset: int, reply: Sequence[Any]) -> tuple[Header, TopPage]:
    header = parse_header(reply, board)
    page: TopPage = {
        "board": board,
        "total": header.total,
        "entries": parse_page(offset, reply[4]),
        "as_of": header.as_of,
    }
    return header, page


def player(board: str, name: str, reply: Sequence[Any]) -> PlayerRank:
    header = parse_header(reply, board)
    if len(reply) <= 4:
        raise _not_on_board(board, name)
    return {"board": board, "player": name, "rank": int(reply[4]) + 1, "score": parse_score(reply[5]),
            "total": header.total, "as_of": header.as_of}  # fmt: skip


def around(board: str, name: str, reply: Sequence[Any]) -> Neighbourhood:
    header = parse_header(reply, board)
    if len(reply) <= 4:
        raise _not_on_board(board, name)
    return {"board": board, "player": name, "total": header.total, "entries": parse_page(int(reply[4]), reply[5]),
            "as_of": header.as_of}  # fmt: skip


def players(board: str, ids: Sequence[str], reply: Sequence[Any]) -> FriendsList:
    """The given players sorted by rank; ids not on the board under ``missing`` (in the order asked)."""
    header = parse_header(reply, board)
    found: list[Entry] = []
    missing: list[str] = []
    for name, rank, score in zip(ids, reply[4], reply[5], strict=True):
        if rank is None:
            missing.append(name)
        else:
            found.append({"rank": int(rank) + 1, "player": name, "score": parse_score(score)})
    found.sort(key=lambda e: e["rank"])
    return {"board": board, "total": header.total, "entries": found, "missing": missing, "as_of": header.as_of}


_TOP, _PLAYER, _AROUND, _PLAYERS = (lua.Script(t) for t in (lua.TOP, lua.PLAYER, lua.AROUND, lua.PLAYERS))


class Snapshots:
    """The four read questions, each one EVALSHA of a read-only script, answered or raising 404/503."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    @staticmethod
    def _keys(board: str) -> list[str]:
        return [keys.board_key(board), keys.meta_key(board)]

    async def top(
        self, board: str, offset: int, limit: int, cached_version: int | None = None
    ) -> tuple[Header, TopPage] | None:
        """A page of the board, or None when ``cached_version`` is still the board's version."""
        known = "" if cached_version is None else str(cached_version)
        reply = await _TOP(self._redis, self._keys(board), [min(offset, MAX_OFFSET), limit, known])
        if int(reply[0]) == 2:
            return None
        return top(board, offset, reply)

    async def player(self, board: str, name: str) -> PlayerRank:
        return player(board, name, await _PLAYER(self._redis, self._keys(board), [name]))

    async def around(self, board: str, name: str, radius: int) -> Neighbourhood:
        return around(board, name, await _AROUND(self._redis, self._keys(board), [name, radius]))

    async def players(self, board: str, ids: Sequence[str]) -> FriendsList:
        return players(board, ids, await _PLAYERS(self._redis, self._keys(board), list(ids)))
