"""Positioning several partitions reads their rewinds once (ingest/rewind.py ``rewinds_for``, flusher/cluster.py
``load_rewinds``): the round trips of one partition whatever their number, and the decisions of each alone."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from aiokafka import TopicPartition

from flusher.batch import NO_WATERMARK
from flusher.cluster import ClusterSink
from flusher.redis_sink import SCRIPT_PLAYERS
from hotboard.script import Script
from ingest.assignment import Assignment
from ingest.ledger import Applied
from ingest.metrics import WorkerMetrics
from ingest.settings import WorkerSettings
from tests.fakes import FakeConsumer
from tests.unit.test_rewind import _ClusterSink

PARTITIONS = range(4)


class _Hash:
    """The checkpoint hash of a counted cluster: every partition's checkpoint at 130, nothing else."""

    def __init__(self) -> None:
        self.hmgets = 0

    async def hmget(self, key: str, fields: Sequence[str]) -> list[Any]:
        self.hmgets += 1
        return ["130" if f.isdigit() else None for f in fields]


class _CountedCluster(ClusterSink):
    """The real ClusterSink's rewind read over a transport that counts its rounds: every board at 120."""

    def __init__(self) -> None:
        self.hash = _Hash()
        super().__init__(self.hash, "scores", SCRIPT_PLAYERS)  # type: ignore[arg-type]
        self.rounds = 0

    async def server_id(self) -> str:
        return "one"

    async def load_positions(self, partitions: Collection[int]) -> tuple[dict[int, int], dict[int, tuple[str, int]]]:
        return {p: 130 for p in partitions}, {}

    async def routed(self, commands: list[bytes], route: list[str], used: Sequence[Script], wait: bool) -> list[Any]:
        self.rounds += 1
        return [b"120" for _ in commands]


async def test_positioning_several_partitions_reads_their_rewinds_in_one_load() -> None:
    tps = [TopicPartition("scores", p) for p in PARTITIONS]
    sink = _CountedCluster()
    assignment = Assignment(WorkerSettings(topic="scores"), FakeConsumer(tps), sink, WorkerMetrics())
    assignment.add(tps)
    for p in PARTITIONS:
        for board in ("a", "b", "c"):
            assignment.parts[p].ledger.applied(board, 120, 100, 101)
    await assignment.position(assignment.waiting())
    assert assignment.ready
    assert (sink.rounds, sink.hash.hmgets) == (1, 1), "one load for every partition positioned together"


def _apply(sink: _ClusterSink, assignment: Assignment, p: int, board: str, mark: int, first: int) -> None:
    state = assignment.parts[p]
    if board not in state.watermarks:
        state.learned({board: sink.watermarks.get((board, p), NO_WATERMARK)})
    state.applied(board, mark, first)
    sink.watermarks[(board, p)] = mark


def _scenario(sink: _ClusterSink, consumer: FakeConsumer, p: int) -> None:
    """What Redis holds for partition ``p`` at the resync: each partition a different case of the table."""
    case = p % 6
    if case == 0:
        sink.watermarks[("b", p)] = 99  # behind: rewinds to 100
    elif case == 1:
        pass  # whole: resumes after the checkpoint
    elif case == 2:
        del sink.watermarks[("b", p)]  # absent: never rewound for
    elif case == 3:
        sink.watermarks[("b", p)], sink.gens[p] = 99, 4  # a restore since: the ledger goes
    elif case == 4:
        sink.watermarks[("b", p)] = 99
        consumer.starts[TopicPartition("scores", p)] = 110  # retention deleted what b lacks: halted
    else:
        sink.watermarks[("c", p)] = 100  # c behind from its second window only


async def _positioned(partitions: Collection[int]) -> dict[int, tuple[object, ...]]:
    """``partitions`` positioned together after applying windows, each in its own case; what each ended with."""
    tps = [TopicPartition("scores", p) for p in partitions]
    sink, consumer, metrics = _ClusterSink(), FakeConsumer(tps), WorkerMetrics()
    assignment = Assignment(WorkerSettings(topic="scores"), consumer, sink, metrics)  # type: ignore[arg-type]
    assignment.add(tps)
    for p in partitions:
        sink.checkpoints[p], sink.watermarks[("b", p)], sink.watermarks[("c", p)] = 99, 99, 99
    await assignment.position(assignment.waiting())
    for p in partitions:
        _apply(sink, assignment, p, "b", 120, 100)
        _apply(sink, assignment, p, "c", 110, 100)
        _apply(sink, assignment, p, "c", 125, 111)
        sink.checkpoints[p] = 130
        assignment.parts[p].checkpoint_moved(130)
        _scenario(sink, consumer, p)
    assignment.unready_all()
    await assignment.position(assignment.waiting())
    seeks = {tp.partition: offset for tp, offset in consumer.seeks}
    out: dict[int, tuple[object, ...]] = {}
    for p in partitions:
        state, halt = assignment.parts[p], assignment.halted.get(p)
        ledger: dict[str, Applied] = dict(state.ledger.entries())
        rewinds = metrics.registry.get_sample_value("hotboard_resync_rewinds_total", {"partition": str(p)})
        out[p] = (seeks[p], halt.reason if halt else None, ledger, dict(state.ledger.owed()), rewinds or 0.0)
    assert sink.rewind_reads == 1
    return out


async def test_partitions_positioned_together_are_decided_as_each_alone() -> None:
    together = await _positioned(range(12))
    alone = {p: (await _positioned([p]))[p] for p in range(12)}
    assert together == alone
    assert [together[p][0] for p in range(6)] == [100, 131, 131, 131, 100, 101]  # 4 halted: its first seek
    assert together[4][1] is not None and together[0][4] == 1.0
