"""In-memory stand-ins for the Kafka consumer and the Redis sink, for unit tests of the assignment and the intake:
what they were asked (pauses, seeks) and what they answer (log starts, high watermarks, checkpoints) are plain
fields a test sets and reads."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from aiokafka import TopicPartition
from aiokafka.errors import IllegalStateError

from flusher.batch import NO_WATERMARK, CheckpointResult
from hotboard.board_store import Found


class FakeConsumer:
    """Holds an assignment; seeking a partition outside it fails as aiokafka's does."""

    def __init__(self, assigned: Iterable[TopicPartition] = ()) -> None:
        self.assigned = set(assigned)
        self.seeks: list[tuple[TopicPartition, int]] = []
        self.paused: set[TopicPartition] = set()
        #: What the fetches said: the log end, and when the last fetch was (ms).
        self.high: dict[TopicPartition, int] = {}
        self.poll_ms: dict[TopicPartition, int] = {}
        self.starts: dict[TopicPartition, int] = {}
        self.commits: dict[TopicPartition, int] = {}

    def pause(self, *tps: TopicPartition) -> None:
        self.paused.update(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.paused.difference_update(tps)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if tp not in self.assigned:
            raise IllegalStateError(f"No current assignment for partition {tp}")
        self.seeks.append((tp, offset))

    def highwater(self, tp: TopicPartition) -> int | None:
        return self.high.get(tp)

    def last_poll_timestamp(self, tp: TopicPartition) -> int | None:
        return self.poll_ms.get(tp)

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.starts.get(tp, 0) for tp in tps}

    async def committed(self, tp: TopicPartition) -> int | None:
        return self.commits.get(tp)


class FakeSink:
    """Redis as the worker's sink sees it: checkpoints, recorded halts, watermarks. ``on_lookup`` runs before a
    watermark lookup answers (or raises ``lookup_error``)."""

    def __init__(self) -> None:
        self.run_id = "run-1"
        self.checkpoints: dict[int, int] = {}
        self.halts: dict[int, tuple[str, int]] = {}
        self.watermarks: dict[tuple[str, int], int] = {}
        self.on_lookup: Callable[[], None] = lambda: None
        self.lookup_error: Exception | None = None
        #: Runs while a checkpoint move is in flight.
        self.on_advance: Callable[[], None] = lambda: None

    async def server_id(self) -> str:
        return self.run_id

    async def load_positions(self, partitions: Collection[int]) -> tuple[dict[int, int], dict[int, tuple[str, int]]]:
        return (
            {p: self.checkpoints[p] for p in partitions if p in self.checkpoints},
            {p: self.halts[p] for p in partitions if p in self.halts},
        )

    async def record_halt(self, partition: int, reason: str) -> None:
        self.halts[partition] = (reason, self.checkpoints.get(partition, NO_WATERMARK))

    async def lift_halt(self, partition: int, recorded: tuple[str, int], new_log: bool) -> int | None:
        if self.halts.get(partition) != recorded:
            return None
        del self.halts[partition]
        return self.checkpoints.get(partition, NO_WATERMARK)

    async def load_declared(self, boards: Collection[str]) -> dict[str, Found]:
        return dict.fromkeys(boards)  # every board undeclared: the default

    async def load_watermarks(self, partition: int, boards: Collection[str]) -> tuple[dict[str, int], int]:
        self.on_lookup()
        if self.lookup_error is not None:
            raise self.lookup_error
        marks = {b: self.watermarks.get((b, partition), NO_WATERMARK) for b in boards}
        return marks, self.checkpoints.get(partition, NO_WATERMARK)

    async def advance_checkpoints(self, moves: dict[int, tuple[int, int]]) -> list[CheckpointResult]:
        self.on_advance()
        results = []
        for p, (old, new) in moves.items():
            held = self.checkpoints.get(p, NO_WATERMARK)
            if held == old:
                self.checkpoints[p] = new
            results.append(CheckpointResult(p, held == old, held))
        return results
