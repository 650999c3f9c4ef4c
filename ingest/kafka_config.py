"""The worker's Kafka clients: their configuration in one place (the benchmark builds the same ones), and
their start with a deadline."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from contextlib import AsyncExitStack
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, KafkaError

from hotboard import kafka_security
from hotboard.timing import Backoff
from ingest.settings import WorkerSettings

log = logging.getLogger("hotboard.worker")


class KafkaUnavailable(RuntimeError):
    """Kafka did not answer within ``kafka_start_timeout_s``."""


def consumer_config(s: WorkerSettings) -> dict[str, Any]:
    """Manual commits (lag only), committed reads only, and never a silent offset reset: a position outside
    the log halts the partition instead (see ``ingest.partitions.HaltReason``)."""
    return {
        "bootstrap_servers": s.kafka,
        **kafka_security.client_kwargs(s),
        "group_id": s.group,
        "enable_auto_commit": False,
        "auto_offset_reset": "none",
        "isolation_level": "read_committed",
        "session_timeout_ms": s.session_timeout_ms,
        "heartbeat_interval_ms": max(100, s.session_timeout_ms // 6),
        "max_poll_interval_ms": max(60_000, s.session_timeout_ms * 3),
        "request_timeout_ms": max(30_000, s.session_timeout_ms + 5000),
        "max_partition_fetch_bytes": s.max_partition_fetch_bytes,
        "fetch_max_bytes": s.fetch_max_bytes,
    }


def producer_config(s: WorkerSettings) -> dict[str, Any]:
    """The dead-letter producer. No idempotence: not every Kafka-protocol broker supports InitProducerId, and
    the DLQ is at-least-once by design. A request fits the largest capped letter."""
    return {
        "bootstrap_servers": s.kafka,
        **kafka_security.client_kwargs(s),
        "enable_idempotence": False,
        "acks": "all",
        "linger_ms": 5,
        "max_request_size": max(1_048_576, 2 * s.dlq_max_bytes),
    }


async def start_clients(
    stack: AsyncExitStack, clients: list[AIOKafkaConsumer | AIOKafkaProducer], s: WorkerSettings
) -> None:
    """Start each client, retrying with backoff until ``kafka_start_timeout_s``; each one started is stopped
    by ``stack``. Raises :class:`KafkaUnavailable` with what Kafka last answered."""
    deadline = time.monotonic() + s.kafka_start_timeout_s
    backoff = Backoff(cap_s=2.0)
    for client in clients:
        while True:
            try:
                await asyncio.wait_for(client.start(), timeout=max(0.1, deadline - time.monotonic()))
                stack.push_async_callback(client.stop)
                break
            except (KafkaConnectionError, KafkaError, OSError, TimeoutError) as exc:
                with contextlib.suppress(Exception):
                    await client.stop()
                why = (await kafka_security.tls_failure(s.kafka, s) if s.kafka_uses_tls else None) or repr(exc)
                if time.monotonic() + 0.5 >= deadline:
                    for never_started in clients[clients.index(client) + 1 :]:
                        with contextlib.suppress(Exception):
                            await never_started.stop()
                    raise KafkaUnavailable(
                        f"Kafka at {s.kafka} did not answer within {s.kafka_start_timeout_s:.0f}s: {why}"
                    ) from exc
                log.warning("kafka not reachable yet at %s (%s); retrying", s.kafka, why)
                await asyncio.sleep(backoff.next_delay())
