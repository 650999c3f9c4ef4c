"""Prometheus metrics of the worker. Names and labels are a contract (docs/operations.md, "Metrics"; the dashboard;
the alerts).

Each Worker owns its registry (no process globals), so tests and in-process benchmarks read exact values.
Label sets are small and fixed: never a player or board name.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from flusher.batch import BoardResult, Outcome
from hotboard.codec import Reason

if TYPE_CHECKING:
    from ingest.pending import Window

#: Causes of a resynchronisation: a fenced board batch, a checkpoint that moved under us, a Redis restart.
RESYNC_REASONS = ("fenced", "checkpoint", "redis_restart", "definition")

#: How many recent windows the savings-ratio gauge averages over.
SAVINGS_WINDOWS = 60


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.events = Counter("hotboard_events", "Events consumed, by outcome", ["result"], registry=r)
        self.redis_writes = Counter(
            "hotboard_redis_writes", "Sorted-set writes issued (one per board-player per window)", registry=r
        )
        self.windows = Counter("hotboard_windows", "Board windows flushed, by result", ["result"], registry=r)
        self.savings_ratio = Gauge(
            "hotboard_write_savings_ratio",
            f"Events applied / sorted-set writes over the last {SAVINGS_WINDOWS} flushes",
            registry=r,
        )
        self.window_entries = Histogram(
            "hotboard_window_entries",
            "Distinct board-player pairs per flush",
            buckets=(1, 10, 100, 1_000, 10_000, 100_000, 1_000_000),
            registry=r,
        )
        self.flush_seconds = Histogram(
            "hotboard_flush_seconds",
            "Flush round trip to Redis",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=r,
        )
        self.freshness_seconds = Histogram(
            "hotboard_event_freshness_seconds",
            "Flush time minus event ts: how long an event waits before players can see it",
            buckets=(0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 30, 60),
            registry=r,
        )
        self.pending_entries = Gauge("hotboard_pending_entries", "Board-player pairs waiting for a flush", registry=r)
        self.backpressure_paused = Gauge(
            "hotboard_backpressure_paused", "1 while fetching is paused because too much is pending", registry=r
        )
        self.consumer_lag = Gauge(
            "hotboard_consumer_lag", "High watermark minus position, per assigned partition", ["partition"], registry=r
        )
        self.rebalances = Counter("hotboard_rebalances", "Partition assignments received", registry=r)
        self.dlq = Counter("hotboard_dlq", "Records sent to the dead-letter topic, by reason", ["reason"], registry=r)
        self.dlq_pending = Gauge(
            "hotboard_dlq_pending", "Dead letters not yet acknowledged by the DLQ (they hold checkpoints)", registry=r
        )
        self.dlq_failures = Counter(
            "hotboard_dlq_failures", "Dead letters the DLQ refused or did not acknowledge in time", registry=r
        )
        self.data_loss = Gauge(
            "hotboard_redis_data_loss",
            "Partitions halted because history is gone from Redis and Kafka (needs an operator)",
            registry=r,
        )
        self.records_lost = Counter(
            "hotboard_records_lost", "Records deleted by retention before they were applied", registry=r
        )
        self.saturated = Counter(
            "hotboard_saturated", "Totals held at +-(2^53-1), the exact range of a score", registry=r
        )
        self.known_boards = Gauge(
            "hotboard_known_boards", "Boards whose watermark the worker keeps, summed over its partitions", registry=r
        )
        self.boards_forgotten = Counter(
            "hotboard_boards_forgotten", "Idle boards dropped from the watermark bookkeeping", registry=r
        )
        self.replica_acks_short = Counter(
            "hotboard_replica_acks_short",
            "Windows applied but confirmed on fewer replicas than --min-replica-acks (retried, checkpoint held)",
            registry=r,
        )
        self.resyncs = Counter("hotboard_resyncs", "Resynchronisations from Redis, by cause", ["reason"], registry=r)
        self.resync_rewinds = Counter(
            "hotboard_resync_rewinds",
            "Positionings that resumed before the checkpoint: boards held less than this worker applied to them",
            ["partition"],
            registry=r,
        )
        for result in ("applied", "invalid", "duplicate"):
            self.events.labels(result)
        for result in ("flushed", "failed", "fenced"):
            self.windows.labels(result)
        for reason in Reason:
            self.dlq.labels(reason.value)
        for cause in RESYNC_REASONS:
            self.resyncs.labels(cause)
        self._recent: deque[tuple[int, int]] = deque(maxlen=SAVINGS_WINDOWS)

    def record_savings(self, events_applied: int, writes: int) -> None:
        self._recent.append((events_applied, writes))
        total_writes = sum(w for _, w in self._recent)
        if total_writes:
            self.savings_ratio.set(sum(e for e, _ in self._recent) / total_writes)

    def record_window(self, window: Window, results: list[BoardResult], duration_s: float) -> None:
        """One flushed window: its batches' writes, the savings, its size and duration, and freshness."""
        writes = sum(r.writes for r in results)
        fenced = any(r.outcome in (Outcome.FENCED, Outcome.REDEFINED) for r in results)
        self.windows.labels("fenced" if fenced else "flushed").inc()
        self.redis_writes.inc(writes)
        if writes:
            self.record_savings(0 if fenced else window.events, writes)
            self.window_entries.observe(window.entries)
            self.flush_seconds.observe(duration_s)
        self.saturated.inc(sum(r.saturated for r in results))
        now_ms = time.time() * 1000
        for fold in window.folds.values():
            for ts in (fold.min_ts_ms, fold.max_ts_ms):
                if ts is not None:
                    self.freshness_seconds.observe(max(0.0, (now_ms - ts) / 1000))
