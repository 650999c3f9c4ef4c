"""``hotboard restore`` against what happened in Redis since the archive was written: boards deleted and players
erased there, and workers that keep writing while the boards are swapped in."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import asyncpg
import pytest
import redis
from redis.asyncio import Redis

from archive import restore, schema
from archive.pool import Archive
from archive.redis_loss import LossRestorer
from cli.devstack import RedisServer
from cli.loadgen import publish
from flusher.batch import CheckpointResult
from hotboard import keys
from hotboard.boards import DEFAULT
from ingest.worker import Worker
from tests.integration.archive_harness import archiver_process, wait_archived
from tests.integration.conftest import Spawn
from tests.integration.harness import (
    Feeder,
    Totals,
    board_totals,
    checkpoint,
    read_boards,
    skewed_events,
    totals_of,
    wait_exact,
    wait_while_running,
    worker_events,
    worker_settings,
)

pytestmark = pytest.mark.integration


def _cli(*args: str, redis_url: str, topic: str, kafka: str) -> subprocess.CompletedProcess[str]:
    env = {"HOTBOARD_REDIS": redis_url, "HOTBOARD_TOPIC": topic, "HOTBOARD_KAFKA": kafka}
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args], env=env, capture_output=True, text=True, timeout=60
    )


def _archived(url: str, board: str, player: str | None) -> int:
    """The archive's score rows of ``board`` (of ``player`` only, when given)."""

    async def count() -> int:
        conn = await asyncpg.connect(url)
        try:
            query = "SELECT count(*) FROM hb_scores WHERE board = $1 AND ($2::text IS NULL OR player = $2)"
            return int(await conn.fetchval(query, board, player))
        finally:
            await conn.close()

    return asyncio.run(count())


def test_restore_keeps_a_deleted_board_deleted_and_an_erased_player_erased(
    kafka: str,
    topic_factory: Callable[..., str],
    redis_server: RedisServer,
    postgres_url: str,
    spawn: Spawn,
    tmp_path: Path,
) -> None:
    topic = topic_factory(4)
    events = skewed_events(3000, players=200)
    totals = totals_of(events)
    worker = spawn(redis_server.url, topic, "worker")
    archiver = archiver_process(kafka, redis_server.url, postgres_url, topic, f"g-{uuid.uuid4().hex[:8]}", tmp_path)
    try:
        archiver.start()
        worker.wait_ready()
        archiver.wait_ready()
        Feeder(kafka, topic, events, rate=5_000).finish()
        wait_exact(redis_server.url, totals)
        wait_archived(postgres_url, totals)
        victim = next(iter(totals["global"]))
        for args in (("boards", "delete", "board-2"), ("boards", "erase", "global", victim)):
            done = _cli(*args, "--postgres", postgres_url, redis_url=redis_server.url, topic=topic, kafka=kafka)
            assert done.returncode == 0, done.stderr
        assert worker.terminate()[0] == 0 and archiver.terminate()[0] == 0
        assert _archived(postgres_url, "board-2", None) == 0, "the archive kept the deleted board's scores"
        assert _archived(postgres_url, "global", victim) == 0, "the archive kept the erased player's row"
        where = {"redis_url": redis_server.url, "topic": topic, "kafka": kafka}
        done = _cli("restore", "--all", "--postgres", postgres_url, **where)
        assert done.returncode == 0, done.stderr
        r = redis.Redis.from_url(redis_server.url)
        try:
            assert r.zcard(keys.board_key("board-2")) == 0, "the deleted board came back with every event it had"
            assert victim not in board_totals(r, "global"), "the erased player came back"
            others = {p: v for p, v in totals["global"].items() if p != victim}
            assert board_totals(r, "global") == others, "the erase took more than the player"
        finally:
            r.close()
    finally:
        archiver.cleanup()


