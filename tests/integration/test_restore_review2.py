"""Adversarial review (review2) of the restore generation, the restoring mark and the lowering of partitions the
archive has no checkpoint for: the faults found, each pinned by a test."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from redis.asyncio import Redis

from archive import restore, schema
from archive.pool import Archive
from hotboard import keys
from hotboard.boards import DEFAULT

pytestmark = pytest.mark.integration

#: More players than one staging chunk, so a restore's copy spans several round trips.
PLAYERS = 3 * restore.CHUNK + 17


async def _archive_one_board(postgres_url: str, topic: str) -> str:
    """An archive of one board 'global' of ``PLAYERS`` players, partition 0 checkpointed at 9."""
    conn = await asyncpg.connect(postgres_url)
    try:
        await schema.migrate(conn)
        await conn.execute("INSERT INTO hb_boards (board, spec, version) VALUES ('global', $1, 3)", DEFAULT.spec)
        await conn.copy_records_to_table(
            "hb_scores", records=[("global", f"p{i}", i, None, None) for i in range(PLAYERS)]
        )
        field = keys.watermark_field(topic, 0, 0)
        await conn.execute("INSERT INTO hb_watermarks VALUES ('global', $1, 9)", field)
        await conn.execute("INSERT INTO hb_checkpoints (topic, partition, checkpoint) VALUES ($1, 0, 9)", topic)
    finally:
        await conn.close()
    return field


@pytest.mark.xfail(
    strict=True,
    reason="two restores at once share the staging keys (hb:{B}:...:restoring): one's swap renames the other's "
    "half-staged board in, and the other's swap then finds its twins gone and deletes the live keys (review2)",
)
async def test_two_restores_at_once_leave_the_board_whole(redis_client: Redis, postgres_url: str) -> None:
    """After a FLUSHALL every worker with ``--on-redis-loss`` halts its own partitions ``redis_lost`` and runs its
    own restore of every board (archive.redis_loss), so restores of one board run side by side. Whatever their
    interleaving, the board must end whole: every archived player and its watermark."""
    topic = "scores"
    field = await _archive_one_board(postgres_url, topic)
    async with Archive(postgres_url) as one, Archive(postgres_url) as other:
        await asyncio.gather(
            restore.restore(one, redis_client, topic, None, lambda _: None),
            restore.restore(other, redis_client, topic, None, lambda _: None),
        )
    players = await redis_client.zcard(keys.board_key("global"))
    mark = await redis_client.hget(keys.applied_key("global"), field)
    assert (players, mark) == (PLAYERS, b"9")
