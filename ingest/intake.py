"""Fetch and fold: records from the consumer into the pending window, each event exactly once.

The steady fold runs while every board of a partition is known to be past its watermark; from the first event
whose board is not, the board's watermark is looked up (the one await between a fetch and its fold) and the
checked fold skips what the board has applied already. Folding goes in chunks, sealing the window when a board's
share reaches ``max_script_players``, so no flush script carries much more than that.
"""

from __future__ import annotations

import asyncio
import logging
import time
from operator import attrgetter

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import NoOffsetForPartitionError, OffsetOutOfRangeError

from flusher.batch import Sink
from hotboard.boards import BoardDef, DefinitionError
from hotboard.codec import Decoded, Decoder, InvalidEvent, Reason, boards_to_check
from hotboard.records import Record
from hotboard.timing import Backoff, wait_or_stop
from ingest import plain_event, seasons
from ingest.assignment import Assignment
from ingest.definitions import DefinitionCache
from ingest.errors import TRANSIENT
from ingest.folds import FoldCounts
from ingest.lenient_records import UNDECODABLE, lenient_fetches, lenient_walks, unreadable_header
from ingest.metrics import WorkerMetrics
from ingest.partitions import Halt, HaltReason
from ingest.pending import Pending
from ingest.redis_health import RedisHealth
from ingest.settings import WorkerSettings

#: How long one poll waits for records: short, so a window's tick and a stop request are met within it.
FETCH_WAIT_MS = 100
#: Folds go in chunks of a quarter of ``max_script_players`` (at least this many records): the seal check
#: between chunks then keeps any board's share of a window below 1.25 x the cap.
CHUNKS_PER_SCRIPT = 4
MIN_CHUNK_RECORDS = 100
#: A halt reason is stored in Redis and shown on /readyz: an exception's repr is cut to this.
MAX_REASON_CHARS = 500

log = logging.getLogger("hotboard.worker")

_HEADERS = attrgetter("headers")


