"""Where a topic's log ends now: the delete point of ``hotboard boards delete`` and the mark ``erase`` waits for.

The high watermark is read from fetch responses (``consumer.highwater``), not from ``end_offsets()`` alone:
every record acknowledged to its producer before the call lies below it, and some Kafka-protocol brokers
answer ListOffsets with the base offset of the last batch instead of the log's end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

#: Each fetch of the log ends waits at most this long for records (short: an empty partition answers at once).
FETCH_WAIT_MS = 200


class LogEndsUnavailable(Exception):
    """Kafka did not answer in time, or does not know the topic; the message is the one line to print."""

    def __init__(self, message: str, unknown_topic: bool = False) -> None:
        super().__init__(message)
        self.unknown_topic = unknown_topic


async def last_offsets(
    kafka: str, topic: str, timeout_s: float, security: Mapping[str, Any] | None = None
) -> dict[int, int]:
    """partition -> the offset of its last record now (-1: empty). ``security`` is
    :func:`hotboard.kafka_security.client_kwargs`. Raises LogEndsUnavailable."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka,
        **(security or {}),
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    deadline = time.monotonic() + timeout_s
    try:
        await asyncio.wait_for(consumer.start(), timeout_s)
        await asyncio.wait_for(consumer.topics(), max(0.1, deadline - time.monotonic()))  # full metadata
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            raise LogEndsUnavailable(f"Kafka at {kafka} has no topic {topic!r}", unknown_topic=True)
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        ends = await asyncio.wait_for(consumer.end_offsets(tps), max(0.1, deadline - time.monotonic()))
        for tp in tps:
            consumer.seek(tp, ends[tp])
        highs: dict[int, int] = {}
        while len(highs) < len(tps):
            if time.monotonic() >= deadline:
                missing = sorted(tp.partition for tp in tps if tp.partition not in highs)
                raise LogEndsUnavailable(f"no answer from Kafka at {kafka} for partitions {missing} of {topic!r}")
            await consumer.getmany(*tps, timeout_ms=FETCH_WAIT_MS)
            for tp in tps:
                high = consumer.highwater(tp)
                if high is not None and high >= ends[tp]:
                    highs[tp.partition] = high
        return {p: high - 1 for p, high in highs.items()}
    except (KafkaError, TimeoutError) as exc:
        raise LogEndsUnavailable(f"Kafka unreachable at {kafka}: {exc!r}") from None
    finally:
        await consumer.stop()
