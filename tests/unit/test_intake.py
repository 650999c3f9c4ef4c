"""The intake against a fake consumer and sink: what it does when Redis fails while a rebalance takes the
partition it was folding, what it tells the Redis health, and how far a partition's fold has come."""

from __future__ import annotations

import asyncio

import orjson
from aiokafka import TopicPartition
from redis.exceptions import ConnectionError as RedisConnectionError

from hotboard.records import Record
from hotboard.timing import Backoff
from ingest.assignment import Assignment
from ingest.intake import Intake
from ingest.metrics import WorkerMetrics
from ingest.partitions import PartitionState
from ingest.pending import Pending
from ingest.redis_health import RedisHealth
from ingest.settings import WorkerSettings
from tests.fakes import FakeConsumer, FakeSink
from tests.records import record

TP = TopicPartition("scores", 0)


class _Rig:
    """A real intake and assignment on the fakes, partition 0 positioned at offset 0 (no checkpoint)."""

    def __init__(self, *, revoke: bool = False, lookup_fails: bool = False) -> None:
        settings = WorkerSettings(topic="scores", backoff_max_s=0.01)
        self.consumer, self.sink, metrics = FakeConsumer([TP]), FakeSink(), WorkerMetrics()
        if lookup_fails:
            self.sink.lookup_error = RedisConnectionError("injected: Redis gone while the lookup waited")
        self.assignment = Assignment(settings, self.consumer, self.sink, metrics)  # type: ignore[arg-type]
        self.assignment.add([TP])
        self.state.positioned(-1, 0)
        self.health = RedisHealth()
        self.pending = Pending()

        def rebalance() -> None:
            if revoke:
                self.assignment.remove([0])
                self.consumer.assigned.clear()

        self.sink.on_lookup = rebalance
        self.intake = Intake(
            settings,
            self.consumer,
            self.assignment,
            self.pending,
            self.sink,  # type: ignore[arg-type]
            metrics,
            asyncio.Event(),
            Backoff(cap_s=0.01),
            self.health,
        )

    @property
    def state(self) -> PartitionState:
        return self.assignment.parts[0]

    def folded(self) -> int:
        return sum(w.events for w in (self.pending.active, *self.pending.sealed))


def _records(first: int = 0, count: int = 3) -> list[Record]:
    body = orjson.dumps({"player": "p", "delta": 1})
    return [record(body, i, key=b"p", timestamp=1000 + i) for i in range(first, first + count)]


async def test_a_failed_lookup_on_a_partition_still_held_seeks_it_back() -> None:
    rig = _Rig(lookup_fails=True)
    await rig.intake.fold({TP: _records()})
    assert rig.consumer.seeks == [(TP, 0)]


async def test_a_failed_lookup_on_a_partition_a_rebalance_took_meanwhile_does_not_seek_it() -> None:
    rig = _Rig(revoke=True, lookup_fails=True)
    await rig.intake.fold({TP: _records()})  # no IllegalStateError (which would end the worker)
    assert rig.consumer.seeks == []


async def test_a_failed_lookup_makes_redis_suspect_without_a_resync() -> None:
    rig = _Rig(lookup_fails=True)
    await rig.intake.fold({TP: _records()})
    assert rig.health.suspect and not rig.health.take_resync()
    assert rig.folded() == 0 and rig.state.next_offset == 0


async def test_a_lookup_that_meets_another_checkpoint_seeks_back_and_requests_a_resync() -> None:
    rig = _Rig()
    rig.sink.checkpoints[0] = 7  # an emptied, or operator-moved, Redis: not what the partition positioned from
    await rig.intake.fold({TP: _records()})
    assert rig.consumer.seeks == [(TP, 0)]
    assert rig.health.take_resync() and not rig.health.take_resync()  # once per request
    assert rig.folded() == 0 and rig.state.next_offset == 0 and rig.state.watermarks == {}


async def test_a_lookup_that_meets_the_checkpoint_move_in_flight_folds() -> None:
    rig = _Rig()
    rig.state.checkpoint_moving(1)
    rig.sink.checkpoints[0] = 1  # the move landed before its reply was read
    await rig.intake.fold({TP: _records()})
    assert rig.consumer.seeks == [] and not rig.health.resync_requested
    assert rig.folded() == 3 and rig.state.next_offset == 3


async def test_records_below_the_fold_position_are_skipped_once_redelivered() -> None:
    rig = _Rig()
    await rig.intake.fold({TP: _records(0, 3)})
    await rig.intake.fold({TP: _records(1, 4)})  # 1 and 2 again (records in flight at a seek), then 3 and 4
    assert rig.folded() == 5 and rig.state.next_offset == 5
    assert rig.state.watermarks == {"global": -1}  # looked up once, when first seen
