"""What a sink receives and answers: the contract between the worker and any sink (Redis today; Redis Cluster
and a Postgres archive later implement the same :class:`Sink`)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from hotboard.keys import MAX_EXACT

#: Watermark value meaning "this partition never fed this board" (and checkpoint value "none yet").
NO_WATERMARK = -1

#: Redis writes per board batch besides the ZINCRBYs: the watermark HSET, the meta version HINCRBY and the
#: meta as_of HSET. Part of the "minimum possible writes" the benchmark checks against.
BOOKKEEPING_WRITES_PER_BOARD = 3

#: Redis writes per partition per flush: the checkpoint HSET.
CHECKPOINT_WRITES_PER_PARTITION = 1


__all__ = ["MAX_EXACT", "NO_WATERMARK", "BoardBatch", "BoardResult", "CheckpointResult", "Outcome", "Sink"]


@dataclass(slots=True)
class BoardBatch:
    """What one board receives in one atomic, fenced step: summed deltas and the new watermark per partition."""

    board: str
    deltas: dict[str, int]
    #: partition -> last offset of that partition covered by this batch.
    offsets: dict[int, int]


class Outcome(StrEnum):
    APPLIED = "applied"
    ALREADY_APPLIED = "already_applied"
    FENCED = "fenced"


@dataclass(frozen=True, slots=True)
class BoardResult:
    board: str
    outcome: Outcome
    #: Sorted-set writes (ZINCRBY) this result put into the sink; 0 unless applied.
    writes: int
    version: int | None = None
    #: Totals that hit +-MAX_EXACT and were held there.
    saturated: int = 0
    #: When fenced: partition -> the watermark the sink holds (NO_WATERMARK when absent).
    current: dict[int, int] | None = None


#: (board, partition) -> the watermark this worker believes the sink holds.
ExpectedWatermark = Callable[[str, int], int]


@dataclass(frozen=True, slots=True)
class CheckpointResult:
    partition: int
    ok: bool
    #: What the sink held before (NO_WATERMARK when absent).
    previous: int


class Sink(Protocol):
    """Where windows go. Exactly-once needs three things from a sink: per-board per-partition watermarks
    written atomically with the board's deltas (``flush``), a read of those watermarks (``load_watermarks``),
    and per-partition checkpoints with compare-and-set (``load_checkpoints``/``advance_checkpoints``)."""

    async def server_id(self) -> str: ...

    async def load_checkpoints(self, partitions: Collection[int]) -> dict[int, int]: ...

    async def load_positions(
        self, partitions: Collection[int]
    ) -> tuple[dict[int, int], dict[int, tuple[str, int]]]: ...

    async def record_halt(self, partition: int, reason: str, checkpoint: int) -> None: ...

    async def clear_halt(self, partition: int) -> None: ...

    async def load_watermarks(self, partition: int, boards: Collection[str]) -> tuple[dict[str, int], int]: ...

    async def flush(self, batches: Sequence[BoardBatch], expected: ExpectedWatermark) -> list[BoardResult]: ...

    async def advance_checkpoints(self, moves: dict[int, tuple[int, int]]) -> list[CheckpointResult]: ...