class Intake:
    def __init__(
        self,
        settings: WorkerSettings,
        consumer: AIOKafkaConsumer,
        assignment: Assignment,
        pending: Pending,
        sink: Sink,
        metrics: WorkerMetrics,
        stopping: asyncio.Event,
        backoff: Backoff,
        redis_health: RedisHealth,
    ) -> None:
        self.settings = settings
        self._consumer = consumer
        self._assignment = assignment
        self._pending = pending
        self._sink = sink
        self._metrics = metrics
        self._stopping = stopping
        self._backoff = backoff
        #: Told when Redis failed (did it restart?) or no longer holds what the worker positioned from.
        self._redis_health = redis_health
        self._decoder = Decoder()
        #: Definitions of the boards seen, bounded (their one cache); forgotten on every resynchronisation.
        self.definitions = DefinitionCache(sink.load_declared, settings.max_cached_definitions)
        self._forget_at = time.monotonic() + settings.forget_idle_boards_s

    async def poll(self) -> bool:
        """One fetch, folded. True when it folded records (the caller re-checks backpressure)."""
        self.forget_idle()
        try:
            batch = await self._consumer.getmany(timeout_ms=FETCH_WAIT_MS, max_records=self.settings.max_poll_records)
        except OffsetOutOfRangeError as exc:
            await self._out_of_range(exc.args[0] if exc.args else {})
            return False
        except NoOffsetForPartitionError:
            return False  # assigned, not positioned yet: positioning seeks it from its checkpoint
        except UNDECODABLE as exc:
            # The client could not parse a record (e.g. a header name that is not UTF-8) or decode a batch (a
            # codec without its library, damaged compressed bytes): find the partition, dead-letter what can be
            # known of the record, or halt the partition. Whatever the failed call had drained is fetched again.
            await self._skip_unreadable(exc)
            return True
        if batch:
            await self.fold(batch)
        return bool(batch)

    async def _out_of_range(self, offsets: dict[TopicPartition, int]) -> list[int]:
        """The broker says a position is outside the log: retention deleted it, or the log is not the one the
        checkpoint came from. Never reset silently (auto_offset_reset is "none"). Returns the halted ones."""
        parts = self._assignment.parts
        mine = {tp: o for tp, o in offsets.items() if tp.partition in parts}
        if not mine:
            return []
        try:
            starts = await self._consumer.beginning_offsets(list(mine))
        except Exception:  # noqa: BLE001 - the halt is right either way; only its wording needs the start
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
            if (state := parts.get(tp.partition)) is not None:
                self._assignment.halt(state, halt)
        return [tp.partition for tp in mine]

    def forget_idle(self) -> None:
        """Every ``forget_idle_boards_s``: idle boards leave the partitions' bookkeeping. Runs here, between
        fetches, never while a fold waits on a lookup (whose boards must stay known until it folds)."""
        now = time.monotonic()
        if now < self._forget_at:
            return
        self._forget_at = now + self.settings.forget_idle_boards_s
        forgotten, known = self._assignment.forget_idle(self._pending.boards_of)
        self._metrics.boards_forgotten.inc(forgotten)
        self._metrics.known_boards.set(known)

    async def fold(self, batch: dict[TopicPartition, list[Record]]) -> None:
        applied = invalid = duplicate = 0
        for tp, records in batch.items():
            # A record the lenient parser read (a header name that is not UTF-8) may arrive in any fetch after a
            # lenient walk, so every batch is checked from the first walk on: at C speed for records without headers.
            if (
                lenient_walks()
                and any(map(_HEADERS, records))
                and any(unreadable_header(r) for r in records if r.headers)
            ):
                results = await self._fold_leniently(tp, records)
            else:
                results = await self._fold_partition(tp, records)
            for folded in results:
                applied += folded.applied
                invalid += folded.invalid
                duplicate += folded.duplicate
        m = self._metrics
        m.events.labels("applied").inc(applied)
        m.events.labels("invalid").inc(invalid)
        m.events.labels("duplicate").inc(duplicate)

    async def _fold_partition(self, tp: TopicPartition, records: list[Record]) -> list[FoldCounts]:
        state = self._assignment.ready_state(tp.partition)
        if state is None or not records:
            return []  # not ours (any more) or not positioned yet: these records are fetched again
        i = 0
        while i < len(records) and records[i].offset < state.next_offset:
            i += 1  # re-delivered after a seek: folded already
        cap = self.settings.max_script_players
        step = max(MIN_CHUNK_RECORDS, cap // CHUNKS_PER_SCRIPT)
        out: list[FoldCounts] = []
        while i < len(records):
            chunk = records[i : i + step] if i or len(records) > step else records
            fold = self._pending.active.fold_for(tp.partition)
            steady = fold.fold_batch(chunk, state.fast, self._decoder)
            out.append(steady)
            state.folded_to(fold.last_offset)
            if steady.consumed < len(chunk):
                rest = chunk[steady.consumed :]
                decoded = plain_event.decode_all(rest, self._decoder)
                try:
                    defs = await self._definitions(decoded, state.fast)
                    # seasonal boards' events go to their period's board (watermarks are per period board)
                    decoded, defs, periods = seasons.route(rest, decoded, defs)
                    unknown = boards_to_check(decoded, state.watermarks)
                    if unknown:
                        # a checkpoint move may land while the lookup's reply is read: either side is ours
                        known = state.checkpoint_candidates()
                        marks, checkpoint = await self._sink.load_watermarks(tp.partition, unknown)
                except TRANSIENT as exc:
                    # fetched again once Redis answers, unless a rebalance took it (or a resync repositions it)
                    self._assignment.seek_back(state)
                    self._redis_health.failed()  # did it restart? the next flush asks first
                    log.warning("cannot read watermarks of partition %d (%r); retrying", tp.partition, exc)
                    await wait_or_stop(self._stopping, self._backoff.next_delay())
                    return out
                if self._assignment.ready_state(tp.partition) is not state:
                    return out  # revoked or resynchronised while we waited
                if unknown:
                    if checkpoint not in (*state.checkpoint_candidates(), *known):
                        # Redis lost (or someone moved) the checkpoint these watermarks are relative to: an
                        # emptied Redis answers "no watermark" for a board it applied. Resynchronise first.
                        self._assignment.seek_back(state)
                        self._redis_health.lost_checkpoint()
                        log.warning(
                            "partition %d: checkpoint %d in Redis, %d expected; resynchronising",
                            tp.partition,
                            checkpoint,
                            state.checkpoint,
                        )
                        return out
                    state.learned(marks)
                fold = self._pending.active.fold_for(tp.partition)  # may have been sealed
                out.append(fold.fold_checked(rest, decoded, state.watermarks, state.clear, defs, state.fast, periods))
                state.folded_to(fold.last_offset)
            i += len(chunk)
            if fold.largest_board() >= cap:
                self._pending.seal()
        return out

    async def _definitions(
        self, decoded: list[Decoded], fast: dict[str, BoardDef]
    ) -> dict[str, BoardDef | DefinitionError]:
        """The definitions of the boards in ``decoded``: those of the fast path's boards as they were folded
        (their flushes check them), the others read from Redis unless cached (declared ones only: an
        undeclared board may be declared any time). A stale one is caught by the flush script."""
        boards = {f[0] for f in decoded if type(f) is tuple}
        found: dict[str, BoardDef | DefinitionError] = {b: fast[b] for b in boards if b in fast}
        rest = boards - found.keys()
        if rest:
            found.update(await self.definitions.get(rest))
        return found

    async def _skip_unreadable(self, error: Exception) -> None:
        """Read every partition again from where we are with the lenient parser: a record whose header names
        are not UTF-8 is dead-lettered (with its key and value), the records around it are folded as usual. A
        batch even the lenient parser refuses halts its partition, loudly, rather than guess past it."""
        log.warning("the Kafka client could not parse a record (%r); reading leniently", error)
        ready = self._assignment.seek_back_all()
        with lenient_fetches():
            for tp in self._assignment.tps(ready):
                try:
                    batch = await self._consumer.getmany(
                        tp, timeout_ms=1000, max_records=self.settings.max_poll_records
                    )
                except UNDECODABLE:
                    await self._fold_up_to_undecodable(tp)
                    continue
                await self.fold({tp: batch.get(tp, [])})

    async def _fold_up_to_undecodable(self, tp: TopicPartition) -> None:
        """A batch of ``tp`` cannot be decoded (no library for its codec, damaged bytes): the client raises as
        soon as it reaches it and drops what it had read before, so the records before it are fetched and folded
        one at a time, then the partition halts at that batch, loudly, instead of guessing past it."""
        if (state := self._assignment.ready_state(tp.partition)) is None:
            return
        self._assignment.seek_back(state)
        while (state := self._assignment.ready_state(tp.partition)) is not None:
            try:
                records = (await self._consumer.getmany(tp, timeout_ms=1000, max_records=1)).get(tp, [])
            except UNDECODABLE as exc:
                reason = f"the record batch at offset {state.next_offset} cannot be decoded: {exc!r}"
                self._assignment.halt(state, Halt(HaltReason.UNREADABLE, reason[:MAX_REASON_CHARS]))
                return
            if not records:
                return  # nothing fetched in time: the next poll meets it again
            await self.fold({tp: records})
            if state.next_offset <= records[-1].offset:
                return  # stopped by Redis, revoked or resynchronised: fetched again later

    async def _fold_leniently(self, tp: TopicPartition, records: list[Record]) -> list[FoldCounts]:
        """Runs of readable records go through the usual fold; each unreadable one becomes a dead letter, in
        offset order, and only once the fold has reached it (a fold interrupted by a Redis error stops here)."""
        out: list[FoldCounts] = []
        run: list[Record] = []
        for record in [*records, None]:
            bad = None if record is None else unreadable_header(record)
            if record is not None and bad is None:
                run.append(record)
                continue
            if run:
                out += await self._fold_partition(tp, run)
                state = self._assignment.ready_state(tp.partition)
                if state is None or state.next_offset <= run[-1].offset:
                    return out  # revoked, resynchronised, or stopped by Redis: fetched again later
                run = []
            if record is not None:
                self._dead_letter_unreadable(tp, record, bad or "")
        return out

    def _dead_letter_unreadable(self, tp: TopicPartition, record: Record, header_hex: str) -> None:
        state = self._assignment.ready_state(tp.partition)
        if state is None or record.offset < state.next_offset:
            return
        fold = self._pending.active.fold_for(tp.partition)
        reason = InvalidEvent(Reason.UNREADABLE, f"header name is not UTF-8 (hex {header_hex[:64]})")
        fold.dead.append((record, reason))
        fold.last_offset = record.offset
        if fold.first_offset < 0:
            fold.first_offset = record.offset
        state.folded_to(record.offset)
        self._metrics.events.labels("invalid").inc()
        log.warning(
            "partition %d offset %d has a header name that is not UTF-8; dead-lettered", tp.partition, record.offset
        )
