"""``hotboard restore``: boards rebuilt in Redis from the archive alone (no Kafka), each swapped in atomically.

Each board is written into keys of its own hash tag beside the live ones (``hb:{B}:applied:restoring``, ...), then
one script renames them over the live keys (and deletes the live keys the archive has no counterpart for), so
a reader sees the old board or the restored one, never half of either. The watermarks come along, so what a
board holds and what it has applied stay one statement. A board's meta version moves past both the live one and
the archived one: a reader's cache keyed by version never serves the old board for the new.

The topic's checkpoints are lowered to the archive's before the swaps, by each swap (in its script, to the
checkpoints of the snapshot the board was read from) and once more after them: a worker whose checkpoint move is
refused, or that is fenced on a swapped board, resynchronises, and replays from no later than the archive's
checkpoint the tail the restored boards lack (their watermarks skip what they hold). Each lowering bumps the
partition's restore generation, which the move compares: it is refused even where the checkpoint was no higher.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hiredis import pack_command
from redis.asyncio import RedisCluster

from archive.pool import Archive
from flusher import wire
from hotboard import earliest, keys
from hotboard.boards import DEFAULT, BoardDef, from_spec, to_hash
from hotboard.periods import split_period_board
from hotboard.redis_client import Client
from hotboard.script import Script

#: The live keys of a board, in this order: KEYS[i] and KEYS[i + 8] is its restored twin.
_KINDS: tuple[Callable[[str], str], ...] = (
    keys.board_key,
    keys.applied_key,
    keys.meta_key,
    keys.def_key,
    keys.player_meta_key,
    keys.members_key,
    keys.dense_key,
    keys.counts_key,
)
#: Lower checkpoints, never raise them, and bump each named partition's restore generation (``<p>:gen``, see
#: :func:`hotboard.keys.gen_field`) even where its checkpoint was no higher already: a worker's move decided
#: before (a window it applied to the board this swap replaced) is then refused, and it resynchronises. From
#: ARGV[first]: (partition, checkpoint, epoch) triples (epoch '0': left as it is).
_LOWERING = """
local function lower(ckpt_key, first)
  for i = first, #ARGV, 3 do
    local partition, lowered, epoch = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    local cur = redis.call('HGET', ckpt_key, partition)
    if not cur or tonumber(cur) > tonumber(lowered) then redis.call('HSET', ckpt_key, partition, lowered) end
    if epoch ~= '0' then redis.call('HSET', ckpt_key, partition .. ':epoch', epoch) end
    redis.call('HINCRBY', ckpt_key, partition .. ':gen', 1)
  end
end
"""
#: Swap a restored board in, and lower the topic's checkpoints to the archive's as of the snapshot the board was
#: read from, in the same step: a worker that was fenced on this board, or whose checkpoint move is refused,
#: then replays from no later than what the board holds (lowered only before and after every swap, a worker
#: resynchronised in between wrote the tail on top of a board lacking the events before it, and the second
#: lowering came too late: the watermarks skipped them). KEYS: the 8 live keys, their 8 restored twins, the
#: checkpoint hash (left out on a Redis Cluster, where it lives on another slot: see :func:`_swap`). ARGV: the
#: archived version (-1: a seasonal board's own meta, which holds no version), when the keys expire (ms; 0:
#: never), then (partition, checkpoint, epoch) triples as for _LOWER (none without the checkpoint hash).
_SWAP = Script(
    _LOWERING
    + f"""
local archived, expire_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
lower(KEYS[17], 3)
if archived >= 0 then
  local live = tonumber(redis.call('HGET', KEYS[3], '{keys.META_VERSION}') or '0')
  redis.call('HSET', KEYS[11], '{keys.META_VERSION}', math.max(live, archived) + 1)
end
for i = 1, 8 do
  if redis.call('EXISTS', KEYS[i + 8]) == 1 then
    redis.call('RENAME', KEYS[i + 8], KEYS[i])
    if expire_ms > 0 then redis.call('PEXPIREAT', KEYS[i], expire_ms) end
  else
    redis.call('DEL', KEYS[i])
  end
end
return 1
"""
)
#: Lower checkpoints (and bump generations) alone. KEYS: the checkpoint hash. ARGV: (partition, checkpoint,
#: epoch) triples.
_LOWER = Script(
    _LOWERING
    + """