def test_restore_while_workers_write_loses_no_event(
    kafka: str,
    topic_factory: Callable[..., str],
    redis_server: RedisServer,
    postgres_url: str,
    spawn: Spawn,
    tmp_path: Path,
) -> None:
    """The archive lags Redis (the archiver is asynchronous; here it stopped after the head). Restore swaps the
    boards in one by one while a worker keeps folding the tail; a board that takes a while (a big one: several
    round trips of 10,000 players) lets the worker, fenced on a board restored before it, resynchronise from a
    checkpoint already past what that board got from the archive, and write on top of it. Every board must
    still end as the sum of all its events."""
    topic = topic_factory(4)
    events = skewed_events(9000, players=300)
    head, mid, tail = events[:2000], events[2000:4000], events[4000:]
    worker = spawn(redis_server.url, topic, "worker")
    archiver = archiver_process(kafka, redis_server.url, postgres_url, topic, f"g-{uuid.uuid4().hex[:8]}", tmp_path)
    try:
        archiver.start()
        worker.wait_ready()
        archiver.wait_ready()
        Feeder(kafka, topic, head, rate=5_000).finish()
        wait_exact(redis_server.url, totals_of(head))
        wait_archived(postgres_url, totals_of(head))
        assert archiver.terminate()[0] == 0
        Feeder(kafka, topic, mid, rate=5_000).finish()
        wait_exact(redis_server.url, totals_of(head + mid))
        feeder = Feeder(kafka, topic, tail, rate=400)  # about 12 s of events while the restore runs
        feeder.start()
        sync = redis.Redis.from_url(redis_server.url)

        def slow_board(done: restore.Restored) -> None:
            """This board's restore took a while: the worker wrote on top of it meanwhile."""
            restored = sync.hgetall(keys.applied_key(done.board))
            deadline = time.monotonic() + 15
            while sync.hgetall(keys.applied_key(done.board)) == restored and time.monotonic() < deadline:
                time.sleep(0.05)

        async def run() -> None:
            async with Archive(postgres_url) as archive:
                client = Redis.from_url(redis_server.url)
                try:
                    await restore.restore(archive, client, topic, None, slow_board)
                finally:
                    await client.aclose()

        try:
            asyncio.run(run())
        finally:
            sync.close()
        feeder.finish()
        expected: Totals = totals_of(events)
        wait_exact(redis_server.url, expected, timeout_s=30)
    finally:
        archiver.cleanup()


async def _archive_checkpoints(url: str, topic: str) -> dict[int, int]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT partition, checkpoint FROM hb_checkpoints WHERE topic = $1", topic)
    except asyncpg.UndefinedTableError:
        return {}  # the archiver has not created its schema yet
    finally:
        await conn.close()
    return {r["partition"]: r["checkpoint"] for r in rows if r["checkpoint"] is not None}


