"""Committed reads only: what a producer's aborted transaction wrote never counts, its committed transactions
do, and neither the aborted batches nor the control batches that end transactions stall or poison a partition,
whatever the batches' codecs and however transactions interleave with plain batches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from cli.devstack import create_topic
from hotboard.codec import Event, encode
from ingest.worker import Worker
from tests.integration.aborting_broker import ABORT, COMMIT, AbortingBroker, Transaction, marker
from tests.integration.harness import checkpoint, read_boards, run_worker, sample, totals_of, worker_settings

pytestmark = pytest.mark.integration

TOPIC = "transactions"
CODECS = (None, "gzip", "lz4", "zstd", "snappy")


class _Batches:
    """One producer per codec; each ``send`` is one batch on partition 0, and returns its base offset."""

    def __init__(self, bootstrap: str) -> None:
        self._bootstrap = bootstrap
        self._producers: dict[str | None, AIOKafkaProducer] = {}

    async def send(self, records: list[tuple[bytes, bytes]], codec: str | None = None) -> int:
        producer = self._producers.get(codec)
        if producer is None:
            producer = AIOKafkaProducer(
                bootstrap_servers=self._bootstrap, enable_idempotence=False, compression_type=codec
            )
            await producer.start()
            self._producers[codec] = producer
        batch: Any = producer.create_batch()
        for key, value in records:
            assert batch.append(key=key, value=value, timestamp=None) is not None
        offset: int = (await (await producer.send_batch(batch, TOPIC, partition=0))).offset
        return offset

    async def events(self, events: list[Event], codec: str | None = None) -> int:
        return await self.send([(e.player.encode(), encode(e)) for e in events], codec)

    async def close(self) -> None:
        for producer in self._producers.values():
            await producer.stop()


def events(tag: str, count: int) -> list[Event]:
    return [Event("global", f"{tag}{i % 7}", 1 + i % 4, None) for i in range(count)]


async def test_aborted_transactions_never_count_and_markers_never_stall(tmp_path: Path, redis_url: str) -> None:
    """Partition 0: plain events; a transaction of two batches (uncompressed, lz4) that is aborted; a committed
    one (gzip); an aborted one (zstd) with a plain batch and a committed snappy transaction between its batch
    and its ABORT marker (interleaved producers); plain events at the end. The boards hold exactly the plain and
    committed events, nothing is dead-lettered (markers are control batches, not events), and the checkpoint
    reaches the last offset."""
    async with AbortingBroker(tmp_path / "kafka", TOPIC) as broker:
        await create_topic(broker.bootstrap, TOPIC, 1)
        await create_topic(broker.bootstrap, f"{TOPIC}.dlq", 1)
        counted: list[Event] = []
        send = _Batches(broker.bootstrap)
        try:
            counted += (first := events("plain-a", 10))
            await send.events(first)
            aborted = [await send.events(events("aborted-a", 20)), await send.events(events("aborted-b", 15), "lz4")]
            broker.rewrite.transactions.append(Transaction(7001, aborted, await send.send([marker(ABORT)]), True))
            committed = events("committed-a", 12)
            counted += committed
            batch = await send.events(committed, "gzip")
            broker.rewrite.transactions.append(Transaction(7002, [batch], await send.send([marker(COMMIT)]), False))
            open_batch = await send.events(events("aborted-c", 9), "zstd")
            counted += (between := events("plain-b", 5))
            await send.events(between)
            counted += (inner := events("committed-b", 6))
            inner_batch = await send.events(inner, "snappy")
            broker.rewrite.transactions.append(
                Transaction(7004, [inner_batch], await send.send([marker(COMMIT)]), False)
            )
            broker.rewrite.transactions.append(Transaction(7003, [open_batch], await send.send([marker(ABORT)]), True))
            counted += (last := events("plain-c", 10))
            end = await send.events(last) + len(last) - 1
        finally:
            await send.close()
        settings = worker_settings(broker.bootstrap, redis_url, TOPIC, "g-transactions")
        kinds: set[str] = set()

        async def note_kinds(worker: Worker) -> None:
            getmany = worker._consumer.getmany

            async def noted(*partitions: Any, **kw: Any) -> Any:
                batch = await getmany(*partitions, **kw)
                kinds.update(type(r).__name__ for records in batch.values() for r in records)
                return batch

            worker._consumer.getmany = noted

        until = lambda w: checkpoint(redis_url, TOPIC) == end  # noqa: E731
        worker = await run_worker(settings, until, f"checkpoint {end}", note_kinds)
        assert kinds == {"DefaultRecord"}, f"the worker's consumer handed over {kinds}, not the parsed records"
        assert read_boards(redis_url, ["global"]) == totals_of(counted)
        assert sample(worker, "hotboard_events_total", result="invalid") == 0, "a marker or aborted event dead-lettered"
        assert sample(worker, "hotboard_events_total", result="applied") == len(counted)
        assert broker.rewrite.patched >= 8, "the proxy did not make the transactions"
