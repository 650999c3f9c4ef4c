"""Restore against its own edge cases: restores of one board side by side, the lowering of a partition the archive
has no checkpoint for, the checkpoint generation past 2^53, and the TTLs a swap leaves (the restoring mark's own cases:
tests/integration/test_restore_mark.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest
from redis.asyncio import Redis

from archive import lowering, restore, restore_run, schema, staging
from archive.pool import Archive
from flusher.batch import NO_WATERMARK
from flusher.redis_sink import RedisSink
from hotboard import keys
from hotboard.boards import DEFAULT
from ingest.partitions import Halt, HaltReason, Seek, position

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
    assert not [k async for k in redis_client.scan_iter(match="*:restoring:*")], "a staging key was left behind"


async def test_a_partition_the_archive_lacks_replays_from_its_start_or_halts_where_retention_cut_it(
    redis_client: Redis, postgres_url: str
) -> None:
    """Redis holds partition 1 at 9 on every board; the archive never checkpointed it, so the restored board holds
    none of its events. After ``restore --board global`` the partition replays from its log's start (the other
    boards skip what their watermarks hold); where retention deleted offsets 0..9 those events of the restored
    board are in neither store, and the partition halts ``retention_lost`` for an operator rather than resume at
    the log's start as if the board held them: a loud halt, never a silent loss."""
    topic = "scores"
    await _archive_one_board(postgres_url, topic)
    field1 = keys.watermark_field(topic, 1, 0)
    for board in ("global", "other"):
        await redis_client.hset(keys.applied_key(board), field1, 9)
    await redis_client.hset(keys.checkpoint_key(topic), mapping={"0": 9, "1": 9})
    async with Archive(postgres_url) as archive:
        await restore.restore(archive, redis_client, topic, "global", lambda _: None)
    restored = await redis_client.hget(keys.checkpoint_key(topic), "1")
    assert restored is not None
    assert position(int(restored), 9, 0) == Seek(0)
    halted = position(int(restored), 9, 10)
    assert isinstance(halted, Halt) and halted.reason is HaltReason.RETENTION_LOST


async def test_a_generation_at_2_53_still_moves_on_a_lowering(redis_client: Redis) -> None:
    """A generation at or past 2^53 (Redis clock far ahead, or written by hand): a lowering must still change it."""
    sink = RedisSink(redis_client, "scores")
    ckpt = keys.checkpoint_key("scores")
    await redis_client.hset(ckpt, mapping={"0": 10, keys.gen_field(0): 2**53})
    assert await sink.load_checkpoints([0]) == {0: 10}
    await lowering.lower(redis_client, "scores", ["0", 10, 0])
    [move] = await sink.advance_checkpoints({0: (10, 12)})
    assert not move.ok, "a move decided before the lowering went through"


async def test_a_restored_board_keeps_no_staging_ttl_and_a_period_board_keeps_its_expiry(
    redis_client: Redis, postgres_url: str
) -> None:
    """Staging keys expire (a run that dies leaves none behind) and RENAME moves a key's TTL along: the swap must
    leave a board that never expires without one, and give a period board its own expiry."""
    topic = "scores"
    await _archive_one_board(postgres_url, topic)
    expires_at_ms = int(time.time() * 1000) + 86_400_000
    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute(
            "INSERT INTO hb_boards (board, spec, version, expires_at_ms) VALUES ('weekly', $1, 1, $2)",
            DEFAULT.spec,
            expires_at_ms,
        )
        await conn.execute("INSERT INTO hb_scores VALUES ('weekly', 'p', 5, NULL, '{}')")
    finally:
        await conn.close()
    async with Archive(postgres_url) as archive:
        await restore.restore(archive, redis_client, topic, None, lambda _: None)
    for key in staging.live_keys("global"):
        if await redis_client.exists(key):
            assert await redis_client.ttl(key) == -1, key
    assert await redis_client.ttl(keys.board_key("global")) == -1
    for key in (keys.board_key("weekly"), keys.player_meta_key("weekly"), keys.meta_key("weekly")):
        assert await redis_client.pexpiretime(key) == expires_at_ms, key


