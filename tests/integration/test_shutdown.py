"""Stopping a worker while a server hangs: SIGTERM with the DLQ unanswered or Redis frozen exits within the
shutdown bound and keeps no checkpoint past work that did not land."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from cli.devstack import RedisServer
from ingest.worker import Worker
from tests.integration.conftest import Spawn
from tests.integration.faults import Raw, send_raw
from tests.integration.harness import (
    Feeder,
    checkpoint,
    skewed_events,
    totals_of,
    wait_exact,
    wait_while_running,
    worker_settings,
)

pytestmark = pytest.mark.integration


class _HangingProducer:
    async def send(self, *a: Any, **kw: Any) -> Any:
        await asyncio.sleep(3600)  # a DLQ whose metadata never comes (leader unavailable, topic missing)


async def test_shutdown_while_the_dlq_hangs_keeps_the_checkpoint_before_unsent_letters(
    kafka: str, topic_factory: Callable[..., str], redis_url: str
) -> None:
    """SIGTERM while send_pending waits on the DLQ: the flush task is cancelled inside send_pending. Its letters
    stay in the outbox, so the drain's flush of the sealed window cannot move the checkpoint past an invalid
    record that never reached the DLQ."""
    topic = topic_factory(1)
    good: list[Raw] = [(f"p{i}".encode(), orjson.dumps({"player": f"p{i}", "delta": 1}), []) for i in range(10)]
    await send_raw(kafka, topic, 0, [*good, (b"k", b"not json", []), *good])  # the poison at offset 10
    settings = worker_settings(kafka, redis_url, topic, f"g-{topic}", shutdown_timeout_s=2.0, dlq_send_timeout_s=30.0)
    async with Worker(settings, handle_signals=False) as worker:
        worker._dead._producer = _HangingProducer()
        task = asyncio.create_task(worker.run())
        try:
            await wait_while_running(
                lambda: (
                    (worker.metrics.registry.get_sample_value("hotboard_dlq_total", {"reason": "not_json"}) or 0) >= 1
                ),
                task,
                "the letter in flight",
            )
            await asyncio.sleep(0.5)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)
    ckpt = checkpoint(redis_url, topic)
    assert ckpt is None or ckpt < 10, f"checkpoint {ckpt} passed offset 10, whose dead letter was never acknowledged"


def test_sigterm_with_pending_work_while_redis_is_frozen_exits_in_time(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    """SIGTERM with events pending (so the drain must talk to Redis) while Redis is frozen (SIGSTOP): the worker
    exits 0 within the shutdown bound, and the next worker makes every board exact."""
    topic = topic_factory(4)
    events = skewed_events(10_000, seed=31)
    worker = spawn(redis_server.url, topic, extra_env={"HOTBOARD_REDIS_TIMEOUT_S": "30"})
    worker.wait_ready()
    feeder = Feeder(kafka, topic, events, rate=3000)
    feeder.start()
    worker.wait_metric("hotboard_windows_total", 2, result="flushed")
    assert redis_server.proc is not None
    redis_server.proc.send_signal(signal.SIGSTOP)
    try:
        folded = worker.metric("hotboard_events_total", result="applied")
        worker.wait_metric("hotboard_events_total", folded + 500, result="applied")  # pending, unflushable
        rc, took = worker.terminate(timeout_s=40)
    finally:
        redis_server.proc.send_signal(signal.SIGCONT)
    assert rc == 0 and took < 10, (rc, took)
    feeder.finish()
    spawn(redis_server.url, topic)
    wait_exact(redis_server.url, totals_of(events), timeout_s=90)
