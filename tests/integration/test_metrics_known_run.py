"""Each worker metric moves as it should on a known run, read straight from the worker's own registry.

10,000 valid events for 100 players on one board, plus a few malformed records, are published *before*
the worker starts. The window is longer than the test (60 s), so the ticker never flushes: once every record
is folded, ``stop()`` drains, and the drain is the one and only flush (the same ``_flush_step`` a tick runs).
That makes "everything lands in one window" deterministic instead of a race against the first tick.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import Counter
from collections.abc import Callable
from typing import cast

import pytest
from aiokafka.partitioner import DefaultPartitioner
from redis.asyncio import Redis

from cli.devstack import free_port
from cli.loadgen import generate, publish
from hotboard.codec import Reason
from hotboard.keys import board_key
from ingest import gc_pacing
from ingest.settings import WorkerSettings
from ingest.worker import FlushReport, Worker

pytestmark = pytest.mark.integration

EVENTS = 10_000
PLAYERS = 100
PARTITIONS = 8
#: (value, reason): malformed records the worker must route to the DLQ with these reasons.
BAD_RECORDS: list[tuple[bytes, Reason]] = [
    (b"not json", Reason.NOT_JSON),
    (b"{broken", Reason.NOT_JSON),
    (b"[1, 2, 3]", Reason.NOT_OBJECT),
    (b'{"board": "global", "delta": 5}', Reason.MISSING_FIELD),
    (b'{"board": "global", "player": "p-1", "delta": 1.5}', Reason.BAD_TYPE),
    (b'{"board": "global", "player": "p-1", "delta": 1, "op": "max"}', Reason.UNSUPPORTED_OP),
    (b'{"board": "global", "player": "p-1", "delta": 9007199254740992}', Reason.OUT_OF_RANGE),
]


async def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


@pytest.fixture
def topic(topic_factory: Callable[..., str]) -> str:
    """A sync fixture: ``topic_factory`` uses ``asyncio.run`` and cannot be called inside an async test."""
    return topic_factory(PARTITIONS)


async def test_each_metric_moves_as_it_should_on_a_known_run(kafka: str, topic: str, redis_url: str) -> None:
    events = list(generate(EVENTS, players=PLAYERS, boards=1, zipf=0.0, seed=7))
    assert {e.board for e in events} == {"global"}
    players = {e.player for e in events}
    assert len(players) == PLAYERS, "the seed must cover every player"
    expected_scores = Counter[str]()
    for e in events:
        expected_scores[e.player] += e.delta or 0
    partitioner = DefaultPartitioner()
    all_parts = list(range(PARTITIONS))
    fed = {partitioner(p.encode(), all_parts, all_parts) for p in players}

    # Everything is in Kafka before the worker starts.
    await publish(kafka, topic, events)
    await publish(kafka, topic, [(f"bad-{i}".encode(), value) for i, (value, _) in enumerate(BAD_RECORDS)])

    reports: list[FlushReport] = []
    settings = WorkerSettings(
        kafka=kafka,
        redis=redis_url,
        topic=topic,
        group=f"known-run-{topic}",
        window_ms=60_000,
        metrics_port=free_port(),
        metrics_host="127.0.0.1",
        session_timeout_ms=6000,
    )
    interpreter_pace = gc.get_threshold()
    async with Worker(settings, handle_signals=False, on_flush=reports.append) as worker:
        value = worker.metrics.registry.get_sample_value
        run = asyncio.create_task(worker.run())
        # the collector runs at the worker's pace while it runs (a fetch's records trigger no collection)
        assert gc.get_threshold()[0] == gc_pacing.TRACKED_PER_RECORD * settings.max_poll_records * gc_pacing.MARGIN
        try:
            await wait_until(
                lambda: (
                    (value("hotboard_events_total", {"result": "applied"}) or 0) >= EVENTS
                    and (value("hotboard_events_total", {"result": "invalid"}) or 0) >= len(BAD_RECORDS)
                ),
                "the worker to fold every record",
            )
            # folded but not flushed: the window holds exactly one entry per player
            assert worker.pending_entries == PLAYERS
            assert value("hotboard_redis_writes_total") == 0
            assert value("hotboard_windows_total", {"result": "flushed"}) == 0
        finally:
            worker.stop()
            await asyncio.wait_for(run, timeout=30)

        # ---- exactly one non-empty flush, holding everything
        non_empty = [r for r in reports if r.events or r.entries]
        assert len(non_empty) == 1, f"expected one non-empty flush, got {non_empty}"
        (report,) = non_empty
        assert report.events == EVENTS
        assert report.entries == PLAYERS

        # ---- events, writes, windows, savings
        assert value("hotboard_events_total", {"result": "applied"}) == EVENTS
        assert value("hotboard_events_total", {"result": "invalid"}) == len(BAD_RECORDS)
        assert value("hotboard_events_total", {"result": "duplicate"}) == 0
        assert value("hotboard_redis_writes_total") == PLAYERS
        assert value("hotboard_write_savings_ratio") == EVENTS / PLAYERS == 100
        assert value("hotboard_windows_total", {"result": "flushed"}) == 1
        assert value("hotboard_windows_total", {"result": "failed"}) == 0
        assert value("hotboard_windows_total", {"result": "fenced"}) == 0

        # ---- histograms: one flush of 100 entries; freshness observed per partition (oldest and newest ts)
        assert value("hotboard_window_entries_sum") == PLAYERS
        assert value("hotboard_window_entries_count") == 1
        assert value("hotboard_window_entries_bucket", {"le": "10.0"}) == 0
        assert value("hotboard_window_entries_bucket", {"le": "100.0"}) == 1
        assert value("hotboard_flush_seconds_count") == 1
        flush_s = value("hotboard_flush_seconds_sum")
        assert flush_s is not None and 0 < flush_s == pytest.approx(report.duration_s)
        assert value("hotboard_event_freshness_seconds_count") == 2 * len(fed)
        freshness_sum = value("hotboard_event_freshness_seconds_sum")
        assert freshness_sum is not None and freshness_sum > 0

        # ---- dead letters by reason
        want = Counter(reason.value for _, reason in BAD_RECORDS)
        for reason in Reason:
            assert value("hotboard_dlq_total", {"reason": reason.value}) == want.get(reason.value, 0), reason

        # ---- keeping up: nothing pending, no backpressure, no lag, at least one assignment
        assert value("hotboard_pending_entries") == 0
        assert value("hotboard_backpressure_paused") == 0
        for p in range(PARTITIONS):
            assert value("hotboard_consumer_lag", {"partition": str(p)}) == 0, f"partition {p}"
        rebalances = value("hotboard_rebalances_total")
        assert rebalances is not None and rebalances >= 1

    # ---- the interpreter's pace is back once the worker stopped
    assert gc.get_threshold() == interpreter_pace

    # ---- and Redis holds exactly what the counters claim
    client = Redis.from_url(redis_url)
    try:
        rows = cast("list[tuple[bytes, float]]", await client.zrange(board_key("global"), 0, -1, withscores=True))
        scores = dict(rows)
    finally:
        await client.aclose()
    assert len(scores) == PLAYERS
    assert {k.decode(): int(v) for k, v in scores.items()} == dict(expected_scores)
