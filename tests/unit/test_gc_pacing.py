"""The cyclic GC's pace while a worker runs (:mod:`ingest.gc_pacing`): a fetch's records trigger no collection,
counted by the collector's own callbacks against the interpreter's pace; the last holder restores that pace."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from bench.fetch_cost import Consumer, record_sets
from bench.fold_cost import PARTITIONS
from ingest import gc_pacing
from ingest.settings import WorkerSettings

MAX_POLL_RECORDS = WorkerSettings().max_poll_records


@contextmanager
def collections() -> Iterator[list[int]]:
    """The generations collected meanwhile, one entry per collection."""
    seen: list[int] = []

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(callback)
    try:
        yield seen
    finally:
        gc.callbacks.remove(callback)


def drain_fetches(count: int) -> int:
    """Consume ``count`` events as the worker's consumer does (parsed records, max_poll_records a call)."""
    sets = record_sets(count, 0, dict.fromkeys(range(PARTITIONS), 0))

    async def drain() -> int:  # the subscription's futures want a running loop; nothing awaits
        consumer = Consumer("raw")
        consumer.fetched(sets)
        return sum(len(records) for batch in consumer.drain() for records in batch.values())

    return asyncio.run(drain())


@pytest.fixture(autouse=True)
def _interpreter_pace() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # CPython's default, whatever ran before
    yield
    gc.set_threshold(*before)


def test_a_fetch_of_parsed_records_triggers_collections_at_the_interpreter_pace() -> None:
    """The reference: every fetch call holds max_poll_records records, two tracked objects each."""
    with collections() as seen:
        drained = drain_fetches(4 * MAX_POLL_RECORDS)
    assert drained == 4 * MAX_POLL_RECORDS
    assert len(seen) >= 4 * MAX_POLL_RECORDS * 2 // 700 // 2


def test_a_fetch_of_parsed_records_triggers_no_collection_at_the_worker_pace() -> None:
    with gc_pacing.worker_pace(MAX_POLL_RECORDS), collections() as seen:
        drained = drain_fetches(4 * MAX_POLL_RECORDS)
    assert drained == 4 * MAX_POLL_RECORDS
    assert seen == []


def test_the_pace_grows_with_the_records_a_fetch_may_return() -> None:
    with gc_pacing.worker_pace(50_000):
        assert gc.get_threshold() == (gc_pacing.TRACKED_PER_RECORD * 50_000 * gc_pacing.MARGIN, 10, 10)
    with gc_pacing.worker_pace(1):  # never below the interpreter's own pace
        assert gc.get_threshold() == (700, 10, 10)


def test_the_last_holder_restores_the_interpreter_pace() -> None:
    """Workers of one process (tests, the benchmark) share the collector: the pace holds until the last stops."""
    with gc_pacing.worker_pace(MAX_POLL_RECORDS):
        paced = gc.get_threshold()
        assert paced[0] > 700
        with gc_pacing.worker_pace(10 * MAX_POLL_RECORDS):
            assert gc.get_threshold() == paced  # the first holder set it
        assert gc.get_threshold() == paced
    assert gc.get_threshold() == (700, 10, 10)


def test_a_collector_switched_off_stays_off() -> None:
    gc.set_threshold(0, 10, 10)  # a threshold of 0 turns automatic collection off
    with gc_pacing.worker_pace(MAX_POLL_RECORDS):
        assert gc.get_threshold() == (0, 10, 10)
    assert gc.get_threshold() == (0, 10, 10)
