"""``hotboard restore``: boards rebuilt in Redis from the archive alone (no Kafka), each swapped in atomically.

Each board is staged in keys of its own hash tag beside the live ones (:mod:`archive.staging`), then one script
renames them over the live keys (and deletes the live keys the archive has no counterpart for), so
a reader sees the old board or the restored one, never half of either. The watermarks come along, so what a
board holds and what it has applied stay one statement. A board's meta version moves past both the live one and
the archived one: a reader's cache keyed by version never serves the old board for the new.

The topic's checkpoints are lowered to the archive's before the swaps, by each swap (in its script, to the
checkpoints of the snapshot the board was read from) and once more after them (where Redis holds none, as a lost
Redis does, only by that last lowering of a whole restore: :class:`archive.restore_run.Lowest`): a worker whose
checkpoint move is refused, or that is fenced on a swapped board, resynchronises, and replays from no later than the
archive's checkpoint the tail the restored boards lack (their watermarks skip what they hold). Each lowering bumps
the partition's restore generation, which the move compares: it is refused even where the checkpoint was no higher.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from archive import lowering, restore_run, staging
from archive.pool import Archive
from flusher.batch import NO_WATERMARK
from hotboard import keys
from hotboard.boards import DEFAULT, BoardDef, from_spec, to_hash
from hotboard.periods import split_period_board
from hotboard.redis_client import Client

#: Rows read from the archive per chunk, and chunks written to Redis at once (see :func:`_copy_players`).
CHUNK = staging.CHUNK
IN_FLIGHT = 2


@dataclass(frozen=True, slots=True)
class Restored:
    board: str
    players: int


@dataclass(frozen=True, slots=True)
class Copied:
    """Progress of one board's copy: ``players`` of its ``total`` staged so far (reported per chunk)."""

    board: str
    players: int
    total: int


async def board_names(archive: Archive, board: str | None) -> list[str]:
    """Every archived board (periods included), or ``board`` and its periods."""
    async with archive.connection() as conn:
        return await _board_names(conn, board)


async def _board_names(conn: Any, board: str | None) -> list[str]:
    # a deleted board's watermarks are restored too: replayed events of it stay skipped
    rows = await conn.fetch(
        "SELECT board FROM (SELECT board FROM hb_boards UNION SELECT board FROM hb_watermarks WHERE field = $1) b "
        "WHERE $2::text IS NULL OR board = $2 OR board LIKE $3 ORDER BY board",
        keys.APPLIED_DELETED_VERSION,
        board,
        f"{board}@%",
    )
    return [r["board"] for r in rows]


async def _listing(archive: Archive, redis: Client, topic: str, board: str | None) -> tuple[list[str], list[Any]]:
    """The boards and the checkpoints of one snapshot of the archive."""
    async with archive.connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        return await _board_names(conn, board), await _checkpoint_args(conn, redis, topic)


async def _checkpoint_args(conn: Any, redis: Client, topic: str) -> list[Any]:
    """The archive's checkpoints as (partition, checkpoint, epoch) triples, and ``NO_WATERMARK`` for each
    partition Redis holds a checkpoint of and the archive does not: the archiver has applied none of its events
    yet (its checkpoint moves in the transaction of its first window), so no restored board holds any, and the
    partition replays from its start (the boards not restored skip what their watermarks hold)."""
    rows = await conn.fetch(
        "SELECT partition, checkpoint, epoch FROM hb_checkpoints WHERE topic = $1 AND checkpoint IS NOT NULL", topic
    )
    args: list[Any] = []
    for r in rows:
        args += (str(r["partition"]), r["checkpoint"], r["epoch"])
    archived = {str(r["partition"]) for r in rows}
    fields = await redis.hkeys(keys.checkpoint_key(topic))
    for field in fields:
        partition = field.decode() if isinstance(field, bytes) else str(field)
        if partition.isdigit() and partition not in archived:
            args += (partition, NO_WATERMARK, 0)
    return args


async def lower_checkpoints(archive: Archive, redis: Client, topic: str, lowest: restore_run.Lowest) -> None:
    """The first lowering: to the archive's checkpoints, only where Redis holds one (see :class:`Lowest`)."""
    async with archive.connection() as conn:
        args = await _checkpoint_args(conn, redis, topic)
    lowest.first(args)
    if args:
        await lowering.lower(redis, topic, args, fill=False)


