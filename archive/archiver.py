"""``hotboard archiver``: the worker's fold, windows and flush order (:class:`ingest.worker.Worker`) with the
archive as its sink, in a consumer group of its own, so the hot workers never wait for PostgreSQL.

Everything the worker does for Redis it does here for PostgreSQL: a window is held (and fetching paused past
``max_pending_entries``) while PostgreSQL is down, slow or restarting, retried with backoff, and applied once;
``/healthz``, ``/readyz`` and ``/metrics`` are the worker's. Invalid records are counted, not dead-lettered (the
workers send them). Redis is read for the definitions of boards the archive does not hold yet.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Self

from prometheus_client import Gauge

from archive import audit_log
from archive.audit_log import LastAudit
from archive.pool import Archive, ArchiveUnavailable
from archive.settings import ArchiverSettings
from archive.sink import ArchiveSink
from hotboard import redis_connect
from ingest.metrics import WorkerMetrics
from ingest.worker import FlushReport, Worker

log = logging.getLogger("hotboard.archiver")

#: How long the exit waits for the cancelled gauge task to end before leaving it to the pool's terminate.
GAUGES_STOP_S = 1.0


class ArchiverMetrics(WorkerMetrics):
    """The worker's metrics (windows applied and failed, pending entries, consumer lag per partition), plus the
    archive's lag in one number each: records behind the topic, and seconds since the last window landed."""

    def __init__(self) -> None:
        super().__init__()
        self.last_window = time.time()
        Gauge(
            "hotboard_archive_lag_records",
            "Records of the topic not yet in the archive (sum over the archiver's partitions)",
            registry=self.registry,
        ).set_function(self._lag)
        Gauge(
            "hotboard_archive_last_window_age_seconds",
            "Seconds since a window last landed in the archive",
            registry=self.registry,
        ).set_function(lambda: time.time() - self.last_window)

        self.audit_last_run = Gauge(
            "hotboard_archive_audit_last_run_timestamp_seconds",
            "When the last audit of every board (hotboard audit) finished, seconds since the epoch; 0: never",
            registry=self.registry,
        )
        self.audit_last_success = Gauge(
            "hotboard_archive_audit_last_success_timestamp_seconds",
            "When the last audit that found every board exact finished, seconds since the epoch; 0: never",
            registry=self.registry,
        )
        self.audit_not_exact = Gauge(
            "hotboard_archive_audit_boards_not_exact",
            "Boards the last audit of every board found not exact (a player differs or could not be verified)",
            registry=self.registry,
        )
        self.audit_differ = Gauge(
            "hotboard_archive_audit_players_differ",
            "Players the last audit of every board found differing (its DIFFERS lines; unverified ones not counted)",
            registry=self.registry,
        )
        self.audit_runs_not_exact = Gauge(
            "hotboard_archive_audit_runs_not_exact",
            "Audits of every board in a row, up to the last, that found a board not exact; 0: the last found all exact",
            registry=self.registry,
        )
        # The staleness alert's clock: a fresh install (no audit yet, the last-run gauge at 0) is not overdue until
        # an audit was due, counted from when the archive was made; once one ran, from its finish. Both are read
        # from the archive, so a restart does not reset it; this archiver's start stands in until the first read.
        self.started_at = time.time()
        self.last_audit_s = 0.0
        self.due_since_s = 0.0
        Gauge(
            "hotboard_archive_audit_awaited_since_timestamp_seconds",
            "Since when an audit of every board is awaited: the last one's finish, or (none yet) when the archive "
            "was made",
            registry=self.registry,
        ).set_function(lambda: self.last_audit_s or self.due_since_s or self.started_at)

    def audited(self, last: LastAudit) -> None:
        self.last_audit_s = last.finished_at_ms / 1000
        self.due_since_s = last.due_since_ms / 1000
        self.audit_last_run.set(self.last_audit_s)
        self.audit_last_success.set(last.last_success_ms / 1000)
        self.audit_not_exact.set(last.not_exact)
        self.audit_differ.set(last.differences)
        self.audit_runs_not_exact.set(last.runs_not_exact)

    def _lag(self) -> float:
        return sum(s.value for m in self.consumer_lag.collect() for s in m.samples)


class Archiver:
    """``async with Archiver(settings) as archiver: await archiver.run()``; ``stop()`` drains and exits."""

    def __init__(
        self,
        settings: ArchiverSettings,
        *,
        handle_signals: bool = True,
        on_flush: Callable[[FlushReport], None] | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = ArchiverMetrics()
        self._on_flush = on_flush
        self.audit_read_failures = 0
        self._stack = AsyncExitStack()
        self._archive = Archive(settings.postgres, settings.postgres_timeout_s)
        # one server or a Redis Cluster (--redis-cluster), as the workers reach it: only definitions are read here
        self._redis = redis_connect.connect(
            settings, socket_timeout=settings.redis_timeout_s, socket_connect_timeout=settings.redis_timeout_s
        )
        self.sink = ArchiveSink(self._archive, self._redis, settings.topic)
        self.worker = Worker(
            settings.model_copy(update={"group": settings.consumer_group}),
            redis=self._redis,
            metrics=self.metrics,
            handle_signals=handle_signals,
            on_flush=self._flushed,
            sink=self.sink,
            dead_letters=False,
        )

    def __repr__(self) -> str:
        return repr(self.worker).replace("<Worker", "<Archiver", 1)

    def _flushed(self, report: FlushReport) -> None:
        self.metrics.last_window = time.time()
        if self._on_flush is not None:
            self._on_flush(report)

    async def __aenter__(self) -> Self:
        try:
            self._stack.push_async_callback(self._redis.aclose)
            await self._stack.enter_async_context(self._archive)
            await self._stack.enter_async_context(self.worker)
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stack.aclose()

    def stop(self) -> None:
        self.worker.stop()

    async def run(self) -> None:
        """The worker's run, with the audit gauges read beside it. The worker's outcome is the archiver's: the
        gauge task is cancelled and given ``GAUGES_STOP_S`` to end, never awaited for its own result, so neither an
        error of its own nor a cancelled query waiting on a frozen PostgreSQL (asyncpg shields the connection's
        release) replaces or holds the worker's exit; the pool's terminate in ``__aexit__`` ends such a wait."""
        gauges = asyncio.create_task(self._read_audits(), name="hotboard-audit-gauges")
        try:
            await self.worker.run()
        finally:
            gauges.cancel()
            await asyncio.wait([gauges], timeout=GAUGES_STOP_S)  # never raises what ended the task

    async def _read_audits(self) -> None:
        """The last audit's outcome into the gauges, every ``audit_read_s``. PostgreSQL down keeps the last read
        (the archive-lag alerts say so, and the audits' staleness alert fires if it stays down); any other error is
        logged and the read tried again: the gauges never stop the archiving."""
        while True:
            try:
                self.metrics.audited(await audit_log.last(self._archive))
            except ArchiveUnavailable:
                pass
            except Exception:
                self.audit_read_failures += 1
                log.exception("reading the last audit failed (%d times)", self.audit_read_failures)
            await asyncio.sleep(self.settings.audit_read_s)
