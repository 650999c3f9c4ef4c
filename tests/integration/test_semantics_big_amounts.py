"""The fold and the flush scripts against the one-by-one reference, fuzzed with amounts near +-2^53 (sequences
whose exact totals stay within +-(2^53-1) at every step, so holding never applies)."""

from __future__ import annotations

import random
import zlib

import pytest
from redis.asyncio import Redis

from flusher.redis_sink import RedisSink
from hotboard import board_store
from hotboard.boards import OPERATORS, ORDERS, TIES, BoardDef
from hotboard.keys import MAX_EXACT
from tests.semantics import Ev, check_dense, flush_all, fold_windows, reference, stored

pytestmark = pytest.mark.integration

BIG = [0, 1, 2, 3, MAX_EXACT, MAX_EXACT - 1, 2**52, 2**52 + 1, 2**53 - 2, 10**15, 123456789012345]


def _amount(rng: random.Random, operator: str) -> int:
    a = rng.choice(BIG) if rng.random() < 0.5 else rng.randint(0, 5)
    if operator != "decr" and rng.random() < 0.5:
        a = -a
    return a


def _within(events: list[Ev], definition: BoardDef) -> bool:
    for i in range(1, len(events) + 1):
        board, _ = reference(events[:i], definition)
        if any(abs(v) > MAX_EXACT for v, _ in board.values()):
            return False
    return True


def _events(rng: random.Random, definition: BoardDef) -> list[Ev]:
    out: list[Ev] = []
    for _ in range(rng.randint(3, 30)):
        op = rng.choice(["incr", "decr", "set", "best", None])
        operator = op or definition.operator
        ev = Ev(f"p{rng.randrange(4)}", op, _amount(rng, operator), 1_000 + rng.randrange(5))
        if _within([*out, ev], definition):
            out.append(ev)
    return out


async def _check(redis_client: Redis, definition: BoardDef, rng_seed: int, board: str) -> None:
    """One random case: events near the exact bound, folded into random windows, equal the reference."""
    sink = RedisSink(redis_client, "scores")
    rng = random.Random(rng_seed)
    await board_store.declare(redis_client, board, definition)
    events = _events(rng, definition)
    cuts = rng.sample(range(len(events) + 1), k=rng.randint(0, 4))
    windows = fold_windows(board, definition, events, cuts, rng.randint(1, 3), rng.randint(1, 4))
    await flush_all(sink, windows)
    expected, _ = reference(events, definition)
    got = await stored(redis_client, board, definition)
    assert {p: v for p, (v, _) in got.items()} == {p: v for p, (v, _) in expected.items()}, (rng_seed, events)
    if definition.earliest:
        assert got == expected, (rng_seed, events)
    if definition.ties == "dense":
        await check_dense(redis_client, board, got)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("operator", OPERATORS)
@pytest.mark.parametrize("ties", TIES)
async def test_big_amounts_equal_the_reference(redis_client: Redis, order: str, operator: str, ties: str) -> None:
    definition = BoardDef(order, operator, ties)  # type: ignore[arg-type]
    offset = zlib.crc32(definition.spec.encode()) % 1000  # stable: str hash() changes with every process
    for seed in range(25):
        await _check(redis_client, definition, seed * 7 + offset, f"big{seed}")


async def test_a_merged_window_near_the_lower_bound_equals_the_reference(redis_client: Redis) -> None:
    """A case a seed found: a score of 8, then incr events summing to -2^53 in one window (a sum one past the
    exact range, a total inside it); the window's delta is carried to the script, not held before it."""
    await _check(redis_client, BoardDef("desc", "incr", "shared"), 21 * 7 + 876, "big-known")


@pytest.mark.parametrize(
    ("before", "window", "expected"),
    [
        (8, [-MAX_EXACT, -1], 8 - MAX_EXACT - 1),  # a delta of -2^53 onto 8: inside the range
        (-8, [MAX_EXACT, 1], MAX_EXACT + 1 - 8),  # the same at the upper bound
        (-MAX_EXACT, [MAX_EXACT, MAX_EXACT, 1], MAX_EXACT),  # 2^54: past the range from anywhere, held
        (MAX_EXACT, [-MAX_EXACT, -MAX_EXACT, -MAX_EXACT], -MAX_EXACT),  # past -2 MAX_EXACT: clipped, still held
    ],
)
async def test_a_window_delta_past_the_exact_range_is_carried_by_the_script(
    redis_client: Redis, before: int, window: list[int], expected: int
) -> None:
    """The script's two-part delta (hotboard.operators.script_args) on a real Redis: exact wherever the total
    lands inside the range, held (and counted) where it lands beyond."""
    definition = BoardDef("desc", "incr", "shared")
    events = [Ev("p", "set", before, 1_000), *(Ev("p", None, d, 1_001 + i) for i, d in enumerate(window))]
    sink = RedisSink(redis_client, "scores")
    await flush_all(sink, fold_windows("w", definition, events, [1], 1, 4))
    assert await stored(redis_client, "w", definition) == {"p": (expected, None)}
