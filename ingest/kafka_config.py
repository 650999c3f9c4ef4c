"""The consumer and producer configuration of a worker, in one place (the benchmark builds the same ones)."""

from __future__ import annotations

from typing import Any

from hotboard.settings import WorkerSettings


def consumer_config(s: WorkerSettings) -> dict[str, Any]:
    """Manual commits (lag only), committed reads only, and never a silent offset reset: a position outside
    the log halts the partition instead (see ``ingest.partitions.HaltReason``)."""
    return {
        "bootstrap_servers": s.kafka,
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
        "enable_idempotence": False,
        "acks": "all",
        "linger_ms": 5,
        "max_request_size": max(1_048_576, 2 * s.dlq_max_bytes),
    }
