"""Redis failing while the intake waits on a watermark lookup: a rebalance takes the partition meanwhile, or
SIGTERM arrives. Neither may crash the worker, stretch its shutdown past the documented bound, or cost an
event."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from hotboard.codec import encode
from hotboard.devstack import RedisServer
from ingest.worker import Worker
from tests.integration.faults import TcpProxy, send_raw
from tests.integration.harness import read_boards, totals_of
from tests.integration.test_faults import _events, _sample, _settings, _until

pytestmark = pytest.mark.integration


async def test_a_lookup_failing_after_a_rebalance_took_its_partition_does_not_crash(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer
) -> None:
    """The worker folds partition 0 and looks its boards' watermarks up; a second member joins and takes
    partition 0 (round-robin over sorted member ids: its client id sorts first) while the lookup waits; then
    Redis is cut and the lookup fails. The retry used to seek the partition it no longer holds, and the
    consumer's IllegalStateError ended the worker."""
    topic = topic_factory(2)
    group = f"g-{topic}"
    events = _events("fresh", 7, 60)
    with TcpProxy(redis_server.port) as proxy:
        settings = _settings(kafka, proxy.url, topic, group, backoff_max_s=0.5)
        joiner = AIOKafkaConsumer(
            topic, bootstrap_servers=kafka, group_id=group, client_id="0-joiner", session_timeout_ms=6000,
            enable_auto_commit=False, auto_offset_reset="earliest",
        )  # fmt: skip
        failed: list[int] = []
        async with Worker(settings, handle_signals=False) as worker:
            real = worker._sink.load_watermarks

            async def load(partition: int, boards: Any) -> Any:
                if not failed:
                    failed.append(partition)
                    await joiner.start()
                    # the rebalance is the joiner's and the worker's own state to poll, no event to wait on
                    while not joiner.assignment() or _sample(worker, "hotboard_rebalances_total") < 2:  # noqa: ASYNC110
                        await asyncio.sleep(0.05)
                    assert TopicPartition(topic, partition) in joiner.assignment(), "the joiner must take it"
                    proxy.cut()
                return await real(partition, boards)

            worker._sink.load_watermarks = load  # type: ignore[method-assign]
            task = asyncio.create_task(worker.run())
            try:
                await _until(lambda: worker.ready, task, "positioned")
                await send_raw(kafka, topic, 0, [(e.player.encode(), encode(e), []) for e in events])
                await _until(lambda: worker._backoff.failures > 0, task, "the lookup to fail")
                proxy.restore()
                await joiner.stop()  # partition 0 comes back
                await _until(lambda: read_boards(proxy.url, ["fresh"]) == totals_of(events), task, "exact totals")
            finally:
                worker.stop()
                await asyncio.wait_for(task, 30)
                await joiner.stop()