@pytest.mark.parametrize("run", ["swap", "restore", "loss"])
async def test_a_swap_between_a_flush_and_its_checkpoint_move_loses_no_event(
    run: str, kafka: str, topic_factory: Callable[..., str], redis_url: str, postgres_url: str, tmp_path: Path
) -> None:
    """The worker applied a window to the live board and is about to move the checkpoint; the restore swaps in
    the archive's copy of the board, which lacks that window, and "lowers" the checkpoint to the archive's, which
    is the value Redis holds already: the hash does not change. The worker's move (a compare-and-set from the
    value it knows) must still be refused, or the window is gone from the board for good. ``swap``: the board's
    swap script alone (its own lowering); ``restore``: the whole command, lowerings before and after too;
    ``loss``: the worker's own restore (``--on-redis-loss``) on its own sink, which then reads back the halts of the
    partitions it restored for: one that resumed meanwhile (the restore's first lowering wrote its checkpoint, so
    the halt recheck lifted it) is flowing, and that read must not make its held move current."""
    topic = topic_factory(1)
    head, window = worker_events("global", 20, 300), worker_events("global", 20, 200, start=300)
    await publish(kafka, topic, head)
    archiver = archiver_process(kafka, redis_url, postgres_url, topic, f"g-{uuid.uuid4().hex[:8]}", tmp_path)
    try:
        archiver.start()
        archiver.wait_ready()
        deadline = time.monotonic() + 60
        while await _archive_checkpoints(postgres_url, topic) != {0: len(head) - 1}:
            assert time.monotonic() < deadline, "the archive never reached the head's end"
            await asyncio.sleep(0.2)
        assert archiver.terminate()[0] == 0
    finally:
        archiver.cleanup()
    settings = worker_settings(kafka, redis_url, topic, f"g-{topic}")
    async with Worker(settings, handle_signals=False) as worker, Archive(postgres_url) as archive:
        real_advance = worker._sink.advance_checkpoints
        held, release = asyncio.Event(), asyncio.Event()

        async def advance(moves: dict[int, tuple[int, int]]) -> list[CheckpointResult]:
            """The first move past the head (the window's, its batches applied): held while the restore runs."""
            if not held.is_set() and any(new >= len(head) for _, new in moves.values()):
                held.set()
                await release.wait()
            return await real_advance(moves)

        worker._sink.advance_checkpoints = advance  # type: ignore[method-assign]
        task = asyncio.create_task(worker.run())
        client = Redis.from_url(redis_url)
        try:
            await wait_while_running(lambda: checkpoint(redis_url, topic) == len(head) - 1, task, "the head applied")
            assert read_boards(redis_url, ["global"]) == totals_of(head)
            await publish(kafka, topic, window)
            await wait_while_running(held.is_set, task, "the window's checkpoint move")
            assert read_boards(redis_url, ["global"]) == totals_of(head + window), "the window is on the live board"
            if run == "swap":
                assert await restore.restore_board(archive, client, topic, "global", int(time.time() * 1000))
            elif run == "restore":
                await restore.restore(archive, client, topic, None, lambda _: None)
            else:
                restoring = settings.model_copy(update={"postgres": postgres_url})
                await LossRestorer(restoring, client)._restore([0])
            assert checkpoint(redis_url, topic) == len(head) - 1, "the archive's checkpoint: nothing to lower"
            release.set()
            end = len(head) + len(window) - 1
            await wait_while_running(lambda: checkpoint(redis_url, topic) == end, task, "the window's checkpoint")
            assert read_boards(redis_url, ["global"]) == totals_of(head + window), "the window's events were lost"
        finally:
            release.set()
            await client.aclose()
            worker.stop()
            await asyncio.wait_for(task, 30)


async def test_a_partition_the_archive_has_no_checkpoint_for_replays_what_the_restored_board_lacks(
    redis_client: Redis, postgres_url: str
) -> None:
    """The archiver checkpointed partition 0 but not yet partition 1 (it lags, or 1 is new); the live board holds
    both partitions' events. The restored board holds only partition 0's, so Redis's checkpoint of partition 1 must
    come down to what the board holds of it (nothing: -1), or the worker resumes past events no board has."""
    topic = "scores"
    conn = await asyncpg.connect(postgres_url)
    try:
        await schema.migrate(conn)
        await conn.execute("INSERT INTO hb_boards (board, spec, version) VALUES ('global', $1, 3)", DEFAULT.spec)
        await conn.execute("INSERT INTO hb_scores (board, player, score) VALUES ('global', 'a', 10)")
        field0 = keys.watermark_field(topic, 0, 0)
        await conn.execute("INSERT INTO hb_watermarks VALUES ('global', $1, 9)", field0)
        await conn.execute("INSERT INTO hb_checkpoints (topic, partition, checkpoint) VALUES ($1, 0, 9)", topic)
    finally:
        await conn.close()
    field1 = keys.watermark_field(topic, 1, 0)
    await redis_client.zadd(keys.board_key("global"), {"a": 10, "b": 5})
    await redis_client.hset(keys.applied_key("global"), mapping={field0: 9, field1: 9})
    await redis_client.hset(keys.meta_key("global"), mapping={keys.META_VERSION: 3})
    await redis_client.hset(keys.checkpoint_key(topic), mapping={"0": 9, "1": 9})
    async with Archive(postgres_url) as archive:
        await restore.restore(archive, redis_client, topic, None, lambda _: None)
    held = await redis_client.hget(keys.applied_key("global"), field1)
    checkpoint_1 = await redis_client.hget(keys.checkpoint_key(topic), "1")
    assert checkpoint_1 is not None
    assert int(checkpoint_1) <= (-1 if held is None else int(held)), "partition 1's events 0..9 are on no board"