async def _archive_two_boards(postgres_url: str, topic: str, checkpoint: int) -> str:
    """Boards a and b of one player each, both at ``checkpoint`` on partition 0, as an archiver leaves them."""
    conn = await asyncpg.connect(postgres_url)
    try:
        await schema.migrate(conn)
        field = keys.watermark_field(topic, 0, 0)
        for board in ("a", "b"):
            await conn.execute("INSERT INTO hb_boards (board, spec, version) VALUES ($1, $2, 1)", board, DEFAULT.spec)
            await conn.execute("INSERT INTO hb_scores VALUES ($1, 'p', 10, NULL, NULL)", board)
            await conn.execute("INSERT INTO hb_watermarks VALUES ($1, $2, $3)", board, field, checkpoint)
        await conn.execute(
            "INSERT INTO hb_checkpoints (topic, partition, checkpoint) VALUES ($1, 0, $2)", topic, checkpoint
        )
    finally:
        await conn.close()
    return field


async def test_a_lost_checkpoint_is_written_no_higher_than_the_first_swapped_board_holds(
    redis_client: Redis, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis lost everything; the archiver applies offsets 10..19 between the swaps of a (read at 9) and b (read at
    19). The checkpoint the restore writes at its end must be 9: written as the archive's checkpoint then (19), the
    partition would resume at 20 and a would never get its events 10..19."""
    topic = "scores"
    field = await _archive_two_boards(postgres_url, topic, 9)
    real = staging.swap

    async def swap(redis: Any, topic_: str, live: Sequence[str], *args: Any, **kwargs: Any) -> None:
        await real(redis, topic_, live, *args, **kwargs)
        if list(live) == staging.live_keys("a"):  # the archiver's next window, between the two swaps
            conn = await asyncpg.connect(postgres_url)
            try:
                await conn.execute("UPDATE hb_scores SET score = score + 1")
                await conn.execute("UPDATE hb_watermarks SET last_offset = 19")
                await conn.execute("UPDATE hb_checkpoints SET checkpoint = 19")
            finally:
                await conn.close()

    monkeypatch.setattr(staging, "swap", swap)
    async with Archive(postgres_url) as archive:
        await restore.restore(archive, redis_client, topic, None, lambda _: None)
    marks = [await redis_client.hget(keys.applied_key(b), field) for b in ("a", "b")]
    assert marks == [b"9", b"19"], "each board as of its own snapshot"
    assert await redis_client.hget(keys.checkpoint_key(topic), "0") == b"9"


async def test_restoring_one_board_never_writes_a_checkpoint_redis_lost(redis_client: Redis, postgres_url: str) -> None:
    """A lost Redis's partition halts ``redis_lost`` with no checkpoint, and a written checkpoint lifts the halt.
    ``restore --board a`` brings a back but not b: it must leave the checkpoint unwritten (the partition stays
    halted; resuming would give b only the tail); the whole restore writes it."""
    topic = "scores"
    await _archive_two_boards(postgres_url, topic, 9)
    ckpt = keys.checkpoint_key(topic)
    await redis_client.hset(ckpt, keys.halt_field(0), f"{HaltReason.REDIS_LOST.value} {NO_WATERMARK}")
    async with Archive(postgres_url) as archive:
        done = await restore.restore(archive, redis_client, topic, "a", lambda _: None)
        assert [d.board for d in done] == ["a"]
        assert await redis_client.hget(ckpt, "0") is None, "one board restored lifted the halt"
        await restore.restore(archive, redis_client, topic, None, lambda _: None)
    assert await redis_client.hget(ckpt, "0") == b"9"


async def _sql(postgres_url: str, *statements: str) -> None:
    conn = await asyncpg.connect(postgres_url)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def test_redis_losing_data_between_the_swaps_writes_no_lost_checkpoint(
    redis_client: Redis, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis is wiped again right after a's swap (a second crash without persistence): a is gone with it. The
    restore must not then write the lost checkpoint (that would lift the halt with a empty): it refuses, and the
    next restore brings both back and writes it."""
    topic = "scores"
    field = await _archive_two_boards(postgres_url, topic, 9)
    real = staging.swap

    async def swap(redis: Any, topic_: str, live: Sequence[str], *args: Any, **kwargs: Any) -> None:
        await real(redis, topic_, live, *args, **kwargs)
        if list(live) == staging.live_keys("a"):
            await redis.flushall()

    monkeypatch.setattr(staging, "swap", swap)
    ckpt = keys.checkpoint_key(topic)
    async with Archive(postgres_url) as archive:
        with pytest.raises(restore_run.RestoreInterrupted):
            await restore.restore(archive, redis_client, topic, None, lambda _: None)
        assert await redis_client.hget(ckpt, "0") is None, "the lost checkpoint was written with a gone"
        monkeypatch.setattr(staging, "swap", real)
        await restore.restore(archive, redis_client, topic, None, lambda _: None)
    marks = [await redis_client.hget(keys.applied_key(b), field) for b in ("a", "b")]
    assert (marks, await redis_client.hget(ckpt, "0")) == ([b"9", b"9"], b"9")
    assert not [k async for k in redis_client.scan_iter(match="*:restore:*")], "the run token was left behind"


async def test_a_board_the_archiver_creates_during_the_restore_is_restored_before_the_checkpoint_is_written(
    redis_client: Redis, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The archiver's window creating board c (and moving the checkpoint to 19) commits right after the restore
    listed the boards: c's events are below the checkpoint the restore writes, so c must be restored too."""
    topic = "scores"
    field = await _archive_two_boards(postgres_url, topic, 9)
    real = restore.board_names
    listings = 0

    async def board_names(archive: Archive, board: str | None) -> list[str]:
        nonlocal listings
        names = await real(archive, board)
        listings += 1
        if listings == 1:
            await _sql(
                postgres_url,
                f"INSERT INTO hb_boards (board, spec, version) VALUES ('c', '{DEFAULT.spec}', 1)",
                "INSERT INTO hb_scores VALUES ('c', 'p', 3, NULL, NULL)",
                f"INSERT INTO hb_watermarks VALUES ('c', '{field}', 19)",
                "UPDATE hb_checkpoints SET checkpoint = 19",
            )
        return names

    monkeypatch.setattr(restore, "board_names", board_names)
    async with Archive(postgres_url) as archive:
        done = await restore.restore(archive, redis_client, topic, None, lambda _: None)
    assert sorted(d.board for d in done) == ["a", "b", "c"]
    assert await redis_client.zscore(keys.board_key("c"), "p") == 3
    assert await redis_client.hget(keys.checkpoint_key(topic), "0") == b"19"


async def test_the_first_window_of_a_partition_archived_after_the_first_lowering_still_gets_its_checkpoint(
    redis_client: Redis, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The archive had no checkpoint of partition 1 at the restore's first lowering; the archiver's first window
    of it lands before the boards are read. Every board's snapshot has partition 1 at 5: that is the checkpoint to
    write (counting the first lowering's nothing would write none, and the partition would stay halted for good)."""
    topic = "scores"
    await _archive_two_boards(postgres_url, topic, 9)
    field1 = keys.watermark_field(topic, 1, 0)
    real = restore.lower_checkpoints

    async def lower_checkpoints(archive: Archive, redis: Any, topic_: str, lowest: restore_run.Lowest) -> None:
        await real(archive, redis, topic_, lowest)
        await _sql(
            postgres_url,
            f"INSERT INTO hb_watermarks VALUES ('a', '{field1}', 5), ('b', '{field1}', 5)",
            f"INSERT INTO hb_checkpoints (topic, partition, checkpoint) VALUES ('{topic}', 1, 5)",
        )

    monkeypatch.setattr(restore, "lower_checkpoints", lower_checkpoints)
    async with Archive(postgres_url) as archive:
        await restore.restore(archive, redis_client, topic, None, lambda _: None)
    assert await redis_client.hmget(keys.checkpoint_key(topic), ["0", "1"]) == [b"9", b"5"]


async def test_redis_restarting_from_a_state_before_the_last_swap_writes_no_lost_checkpoint(
    redis_client: Redis, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis restarts from an RDB or AOF written between a's swap and b's: what it keeps is what it held then
    (b's swap gone, the run token naming a's swap only). The token must tell: no lost checkpoint written."""
    topic = "scores"
    await _archive_two_boards(postgres_url, topic, 9)
    real = staging.swap
    token: list[str] = []

    async def swap(redis: Any, topic_: str, live: Sequence[str], *args: Any, **kwargs: Any) -> None:
        if list(live) == staging.live_keys("a"):
            token.extend([k.decode() async for k in redis.scan_iter(match="*:restore:*")])
        await real(redis, topic_, live, *args, **kwargs)
        if list(live) == staging.live_keys("b"):  # the state of the restart: b not swapped, the token naming a's
            await redis.delete(*live)
            named = await redis.smembers(token[0])
            await redis.srem(token[0], *(m for m in named if m.startswith(keys.board_key("b").encode())))

    monkeypatch.setattr(staging, "swap", swap)
    async with Archive(postgres_url) as archive:
        with pytest.raises(restore_run.RestoreInterrupted):
            await restore.restore(archive, redis_client, topic, None, lambda _: None)
    assert await redis_client.hget(keys.checkpoint_key(topic), "0") is None


@pytest.mark.parametrize("during", ["a", "b"])
async def test_a_partition_first_checkpointed_during_a_board_copy_comes_down_to_none(
    redis_client: Redis, postgres_url: str, monkeypatch: pytest.MonkeyPatch, during: str
) -> None:
    """Partition 1 is not halted (its log starts at 0): while board ``during`` is copied, a worker applies its
    offsets 0..3 to the live board and writes its first checkpoint, 3 (during a's copy the archiver its own too).
    That board's snapshot lacked the partition, so the swapped board holds none of those events: the checkpoint
    must come down to none (replay from the start), not stay at 3 (the board would never get them). During b's
    copy, the last board's, no snapshot names the partition at all, and only the last lowering can see it."""
    topic = "scores"
    await _archive_two_boards(postgres_url, topic, 9)
    field1 = keys.watermark_field(topic, 1, 0)
    real = restore._copy_players

    async def copy_players(conn: Any, redis: Any, board: str, *args: Any) -> int:
        players = await real(conn, redis, board, *args)
        if board == during:
            await redis.hset(keys.checkpoint_key(topic), "1", 3)
            if during == "a":
                await _sql(
                    postgres_url,
                    f"INSERT INTO hb_watermarks VALUES ('b', '{field1}', 3)",
                    f"INSERT INTO hb_checkpoints (topic, partition, checkpoint) VALUES ('{topic}', 1, 3)",
                )
        return players

    monkeypatch.setattr(restore, "_copy_players", copy_players)
    async with Archive(postgres_url) as archive:
        await restore.restore(archive, redis_client, topic, None, lambda _: None)
    assert await redis_client.hmget(keys.checkpoint_key(topic), ["0", "1"]) == [b"9", str(NO_WATERMARK).encode()]


async def test_a_board_archived_after_the_second_listing_is_below_no_written_checkpoint(
    redis_client: Redis, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The archive holds a checkpoint (9) and no board at the first listing; board y is archived before the second
    listing, board x (moving the checkpoint to 19) right after it, before y is read. x is not restored, so the
    checkpoint written must be no higher than the second listing's 9: x's events up to 19 replay."""
    topic = "scores"
    await _archive_two_boards(postgres_url, topic, 9)
    await _sql(postgres_url, "DELETE FROM hb_boards", "DELETE FROM hb_scores", "DELETE FROM hb_watermarks")
    field = keys.watermark_field(topic, 0, 0)
    real_names, real_listing = restore.board_names, restore._listing

    async def board_names(archive: Archive, board: str | None) -> list[str]:
        names = await real_names(archive, board)
        await _sql(
            postgres_url,
            f"INSERT INTO hb_boards (board, spec, version) VALUES ('y', '{DEFAULT.spec}', 1)",
            "INSERT INTO hb_scores VALUES ('y', 'p', 3, NULL, NULL)",
            f"INSERT INTO hb_watermarks VALUES ('y', '{field}', 9)",
        )
        return names

    async def listing(archive: Archive, *args: Any) -> tuple[list[str], list[Any]]:
        out = await real_listing(archive, *args)
        await _sql(
            postgres_url,
            f"INSERT INTO hb_boards (board, spec, version) VALUES ('x', '{DEFAULT.spec}', 1)",
            "INSERT INTO hb_scores VALUES ('x', 'p', 4, NULL, NULL)",
            f"INSERT INTO hb_watermarks VALUES ('x', '{field}', 19)",
            "UPDATE hb_checkpoints SET checkpoint = 19",
        )
        return out

    monkeypatch.setattr(restore, "board_names", board_names)
    monkeypatch.setattr(restore, "_listing", listing)
    async with Archive(postgres_url) as archive:
        done = await restore.restore(archive, redis_client, topic, None, lambda _: None)
    assert [d.board for d in done] == ["y"]
    assert await redis_client.hget(keys.checkpoint_key(topic), "0") == b"9"


@pytest.mark.parametrize(
    ("checkpoint", "halt", "board", "expected"),
    [
        (9, f"{HaltReason.RETENTION_LOST.value} 9", None, b"19"),  # halted, the archive ahead: raised to it
        (9, None, None, b"9"),  # a running partition: its worker replays the tail, the boards skip what they hold
        (9, f"{HaltReason.RETENTION_LOST.value} 9", "a", b"9"),  # one board restored: b may lack 10..19
        (9, f"{HaltReason.BEYOND_LOG_END.value} 9", None, b"9"),  # another log's offsets: the operator's call
        (9, f"{HaltReason.RETENTION_LOST.value} 5", None, b"9"),  # written since the halt: answered already
        (29, f"{HaltReason.RETENTION_LOST.value} 29", None, b"19"),  # the archive behind: lowered, as before
    ],
    ids=["retention-lost", "running", "one-board", "beyond-log-end", "stale-halt", "archive-behind"],
)
async def test_a_whole_restore_raises_only_a_retention_lost_checkpoint_the_archive_is_ahead_of(
    redis_client: Redis, postgres_url: str, checkpoint: int, halt: str | None, board: str | None, expected: bytes
) -> None:
    """Redis holds partition 0 at ``checkpoint`` and retention may have cut its log past it (halted
    ``retention_lost`` there); the archive holds a and b at 19. Only a restore of every board, and only for a
    partition still halted ``retention_lost`` at the checkpoint Redis holds, may raise it, to the lowest checkpoint
    every snapshot named: every board then holds every event up to it, so the partition resumes with nothing lost."""
    topic = "scores"
    await _archive_two_boards(postgres_url, topic, 19)
    ckpt = keys.checkpoint_key(topic)
    await redis_client.hset(ckpt, "0", checkpoint)
    if halt is not None:
        await redis_client.hset(ckpt, keys.halt_field(0), halt)
    async with Archive(postgres_url) as archive:
        await restore.restore(archive, redis_client, topic, board, lambda _: None)
    assert await redis_client.hmget(ckpt, ["0", keys.halt_field(0)]) == [expected, halt and halt.encode()]


async def test_a_retention_lost_checkpoint_is_raised_no_higher_than_the_first_swapped_board_holds(
    redis_client: Redis, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Halted ``retention_lost`` at 4; the archiver applies 10..19 between the swaps of a (read at 9) and b (read
    at 19). The raise must stop at 9: raised to 19, a would never get its events 10..19."""
    topic = "scores"
    await _archive_two_boards(postgres_url, topic, 9)
    ckpt = keys.checkpoint_key(topic)
    await redis_client.hset(ckpt, mapping={"0": 4, keys.halt_field(0): f"{HaltReason.RETENTION_LOST.value} 4"})
    real = staging.swap

    async def swap(redis: Any, topic_: str, live: Sequence[str], *args: Any, **kwargs: Any) -> None:
        await real(redis, topic_, live, *args, **kwargs)
        if list(live) == staging.live_keys("a"):
            await _sql(
                postgres_url,
                "UPDATE hb_scores SET score = score + 1",
                "UPDATE hb_watermarks SET last_offset = 19",
                "UPDATE hb_checkpoints SET checkpoint = 19",
            )

    monkeypatch.setattr(staging, "swap", swap)
    async with Archive(postgres_url) as archive:
        await restore.restore(archive, redis_client, topic, None, lambda _: None)
    assert await redis_client.hget(ckpt, "0") == b"9"


async def test_a_retention_lost_checkpoint_in_another_log_epoch_than_the_archives_is_not_raised(
    redis_client: Redis, postgres_url: str
) -> None:
    """A re-created topic: the archive is still in epoch 0 (the old log, checkpoint 10000, the archiver halted
    beyond_log_end), Redis was lifted into epoch 1 (the new log) and halted retention_lost at 199 there. The offsets
    of two logs are not comparable: the new log's checkpoint must not move to the old log's 10000 (which would skip
    the new log's records up to it)."""
    topic = "scores"
    await _archive_two_boards(postgres_url, topic, 10000)
    await _sql(postgres_url, "UPDATE hb_checkpoints SET halt = 'beyond_log_end 10000'")
    ckpt = keys.checkpoint_key(topic)
    halt = f"{HaltReason.RETENTION_LOST.value} 199"
    await redis_client.hset(ckpt, mapping={"0": 199, keys.epoch_field(0): 1, keys.halt_field(0): halt})
    async with Archive(postgres_url) as archive:
        await restore.restore(archive, redis_client, topic, None, lambda _: None)
    got = await redis_client.hmget(ckpt, ["0", keys.epoch_field(0), keys.halt_field(0)])
    assert got[0] == b"199" and got[1] == b"1" and got[2] == halt.encode()
