"""A Redis that lost history Kafka no longer holds, with an archive: the worker restores the boards from it and
replays only the tail, exact against totals computed from the topic; where the archive does not reach back far
enough either, the partition stays halted for an operator."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest
from redis.asyncio import Redis

from archive.archiver import Archiver
from archive.redis_loss import RestoringWorker
from archive.settings import ArchiverSettings
from cli.devstack import RedisServer
from cli.loadgen import publish
from ingest.partitions import HaltReason
from tests.integration.archive_harness import archive_totals
from tests.integration.harness import (
    Totals,
    checkpoint,
    log_starts_at,
    read_boards,
    run_worker,
    sample,
    totals_of,
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
