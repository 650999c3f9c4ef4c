"""Positioning several partitions reads their rewinds together (ingest/rewind.py ``rewinds_for``, flusher/cluster.py
``load_rewinds``): the round trips of one partition whatever their number, in batches of at most about
``REWIND_CHUNK`` watermarks (a partition's boards never split unless it alone holds more), each partition decided
alone, and one whose read failed left waiting for the next round while the others resume."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from itertools import pairwise
from typing import Any

import pytest
from aiokafka import TopicPartition
from hypothesis import given
from hypothesis import strategies as st
from redis.exceptions import ConnectionError, ResponseError

from flusher import rewind_read
from flusher.batch import NO_WATERMARK, RewindView
from flusher.cluster import ClusterSink
from flusher.redis_sink import SCRIPT_PLAYERS
from hotboard.script import Script
from ingest.assignment import Assignment
from ingest.ledger import Applied
from ingest.metrics import WorkerMetrics
from ingest.pausing import PauseReason
from ingest.rewind import batched
from ingest.settings import WorkerSettings
from ingest.worker import Worker
from tests.fakes import FakeConsumer
from tests.unit.test_rewind import _ClusterSink
from tests.unit.test_rewind_read import _command

PARTITIONS = range(4)
#: Long enough for any retry of a partition whose read failed (its backoff is capped there).
RETRY_S = WorkerSettings().backoff_max_s


class _Hash:
    """The checkpoint hash of a counted cluster: every partition's checkpoint at 130, nothing else; a read
    asking for a partition of ``failing`` raises (its master went away)."""

    def __init__(self) -> None:
        self.hmgets = 0
        self.failing: set[int] = set()

    async def hmget(self, key: str, fields: Sequence[str]) -> list[Any]:
        self.hmgets += 1
        if any(f.isdigit() and int(f) in self.failing for f in fields):
            raise ConnectionError("the checkpoints' master went away")
        return ["130" if f.isdigit() else None for f in fields]


class _CountedCluster(ClusterSink):
    """The real ClusterSink's rewind read over a transport that counts its rounds: every board at 120 unless
    ``held`` (partition, board) says otherwise (a value, or an error reply); ``asked``: each read's partitions
    and their boards."""

    def __init__(self) -> None:
        self.hash = _Hash()
        super().__init__(self.hash, "scores", SCRIPT_PLAYERS)  # type: ignore[arg-type]
        self.rounds = 0
        self.held: dict[tuple[int, str], Any] = {}
        self.asked: list[dict[int, int]] = []

    async def server_id(self) -> str:
        return "one"

    async def load_positions(self, partitions: Collection[int]) -> tuple[dict[int, int], dict[int, tuple[str, int]]]:
        return {p: 130 for p in partitions}, {}

    async def load_rewinds(self, wanted: Mapping[int, Collection[str]]) -> dict[int, RewindView | Exception]:
        self.asked.append({p: len(boards) for p, boards in wanted.items()})
        return await super().load_rewinds(wanted)

    async def routed(self, commands: list[bytes], route: list[str], used: Sequence[Script], wait: bool) -> list[Any]:
        self.rounds += 1
        partition_of = {self.field(p): p for p in range(16)}
        out = []
        for packed in commands:
            _, key, field = _command(packed)
            out.append(self.held.get((partition_of[field], key.split("{")[1].split("}")[0]), b"120"))
        return out


def _assignment(
    sink: _CountedCluster, boards: Mapping[int, Sequence[str]], clock: Callable[[], float] = time.monotonic
) -> tuple[Assignment, FakeConsumer]:
    """Partitions holding ``boards`` in their ledgers (each taken from 100 to 120 by a window from 101), assigned
    and waiting to be positioned from checkpoint 130."""
    tps = [TopicPartition("scores", p) for p in boards]
    consumer = FakeConsumer(tps)
    assignment = Assignment(WorkerSettings(topic="scores"), consumer, sink, WorkerMetrics(), clock)
    assignment.add(tps)
    for p, names in boards.items():
        for board in names:
            assignment.parts[p].ledger.applied(board, 120, 100, 101)
    return assignment, consumer


async def test_positioning_several_partitions_reads_their_rewinds_in_one_load() -> None:
    sink = _CountedCluster()
    assignment, _ = _assignment(sink, {p: ("a", "b", "c") for p in PARTITIONS})
    await assignment.position(assignment.waiting())
    assert assignment.ready
    assert (sink.rounds, sink.hash.hmgets) == (1, 1), "one load for every partition positioned together"


async def test_a_partition_whose_read_failed_waits_for_the_next_round_and_the_others_resume() -> None:
    sink, now = _CountedCluster(), [1000.0]
    assignment, consumer = _assignment(sink, {p: ("a", "b", "c") for p in PARTITIONS}, lambda: now[0])
    sink.held[(2, "b")] = b"100"  # behind what this worker applied: its partition must rewind to 101, not skip it
    sink.held[(2, "c")] = ResponseError("CLUSTERDOWN the slot of c is not served")  # its read fails, once
    unread = await assignment.position(assignment.waiting())
    assert list(unread) == [2] and isinstance(unread[2], ResponseError)
    assert {tp.partition: offset for tp, offset in consumer.seeks} == {0: 131, 1: 131, 3: 131}
    assert assignment.positioned(PARTITIONS) == {0, 1, 3} and assignment.waiting() == [], "after its backoff"
    now[0] += RETRY_S
    assert assignment.waiting() == [2]
    assert assignment.pauses.reasons(2) == {PauseReason.POSITIONING}, "not fetched: nothing resumes unchecked"
    assert dict(assignment.parts[2].ledger.entries()) == {b: Applied(120, 100, 101) for b in "abc"}
    del sink.held[(2, "c")]
    unread = await assignment.position(assignment.waiting())
    assert unread == {} and assignment.ready
    assert consumer.seeks[-1] == (TopicPartition("scores", 2), 101), "the rewind decided on a real read"


async def test_a_failure_that_is_no_outage_ends_the_positioning_instead_of_waiting_forever() -> None:
    """An error that is not Redis's, the network's or Kafka's (a bug: a read left unanswered, a value no reply
    holds) must not leave its partition paused and retried forever: it ends the round, as ingest/errors.py has
    every such error end the worker."""
    sink = _CountedCluster()
    assignment, _ = _assignment(sink, {p: ("a", "b", "c") for p in PARTITIONS})
    sink.held[(2, "c")] = ValueError("not a reply any Redis sends")
    with pytest.raises(ValueError, match="not a reply"):
        await assignment.position(assignment.waiting())


async def test_a_read_that_raised_fails_its_batch_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rewind_read, "REWIND_CHUNK", 5)  # three boards each: one partition per batch
    sink, now = _CountedCluster(), [1000.0]
    assignment, consumer = _assignment(sink, {p: ("a", "b", "c") for p in PARTITIONS}, lambda: now[0])
    sink.hash.failing = {1}
    unread = await assignment.position(assignment.waiting())
    assert list(unread) == [1] and isinstance(unread[1], ConnectionError)
    assert assignment.positioned(PARTITIONS) == {0, 2, 3} and assignment.waiting() == []
    now[0] += RETRY_S
    assert assignment.waiting() == [1]
    sink.hash.failing = set()
    unread = await assignment.position(assignment.waiting())
    assert unread == {} and assignment.ready and consumer.seeks[-1] == (TopicPartition("scores", 1), 131)


async def test_one_read_holds_at_most_about_a_chunk_of_watermarks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rewind_read, "REWIND_CHUNK", 5)
    sink = _CountedCluster()
    boards = {0: "ab", 1: "cd", 2: "abcdefg", 3: "a", 4: "bc", 5: "de", 6: "", 7: "fgh"}
    assignment, _ = _assignment(sink, boards)
    await assignment.position(assignment.waiting())
    assert assignment.ready
    # 2 + 2 fit, 7 does not; 7 alone (its boards not split between reads, chunked inside its own read); 1 + 2 + 2
    # fit, 3 more do not; partition 6 holds no ledger and is not read
    assert sink.asked == [{0: 2, 1: 2}, {2: 7}, {3: 1, 4: 2, 5: 2}, {7: 3}]
    assert sink.rounds == 5 and sink.hash.hmgets == 4


@pytest.mark.parametrize(
    ("sizes", "batches"),
    [
        ([], []),
        ([3], [[0]]),
        ([2, 3], [[0, 1]]),
        ([2, 2, 2], [[0, 1], [2]]),
        ([5, 1], [[0], [1]]),
        ([7, 1, 1], [[0], [1, 2]]),
        ([1, 7, 1], [[0], [1], [2]]),
        ([1, 1, 1, 1, 1, 1], [[0, 1, 2, 3, 4], [5]]),
    ],
)
def test_partitions_are_batched_to_a_chunk_of_watermarks(sizes: list[int], batches: list[list[int]]) -> None:
    assert [list(b) for b in batched(sizes, 5)] == batches


@given(st.lists(st.integers(1, 12), max_size=40), st.integers(1, 10))
def test_batches_are_bounded_in_order_and_full(sizes: list[int], limit: int) -> None:
    batches = [list(b) for b in batched(sizes, limit)]
    assert [i for b in batches for i in b] == list(range(len(sizes))), "every partition once, in order"
    for b in batches:
        assert len(b) == 1 or sum(sizes[i] for i in b) <= limit, "over the chunk only alone"
    for b, after in pairwise(batches):
        assert sum(sizes[i] for i in b) + sizes[after[0]] > limit, "a batch ends only where the next would not fit"


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


async def test_a_persistently_failing_read_retries_its_partition_alone_on_its_own_backoff() -> None:
    """Partition 2's slot is not served for a minute: it is positioned again on a backoff of its own that grows
    (from 0.1 s to ``backoff_max_s``), not at every round of the intake, and the worker-wide backoff (whose wait
    holds every partition's fetching, and which a healthy flush resets) is not used for it: the others fetch."""
    sink = _CountedCluster()
    settings = WorkerSettings(topic="scores", redis="redis://127.0.0.1:1/0")
    worker = Worker(settings, handle_signals=False, sink=sink)
    now = 1000.0
    assignment, _ = _assignment(sink, {p: ("a", "b", "c") for p in PARTITIONS}, clock=lambda: now)
    worker._assignment = assignment
    sink.held[(2, "c")] = ResponseError("CLUSTERDOWN the slot of c is not served")
    worker._stopping.set()  # a backoff's wait returns at once
    for _ in range(1200):  # a minute of intake rounds, 50 ms apart
        await worker._position()
        assert worker._backoff.failures == 0, "no worker-wide backoff for one partition's read"
        assert assignment.positioned(PARTITIONS) == {0, 1, 3}
        now += 0.05
    attempts = sum(2 in asked for asked in sink.asked)
    assert 12 <= attempts <= 30, f"{attempts} reads of partition 2 in a minute: 0.1 s doubling up to 5 s"
    del sink.held[(2, "c")]
    now += settings.backoff_max_s
    await worker._position()
    assert assignment.ready and worker._identity.known == "one"
