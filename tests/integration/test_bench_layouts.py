"""The candidate layouts of ``bench.board_layouts`` that ``python -m bench.boards --breakdown`` measures: each
must write exactly what the shipped flush writes, or its figure compares unlike work. The per-slot ones are the
layout a change would ship, so their fence and per-board versions are checked too."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest
from redis.asyncio import Redis

from bench import board_layouts
from bench.boards import check_totals, fold, records
from flusher.batch import BoardBatch, Outcome

BOARDS = 300


@pytest.fixture(autouse=True)
async def _scripts(redis_client: Redis) -> None:
    """The bench loads its scripts once (its layouts send EVALSHA only)."""
    for text in board_layouts.SCRIPTS:
        await redis_client.script_load(text)


def windows() -> list[list[BoardBatch]]:
    """Two windows of every board (3 players each, 8 partitions), as the bench folds them."""
    return [fold(records(BOARDS, 3, 8, r), BOARDS).batches(4000) for r in (0, 1)]


LAYOUTS: list[Callable[[], board_layouts.Layout]] = [
    board_layouts.PerBoard,
    board_layouts.PerCall,
    board_layouts.PerSlot,
    board_layouts.PerSlotNoMeta,
    board_layouts.PerGroup,
    board_layouts.PerGroupPrev,
    board_layouts.ProductGroup,
]


@pytest.mark.parametrize("make", LAYOUTS, ids=lambda m: m.__name__)
async def test_every_layout_writes_the_shipped_totals(
    redis_client: Redis, make: Callable[[], board_layouts.Layout]
) -> None:
    layout = make()
    rounds = windows()
    for batches in rounds:
        _, results = await layout.flush(redis_client, batches)
        assert [r.outcome for r in results] == [Outcome.APPLIED] * len(batches)
    await check_totals(redis_client, lambda b: f"{layout.prefix}:{{{b}}}", rounds)


@pytest.mark.parametrize("make", [board_layouts.PerSlot, board_layouts.PerGroup])
async def test_a_replayed_window_is_recognised_and_a_stale_owner_fenced(
    redis_client: Redis, make: Callable[[], board_layouts.PerSlot]
) -> None:
    layout = make()
    first, second = windows()
    await layout.flush(redis_client, first)
    before = dict(layout.marks)
    await layout.flush(redis_client, second)
    after = dict(layout.marks)

    layout.marks = before  # a retry of the second window after its reply was lost
    _, results = await layout.flush(redis_client, second)
    assert {r.outcome for r in results} == {Outcome.ALREADY_APPLIED}
    assert layout.marks == before  # nothing moved

    stale = make()  # an owner that knows no watermark: fenced everywhere
    _, results = await stale.flush(redis_client, first)
    assert {r.outcome for r in results} == {Outcome.FENCED}
    layout.marks = after
    await check_totals(redis_client, lambda b: f"{layout.prefix}:{{{b}}}", [first, second])


@pytest.mark.parametrize("make", [board_layouts.PerGroup, board_layouts.PerGroupPrev])
async def test_a_board_keeps_its_own_version_moving_only_when_it_changes(
    redis_client: Redis, make: Callable[[], board_layouts.PerSlot]
) -> None:
    layout = make()
    first, second = windows()
    _, applied = await layout.flush(redis_client, first)
    touched = second[: len(second) // 2]
    _, later = await layout.flush(redis_client, touched)

    async def version(board: str) -> int:
        return int(await redis_client.hget(f"lc:{{{board}}}:meta", "version") or 0)

    first_versions = {r.board: r.version for r in applied}
    for r in later:
        assert await version(r.board) == r.version and r.version is not None
        assert r.version > (first_versions[r.board] or 0)
        if make is board_layouts.PerGroupPrev:  # the version it moved from
            assert int(await redis_client.hget(f"lc:{{{r.board}}}:meta", "prev") or -1) == first_versions[r.board]
    untouched = {b.board for b in second} - {b.board for b in touched}
    assert untouched
    for board in untouched:
        assert await version(board) == first_versions[board]


def test_slot_groups_hold_a_few_boards_and_one_node_groups_about_a_call() -> None:
    names = [SimpleNamespace(board=f"g{b}") for b in range(100_000)]
    per_slot, per_group = board_layouts.PerSlot(), board_layouts.PerGroup()
    slots = {per_slot.group_of(n.board) for n in names}
    groups = {per_group.group_of(n.board) for n in names}
    assert len(slots) > 16_000 and len(groups) == board_layouts.GROUPS