async def archived_partitions(archive: Archive, topic: str) -> set[int]:
    """The partitions of ``topic`` the archive holds a checkpoint of (it has applied some of their events)."""
    async with archive.connection() as conn:
        rows = await conn.fetch(
            "SELECT partition FROM hb_checkpoints WHERE topic = $1 AND checkpoint IS NOT NULL", topic
        )
    return {int(r["partition"]) for r in rows}


async def restore_board(
    archive: Archive,
    redis: Client,
    topic: str,
    board: str,
    now_ms: int,
    copied: Callable[[Copied], None] | None = None,
    lowest: restore_run.Lowest | None = None,
    whole: restore_run.WholeRestore | None = None,
    acks: staging.SwapAcks | None = None,
) -> Restored | None:
    """Write ``board`` from the archive into its restoring keys, then swap them in; None when it expired.
    ``copied`` hears each chunk of players staged; ``lowest`` the checkpoints of the snapshot it was read from
    (its swap lowers only those Redis holds: see :class:`archive.restore_run.Lowest`); ``whole`` counts its swap;
    ``acks``: the replicas of the board's master that must confirm the swap (:func:`archive.staging.swap_acks`)."""
    lowest = restore_run.Lowest() if lowest is None else lowest
    live, run = staging.live_keys(board), staging.run_token()
    twin = staging.staging_keys(live, run)
    async with archive.connection() as conn:
        row = await conn.fetchrow(
            "SELECT spec, expires_at_ms, version, as_of_ms FROM hb_boards WHERE board = $1", board
        )
        floor = await conn.fetchval(
            "SELECT last_offset FROM hb_watermarks WHERE board = $1 AND field = $2", board, keys.APPLIED_DELETED_VERSION
        )
        if floor is not None and (row is None or row["version"] <= floor):  # deleted and not written since
            await _restore_deleted(conn, redis, topic, board, live, twin, run, lowest, whole, acks)
            return None
        if row is None or 0 < row["expires_at_ms"] <= now_ms:
            return None
        definition = from_spec(row["spec"])
        logical, period = split_period_board(board)
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            lowered = await _checkpoint_args(conn, redis, topic)  # the snapshot's: every event up to them is in it
            marks = await conn.fetch("SELECT field, last_offset FROM hb_watermarks WHERE board = $1", board)
            players = await _copy_players(conn, redis, board, twin, definition, copied)
    lowest.add(lowered)
    # after the players: the few hashes are written (and the staging TTL renewed) right before the swap
    await staging.stage_hash(redis, twin, 1, {r["field"]: r["last_offset"] for r in marks})
    root = definition.seasonal and period is None
    await staging.stage_hash(redis, twin, 2, {keys.META_PERIODS: 1} if root else {keys.META_AS_OF: row["as_of_ms"]})
    if period is not None:
        await staging.stage_hash(redis, twin, 3, staging.period_copy(definition))
    elif definition != DEFAULT:
        await staging.stage_hash(redis, twin, 3, to_hash(definition, now_ms))
    args = [-1 if root else row["version"], row["expires_at_ms"]]
    token = None if whole is None else whole.key
    await staging.swap(redis, topic, live, twin, args, lowered, run, fill=False, token=token, acks=acks)
    if whole is not None:
        whole.swapped()
    if period is None:
        await redis.zadd(keys.BOARD_INDEX_KEY, {logical: 0})
    return Restored(board, players)


