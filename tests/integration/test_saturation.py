"""A total held at 2^53 - 1 is counted as saturated exactly once: by window.batches for summed deltas, or by
the APPLY script for the clamp form (whose hold would otherwise be silent)."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from flusher.batch import NO_WATERMARK, Outcome
from flusher.redis_sink import RedisSink
from hotboard import board_store
from hotboard.boards import DEFAULT, BoardDef
from hotboard.codec import Decoder, decode_all
from hotboard.keys import MAX_EXACT
from ingest.pending import Window
from tests.records import json_record

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("definition", [DEFAULT, BoardDef("desc", "set", "shared")], ids=lambda d: d.spec)
async def test_held_totals_are_counted(redis_client: Redis, definition: BoardDef) -> None:
    await board_store.declare(redis_client, "s", definition)
    bodies = [
        {"board": "s", "player": "a", "op": "set", "score": MAX_EXACT},
        {"board": "s", "player": "a", "op": "incr", "delta": 5},
    ]
    if definition == DEFAULT:
        bodies = [{"board": "s", "player": "a", "delta": MAX_EXACT}, {"board": "s", "player": "a", "delta": 5}]
    recs = [json_record(b, i, timestamp=i) for i, b in enumerate(bodies)]
    window = Window()
    window.fold_for(0).fold_checked(recs, decode_all(recs, Decoder()), {"s": -1}, set(), {"s": definition}, {}, {})
    batches = window.batches(100)
    [result] = await RedisSink(redis_client, "scores").flush(batches, lambda b, p: NO_WATERMARK)
    assert result.outcome is Outcome.APPLIED
    assert await redis_client.zscore("hb:{s}", "a") == MAX_EXACT
    assert result.saturated == 1
