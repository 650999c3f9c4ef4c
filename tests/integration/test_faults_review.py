"""Faults an adversarial review found past the first round of fixes: each test failed on the code before its fix.
(The fault model and the first-round tests are in test_faults.py.)"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
import redis
from redis.asyncio import Redis

from hotboard import keys
from hotboard.codec import Event
from hotboard.devstack import RedisServer
from hotboard.loadgen import publish
from ingest.worker import Worker
from tests.integration.conftest import Spawn
from tests.integration.faults import TcpProxy, send_raw
from tests.integration.harness import (
    Feeder,
    checkpoint,
    read_boards,
    run_worker,
    skewed_events,
    totals_of,
    wait_exact,
    wait_while_running,
    worker_settings,
)

pytestmark = pytest.mark.integration

Raw = tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]


async def test_flushall_does_not_lose_a_board_not_looked_up_since_positioning(
    kafka: str, topic_factory: Callable[..., str], redis_url: str
) -> None:
    """quiet@0, busy@1..100 applied; the worker restarts (watermarks are looked up lazily: none known);
    FLUSHALL; quiet@101. The lookup answers 'no watermark' from the emptied Redis, quiet's batch applies
    (expected -1 == stored -1) and writes watermark 101 BEFORE the checkpoint CAS notices the loss; the
    replay from 0 then skips quiet@0 under that watermark."""
    topic = topic_factory(1)
    events = [Event("quiet", "q", 5, None)] + [Event("busy", f"b{i % 7}", 1, None) for i in range(100)]
    await publish(kafka, topic, events)
    group = f"g-{topic}"
    settings = worker_settings(kafka, redis_url, topic, group)
    await run_worker(settings, lambda w: checkpoint(redis_url, topic) == 100, "checkpoint 100")
    more = [Event("quiet", "q", 7, None)]
    async with Worker(settings, handle_signals=False) as worker:
        task = asyncio.create_task(worker.run())
        try:
            await wait_while_running(
                lambda: worker.ready and worker._assignment.parts[0].checkpoint == 100, task, "positioned"
            )
            await Redis.from_url(redis_url).flushall()
            await publish(kafka, topic, more)
            await wait_while_running(
                lambda: checkpoint(redis_url, topic) == 101, task, "checkpoint 101 after the replay"
            )
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)
    got = read_boards(redis_url, ["quiet", "busy"])
    assert got == totals_of(events + more), got


async def test_a_log_end_halt_holds_when_the_new_log_grows_past_the_checkpoint(
    kafka: str, topic_factory: Callable[..., str], redis_url: str
) -> None:
    """Topic re-created: Redis holds checkpoint 1000. The worker halts (good); producers keep writing; once the
    new log passes offset 1000 the periodic recheck repositions at 1001 and records 0..1000 are skipped."""
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


class _HangingProducer:
    async def send(self, *a: Any, **kw: Any) -> Any:
        await asyncio.sleep(3600)  # a DLQ whose metadata never comes (leader unavailable, topic missing)


async def test_shutdown_while_the_dlq_hangs_keeps_the_checkpoint_before_unsent_letters(
    kafka: str, topic_factory: Callable[..., str], redis_url: str
) -> None:
    """SIGTERM while send_pending waits on the DLQ: _stop_flusher cancels the flush task inside send_pending,
    whose outbox was swapped out and is not restored on cancellation; the drain then flushes the sealed window
    and moves the checkpoint past the invalid record that never reached the DLQ."""
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


@pytest.mark.parametrize("joiner", ["same_topic", "other_topic"])
def test_a_rebalance_right_after_redis_heals_during_the_backoff(
    joiner: str, kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    """Heal a cut while the worker sleeps in a long backoff, then rebalance: ``on_revoked``'s flush succeeds.
    The code before flushed only the sealed window and kept the active one; when the same partitions come back
    (``other_topic``: a member of the same group on another topic joins, so the worker keeps every partition),
    they are fetched and folded again and no revoked partition fences the flush: counted twice."""
    topic = topic_factory(8)
    events = skewed_events(30_000, seed=23)
    with TcpProxy(redis_server.port) as proxy:
        first = spawn(proxy.url, topic, "first", extra_env={"HOTBOARD_BACKOFF_MAX_S": "20"})
        first.wait_ready()
        feeder = Feeder(kafka, topic, events, rate=2500)
        feeder.start()
        first.wait_metric("hotboard_windows_total", 2, result="flushed")
        proxy.cut()
        first.wait_metric("hotboard_windows_total", 8, result="failed", timeout_s=90)  # next backoff: 10-20 s
        proxy.restore()
        second = spawn(redis_server.url, topic if joiner == "same_topic" else topic_factory(1), "second")
        if joiner == "same_topic":
            second.wait_ready()
        first.wait_metric("hotboard_rebalances_total", 2)
        feeder.finish()
        wait_exact(redis_server.url, totals_of(events), timeout_s=90)


def test_sigterm_with_pending_work_while_redis_is_frozen_exits_in_time(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    """Task A variant of the SIGTERM test: make sure events are pending (so the drain must talk to the frozen
    Redis) before SIGTERM; the original can find nothing pending and pass on the old code."""
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


async def test_a_redis_blip_while_reading_past_an_unreadable_record_loses_nothing(
    kafka: str, topic_factory: Callable[..., str], redis_url: str
) -> None:
    """_skip_unreadable folds the walked records; if the watermark lookup inside that fold fails, _fold_partition
    seeks back to next_offset and returns, and _skip_unreadable then dead-letters position(tp) == next_offset
    -- a valid event -- as 'unreadable' and moves past it."""
    topic = topic_factory(1)
    good: list[Raw] = [(f"p{i}".encode(), orjson.dumps({"player": f"p{i}", "delta": 1}), []) for i in range(5)]
    bad = (b"k", b'{"player":"p","delta":1}', [("XX", b"v")])
    await send_raw(kafka, topic, 0, [*good, bad, *good], patch=(b"XX", b"\xff\xfe"))  # unreadable at offset 5
    settings = worker_settings(kafka, redis_url, topic, f"g-{topic}")
    failed: list[bool] = []

    async def blip_once(worker: Worker) -> None:
        real = worker._sink.load_watermarks

        async def load(partition: int, boards: Any) -> Any:
            if not failed:
                failed.append(True)
                raise ConnectionError("injected: one Redis blip")
            return await real(partition, boards)

        worker._sink.load_watermarks = load  # type: ignore[method-assign]

    await run_worker(settings, lambda w: checkpoint(redis_url, topic) == 10, "checkpoint 10", blip_once)
    got = read_boards(redis_url, ["global"])["global"]
    assert got == {f"p{i}": 2 for i in range(5)}, got


async def test_valid_records_after_an_unreadable_one_in_the_same_batch_are_folded(
    kafka: str, topic_factory: Callable[..., str], redis_url: str
) -> None:
    """One producer batch: 5 good, one header name that is not UTF-8, 5 good. Fetching from offset 6 returns the
    same batch (it starts at 0); the client parses past offset 5 again and raises, and _skip_unreadable
    dead-letters position(tp) -- a valid record -- each time: every record after the poison in its batch goes."""
    topic = topic_factory(1)
    good: list[Raw] = [(f"p{i}".encode(), orjson.dumps({"player": f"p{i}", "delta": 1}), []) for i in range(5)]
    bad = (b"k", b'{"player":"p","delta":1}', [("XX", b"v")])
    await send_raw(kafka, topic, 0, [*good, bad, *good], patch=(b"XX", b"\xff\xfe"))  # unreadable at offset 5
    settings = worker_settings(kafka, redis_url, topic, f"g-{topic}")
    await run_worker(settings, lambda w: checkpoint(redis_url, topic) == 10, "checkpoint 10")
    got = read_boards(redis_url, ["global"])["global"]
    assert got == {f"p{i}": 2 for i in range(5)}, got
