"""What a sink receives and answers: the contract between the worker and any sink (:class:`Sink`, implemented by
one Redis, ``flusher.redis_sink.RedisSink``; a Redis Cluster, ``flusher.cluster.ClusterSink``; and the PostgreSQL
archive, ``archive.sink.ArchiveSink``)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from hotboard.board_store import Found
from hotboard.boards import DEFAULT, BoardDef
from hotboard.earliest import Step
from hotboard.keys import MAX_EXACT
from hotboard.operators import Folded

#: Watermark value meaning "this partition never fed this board" (and checkpoint value "none yet").
NO_WATERMARK = -1

#: Redis writes per board batch besides the ZINCRBYs: the watermark HSET, the meta version HINCRBY and the
#: meta as_of HSET. Part of the "minimum possible writes" the benchmark checks against.
BOOKKEEPING_WRITES_PER_BOARD = 3

#: Redis writes per partition per flush: the checkpoint HSET.
CHECKPOINT_WRITES_PER_PARTITION = 1


__all__ = [
    "MAX_EXACT",
    "NO_WATERMARK",
    "BoardBatch",
    "BoardResult",
    "CheckpointResult",
    "Outcome",
    "PeriodTarget",
    "Sink",
]


@dataclass(frozen=True, slots=True)
class PeriodTarget:
    """The period of a seasonal board a batch is for, decided once when its events were routed (from each
    record alone, so a replay decides the same); the sink applies it and never works a season out again."""

    #: The logical board ``B``: the registry's member, the definition the period's copy is seeded from.
    board: str
    period_id: str
    #: When the period's keys expire (ms since the epoch), under the batch's definition.
    expire_at_ms: int


@dataclass(slots=True)
class BoardBatch:
    """What one board receives in one atomic, fenced step: its players' window (one of three forms) and the new
    watermark per partition."""

    #: The board the keys are named after: a period's own (``B@2026-W49``) on a seasonal board.
    board: str
    #: player -> summed delta (incr-only windows).
    deltas: dict[str, int]
    #: partition -> last offset of that partition covered by this batch.
    offsets: dict[int, int]
    #: The definition the window was folded under: the script refuses the batch if the board's differs.
    definition: BoardDef = DEFAULT
    #: player -> folded clamp, when the window has other operators (then ``deltas`` is empty).
    states: dict[str, Folded] | None = None
    #: player -> steps to replay, on ``earliest`` boards (then ``deltas`` is empty).
    steps: dict[str, list[Step]] | None = None
    #: player -> display metadata (compact JSON), last write wins.
    metas: dict[str, bytes] | None = None
    #: The period ``board`` names (``B@<period id>``) on a seasonal board; None on any other.
    period: PeriodTarget | None = None

    @property
    def players(self) -> int:
        return len(self.deltas) + len(self.states or ()) + len(self.steps or ())


class Outcome(StrEnum):
    APPLIED = "applied"
    ALREADY_APPLIED = "already_applied"
    FENCED = "fenced"
    #: The board's definition is not the one the window was folded under (declared while we folded).
    REDEFINED = "redefined"


@dataclass(slots=True)
class BoardResult:
    """One board's answer to a window. Not frozen: a flush builds one per board (100,000 in a many-board window),
    and a frozen dataclass's ``__init__`` (``object.__setattr__`` per field) costs four times as much. Nothing
    changes one after the sink built it."""

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

    async def record_halt(self, partition: int, reason: str) -> None: ...

    async def lift_halt(self, partition: int, recorded: tuple[str, int], new_log: bool) -> int | None: ...

    async def load_watermarks(self, partition: int, boards: Collection[str]) -> tuple[dict[str, int], int]: ...

    async def load_declared(self, boards: Collection[str]) -> dict[str, Found]: ...

    async def flush(self, batches: Sequence[BoardBatch], expected: ExpectedWatermark) -> list[BoardResult]: ...

    async def advance_checkpoints(self, moves: dict[int, tuple[int, int]]) -> list[CheckpointResult]: ...

    def forget_registry(self) -> None:
        """The server restarted: whatever the sink remembers having written there is to be written again."""


@dataclass(frozen=True, slots=True)
class RewindView:
    """What a sink holds for a rewind decision (:mod:`ingest.rewind`): boards' watermarks for a partition, then,
    read after them (a restore landing in between is seen), the partition's checkpoint, restore generation,
    restoring mark and epoch."""

    #: board -> the partition's watermark on it (NO_WATERMARK: absent).
    marks: Mapping[str, int]
    #: NO_WATERMARK: none.
    checkpoint: int
    gen: int
    #: A restoring mark is present (``<p>:restoring`` or ``<p>:restoring_by``), whatever its deadline.
    restoring: bool
    epoch: int


@runtime_checkable
class RewindSource(Protocol):
    """A sink whose boards may hold less than their checkpoint says (a Redis Cluster: a board's master and the
    checkpoints' master fail apart, and a promoted replica may lack windows whose checkpoint moved). On one
    server the checkpoint and the boards are lost together, so a sink there does not offer this."""

    def restore_state(self, partition: int) -> tuple[int, int]:
        """The partition's restore generation and epoch as read at its last positioning."""
        ...

    def rewind_chunk(self) -> int:
        """About the most watermarks one :meth:`load_rewinds` should be asked for (the caller batches partitions
        to it; a partition holding more is asked alone)."""
        ...

    async def load_rewinds(self, wanted: Mapping[int, Collection[str]]) -> dict[int, RewindView | Exception]:
        """partition -> its view, for every partition of ``wanted`` (partition -> boards), in one read: every
        partition's boards' watermarks, then every partition's checkpoint fields (a restore landing between the
        two shows in the second). A partition whose read failed maps to the error, never to a view: the others
        are answered all the same. Raises when the read as a whole failed."""
        ...
