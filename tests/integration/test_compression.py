"""Compressed producers: a librdkafka producer (confluent-kafka, what most game servers run) with every
compression codec comes out exact, and a batch the Kafka client cannot decode halts its partition only."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiokafka.codec
import orjson
import pytest

from hotboard.codec import Event
from ingest.partitions import HaltReason
from ingest.worker import Worker
from tests.integration.faults import Raw, send_raw
from tests.integration.harness import produce, read_boards, totals_of, wait_exact, wait_while_running, worker_settings

pytestmark = pytest.mark.integration

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def events_for(codec: str, count: int) -> list[Event]:
    return [Event(f"b-{codec}" if i % 3 else "global", f"p{i % 97}", i % 11 - 2, None) for i in range(count)]


def test_a_librdkafka_producer_with_every_codec_comes_out_exact(
    kafka: str, topic_factory: Callable[..., str], redis_url: str, spawn: Callable[..., object]
) -> None:
    topic = topic_factory(4)
    events: list[Event] = []
    for codec in CODECS:
        batch = events_for(codec, 1500)
        produce(kafka, topic, batch, codec)
        events += batch
    spawn(redis_url, topic)
    wait_exact(redis_url, totals_of(events), timeout_s=90)


@pytest.mark.parametrize("fault", ["missing codec", "corrupt batch"])
async def test_a_batch_the_client_cannot_decode_halts_only_its_partition(
    kafka: str, topic_factory: Callable[..., str], redis_url: str, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    """Partition 0 gets ten plain events, then a batch the client cannot decode (snappy without its codec
    library, or an lz4 batch whose compressed bytes are damaged); partition 1 plain events, before and after.
    The worker stays up, partition 0 halts as unreadable at offset 10 (its first ten events applied, nothing
    of the batch guessed), partition 1 comes out exact."""
    topic = topic_factory(2)
    before = [Event("global", f"r{i}", 3, None) for i in range(10)]
    await asyncio.to_thread(produce, kafka, topic, before, "none", 0)
    if fault == "missing codec":
        monkeypatch.setattr(aiokafka.codec, "cramjam", None)  # what an install without the codec extra has
        await asyncio.to_thread(produce, kafka, topic, events_for("x", 200), "snappy", 0)
    else:
        good: list[Raw] = [(f"p{i}".encode(), orjson.dumps({"player": f"p{i}", "delta": 1}), []) for i in range(200)]
        await send_raw(kafka, topic, 0, good, compression_type="lz4", flip_payload=True)
    first = [Event("global", f"q{i % 13}", 1 + i % 5, None) for i in range(300)]
    await asyncio.to_thread(produce, kafka, topic, first, "none", 1)
    settings = worker_settings(kafka, redis_url, topic, f"g-{topic}")
    async with Worker(settings, handle_signals=False) as worker:
        task = asyncio.create_task(worker.run())
        try:
            await wait_while_running(lambda: 0 in worker.halted, task, "partition 0 halted")
            halt = worker.halted[0]
            assert halt.reason is HaltReason.UNREADABLE
            assert "offset 10 " in halt.detail and ("snappy" in halt.detail or fault != "missing codec"), halt
            more = [Event("global", f"q{i % 7}", 2, None) for i in range(100)]
            await asyncio.to_thread(produce, kafka, topic, more, "none", 1)
            expected = totals_of(before + first + more)
            await wait_while_running(lambda: read_boards(redis_url, ["global"]) == expected, task, "partition 1 exact")
            assert not task.done() and worker.alive
            assert set(worker.halted) == {0} and not worker.ready
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)
