"""The worker's own restore on a loss (:class:`archive.redis_loss.LossRestorer`) against its failures, and the
checkpoints a whole restore may write where Redis lost them (:class:`archive.lowering.Lowest`): pure, no servers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from archive import redis_loss
from archive.lowering import Lowest
from flusher.batch import NO_WATERMARK
from ingest.partitions import Halt, HaltReason
from ingest.settings import WorkerSettings

HALTED = {0: Halt(HaltReason.REDIS_LOST, "Redis holds no checkpoint")}


@contextlib.asynccontextmanager
async def _no_archive(*_: Any) -> AsyncIterator[None]:
    yield None


@pytest.mark.parametrize("error", [RuntimeError("relation hb_scores does not exist"), OSError("refused")])
async def test_a_failing_restore_is_retried_after_a_backoff_never_at_every_tick(
    monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    """A restore that fails, transiently (the archive away) or not (an archive without the schema), must wait
    before the next try: the worker looks at its halts every tick, and a restore started at each look would
    hammer the archive and Redis in a loop (the old code did so for every error but the transient ones)."""
    calls = 0

    async def failing(*_: Any) -> list[Any]:
        nonlocal calls
        calls += 1
        raise error

    monkeypatch.setattr(redis_loss, "restore", failing)
    monkeypatch.setattr(redis_loss, "Archive", _no_archive)
    settings = WorkerSettings(postgres="postgresql://127.0.0.1/none", on_redis_loss="restore", halt_recheck_s=30)
    restorer = redis_loss.LossRestorer(settings, None)
    try:
        for _ in range(50):  # fifty ticks of the worker, each a look at the same halt
            restorer.note(HALTED)
            for _ in range(5):
                await asyncio.sleep(0)
        assert (calls, restorer.failures, restorer.restores) == (1, 1, 0)
    finally:
        await restorer.close()


def test_the_lowest_checkpoint_any_snapshot_named_and_none_where_one_lacked_the_partition() -> None:
    """The first lowering read the archive at 9 (partition 0) and without partition 1; a board swapped later read
    it at 19 and 5: the checkpoints a whole restore writes where Redis holds none are 9 (the early board holds no
    more) and NO_WATERMARK (the early board holds none of partition 1's events)."""
    lowest = Lowest()
    lowest.add(["0", 9, 2])
    lowest.add(["0", 19, 2, "1", 5, 0])
    assert lowest.triples() == ["0", 9, 2, "1", NO_WATERMARK, 0]
    assert Lowest().triples() == []