lower(KEYS[1], 1)
return 1
"""
)
CHUNK = 10_000
#: Chunks written to Redis at once (see :func:`_copy_players`).
IN_FLIGHT = 2


@dataclass(frozen=True, slots=True)
class Restored:
    board: str
    players: int


async def board_names(archive: Archive, board: str | None) -> list[str]:
    """Every archived board (periods included), or ``board`` and its periods."""
    async with archive.connection() as conn:
        # a deleted board's watermarks are restored too: replayed events of it stay skipped
        rows = await conn.fetch(
            "SELECT board FROM (SELECT board FROM hb_boards UNION SELECT board FROM hb_watermarks WHERE field = $1) b "
            "WHERE $2::text IS NULL OR board = $2 OR board LIKE $3 ORDER BY board",
            keys.APPLIED_DELETED_VERSION,
            board,
            f"{board}@%",
        )
    return [r["board"] for r in rows]


async def _checkpoint_args(conn: Any, topic: str) -> list[Any]:
    """The archive's checkpoints as (partition, checkpoint, epoch) triples."""
    rows = await conn.fetch(
        "SELECT partition, checkpoint, epoch FROM hb_checkpoints WHERE topic = $1 AND checkpoint IS NOT NULL", topic
    )
    args: list[Any] = []
    for r in rows:
        args += (str(r["partition"]), r["checkpoint"], r["epoch"])
    return args


async def lower_checkpoints(archive: Archive, redis: Client, topic: str) -> int:
    async with archive.connection() as conn:
        args = await _checkpoint_args(conn, topic)
    if args:
        await _LOWER(redis, [keys.checkpoint_key(topic)], args)
    return len(args) // 3


async def restore_board(archive: Archive, redis: Client, topic: str, board: str, now_ms: int) -> Restored | None:
    """Write ``board`` from the archive into its restoring keys, then swap them in; None when it expired."""
    live = [kind(board) for kind in _KINDS]
    twin = [f"{k}:restoring" for k in live]
    async with archive.connection() as conn:
        row = await conn.fetchrow(
            "SELECT spec, expires_at_ms, version, as_of_ms FROM hb_boards WHERE board = $1", board
        )
        floor = await conn.fetchval(
            "SELECT last_offset FROM hb_watermarks WHERE board = $1 AND field = $2", board, keys.APPLIED_DELETED_VERSION
        )
        if floor is not None and (row is None or row["version"] <= floor):  # deleted and not written since
            await _restore_deleted(conn, redis, topic, board, live, twin)
            return None
        if row is None or 0 < row["expires_at_ms"] <= now_ms:
            return None
        definition = from_spec(row["spec"])
        logical, period = split_period_board(board)
        await redis.delete(*twin)
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            lowered = await _checkpoint_args(conn, topic)  # the snapshot's: every event up to them is in it
            marks = await conn.fetch("SELECT field, last_offset FROM hb_watermarks WHERE board = $1", board)
            if marks:
                await redis.hset(twin[1], mapping={r["field"]: r["last_offset"] for r in marks})
            players = await _copy_players(conn, redis, board, twin, definition)
    root = definition.seasonal and period is None
    if root:
        await redis.hset(twin[2], keys.META_PERIODS, 1)
    else:
        await redis.hset(twin[2], keys.META_AS_OF, row["as_of_ms"])
    if period is not None:
        copy: dict[Any, Any] = {k: v for k, v in to_hash(definition, 0).items() if k in _COPIED}
        await redis.hset(twin[3], mapping=copy)
    elif definition != DEFAULT:
        declared: dict[Any, Any] = to_hash(definition, now_ms)
        await redis.hset(twin[3], mapping=declared)
    await _swap(redis, topic, live, twin, [-1 if root else row["version"], row["expires_at_ms"]], lowered)
    if period is None:
        await redis.zadd(keys.BOARD_INDEX_KEY, {logical: 0})
    return Restored(board, players)


async def _restore_deleted(conn: Any, redis: Client, topic: str, board: str, live: list[str], twin: list[str]) -> None:
    """A deleted board: only its watermarks (and deleted version) come back, every other key of it goes."""
    await redis.delete(*twin)
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        lowered = await _checkpoint_args(conn, topic)
        marks = await conn.fetch("SELECT field, last_offset FROM hb_watermarks WHERE board = $1", board)
    await redis.hset(twin[1], mapping={r["field"]: r["last_offset"] for r in marks})
    await _swap(redis, topic, live, twin, [-1, 0], lowered)


#: The fields a period's definition copy holds (what the flush script seeds, see hotboard.lua).
_COPIED = ("spec", "order", "operator", "ties")


async def _swap(
    redis: Client, topic: str, live: list[str], twin: list[str], args: list[Any], lowered: list[Any]
) -> None:
    """The swap script on the board's slot. On one server it lowers the checkpoints in the same step; on a Redis
    Cluster the checkpoint hash lives on a slot of its own (a script may not span two), so they are lowered right
    before the swap and right after it, two round trips apart (the known gap: docs/archive.md)."""
    if not isinstance(redis, RedisCluster):
        await _SWAP(redis, [*live, *twin, keys.checkpoint_key(topic)], [*args, *lowered])
        return
    checkpoints = [keys.checkpoint_key(topic)]
    if lowered:
        await _LOWER(redis, checkpoints, lowered)
    await _SWAP(redis, [*live, *twin], args)
    if lowered:
        await _LOWER(redis, checkpoints, lowered)


