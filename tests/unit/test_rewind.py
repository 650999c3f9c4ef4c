"""The rewind to what a board lacks (ingest/rewind.py, ingest/ledger.py): the pure decision as a table, the
ledger across positionings, and the assignment positioning a partition with it against a fake cluster sink
(a restore landing between its reads, an absent watermark, a second resync before the replay, retention)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import NamedTuple

import pytest
from aiokafka import TopicPartition

from archive.sink import ArchiveSink
from flusher.batch import NO_WATERMARK, BoardBatch, RewindSource, RewindView
from flusher.cluster import ClusterSink
from flusher.redis_sink import RedisSink
from hotboard.codec import InvalidEvent, Reason
from ingest import dlq
from ingest.assignment import Assignment
from ingest.ledger import Applied, Ledger
from ingest.metrics import WorkerMetrics
from ingest.partitions import Halt, HaltReason, PartitionState
from ingest.rewind import Rewind, decide
from ingest.settings import WorkerSettings
from tests.fakes import FakeConsumer, FakeSink
from tests.records import json_record

ABSENT = NO_WATERMARK
#: The ledger of most rows: this worker took board b from 100 to 120 in a window that began at offset 101.
B = {"b": Applied(120, 100, 101)}


def _view(
    marks: dict[str, int], checkpoint: int = 130, gen: int = 0, restoring: bool = False, epoch: int = 0
) -> RewindView:
    return RewindView(marks, checkpoint, gen, restoring, epoch)


class Row(NamedTuple):
    why: str
    view: RewindView
    seek: int | None = None
    lost: bool = False
    owed: frozenset[str] = frozenset()
    ledger: dict[str, Applied] = B
    #: generation and epoch of the ledger's positioning, then of this one
    gens: tuple[int, int, int, int] = (0, 0, 0, 0)
    checkpoint: int | None = 130
    start: int = 0


OWES_B = frozenset({"b"})


def _far(why: str, applied: Applied, seek: int | None, held: int = 10) -> Row:
    """A row far into the log: checkpoint 6000, the log starting at 4000 (retention deleted what lay before)."""
    owed = OWES_B if seek is not None else frozenset()
    return Row(why, _view({"b": held}, 6000), seek, seek is None, owed, {"b": applied}, checkpoint=6000, start=4000)


TABLE = [
    Row("only the last window lacked: from its first offset", _view({"b": 100}), 101, owed=OWES_B),
    Row("two windows lacked: from past the watermark", _view({"b": 90}), 91, owed=OWES_B),
    Row("absent watermark (FLUSHALL, expired, deleted): never", _view({"b": ABSENT})),
    Row("the board holds the window", _view({"b": 120})),
    Row("the board is past it (another owner, a delete)", _view({"b": 500})),
    # one server: the lost second took the checkpoint move too, so the lacked window lies past the checkpoint
    Row("lacked past the checkpoint: resumed after it", _view({"b": 100}, 100), owed=OWES_B, checkpoint=100),
    Row("a restore landed after the positioning read (gen moved)", _view({"b": 100}, gen=7)),
    Row("a restore landed before it (positioned in a new gen)", _view({"b": 100}, gen=7), gens=(0, 0, 7, 0)),
    Row("a restore is swapping boards in (its mark)", _view({"b": 100}, restoring=True)),
    Row("a new log epoch", _view({"b": 100}, epoch=1), gens=(0, 0, 0, 1)),
    Row("no checkpoint: the log is replayed from its start", _view({"b": 100}, ABSENT), checkpoint=None),
    Row("the checkpoint moved between the reads: decided next time", _view({"b": 100}, 140), owed=OWES_B),
    _far("an ancient watermark below the log start, the lacked window in the log", Applied(5100, 10, 5000), 5000),
    _far(
        "two windows of the worker's run lacked, the watermark older than the log",
        Applied(5200, 5100, 5101, 10, 5000),
        5000,
    ),
    _far("the board holds a watermark inside the run: past it", Applied(5300, 5200, 5201, 10, 5000), 5101, held=5100),
    _far("lacked records deleted by retention: a loss", Applied(5100, 3000, 5000), None),
    Row(
        "the lowest of several boards",
        _view({"b": 100, "c": 60, "d": 110}),
        101,
        owed=frozenset({"b", "c"}),
        ledger={**B, "c": Applied(125, 60, 102), "d": Applied(110, 50, 90)},
    ),
    Row("no board this worker applied to", _view({}), ledger={}),
]


@pytest.mark.parametrize("row", TABLE, ids=[r.why for r in TABLE])
def test_the_rewind_decision(row: Row) -> None:
    gen, epoch, positioned_gen, positioned_epoch = row.gens
    got = decide(
        row.ledger,
        row.view,
        gen=gen,
        epoch=epoch,
        positioned_gen=positioned_gen,
        positioned_epoch=positioned_epoch,
        checkpoint=row.checkpoint,
        log_start=row.start,
    )
    assert (got.seek, got.lost is not None, frozenset(got.owed)) == (row.seek, row.lost, row.owed), row.why


def test_a_replay_below_the_mark_keeps_the_entry_owed_across_a_second_resync() -> None:
    ledger = Ledger()
    ledger.applied("b", 120, 100, 101)
    ledger.positioned({"b": Applied(120, 100, 101)}, gen=0, epoch=0, reset=False)  # found behind, rewound
    ledger.applied("b", 110, 100, 101)  # the replay's first window lands below 120
    assert ledger.entries() == {"b": Applied(120, 100, 101)}  # the newest: what a second resync compares
    ledger.positioned(ledger.owed(), gen=0, epoch=0, reset=False)  # the second resync, Redis still at 110
    assert ledger.entries() == {"b": Applied(120, 100, 101)}
    ledger.forget(["b"])  # idle: the last windows go, the owed entry stays
    assert ledger.entries() == {"b": Applied(120, 100, 101)}
    ledger.checkpoint_moved(119)
    assert "b" in ledger.owed()
    ledger.applied("b", 125, 110, 121)  # applied again past it: settled
    assert ledger.owed() == {} and ledger.entries() == {"b": Applied(125, 110, 121)}


def test_an_owed_entry_goes_once_the_checkpoint_passes_it() -> None:
    ledger = Ledger()
    ledger.positioned({"b": Applied(120, 100, 101), "c": Applied(200, 150, 151)}, gen=0, epoch=0, reset=False)
    ledger.checkpoint_moved(150)
    assert set(ledger.owed()) == {"c"} and len(ledger) == 1


def test_the_partition_state_keeps_its_ledger_bounded_by_the_boards_in_use() -> None:
    state = PartitionState(0)
    state.positioned(99, 100)
    state.applied("busy", 120, first=100)
    state.applied("idle", 110, first=100)
    assert state.ledger.entries() == {"busy": Applied(120, NO_WATERMARK, 100), "idle": Applied(110, NO_WATERMARK, 100)}
    state.checkpoint_moved(130)
    state.forget_idle(pending=set())  # the first call only starts the idle period
    state.applied("busy", 140, first=131)  # prev is what the board held: 120
    assert state.forget_idle(pending=set()) == 1
    assert state.ledger.entries() == {"busy": Applied(140, 120, 131, NO_WATERMARK, 100)}  # a run from the first
    state.applied("busy", 150, first=100)  # a window that began below the watermark: the board's events past it
    assert state.ledger.entries()["busy"] == Applied(150, 140, 141, NO_WATERMARK, 100)
    state.learned({"busy": 170})  # someone else moved it (a delete): a new run
    state.applied("busy", 180, first=171)
    assert state.ledger.entries()["busy"] == Applied(180, 170, 171)
    one_server = PartitionState(1)
    one_server.positioned(99, 100)
    one_server.applied("b", 120)  # no ledger where the sink offers no rewind
    assert len(one_server.ledger) == 0


def test_an_owed_entry_survives_forget_idle_and_a_halt_clears_the_ledger() -> None:
    state = PartitionState(0)
    state.positioned(130, 131)
    state.ledger.positioned({"b": Applied(120, 100, 101)}, gen=0, epoch=0, reset=False)
    state.forget_idle(pending=set())
    state.forget_idle(pending=set())
    assert set(state.ledger.entries()) == {"b"}
    state.halted(Halt(HaltReason.UNREADABLE, "x"), 0.0)  # the operator's checkpoint governs from here
    assert len(state.ledger) == 0


class _ClusterSink(FakeSink):
    """A sink that offers rewinds: restore generations, restoring marks and epochs per partition; ``between``
    runs after the watermarks are read and before the checkpoint hash is (a restore landing there)."""

    def __init__(self) -> None:
        super().__init__()
        self.gens: dict[int, int] = {}
        self.restoring: set[int] = set()
        self._positioned_gens: dict[int, int] = {}
        self.between: Callable[[], None] = lambda: None
        self.rewind_reads = 0

    async def load_positions(self, partitions: Collection[int]) -> tuple[dict[int, int], dict[int, tuple[str, int]]]:
        self._positioned_gens = {p: self.gens.get(p, 0) for p in partitions}
        return await super().load_positions(partitions)

    def restore_state(self, partition: int) -> tuple[int, int]:
        return self._positioned_gens.get(partition, 0), 0

    def rewind_chunk(self) -> int:
        return 10_000

    async def load_rewinds(self, wanted: Mapping[int, Collection[str]]) -> dict[int, RewindView | Exception]:
        self.rewind_reads += 1
        marks = {p: {b: self.watermarks.get((b, p), NO_WATERMARK) for b in boards} for p, boards in wanted.items()}
        self.between()
        return {
            p: RewindView(marks[p], self.checkpoints.get(p, NO_WATERMARK), self.gens.get(p, 0), p in self.restoring, 0)
            for p in wanted
        }


TP0 = TopicPartition("scores", 0)


class _Rig:
    def __init__(self, sink: FakeSink | None = None) -> None:
        self.consumer, self.metrics = FakeConsumer([TP0]), WorkerMetrics()
        self.sink = sink if sink is not None else _ClusterSink()
        self.assignment = Assignment(WorkerSettings(topic="scores"), self.consumer, self.sink, self.metrics)  # type: ignore[arg-type]
        self.assignment.add([TP0])

    @property
    def state(self) -> PartitionState:
        return self.assignment.parts[0]

    async def resync(self) -> int:
        """Positioned again (as after a fence); returns where partition 0 resumes."""
        self.assignment.unready_all()
        await self.assignment.position(self.assignment.waiting())
        return self.consumer.seeks[-1][1]

    def apply(self, board: str, mark: int, first: int) -> None:
        """A window of ``board`` landed (the sink holds it, the ledger knows it)."""
        if board not in self.state.watermarks:  # looked up first, as the intake does
            self.state.learned({board: self.sink.watermarks.get((board, 0), NO_WATERMARK)})
        self.assignment.applied([BoardBatch(board, {"p": 1}, {0: mark})], {0: first})
        self.sink.watermarks[(board, 0)] = mark

    async def applied_past_the_checkpoint(self) -> None:
        """Positioned at 99; b taken from 99 to 120 (a window from 100); the checkpoint moved to 130."""
        self.sink.checkpoints[0], self.sink.watermarks[("b", 0)] = 99, 99
        await self.resync()
        self.apply("b", 120, first=100)
        self.sink.checkpoints[0] = 130
        self.state.checkpoint_moved(130)

    def rewinds(self) -> float:
        return self.metrics.registry.get_sample_value("hotboard_resync_rewinds_total", {"partition": "0"}) or 0.0


async def _applied_rig() -> tuple[_Rig, _ClusterSink]:
    """A rig on the fake cluster sink, b applied past the checkpoint (``applied_past_the_checkpoint``)."""
    rig = _Rig()
    assert isinstance(rig.sink, _ClusterSink)
    await rig.applied_past_the_checkpoint()
    return rig, rig.sink


async def test_a_board_behind_what_this_worker_applied_rewinds_its_partition_and_a_second_resync_again() -> None:
    rig = _Rig()
    assert isinstance(rig.sink, RewindSource)
    rig.sink.checkpoints[0] = 99
    await rig.resync()
    rig.apply("b", 120, first=100)
    rig.apply("c", 120, first=100)
    rig.sink.checkpoints[0] = 130  # the checkpoint moved (on a master that survived)
    rig.state.checkpoint_moved(130)
    rig.sink.watermarks[("b", 0)] = 99  # b's master failed over to a replica without the window
    assert await rig.resync() == 100 and rig.rewinds() == 1
    assert rig.state.checkpoint == 130 and rig.state.next_offset == 100
    # resynchronised again before the replay reached 120: the ledger still knows what b lacks
    assert await rig.resync() == 100 and rig.rewinds() == 2
    rig.apply("b", 120, first=100)  # the replay gave it back
    assert await rig.resync() == 131 and rig.rewinds() == 2


async def test_a_restore_landing_between_the_reads_is_never_taken_for_a_lacking_board() -> None:
    rig, sink = await _applied_rig()

    def restore() -> None:  # the swap lowers b and bumps the generation after b's watermark was read
        sink.gens[0] = 5
        sink.watermarks[("b", 0)] = 99

    sink.watermarks[("b", 0)] = 99  # as the swap left it
    sink.between = restore
    assert await rig.resync() == 131 and rig.rewinds() == 0
    assert len(rig.state.ledger) == 0  # the restore's lowering governs: nothing owed
    sink.between = lambda: None
    assert await rig.resync() == 131 and rig.rewinds() == 0


async def test_a_restore_between_two_positionings_or_its_mark_is_not_a_rewind() -> None:
    rig, sink = await _applied_rig()
    sink.watermarks[("b", 0)] = 99
    sink.restoring.add(0)  # a cluster restore between its two lowerings
    assert await rig.resync() == 131 and rig.rewinds() == 0 and len(rig.state.ledger) == 0
    sink.restoring.clear()
    rig.apply("b", 140, first=131)
    sink.gens[0], sink.watermarks[("b", 0)] = 9, 99  # a restore done, and positioned in its generation
    assert await rig.resync() == 131 and rig.rewinds() == 0 and len(rig.state.ledger) == 0


async def test_an_absent_watermark_or_one_server_never_rewinds() -> None:
    rig = _Rig()
    await rig.applied_past_the_checkpoint()
    del rig.sink.watermarks[("b", 0)]  # a FLUSHALL of b's master, an expired period board
    assert await rig.resync() == 131 and rig.rewinds() == 0
    assert len(rig.state.ledger) == 1, "b's last window stays (until it goes idle), never rewound for while absent"
    assert await rig.resync() == 131 and rig.rewinds() == 0
    one = _Rig(FakeSink())  # one server: checkpoints and boards are lost together
    await one.applied_past_the_checkpoint()
    one.sink.watermarks[("b", 0)] = 99
    assert await one.resync() == 131 and one.rewinds() == 0 and len(one.state.ledger) == 0


async def test_a_rewind_into_deleted_records_halts_as_retention_lost() -> None:
    rig = _Rig()
    rig.sink.checkpoints[0], rig.sink.watermarks[("b", 0)] = 99, 99
    await rig.resync()
    rig.apply("b", 120, first=100)
    rig.apply("b", 125, first=121)
    rig.sink.checkpoints[0], rig.sink.watermarks[("b", 0)] = 130, 99  # both windows lacked
    rig.state.checkpoint_moved(130)
    rig.consumer.starts[TP0] = 110  # retention deleted 100..109, which b lacks
    await rig.resync()
    assert rig.assignment.halted[0].reason is HaltReason.RETENTION_LOST
    assert len(rig.state.ledger) == 0  # lifted by the operator's checkpoint, not rewound again


def test_rewind_defaults_to_no_rewind() -> None:
    assert Rewind() == Rewind(seek=None, lost=None, owed={}, behind={})


def test_a_replayed_record_dead_lettered_before_is_not_dead_lettered_again() -> None:
    bad = InvalidEvent(Reason.TOO_LARGE, "x")
    letters = [(0, (json_record({}, offset), bad)) for offset in (95, 130, 131)] + [(1, (json_record({}, 5), bad))]
    kept = dlq.past_checkpoints(letters, {0: 130, 1: NO_WATERMARK})
    assert [(p, r.offset) for p, (r, _) in kept] == [(0, 131), (1, 5)]  # at or below 130: acknowledged before


def test_only_the_cluster_sink_offers_rewinds() -> None:
    """One server holds the checkpoints and the boards as one dataset: no ledger, no rewind there."""
    assert issubclass(ClusterSink, RewindSource)
    assert not issubclass(RedisSink, RewindSource) and not issubclass(ArchiveSink, RewindSource)
