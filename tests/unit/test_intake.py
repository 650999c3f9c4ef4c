"""The intake against a fake consumer and sink: what it does when Redis fails while a rebalance takes the
partition it was folding."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

import orjson
from aiokafka import TopicPartition
from aiokafka.errors import IllegalStateError
from redis.exceptions import ConnectionError as RedisConnectionError

from hotboard.board_store import DefinitionCache
from hotboard.boards import DEFAULT, BoardDef, DefinitionError
from hotboard.records import Record
from hotboard.timing import Backoff
from ingest.assignment import Assignment
from ingest.intake import Intake
from ingest.metrics import WorkerMetrics
from ingest.pending import Pending
from ingest.redis_health import RedisHealth
from ingest.settings import WorkerSettings
from tests.records import record

TP = TopicPartition("scores", 0)


class _Consumer:
    """Holds an assignment; seeking a partition outside it fails as aiokafka's does."""

    def __init__(self) -> None:
        self.assigned = {TP}
        self.seeks: list[tuple[TopicPartition, int]] = []

    def pause(self, *tps: TopicPartition) -> None: ...

    def resume(self, *tps: TopicPartition) -> None: ...

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if tp not in self.assigned:
            raise IllegalStateError(f"No current assignment for partition {tp}")
        self.seeks.append((tp, offset))


class _Sink:
    """Redis fails the watermark lookup after a rebalance took the partition (``on_lookup`` runs first)."""

    def __init__(self) -> None:
        self.on_lookup: Callable[[], None] = lambda: None

    async def load_definitions(
        self, boards: Collection[str], cache: DefinitionCache
    ) -> dict[str, BoardDef | DefinitionError]:
        return dict.fromkeys(boards, DEFAULT)

    async def load_watermarks(self, partition: int, boards: Collection[str]) -> tuple[dict[str, int], int]:
        self.on_lookup()
        raise RedisConnectionError("injected: Redis gone while the lookup waited")


def _intake(revoke: bool) -> tuple[Intake, _Consumer]:
    settings = WorkerSettings(topic="scores", backoff_max_s=0.01)
    consumer, sink, metrics = _Consumer(), _Sink(), WorkerMetrics()
    assignment = Assignment(settings, consumer, sink, metrics)  # type: ignore[arg-type]
    assignment.add([TP])
    assignment.parts[0].positioned(-1, 0)

    def rebalance() -> None:
        if revoke:
            assignment.remove([0])
            consumer.assigned.clear()

    sink.on_lookup = rebalance
    intake = Intake(settings, consumer, assignment, Pending(), sink, metrics, asyncio.Event(), Backoff(cap_s=0.01),  # type: ignore[arg-type]
                    RedisHealth())  # fmt: skip
    return intake, consumer


def _records() -> list[Record]:
    body = orjson.dumps({"player": "p", "delta": 1})
    return [record(body, i, key=b"p", timestamp=1000 + i) for i in range(3)]


async def test_a_failed_lookup_on_a_partition_still_held_seeks_it_back() -> None:
    intake, consumer = _intake(revoke=False)
    await intake.fold({TP: _records()})
    assert consumer.seeks == [(TP, 0)]


async def test_a_failed_lookup_on_a_partition_a_rebalance_took_meanwhile_does_not_seek_it() -> None:
    intake, consumer = _intake(revoke=True)
    await intake.fold({TP: _records()})  # no IllegalStateError (which would end the worker)
    assert consumer.seeks == []
