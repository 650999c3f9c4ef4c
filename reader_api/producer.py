"""The API's Kafka producer: events go to the topic exactly as every other producer of the contract sends them
(record key = the player id in UTF-8, so aiokafka's murmur2 partitioner puts one player's events on one
partition, in order; ``acks=all``), and a write counts only once Kafka acknowledged each of its records.

Every call is bounded: a broker that does not answer costs at most ``timeout_s``, never a hang. What it
means differs, and the caller tells the client: :class:`KafkaUnavailable` before any record was handed to the
client (nothing was produced), :class:`OutcomeUnknown` after (some or all records may be in the topic).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

log = logging.getLogger("hotboard.api")

#: Records batched per partition for a few ms: a write of many events is a few requests, not one per event.
LINGER_MS = 2


class KafkaUnavailable(Exception):
    """Kafka could not be reached: nothing of this write was produced."""


class OutcomeUnknown(Exception):
    """Records were handed to Kafka and not all acknowledged in time: they may or may not be in the topic."""


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

    def _new(self) -> AIOKafkaProducer:
        request_timeout_ms = max(1000, int(self.timeout_s * 1000))
        return AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks="all",
            enable_idempotence=False,  # not every Kafka-protocol broker grants InitProducerId
            linger_ms=LINGER_MS,
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
        handed = False
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                futures = []
                for key, value in records:
                    futures.append(await producer.send(self.topic, value, key=key))
                    handed = True
                acks = await asyncio.gather(*futures)
        except (KafkaError, OSError, TimeoutError) as exc:
            if not handed:
                raise KafkaUnavailable(f"Kafka at {self.bootstrap} did not take the write: {exc!r}") from exc
            raise OutcomeUnknown(f"Kafka did not acknowledge every record in {self.timeout_s:g}s: {exc!r}") from exc
        return [(ack.partition, ack.offset) for ack in acks]

    async def close(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), self.timeout_s)
