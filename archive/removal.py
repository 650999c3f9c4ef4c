"""The archive's half of ``hotboard boards delete`` and ``erase`` (:mod:`hotboard.board_removal` is Redis's), so
that a restore never brings back a deleted board or an erased player, and PostgreSQL keeps no data of either.

A delete runs in one transaction that holds the board's ``hb_boards`` row locked (inserted for the while when the
archive has none): an archiver window on the board waits there, then finds the watermarks raised and is fenced
(it resynchronises and skips every event at or below them). Inside it, Redis's delete runs with the delete point
raised to what the archive applied, and its answer (the delete point, the version) is written here: both stores
then hold the same watermarks. The scores and the board's row go; the watermarks stay, with the delete's version
(one past the board's, Redis's answer) under :data:`DELETED` (as in Redis's applied hash), so a board written
again goes on from that version and a restore brings back the watermarks, not the board.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from archive.pool import Archive
from hotboard import keys
from hotboard.board_removal import Deleted

#: The watermark field holding a deleted board's version (the field Redis keeps in the applied hash).
DELETED = keys.APPLIED_DELETED_VERSION

RedisDelete = Callable[[Mapping[int, int]], Awaitable[Deleted]]


async def _epochs(conn: Any, topic: str, partitions: Collection[int]) -> dict[int, int]:
    rows = await conn.fetch(
        "SELECT partition, epoch FROM hb_checkpoints WHERE topic = $1 AND partition = ANY($2)", topic, list(partitions)
    )
    return {r["partition"]: r["epoch"] for r in rows}


async def checkpoints(archive: Archive, topic: str, partitions: Collection[int]) -> dict[int, int]:
    """partition -> the archive's checkpoint (-1 when absent)."""
    async with archive.connection() as conn:
        rows = await conn.fetch(
            "SELECT partition, checkpoint FROM hb_checkpoints WHERE topic = $1 AND partition = ANY($2) "
            "AND checkpoint IS NOT NULL",
            topic,
            list(partitions),
        )
    held = {r["partition"]: int(r["checkpoint"]) for r in rows}
    return {p: held.get(p, -1) for p in partitions}


async def delete(
    archive: Archive, topic: str, board: str, last_offsets: Mapping[int, int], in_redis: RedisDelete
) -> Deleted:
    """Delete ``board`` from the archive and (``in_redis``, called with the delete point) from Redis; found when
    either held it. Nothing is written here when neither did."""
    parts = sorted(last_offsets)
    async with archive.connection() as conn:
        tr = conn.transaction()
        await tr.start()
        try:
            absent = await conn.fetchval(
                "INSERT INTO hb_boards (board, spec) VALUES ($1, '') ON CONFLICT DO NOTHING RETURNING true", board
            )
            version = await conn.fetchval("SELECT version FROM hb_boards WHERE board = $1 FOR UPDATE", board)
            epoch = await _epochs(conn, topic, parts)
            field = {p: keys.watermark_field(topic, p, epoch.get(p, 0)) for p in parts}
            marks = {
                r["field"]: r["last_offset"]
                for r in await conn.fetch("SELECT field, last_offset FROM hb_watermarks WHERE board = $1", board)
            }
            asked = {p: max(last_offsets[p], marks.get(field[p], -1)) for p in parts}
            done = await in_redis(asked)
            if not done.found and absent and not marks:
                await tr.rollback()
                return done
            points = {p: max(asked[p], done.points.get(p, -1)) for p in parts}
            floor = max(0 if absent else int(version), marks.get(DELETED, 0), done.version)
            new = [(field[p], o) for p, o in points.items() if o >= 0] + [(DELETED, floor)]
            await conn.execute(
                "INSERT INTO hb_watermarks SELECT $1, * FROM unnest($2::text[], $3::bigint[]) "
                "ON CONFLICT (board, field) DO UPDATE "
                "SET last_offset = greatest(hb_watermarks.last_offset, EXCLUDED.last_offset)",
                board,
                [n[0] for n in new],
                [n[1] for n in new],
            )
            await conn.execute("DELETE FROM hb_scores WHERE board = $1", board)
            await conn.execute("DELETE FROM hb_boards WHERE board = $1", board)
        except BaseException:
            await tr.rollback()
            raise
        await tr.commit()
    return Deleted(True, floor, points, already_deleted=done.already_deleted and bool(absent))


async def erase(archive: Archive, board: str, player: str, now_ms: int) -> bool:
    """Delete ``player``'s row of ``board`` (score, tie time, meta); the board's version moves, as in Redis.
    False: the archive held no row of the player."""
    async with archive.connection() as conn, conn.transaction():
        gone = await conn.fetchval(
            "WITH d AS (DELETE FROM hb_scores WHERE board = $1 AND player = $2 RETURNING 1) SELECT count(*) FROM d",
            board,
            player,
        )
        if gone:
            await conn.execute(
                "UPDATE hb_boards SET version = version + 1, as_of_ms = $2 WHERE board = $1", board, now_ms
            )
    return bool(gone)
