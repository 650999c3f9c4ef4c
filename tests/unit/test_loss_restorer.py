"""The worker's own restore on a loss (:class:`archive.redis_loss.LossRestorer`) against its failures, and the
checkpoints a whole restore may write where Redis lost them (:class:`archive.restore_run.Lowest`): pure, no servers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from archive import redis_loss
from archive.restore_run import Lowest
from ingest.partitions import Halt, HaltReason
from ingest.settings import WorkerSettings

HALTED = {0: Halt(HaltReason.REDIS_LOST, "Redis holds no checkpoint")}


@contextlib.asynccontextmanager
async def _no_archive(*_: Any) -> AsyncIterator[None]:
    yield None


async def _ticks(
    monkeypatch: pytest.MonkeyPatch, restore: Any, covered: set[int], ticks: int, **settings: Any
) -> tuple[int, int]:
    """A restorer whose restore is ``restore`` and whose archive covers ``covered``, shown the same halt at
    ``ticks`` ticks of the worker (``settings``: more of its settings): (restores started, failures)."""
    calls = 0

    async def counted(*args: Any, **kwargs: Any) -> list[Any]:
        nonlocal calls
        calls += 1
        return list(await restore(*args, **kwargs))

    async def archived(*_: Any) -> set[int]:
        return covered

    monkeypatch.setattr(redis_loss, "restore", counted)
    monkeypatch.setattr(redis_loss, "Archive", _no_archive)
    monkeypatch.setattr(redis_loss, "archived_partitions", archived)
    worker = WorkerSettings(
        postgres="postgresql://127.0.0.1/none", on_redis_loss="restore", halt_recheck_s=30, **settings
    )
    restorer = redis_loss.LossRestorer(worker, None)
    try:
        for _ in range(ticks):
            restorer.note(HALTED)
            for _ in range(5):
                await asyncio.sleep(0)
        assert restorer.restores == 0
        return calls, restorer.failures
    finally:
        await restorer.close()


@pytest.mark.parametrize("error", [RuntimeError("relation hb_scores does not exist"), OSError("refused")])
async def test_a_failing_restore_is_retried_after_a_backoff_never_at_every_tick(
    monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    """A restore that fails, transiently (the archive away) or not (an archive without the schema), must wait
    before the next try: the worker looks at its halts every tick, and a restore started at each look would
    hammer the archive and Redis in a loop (the old code did so for every error but the transient ones)."""

    async def failing(*_: Any, **__: Any) -> list[Any]:
        raise error

    assert await _ticks(monkeypatch, failing, {0}, 50) == (1, 1)


def test_the_lowest_checkpoint_every_board_snapshot_named() -> None:
    """The first lowering read the archive without partition 1 (no window of it archived yet); board a was then
    read at 9 and 5, board b at 19 and 7: the checkpoints a whole restore writes where Redis holds none are 9 and
    5 (a holds no more), not the first lowering's nothing (which would leave partition 1 halted for good)."""
    lowest = Lowest()
    lowest.first(["0", 4, 2])
    assert lowest.triples() == ["0", 4, 2], "no board swapped in: the first lowering's"
    lowest.add(["0", 9, 2, "1", 5, 0])
    lowest.add(["0", 19, 2, "1", 7, 0])
    assert lowest.triples() == ["0", 9, 2, "1", 5, 0]
    assert lowest.missing() == set()


def test_a_partition_one_board_snapshot_lacked_is_left_unwritten() -> None:
    """Board a was read before the archive had partition 1, board b after: a may lack events of 1 that b's
    checkpoint covers, so no checkpoint of 1 is written (it stays halted for a later restore)."""
    lowest = Lowest()
    lowest.add(["0", 9, 0])
    lowest.add(["0", 19, 0, "1", 5, 0])
    assert lowest.triples() == ["0", 9, 0]
    assert lowest.missing() == {"1"}


async def test_no_restore_runs_while_the_archive_holds_none_of_the_halted_partitions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The archiver has applied no event of partition 0 yet: a restore would swap every board in again (every
    worker resynchronises) and still write no checkpoint of 0, so none runs; it is looked at again later."""

    async def nothing(*_: Any, **__: Any) -> list[Any]:
        return []

    assert await _ticks(monkeypatch, nothing, {1}, 1) == (0, 1)


async def test_a_restore_that_left_a_lost_checkpoint_unwritten_keeps_the_partition_owed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The restore completed, but partition 0's checkpoint is still absent (a board's snapshot lacked it): its halt
    is not lifted, it is not counted as restored (so not given up on), and it is tried again after a backoff."""
    lifted: list[int] = []

    async def restored(*_: Any, **__: Any) -> list[Any]:
        return []

    async def archived(*_: Any) -> set[int]:
        return {0}

    async def positions(_: Any) -> tuple[dict[int, int], dict[int, tuple[str, int]]]:
        return {}, {0: ("redis_lost", -1)}

    async def lift(p: int, *_: Any) -> int:
        lifted.append(p)
        return 0

    monkeypatch.setattr(redis_loss, "restore", restored)
    monkeypatch.setattr(redis_loss, "Archive", _no_archive)
    monkeypatch.setattr(redis_loss, "archived_partitions", archived)
    settings = WorkerSettings(postgres="postgresql://127.0.0.1/none", on_redis_loss="restore", halt_recheck_s=30)
    restorer = redis_loss.LossRestorer(settings, None)
    monkeypatch.setattr(restorer._halts, "load_positions", positions)
    monkeypatch.setattr(restorer._halts, "lift_halt", lift)
    try:
        restorer.note(HALTED)
        for _ in range(10):
            await asyncio.sleep(0)
        assert (restorer.restores, restorer.failures, lifted) == (1, 1, [])
        assert restorer._owed == {0} and restorer._tried == set()
    finally:
        await restorer.close()


