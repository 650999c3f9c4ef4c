"""Fetch and fold: records from the consumer into the pending window, each event exactly once.

The steady fold runs while every board of a partition is known to be past its watermark; from the first event
whose board is not, the board's watermark is looked up (the one await between a fetch and its fold) and the
checked fold skips what the board has applied already. Folding goes in chunks, sealing the window when a board's
share reaches ``max_script_players``, so no flush script carries much more than that.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, NamedTuple

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import NoOffsetForPartitionError, OffsetOutOfRangeError

from flusher.batch import Sink
from hotboard.codec import Decoder, InvalidEvent, Reason
from hotboard.timing import Backoff, wait_or_stop
from ingest.assignment import Assignment
from ingest.errors import TRANSIENT
from ingest.metrics import WorkerMetrics
from ingest.settings import WorkerSettings
from ingest.window import Folded, Pending, boards_to_check

log = logging.getLogger("hotboard.worker")


class Unreadable(NamedTuple):
    """Stands in for a record the Kafka client could not parse: only where it was is known."""

    topic: str
    partition: int
    offset: int
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()


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
    ) -> None:
        self.settings = settings
        self._consumer = consumer
        self._assignment = assignment
        self._pending = pending
        self._sink = sink
        self._metrics = metrics
        self._stopping = stopping
        self._backoff = backoff
        self._decoder = Decoder()

    async def poll(self) -> bool:
        """One fetch, folded. True when it folded records (the caller re-checks backpressure)."""
        try:
            batch = await self._consumer.getmany(timeout_ms=100, max_records=self.settings.max_poll_records)
        except OffsetOutOfRangeError as exc:
            await self._assignment.out_of_range(exc.args[0] if exc.args else {})
            return False
        except NoOffsetForPartitionError:
            return False  # assigned, not positioned yet: positioning seeks it from its checkpoint
        except (UnicodeDecodeError, ValueError) as exc:
            # The client could not parse a record (e.g. a header name that is not UTF-8): find it, dead-letter
            # what is known of it and move past it. Whatever the failed call had drained is fetched again.
            await self._skip_unreadable(exc)
            return True
        if batch:
            await self.fold(batch)
        return bool(batch)

    async def fold(self, batch: dict[TopicPartition, list[Any]]) -> None:
        applied = invalid = duplicate = 0
        for tp, records in batch.items():
            for folded in await self._fold_partition(tp, records):
                applied += folded.applied
                invalid += folded.invalid
                duplicate += folded.duplicate
        m = self._metrics
        m.events.labels("applied").inc(applied)
        m.events.labels("invalid").inc(invalid)
        m.events.labels("duplicate").inc(duplicate)

    async def _fold_partition(self, tp: TopicPartition, records: list[Any]) -> list[Folded]:
        state = self._assignment.ready_state(tp.partition)
        if state is None or not records:
            return []  # not ours (any more) or not positioned yet: these records are fetched again
        i = 0
        while i < len(records) and records[i].offset < state.next_offset:
            i += 1  # re-delivered after a seek: folded already
        cap = self.settings.max_script_players
        step = max(100, cap // 4)
        out: list[Folded] = []
        while i < len(records):
            chunk = records[i : i + step] if i or len(records) > step else records
            fold = self._pending.active.fold_for(tp.partition, state.next_offset - 1)
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
                    if self._assignment.ready_state(tp.partition) is not state:
                        return out  # revoked or resynchronised while we waited
                    state.watermarks.update(marks)
                fold = self._pending.active.fold_for(tp.partition, state.next_offset - 1)  # may have been sealed
                out.append(fold.fold_checked(rest, state.watermarks, state.clear, self._decoder))
                state.next_offset = max(state.next_offset, fold.last_offset + 1)
            i += len(chunk)
            if fold.largest_board() >= cap:
                self._pending.seal()
        return out

    async def _skip_unreadable(self, error: Exception) -> None:
        """Walk each partition one record at a time from where we are: the call that fails again stops right
        before the unreadable record (the position is where it lies). Bounded per partition by
        ``max_poll_records``; a partition not reached this time is walked again on the next failure."""
        log.warning("the Kafka client could not parse a record (%r); finding it", error)
        ready = [p for p, st in self._assignment.parts.items() if st.ready]
        for tp in self._assignment.tps(ready):
            self._consumer.seek(tp, self._assignment.parts[tp.partition].next_offset)
        for tp in self._assignment.tps(ready):
            walked: list[Any] = []
            try:
                while len(walked) < self.settings.max_poll_records:
                    batch = await self._consumer.getmany(tp, timeout_ms=200, max_records=1)
                    if not batch.get(tp):
                        break
                    walked.extend(batch[tp])
            except (UnicodeDecodeError, ValueError) as exc:
                await self.fold({tp: walked})
                await self._dead_letter_unreadable(tp, exc)
                continue
            await self.fold({tp: walked})

    async def _dead_letter_unreadable(self, tp: TopicPartition, exc: Exception) -> None:
        state = self._assignment.ready_state(tp.partition)
        if state is None:
            return
        offset = max(await self._consumer.position(tp), state.next_offset)
        fold = self._pending.active.fold_for(tp.partition, state.next_offset - 1)
        reason = InvalidEvent(Reason.UNREADABLE, f"the Kafka client cannot parse this record: {exc!r}"[:500])
        fold.dead.append((Unreadable(tp.topic, tp.partition, offset), reason))
        fold.last_offset = offset
        state.next_offset = offset + 1
        self._consumer.seek(tp, offset + 1)
        self._metrics.events.labels("invalid").inc()
        log.warning("partition %d offset %d is unreadable; dead-lettered and skipped", tp.partition, offset)