async def _restore_deleted(
    conn: Any,
    redis: Client,
    topic: str,
    board: str,
    live: list[str],
    twin: list[str],
    run: str,
    lowest: restore_run.Lowest,
    whole: restore_run.WholeRestore | None,
    acks: staging.SwapAcks | None,
) -> None:
    """A deleted board: only its watermarks (and deleted version) come back, every other key of it goes."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        lowered = await _checkpoint_args(conn, redis, topic)
        marks = await conn.fetch("SELECT field, last_offset FROM hb_watermarks WHERE board = $1", board)
    lowest.add(lowered)
    await staging.stage_hash(redis, twin, 1, {r["field"]: r["last_offset"] for r in marks})
    token = None if whole is None else whole.key
    await staging.swap(redis, topic, live, twin, [-1, 0], lowered, run, fill=False, token=token, acks=acks)
    if whole is not None:
        whole.swapped()


async def _copy_players(
    conn: Any, redis: Client, board: str, twin: list[str], definition: BoardDef, copied: Callable[[Copied], None] | None
) -> int:
    """Every player row of ``board`` into the restoring keys, ``CHUNK`` rows at a time through a server-side
    cursor: the next chunk is fetched from PostgreSQL and packed while Redis runs the one before (``IN_FLIGHT``
    chunks written at once, each on a connection of its own: a chunk's players are its own, so the order they
    land in does not matter). At most ``IN_FLIGHT + 1`` chunks are in memory. ``copied`` hears each chunk written,
    against the count of the same snapshot (the caller's transaction)."""
    total = await conn.fetchval("SELECT count(*) FROM hb_scores WHERE board = $1", board) if copied else 0
    cursor = await conn.cursor("SELECT player, score, tie_ms, meta FROM hb_scores WHERE board = $1", board)
    players = staged = 0
    writes: deque[tuple[asyncio.Task[None], int]] = deque()
    fetching: asyncio.Future[list[Any]] | None = None

    async def written() -> None:
        nonlocal staged
        task, count = writes.popleft()
        await task
        staged += count
        if copied is not None:
            copied(Copied(board, staged, total))

    try:
        rows: list[Any] = await cursor.fetch(CHUNK)
        while rows:
            fetching = asyncio.ensure_future(cursor.fetch(CHUNK))
            writes.append((asyncio.create_task(staging.stage_players(redis, twin, definition, rows)), len(rows)))
            if len(writes) >= IN_FLIGHT:
                await written()
            players += len(rows)
            rows = await fetching
            fetching = None
        while writes:
            await written()
    except BaseException:
        unfinished: list[asyncio.Future[Any]] = [*(t for t, _ in writes), *([fetching] if fetching is not None else [])]
        for task in unfinished:
            task.cancel()
        for task in unfinished:
            with contextlib.suppress(BaseException):
                await task
        raise
    return players


async def restore(
    archive: Archive,
    redis: Client,
    topic: str,
    board: str | None,
    progress: Callable[[Restored], None],
    copied: Callable[[Copied], None] | None = None,
    *,
    min_replica_acks: int = 0,
    replica_ack_timeout_ms: int = 1000,
) -> list[Restored]:
    """Restore every archived board (``board`` None) or one board and its periods; ``progress`` hears each board
    swapped in, ``copied`` each chunk of its players staged before. Only a whole restore writes the checkpoints
    Redis holds none of (a lost Redis's: lifting its halts), once every board is in: one board restored must not
    let a partition resume while the others are still empty. On a Redis Cluster each swap waits for
    ``min_replica_acks`` replicas of its board's master (``--min-replica-acks``, as a window does), for up to
    ``replica_ack_timeout_ms``, before the run goes on: too few raise :class:`archive.staging.SwapUnconfirmed`,
    with no checkpoint written that counts on the swap (a failover could undo it)."""
    now_ms = int(time.time() * 1000)
    acks = staging.swap_acks(redis, topic, min_replica_acks, replica_ack_timeout_ms)
    whole = restore_run.WholeRestore(topic, staging.run_token()) if board is None else None
    if whole is not None:
        await whole.begin(redis)
    names = await board_names(archive, board)
    # 1. checkpoints no higher than the archive's: a running worker resynchronises and replays the tail
    lowest = restore_run.Lowest()
    await lower_checkpoints(archive, redis, topic, lowest)
    done: list[Restored] = []

    # The names once more after the swaps, with the checkpoints of the same snapshot (counted as one): a board the
    # archiver created after the first listing may hold events a snapshot's checkpoint covers (its window moved
    # it), so it is swapped in before that checkpoint is written; one created after this listing holds only events
    # past this snapshot's checkpoint, which the one written is no higher than: they replay.
    async def swap_in(listed: list[str]) -> None:
        for name in listed:
            restored = await restore_board(archive, redis, topic, name, now_ms, copied, lowest, whole, acks)
            if restored is not None:
                done.append(restored)
                progress(restored)

    await swap_in(names)
    again, args = await _listing(archive, redis, topic, board)
    lowest.add(args, swapped=False)
    await swap_in([n for n in again if n not in names])
    # each swap lowered them again, in its own step; once more, in one step: to the lowest every snapshot named, now
    # (a whole restore, whose run token shows Redis lost none of its swaps) where Redis holds none too, and a
    # partition some snapshot lacked down to none where Redis holds it (archive.restore_run.Lowest, _FINISH)
    final = lowest.triples()
    if whole is not None:
        await whole.finish(redis, final)
    else:
        await restore_run.finish(redis, topic, final, lowest.swaps)
    return done
