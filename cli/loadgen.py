"""Load generator: valid score events with Zipf-skewed players, published keyed by player id.

Events are generated from a seed, so a test can recompute exactly what was sent. Publishing builds
per-partition batches itself (same murmur2 partitioner as the Java client), which is several times faster
than one ``send()`` per event.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from hotboard.codec import Event, encode
from ingest.kafka_config import start_clients

BATCH_EVENTS = 2000


def board_names(boards: int) -> list[str]:
    return ["global"] + [f"board-{i}" for i in range(1, boards)]


def zipf_cum_weights(n: int, exponent: float) -> list[float]:
    """Cumulative weights of rank ``i`` proportional to ``1 / i**exponent`` (exponent 0 = uniform)."""
    return list(itertools.accumulate(1.0 / (i**exponent) for i in range(1, n + 1)))


def generate(
    count: int, *, players: int = 100_000, zipf: float = 1.1, boards: int = 1, seed: int = 0, max_delta: int = 100
) -> Iterator[Event]:
    """``count`` events; player ``p-<rank>`` is picked with Zipf skew, boards uniformly, deltas in
    ``[-max_delta // 10, max_delta]`` (some negative: penalties exist)."""
    rng = random.Random(seed)
    ids = [f"p-{i}" for i in range(players)]
    cum = zipf_cum_weights(players, zipf)
    names = board_names(boards)
    now_ms = int(time.time() * 1000)
    chunk = 10_000
    for start in range(0, count, chunk):
        n = min(chunk, count - start)
        picked = rng.choices(ids, cum_weights=cum, k=n)
        for player in picked:
            yield Event(rng.choice(names), player, rng.randint(-max_delta // 10, max_delta), now_ms)


@dataclass(slots=True)
class PublishStats:
    events: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


async def publish(
    bootstrap: str,
    topic: str,
    events: Iterable[Event] | Iterable[tuple[bytes, bytes]],
    *,
    rate: float = 0.0,
    fresh_ts: bool = False,
    stop: asyncio.Event | None = None,
    security: Mapping[str, Any] | None = None,
    start_timeout_s: float = 30.0,
) -> PublishStats:
    """Publish events (or raw ``(key, value)`` pairs) keyed by player; ``rate`` events/s, 0 = flat out.
    ``fresh_ts`` stamps each event with the time it is sent (for freshness measurements); ``security`` is
    :func:`hotboard.kafka_security.client_kwargs`. Raises :class:`ingest.kafka_config.KafkaUnavailable` when
    Kafka does not answer within ``start_timeout_s``."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        **(security or {}),
        enable_idempotence=False,
        acks="all",
        linger_ms=5,
        max_batch_size=1 << 20,
    )
    partitioner = DefaultPartitioner()
    async with AsyncExitStack() as stack:
        await start_clients(stack, [producer], bootstrap, start_timeout_s)
        partitions = sorted(await producer.partitions_for(topic))
        started = time.monotonic()
        sent = 0
        pending: list[asyncio.Future[object]] = []
        batches: dict[int, object] = {}
        counts: dict[int, int] = {}

        async def ship(p: int) -> None:
            pending.append(await producer.send_batch(batches.pop(p), topic, partition=p))
            counts.pop(p, None)

        for item in events:
            if stop is not None and stop.is_set():
                break
            if isinstance(item, Event):
                if fresh_ts:
                    item = item._replace(ts_ms=int(time.time() * 1000))
                key, value = item.player.encode(), encode(item)
            else:
                key, value = item
            p = partitioner(key, partitions, partitions)
            batch = batches.get(p)
            if batch is None:
                batch = batches[p] = producer.create_batch()
            if batch.append(key=key, value=value, timestamp=None) is None:  # type: ignore[attr-defined]
                await ship(p)
                batch = batches[p] = producer.create_batch()
                batch.append(key=key, value=value, timestamp=None)
            counts[p] = counts.get(p, 0) + 1
            sent += 1
            if counts[p] >= BATCH_EVENTS:
                await ship(p)
            if rate > 0 and sent % max(1, int(rate / 50)) == 0:
                for q in list(batches):
                    await ship(q)
                ahead = sent / rate - (time.monotonic() - started)
                if ahead > 0:
                    await asyncio.sleep(ahead)
            if len(pending) > 64:
                await asyncio.gather(*pending)
                pending.clear()
        for q in list(batches):
            await ship(q)
        await asyncio.gather(*pending)
        return PublishStats(sent, time.monotonic() - started)
