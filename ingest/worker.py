"""One hotboard worker: Kafka partitions in, one-second windows folded, applied exactly once to Redis.

Exactly-once rests on three rules:

1. Redis is the truth. Every board keeps, per partition, the last offset applied to it (its watermark),
   written in the same atomic step as the window's deltas. A (re)assigned partition resumes after the
   lowest watermark of the boards it fed, and an event at or below a board's watermark is skipped for
   that board.
2. Every flush is a compare-and-set: it names the watermarks it expects. A zombie (paused past its
   session timeout while a new owner took over), or a Redis that lost its last second of writes, sees a
   mismatch: the board is not touched and the worker resynchronises from Redis.
3. Kafka commits follow successful flushes and serve lag monitoring only; losing one costs a replay that
   rule 1 skips, never a double count.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from flusher.redis_sink import NO_WATERMARK, BoardResult, Outcome, RedisSink
from hotboard.metrics import WorkerMetrics
from hotboard.ops_http import serve_ops
from hotboard.settings import WorkerSettings
from hotboard.timing import Backoff, ticker, wait_or_stop
from ingest.codec import Decoder, InvalidEvent
from ingest.dlq import DeadLetters
from ingest.window import Window

log = logging.getLogger("hotboard.worker")

#: /healthz fails when the flush loop has not ticked for this long (or ten windows, if longer).
LIVENESS_STALE_S = 60.0


class KafkaUnavailable(RuntimeError):
    """Kafka did not answer within ``kafka_start_timeout_s``."""


@dataclass(slots=True)
class PartitionState:
    """What this worker knows about one assigned partition."""

    partition: int
    #: False until the watermarks are loaded and the position is set; records are ignored meanwhile.
    ready: bool = False
    #: Records below this offset were folded already (guards against re-delivery after a seek).
    next_offset: int = -1
    #: board -> last offset of this partition applied to that board, as Redis holds it.
    watermarks: dict[str, int] = field(default_factory=dict)
    #: Offsets up to here may be below some board's watermark and take the per-board check.
    replay_until: int = -1

    def set_watermarks(self, watermarks: dict[str, int]) -> None:
        self.watermarks = watermarks
        self.replay_until = max(watermarks.values(), default=-1)


def resume_offset(watermarks: dict[str, int]) -> int | None:
    """Where a partition resumes: after the lowest watermark of the boards it fed, or None when it fed none
    (then the committed Kafka offset, or the beginning, applies)."""
    return min(watermarks.values()) + 1 if watermarks else None


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
    """``async with Worker(settings) as worker: await worker.run()``; ``stop()`` (SIGTERM) drains and exits."""

    def __init__(
        self,
        settings: WorkerSettings,
        *,
        redis: Redis | None = None,
        metrics: WorkerMetrics | None = None,
        handle_signals: bool = True,
        on_flush: Callable[[FlushReport], None] | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics or WorkerMetrics()
        self._redis = redis
        self._handle_signals = handle_signals
        self._on_flush = on_flush
        self._stack = AsyncExitStack()
        self._stopping = asyncio.Event()
        self._lock = asyncio.Lock()  # one flush / rebalance step at a time
        self._decoder = Decoder()
        self._parts: dict[int, PartitionState] = {}
        self._active = Window()
        self._sealed: Window | None = None  # a window whose flush failed; retried as is
        self._paused_for_backpressure = False
        #: Redis run_id seen when the partitions were positioned; a different one after an outage means the
        #: server restarted and may have lost its last second of writes (AOF everysec): resynchronise.
        self._redis_run_id: str | None = None
        self._redis_suspect = False
        self._backoff = Backoff(cap_s=settings.backoff_max_s)
        self._heartbeat = time.monotonic()
        self.flushes = 0
        self.fenced = 0
        self.failed_flushes = 0

    def __repr__(self) -> str:
        return (
            f"<Worker parts={sorted(self._parts)} flushes={self.flushes} fenced={self.fenced} "
            f"failed={self.failed_flushes} pending={self.pending_entries}>"
        )

    @property
    def pending_entries(self) -> int:
        return self._active.entries + (self._sealed.entries if self._sealed else 0)

    @property
    def alive(self) -> bool:
        """Kubernetes liveness: the flush loop ticked lately (it ticks every window, or every backoff step)."""
        return time.monotonic() - self._heartbeat < max(LIVENESS_STALE_S, 10 * self.settings.window_s)

    @property
    def ready(self) -> bool:
        """Kubernetes readiness: the consumer holds partitions and has positioned them all."""
        return bool(self._parts) and all(st.ready for st in self._parts.values())

    @property
    def assigned(self) -> list[int]:
        return sorted(self._parts)

    # ---------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Self:
        s = self.settings
        try:
            if self._redis is None:
                self._redis = Redis.from_url(s.redis, socket_timeout=30, socket_connect_timeout=5)
                self._stack.push_async_callback(self._redis.aclose)
            self._sink = RedisSink(self._redis, s.topic)
            self._consumer = AIOKafkaConsumer(
                bootstrap_servers=s.kafka,
                group_id=s.group,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                session_timeout_ms=s.session_timeout_ms,
                heartbeat_interval_ms=max(100, s.session_timeout_ms // 6),
                max_poll_interval_ms=max(60_000, s.session_timeout_ms * 3),
                request_timeout_ms=max(30_000, s.session_timeout_ms + 5000),
                max_partition_fetch_bytes=4 * 1024 * 1024,
                fetch_max_bytes=32 * 1024 * 1024,
            )
            self._producer = AIOKafkaProducer(
                bootstrap_servers=s.kafka, enable_idempotence=False, acks="all", linger_ms=5
            )
            await self._start_kafka()
            self._dead = DeadLetters(self._producer, s.dlq)
            self._consumer.subscribe([s.topic], listener=_Listener(self))
            if s.metrics_port:
                server = serve_ops(
                    s.metrics_host, s.metrics_port, self.metrics.registry, lambda: self.ready, lambda: self.alive
                )
                self._stack.callback(server.server_close)
                self._stack.callback(server.shutdown)
            if self._handle_signals:
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(sig, self.stop)
                    self._stack.callback(loop.remove_signal_handler, sig)
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def _start_kafka(self) -> None:
        deadline = time.monotonic() + self.settings.kafka_start_timeout_s
        backoff = Backoff(cap_s=2.0)
        for client in (self._consumer, self._producer):
            while True:
                try:
                    await asyncio.wait_for(client.start(), timeout=max(0.1, deadline - time.monotonic()))
                    self._stack.push_async_callback(client.stop)
                    break
                except (KafkaConnectionError, KafkaError, OSError, TimeoutError) as exc:
                    with contextlib.suppress(Exception):
                        await client.stop()
                    if time.monotonic() + 0.5 >= deadline:
                        raise KafkaUnavailable(
                            f"Kafka at {self.settings.kafka} did not answer within "
                            f"{self.settings.kafka_start_timeout_s:.0f}s: {exc!r}"
                        ) from exc
                    log.warning("kafka not reachable yet at %s (%r); retrying", self.settings.kafka, exc)
                    await asyncio.sleep(backoff.next_delay())

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stack.aclose()

    def stop(self) -> None:
        """Signal-safe: only flips the flag; ``run()`` winds down (flush, commit, leave the group)."""
        if not self._stopping.is_set():
            log.info("stop requested: draining")
        self._stopping.set()

    async def run(self) -> None:
        flusher = asyncio.create_task(self._flush_loop(), name="hotboard-flush")
        try:
            while not self._stopping.is_set():
                await self._init_partitions()
                batch = await self._consumer.getmany(timeout_ms=100, max_records=self.settings.max_poll_records)
                if batch:
                    self._fold(batch)
                    self._update_backpressure()
        finally:
            self._stopping.set()
            await flusher
            await self._drain()

    async def _drain(self) -> None:
        """Final flush within the shutdown budget; anything not flushed is replayed by the next owner."""
        deadline = time.monotonic() + self.settings.shutdown_timeout_s
        while time.monotonic() < deadline:
            async with self._lock:
                if await self._flush_step():
                    log.info("drained: %r", self)
                    return
            await asyncio.sleep(min(self._backoff.next_delay(), max(0.0, deadline - time.monotonic())))
        log.warning(
            "shutdown budget spent with %d entries unflushed; the next owner replays them", self.pending_entries
        )

    # ---------------------------------------------------------------- fold (hot path: no awaits in here)

    def _fold(self, batch: dict[TopicPartition, list[Any]]) -> None:
        decoder = self._decoder
        applied = invalid = duplicate = 0
        for tp, records in batch.items():
            state = self._parts.get(tp.partition)
            if state is None or not state.ready or not records:
                continue  # not ours (any more) or not positioned yet: these records are fetched again
            fold = self._active.fold_for(tp.partition)
            dead_before = len(fold.dead)
            i, n = 0, len(records)
            while i < n and records[i].offset < state.next_offset:
                i += 1  # re-delivered after a seek: folded already
            if i == n:
                continue
            # Replay right after (re)positioning: each event is checked against its own board's watermark.
            watermarks, replay_until = state.watermarks, state.replay_until
            while i < n and records[i].offset <= replay_until:
                record = records[i]
                i += 1
                try:
                    board, player, delta, ts = decoder.fields(record.value)
                except InvalidEvent as exc:
                    fold.dead.append((record, exc))
                    continue
                if record.offset <= watermarks.get(board, NO_WATERMARK):
                    duplicate += 1
                    continue
                fold.add(board, player, delta)
                if ts is not None:
                    fold.note_ts(ts)
                applied += 1
            # Steady state: past every watermark.
            if i < n:
                applied += fold.fold_batch(records[i:] if i else records, decoder)
            fold.last_offset = records[-1].offset
            state.next_offset = fold.last_offset + 1
            invalid += len(fold.dead) - dead_before
        m = self.metrics
        m.events.labels("applied").inc(applied)
        m.events.labels("invalid").inc(invalid)
        m.events.labels("duplicate").inc(duplicate)

    def _update_backpressure(self) -> None:
        pending = self.pending_entries
        self.metrics.pending_entries.set(pending)
        limit = self.settings.max_pending_entries
        if not self._paused_for_backpressure and pending >= limit:
            self._paused_for_backpressure = True
            self._consumer.pause(*self._tps(self._parts))
            self.metrics.backpressure_paused.set(1)
            log.warning(
                "backpressure: %d entries pending (limit %d); fetching paused until flushes land", pending, limit
            )
        elif self._paused_for_backpressure and pending < limit // 2:
            self._paused_for_backpressure = False
            self._consumer.resume(*self._tps(p for p, st in self._parts.items() if st.ready))
            self.metrics.backpressure_paused.set(0)
            log.info("backpressure released: %d entries pending", pending)

    def _tps(self, partitions: Iterable[int]) -> list[TopicPartition]:
        return [TopicPartition(self.settings.topic, p) for p in partitions]

    # ---------------------------------------------------------------- partitions: assignment and resync

    async def _init_partitions(self) -> None:
        """Position every not-yet-ready partition from the watermarks in Redis, then let it fetch."""
        if all(st.ready for st in self._parts.values()):
            return
        async with self._lock:
            waiting = [p for p, st in self._parts.items() if not st.ready]
            if not waiting:
                return
            try:
                self._redis_run_id = await self._sink.server_id()
                marks = await self._sink.load_watermarks(waiting)
                committed = {
                    p: await self._consumer.committed(tp) for p, tp in zip(waiting, self._tps(waiting), strict=True)
                }
            except (RedisError, OSError, KafkaError) as exc:
                failure: Exception | None = exc
            else:
                failure = None
                await self._position(waiting, marks, committed)
        if failure is not None:
            delay = self._backoff.next_delay()
            log.warning("cannot position partitions %s yet (%r); retrying in %.1fs", waiting, failure, delay)
            await wait_or_stop(self._stopping, delay)

    async def _position(
        self, waiting: list[int], marks: dict[int, dict[str, int]], committed: dict[int, int | None]
    ) -> None:
        for p, tp in zip(waiting, self._tps(waiting), strict=True):
            state = self._parts[p]
            state.set_watermarks(marks[p])
            resume = resume_offset(marks[p])
            if resume is None:
                resume = committed[p]
            if resume is None:
                await self._consumer.seek_to_beginning(tp)
                state.next_offset = -1
            else:
                self._consumer.seek(tp, resume)
                state.next_offset = resume
            state.ready = True
            log.info("partition %d resumes at %s (%d boards with watermarks)", p, resume, len(marks[p]))
        if not self._paused_for_backpressure:
            self._consumer.resume(*self._tps(waiting))

    def _unready_all(self) -> None:
        """Forget pending work and re-read positions from Redis for every assigned partition."""
        self._active = Window()
        self._sealed = None
        for state in self._parts.values():
            state.ready = False
        self._consumer.pause(*self._tps(self._parts))
        # Nothing is pending any more: _position resumes each partition once it is positioned, so a pause
        # for backpressure must not outlive the work it was holding back.
        self._paused_for_backpressure = False
        self.metrics.backpressure_paused.set(0)
        self.metrics.pending_entries.set(0)

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self.metrics.rebalances.inc()
        mine = [tp for tp in assigned if tp.topic == self.settings.topic]
        for tp in mine:
            self._parts[tp.partition] = PartitionState(tp.partition)
        # Paused until _init_partitions has read their watermarks; seeking happens there, outside the callback.
        self._consumer.pause(*mine)
        log.info("assigned partitions %s", sorted(tp.partition for tp in mine))

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        gone = [tp.partition for tp in revoked if tp.partition in self._parts]
        if not gone:
            return
        async with self._lock:
            # 1. flush everything pending so the next owner starts where we stopped
            try:
                flushed = await asyncio.wait_for(self._flush_step(), timeout=self.settings.session_timeout_ms / 2000)
            except TimeoutError:
                flushed = False
            if not flushed:
                # 2. or drop the revoked partitions' pending work: the next owner replays it from Redis
                log.warning("could not flush before revoke; dropping pending work of partitions %s", gone)
                self._active.drop(gone)
                if self._sealed is not None:
                    self._sealed.drop(gone)
            for p in gone:
                self._parts.pop(p, None)
                with contextlib.suppress(KeyError):
                    self.metrics.consumer_lag.remove(str(p))
        log.info("revoked partitions %s", sorted(gone))

    # ---------------------------------------------------------------- flush

    async def _flush_loop(self) -> None:
        async for _ in ticker(self.settings.window_s, self._stopping):
            self._heartbeat = time.monotonic()
            async with self._lock:
                ok = await self._flush_step()
            if not ok:
                await wait_or_stop(self._stopping, self._backoff.next_delay())

    async def _flush_step(self) -> bool:
        """Flush the sealed window (or seal the active one). Caller holds the lock. True when nothing is
        left to retry."""
        self._update_lag()
        if self._sealed is None:
            if self._active.is_empty():
                self._update_backpressure()
                return True
            self._sealed, self._active = self._active, Window()
        window = self._sealed
        started = time.monotonic()
        try:
            if self._redis_suspect and await self._redis_restarted():
                return True
            # 1. dead letters first: no watermark or offset may pass an invalid record before it is in the DLQ
            letters = window.dead_letters()
            if letters:
                await self._dead.send_all(letters)
                for _, error in letters:
                    self.metrics.dlq.labels(error.reason.value).inc()
                for fold in window.parts.values():
                    fold.dead.clear()
            # 2. every board: compare-and-set its watermarks, apply its deltas; one round trip for all boards
            batches = window.batches()
            results = await self._sink.flush(batches, self._expected)
        except (RedisError, OSError, KafkaError) as exc:
            self._redis_suspect = True
            self.failed_flushes += 1
            self.metrics.windows.labels("failed").inc()
            log.warning("flush failed (%r); keeping %d entries and retrying with backoff", exc, window.entries)
            return False
        duration = time.monotonic() - started
        self._backoff.reset()
        # 3. learn the new watermarks of the boards that took the window
        fenced = False
        writes = 0
        for batch, result in zip(batches, results, strict=True):
            if result.outcome is Outcome.FENCED:
                fenced = True
                continue
            writes += result.writes
            for p, offset in batch.offsets.items():
                state = self._parts.get(p)
                if state is not None:
                    state.watermarks[batch.board] = offset
                    state.replay_until = max(state.replay_until, offset)
        self._record_flush(window, results, writes, duration)
        if self._on_flush is not None:
            self._on_flush(FlushReport(started, duration, window.offsets(), window.events, window.entries, results))
        self._sealed = None
        if fenced:
            # Someone else moved a watermark: we lost the partition (zombie) or Redis lost writes. Start over
            # from what Redis says; boards that did take this window skip it on replay.
            self.fenced += 1
            log.warning(
                "flush fenced on %d boards; resynchronising partitions %s from Redis",
                sum(r.outcome is Outcome.FENCED for r in results),
                self.assigned,
            )
            self._unready_all()
            return True
        # 4. commit Kafka offsets: lag monitoring only, Redis watermarks are the truth
        await self._commit(window.offsets())
        self._update_backpressure()
        return True

    async def _redis_restarted(self) -> bool:
        """After a failed flush: did Redis restart meanwhile? Then what it holds may be older than what we
        believe it holds, and only a resynchronisation from its watermarks keeps the totals exact."""
        run_id = await self._sink.server_id()
        self._redis_suspect = False
        if self._redis_run_id is None or run_id == self._redis_run_id:
            self._redis_run_id = run_id
            return False
        log.warning(
            "redis restarted (run_id %s -> %s); resynchronising partitions %s from its watermarks",
            self._redis_run_id,
            run_id,
            self.assigned,
        )
        self._unready_all()
        return True

    def _expected(self, board: str, partition: int) -> int:
        state = self._parts.get(partition)
        return NO_WATERMARK if state is None else state.watermarks.get(board, NO_WATERMARK)

    def _record_flush(self, window: Window, results: list[BoardResult], writes: int, duration: float) -> None:
        m = self.metrics
        self.flushes += 1
        fenced = any(r.outcome is Outcome.FENCED for r in results)
        m.windows.labels("fenced" if fenced else "flushed").inc()
        applied_events = 0 if fenced else window.events
        m.redis_writes.inc(writes)
        if writes:
            m.record_savings(applied_events, writes)
            m.window_entries.observe(window.entries)
            m.flush_seconds.observe(duration)
        now_ms = time.time() * 1000
        for fold in window.parts.values():
            for ts in (fold.min_ts_ms, fold.max_ts_ms):
                if ts is not None:
                    m.freshness_seconds.observe(max(0.0, (now_ms - ts) / 1000))
        log.debug(
            "flushed %d events as %d writes on %d boards in %.1f ms",
            window.events,
            writes,
            len(results),
            duration * 1000,
        )

    async def _commit(self, offsets: dict[int, int]) -> None:
        mine = {TopicPartition(self.settings.topic, p): o + 1 for p, o in offsets.items() if p in self._parts}
        if not mine:
            return
        try:
            await self._consumer.commit(mine)
        except (KafkaError, AssertionError) as exc:  # CommitFailedError during a rebalance, among others
            log.info("offset commit skipped (%r); Redis watermarks stay authoritative", exc)

    def _update_lag(self) -> None:
        for tp in self._tps(self._parts):
            high = self._consumer.highwater(tp)
            state = self._parts.get(tp.partition)
            if high is None or state is None or not state.ready or state.next_offset < 0:
                continue
            self.metrics.consumer_lag.labels(str(tp.partition)).set(max(0, high - state.next_offset))


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, worker: Worker) -> None:
        self._worker = worker

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._worker.on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._worker.on_assigned(assigned)
