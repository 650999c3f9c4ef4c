"""The archive's SQL against the reference model on a real PostgreSQL, exactly as the flush scripts are tested
against it on Redis (tests/integration/test_semantics_redis.py): every operator x order x tie policy, mixed
operators, windows split at random points, metadata, the precision boundary; and the window's compare-and-set."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from archive.pool import Archive
from archive.sink import ArchiveSink
from flusher.batch import NO_WATERMARK, Outcome
from hotboard.boards import OPERATORS, ORDERS, TIES, BoardDef
from hotboard.keys import MAX_EXACT
from tests.semantics import Board, Ev, flush_all, fold_windows, random_case, random_events, reference

pytestmark = pytest.mark.integration


@pytest.fixture
async def archive(postgres_url: str) -> AsyncIterator[Archive]:
    async with Archive(postgres_url) as archive:
        yield archive


@pytest.fixture
def sink(archive: Archive) -> ArchiveSink:
    # the definitions come with the batches here: Redis is never asked (an unused client, no server)
    return ArchiveSink(archive, Redis(port=1), "scores")


async def archived(archive: Archive, board: str) -> tuple[Board, dict[str, bytes]]:
    """player -> (score, tie time; 0 where none), and the metas, as the archive holds them."""
    async with archive.connection() as conn:
        rows = await conn.fetch("SELECT player, score, tie_ms, meta FROM hb_scores WHERE board = $1", board)
    return (
        {r["player"]: (r["score"], r["tie_ms"] or 0) for r in rows},
        {r["player"]: r["meta"] for r in rows if r["meta"] is not None},
    )


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("operator", OPERATORS)
@pytest.mark.parametrize("ties", TIES)
async def test_every_definition_equals_the_reference(
    archive: Archive, sink: ArchiveSink, order: str, operator: str, ties: str
) -> None:
    definition = BoardDef(order, operator, ties)  # type: ignore[arg-type]
    for seed in range(6):
        board, events, windows = random_case(seed, definition)
        await flush_all(sink, windows)
        expected, metas = reference(events, definition)
        got, held = await archived(archive, board)
        assert {p: v for p, (v, _) in got.items()} == {p: v for p, (v, _) in expected.items()}
        if definition.earliest:
            assert got == expected
        assert held == metas


@pytest.mark.parametrize(
    "definition", [BoardDef("desc", "set", "earliest"), BoardDef("asc", "best", "earliest"), BoardDef("desc", "set")]
)
async def test_scores_at_the_precision_boundary_stay_exact(
    archive: Archive, sink: ArchiveSink, definition: BoardDef
) -> None:
    top = MAX_EXACT
    events = [Ev("a", "set", top, 5), Ev("b", "set", top, 3), Ev("c", "set", top - 1, 1), Ev("d", "set", -top, 2)]
    events += [Ev("e", "set", -top, 9), Ev("a", "best", top, 7), Ev("c", "incr", top, 11), Ev("d", "incr", -top, 12)]
    await flush_all(sink, fold_windows("edge", definition, events, [2, 4], 2, 10))
    expected, _ = reference(events, definition)
    expected = {p: (max(-top, min(top, v)), t) for p, (v, t) in expected.items()}
    got, _ = await archived(archive, "edge")
    assert {p: v for p, (v, _) in got.items()} == {p: v for p, (v, _) in expected.items()}


async def test_a_window_applies_once_and_a_stale_owner_is_fenced(archive: Archive, sink: ArchiveSink) -> None:
    events = random_events(random.Random(3), BoardDef(), 40, players=5, mixed=False)
    first, second = fold_windows("once", BoardDef(), events, [20], 1, 100)
    [applied] = await sink.flush(first, lambda b, p: NO_WATERMARK)
    assert applied.outcome is Outcome.APPLIED
    # the same window again (a retry after a lost reply): nothing applied twice
    [again] = await sink.flush(first, lambda b, p: NO_WATERMARK)
    assert again.outcome is Outcome.ALREADY_APPLIED
    # a zombie that believes another watermark: fenced, told what the archive holds
    [fenced] = await sink.flush(second, lambda b, p: 3)
    assert (fenced.outcome, fenced.current) == (Outcome.FENCED, {0: 19})
    [applied] = await sink.flush(second, lambda b, p: 19)
    assert applied.outcome is Outcome.APPLIED
    got, _ = await archived(archive, "once")
    assert {p: v for p, (v, _) in got.items()} == {p: v for p, (v, _) in reference(events, BoardDef())[0].items()}


async def test_a_board_keeps_the_definition_it_was_first_written_under(sink: ArchiveSink) -> None:
    events = random_events(random.Random(4), BoardDef(), 10, players=3, mixed=False)
    [batches] = fold_windows("fixed", BoardDef(), events, [], 1, 100)
    await sink.flush(batches, lambda b, p: NO_WATERMARK)
    [later] = fold_windows("fixed", BoardDef("asc", "best"), events, [], 1, 100)
    [result] = await sink.flush(later, lambda b, p: 9)
    assert result.outcome is Outcome.REDEFINED


async def test_checkpoints_move_only_from_the_value_known(sink: ArchiveSink) -> None:
    [a, b] = await sink.advance_checkpoints({0: (NO_WATERMARK, 10), 1: (5, 7)})
    assert (a.ok, a.previous, b.ok, b.previous) == (True, NO_WATERMARK, False, NO_WATERMARK)
    assert await sink.load_checkpoints([0, 1]) == {0: 10}
    await sink.record_halt(0, "redis_lost")
    [halted] = await sink.advance_checkpoints({0: (10, 11)})
    assert not halted.ok
    assert (await sink.load_positions([0]))[1] == {0: ("redis_lost", 10)}
