"""``hotboard restore`` on a real Redis Cluster while a worker keeps folding the same partition: there the topic's
checkpoints live on a slot of their own, lowered right before each board's swap and right after it, two round
trips apart. The interleaving that lost events between them is forced here step by step."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from archive import lowering, restore
from archive.pool import Archive
from cli.loadgen import publish
from flusher.batch import CheckpointResult
from hotboard import keys, redis_client
from hotboard.codec import Event
from ingest.worker import Worker
from tests.cluster import TestCluster
from tests.integration.archive_harness import archiver_process
from tests.integration.harness import totals_of, wait_while_running, worker_events, worker_settings
from tests.integration.test_cluster import CLUSTER_ENV, read_cluster, sync_client
from tests.integration.test_restore_races import _archive_checkpoints

pytestmark = pytest.mark.integration

BOARD = "global"
log = logging.getLogger(__name__)


def _chunk(count: int, start: int) -> list[Event]:
    return worker_events(BOARD, 20, count, start=start)


def _ckpt(seed: str, topic: str) -> tuple[int | None, bool]:
    """Partition 0's checkpoint on the cluster, and whether a restoring mark is held beside it."""
    r = sync_client(seed)
    try:
        value, mark = r.hmget(keys.checkpoint_key(topic), ["0", keys.restoring_field(0)])
    finally:
        r.close()
    return (None if value is None else int(value)), mark is not None


def _watermark(seed: str, topic: str) -> int | None:
    r = sync_client(seed)
    try:
        value = r.hget(keys.applied_key(BOARD), keys.watermark_field(topic, 0, 0))
    finally:
        r.close()
    return None if value is None else int(cast("bytes", value))


async def _archive_head(kafka: str, seed: str, postgres_url: str, topic: str, head: int, tmp_path: Path) -> None:
    """The archiver folds the head and stops: the archive lags what the worker writes from then on."""
    group = f"g-{uuid.uuid4().hex[:8]}"
    archiver = archiver_process(kafka, seed, postgres_url, topic, group, tmp_path, extra_env=CLUSTER_ENV)
    try:
        archiver.start()
        archiver.wait_ready()
        deadline = time.monotonic() + 60
        while await _archive_checkpoints(postgres_url, topic) != {0: head - 1}:
            assert time.monotonic() < deadline, "the archive never reached the head's end"
            await asyncio.sleep(0.2)
        assert archiver.terminate()[0] == 0
    finally:
        archiver.cleanup()


