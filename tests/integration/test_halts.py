"""Halted partitions: a halt holds until an operator acts, and every remedy README and docs/runbooks.md give
works as an operator runs it (redis-cli on the live system, the worker running), with the boards checked
against totals computed from the log itself."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import redis
from aiokafka import TopicPartition
from aiokafka.errors import OffsetOutOfRangeError

from hotboard import keys
from hotboard.loadgen import publish
from ingest.partitions import HaltReason
from ingest.worker import Worker
from tests.integration.test_faults import _events, _settings, _until

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
    await publish(kafka, topic, _events("global", 5, 50))
    settings = _settings(kafka, redis_url, topic, f"g-{topic}", window_ms=1000, halt_recheck_s=0.3)
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
            await _until(lambda: bool(worker.halted), task, "the halt")
            assert worker.pending_entries > 0, "the halt must be decided while its partition has pending work"
            await _until(lambda: worker.pending_entries == 0, task, "the pending window flushed or dropped")
            seen = len(positionings)
            await _until(lambda: len(positionings) >= seen + 3 or not worker.halted, task, "three rechecks")
            assert worker.halted, "the halt lifted itself: nobody wrote the checkpoint"
            assert [h.reason for h in worker.halted.values()] == [HaltReason.BEYOND_LOG_END]
            assert _halt_field(redis_url, topic) is not None
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)
