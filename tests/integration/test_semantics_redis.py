"""The flush scripts against the reference model on a real redis-server: every operator x order x tie policy,
mixed operators, windows split at random points, negative scores, metadata, the dense aux structures, the
definition check, and values at the precision boundary."""

from __future__ import annotations

import random
from typing import cast

import pytest
from redis.asyncio import Redis

from flusher.batch import NO_WATERMARK, Outcome
from flusher.redis_sink import RedisSink
from hotboard import board_store, keys
from hotboard.boards import OPERATORS, ORDERS, TIES, BoardDef
from hotboard.keys import MAX_EXACT
from tests.semantics import (
    Ev,
    check_dense,
    flush_all,
    fold_windows,
    hash_of,
    random_case,
    random_events,
    reference,
    stored,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("operator", OPERATORS)
@pytest.mark.parametrize("ties", TIES)
async def test_every_definition_equals_the_reference(redis_client: Redis, order: str, operator: str, ties: str) -> None:
    definition = BoardDef(order, operator, ties)  # type: ignore[arg-type]
    sink = RedisSink(redis_client, "scores")
    for seed in range(6):
        board, events, windows = random_case(seed, definition)
        await board_store.declare(redis_client, board, definition)
        await flush_all(sink, windows)
        expected, metas = reference(events, definition)
        got = await stored(redis_client, board, definition)
        assert {p: v for p, (v, _) in got.items()} == {p: v for p, (v, _) in expected.items()}
        if definition.earliest:
            assert got == expected
        if ties == "dense":
            await check_dense(redis_client, board, got)
        held = {k.decode(): v for k, v in (await hash_of(redis_client, keys.player_meta_key(board))).items()}
        assert held == metas


async def test_a_definition_declared_while_folding_refuses_the_window(redis_client: Redis) -> None:
    sink = RedisSink(redis_client, "scores")
    events = random_events(random.Random(1), BoardDef(), 30, players=4, mixed=False)
    [batches] = fold_windows("late", BoardDef(), events, [], 1, 100)
    await board_store.declare(redis_client, "late", BoardDef("desc", "best", "earliest"))
    [result] = await sink.flush(batches, lambda b, p: NO_WATERMARK)
    assert result.outcome is Outcome.REDEFINED
    assert await redis_client.exists(keys.board_key("late"), keys.applied_key("late"), keys.meta_key("late")) == 0


EDGES = [
    BoardDef("desc", "set", "earliest"),
    BoardDef("asc", "best", "earliest"),
    BoardDef("desc", "best", "dense"),
    BoardDef("desc", "set", "shared"),
]


@pytest.mark.parametrize("definition", EDGES)
async def test_scores_at_the_precision_boundary_stay_exact(redis_client: Redis, definition: BoardDef) -> None:
    """Ties among scores at +-(2^53 - 1), where score x 10^13 + time composites lose every digit of the time."""
    sink = RedisSink(redis_client, "scores")
    await board_store.declare(redis_client, "edge", definition)
    top = MAX_EXACT
    events = [
        Ev("a", "set", top, 5),
        Ev("b", "set", top, 3),
        Ev("c", "set", top - 1, 1),
        Ev("d", "set", -top, 2),
        Ev("e", "set", -top, 9),
        Ev("a", "best", top, 7),
    ]
    await flush_all(sink, fold_windows("edge", definition, events, [2, 4], 2, 10))
    expected, _ = reference(events, definition)
    got = await stored(redis_client, "edge", definition)
    assert {p: v for p, (v, _) in got.items()} == {p: v for p, (v, _) in expected.items()}
    if definition.earliest:
        assert got == expected
        rows = [m.decode()[16:] for m in cast("list[bytes]", await redis_client.zrange(keys.board_key("edge"), 0, -1))]
        # read order: best first, equal scores by tie time (b reached 2^53-1 at 3, before a at 5)
        assert rows == (["b", "a", "c", "d", "e"] if definition.order == "desc" else ["d", "e", "c", "b", "a"])
