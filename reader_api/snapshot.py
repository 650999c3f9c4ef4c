"""Atomic reads: every answer comes from one Lua script (:mod:`hotboard.lua_reads`), so one snapshot of the board.

The flusher applies a window (scores + ``version`` + ``as_of``) in one script; a read script runs between
two of them, never during one. So rank, score, neighbours, total and meta returned by one call below always
describe the same board state, which several separate commands (or a non-transactional pipeline) would not.
All keys of a board share one hash tag, so the scripts also run unchanged on Redis Cluster.

Every script answers ``{exists, total, version, as_of, order, ties, ...}``; ``exists`` is 0 only when none of
the sorted set, the meta hash and the definition exist (an unknown board). Redis deletes an empty sorted set,
so a board whose players all left is still "known" through its meta hash (and a declared board before its
first window through its definition) and answers with ``total`` 0.

A reply becomes its answer (:mod:`reader_api.answers`) in one pure function per question, tested without
Redis. Ranks are 1-based and follow the board's definition (:mod:`hotboard.boards`), which the script reads
itself: best first by its ``order``; equal scores share a rank (``shared``: 1, 2, 2, 4; ``dense``: 1, 2, 2, 3)
or are told apart (``earliest``: who reached the score first, then the id; ``lexical``: Redis's order of the
ids). Entries are always listed in the board's order, so paging is stable whatever the ties. Stored scores
become scores here (``sign`` x stored: ``earliest`` boards on ``desc`` store ``-score``), and each entry's
display metadata comes from the same reply.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from hotboard import keys, lua_reads
from hotboard.boards import DEFAULT, ORDERS, TIES, BoardDef, DefinitionError, from_spec
from hotboard.redis_client import Client
from hotboard.script import Script
from reader_api.answers import MAX_SCORE, BoardInfo, Entry, FriendsList, Meta, Neighbourhood, PlayerRank, TopPage
from reader_api.errors import corrupt, not_found

#: Largest offset worth sending: no sorted set holds more members, and Lua numbers stay exact below it.
MAX_OFFSET = 2**53
#: ``version`` and ``as_of`` are non-negative 64-bit integers (the flusher's HINCRBY and Redis TIME in ms).
_META_INT = re.compile(rb"[0-9]{1,19}")
_META_MAX = 2**63 - 1
#: The deepest player meta an answer holds (``{}`` is 1 level): orjson encodes 254 levels, a top page adds 3.
MAX_META_DEPTH = 251
#: The shortest JSON object of MAX_META_DEPTH + 1 levels, ``{"":[[...]]}``: a shorter meta is never that deep,
#: so only a long one is checked.
_DEEP_META_BYTES = 5 + 2 * MAX_META_DEPTH


@dataclass(frozen=True, slots=True)
class Header:
    """The board's side of every reply (not an answer: ``version`` keys the cache, ``exists`` the 404, ``sign``
    turns stored scores into scores)."""

    exists: bool
    total: int
    version: int | None
    as_of: int | None
    sign: int = 1


def parse_score(raw: bytes | str) -> int:
    """Redis prints a score as an integer below 1e17, else as ``%.17g`` (``1.8446744073709552e+19``, ``inf``);
    a fractional score (written by something other than the flusher) is truncated towards zero. Beyond
    ±MAX_SCORE a score answers saturated (docs/api.md, "Answers")."""
    try:
        value = int(raw)
    except ValueError:
        number = float(raw)
        if math.isnan(number):  # Redis refuses NaN scores; mapped anyway so no reply can raise here
            return 0
        value = MAX_SCORE if number > MAX_SCORE else -MAX_SCORE if number < -MAX_SCORE else int(number)
    return max(-MAX_SCORE, min(MAX_SCORE, value))


def parse_meta(raw: bytes | str | None, board: str, player: str) -> Meta:
    """A player's stored display metadata: a JSON object, or None when never set. Anything else was not
    written by a worker: a 503 naming the key, like a corrupt board meta. So is an object nested deeper than
    an answer can hold (orjson encodes 254 levels, and a top page puts a meta 3 levels down): it would be a
    500 for every page holding that player."""
    if raw is None:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise corrupt(keys.player_meta_key(board), f"meta of player {player!r} is not a JSON object")
    if len(raw) >= _DEEP_META_BYTES:
        try:
            orjson.dumps([[[value]]])  # as deep as any answer holds it: {"entries": [{"meta": ...}]}
        except orjson.JSONEncodeError:
            raise corrupt(
                keys.player_meta_key(board),
                f"meta of player {player!r} is nested deeper than {MAX_META_DEPTH} levels: no answer can hold it",
            ) from None
    return value


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


def meta_int(raw: bytes | str | None, board: str, field: str) -> int | None:
    if raw is None:
        return None
    data = raw.encode() if isinstance(raw, str) else raw
    if _META_INT.fullmatch(data) is None or int(data) > _META_MAX:
        raise corrupt(keys.meta_key(board), f"{field} must be a non-negative 64-bit integer, got {data[:40]!r}")
    return int(data)


def _sign(order: bytes | str, ties: bytes | str, board: str) -> int:
    """The stored-score sign of the definition the script read; a value no declare writes is a 503."""
    o, t = _text(order), _text(ties)
    if o not in ORDERS or t not in TIES:
        raise corrupt(keys.def_key(board), f"order/ties must be one of {ORDERS}/{TIES}, got {o[:20]!r}/{t[:20]!r}")
    return BoardDef(o, "incr", t).sign


def parse_header(reply: Sequence[Any], board: str) -> Header:
    """A 503 naming the key when ``version``, ``as_of`` or the definition is not what hotboard writes; then a
    404 when the board does not exist."""
    version = meta_int(reply[2], board, keys.META_VERSION)
    as_of = meta_int(reply[3], board, keys.META_AS_OF)
    header = Header(bool(reply[0]), int(reply[1]), version, as_of, _sign(reply[4], reply[5], board))
    if not header.exists:
        raise not_found("board", f"board {board!r} does not exist")
    return header


def parse_page(header: Header, board: str, page: Sequence[Any]) -> list[Entry]:
    """``{players, stored scores, ranks, metas}`` (metas empty when no player of the board has any) -> entries.
    Players without a rank (not on the board) are left out."""
    players, scores, ranks, metas = page
    sign = header.sign
    return [
        {
            "rank": int(rank),
            "player": _text(name),
            "score": sign * parse_score(score),
            "meta": parse_meta(metas[i], board, _text(name)) if metas else None,
        }
        for i, (name, score, rank) in enumerate(zip(players, scores, ranks, strict=True))
        if rank is not None
    ]


def _not_on_board(board: str, player: str) -> Exception:
    return not_found("player", f"player {player!r} is not on board {board!r}")


def top(board: str, reply: Sequence[Any]) -> tuple[Header, TopPage]:
    header = parse_header(reply, board)
    page: TopPage = {
        "board": board,
        "total": header.total,
        "entries": parse_page(header, board, reply[6]),
        "as_of": header.as_of,
    }
    return header, page


def player(board: str, name: str, reply: Sequence[Any]) -> PlayerRank:
    header = parse_header(reply, board)
    if len(reply) <= 6:
        raise _not_on_board(board, name)
    return {
        "board": board,
        "player": name,
        "rank": int(reply[6]),
        "score": header.sign * parse_score(reply[7]),
        "meta": parse_meta(reply[8] if len(reply) > 8 else None, board, name),
        "total": header.total,
        "as_of": header.as_of,
    }


def around(board: str, name: str, reply: Sequence[Any]) -> Neighbourhood:
    header = parse_header(reply, board)
    if len(reply) <= 6:
        raise _not_on_board(board, name)
    return {
        "board": board,
        "player": name,
        "total": header.total,
        "entries": parse_page(header, board, reply[7]),
        "as_of": header.as_of,
    }


def players(board: str, ids: Sequence[str], reply: Sequence[Any]) -> FriendsList:
    """The given players sorted by rank (ties in the order asked); ids not on the board under ``missing`` (in
    the order asked)."""
    header = parse_header(reply, board)
    found = parse_page(header, board, [ids, *reply[6][1:]])
    ranks = reply[6][2]
    missing = [name for name, rank in zip(ids, ranks, strict=True) if rank is None]
    found.sort(key=lambda e: e["rank"])
    return {"board": board, "total": header.total, "entries": found, "missing": missing, "as_of": header.as_of}


def board_info(board: str, reply: Sequence[Any]) -> BoardInfo:
    """404 only when the board is neither declared nor written."""
    declared = bool(reply[4])
    if not reply[0] and not declared:
        raise not_found("board", f"board {board!r} does not exist")
    definition = DEFAULT
    if declared:
        try:
            definition = from_spec(_text(reply[5] or b""))
        except DefinitionError as exc:
            raise corrupt(keys.def_key(board), str(exc)) from None
    return {
        "board": board,
        **definition.as_dict(),  # type: ignore[typeddict-item]
        "declared": declared,
        "size": int(reply[1]),
        "as_of": meta_int(reply[3], board, keys.META_AS_OF),
        "version": meta_int(reply[2], board, keys.META_VERSION),
    }


_READS = (lua_reads.TOP, lua_reads.PLAYER, lua_reads.AROUND, lua_reads.PLAYERS, lua_reads.BOARD)
_TOP, _PLAYER, _AROUND, _PLAYERS, _BOARD = (Script(t) for t in _READS)


def board_keys(board: str) -> list[str]:
    """The keys every read script of ``board`` is given (one hash tag: one slot on Redis Cluster)."""
    return [
        keys.board_key(board),
        keys.meta_key(board),
        keys.def_key(board),
        keys.player_meta_key(board),
        keys.members_key(board),
        keys.dense_key(board),
    ]


@dataclass(frozen=True, slots=True)
class Call:
    """One read script call, to send alone or in a pipeline with others (the live streams' one round trip per
    board: :mod:`reader_api.streams`)."""

    script: Script
    keys: list[str]
    args: list[Any]

    async def __call__(self, redis: Client) -> Any:
        return await self.script(redis, self.keys, self.args)


def top_call(board: str, offset: int, limit: int, cached_version: int | None = None) -> Call:
    """The top page's call; it answers ``{2}`` when ``cached_version`` is still the board's version."""
    known = "" if cached_version is None else str(cached_version)
    return Call(_TOP, board_keys(board), [min(offset, MAX_OFFSET), limit, known])


def around_call(board: str, name: str, radius: int) -> Call:
    return Call(_AROUND, board_keys(board), [name, radius])


def around_at(board: str, name: str, reply: Sequence[Any]) -> tuple[Header, Neighbourhood]:
    """The neighbourhood and the board's side of the same reply (its version names a stream's event)."""
    return parse_header(reply, board), around(board, name, reply)


class Snapshots:
    """The read questions, each one EVALSHA of a read-only script, answered or raising 404/503."""

    def __init__(self, redis: Client) -> None:
        self._redis = redis

    async def top(
        self, board: str, offset: int, limit: int, cached_version: int | None = None
    ) -> tuple[Header, TopPage] | None:
        """A page of the board, or None when ``cached_version`` is still the board's version."""
        reply = await top_call(board, offset, limit, cached_version)(self._redis)
        if int(reply[0]) == 2:
            return None
        return top(board, reply)

    async def player(self, board: str, name: str) -> PlayerRank:
        return player(board, name, await _PLAYER(self._redis, board_keys(board), [name]))

    async def around(self, board: str, name: str, radius: int) -> Neighbourhood:
        return around(board, name, await around_call(board, name, radius)(self._redis))

    async def players(self, board: str, ids: Sequence[str]) -> FriendsList:
        return players(board, ids, await _PLAYERS(self._redis, board_keys(board), list(ids)))

    async def board(self, board: str) -> BoardInfo:
        few = [keys.board_key(board), keys.meta_key(board), keys.def_key(board)]
        return board_info(board, await _BOARD(self._redis, few, []))
