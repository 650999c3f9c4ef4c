"""What a worker knows about each assigned partition, and where a partition resumes. Pure: no I/O.

A partition resumes right after its **checkpoint**: the offset up to which every event it carried is applied
to its board (and every invalid one dead-lettered). The checkpoint only moves after every board batch of a
window is confirmed, so a board whose first batch was lost (a killed worker, a Redis that lost its last
second) is replayed, and a board fed once long ago never pins the resume point. Past the checkpoint each
event takes its board's watermark check (a board the partition never fed takes them all).
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass
from enum import StrEnum

from flusher.batch import NO_WATERMARK
from hotboard.boards import BoardDef
from hotboard.timing import Backoff
from ingest.ledger import Ledger


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


class Phase(StrEnum):
    """Where an assigned partition is in its life: assigned -> positioned (consumed) -> halted or assigned again
    (a resynchronisation); a halted one is positioned again once its checkpoint is written."""

    #: Waiting to be positioned from its checkpoint; records are ignored meanwhile (fetched again after the seek).
    ASSIGNED = "assigned"
    #: Seeked to right after its checkpoint: its records are folded.
    POSITIONED = "positioned"
    #: History is gone; paused until an operator writes the checkpoint (looked at again every recheck).
    HALTED = "halted"


class PartitionState:
    """One assigned partition, changed through its verbs, with one exception. The fold reads ``next_offset``,
    ``watermarks``, ``clear`` and ``fast`` directly (plain attributes: the hot loop pays no property call), and
    only the verbs here write ``next_offset`` and ``watermarks``. ``clear`` and ``fast`` are also written by the
    general fold, :meth:`ingest.folds.PartitionFold.fold_checked`, which the intake hands them to
    (``ingest/intake.py``): it adds a board to ``clear`` once an event passed the board's watermark, and to
    ``fast`` once a summing event of it folded. The fold takes plain collections so that the rebuild and the
    audit fold the same way with throwaway ones; the fast fold only reads ``fast``."""

    __slots__ = (
        "_advancing",
        "_beyond_since",
        "_checkpoint",
        "_halt",
        "_phase",
        "_positioned_poll_ms",
        "_recent",
        "_recheck_at",
        "_retry",
        "clear",
        "fast",
        "ledger",
        "next_offset",
        "partition",
        "watermarks",
    )

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self._phase = Phase.ASSIGNED
        self._halt: Halt | None = None
        #: When a halted partition is looked at again, or an assigned one whose rewind read failed is positioned
        #: again (monotonic seconds).
        self._recheck_at = 0.0
        #: The backoff of its positioning while its rewind read fails (None: not failing).
        self._retry: Backoff | None = None
        #: The consumer's last-poll time when positioned: the log end is trusted only from a later fetch.
        self._positioned_poll_ms: int | None = None
        #: Since when (monotonic) the position has been seen past the log's end; None while it is not.
        self._beyond_since: float | None = None
        #: Records below this offset were folded already (guards against re-delivery after a seek).
        self.next_offset = -1
        #: The checkpoint Redis holds, as this worker last read or wrote it (NO_WATERMARK: none).
        self._checkpoint = NO_WATERMARK
        #: The value a checkpoint move in flight will leave in Redis (a lookup may see it before the reply).
        self._advancing: int | None = None
        #: board -> this partition's watermark on it, exactly as Redis holds it; looked up the first time the
        #: board is seen after positioning, then kept by our own flushes.
        self.watermarks: dict[str, int] = {}
        #: Boards whose watermark lies below ``next_offset``: their events need no check.
        self.clear: set[str] = set()
        #: The clear boards whose definition sums ``incr`` events (the fold's fast path), with that definition.
        self.fast: dict[str, BoardDef] = {}
        #: Boards applied or looked up since the last :meth:`forget_idle`: the others are idle.
        self._recent: set[str] = set()
        #: The windows this worker applied, kept across positionings (see :mod:`ingest.rewind`).
        self.ledger = Ledger()

    def __repr__(self) -> str:
        return f"<PartitionState {self.partition} {self._phase} next={self.next_offset} checkpoint={self._checkpoint}>"

    # ---------------------------------------------------------------- reads

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def ready(self) -> bool:
        return self._phase is Phase.POSITIONED

    @property
    def halt(self) -> Halt | None:
        """Why the partition is halted; None unless it is."""
        return self._halt if self._phase is Phase.HALTED else None

    @property
    def checkpoint(self) -> int:
        return self._checkpoint

    def due(self, now: float) -> bool:
        """To be positioned now: assigned or halted, and due (a halt's second look, a failed read's retry)."""
        return self._phase is not Phase.POSITIONED and now >= self._recheck_at

    def checkpoint_candidates(self) -> tuple[int, int | None]:
        """What Redis may hold as this partition's checkpoint: the known value, or the move in flight."""
        return self._checkpoint, self._advancing

    # ---------------------------------------------------------------- phase changes

    def positioned(self, checkpoint: int, resume: int, poll_ms: int | None = None) -> None:
        """Seeked to ``resume`` from ``checkpoint``: everything learned before is forgotten."""
        self._checkpoint = checkpoint
        self.next_offset = resume
        self.watermarks = {}
        self.clear = set()
        self.fast = {}
        self._recent = set()
        self._halt = None
        self._beyond_since = None
        self._positioned_poll_ms = poll_ms
        self._recheck_at, self._retry = 0.0, None
        self._phase = Phase.POSITIONED

    def halted(self, halt: Halt, recheck_at: float) -> bool:
        """Halted for ``halt``, looked at again at ``recheck_at``. True when this is news (not halted before, or
        for another reason)."""
        first = self._halt is None or self._halt.reason != halt.reason
        self._halt = halt
        self.ledger.clear()  # the checkpoint is the operator's now: no rewind past what they write
        self._recheck_at, self._retry = recheck_at, None
        self._phase = Phase.HALTED
        return first

    def unread(self, now: float, cap_s: float) -> float:
        """Its rewind read failed: still assigned (not fetched), due again after a backoff of its own, growing up
        to ``cap_s`` until it is positioned or halts, so that one failing slot neither holds nor hurries the
        others. Returns the delay."""
        if self._retry is None:
            self._retry = Backoff(cap_s=cap_s)
        delay = self._retry.next_delay()
        self._recheck_at = now + delay
        return delay

    def unposition(self) -> None:
        """Positioned again from Redis (a resynchronisation); a halted partition stays halted."""
        if self._phase is Phase.POSITIONED:
            self._phase = Phase.ASSIGNED

    def past_log_end(self, high: int | None, polled_ms: int | None, now: float, confirm_s: float) -> bool:
        """The log-end rule: the position lies past the log's high watermark in a fetch made after positioning,
        and has for ``confirm_s`` (a new partition leader's high watermark can lag for a moment)."""
        if self._phase is not Phase.POSITIONED or high is None or polled_ms is None:
            return False
        if polled_ms == self._positioned_poll_ms:
            return False
        if self.next_offset <= high:
            self._beyond_since = None
            return False
        if self._beyond_since is None:
            self._beyond_since = now
        return now - self._beyond_since >= confirm_s

    # ---------------------------------------------------------------- progress

    def folded_to(self, last_offset: int) -> None:
        """Records up to ``last_offset`` are folded (or dead-lettered): a re-delivery of them is skipped."""
        if last_offset >= self.next_offset:
            self.next_offset = last_offset + 1

    def applied(self, board: str, offset: int, first: int | None = None) -> None:
        """Our own batch for ``board`` landed up to ``offset``; ``first``: the first record of its window, for the
        ledger (None: no ledger kept, as on one server)."""
        if first is not None:
            prev = self.watermarks.get(board, NO_WATERMARK)
            # the board's events of the window lie past the watermark it replaced, and at or past ``first``
            self.ledger.applied(board, offset, prev, max(first, prev + 1))
        self.watermarks[board] = offset
        self.clear.add(board)
        self._recent.add(board)

    def learned(self, marks: dict[str, int]) -> None:
        """Watermarks looked up in Redis."""
        self.watermarks.update(marks)
        self._recent.update(marks)

    def checkpoint_moving(self, new: int | None) -> None:
        """A checkpoint move to ``new`` is in flight (None: it settled, either way)."""
        self._advancing = new

    def checkpoint_moved(self, new: int) -> None:
        """Redis confirmed the checkpoint move."""
        self._checkpoint = new
        self.ledger.checkpoint_moved(new)

    def forget_idle(self, pending: Container[str]) -> int:
        """Drop the boards idle since the last call (a week's period boards once the next week runs), so the
        bookkeeping holds the boards in use, not every board ever seen. Only a watermark at or below the
        checkpoint goes (it skips nothing any more), and never a board of a pending window (its flush expects
        it). A forgotten board's next event looks its watermark up again, exactly as after a positioning.
        Returns how many were forgotten."""
        recent, checkpoint = self._recent, self._checkpoint
        idle = [b for b, mark in self.watermarks.items() if mark <= checkpoint and b not in recent and b not in pending]
        for board in idle:
            del self.watermarks[board]
            self.clear.discard(board)
            self.fast.pop(board, None)
        # the last windows of boards not looked up since a positioning (no watermark kept) go the same way
        stale = [
            b
            for b, applied in self.ledger.last_windows().items()
            if b not in self.watermarks and applied.mark <= checkpoint and b not in recent and b not in pending
        ]
        self.ledger.forget([*idle, *stale])  # its owed entries stay until the replay passes them
        self._recent = set()
        return len(idle)
