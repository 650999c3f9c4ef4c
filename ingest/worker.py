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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Any, NamedTuple, Self

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError, NoOffsetForPartitionError, OffsetOutOfRangeError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from flusher.batch import NO_WATERMARK, BoardResult, Outcome
from flusher.redis_sink import RedisSink
from hotboard.metrics import WorkerMetrics
from hotboard.ops_http import serve_ops
from hotboard.settings import WorkerSettings
from hotboard.timing import Backoff, ticker, wait_or_stop
from ingest import dlq
from ingest.codec import Decoder, InvalidEvent, Reason
from ingest.kafka_config import consumer_config, producer_config
from ingest.partitions import Halt, HaltReason, PartitionState, Seek, position
from ingest.pausing import PauseReason, Pauses
from ingest.window import Folded, Window, boards_to_check

log = logging.getLogger("hotboard.worker")

#: /healthz fails when the flush loop has not ticked for this long (or ten windows, if longer).
LIVENESS_STALE_S = 60.0
#: What Redis, Kafka and the network raise when they fail; anything else is a bug and stops the worker.
TRANSIENT = (RedisError, OSError, KafkaError)


class KafkaUnavailable(RuntimeError):
    """Kafka did not answer within ``kafka_start_timeout_s``."""


class Unreadable(NamedTuple):
    """Stands in for a record the Kafka client could not parse: only where it was is known."""

    topic: str
    partition: int
    offset: int
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()


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
        self._lock = asyncio.Lock()  # one flush / rebalance / positioning step at a time
        self._decoder = Decoder()
        self._parts: dict[int, PartitionState] = {}
        self._pauses = Pauses()
        self._active = Window()
        #: Windows sealed and waiting for their flush, oldest first; the first one is retried as is.
        self._sealed: list[Window] = []
        #: Redis run_id seen when the partitions were positioned; a different one after an outage means the
        #: server restarted and may have lost its last second of writes (AOF everysec): resynchronise.
        self._redis_run_id: str | None = None
        self._redis_suspect = False
        self._backoff = Backoff(cap_s=settings.backoff_max_s)
        self._heartbeat = time.monotonic()
        self._flusher: asyncio.Task[None] | None = None
        #: An unexpected error met inside a rebalance callback (which the consumer would swallow): run() raises it.
        self._failure: Exception | None = None
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
        return self._active.entries + sum(w.entries for w in self._sealed)

    @property
    def alive(self) -> bool:
        """Kubernetes liveness: the flush loop runs and ticked lately (every window, or every backoff step)."""
        if (self._flusher is not None and self._flusher.done()) or self._failure is not None:
            return False
        return time.monotonic() - self._heartbeat < max(LIVENESS_STALE_S, 10 * self.settings.window_s)

    @property
    def ready(self) -> bool:
        """Kubernetes readiness: the consumer holds partitions and has positioned them all (none halted)."""
        return bool(self._parts) and all(st.ready for st in self._parts.values())

    @property
    def assigned(self) -> list[int]:
        return sorted(self._parts)

    @property
    def halted(self) -> dict[int, Halt]:
        return {p: st.halted for p, st in self._parts.items() if st.halted is not None}

    # ---------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Self:
        s = self.settings
        try:
            if self._redis is None:
                self._redis = Redis.from_url(
                    s.redis, socket_timeout=s.redis_timeout_s, socket_connect_timeout=s.redis_timeout_s
                )
                self._stack.push_async_callback(self._redis.aclose)
            self._sink = RedisSink(self._redis, s.topic)
            self._consumer = AIOKafkaConsumer(**consumer_config(s))
            self._producer = AIOKafkaProducer(**producer_config(s))
            await self._start_kafka()
            self._dead = dlq.DeadLetters(self._producer, s.dlq, s.dlq_max_bytes, s.dlq_send_timeout_s)
            self._consumer.subscribe([s.topic], listener=_Listener(self))
            if s.metrics_port:
                server = serve_ops(
                    s.metrics_host,
                    s.metrics_port,
                    self.metrics.registry,
                    lambda: self.ready,
                    lambda: self.alive,
                    s.ops_timeout_s,
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
        clean = False
        try:
            while not self._stopping.is_set():
                if self._flusher.done():
                    self._flusher.result()  # raises what killed it
                    raise RuntimeError("the flush loop ended on its own")
                if self._failure is not None:
                    raise self._failure
                await self._init_partitions()
                await self._poll()
            clean = True
        finally:
            self._stopping.set()
            await self._stop_flusher()
            if clean:
                await self._drain()

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

    # ---------------------------------------------------------------- fetch and fold

    async def _poll(self) -> None:
        try:
            batch = await self._consumer.getmany(timeout_ms=100, max_records=self.settings.max_poll_records)
        except OffsetOutOfRangeError as exc:
            await self._out_of_range(exc.args[0] if exc.args else {})
            return
        except NoOffsetForPartitionError:
            return  # assigned, not positioned yet: _init_partitions seeks it from its checkpoint
        except (UnicodeDecodeError, ValueError) as exc:
            # The client could not parse a record (e.g. a header name that is not UTF-8): find it, dead-letter
            # what is known of it and move past it. Whatever the failed call had drained is fetched again.
            await self._skip_unreadable(exc)
            return
        if batch:
            await self._fold(batch)
            self._update_backpressure()

    async def _fold(self, batch: dict[TopicPartition, list[Any]]) -> None:
        applied = invalid = duplicate = 0
        for tp, records in batch.items():
            for folded in await self._fold_partition(tp, records):
                applied += folded.applied
                invalid += folded.invalid
                duplicate += folded.duplicate
        m = self.metrics
        m.events.labels("applied").inc(applied)
        m.events.labels("invalid").inc(invalid)
        m.events.labels("duplicate").inc(duplicate)

    async def _fold_partition(self, tp: TopicPartition, records: list[Any]) -> list[Folded]:
        """The steady fold while every board is past its watermark; the checked fold from the first event whose
        board is not (its watermark looked up first, the one await in here). In chunks, sealing the window when
        a board's share reaches ``max_script_players``: no script ever carries much more than that."""
        state = self._parts.get(tp.partition)
        if state is None or not state.ready or not records:
            return []  # not ours (any more) or not positioned yet: these records are fetched again
        i = 0
        while i < len(records) and records[i].offset < state.next_offset:
            i += 1  # re-delivered after a seek: folded already
        cap = self.settings.max_script_players
        step = max(100, cap // 4)
        out: list[Folded] = []
        while i < len(records):
            chunk = records[i : i + step] if i or len(records) > step else records
            fold = self._active.fold_for(tp.partition, state.next_offset - 1)
            steady = fold.fold_batch(chunk, state.clear, self._decoder)
            out.append(steady)
            state.next_offset = max(state.next_offset, fold.last_offset + 1)
            if steady.consumed < len(chunk):
                rest = chunk[steady.consumed :]
                unknown = boards_to_check(rest, state.watermarks, self._decoder)
                if unknown:
                    try:
                        marks = await self._sink.load_watermarks(tp.partition, unknown)
                    except TRANSIENT as exc:
                        self._consumer.seek(tp, state.next_offset)  # fetched again once Redis answers
                        log.warning("cannot read watermarks of partition %d (%r); retrying", tp.partition, exc)
                        await wait_or_stop(self._stopping, self._backoff.next_delay())
                        return out
                    if self._parts.get(tp.partition) is not state or not state.ready:
                        return out  # revoked or resynchronised while we waited
                    state.watermarks.update(marks)
                fold = self._active.fold_for(tp.partition, state.next_offset - 1)  # the window may have been sealed
                out.append(fold.fold_checked(rest, state.watermarks, state.clear, self._decoder))
                state.next_offset = max(state.next_offset, fold.last_offset + 1)
            i += len(chunk)
            if fold.largest_board() >= cap:
                self._seal()
        return out

    def _seal(self) -> None:
        """Close the active window; the flush loop sends sealed windows oldest first."""
        if not self._active.is_empty():
            self._sealed.append(self._active)
            self._active = Window()

    def _update_backpressure(self) -> None:
        pending = self.pending_entries + self._dead.pending + self._active.dead_count
        dead_bytes = self._dead.pending_bytes
        self.metrics.pending_entries.set(pending)
        self.metrics.dlq_pending.set(self._dead.pending)
        limit = self.settings.max_pending_entries
        over = pending >= limit or dead_bytes >= self.settings.max_pending_dlq_bytes
        paused = bool(self._pauses.paused_for(PauseReason.BACKPRESSURE))
        if over and not paused:
            self._consumer.pause(*self._tps(self._pauses.pause(self._parts, PauseReason.BACKPRESSURE)))
            self.metrics.backpressure_paused.set(1)
            log.warning(
                "backpressure: %d entries and %d dead-letter bytes pending (limit %d); fetching paused until "
                "flushes land",
                pending,
                dead_bytes,
                limit,
            )
        elif paused and pending < limit // 2 and dead_bytes < self.settings.max_pending_dlq_bytes // 2:
            self._release(self._parts, PauseReason.BACKPRESSURE)
            self.metrics.backpressure_paused.set(0)
            log.info("backpressure released: %d entries pending", pending)

    def _release(self, partitions: Iterable[int], reason: PauseReason) -> None:
        self._consumer.resume(*self._tps(self._pauses.release(partitions, reason)))

    def _tps(self, partitions: Iterable[int]) -> list[TopicPartition]:
        return [TopicPartition(self.settings.topic, p) for p in partitions]

    # ---------------------------------------------------------------- positioning, halts and resync

    async def _init_partitions(self) -> None:
        """Position every waiting partition from its checkpoint in Redis, then let it fetch."""
        now = time.monotonic()
        if all(st.ready or (st.halted is not None and now < st.recheck_at) for st in self._parts.values()):
            return
        async with self._lock:
            waiting = [
                p for p, st in self._parts.items() if not st.ready and (st.halted is None or now >= st.recheck_at)
            ]
            if not waiting:
                return
            tps = self._tps(waiting)
            try:
                run_id = await self._sink.server_id()
                checkpoints = await self._sink.load_checkpoints(waiting)
                starts = await self._consumer.beginning_offsets(tps)
                committed = {
                    p: await self._consumer.committed(tp)
                    for p, tp in zip(waiting, tps, strict=True)
                    if p not in checkpoints
                }
            except TRANSIENT as exc:
                failure: Exception | None = exc
            else:
                failure = None
                if self._redis_run_id is not None and run_id != self._redis_run_id:
                    self._sink.forget_registry()
                self._redis_run_id = run_id
                for p, tp in zip(waiting, tps, strict=True):
                    self._position_one(p, tp, checkpoints.get(p), committed.get(p), starts[tp])
                self._update_halts()
        if failure is not None:
            delay = self._backoff.next_delay()
            log.warning("cannot position partitions %s yet (%r); retrying in %.1fs", waiting, failure, delay)
            await wait_or_stop(self._stopping, delay)

    def _position_one(
        self, p: int, tp: TopicPartition, checkpoint: int | None, committed: int | None, start: int
    ) -> None:
        state = self._parts[p]
        decision = position(checkpoint, committed, start)
        high = self._consumer.highwater(tp)
        if isinstance(decision, Seek) and high is not None and decision.offset > high:
            decision = Halt(
                HaltReason.BEYOND_LOG_END,
                f"checkpoint {checkpoint} lies past the log end {high}: the topic was re-created, or the cluster "
                "rebuilt",
            )
        if isinstance(decision, Halt):
            self._halt(state, decision)
            return
        self._consumer.seek(tp, decision.offset)
        state.reset(NO_WATERMARK if checkpoint is None else checkpoint, decision.offset)
        state.positioned_poll_ms = self._consumer.last_poll_timestamp(tp)
        if self._pauses.paused_for(PauseReason.BACKPRESSURE):
            self._pauses.pause([p], PauseReason.BACKPRESSURE)  # the bound holds for newly positioned ones too
        self._release([p], PauseReason.HALTED)
        self._release([p], PauseReason.POSITIONING)
        log.info("partition %d resumes at %d (checkpoint %s)", p, decision.offset, checkpoint)

    def _halt(self, state: PartitionState, halt: Halt) -> None:
        """History is gone: do not guess. The partition stays paused, /readyz fails, the gauge and an alert
        say so, and it is checked again every ``halt_recheck_s`` (an operator may have restored Redis)."""
        first = state.halted is None or state.halted.reason != halt.reason
        state.ready = False
        state.halted = halt
        state.recheck_at = time.monotonic() + self.settings.halt_recheck_s
        self._consumer.pause(*self._tps(self._pauses.pause([state.partition], PauseReason.HALTED)))
        if first:
            self.metrics.records_lost.inc(halt.lost)
            log.error(
                "partition %d halted (%s): %s. Nothing of it is consumed until an operator restores Redis or "
                "writes its checkpoint (see README, Guarantees)",
                state.partition,
                halt.reason.value,
                halt.detail,
            )
        self._update_halts()

    def _update_halts(self) -> None:
        self.metrics.data_loss.set(len(self.halted))

    async def _out_of_range(self, offsets: dict[TopicPartition, int]) -> None:
        """The broker says a position is outside the log: retention deleted it, or the log is not the one the
        checkpoint came from. Never reset silently (auto_offset_reset is "none")."""
        mine = {tp: o for tp, o in offsets.items() if tp.partition in self._parts}
        if not mine:
            return
        try:
            starts = await self._consumer.beginning_offsets(list(mine))
        except TRANSIENT:
            starts = {}
        for tp, offset in mine.items():
            start = starts.get(tp)
            if start is not None and offset < start:
                halt = Halt(
                    HaltReason.RETENTION_LOST,
                    f"position {offset} but the log starts at {start}: {start - offset} records were deleted "
                    "before they were applied",
                    start - offset,
                )
            else:
                halt = Halt(HaltReason.BEYOND_LOG_END, f"position {offset} is outside the log (re-created topic?)")
            self._halt(self._parts[tp.partition], halt)

    def _check_log_end(self) -> None:
        """A position past the log's end, seen in a fetch made after positioning: the checkpoint belongs to
        another log (a topic deleted and re-created, a rebuilt or mirrored cluster)."""
        for tp in self._tps(self._parts):
            state = self._parts[tp.partition]
            if not state.ready:
                continue
            high = self._consumer.highwater(tp)
            polled = self._consumer.last_poll_timestamp(tp)
            if high is None or polled is None or polled == state.positioned_poll_ms:
                continue
            if state.next_offset > high:
                self._drop_pending([tp.partition])
                self._halt(
                    state,
                    Halt(
                        HaltReason.BEYOND_LOG_END,
                        f"checkpoint {state.checkpoint} (position {state.next_offset}) lies past the log end "
                        f"{high}: the topic was re-created or the cluster rebuilt",
                    ),
                )

    async def _skip_unreadable(self, error: Exception) -> None:
        """Walk each partition one record at a time from where we are: the call that fails again stops right
        before the unreadable record (the position is where it lies). Bounded per partition by
        ``max_poll_records``; a partition not reached this time is walked again on the next failure."""
        log.warning("the Kafka client could not parse a record (%r); finding it", error)
        ready = [p for p, st in self._parts.items() if st.ready]
        for p in ready:
            self._consumer.seek(TopicPartition(self.settings.topic, p), self._parts[p].next_offset)
        for p in ready:
            tp = TopicPartition(self.settings.topic, p)
            walked: list[Any] = []
            try:
                while len(walked) < self.settings.max_poll_records:
                    batch = await self._consumer.getmany(tp, timeout_ms=200, max_records=1)
                    if not batch.get(tp):
                        break
                    walked.extend(batch[tp])
            except (UnicodeDecodeError, ValueError) as exc:
                await self._fold({tp: walked})
                state = self._parts.get(p)
                if state is None or not state.ready:
                    continue
                offset = max(await self._consumer.position(tp), state.next_offset)
                fold = self._active.fold_for(p, state.next_offset - 1)
                reason = InvalidEvent(Reason.UNREADABLE, f"the Kafka client cannot parse this record: {exc!r}"[:500])
                fold.dead.append((Unreadable(self.settings.topic, p, offset), reason))
                fold.last_offset = offset
                state.next_offset = offset + 1
                self._consumer.seek(tp, offset + 1)
                self.metrics.events.labels("invalid").inc()
                log.warning("partition %d offset %d is unreadable; dead-lettered and skipped", p, offset)
                continue
            await self._fold({tp: walked})

    def _drop_pending(self, partitions: Iterable[int]) -> None:
        gone = set(partitions)
        for window in (self._active, *self._sealed):
            window.drop(gone)
        self._sealed = [w for w in self._sealed if w.parts]
        self._dead.drop(gone)

    def _resync(self, cause: str) -> None:
        """Forget pending work and re-read positions from Redis for every assigned partition."""
        self.metrics.resyncs.labels(cause).inc()
        self._active = Window()
        self._sealed = []
        self._dead.drop(set(self._parts))
        for state in self._parts.values():
            state.ready = False
        self._consumer.pause(*self._tps(self._pauses.pause(self._parts, PauseReason.POSITIONING)))
        # Nothing is pending any more: a pause for backpressure must not outlive the work it held back.
        self._release(self._parts, PauseReason.BACKPRESSURE)
        self.metrics.backpressure_paused.set(0)
        self.metrics.pending_entries.set(0)

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self.metrics.rebalances.inc()
        mine = [tp for tp in assigned if tp.topic == self.settings.topic]
        for tp in mine:
            self._parts[tp.partition] = PartitionState(tp.partition)
        # Paused until _init_partitions has read their checkpoints; seeking happens there, outside the callback.
        self._pauses.pause([tp.partition for tp in mine], PauseReason.POSITIONING)
        self._consumer.pause(*mine)
        log.info("assigned partitions %s", sorted(tp.partition for tp in mine))

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        gone = [tp.partition for tp in revoked if tp.partition in self._parts]
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
                self._drop_pending(gone)
                self._pauses.forget(gone)
                for p in gone:
                    self._parts.pop(p, None)
                    with contextlib.suppress(KeyError):
                        self.metrics.consumer_lag.remove(str(p))
                self._update_halts()
        log.info("revoked partitions %s", sorted(gone))

    # ---------------------------------------------------------------- flush

    async def _flush_loop(self) -> None:
        async for _ in ticker(self.settings.window_s, self._stopping):
            self._heartbeat = time.monotonic()
            async with self._lock:
                ok = await self._flush_all()
            if not ok:
                await wait_or_stop(self._stopping, self._backoff.next_delay())

    async def _flush_all(self) -> bool:
        """Seal the active window and flush every sealed one, oldest first. Caller holds the lock. True when
        nothing is left to retry."""
        self._seal()
        while True:
            if not await self._flush_step():
                return False
            if not self._sealed:
                return True

    async def _flush_step(self) -> bool:
        """Flush the oldest sealed window. Caller holds the lock. True unless it must be retried."""
        self._update_lag()
        self._check_log_end()
        if not self._sealed:
            if self._dead.pending:
                with contextlib.suppress(*TRANSIENT):
                    await self._dead.send_pending()
            self._update_backpressure()
            return True
        window = self._sealed[0]
        started = time.monotonic()
        try:
            if self._redis_suspect and await self._redis_restarted():
                return True
            # 1. dead letters into the outbox and out; a letter the DLQ refuses holds its partition's checkpoint
            letters = window.take_dead_letters()
            for _, error in letters:
                self.metrics.dlq.labels(error.reason.value).inc()
            self._dead.add([dlq.letter(record, error, self._dead.max_bytes) for record, error in letters])
            failures = self._dead.failures
            await self._dead.send_pending()
            self.metrics.dlq_failures.inc(self._dead.failures - failures)
            # 2. every board: compare-and-set its watermarks, apply its deltas; one round trip for all boards
            batches, saturated = window.batches(self.settings.max_script_players)
            results = await self._sink.flush(batches, self._expected)
            duration = time.monotonic() - started
            fenced = [r for r in results if r.outcome is Outcome.FENCED]
            self._record_flush(window, results, duration, saturated + sum(r.saturated for r in results))
            if fenced:
                # Someone else moved a watermark: we lost the partition (zombie) or Redis lost writes. Start over
                # from what Redis says; boards that did take this window skip it on replay.
                self.fenced += 1
                log.warning("flush fenced on %d boards; resynchronising %s from Redis", len(fenced), self.assigned)
                self._resync("fenced")
                return True
            # 3. learn the new watermarks of the boards that took the window
            for batch in batches:
                for p, offset in batch.offsets.items():
                    state = self._parts.get(p)
                    if state is not None:
                        state.applied(batch.board, offset)
            # 4. every batch is confirmed: move the checkpoints, never past a dead letter still unacknowledged
            if not await self._advance_checkpoints(window):
                return True
        except TRANSIENT as exc:
            self._redis_suspect = True
            self.failed_flushes += 1
            self.metrics.windows.labels("failed").inc()
            log.warning("flush failed (%r); keeping %d entries and retrying with backoff", exc, window.entries)
            return False
        self._backoff.reset()
        self._sealed.pop(0)
        if self._on_flush is not None:
            self._on_flush(FlushReport(started, duration, window.offsets(), window.events, window.entries, results))
        # 5. commit Kafka offsets: lag monitoring only, Redis checkpoints are the truth
        await self._commit({p: st.checkpoint for p, st in self._parts.items() if p in window.parts})
        self._update_backpressure()
        return True

    async def _advance_checkpoints(self, window: Window) -> bool:
        lowest_letter = self._dead.lowest_pending()
        moves: dict[int, tuple[int, int]] = {}
        for p, last in window.offsets().items():
            state = self._parts.get(p)
            if state is None:
                continue
            new = min(last, lowest_letter.get(p, last + 1) - 1)
            if new > state.checkpoint:
                moves[p] = (state.checkpoint, new)
        results = await self._sink.advance_checkpoints(moves)
        moved = [r for r in results if r.ok]
        for r in moved:
            self._parts[r.partition].checkpoint = moves[r.partition][1]
        if len(moved) < len(results):
            bad = {r.partition: r.previous for r in results if not r.ok}
            log.warning("checkpoints moved under us (partition: Redis holds %s); resynchronising", bad)
            self._resync("checkpoint")
            self._sealed = []
            return False
        return True

    async def _redis_restarted(self) -> bool:
        """After a failed flush: did Redis restart meanwhile? Then what it holds may be older than what we
        believe it holds, and only a resynchronisation from its checkpoints keeps the totals exact."""
        run_id = await self._sink.server_id()
        self._redis_suspect = False
        if self._redis_run_id is None or run_id == self._redis_run_id:
            self._redis_run_id = run_id
            return False
        log.warning(
            "redis restarted (run_id %s -> %s); resynchronising partitions %s from its checkpoints",
            self._redis_run_id,
            run_id,
            self.assigned,
        )
        self._sink.forget_registry()
        self._resync("redis_restart")
        return True

    def _expected(self, board: str, partition: int) -> int:
        state = self._parts.get(partition)
        return NO_WATERMARK if state is None else state.watermarks.get(board, NO_WATERMARK)

    def _record_flush(self, window: Window, results: list[BoardResult], duration: float, saturated: int) -> None:
        self.flushes += 1
        fenced = any(r.outcome is Outcome.FENCED for r in results)
        writes = sum(r.writes for r in results)
        self.metrics.record_flush(
            events=window.events, entries=window.entries, writes=writes, fenced=fenced, duration_s=duration
        )
        self.metrics.saturated.inc(saturated)
        times = [ts for fold in window.parts.values() for ts in (fold.min_ts_ms, fold.max_ts_ms) if ts is not None]
        self.metrics.record_freshness(time.time() * 1000, times)
        log.debug(
            "flushed %d events as %d writes in %d batches in %.1f ms",
            window.events,
            writes,
            len(results),
            duration * 1000,
        )

    async def _commit(self, offsets: dict[int, int]) -> None:
        mine = {TopicPartition(self.settings.topic, p): o + 1 for p, o in offsets.items() if o >= 0}
        if not mine:
            return
        try:
            await self._consumer.commit(mine)
        except (KafkaError, AssertionError) as exc:  # CommitFailedError during a rebalance, among others
            log.info("offset commit skipped (%r); Redis checkpoints stay authoritative", exc)

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
