"""One hotboard worker: Kafka partitions in, one-second windows folded, applied exactly once to Redis.

Exactly-once rests on four rules:

1. Redis is the truth. Every board keeps, per partition, the last offset applied to it (its watermark),
   written in the same atomic step as the window's deltas; every partition keeps a checkpoint, the offset up
   to which all its events are applied. A (re)assigned partition resumes after its checkpoint, and an event
   past it but at or below its board's watermark is skipped for that board.
2. Every board batch is a compare-and-set on the exact watermarks the worker knows. A zombie, or a Redis that
   lost writes, sees a mismatch: nothing is applied and the worker resynchronises from Redis.
3. A checkpoint moves only after every board batch of its window is confirmed, and only from the value the
   worker knows (a mismatch resynchronises too).
4. Kafka commits follow checkpoints and serve lag monitoring only.

The pieces: :mod:`ingest.assignment` (the one owner of the partitions' state: pauses, positioning, halts),
:mod:`ingest.checkpoint` (a window's checkpoint moves), :mod:`ingest.redis_health` (which Redis the state came
from, and whether to resynchronise), :mod:`ingest.intake` (fetch and fold), :mod:`ingest.folds` (the pure folds),
:mod:`ingest.dlq` (dead letters), :mod:`flusher` (the sink). This module is the lifecycle and the flush step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from redis.asyncio import Redis

from flusher.batch import BoardResult, Outcome, Sink
from flusher.cluster import ClusterSink, ReplicaAcksShort
from flusher.redis_sink import RedisSink
from hotboard import redis_connect
from hotboard.redis_client import Client
from hotboard.timing import Backoff, ticker, wait_or_stop
from ingest import dlq, gc_pacing, raw_records
from ingest.assignment import Assignment
from ingest.errors import TRANSIENT
from ingest.intake import Intake
from ingest.kafka_config import consumer_config, producer_config, start_clients
from ingest.metrics import WorkerMetrics
from ingest.partitions import Halt
from ingest.pausing import PauseReason
from ingest.pending import Pending, Window
from ingest.progress import Counters, DeadLetterLog, Progress
from ingest.redis_health import RedisHealth
from ingest.settings import WorkerSettings
from ingest.startup import bind_ops, wait_for_redis

log = logging.getLogger("hotboard.worker")

#: /healthz fails when the flush loop has not ticked for this long (or ten windows, if longer).
LIVENESS_STALE_S = 60.0


@dataclass(frozen=True, slots=True)
class FlushReport:
    """One successful flush, for tests and benchmarks that check the write accounting from outside."""

    started: float
    duration_s: float
    #: partition -> last offset covered by this flush (the previous report of the partition gives the start).
    offsets: dict[int, int]
    events: int
    entries: int
    results: list[BoardResult]


class Worker:
    """``async with Worker(settings) as worker: await worker.run()``; ``stop()`` (SIGTERM) drains and exits.
    Made inside the event loop (the Kafka clients are); nothing connects before ``async with``."""

    def __init__(
        self,
        settings: WorkerSettings,
        *,
        redis: Client | None = None,
        metrics: WorkerMetrics | None = None,
        handle_signals: bool = True,
        on_flush: Callable[[FlushReport], None] | None = None,
        sink: Sink | None = None,
        dead_letters: bool = True,
    ) -> None:
        """``sink``: where windows go instead of Redis (the archive; ``redis`` then serves the definitions);
        ``dead_letters=False``: invalid records are counted, not sent (another process kind sends them)."""
        self.settings = settings
        self.metrics = metrics or WorkerMetrics()
        self._handle_signals = handle_signals
        self._on_flush = on_flush
        self._stack = AsyncExitStack()
        self._stopping = asyncio.Event()
        self._lock = asyncio.Lock()  # one flush / rebalance / positioning step at a time
        self._pending = Pending()
        self._redis_health = RedisHealth()
        self._identity = self._redis_health.identity
        self._backoff = Backoff(cap_s=settings.backoff_max_s)
        s = settings
        if sink is None:
            s.check_replica_acks()
        #: An injected client is its owner's to close, and has not connected yet: its connections are checked too.
        self._owns_redis = redis is None
        if redis is None:
            redis = redis_connect.connect(
                s,
                socket_timeout=s.redis_timeout_s,
                socket_connect_timeout=s.redis_timeout_s,
                redis_connect_func=self._identity.on_connect,
            )
        elif isinstance(redis, Redis):
            redis.connection_pool.connection_kwargs["redis_connect_func"] = self._identity.on_connect
        self._redis = redis
        self._sink: Sink = sink or (
            RedisSink(redis, s.topic, s.max_script_players)
            if isinstance(redis, Redis)
            else ClusterSink(
                redis,
                s.topic,
                s.max_script_players,
                min_replica_acks=s.replica_acks,
                replica_ack_timeout_ms=s.replica_ack_timeout_ms,
            )
        )
        self._dead_letters = dead_letters
        raw_records.install()  # the consumer hands over the client's parsed records (see ingest/raw_records.py)
        self._consumer = AIOKafkaConsumer(**consumer_config(s))
        self._producer = AIOKafkaProducer(**producer_config(s))
        self._assignment = Assignment(s, self._consumer, self._sink, self.metrics)
        self._intake = Intake(
            s,
            self._consumer,
            self._assignment,
            self._pending,
            self._sink,
            self.metrics,
            self._stopping,
            self._backoff,
            self._redis_health,
        )
        self._dead = dlq.DeadLetters(self._producer, s.dlq, s.dlq_max_bytes, s.dlq_send_timeout_s)
        self._heartbeat = time.monotonic()
        self._flusher: asyncio.Task[None] | None = None
        #: An unexpected error met inside a rebalance callback (which the consumer would swallow): run() raises it.
        self._failure: Exception | None = None
        self.flushes = 0
        self.dead_letters = 0
        self.progress = Progress(s.progress_interval_s)
        self.dead_letter_log = DeadLetterLog(s.progress_interval_s)
        self.fenced = 0
        self.failed_flushes = 0
        #: Hears the halted partitions once per tick, none too (a restore from the archive answers some, and learns
        #: meanwhile which of those it restored resumed).
        self.on_halts: Callable[[Mapping[int, Halt]], None] | None = None

    def __repr__(self) -> str:
        return (
            f"<Worker parts={self.assigned} flushes={self.flushes} fenced={self.fenced} "
            f"failed={self.failed_flushes} pending={self.pending_entries}>"
        )

    @property
    def pending_entries(self) -> int:
        return self._pending.entries

    @property
    def alive(self) -> bool:
        """Kubernetes liveness: the flush loop runs and ticked lately (every window, or every backoff step)."""
        if (self._flusher is not None and self._flusher.done()) or self._failure is not None:
            return False
        return time.monotonic() - self._heartbeat < max(LIVENESS_STALE_S, 10 * self.settings.window_s)

    @property
    def ready(self) -> bool:
        """Kubernetes readiness: the consumer holds partitions and has positioned them all (none halted)."""
        return self._assignment.ready

    @property
    def assigned(self) -> list[int]:
        return self._assignment.partitions

    @property
    def halted(self) -> dict[int, Halt]:
        return self._assignment.halted

    def positioned(self, partitions: Iterable[int]) -> set[int]:
        """Those of ``partitions`` this worker holds positioned (consumed)."""
        return self._assignment.positioned(partitions)

    @property
    def redis(self) -> Client:
        return self._redis

    @property
    def sink(self) -> Sink:
        return self._sink

    # ---------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Self:
        s = self.settings
        try:
            if self._owns_redis:
                self._stack.push_async_callback(self._redis.aclose)
            for client in (self._consumer, self._producer):  # started or not: one never closed warns when collected
                self._stack.push_async_callback(client.stop)
            # Before joining the group, so that a worker that cannot run never takes partitions from one that
            # can: 1. its ops port, 2. Redis (and its eviction policy), 3. Kafka.
            if s.metrics_port:
                server = bind_ops(s, self.metrics.registry, lambda: self.ready, lambda: self.alive)
                self._stack.callback(server.server_close)
                self._stack.callback(server.shutdown)
            await wait_for_redis(self._redis, s)
            await start_clients(self._stack, [self._consumer, self._producer], s.kafka, s.kafka_start_timeout_s, s)
            self._consumer.subscribe([s.topic], listener=_Listener(self))
            # the collector's pace while it runs: a fetch's records trigger no collection (see ingest/gc_pacing.py)
            self._stack.enter_context(gc_pacing.worker_pace(s.max_poll_records))
            if self._handle_signals:
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(sig, self.stop)
                    self._stack.callback(loop.remove_signal_handler, sig)
            self._heartbeat = time.monotonic()  # liveness counts from here, not from the wait for the servers
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stack.aclose()

    def stop(self) -> None:
        """Signal-safe: the first call flips the flag (``run()`` drains, commits, leaves the group); a second
        one exits at once, which is as safe as a crash: the next owner replays from the checkpoints."""
        if self._stopping.is_set() and self._handle_signals:
            log.warning("second stop request: exiting now")
            os._exit(130)
        log.info("stop requested: draining")
        self._stopping.set()

    async def run(self) -> None:
        """Fetch and fold until stopped. An unexpected error ends the worker without a drain: a window that met
        one is not to be trusted, and the checkpoints make a restart exact."""
        self._flusher = asyncio.create_task(self._flush_loop(), name="hotboard-flush")
        intake = asyncio.create_task(self._intake_loop(), name="hotboard-intake")
        stopped = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait([intake, stopped], return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._stopping.set()
            stopped.cancel()
            # A fold waiting on a frozen Redis (a watermark lookup, up to redis_timeout_s per partition) must not
            # hold the exit past the shutdown budget: it is abandoned, which is as safe as its lookup failing.
            # The window holds only the records folded before the wait, and the drain's checkpoints cover no more.
            intake.cancel()
            await asyncio.wait([intake])  # never raises: what ended the intake is read below
            await self._stop_flusher()
        failure = None if intake.cancelled() else intake.exception()
        if failure is not None:
            raise failure
        await self._drain()

    async def _intake_loop(self) -> None:
        while not self._stopping.is_set():
            assert self._flusher is not None
            if self._flusher.done():
                self._flusher.result()  # raises what killed it
                raise RuntimeError("the flush loop ended on its own")
            if self._failure is not None:
                raise self._failure
            await self._position()
            if await self._intake.poll():
                self._update_backpressure()

    async def _stop_flusher(self) -> None:
        assert self._flusher is not None
        if not self._flusher.done():
            done, _ = await asyncio.wait([self._flusher], timeout=self.settings.shutdown_timeout_s / 2)
            if not done:
                self._flusher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._flusher

    async def _drain(self) -> None:
        """Final flush within the shutdown budget; anything not flushed is replayed by the next owner."""
        deadline = time.monotonic() + self.settings.shutdown_timeout_s / 2
        while time.monotonic() < deadline:
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    async with self._lock:
                        if await self._flush_all():
                            log.info("drained: %r", self)
                            return
            except TimeoutError:
                break
            await asyncio.sleep(min(self._backoff.next_delay(), max(0.0, deadline - time.monotonic())))
        log.warning(
            "shutdown budget spent with %d entries unflushed; the next owner replays them", self.pending_entries
        )

    # ---------------------------------------------------------------- positioning, backpressure, resync

    async def _position(self) -> None:
        """Position every waiting partition from its checkpoint in Redis, then let it fetch."""
        if self._identity.restarted_as is not None:
            async with self._lock:
                self._resync_if_restarted()  # every partition is positioned again, from the new server
        if not self._assignment.waiting():
            return
        async with self._lock:
            waiting = self._assignment.waiting()
            if not waiting:
                return
            try:
                # The server the positions are read from is known before any partition resumes from it: a failure
                # later in the positioning (recording a halt, say) must not leave resumed partitions without it,
                # or a restart meanwhile would go unnoticed. Another server behind a kept connection: resynchronised
                # at the next call.
                self._redis_health.positioned_from(await self._sink.server_id())
                # those whose rewind read failed wait, each on its own backoff: the others fetch meanwhile
                await self._assignment.position(waiting)
            except TRANSIENT as exc:
                failure: Exception | None = exc
            else:
                failure = None
            finally:
                # A partition positioned now resumes after its checkpoint: work still pending from before its
                # halt goes, or it would be flushed in the epoch a lift begins. One still halted keeps it: its
                # boards take it at the next flush (the checkpoint stays), as the records before an unreadable
                # batch must, whatever an outage delayed (a skip past the batch would lose them otherwise).
                positioned = self._assignment.positioned(waiting)
                self._pending.drop(positioned)
                self._dead.drop(positioned)
        if failure is not None:
            delay = self._backoff.next_delay()
            log.warning("cannot position partitions %s yet (%r); retrying in %.1fs", waiting, failure, delay)
            await wait_or_stop(self._stopping, delay)

    def _update_backpressure(self) -> None:
        pending = self.pending_entries + self._dead.pending + self._pending.active.dead_count
        dead_bytes = self._dead.pending_bytes
        self.metrics.pending_entries.set(pending)
        self.metrics.dlq_pending.set(self._dead.pending)
        limit, byte_limit = self.settings.max_pending_entries, self.settings.max_pending_dlq_bytes
        paused = self._assignment.backpressured
        if not paused and (pending >= limit or dead_bytes >= byte_limit):
            self._assignment.pause(self._assignment.partitions, PauseReason.BACKPRESSURE)
            self.metrics.backpressure_paused.set(1)
            log.warning(
                "backpressure: %d entries and %d dead-letter bytes pending (limit %d); fetching paused until "
                "flushes land",
                pending,
                dead_bytes,
                limit,
            )
        elif paused and pending < limit // 2 and dead_bytes < byte_limit // 2:
            self._assignment.release(self._assignment.partitions, PauseReason.BACKPRESSURE)
            self.metrics.backpressure_paused.set(0)
            log.info("backpressure released: %d entries pending", pending)

    def _resync(self, cause: str) -> None:
        """Forget pending work and re-read positions from Redis for every assigned partition."""
        self.metrics.resyncs.labels(cause).inc()
        self._intake.definitions.forget()
        self._pending.clear()
        self._dead.drop(set(self._assignment.partitions))
        self._assignment.unready_all()
        self.metrics.backpressure_paused.set(0)
        self.metrics.pending_entries.set(0)

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self.metrics.rebalances.inc()
        log.info("assigned partitions %s", sorted(self._assignment.add(assigned)))

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        gone = [tp.partition for tp in revoked if tp.partition in self._assignment.parts]
        if not gone:
            return
        async with self._lock:
            flushed = False
            try:
                # 1. flush everything pending, sealed and active, so the next owner starts where we stopped
                async with asyncio.timeout(self.settings.revoke_flush_timeout_s):
                    flushed = await self._flush_all()
            except TimeoutError:
                pass
            except Exception as exc:  # noqa: BLE001 - the consumer would swallow it: hand it to run() instead
                self._failure = exc
            finally:
                # 2. whatever is left of them goes: the next owner (maybe us again) replays it from the checkpoints
                if not flushed:
                    log.warning("could not flush before revoke; dropping pending work of partitions %s", gone)
                self._pending.drop(gone)
                self._dead.drop(set(gone))
                self._assignment.remove(gone)
        log.info("revoked partitions %s", sorted(gone))

    # ---------------------------------------------------------------- flush

    async def _flush_loop(self) -> None:
        async for _ in ticker(self.settings.window_s, self._stopping):
            self._heartbeat = time.monotonic()
            async with self._lock:
                ok = await self._flush_all()
            if line := self.progress.line(self.counters()):
                log.info(line)
            if self.on_halts is not None:
                self.on_halts(self.halted)
            if not ok:
                await wait_or_stop(self._stopping, self._backoff.next_delay())

    async def _flush_all(self) -> bool:
        """Seal the active window and flush every sealed one, oldest first. Caller holds the lock. True when
        nothing is left to retry."""
        self._pending.seal()
        while True:
            self._heartbeat = time.monotonic()  # a long catch-up of many sealed windows is progress, not a hang
            if not await self._flush_step():
                return False
            if not self._pending.sealed:
                return True

    async def _flush_step(self) -> bool:
        """Flush the oldest sealed window. Caller holds the lock. True unless it must be retried."""
        self._assignment.update_lag()
        self._assignment.check_log_end()
        with contextlib.suppress(*TRANSIENT):
            await self._assignment.record_halts()
        if self._redis_health.take_resync():
            self._resync("checkpoint")
            return True
        if not self._pending.sealed:
            if self._dead.pending:
                with contextlib.suppress(*TRANSIENT):
                    await self._dead.send_pending()
            self._update_backpressure()
            return True
        window = self._pending.sealed[0]
        started = time.monotonic()
        try:
            if await self._redis_restarted():
                return True
            # 1. every board: compare-and-set its watermarks, apply its deltas; one round trip for all boards
            batches = window.batches(self.settings.max_script_players)
            results = await self._sink.flush(batches, self._assignment.expected)
            duration = time.monotonic() - started
            fenced = sum(r.outcome is Outcome.FENCED for r in results)
            redefined = sum(r.outcome is Outcome.REDEFINED for r in results)
            self.flushes += 1
            self.metrics.record_window(window, results, duration)
            if fenced or redefined:
                # the boards that did take the window: the ledger a rewind reads must know them too
                took = (Outcome.APPLIED, Outcome.ALREADY_APPLIED)
                landed = [b for b, r in zip(batches, results, strict=True) if r.outcome in took]
                self._assignment.applied(landed, window.first_offsets())
            if fenced:
                # Someone else moved a watermark: we lost the partition (zombie) or Redis lost writes. Start over
                # from what Redis says; boards that did take this window skip it on replay.
                self.fenced += 1
                log.warning("flush fenced on %d boards; resynchronising %s from Redis", fenced, self.assigned)
                self._resync("fenced")
                return True
            if redefined:
                # A board was declared while we folded its events under its old definition: fold them again.
                log.warning("%d boards were (re)declared while this window was folded; resynchronising", redefined)
                self._resync("definition")
                return True
            # 2. learn the new watermarks of the boards that took the window
            self._assignment.applied(batches, window.first_offsets())
            # 3. dead letters into the outbox and out, only now: a window refused (fenced, redefined) is folded
            #    again, and may judge them differently. A letter the DLQ refuses holds its partition's checkpoint
            await self._send_dead_letters(window)
            # 4. every batch is confirmed: move the checkpoints, never past a dead letter still unacknowledged
            if not await self._advance_checkpoints(window):
                return True
        except TRANSIENT as exc:
            if self._resync_if_restarted():  # a new connection met another server (refused: nothing written there)
                return True
            if isinstance(exc, ReplicaAcksShort):  # applied, not yet on enough replicas: the checkpoint holds
                self.metrics.replica_acks_short.inc()
            self._redis_health.failed()
            self.failed_flushes += 1
            self.metrics.windows.labels("failed").inc()
            log.warning("flush failed (%r); keeping %d entries and retrying with backoff", exc, window.entries)
            return False
        self._backoff.reset()
        self._pending.sealed.pop(0)
        if self._on_flush is not None:
            self._on_flush(FlushReport(started, duration, window.offsets(), window.events, window.entries, results))
        # 5. commit Kafka offsets: lag monitoring only, Redis checkpoints are the truth
        await self._commit(self._assignment.checkpoints(window.folds))
        self._update_backpressure()
        return True

    def counters(self) -> Counters:
        """What the progress line reports: events applied, windows flushed, dead letters so far; the lag now."""
        applied = self.metrics.registry.get_sample_value("hotboard_events_total", {"result": "applied"}) or 0
        lag = sum(s.value for m in self.metrics.consumer_lag.collect() for s in m.samples)
        return Counters(int(applied), self.flushes, self.dead_letters, int(lag))

    async def _send_dead_letters(self, window: Window) -> None:
        letters = dlq.past_checkpoints(window.take_dead_letters(), self._assignment.checkpoints(window.folds))
        self.dead_letters += len(letters)
        for partition, (record, error) in letters:
            self.metrics.dlq.labels(error.reason.value).inc()
            where = f"partition {partition} offset {record.offset}"
            if line := self.dead_letter_log.line(error.reason.value, where, error.detail[:200]):
                log.warning(line)
        if not self._dead_letters:
            return
        topic, max_bytes = self.settings.topic, self._dead.max_bytes
        self._dead.add([dlq.letter(topic, p, record, error, max_bytes) for p, (record, error) in letters])
        failures = self._dead.failures
        await self._dead.send_pending()
        self.metrics.dlq_failures.inc(self._dead.failures - failures)

    async def _advance_checkpoints(self, window: Window) -> bool:
        bad = await self._assignment.advance_checkpoints(window.offsets(), self._dead.lowest_pending())
        if not bad:
            return True
        log.warning("checkpoints moved under us (partition: Redis holds %s); resynchronising", bad)
        self._resync("checkpoint")
        return False

    async def _redis_restarted(self) -> bool:
        """Did Redis restart since the partitions were positioned (a new connection met another server, or,
        asked after a failure, Redis says so)? Then what it holds may be older than what we believe it holds,
        and only a resynchronisation from its checkpoints keeps the totals exact. Caller holds the lock."""
        if self._identity.restarted_as is None and self._redis_health.suspect:
            self._redis_health.answered(await self._sink.server_id())
        return self._resync_if_restarted()

    def _resync_if_restarted(self) -> bool:
        if self._identity.restarted_as is None:
            return False
        log.warning(
            "redis restarted (run_id %s -> %s); resynchronising %s",
            self._identity.known,
            self._identity.restarted_as,
            self.assigned,
        )
        self._identity.accept()
        self._sink.forget_registry()
        self._resync("redis_restart")
        return True

    async def _commit(self, offsets: dict[int, int]) -> None:
        mine = {TopicPartition(self.settings.topic, p): o + 1 for p, o in offsets.items() if o >= 0}
        if not mine:
            return
        try:
            await self._consumer.commit(mine)
        except (KafkaError, AssertionError) as exc:  # CommitFailedError during a rebalance, among others
            log.info("offset commit skipped (%r); Redis checkpoints stay authoritative", exc)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, worker: Worker) -> None:
        self._worker = worker

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._worker.on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._worker.on_assigned(assigned)
