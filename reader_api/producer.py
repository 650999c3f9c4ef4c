"""The API's Kafka producer: events go to the topic exactly as every other producer of the contract sends them
(record key = the player id in UTF-8, so aiokafka's murmur2 partitioner puts one player's events on one
partition, in order; ``acks=all``), and a write counts only once Kafka acknowledged each of its records.

Every call is bounded: a broker that does not answer costs at most ``timeout_s``, never a hang. What it
means differs, and the caller tells the client: :class:`KafkaUnavailable` before any record was handed to the
client (nothing was produced), :class:`OutcomeUnknown` after (some or all records may be in the topic).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.partitioner import DefaultPartitioner

log = logging.getLogger("hotboard.api")

#: Batches of concurrent writes to one partition go out together for a few ms.
LINGER_MS = 2
#: A write's batch per partition: 1,000 events of the contract's size fit in one (brokers take 1 MB by default).
MAX_BATCH_BYTES = 256 << 10


class KafkaUnavailable(Exception):
    """Kafka could not be reached: nothing of this write was produced."""


class OutcomeUnknown(Exception):
    """Records were handed to Kafka and not all acknowledged in time: they may or may not be in the topic."""


@dataclass(eq=False)
class _Batch:
    partition: int
    builder: Any  # aiokafka's BatchBuilder
    #: Set to the batch's RecordMetadata (its base offset) once Kafka acknowledged it.
    acked: asyncio.Future[Any]
    count: int = 0


def _relay(target: asyncio.Future[Any], source: asyncio.Future[Any]) -> None:
    if target.done():
        return
    if source.cancelled():
        target.cancel()
    elif (exc := source.exception()) is not None:
        target.set_exception(exc)
    else:
        target.set_result(source.result())


class EventProducer:
    """One aiokafka producer per app, started on first use (and at the app's start, in the background), so the
    API answers reads even while Kafka is away."""

    def __init__(self, bootstrap: str, topic: str, timeout_s: float, security: Mapping[str, Any] | None = None) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.timeout_s = timeout_s
        self._security = dict(security or {})  # hotboard.kafka_security.client_kwargs
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()
        self._partitioner = DefaultPartitioner()
        #: partition -> its batches not yet handed to the producer, the last one open for more records
        self._batches: dict[int, collections.deque[_Batch]] = {}
        self._shippers: dict[int, asyncio.Task[None]] = {}

    def _new(self) -> AIOKafkaProducer:
        request_timeout_ms = max(1000, int(self.timeout_s * 1000))
        return AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks="all",
            enable_idempotence=False,  # not every Kafka-protocol broker grants InitProducerId
            linger_ms=LINGER_MS,
            max_batch_size=MAX_BATCH_BYTES,
            request_timeout_ms=request_timeout_ms,
            metadata_max_age_ms=60_000,
            **self._security,
        )

    async def _started(self, deadline: float) -> AIOKafkaProducer:
        async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
            async with self._lock:
                if self._producer is None:
                    producer = self._new()
                    try:
                        await producer.start()
                    except BaseException:
                        with contextlib.suppress(Exception):
                            await producer.stop()
                        raise
                    self._producer = producer
                return self._producer

    async def start(self) -> None:
        """Best effort at the app's start; a failure leaves the start to the first write."""
        try:
            await self._started(time.monotonic() + self.timeout_s)
        except (KafkaError, OSError, TimeoutError) as exc:
            log.warning("kafka not reachable at %s yet (%r); writes will try again", self.bootstrap, exc)

    async def send(self, records: Sequence[tuple[bytes, bytes]]) -> list[tuple[int, int]]:
        """Produce ``(key, value)`` records; answers each one's ``(partition, offset)``, in order."""
        deadline = time.monotonic() + self.timeout_s
        try:
            producer = await self._started(deadline)
        except (KafkaError, OSError, TimeoutError) as exc:
            raise KafkaUnavailable(f"Kafka at {self.bootstrap} did not answer: {exc!r}") from exc
        placed: list[tuple[_Batch, int]] = []  # each record's batch and its place in it
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                partitions = sorted(await producer.partitions_for(self.topic))
                place = self._partitioner
                placed = [self._append(producer, place(k, partitions, partitions), k, v) for k, v in records]
                for p in {batch.partition for batch, _ in placed}:
                    if p not in self._shippers:
                        self._shippers[p] = asyncio.create_task(self._ship(producer, p))
                waiting = {batch.acked for batch, _ in placed}
                while waiting:  # asyncio.wait, not gather: a timeout must not cancel batches others wait on too
                    _, waiting = await asyncio.wait(waiting)
                acks = [(batch.acked.result(), index) for batch, index in placed]
        except (KafkaError, OSError, TimeoutError) as exc:
            if not placed:
                raise KafkaUnavailable(f"Kafka at {self.bootstrap} did not take the write: {exc!r}") from exc
            raise OutcomeUnknown(f"Kafka did not acknowledge every record in {self.timeout_s:g}s: {exc!r}") from exc
        return [(ack.partition, ack.offset + index) for ack, index in acks]  # a batch's records: consecutive offsets

    def _append(self, producer: AIOKafkaProducer, partition: int, key: bytes, value: bytes) -> tuple[_Batch, int]:
        """The record into the open batch of its partition (a new one when that is full or gone to Kafka)."""
        queue = self._batches.setdefault(partition, collections.deque())
        if not queue or queue[-1].builder.append(key=key, value=value, timestamp=None) is None:
            queue.append(_Batch(partition, producer.create_batch(), asyncio.get_running_loop().create_future()))
            queue[-1].builder.append(key=key, value=value, timestamp=None)
        batch = queue[-1]
        batch.count += 1
        return batch, batch.count - 1

    async def _ship(self, producer: AIOKafkaProducer, partition: int) -> None:
        """One shipper per partition hands its batches to the producer in order; while Kafka has one (aiokafka
        holds one batch per partition in flight), the records of every write arriving meanwhile gather in the
        next, so a write of many events costs a few batch appends, not one ``send()`` and future per event."""
        queue = self._batches[partition]
        try:
            while queue:
                batch = queue.popleft()
                try:
                    sent = await producer.send_batch(batch.builder, self.topic, partition=partition)
                except (KafkaError, OSError) as exc:
                    batch.acked.set_exception(exc)
                    continue
                sent.add_done_callback(functools.partial(_relay, batch.acked))
        finally:
            del self._shippers[partition]

    async def close(self) -> None:
        for task in list(self._shippers.values()):
            task.cancel()
        if self._producer is not None:
            producer, self._producer = self._producer, None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), self.timeout_s)
