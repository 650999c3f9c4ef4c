"""Halted partitions: a halt holds until an operator acts, and every remedy docs/guarantees.md and docs/runbooks.md give
works as an operator runs it (redis-cli on the live system, the worker running), with the boards checked
against totals computed from the log itself."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from aiokafka import TopicPartition
from aiokafka.errors import OffsetOutOfRangeError
from redis.asyncio import Redis

from cli.devstack import RedisServer
from cli.loadgen import publish
from hotboard import keys
from hotboard.codec import Event
from ingest.partitions import HaltReason
from ingest.settings import WorkerSettings
from ingest.worker import Worker
from tests.integration.conftest import Spawn
from tests.integration.harness import (
    Feeder,
    checkpoint,
    log_starts_at,
    read_boards,
    run_worker,
    totals_of,
    wait_exact,
    wait_for,
    wait_while_running,
    worker_events,
    worker_settings,
)

pytestmark = pytest.mark.integration


def _halt_field(url: str, topic: str, partition: int = 0) -> bytes | None:
    value = redis.Redis.from_url(url).hget(keys.checkpoint_key(topic), f"{partition}:halt")
    return value if isinstance(value, bytes) else None


async def test_a_halt_with_pending_work_does_not_lift_itself(
    kafka: str, topic_factory: Callable[..., str], redis_url: str
) -> None:
    """The broker answers "out of range" (a re-created, shorter log) right after a fetch was folded: the halt is
    decided while that fetch's window is pending. Its flush must not move the checkpoint the halt is tied to,
    or the next recheck reads "an operator wrote the checkpoint" and resumes by itself."""
    topic = topic_factory(1)
    await publish(kafka, topic, worker_events("global", 5, 50))
    settings = worker_settings(kafka, redis_url, topic, f"g-{topic}", window_ms=1000, halt_recheck_s=0.3)
    positionings: list[int] = []
    async with Worker(settings, handle_signals=False) as worker:
        real_getmany, real_positions = worker._consumer.getmany, worker._sink.load_positions
        folded: list[bool] = []

        async def getmany(*tps: TopicPartition, **kw: Any) -> Any:
            if folded == [True]:
                folded.append(False)
                raise OffsetOutOfRangeError({TopicPartition(topic, 0): 50})
            batch = await real_getmany(*tps, **kw)
            if batch and not folded:
                folded.append(True)
            return batch

        async def load_positions(partitions: Any) -> Any:
            positionings.append(len(positionings))
            return await real_positions(partitions)

        worker._consumer.getmany = getmany
        worker._sink.load_positions = load_positions  # type: ignore[method-assign]
        task = asyncio.create_task(worker.run())
        try:
            await wait_while_running(lambda: bool(worker.halted), task, "the halt")
            assert worker.pending_entries > 0, "the halt must be decided while its partition has pending work"
            await wait_while_running(lambda: worker.pending_entries == 0, task, "the pending window flushed or dropped")
            seen = len(positionings)
            await wait_while_running(lambda: len(positionings) >= seen + 3 or not worker.halted, task, "three rechecks")
            assert worker.halted, "the halt lifted itself: nobody wrote the checkpoint"
            assert [h.reason for h in worker.halted.values()] == [HaltReason.BEYOND_LOG_END]
            assert _halt_field(redis_url, topic) is not None
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)


def _redis_cli(server: RedisServer, *args: str) -> str:
    """What the operator types (docs/guarantees.md, "Fault model"; docs/runbooks.md, "HotboardRedisDataLoss")."""
    done = subprocess.run(["redis-cli", "-p", str(server.port), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _recreated_topic(url: str, topic: str, old: dict[str, int]) -> None:
    """A topic deleted and re-created under the same name (the embedded broker cannot delete topics): Redis
    still holds the old log's checkpoint 1000 and a board the old log fed, watermark 1000 and ``old`` totals."""
    r = redis.Redis.from_url(url)
    r.hset(keys.checkpoint_key(topic), "0", 1000)
    r.hset(keys.applied_key("global"), keys.watermark_field(topic, 0), 1000)
    r.zadd(keys.board_key("global"), old)
    r.zadd(keys.BOARD_INDEX_KEY, {"global": 0})


@pytest.mark.parametrize("remedy", ["replay_from_start", "accept_loss_up_to_49"])
def test_lifting_a_log_end_halt_counts_the_new_log(
    remedy: str, kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    """The new log's events are counted once each after the operator's remedy; before, every board kept its
    watermark from the old log and the new log's events up to it were skipped as duplicates (/readyz green)."""
    topic = topic_factory(1)
    old = {"veteran": 7, "global-p0": 3}
    _recreated_topic(redis_server.url, topic, old)
    first = worker_events("global", 5, 100)
    Feeder(kafka, topic, first, rate=0).finish()
    worker = spawn(redis_server.url, topic, extra_env={"HOTBOARD_HALT_RECHECK_S": "0.5"})
    worker.wait_metric("hotboard_redis_data_loss", 1)
    later = worker_events("global", 5, 1000, start=100)
    Feeder(kafka, topic, later, rate=0).finish()  # the new log grows past the old checkpoint: the halt holds
    new_log = first + later
    if remedy == "replay_from_start":
        assert _redis_cli(redis_server, "HDEL", keys.checkpoint_key(topic), "0") == "1"
        counted = new_log
    else:
        assert _redis_cli(redis_server, "HSET", keys.checkpoint_key(topic), "0", "49") == "0"
        counted = new_log[50:]
    expected = totals_of([Event("global", p, s, None) for p, s in old.items()] + counted)
    wait_exact(redis_server.url, expected, timeout_s=60)
    wait_for(lambda: worker.status("/readyz") == 200, timeout_s=30, what="/readyz green after the remedy")
    assert worker.metric("hotboard_redis_data_loss") == 0
    assert _halt_field(redis_server.url, topic) is None


@contextlib.asynccontextmanager
async def _trimmed_worker(settings: WorkerSettings, log_start: int) -> AsyncIterator[tuple[Worker, asyncio.Task[None]]]:
    """An in-process worker told the log starts at ``log_start`` (retention, simulated), running until the end."""
    async with Worker(settings, handle_signals=False) as worker:
        await log_starts_at(worker, log_start)
        task = asyncio.create_task(worker.run())
        try:
            yield worker, task
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)


async def _until_exact(worker: Worker, task: asyncio.Task[None], url: str, expected: dict[str, dict[str, int]]) -> None:
    def done() -> bool:
        return worker.ready and read_boards(url, expected) == expected

    await wait_while_running(done, task, "exact totals and /readyz green after the remedy")


async def test_accepting_a_retention_loss_by_hset_resumes_after_it_exactly(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer
) -> None:
    """Retention deleted offsets 100..149 before they were applied (the log now starts at 150): halted. The
    operator accepts the loss with ``HSET hb:ckpt:{T} 0 149``; the worker resumes at 150, exact."""
    topic = topic_factory(1)
    events = worker_events("global", 7, 200)
    await publish(kafka, topic, events[:100])
    settings = worker_settings(kafka, redis_server.url, topic, f"g-{topic}", halt_recheck_s=0.5)
    await run_worker(settings, lambda w: checkpoint(redis_server.url, topic) == 99, "checkpoint 99")
    await publish(kafka, topic, events[100:])
    async with _trimmed_worker(settings, 150) as (worker, task):
        await wait_while_running(lambda: bool(worker.halted), task, "the halt")
        assert [h.reason for h in worker.halted.values()] == [HaltReason.RETENTION_LOST]
        await asyncio.to_thread(_redis_cli, redis_server, "HSET", keys.checkpoint_key(topic), "0", "149")
        await _until_exact(worker, task, redis_server.url, totals_of(events[:100] + events[150:]))
    assert _halt_field(redis_server.url, topic) is None


async def test_restoring_redis_from_a_backup_lifts_a_redis_lost_halt_exactly(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, tmp_path: Path
) -> None:
    """Redis comes back empty while the log no longer starts at 0: halted (``redis_lost``). The operator
    restores last night's snapshot (``redis-cli --rdb``, then Redis restarted on it) while the worker runs:
    it resumes after the snapshot's checkpoint, and the events since count once."""
    topic = topic_factory(1)
    events = worker_events("global", 7, 250)
    await publish(kafka, topic, events[:200])
    settings = worker_settings(kafka, redis_server.url, topic, f"g-{topic}", halt_recheck_s=0.5)
    await run_worker(settings, lambda w: checkpoint(redis_server.url, topic) == 199, "checkpoint 199")
    backup = tmp_path / "backup"
    backup.mkdir()
    await asyncio.to_thread(_redis_cli, redis_server, "--rdb", str(backup / "dump.rdb"))
    await publish(kafka, topic, events[200:])
    await Redis.from_url(redis_server.url).flushall()  # the volume is lost; retention trimmed the log meanwhile
    async with _trimmed_worker(settings, 60) as (worker, task):
        await wait_while_running(lambda: bool(worker.halted), task, "the halt")
        assert [h.reason for h in worker.halted.values()] == [HaltReason.REDIS_LOST]

        def restore() -> None:
            redis_server.stop()
            redis_server.data_dir, redis_server.appendonly = backup, False
            redis_server.start()

        await asyncio.to_thread(restore)
        await _until_exact(worker, task, redis_server.url, totals_of(events))


async def test_a_log_end_halt_holds_when_the_new_log_grows_past_the_checkpoint(
    kafka: str, topic_factory: Callable[..., str], redis_url: str
) -> None:
    """Topic re-created: Redis holds checkpoint 1000, so the worker halts. Producers keep writing; once the new
    log passes offset 1000 the periodic recheck must not reposition at 1001 (skipping records 0..1000): the halt
    holds until an operator lifts it."""
    topic = topic_factory(1)
    r = redis.Redis.from_url(redis_url)
    r.hset(keys.checkpoint_key(topic), "0", 1000)
    r.hset(keys.applied_key("global"), keys.watermark_field(topic, 0), 1000)
    r.zadd(keys.BOARD_INDEX_KEY, {"global": 0})
    first = [Event("global", f"p{i % 5}", 1, None) for i in range(100)]
    await publish(kafka, topic, first)
    settings = worker_settings(kafka, redis_url, topic, f"g-{topic}", halt_recheck_s=1.0)
    later = [Event("global", f"p{i % 5}", 1, None) for i in range(1000)]
    lifted: list[float] = []
    async with Worker(settings, handle_signals=False) as worker:
        task = asyncio.create_task(worker.run())
        try:
            await wait_while_running(lambda: bool(worker.halted), task, "the halt")
            await publish(kafka, topic, later)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not task.done():
                if not worker.halted and read_boards(redis_url, ["global"])["global"]:
                    lifted.append(time.monotonic())
                    break
                await asyncio.sleep(0.1)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)
    got = read_boards(redis_url, ["global"])["global"]
    assert not lifted and not got, f"halt lifted by itself; boards now hold {sum(got.values())} of 1100 events"