async def _restorer_that_restores(
    monkeypatch: pytest.MonkeyPatch, resumed: set[int], held: set[int] | None = None
) -> tuple[redis_loss.LossRestorer, list[int]]:
    """A restorer whose every restore completes and writes partition 0's checkpoint (its halt lifted), on a worker
    that holds ``resumed`` positioned; the list counts the restores run."""
    runs: list[int] = []

    async def restored(*_: Any, **__: Any) -> list[Any]:
        runs.append(0)
        return []

    async def archived(*_: Any) -> set[int]:
        return {0}

    async def positions(_: Any) -> tuple[dict[int, int], dict[int, tuple[str, int]]]:
        return {0: 299}, {0: ("redis_lost", -1)}

    async def lift(*_: Any) -> int:
        return 299

    monkeypatch.setattr(redis_loss, "restore", restored)
    monkeypatch.setattr(redis_loss, "Archive", _no_archive)
    monkeypatch.setattr(redis_loss, "archived_partitions", archived)
    settings = WorkerSettings(postgres="postgresql://127.0.0.1/none", on_redis_loss="restore", halt_recheck_s=30)
    restorer = redis_loss.LossRestorer(
        settings, None, positioned=lambda ps: resumed.intersection(ps), held=None if held is None else lambda: held
    )
    monkeypatch.setattr(restorer._halts, "load_positions", positions)
    monkeypatch.setattr(restorer._halts, "lift_halt", lift)
    return restorer, runs


async def _tick(restorer: redis_loss.LossRestorer, halted: dict[int, Halt]) -> None:
    restorer.note(halted)
    for _ in range(10):
        await asyncio.sleep(0)


async def test_a_second_loss_after_the_partition_resumed_is_restored_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Partition 0 is restored, resumes from the archive's checkpoint (positioned, consumed), and much later Redis
    is lost again: that loss is restored too, without a worker restart (the old set of partitions restored once
    per process left it halted for an operator)."""
    resumed: set[int] = set()
    restorer, runs = await _restorer_that_restores(monkeypatch, resumed)
    try:
        await _tick(restorer, HALTED)
        assert runs == [0] and restorer.restores == 1
        await _tick(restorer, HALTED)  # the worker has not looked again yet: still halted, not restored again
        assert restorer.restores == 1
        resumed.add(0)  # the next look positioned it from the restored checkpoint
        await _tick(restorer, {})
        resumed.clear()  # Redis lost again: halted again
        await _tick(restorer, HALTED)
        assert restorer.restores == 2 and len(runs) == 2
    finally:
        await restorer.close()


async def test_a_partition_that_halts_again_without_resuming_is_restored_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The archive does not reach back far enough: after its restore partition 0 halts again at the next look and
    is never positioned; it must not be restored in a loop, however many ticks see it halted."""
    restorer, runs = await _restorer_that_restores(monkeypatch, set())
    try:
        for _ in range(50):
            await _tick(restorer, {0: Halt(HaltReason.RETENTION_LOST, "the archive's checkpoint is gone too")})
        assert runs == [0] and restorer.restores == 1 and restorer.failures == 0
    finally:
        await restorer.close()


@pytest.mark.parametrize(
    ("cluster", "acks", "wanted"), [(True, -1, 1), (True, 0, 0), (True, 2, 2), (False, -1, 0)], ids=str
)
async def test_the_restore_on_a_loss_waits_for_the_replicas_a_window_waits_for(
    monkeypatch: pytest.MonkeyPatch, cluster: bool, acks: int, wanted: int
) -> None:
    """The worker's ``--min-replica-acks`` (-1: one on a cluster, none on one server) and its timeout reach the
    restore: each board's swap waits for them before the checkpoints that count on it (archive.staging.SwapAcks)."""
    heard: list[dict[str, Any]] = []

    async def restore(*_: Any, **kwargs: Any) -> list[Any]:
        heard.append(kwargs)
        return []

    settings = {"redis_cluster": cluster, "min_replica_acks": acks, "replica_ack_timeout_ms": 250}
    await _ticks(monkeypatch, restore, {0}, 1, **settings)
    assert heard == [{"min_replica_acks": wanted, "replica_ack_timeout_ms": 250}]


async def test_a_partition_revoked_after_its_restore_and_back_halted_is_restored_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Partition 0 is restored here, then revoked: another worker resumes and consumes it, and it comes back here
    halted by a new loss without ever being positioned here. That is a new loss, not the archive falling short."""
    held = {0}
    restorer, runs = await _restorer_that_restores(monkeypatch, set(), held)
    try:
        await _tick(restorer, HALTED)
        assert restorer.restores == 1
        held.clear()  # revoked
        await _tick(restorer, {})
        held.add(0)  # assigned back, halted
        for _ in range(5):
            await _tick(restorer, HALTED)
        assert restorer.restores == 2 and len(runs) == 2
    finally:
        await restorer.close()
