"""Script retries on every non-plain board form: APPLY after NOSCRIPT (a flushed script cache), then the same
batches again after a lost reply, which must answer already-applied and change nothing."""

from __future__ import annotations

from typing import cast

import pytest
from redis.asyncio import Redis

from flusher.batch import NO_WATERMARK, Outcome
from flusher.redis_sink import RedisSink
from hotboard import board_store
from hotboard.boards import BoardDef
from tests.semantics import Ev, check_dense, fold_windows, reference, stored

pytestmark = pytest.mark.integration

DEFS = [
    BoardDef("desc", "incr", "dense"),
    BoardDef("asc", "best", "earliest"),
    BoardDef("desc", "decr", "shared"),
    BoardDef("desc", "incr", "earliest"),
]


@pytest.mark.parametrize("definition", DEFS, ids=lambda d: d.spec)
async def test_noscript_then_lost_reply(redis_client: Redis, definition: BoardDef) -> None:
    sink = RedisSink(redis_client, "scores")
    await board_store.declare(redis_client, "r", definition)
    events = [
        Ev("a", None, 5, 1, {"n": '\u00e9\u0000"\\'}),
        Ev("b", "set", 5, 2),
        Ev("a", "incr", -3, 3),
        Ev("c", "decr", 2, 4),
        Ev("b", "best", 9, 5),
    ]
    [batches] = fold_windows("r", definition, events, [], 2, 1)
    await redis_client.script_flush()
    first = await sink.flush(batches, lambda b, p: NO_WATERMARK)
    assert all(r.outcome is Outcome.APPLIED for r in first), first
    again = await sink.flush(batches, lambda b, p: NO_WATERMARK)  # the reply was lost: same batches again
    assert all(r.outcome is Outcome.ALREADY_APPLIED for r in again), again
    expected, metas = reference(events, definition)
    got = await stored(redis_client, "r", definition)
    assert {p: v for p, (v, _) in got.items()} == {p: v for p, (v, _) in expected.items()}
    if definition.earliest:
        assert got == expected
    if definition.ties == "dense":
        await check_dense(redis_client, "r", got)
    held = cast("dict[bytes, bytes]", await redis_client.hgetall("hb:{r}:pmeta"))
    pmeta = {k.decode(): v for k, v in held.items()}
    assert pmeta == metas
