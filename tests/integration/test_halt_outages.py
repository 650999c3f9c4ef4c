"""An undecodable batch halts its partition with the records before it still pending while Redis is away: the
halt holds their work (it is applied, without moving the checkpoint, once Redis answers) and the documented
remedies then come out exact."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable

import aiokafka.codec
import orjson
import pytest
import redis

from cli.devstack import RedisServer
from hotboard import keys
from hotboard.codec import Event
from ingest.partitions import HaltReason
from ingest.worker import Worker
from tests.integration.faults import Raw, TcpProxy, send_raw
from tests.integration.harness import (
    produce,
    read_boards,
    sample,
    totals_of,
    wait_exact,
    wait_while_running,
    worker_settings,
)

pytestmark = pytest.mark.integration


async def test_records_before_an_undecodable_batch_survive_a_redis_outage_past_the_halt_recheck(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer
) -> None:
    """Partition 0: ten events flushed; Redis cut off; ten more events, then an lz4 batch whose bytes are
    damaged. The worker folds the ten, halts at the batch (unreadable), and cannot flush. Positioning the halted
    partition again at its re-check dropped the ten as "work pending from before its halt", though its
    checkpoint had not moved and nothing else brings them back once the operator skips the batch (the
    runbook's remedy: ``HSET`` the checkpoint to the batch's last offset, "the records before it are
    applied"). Redis heals, the halt is recorded, the operator skips the batch: every event but the batch's
    must be on the board."""
    topic = topic_factory(1)
    first = [Event("global", f"r{i}", 3, None) for i in range(10)]
    second = [Event("global", f"s{i}", 5, None) for i in range(10)]
    admin = redis.Redis(port=redis_server.port)

    def ckpt(field: str) -> bytes | str | None:
        return admin.hget(keys.checkpoint_key(topic), field)

    with TcpProxy(redis_server.port) as proxy:
        settings = worker_settings(kafka, proxy.url, topic, f"g-{topic}", halt_recheck_s=0.5, backoff_max_s=0.5)
        async with Worker(settings, handle_signals=False) as worker:
            task = asyncio.create_task(worker.run())
            try:
                await asyncio.to_thread(produce, kafka, topic, first, "none", 0)
                await wait_while_running(lambda: ckpt("0") == b"9", task, "first flushed")
                proxy.cut()
                await asyncio.to_thread(produce, kafka, topic, second, "none", 0)
                bad: list[Raw] = [(b"x", orjson.dumps({"player": "x", "delta": 1}), []) for _ in range(50)]
                await send_raw(kafka, topic, 0, bad, compression_type="lz4", flip_payload=True)
                await wait_while_running(lambda: 0 in worker.halted, task, "partition 0 halted while Redis is cut off")
                assert worker.halted[0].reason is HaltReason.UNREADABLE
                assert "offset 20 " in worker.halted[0].detail
                await wait_while_running(lambda: worker.failed_flushes > 0, task, "a flush of the ten failed")
                heal_at = time.monotonic() + 4 * settings.halt_recheck_s  # the outage outlasts the re-check
                await wait_while_running(lambda: time.monotonic() >= heal_at, task, "the outage's end")
                proxy.restore()
                halt = keys.halt_field(0)
                await wait_while_running(lambda: ckpt(halt) is not None, task, "halt recorded")
                assert admin.hget(keys.checkpoint_key(topic), halt) == b"unreadable 9"
                admin.hset(keys.checkpoint_key(topic), "0", "69")  # the runbook: skip the batch (offsets 20-69)
                after = [Event("global", f"t{i}", 7, None) for i in range(10)]
                await asyncio.to_thread(produce, kafka, topic, after, "none", 0)
                await wait_while_running(lambda: ckpt("0") == b"79", task, "after flushed")
                assert read_boards(proxy.url, ["global"]) == totals_of(first + second + after)
            finally:
                worker.stop()
                await asyncio.wait_for(task, 30)
                admin.close()


async def test_retrying_an_unreadable_batch_after_fixing_the_image_counts_it_once(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/runbooks.md, HotboardRedisDataLoss, reason ``unreadable``, as an operator runs it: a worker whose
    image lacks the snappy library halts partition 0 at a snappy batch (partition 1 flows on); the image is
    fixed and the worker restarted, which keeps the partition halted; ``redis-cli HDEL hb:ckpt:{T} 0:halt``
    retries the batch. Every board then equals the totals of everything produced, the batch's events once."""
    topic = topic_factory(2)
    boards = ["global", "b-1", "b-2"]

    def events(tag: str, count: int) -> list[Event]:
        return [Event(boards[i % 3], f"{tag}{i % 17}", 1 + i % 7, None) for i in range(count)]

    before, batch, after, other = events("r", 10), events("s", 200), events("t", 30), events("q", 300)
    await asyncio.to_thread(produce, kafka, topic, before, "none", 0)
    await asyncio.to_thread(produce, kafka, topic, batch, "snappy", 0)  # librdkafka has its own snappy
    await asyncio.to_thread(produce, kafka, topic, other, "none", 1)
    ckpt_key, halt = keys.checkpoint_key(topic), keys.halt_field(0)
    admin = redis.Redis(port=redis_server.port)
    settings = worker_settings(kafka, redis_server.url, topic, f"g-{topic}", halt_recheck_s=0.5)
    try:
        monkeypatch.setattr(aiokafka.codec, "cramjam", None)  # the broken image: no codec library
        async with Worker(settings, handle_signals=False) as worker:
            task = asyncio.create_task(worker.run())
            try:
                await wait_while_running(lambda: admin.hget(ckpt_key, halt) is not None, task, "the halt recorded")
                assert worker.halted[0].reason is HaltReason.UNREADABLE and "offset 10 " in worker.halted[0].detail
                # at the checkpoint Redis held then: -1 (none) if the ten before it were not flushed yet
                assert admin.hget(ckpt_key, halt) in (b"unreadable -1", b"unreadable 9") and not worker.ready
                assert sample(worker, "hotboard_redis_data_loss") == 1
            finally:
                worker.stop()
                await asyncio.wait_for(task, 30)
        monkeypatch.undo()  # the image fixed: the codec library is back
        async with Worker(settings, handle_signals=False) as worker:
            task = asyncio.create_task(worker.run())
            try:
                await wait_while_running(lambda: 0 in worker.halted, task, "the recorded halt held after the restart")
                await asyncio.to_thread(produce, kafka, topic, after, "none", 0)
                hdel = ["redis-cli", "-p", str(redis_server.port), "HDEL", ckpt_key, halt]  # what the runbook says
                done = await asyncio.to_thread(subprocess.run, hdel, capture_output=True, text=True, check=True)
                assert done.stdout.strip() == "1"
                await wait_while_running(lambda: worker.ready, task, "the partition resumed")
                expected = totals_of(before + batch + after + other)
                await asyncio.to_thread(wait_exact, redis_server.url, expected, 60.0)
                assert not worker.halted and sample(worker, "hotboard_redis_data_loss") == 0
                assert admin.hget(ckpt_key, halt) is None
                last = str(len(before + batch + after) - 1).encode()
                await wait_while_running(lambda: admin.hget(ckpt_key, "0") == last, task, "the checkpoint past it all")
            finally:
                worker.stop()
                await asyncio.wait_for(task, 30)
    finally:
        admin.close()
