"""The partitions a worker holds: their state, why each is paused, where each resumes, and why one is halted.

Positioning reads the partition's checkpoint from Redis and the log's first offset from Kafka, and asks the
pure decision in :mod:`ingest.partitions` (and, where a board may hold less than its checkpoint says, the rewind
of :mod:`ingest.rewind`). Halting is loud: the partition stays paused, ``/readyz`` fails, the
``hotboard_redis_data_loss`` gauge counts it, and it is looked at again every ``halt_recheck_s``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition

from flusher.batch import NO_WATERMARK, BoardBatch, RewindSource, Sink
from ingest.checkpoint import Checkpoint
from ingest.metrics import WorkerMetrics
from ingest.partitions import Halt, HaltReason, PartitionState, position
from ingest.pausing import PauseReason, Pauses
from ingest.rewind import Positioning, Resumed, rewinds_for
from ingest.settings import WorkerSettings

log = logging.getLogger("hotboard.worker")

#: How long a position must stay past the log's end before the partition halts (see ``check_log_end``).
LOG_END_CONFIRM_S = 10.0
#: Where the log line of a halt sends the operator to lift it.
LIFT_HALT = 'docs/runbooks.md, "HotboardRedisDataLoss"'


class Assignment:
    """The one owner of the partitions' state: every change to a :class:`PartitionState` goes through here (or
    through the intake's fold: ``next_offset`` and watermarks by the state's verbs, ``clear`` and ``fast`` directly)."""

    def __init__(
        self,
        settings: WorkerSettings,
        consumer: AIOKafkaConsumer,
        sink: Sink,
        metrics: WorkerMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._parts: dict[int, PartitionState] = {}
        self.pauses = Pauses()
        self._consumer = consumer
        self._sink = sink
        self._metrics = metrics
        #: Halts decided but not yet recorded in Redis (recorded at the next positioning or flush): partition ->
        #: reason.
        self._unrecorded: dict[int, str] = {}
        self._clock = clock

    @property
    def parts(self) -> Mapping[int, PartitionState]:
        """partition -> its state, read-only: the states change through this class's verbs."""
        return self._parts

    @property
    def partitions(self) -> list[int]:
        return sorted(self._parts)

    @property
    def ready(self) -> bool:
        """The consumer holds partitions and has positioned them all (none halted)."""
        return bool(self._parts) and all(st.ready for st in self._parts.values())

    @property
    def halted(self) -> dict[int, Halt]:
        return {p: st.halt for p, st in self._parts.items() if st.halt is not None}

    def positioned(self, partitions: Iterable[int]) -> set[int]:
        """Those of ``partitions`` that are positioned."""
        return {p for p in partitions if (st := self._parts.get(p)) is not None and st.ready}

    def tps(self, partitions: Iterable[int]) -> list[TopicPartition]:
        return [TopicPartition(self.settings.topic, p) for p in partitions]

    def ready_state(self, partition: int) -> PartitionState | None:
        state = self._parts.get(partition)
        return state if state is not None and state.ready else None

    def seek_back(self, state: PartitionState) -> bool:
        """Fetch ``state``'s records again from where its fold stopped, if it is still positioned (a rebalance or
        a resynchronisation that took it meanwhile repositions it: not ours to seek). True when it seeked."""
        if self.ready_state(state.partition) is not state:
            return False
        self._consumer.seek(TopicPartition(self.settings.topic, state.partition), state.next_offset)
        return True

    def seek_back_all(self) -> list[int]:
        """Every positioned partition fetched again from where its fold stopped; returns them."""
        ready = [p for p, st in self._parts.items() if st.ready]
        for p in ready:
            self.seek_back(self._parts[p])
        return ready

    # ---------------------------------------------------------------- what the flush reads and learns

    def expected(self, board: str, partition: int) -> int:
        """The watermark ``board`` holds for ``partition`` as this worker knows it (the flush's compare-and-set)."""
        state = self._parts.get(partition)
        return NO_WATERMARK if state is None else state.watermarks.get(board, NO_WATERMARK)

    def applied(self, batches: Iterable[BoardBatch], firsts: Mapping[int, int]) -> None:
        """Every batch landed: its boards' watermarks are ours now (``firsts``: partition -> its window's first
        offset, for the ledger of :mod:`ingest.rewind`, kept where boards may lose what checkpoints hold)."""
        ledger = isinstance(self._sink, RewindSource)
        for batch in batches:
            for p, offset in batch.offsets.items():
                if (state := self._parts.get(p)) is not None:
                    state.applied(batch.board, offset, firsts.get(p, NO_WATERMARK) if ledger else None)

    async def advance_checkpoints(self, covered: Mapping[int, int], lowest_letter: Mapping[int, int]) -> dict[int, int]:
        """Move the checkpoints of a window whose batches all landed (see :mod:`ingest.checkpoint`); returns the
        refused ones (partition -> what Redis holds)."""
        return await Checkpoint(self._parts, covered, lowest_letter).commit(self._sink)

    def checkpoints(self, partitions: Collection[int]) -> dict[int, int]:
        """partition -> its checkpoint, for those of ``partitions`` still held."""
        return {p: st.checkpoint for p, st in self._parts.items() if p in partitions}

    def forget_idle(self, pending: Callable[[int], Collection[str]]) -> tuple[int, int]:
        """Idle boards leave the positioned partitions' bookkeeping (``pending``: partition -> the boards of its
        pending windows, kept). Returns (boards forgotten, boards still known)."""
        ready = [(p, st) for p, st in self._parts.items() if st.ready]
        forgotten = sum(st.forget_idle(pending(p)) for p, st in ready)
        return forgotten, sum(len(st.watermarks) for _, st in ready)

    # ---------------------------------------------------------------- pauses

    def pause(self, partitions: Iterable[int], reason: PauseReason) -> None:
        self._consumer.pause(*self.tps(self.pauses.pause(partitions, reason)))

    def release(self, partitions: Iterable[int], reason: PauseReason) -> None:
        self._consumer.resume(*self.tps(self.pauses.release(partitions, reason)))

    @property
    def backpressured(self) -> bool:
        return bool(self.pauses.paused_for(PauseReason.BACKPRESSURE))

    # ---------------------------------------------------------------- assignment changes

    def add(self, tps: Iterable[TopicPartition]) -> list[int]:
        """Newly assigned partitions: paused until positioned (the seek happens outside the callback)."""
        mine = [tp.partition for tp in tps if tp.topic == self.settings.topic]
        for p in mine:
            self._parts[p] = PartitionState(p)
        self.pause(mine, PauseReason.POSITIONING)
        return mine

    def remove(self, partitions: Iterable[int]) -> None:
        gone = list(partitions)
        self.pauses.forget(gone)
        for p in gone:
            self._parts.pop(p, None)
            self._unrecorded.pop(p, None)  # its next owner decides for itself
            with contextlib.suppress(KeyError):
                self._metrics.consumer_lag.remove(str(p))
        self.update_halts()

    def unready_all(self) -> None:
        """Every partition is positioned again from Redis; a pause for backpressure must not outlive the pending
        work it held back (the caller dropped it)."""
        for state in self._parts.values():
            state.unposition()
        self.pause(self._parts, PauseReason.POSITIONING)
        self.release(self._parts, PauseReason.BACKPRESSURE)

    # ---------------------------------------------------------------- positioning and halts

    def waiting(self) -> list[int]:
        """Partitions to position now: not ready, and not halted (or due for a second look)."""
        now = self._clock()
        return [p for p, st in self._parts.items() if st.due(now)]

    async def position(self, waiting: list[int]) -> dict[int, Exception]:
        """Position ``waiting`` from their checkpoints (or halt them); returns the partitions whose rewind read
        failed (partition -> why): not positioned, each due again on its own backoff. Raises what Redis or Kafka
        raise (the caller retries with backoff), maybe after some resumed: the caller knows the server already."""
        tps = self.tps(waiting)
        await self.record_halts()
        checkpoints, halts = await self._sink.load_positions(waiting)
        starts = await self._consumer.beginning_offsets(tps)
        committed = {
            p: await self._consumer.committed(tp) for p, tp in zip(waiting, tps, strict=True) if p not in checkpoints
        }
        wanted: list[Positioning] = []
        for p, tp in zip(waiting, tps, strict=True):
            if p not in self._parts:  # revoked meanwhile
                continue
            checkpoint = checkpoints.get(p)
            recorded = halts.get(p)
            if recorded is not None and recorded[1] == (NO_WATERMARK if checkpoint is None else checkpoint):
                # halted before, and nobody has written the checkpoint since: still halted, whatever the log
                # looks like now (a re-created topic may have grown past the old checkpoint meanwhile)
                reason, _ = recorded
                detail = f"halted earlier ({reason}) and the checkpoint is unchanged; see {LIFT_HALT} to lift it"
                self.halt(self._parts[p], Halt(HaltReason(reason), detail), record=False)
                continue
            if recorded is not None:
                # the operator wrote the checkpoint: a re-created log's offsets start over, so its boards'
                # watermarks (the old log's) are left behind in the old epoch
                new_log = recorded[0] == HaltReason.BEYOND_LOG_END.value
                lifted = await self._sink.lift_halt(p, recorded, new_log)
                if lifted is None or p not in self._parts:
                    continue  # the halt changed meanwhile (or the partition went): position it again
                checkpoint = None if lifted == NO_WATERMARK else lifted
                log.warning(
                    "partition %d: the checkpoint was written since its halt (%s); resuming%s",
                    p,
                    recorded[0],
                    " in a new log epoch" if new_log else "",
                )
            decision = position(checkpoint, committed.get(p), starts[tp])
            if isinstance(decision, Halt):
                self.halt(self._parts[p], decision)
            else:
                wanted.append(Positioning(self._parts[p], checkpoint, decision.offset, starts[tp]))
        # a board that lacks windows this worker applied below the checkpoint moves the resume point back: read
        # together for every partition positioned here (a resync positions them all), each decided alone; one
        # whose read failed stays waiting (resumed unchecked, it could skip what a board lacks)
        unread: dict[int, Exception] = {}
        for want, one in zip(wanted, await rewinds_for(self._sink, wanted, self._metrics), strict=True):
            if isinstance(one, Exception):
                unread[p := want.state.partition] = one
                delay = want.state.unread(self._clock(), self.settings.backoff_max_s)
                log.warning("cannot position partition %d yet (%r); retrying in %.1fs", p, one, delay)
            else:
                self._resume(want, one)
        await self.record_halts()
        self.update_halts()
        return unread

    async def record_halts(self) -> None:
        """Halts survive restarts: recorded next to the checkpoint, with the checkpoint Redis holds then. From
        then on no worker moves it (the flush skips halted partitions, the checkpoint script refuses them), so a
        different one later is an operator's doing, never the flush of work pending when the halt was decided."""
        while self._unrecorded:
            p, reason = next(iter(self._unrecorded.items()))
            await self._sink.record_halt(p, reason)
            self._unrecorded.pop(p, None)

    def _resume(self, want: Positioning, resumed: Resumed) -> None:
        resume, owed = resumed
        state, p = want.state, want.state.partition
        if self._parts.get(p) is not state:
            return  # revoked meanwhile
        if isinstance(resume, Halt):
            self.halt(state, resume)
            return
        tp = TopicPartition(self.settings.topic, p)
        self._consumer.seek(tp, resume)
        checkpoint = want.checkpoint
        state.positioned(
            NO_WATERMARK if checkpoint is None else checkpoint, resume, self._consumer.last_poll_timestamp(tp)
        )
        state.ledger.positioned(*owed)
        if self.backpressured:
            self.pause([p], PauseReason.BACKPRESSURE)  # the bound holds for newly positioned ones too
        self.release([p], PauseReason.HALTED)
        self.release([p], PauseReason.POSITIONING)
        log.info("partition %d resumes at %d (checkpoint %s)", p, resume, checkpoint)

    def halt(self, state: PartitionState, halt: Halt, *, record: bool = True) -> None:
        """History is gone: do not guess. An operator restores Redis or writes the checkpoint (:data:`LIFT_HALT`)."""
        if record:
            self._unrecorded[state.partition] = halt.reason.value
        first = state.halted(halt, self._clock() + self.settings.halt_recheck_s)
        self.pause([state.partition], PauseReason.HALTED)
        if first:
            self._metrics.records_lost.inc(halt.lost)
            log.error(
                "partition %d halted (%s): %s. Nothing of it is consumed until an operator restores Redis or "
                "writes its checkpoint (see %s)",
                state.partition,
                halt.reason.value,
                halt.detail,
                LIFT_HALT,
            )
        self.update_halts()

    def update_halts(self) -> None:
        self._metrics.data_loss.set(len(self.halted))

    def check_log_end(self) -> list[int]:
        """A position past the log's end, seen in a fetch made after positioning: the checkpoint belongs to
        another log (a topic deleted and re-created, a rebuilt or mirrored cluster). Returns the halted ones."""
        halted = []
        for tp in self.tps(self._parts):
            state = self._parts[tp.partition]
            if not state.ready:
                continue
            # A new partition leader's high watermark can lag for a moment (rolling broker restarts): only a
            # position that stays past the end for LOG_END_CONFIRM_S is a log that is not the checkpoint's.
            high = self._consumer.highwater(tp)
            if not state.past_log_end(high, self._consumer.last_poll_timestamp(tp), self._clock(), LOG_END_CONFIRM_S):
                continue
            self.halt(
                state,
                Halt(
                    HaltReason.BEYOND_LOG_END,
                    f"checkpoint {state.checkpoint} (position {state.next_offset}) lies past the log end {high}: "
                    "the topic was re-created or the cluster rebuilt",
                ),
            )
            halted.append(tp.partition)
        return halted

    def update_lag(self) -> None:
        for tp in self.tps(self._parts):
            high = self._consumer.highwater(tp)
            state = self._parts.get(tp.partition)
            if high is None or state is None or not state.ready or state.next_offset < 0:
                continue
            self._metrics.consumer_lag.labels(str(tp.partition)).set(max(0, high - state.next_offset))
