"""What a worker does when Redis lost history Kafka no longer holds (a partition halted ``redis_lost`` or
``retention_lost``): halt and wait for an operator, or, with an archive (``--postgres``; ``--on-redis-loss
restore``, the default then), restore every archived board from it and carry on.

The restore (:func:`archive.restore.restore`) swaps each board in whole with its watermarks and lowers the
topic's checkpoints to the archive's; then the halts it answers are lifted, so the next look at each partition
(``halt_recheck_s``) positions it from the archive's checkpoint and the tail the archive lacks replays once (the
restored watermarks skip what the boards hold). It runs beside the flush loop, never inside it: the worker's
other partitions keep flowing. A partition is restored once per loss: if the archive does not reach back far
enough either (its own checkpoint was deleted by retention too), the partition halts again without ever being
positioned and stays halted for an operator; one that was positioned after its restore (it resumed) is restored
again on a later loss, in the same process. A restore that fails, or leaves a partition's lost checkpoint
unwritten (the archive has not applied its events yet), is tried again after a backoff that grows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from types import TracebackType
from typing import Any, Self

from archive.pool import Archive
from archive.restore import Restored, archived_partitions, restore
from flusher.checkpoints import CheckpointHash
from hotboard.timing import Backoff
from ingest.partitions import Halt, HaltReason
from ingest.settings import WorkerSettings
from ingest.worker import Worker

log = logging.getLogger(__name__)

#: Connect and statement timeout of the archive, as the archiver's default.
ARCHIVE_TIMEOUT_S = 10.0
#: How long a failed restore waits at most before it is tried again (s): from ``halt_recheck_s`` doubling up to this.
RETRY_CAP_S = 300.0
#: The halts an archive can answer: history that is gone from Redis and from Kafka alike.
RESTORABLE = frozenset({HaltReason.REDIS_LOST, HaltReason.RETENTION_LOST})


class ArchiveBehind(RuntimeError):
    """The archive has applied no event of the halted partitions yet: a restore would write no checkpoint of
    theirs (archive.restore_run.Lowest), so none runs until the archiver has (looked at again after a backoff)."""


def restores(settings: WorkerSettings) -> bool:
    """Whether this worker restores from the archive on a loss (``auto``: when an archive is configured)."""
    if settings.on_redis_loss == "auto":
        return bool(settings.postgres)
    return settings.on_redis_loss == "restore"


class LossRestorer:
    """Watches the halted partitions (:meth:`note`, once per tick) and answers each restorable one with one
    restore from the archive, run as a task of its own."""

    def __init__(
        self,
        settings: WorkerSettings,
        redis: Any,
        positioned: Callable[[Iterable[int]], Collection[int]] = lambda _: (),
        held: Callable[[], Collection[int]] | None = None,
    ) -> None:
        """``positioned``: those of the partitions given that the worker holds positioned (consumed) now; ``held``:
        the partitions assigned to it now (None: every one, for tests)."""
        self._settings = settings
        self._redis = redis
        # Not the worker's sink: reading positions there makes each partition's restore generation current, and a
        # partition that resumed during the restore would then move its checkpoint past a swap it has not seen.
        self._halts = CheckpointHash(redis, settings.topic)
        #: Partitions restored and not positioned since: a halt of theirs is the archive not reaching back far
        #: enough, not a new loss (:meth:`note` forgets those that resumed).
        self._tried: set[int] = set()
        self._positioned = positioned
        self._held = held
        # Partitions whose restore failed part-way: its lowerings may have lowered checkpoints Redis still held
        # (a retention_lost halt's), which lifts those halts at the worker's next look (the checkpoint changed), so
        # they are retried whether or not they are still halted, until one restore completes. (A checkpoint Redis
        # lost is written only by a restore that completed: archive.restore_run.Lowest.)
        self._owed: set[int] = set()
        self._task: asyncio.Task[None] | None = None
        self._backoff = Backoff(settings.halt_recheck_s, max(settings.halt_recheck_s, RETRY_CAP_S))
        self.restores = 0
        #: Restores that failed (each retried after a backoff).
        self.failures = 0

    def note(self, halted: Mapping[int, Halt]) -> None:
        if self._tried:
            self._tried.difference_update(self._positioned(self._tried))  # resumed: a later halt is a new loss
            if self._held is not None:  # revoked: another worker may have resumed it; back here halted, a new loss
                self._tried.intersection_update(self._held())
        if self._task is not None and not self._task.done():
            return
        due = sorted({p for p, h in halted.items() if h.reason in RESTORABLE and p not in self._tried} | self._owed)
        if due:
            self._task = asyncio.create_task(self._restore(due), name="hotboard-restore")

    async def _restore(self, partitions: list[int]) -> None:
        s = self._settings
        log.warning("partitions %s lost history Kafka no longer holds: restoring from the archive", partitions)

        def progress(done: Restored) -> None:
            log.info("restored %s: %d players", done.board, done.players)

        try:
            async with Archive(s.postgres, ARCHIVE_TIMEOUT_S) as archive:
                covered = await archived_partitions(archive, s.topic)
                if covered.isdisjoint(partitions):  # nothing to gain from swapping every board in again
                    raise ArchiveBehind(f"the archive holds no checkpoint of partitions {partitions} yet")
                done = await restore(
                    archive,
                    self._redis,
                    s.topic,
                    None,
                    progress,
                    min_replica_acks=s.replica_acks,
                    replica_ack_timeout_ms=s.replica_ack_timeout_ms,
                )
            checkpoints, halts = await self._halts.load_positions(partitions)
        except Exception as exc:  # noqa: BLE001 - see below: every failure waits and retries
            # The archive or Redis away, another run's restoring mark, Redis losing data meanwhile, or a fault no
            # immediate retry mends (an archive without the schema, a staged board that expired): tried again
            # after a backoff that grows, halted still or not (see __init__), never in a loop, never fatal.
            await self._failed(partitions, repr(exc), exc)
            return
        # the halts this restore answers: lifted, so the next look positions from the archive's checkpoints (a
        # failure here is only logged: the worker lifts a halt itself once it sees the checkpoint changed)
        try:
            for p, recorded in halts.items():
                if p in checkpoints:
                    await self._halts.lift_halt(p, recorded, False)
        except Exception as exc:  # noqa: BLE001
            log.warning("restored, but lifting the halts failed (%r): the worker's next look lifts them", exc)
        # a checkpoint still absent: the archive lacked the partition in some board's snapshot (archive.lowering.
        # Lowest); it stays halted and owed, for a restore once the archiver has applied its events
        unwritten = [p for p in partitions if p not in checkpoints]
        self._owed.difference_update(partitions)
        self._tried.update(p for p in partitions if p in checkpoints)
        self.restores += 1
        log.warning(
            "restored %d boards (%d players) from the archive; partitions %s resume from its checkpoints",
            len(done),
            sum(d.players for d in done),
            [p for p in partitions if p in checkpoints],
        )
        if unwritten:
            await self._failed(unwritten, "the archive holds no checkpoint of them in every snapshot", None)
        else:
            self._backoff.reset()

    async def _failed(self, partitions: list[int], why: str, exc: BaseException | None) -> None:
        self._owed.update(partitions)
        self.failures += 1
        delay = self._backoff.next_delay()
        log.error("restore of partitions %s failed (%s); retrying in %.1f s", partitions, why, delay, exc_info=exc)
        await asyncio.sleep(delay)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class RestoringWorker:
    """A worker whose losses a restore from the archive answers: ``async with RestoringWorker(settings) as w:
    await w.run()`` (what ``hotboard worker`` runs when :func:`restores`)."""

    def __init__(self, settings: WorkerSettings, *, handle_signals: bool = True) -> None:
        self.worker = Worker(settings, handle_signals=handle_signals)
        self.restorer = LossRestorer(settings, self.worker.redis, self.worker.positioned, lambda: self.worker.assigned)
        self.worker.on_halts = self.restorer.note

    async def __aenter__(self) -> Self:
        await self.worker.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self.restorer.close()
        finally:
            await self.worker.__aexit__(exc_type, exc, tb)

    def stop(self) -> None:
        self.worker.stop()

    async def run(self) -> None:
        await self.worker.run()
