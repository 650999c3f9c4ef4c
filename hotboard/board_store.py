"""Board definitions in Redis: declare, read, list (``hb:{B}:def``, layout in :mod:`hotboard.boards`).

Plain reads, no cache: a worker's one cache of definitions is :class:`ingest.definitions.DefinitionCache`, the
API's is its own (:mod:`reader_api.seasons`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from redis.exceptions import ResponseError

from hotboard import keys, lua_definitions
from hotboard.boards import DEFAULT, BoardDef, DefinitionError, from_hash, from_spec
from hotboard.redis_client import Client
from hotboard.script import Script

Outcome = Literal["created", "unchanged", "replaced"]
_DEFINE = Script(lua_definitions.DEFINE)


@dataclass(frozen=True, slots=True)
class Declared:
    outcome: Outcome
    definition: BoardDef
    #: What the board had before (the default for a board never declared).
    previous: BoardDef


async def declare(redis: Client, board: str, definition: BoardDef, now_ms: int | None = None) -> Declared:
    """Create or confirm a board's definition. Raises DefinitionError when the board was written already with
    a different one (its scores were computed under that one; change it on a new board)."""
    if not keys.is_valid_board(board):
        raise DefinitionError("board must be 1-64 characters of A-Z a-z 0-9 _ . : -")
    created = int(time.time() * 1000) if now_ms is None else now_ms
    d = definition
    args = [d.spec, d.order, d.operator, d.ties, created, DEFAULT.spec, d.reset, d.keep, d.grace_ms]
    board_keys = [keys.def_key(board), keys.board_key(board), keys.meta_key(board)]
    status, stored = (_text(v) for v in await _DEFINE(redis, board_keys, args))
    if status != "refused":
        await redis.zadd(keys.BOARD_INDEX_KEY, {board: 0})
    previous = from_spec(stored)
    if status == "refused":
        raise DefinitionError(
            f"board {board!r} already has scores under {previous.spec} (order/operator/ties[|reset|keep|grace_ms]); "
            f"its definition cannot change to {definition.spec}. Declare a new board instead."
        )
    return Declared(status, definition, previous)  # type: ignore[arg-type]  # the script's three other answers


async def load(redis: Client, boards: Sequence[str]) -> dict[str, BoardDef]:
    """board -> its definition (the default when undeclared), in one round trip. Raises DefinitionError for a
    stored definition hotboard did not write."""
    out: dict[str, BoardDef] = {}
    for board, found in (await load_declared(redis, boards)).items():
        if isinstance(found, DefinitionError):
            raise found
        out[board] = DEFAULT if found is None else found
    return out


#: What :func:`load_declared` says of one board: its declared definition, None (undeclared: the default), or
#: why the stored one cannot be read.
Found = BoardDef | DefinitionError | None


async def load_declared(redis: Client, boards: Sequence[str]) -> dict[str, Found]:
    """board -> :data:`Found`, in one round trip. Only a declared definition may be cached: an undeclared
    board can still be declared, and until its first window lands no flush script would notice."""
    if not boards:
        return {}
    async with redis.pipeline(transaction=False) as pipe:
        for board in boards:
            pipe.hgetall(keys.def_key(board))
        rows = await pipe.execute(raise_on_error=False)
    out: dict[str, Found] = {}
    for board, row in zip(boards, rows, strict=True):
        try:
            if isinstance(row, ResponseError) and str(row).startswith("WRONGTYPE"):  # not a hash where one belongs
                raise DefinitionError(str(row))
            if isinstance(row, Exception):
                raise row
            out[board] = from_hash(row) if row else None
        except DefinitionError as exc:
            out[board] = DefinitionError(f"{keys.def_key(board)}: {exc}")
    return out


async def page(
    redis: Client, after: bytes | None, limit: int
) -> tuple[list[tuple[str, BoardDef | DefinitionError]], bytes | None]:
    """Up to ``limit`` index members after ``after`` (exclusive, the raw member), with their definitions, and the
    raw member to continue after (None on the last page): the operator's listing. A member that is not a board
    name (not UTF-8, outside the alphabet: only a foreign writer adds one) or whose stored definition hotboard
    did not write is listed with the reason, its name made printable, so that it can be found and removed.
    Two round trips, whatever the number of boards."""
    start = b"-" if after is None else b"(" + after
    raw = [_raw(m) for m in await redis.zrangebylex(keys.BOARD_INDEX_KEY, start, "+", start=0, num=limit + 1)]
    more = len(raw) > limit
    raw = raw[:limit]
    names = [n for n in map(_board_name, raw) if n is not None]
    found = await load_declared(redis, names)
    rows: list[tuple[str, BoardDef | DefinitionError]] = []
    for member in raw:
        name = _board_name(member)
        if name is None:
            rows.append((member.decode(errors="backslashreplace"), DefinitionError("not a board name")))
        else:
            definition = found[name]
            rows.append((name, DEFAULT if definition is None else definition))
    return rows, (raw[-1] if more else None)


#: Index members one listing page reads past at most beyond its own (names that are not boards, boards whose
#: stored definition hotboard did not write): a page is never stuck behind junk, and its cost stays bounded.
MAX_SKIPPED = 10_000
#: Index members read per round trip once a page has met junk.
_SKIP_CHUNK = 1000


class Unlistable(Exception):
    """More than MAX_SKIPPED index members in a row that are not board names: no board name to go on after."""


async def readable_page(redis: Client, after: str | None, limit: int) -> tuple[list[tuple[str, BoardDef]], str | None]:
    """:func:`page` for readers: up to ``limit`` boards after ``after`` whose names and definitions can be
    read, and a board name to continue after (None on the last page). An index member that is not a board
    name (not UTF-8, outside the alphabet: only a foreign writer adds one) and a board whose stored definition
    hotboard did not write are left out, so every cursor handed out is one a reader accepts and a page is
    never stuck behind them. Two round trips without junk, as :func:`page`; past junk, a few more."""
    out: list[tuple[str, BoardDef]] = []
    start = b"-" if after is None else b"(" + after.encode()
    passed: str | None = None  # the last board name read past (listed or left out): a cursor
    skipped = 0
    while len(out) <= limit:
        wanted = limit + 1 - len(out)
        chunk = wanted if not skipped else max(wanted, _SKIP_CHUNK)
        raw: list[bytes | str] = await redis.zrangebylex(keys.BOARD_INDEX_KEY, start, "+", start=0, num=chunk)
        names: list[str] = []
        used = len(raw)
        for i, member in enumerate(raw):
            name = _board_name(member)
            if name is not None:
                names.append(name)
                if len(names) == wanted:
                    used = i + 1
                    break
        found = await load_declared(redis, names)
        readable = [(n, DEFAULT if d is None else d) for n, d in found.items() if not isinstance(d, DefinitionError)]
        out += readable
        skipped += used - len(readable)
        passed = names[-1] if names else passed
        if len(out) > limit:
            break  # one board beyond the page: there is a next one
        if used == len(raw) and len(raw) < chunk:
            return out, None  # the end of the index
        if skipped > MAX_SKIPPED:
            if passed is None:
                raise Unlistable(f"more than {MAX_SKIPPED} members in a row are not board names")
            return out, passed
        last = raw[used - 1]
        start = b"(" + (last if isinstance(last, bytes) else last.encode())
    return out[:limit], out[limit - 1][0]


def _board_name(member: bytes | str) -> str | None:
    """An index member as a board name, or None when it is not one."""
    try:
        name = member.decode() if isinstance(member, bytes) else member
    except UnicodeDecodeError:
        return None
    return name if keys.is_valid_board(name) else None


def _raw(member: bytes | str) -> bytes:
    return member if isinstance(member, bytes) else member.encode()


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw
