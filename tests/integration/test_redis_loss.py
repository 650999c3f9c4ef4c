"""A Redis that lost history Kafka no longer holds, with an archive: the worker restores the boards from it and
replays only the tail, exact against totals computed from the topic; where the archive does not reach back far
enough either, the partition stays halted for an operator."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from redis.asyncio import Redis

from archive.archiver import Archiver
from archive.redis_loss import RestoringWorker
from archive.settings import ArchiverSettings
from cli.devstack import RedisServer
from cli.loadgen import publish
from hotboard import keys
from ingest.partitions import HaltReason
from tests.integration.archive_harness import archive_totals
from tests.integration.harness import (
    Totals,
    WorkerProcess,
    checkpoint,
    diff,
    log_starts_at,
    read_boards,
    run_worker,
    sample,
    totals_of,
    wait_for,
    wait_while_running,
    worker_events,
    worker_settings,
)

pytestmark = pytest.mark.integration


async def archive_head(kafka: str, redis_url: str, postgres_url: str, topic: str, expected: Totals) -> None:
    settings = ArchiverSettings(
        kafka=kafka,
        redis=redis_url,
        postgres=postgres_url,
        topic=topic,
        group=f"g-{uuid.uuid4().hex[:8]}",
        window_ms=200,
        metrics_port=0,
        session_timeout_ms=6000,
    )
    async with Archiver(settings, handle_signals=False) as archiver:
        task = asyncio.create_task(archiver.run())
        try:
            await wait_while_running(lambda: archive_totals(postgres_url, expected) == expected, task, "the archive")
        finally:
            archiver.stop()
            await asyncio.wait_for(task, 30)


@pytest.mark.parametrize(("log_start", "restored"), [(250, True), (350, False)])
async def test_a_lost_redis_is_restored_from_the_archive_and_the_tail_replayed(
    kafka: str,
    topic_factory: Callable[..., str],
    redis_server: RedisServer,
    postgres_url: str,
    log_start: int,
    restored: bool,
) -> None:
    """The archive holds offsets 0..299, the log 300..399 besides; Redis is wiped and retention moved the log's
    start to ``log_start``. At 250 the archive covers the gap: restored, then 300..399 replayed once. At 350 it
    does not (300..349 are gone everywhere): the partition halts again and stays halted."""
    topic = topic_factory(1)
    events = worker_events("global", 40, 400)
    head = events[:300]
    await publish(kafka, topic, head)
    settings = worker_settings(kafka, redis_server.url, topic, f"g-{topic}", halt_recheck_s=0.5)
    await run_worker(settings, lambda w: checkpoint(redis_server.url, topic) == 299, "checkpoint 299")
    await archive_head(kafka, redis_server.url, postgres_url, topic, totals_of(head))
    await publish(kafka, topic, events[300:])
    await Redis.from_url(redis_server.url).flushall()  # the volume is lost; retention trimmed the log meanwhile

    restoring = settings.model_copy(update={"postgres": postgres_url})
    async with RestoringWorker(restoring, handle_signals=False) as member:
        worker = member.worker
        await log_starts_at(worker, log_start)
        task = asyncio.create_task(member.run())
        try:
            await wait_while_running(lambda: member.restorer.restores == 1, task, "the restore", timeout_s=90)
            if restored:
                expected = totals_of(events)
                await wait_while_running(
                    lambda: worker.ready and read_boards(redis_server.url, expected) == expected, task, "exact"
                )
                assert sample(worker, "hotboard_events_total", result="applied") == 100, "only the tail replays"
            else:
                await wait_while_running(
                    lambda: [h.reason for h in worker.halted.values()] == [HaltReason.RETENTION_LOST], task, "halt"
                )
                await asyncio.sleep(2.0)  # several halt re-checks: no second restore, still halted
                assert member.restorer.restores == 1 and worker.halted and not worker.ready
                assert read_boards(redis_server.url, ["global"]) == totals_of(head), "the archive's boards, no more"
        finally:
            member.stop()
            await asyncio.wait_for(task, 30)


async def test_a_restore_killed_between_its_swaps_leaves_the_loss_for_the_next_worker(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, postgres_url: str, tmp_path: Path
) -> None:
    """A ``--on-redis-loss restore`` worker is killed -9 between two boards' swaps: board a is back, board b still
    empty. The checkpoint Redis lost must stay unwritten until every board is in, so that the partition stays
    halted and the next worker restores again; a checkpoint written by the first lowering would lift the halt
    and b would get only the tail (its events 0..299 live only in the archive)."""
    topic = topic_factory(1)
    a, b = worker_events("a", 20, 200), worker_events("b", 20, 200)
    events = [e for pair in zip(a, b, strict=True) for e in pair]
    head = events[:300]
    await publish(kafka, topic, head)
    group = f"g-{topic}"
    settings = worker_settings(kafka, redis_server.url, topic, group, halt_recheck_s=0.5)
    await run_worker(settings, lambda w: checkpoint(redis_server.url, topic) == 299, "checkpoint 299")
    await archive_head(kafka, redis_server.url, postgres_url, topic, totals_of(head))
    await publish(kafka, topic, events[300:])
    await Redis.from_url(redis_server.url).flushall()

    paused = tmp_path / "paused"
    victim = WorkerProcess(
        kafka=kafka,
        redis_url=redis_server.url,
        topic=topic,
        group=group,
        log_dir=tmp_path,
        name="restoring",
        module="tests.integration.paused_worker",
        command="",
        extra_env={
            "HOTBOARD_POSTGRES": postgres_url,
            "HOTBOARD_ON_REDIS_LOSS": "restore",
            "HOTBOARD_HALT_RECHECK_S": "0.5",
            "HB_TEST_LOG_START": "250",
            "HB_TEST_PAUSE_SWAP": "b",
            "HB_TEST_PAUSED": str(paused),
        },
    )
    try:
        victim.start()
        wait_for(paused.exists, timeout_s=90, what=f"the restore reaching board b's swap:\n{victim.log()[-2000:]}")
        victim.kill()
    finally:
        victim.cleanup()

    restoring = settings.model_copy(update={"postgres": postgres_url})
    async with RestoringWorker(restoring, handle_signals=False) as member:
        worker = member.worker
        await log_starts_at(worker, 250)
        task = asyncio.create_task(member.run())
        try:
            await wait_while_running(
                lambda: worker.ready and checkpoint(redis_server.url, topic) == 399, task, "the tail applied", 90
            )
            expected = totals_of(events)
            actual = read_boards(redis_server.url, expected)
            assert actual == expected, diff(expected, actual)
            assert member.restorer.restores == 1, "the next worker restored what the killed one left undone"
        finally:
            member.stop()
            await asyncio.wait_for(task, 30)


async def test_a_retention_lost_partition_resumes_from_an_archive_ahead_of_its_checkpoint(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, postgres_url: str
) -> None:
    """Redis kept its boards and its checkpoint 99, but retention deleted offsets up to 249 before the worker
    applied them (it was down); the archiver, a consumer of its own, applied 0..299 in time. The partition halts
    ``retention_lost`` at 99. The restore swaps every board in as of 299 and must raise the checkpoint to 299
    (every board holds everything up to it): the halt lifts, 300..399 replay once, and every board is exact.
    Left at 99, the partition would halt again at the next look and stay halted for good."""
    topic = topic_factory(1)
    a, b = worker_events("a", 20, 200), worker_events("b", 20, 200)
    events = [e for pair in zip(a, b, strict=True) for e in pair]
    await publish(kafka, topic, events[:100])
    settings = worker_settings(kafka, redis_server.url, topic, f"g-{topic}", halt_recheck_s=0.5)
    await run_worker(settings, lambda w: checkpoint(redis_server.url, topic) == 99, "checkpoint 99")
    await publish(kafka, topic, events[100:300])
    await archive_head(kafka, redis_server.url, postgres_url, topic, totals_of(events[:300]))
    await publish(kafka, topic, events[300:])

    restoring = settings.model_copy(update={"postgres": postgres_url})
    async with RestoringWorker(restoring, handle_signals=False) as member:
        worker = member.worker
        await log_starts_at(worker, 250)  # 100..249 are gone from the log: only the archive holds them
        task = asyncio.create_task(member.run())
        try:
            await wait_while_running(lambda: member.restorer.restores == 1, task, "the restore", timeout_s=90)
            raised = checkpoint(redis_server.url, topic)
            assert raised is not None and raised >= 299, f"checkpoint {raised}: the halt at 99 stays for good"
            expected = totals_of(events)
            await wait_while_running(
                lambda: worker.ready and checkpoint(redis_server.url, topic) == 399, task, "the tail applied"
            )
            actual = read_boards(redis_server.url, expected)
            assert actual == expected, diff(expected, actual)
            assert not worker.halted and sample(worker, "hotboard_events_total", result="applied") == 100
            halt = await Redis.from_url(redis_server.url).hget(keys.checkpoint_key(topic), keys.halt_field(0))
            assert halt is None, "the halt was lifted"
        finally:
            member.stop()
            await asyncio.wait_for(task, 30)