async def test_a_worker_resynchronised_between_the_lowering_and_the_swap_loses_no_event(
    kafka: str,
    topic_factory: Callable[..., str],
    redis_cluster: TestCluster,
    postgres_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The archive holds the head; the live board holds head + mid, checkpoint at mid's end. The restore's first
    lowering (checkpoint back to the head's end, generation bumped) is held: the worker folds the tail onto the
    live board, its move is refused, it resynchronises (the new generation, the lowered checkpoint, the live
    board's watermarks) and moves again from the head's end. Then the swap puts the archive's board in (the head
    only); the second lowering is held while the worker, fenced on the swapped board, resynchronises and folds a
    late window. Without the restoring mark the second move succeeded, the worker resumed past mid and tail and
    they were gone from the board for good."""
    seed = redis_cluster.seed
    topic = topic_factory(1)
    head, mid, tail, late, last = (
        _chunk(300, 0),
        _chunk(200, 300),
        _chunk(200, 500),
        _chunk(100, 700),
        _chunk(50, 800),
    )
    everything = [*head, *mid, *tail, *late, *last]
    await publish(kafka, topic, head)
    await _archive_head(kafka, seed, postgres_url, topic, len(head), tmp_path)
    settings = worker_settings(kafka, seed, topic, f"g-{topic}", redis_cluster=True)
    async with Worker(settings, handle_signals=False) as worker, Archive(postgres_url) as archive:
        real_advance = worker._sink.advance_checkpoints
        tried: list[tuple[dict[int, tuple[int, int]], list[CheckpointResult]]] = []

        async def advance(moves: dict[int, tuple[int, int]]) -> list[CheckpointResult]:
            results = await real_advance(moves)
            tried.append((dict(moves), results))
            return results

        worker._sink.advance_checkpoints = advance  # type: ignore[method-assign]
        task = asyncio.create_task(worker.run())
        client = redis_client.connect(seed, cluster=True)
        resyncs = worker.metrics.registry.get_sample_value
        held: dict[str, float] = {}
        cost: dict[str, float] = {}

        tail_end = len(head) + len(mid) + len(tail) - 1

        def moved_from_head() -> bool:
            """The worker, resynchronised after the lowering, tried to move it from there past the tail."""
            return any(asked.get(0) == (len(head) - 1, tail_end) for asked, _ in tried)

        async def before_swap() -> None:
            """Held after the first lowering: the tail reaches the live board, the worker resynchronises and tries
            to move the checkpoint from the lowered value."""
            assert _ckpt(seed, topic)[0] == len(head) - 1, "the first lowering"
            held["resyncs"] = resyncs("hotboard_resyncs_total", {"reason": "checkpoint"}) or 0.0
            held["replayed"] = resyncs("hotboard_events_total", {"result": "duplicate"}) or 0.0
            held["since"] = time.monotonic()
            tried.clear()
            await publish(kafka, topic, tail)
            await wait_while_running(moved_from_head, task, "a move from the lowered checkpoint")
            refused = [r.ok for asked, results in tried if asked.get(0) == (len(head) - 1, tail_end) for r in results]
            assert refused == [False], "the restoring mark holds the checkpoint until the board is swapped in"

        async def before_second_lowering() -> None:
            """Held after the swap: the worker, fenced on the swapped board, resynchronises and folds a late
            window onto it."""
            await publish(kafka, topic, late)
            end = len(head) + len(mid) + len(tail) + len(late) - 1
            await wait_while_running(lambda: _watermark(seed, topic) == end, task, "the late window on the board")
            cost["held_s"] = time.monotonic() - held["since"]
            for name, labels, key in (
                ("hotboard_resyncs_total", {"reason": "checkpoint"}, "resyncs"),
                ("hotboard_events_total", {"result": "duplicate"}, "replayed"),
            ):
                cost[key] = (resyncs(name, labels) or 0.0) - held[key]
            log.info("restoring mark held %.2f s: %d checkpoint resyncs, %d events replayed", *cost.values())

        real_mark, real_clear = lowering.mark, lowering.clear
        lowerings = 0

        async def mark(redis: Any, topic_: str, lowered: Sequence[Any], *args: Any, **kw: Any) -> Any:
            nonlocal lowerings
            lowerings += 1
            refused = await real_mark(redis, topic_, lowered, *args, **kw)
            await before_swap()
            return refused

        async def clear(redis: Any, topic_: str, lowered: Sequence[Any], *args: Any, **kw: Any) -> None:
            nonlocal lowerings
            lowerings += 1
            await before_second_lowering()
            await real_clear(redis, topic_, lowered, *args, **kw)

        monkeypatch.setattr(lowering, "mark", mark)
        monkeypatch.setattr(lowering, "clear", clear)
        try:
            await wait_while_running(lambda: _ckpt(seed, topic)[0] == len(head) - 1, task, "the head applied")
            await publish(kafka, topic, mid)
            mid_end = len(head) + len(mid) - 1
            await wait_while_running(lambda: _ckpt(seed, topic)[0] == mid_end, task, "mid applied")
            assert read_cluster(seed, [BOARD]) == totals_of([*head, *mid]), "mid is on the live board"
            assert await restore.restore_board(archive, client, topic, BOARD, int(time.time() * 1000))
            assert lowerings == 2
            assert _ckpt(seed, topic)[1] is False, "the second lowering clears the restoring mark"
            await publish(kafka, topic, last)
            end = len(everything) - 1
            await wait_while_running(lambda: _ckpt(seed, topic)[0] == end, task, "the worker caught up")
            assert read_cluster(seed, [BOARD]) == totals_of(everything), "events lost between the two lowerings"
        finally:
            await client.aclose()
            worker.stop()
            await asyncio.wait_for(task, 30)


async def test_a_restore_that_died_between_its_lowerings_holds_checkpoints_only_until_its_deadline(
    kafka: str, topic_factory: Callable[..., str], redis_cluster: TestCluster
) -> None:
    """The restore lowered the checkpoint and marked the partition restoring, then died before the swap (and the
    lowering after it that clears the mark). Past the mark's deadline the worker's moves go through again: the
    checkpoint script ignores the stale mark and deletes it. The board stays exact throughout."""
    seed = redis_cluster.seed
    topic = topic_factory(1)
    head, tail = _chunk(300, 0), _chunk(200, 300)
    await publish(kafka, topic, head)
    settings = worker_settings(kafka, seed, topic, f"g-{topic}", redis_cluster=True)
    async with Worker(settings, handle_signals=False) as worker:
        task = asyncio.create_task(worker.run())
        client = redis_client.connect(seed, cluster=True)
        try:
            await wait_while_running(lambda: _ckpt(seed, topic)[0] == len(head) - 1, task, "the head applied")
            await lowering.mark(client, topic, ["0", len(head) - 1, 0], "dead", 2_000)  # and then the restore died
            assert _ckpt(seed, topic) == (len(head) - 1, True)
            await publish(kafka, topic, tail)
            end = len(head) + len(tail) - 1
            await wait_while_running(lambda: _ckpt(seed, topic) == (end, False), task, "moves past the deadline")
            assert read_cluster(seed, [BOARD]) == totals_of([*head, *tail])
            refused = worker.metrics.registry.get_sample_value("hotboard_resyncs_total", {"reason": "checkpoint"})
            assert (refused or 0) >= 2, "the generation refuses one move; the live mark refused more"
        finally:
            await client.aclose()
            worker.stop()
            await asyncio.wait_for(task, 30)
