"""The worker's Kafka clients: their configuration in one place (the benchmark builds the same ones), and
their start with a deadline."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, KafkaError

from hotboard import kafka_security
from hotboard.kafka_security import KafkaSecuritySettings
from hotboard.timing import Backoff
from ingest.raw_records import keep_bytes
from ingest.settings import WorkerSettings

log = logging.getLogger("hotboard.worker")


class KafkaUnavailable(RuntimeError):
    """Kafka did not answer within ``kafka_start_timeout_s``."""


#: Six heartbeats per session timeout (Kafka asks for at most a third): a missed one or two never expels a
#: member; never more often than every 100 ms.
HEARTBEATS_PER_SESSION = 6
MIN_HEARTBEAT_MS = 100
#: A flush stuck on Redis may hold the poll loop for a while: stay in the group at least this long (or three
#: session timeouts) before Kafka deems the member dead.
MIN_POLL_INTERVAL_MS = 60_000
#: A JoinGroup request waits up to a session timeout on the coordinator: requests must outlast it, by a margin.
MIN_REQUEST_TIMEOUT_MS = 30_000
REQUEST_MARGIN_MS = 5_000
#: Dead letters are rare: batching them for a few ms costs nothing and saves requests in a burst.
DLQ_LINGER_MS = 5
#: Kafka's own default request size; raised only when a capped letter (twice, with its headers) needs more.
KAFKA_DEFAULT_REQUEST_BYTES = 1_048_576
#: Starting a client retries with backoff up to this delay; the last attempt needs this much time left.
START_BACKOFF_CAP_S = 2.0
START_LAST_TRY_S = 0.5


def consumer_config(s: WorkerSettings) -> dict[str, Any]:
    """Manual commits (lag only), committed reads only, and never a silent offset reset: a position outside
    the log halts the partition instead (see ``ingest.partitions.HaltReason``). Values stay bytes, and the
    consumer hands over the client's parsed records once :func:`ingest.raw_records.install` ran."""
    return {
        "bootstrap_servers": s.kafka,
        **kafka_security.client_kwargs(s),
        "group_id": s.group,
        "enable_auto_commit": False,
        "auto_offset_reset": "none",
        "isolation_level": "read_committed",
        "session_timeout_ms": s.session_timeout_ms,
        "heartbeat_interval_ms": max(MIN_HEARTBEAT_MS, s.session_timeout_ms // HEARTBEATS_PER_SESSION),
        "max_poll_interval_ms": max(MIN_POLL_INTERVAL_MS, s.session_timeout_ms * 3),
        "request_timeout_ms": max(MIN_REQUEST_TIMEOUT_MS, s.session_timeout_ms + REQUEST_MARGIN_MS),
        "max_partition_fetch_bytes": s.max_partition_fetch_bytes,
        "fetch_max_bytes": s.fetch_max_bytes,
        "value_deserializer": keep_bytes,
    }


def producer_config(s: WorkerSettings) -> dict[str, Any]:
    """The dead-letter producer. No idempotence: not every Kafka-protocol broker supports InitProducerId, and
    the DLQ is at-least-once by design. A request fits the largest capped letter."""
    return {
        "bootstrap_servers": s.kafka,
        **kafka_security.client_kwargs(s),
        "enable_idempotence": False,
        "acks": "all",
        "linger_ms": DLQ_LINGER_MS,
        "max_request_size": max(KAFKA_DEFAULT_REQUEST_BYTES, 2 * s.dlq_max_bytes),
    }


def reader_config(s: WorkerSettings) -> dict[str, Any]:
    """A consumer outside any group that reads a topic and commits nothing (``hotboard dlq``)."""
    return {
        "bootstrap_servers": s.kafka,
        **kafka_security.client_kwargs(s),
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "isolation_level": "read_committed",
    }


async def start_clients(
    stack: AsyncExitStack,
    clients: Sequence[AIOKafkaConsumer | AIOKafkaProducer],
    kafka: str,
    timeout_s: float,
    tls: KafkaSecuritySettings | None = None,
) -> None:
    """Start each client (bootstrap servers ``kafka``), retrying with backoff for ``timeout_s`` (the setting
    ``kafka_start_timeout_s``); each one started is stopped by ``stack``. Raises :class:`KafkaUnavailable`
    with what Kafka last answered (with ``tls`` settings over TLS: why the handshake failed, if it did)."""
    deadline = time.monotonic() + timeout_s
    backoff = Backoff(cap_s=START_BACKOFF_CAP_S)
    for client in clients:
        while True:
            try:
                await asyncio.wait_for(client.start(), timeout=max(0.1, deadline - time.monotonic()))
                stack.push_async_callback(client.stop)
                break
            except (KafkaConnectionError, KafkaError, OSError, TimeoutError) as exc:
                with contextlib.suppress(Exception):
                    await client.stop()
                tls_why = await kafka_security.tls_failure(kafka, tls) if tls and tls.kafka_uses_tls else None
                why = tls_why or repr(exc)
                if time.monotonic() + START_LAST_TRY_S >= deadline:
                    for never_started in clients[clients.index(client) + 1 :]:
                        with contextlib.suppress(Exception):
                            await never_started.stop()
                    raise KafkaUnavailable(f"Kafka at {kafka} did not answer within {timeout_s:.0f}s: {why}") from exc
                log.warning("kafka not reachable yet at %s (%s); retrying", kafka, why)
                await asyncio.sleep(backoff.next_delay())
