"""The worker's intake and its flush overlap: a real worker (its intake, flush loop and assignment) on a fake
consumer and a sink whose flush waits on an event the test holds, as a flush waits on a slow Redis. While it
waits, the intake goes on fetching and folding into the next window, and the waiting window's checkpoint stays
where it was until its flush returns."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Sequence

import orjson
import pytest
from aiokafka import TopicPartition

from flusher.batch import BoardBatch, BoardResult, CheckpointResult, ExpectedWatermark, Outcome
from hotboard.records import Record
from ingest import worker as worker_module
from ingest.settings import WorkerSettings
from ingest.worker import Worker
from tests.fakes import FakeConsumer, FakeSink
from tests.records import record

TP = TopicPartition("scores", 0)
#: Every wait on the worker's state gives up after this: a hang fails the test instead of holding the run.
WAIT_S = 5.0


class _Changes:
    """Woken on every fetch and every sink call: the test waits on the worker's state, never on a clock."""

    def __init__(self) -> None:
        self.cond = asyncio.Condition()

    async def notify(self) -> None:
        async with self.cond:
            self.cond.notify_all()

    async def until(self, predicate: Callable[[], bool], what: str) -> None:
        try:
            async with asyncio.timeout(WAIT_S), self.cond:
                await self.cond.wait_for(predicate)
        except TimeoutError:
            pytest.fail(f"not within {WAIT_S}s: {what}")


class _FeedConsumer(FakeConsumer):
    """Hands over the record lists the test feeds, one list per fetch; waits up to the fetch's timeout for one."""

    def __init__(self, changes: _Changes) -> None:
        super().__init__([TP])
        self.changes = changes
        self.feed: asyncio.Queue[list[Record]] = asyncio.Queue()
        self.fetches = 0

    async def getmany(
        self, *tps: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[Record]]:
        self.fetches += 1
        await self.changes.notify()  # the fold of the previous fetch, if any, is done
        if TP in self.paused:
            return {}
        try:
            records = await asyncio.wait_for(self.feed.get(), timeout_ms / 1000)
        except TimeoutError:
            return {}
        return {TP: records}

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.commits.update(offsets)


class _SlowSink(FakeSink):
    """A flush waits on ``release`` (Redis slow to answer), then applies every batch."""

    def __init__(self, changes: _Changes) -> None:
        super().__init__()
        self.changes = changes
        self.release = asyncio.Event()
        self.flushing = 0
        self.flushed = 0
        self.moves: list[tuple[int, int, int]] = []

    async def load_checkpoints(self, partitions: Collection[int]) -> dict[int, int]:
        return {p: self.checkpoints[p] for p in partitions if p in self.checkpoints}

    async def flush(self, batches: Sequence[BoardBatch], expected: ExpectedWatermark) -> list[BoardResult]:
        self.flushing += 1
        await self.changes.notify()
        await self.release.wait()
        self.flushing -= 1
        self.flushed += 1
        return [BoardResult(b.board, Outcome.APPLIED, len(b.deltas)) for b in batches]

    async def advance_checkpoints(self, moves: dict[int, tuple[int, int]]) -> list[CheckpointResult]:
        self.moves += [(p, old, new) for p, (old, new) in moves.items()]
        results = await super().advance_checkpoints(moves)
        await self.changes.notify()
        return results

    def forget_registry(self) -> None:
        pass


class _NoProducer:
    async def stop(self) -> None:
        pass


def _records(first: int, count: int) -> list[Record]:
    return [
        record(orjson.dumps({"player": f"p{i}", "delta": 1}), i, key=b"k", timestamp=1000 + i)
        for i in range(first, first + count)
    ]


async def test_the_intake_folds_the_next_window_while_a_flush_waits_on_redis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    changes = _Changes()
    consumer, sink = _FeedConsumer(changes), _SlowSink(changes)
    monkeypatch.setattr(worker_module, "AIOKafkaConsumer", lambda **_: consumer)
    monkeypatch.setattr(worker_module, "AIOKafkaProducer", lambda **_: _NoProducer())
    settings = WorkerSettings(topic="scores", window_ms=20, backoff_max_s=0.01, redis="redis://127.0.0.1:1/0")
    worker = Worker(settings, sink=sink, handle_signals=False, dead_letters=False)
    await worker.on_assigned({TP})
    running = asyncio.create_task(worker.run())
    try:
        # 1. a first window (offsets 0-2) is folded, sealed by a tick, and its flush waits on Redis
        await consumer.feed.put(_records(0, 3))
        await changes.until(lambda: sink.flushing == 1, "the first window's flush started")
        assert worker.pending_entries == 3 and sink.checkpoints == {}
        # 2. meanwhile the intake fetches and folds offsets 3-5 into the next window's pending state
        fetches = consumer.fetches
        await consumer.feed.put(_records(3, 3))
        await changes.until(lambda: worker.pending_entries == 6, "offsets 3-5 folded while the flush waits")
        await changes.until(lambda: consumer.fetches > fetches + 1, "the intake fetched again")
        assert sink.flushing == 1 and sink.flushed == 0  # the flush is still blocked...
        assert sink.checkpoints == {} and sink.moves == []  # ...and the blocked window's checkpoint has not moved
        assert worker._assignment.parts[0].checkpoint == -1
        # 3. Redis answers: the first window's checkpoint moves to its own end (2), then the next window's (5)
        sink.release.set()
        await changes.until(lambda: sink.checkpoints.get(0) == 5, "both windows flushed")
        assert sink.moves == [(0, -1, 2), (0, 2, 5)]
        assert worker.pending_entries == 0
    finally:
        worker.stop()
        sink.release.set()
        async with asyncio.timeout(WAIT_S):
            await running
