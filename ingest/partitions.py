"""What a worker knows about each assigned partition, and where a partition resumes. Pure: no I/O.

A partition resumes right after its **checkpoint**: the offset up to which every event it carried is applied
to its board (and every invalid one dead-lettered). The checkpoint only moves after every board batch of a
window is confirmed, so a board whose first batch was lost (a killed worker, a Redis that lost its last
second) is replayed, and a board fed once long ago never pins the resume point. Past the checkpoint each
event takes its board's watermark check (a board the partition never fed takes them all).
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field
from enum import StrEnum

from flusher.batch import NO_WATERMARK
from hotboard.boards import BoardDef


class HaltReason(StrEnum):
    """Why a partition is not consumed: history is gone and only an operator can say what to do."""

    #: No checkpoint in Redis, the group had committed offsets, and the log no longer starts at 0.
    REDIS_LOST = "redis_lost"
    #: The checkpoint lies past the end of the log (topic re-created, cluster rebuilt or mirrored).
    BEYOND_LOG_END = "beyond_log_end"
    #: Retention deleted records that were never applied.
    RETENTION_LOST = "retention_lost"
    #: A record batch not even the lenient parser can read.
    UNREADABLE = "unreadable"


@dataclass(frozen=True, slots=True)
class Seek:
    offset: int


@dataclass(frozen=True, slots=True)
class Halt:
    reason: HaltReason
    detail: str
    #: Records known to be gone (deleted before they were applied); 0 when unknown.
    lost: int = 0


def position(checkpoint: int | None, committed: int | None, log_start: int) -> Seek | Halt:
    """Where a partition resumes, from Redis's checkpoint, the group's committed offset and the log's first
    offset. Never from the committed offset: commits serve lag monitoring only."""
    if checkpoint is not None:
        resume = checkpoint + 1
        if resume < log_start:
            return Halt(
                HaltReason.RETENTION_LOST,
                f"checkpoint {checkpoint} but the log starts at {log_start}: "
                f"{log_start - resume} records were deleted before they were applied",
                log_start - resume,
            )
        return Seek(resume)
    if log_start == 0:
        return Seek(0)  # Redis has nothing (new, or emptied): replaying the whole log rebuilds it exactly
    if committed is None:
        return Seek(log_start)  # a group that never consumed this partition: start from what the log keeps
    return Halt(
        HaltReason.REDIS_LOST,
        f"Redis holds no checkpoint although the group committed offset {committed}, and the log now starts "
        f"at {log_start}: records 0..{log_start - 1} cannot be replayed",
        0,
    )


@dataclass(slots=True)
class PartitionState:
    """One assigned partition."""

    partition: int
    #: False until positioned; records are ignored meanwhile (they are fetched again after the seek).
    ready: bool = False
    halted: Halt | None = None
    #: When a halted partition is looked at again (monotonic seconds).
    recheck_at: float = 0.0
    #: The consumer's last-poll time when positioned: the log end is trusted only from a later fetch.
    positioned_poll_ms: int | None = None
    #: Since when (monotonic) the position has been seen past the log's end; None while it is not.
    beyond_since: float | None = None
    #: Records below this offset were folded already (guards against re-delivery after a seek).
    next_offset: int = -1
    #: The checkpoint Redis holds, as this worker last read or wrote it (NO_WATERMARK: none).
    checkpoint: int = NO_WATERMARK
    #: The value a checkpoint move in flight will leave in Redis (a lookup may see it before the reply).
    advancing: int | None = None
    #: board -> this partition's watermark on it, exactly as Redis holds it; looked up the first time the
    #: board is seen after positioning, then kept by our own flushes.
    watermarks: dict[str, int] = field(default_factory=dict)
    #: Boards whose watermark lies below ``next_offset``: their events need no check.
    clear: set[str] = field(default_factory=set)
    #: The clear boards whose definition sums ``incr`` events (the fold's fast path), with that definition.
    fast: dict[str, BoardDef] = field(default_factory=dict)
    #: Boards applied or looked up since the last :meth:`forget_idle`: the others are idle.
    recent: set[str] = field(default_factory=set)

    def reset(self, checkpoint: int, resume: int) -> None:
        self.checkpoint = checkpoint
        self.next_offset = resume
        self.watermarks = {}
        self.clear = set()
        self.fast = {}
        self.recent = set()
        self.halted = None
        self.beyond_since = None
        self.ready = True

    def applied(self, board: str, offset: int) -> None:
        """Our own batch for ``board`` landed up to ``offset``."""
        self.watermarks[board] = offset
        self.clear.add(board)
        self.recent.add(board)

    def learned(self, marks: dict[str, int]) -> None:
        """Watermarks looked up in Redis."""
        self.watermarks.update(marks)
        self.recent.update(marks)

    def forget_idle(self, pending: Container[str]) -> int:
        """Drop the boards idle since the last call (a week's period boards once the next week runs), so the
        bookkeeping holds the boards in use, not every board ever seen. Only a watermark at or below the
        checkpoint goes (it skips nothing any more), and never a board of a pending window (its flush expects
        it). A forgotten board's next event looks its watermark up again, exactly as after a positioning.
        Returns how many were forgotten."""
        recent, checkpoint = self.recent, self.checkpoint
        idle = [b for b, mark in self.watermarks.items() if mark <= checkpoint and b not in recent and b not in pending]
        for board in idle:
            del self.watermarks[board]
            self.clear.discard(board)
            self.fast.pop(board, None)
        self.recent = set()
        return len(idle)