async def _copy_players(conn: Any, redis: Client, board: str, twin: list[str], definition: BoardDef) -> int:
    """Every player row of ``board`` into the restoring keys, ``CHUNK`` rows at a time through a server-side
    cursor: the next chunk is fetched from PostgreSQL and packed while Redis runs the one before (``IN_FLIGHT``
    chunks written at once, each on a connection of its own: a chunk's players are its own, so the order they
    land in does not matter). At most ``IN_FLIGHT + 1`` chunks are in memory."""
    cursor = await conn.cursor("SELECT player, score, tie_ms, meta FROM hb_scores WHERE board = $1", board)
    players = 0
    writes: deque[asyncio.Task[None]] = deque()
    fetching: asyncio.Future[list[Any]] | None = None
    try:
        rows: list[Any] = await cursor.fetch(CHUNK)
        while rows:
            fetching = asyncio.ensure_future(cursor.fetch(CHUNK))
            writes.append(asyncio.create_task(_write_players(redis, twin, definition, rows)))
            if len(writes) >= IN_FLIGHT:
                await writes.popleft()
            players += len(rows)
            rows = await fetching
            fetching = None
        while writes:
            await writes.popleft()
    except BaseException:
        unfinished: list[asyncio.Future[Any]] = [*writes, *([fetching] if fetching is not None else [])]
        for task in unfinished:
            task.cancel()
        for task in unfinished:
            with contextlib.suppress(BaseException):
                await task
        raise
    return players


async def _write_players(redis: Client, twin: list[str], definition: Any, rows: Sequence[Any]) -> None:
    """One chunk of rows ``(player, score, tie_ms, meta)``: a ZADD of every member, an HSET of the metadata (and
    of the members, on ``earliest`` boards; the score counts on ``dense`` ones), packed by hiredis in C and
    streamed in one round trip (redis-py's pipeline packs 20,000 arguments in Python)."""
    if not rows:
        return
    if definition.earliest:
        sign = definition.sign
        members = [(r[0], earliest.member(r[2] or 0, r[0])) for r in rows]
        zset = [x for r, (_, m) in zip(rows, members, strict=True) for x in (sign * r[1], m)]
    else:
        members = []
        zset = [x for r in rows for x in (r[1], r[0])]
    commands = [_pack(("ZADD", twin[0], *zset))]
    metas = [x for r in rows if r[3] is not None for x in (r[0], r[3])]
    if metas:
        commands.append(_pack(("HSET", twin[4], *metas)))
    if members:
        commands.append(_pack(("HSET", twin[5], *(x for pair in members for x in pair))))
    if definition.ties == "dense":
        counts: dict[int, int] = {}
        for r in rows:
            counts[r[1]] = counts.get(r[1], 0) + 1
        for score, n in counts.items():
            commands.append(_pack(("HINCRBY", twin[7], score, n)))
            commands.append(_pack(("ZADD", twin[6], score, score)))
    replies = await _stream(redis, twin[0], commands)
    failed = next((r for r in replies if isinstance(r, Exception)), None)
    if failed is not None:
        raise failed


async def _stream(redis: Client, key: str, commands: list[bytes]) -> list[Any]:
    """Packed commands on one connection: the server's, or on a cluster the master of ``key``'s slot (every
    restoring key of a board shares it)."""
    if not isinstance(redis, RedisCluster):
        return await wire.stream(redis, commands)
    await redis.initialize()
    node = redis.get_node_from_key(key)
    assert node is not None, "an initialised cluster client knows every slot's master"
    conn = node.acquire_connection()
    try:
        return await wire.stream_on(conn, commands)
    finally:
        node.release(conn)


async def restore(
    archive: Archive, redis: Client, topic: str, board: str | None, progress: Callable[[Restored], None]
) -> list[Restored]:
    """Restore every archived board (``board`` None) or one board and its periods."""
    now_ms = int(time.time() * 1000)
    names = await board_names(archive, board)
    # 1. checkpoints no higher than the archive's: a running worker resynchronises and replays the tail
    await lower_checkpoints(archive, redis, topic)
    done = []
    for name in names:
        restored = await restore_board(archive, redis, topic, name, now_ms)
        if restored is not None:
            done.append(restored)
            progress(restored)
    # 2. each swap lowered them again, in its own step; once more for a run that restored no board
    await lower_checkpoints(archive, redis, topic)
    return done


def _pack(command: tuple[Any, ...]) -> bytes:
    return pack_command(command)  # type: ignore[no-any-return]
