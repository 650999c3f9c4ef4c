"""Review of issue 10: one earliest player's steps are not bounded by max_script_players."""

from __future__ import annotations

import time
from types import SimpleNamespace

import orjson
import pytest
from redis.asyncio import Redis

from flusher.batch import NO_WATERMARK, Outcome
from flusher.redis_sink import RedisSink
from hotboard import board_store
from hotboard.boards import BoardDef
from hotboard.codec import Decoder, decode_all
from ingest.pending import Window

pytestmark = pytest.mark.integration


async def test_one_players_unmergeable_steps_count_towards_the_seal(redis_client: Redis) -> None:
    definition = BoardDef("desc", "incr", "earliest")
    await board_store.declare(redis_client, "e", definition)
    n = 200_000
    recs = [SimpleNamespace(offset=i, timestamp=i, value=orjson.dumps(
        {"board": "e", "player": "p", "delta": 1 if i % 2 == 0 else -1, "ts": i})) for i in range(n)]  # fmt: skip
    window = Window()
    fold = window.fold_for(0)
    fold.fold_checked(recs, decode_all(recs, Decoder()), {"e": -1}, set(), {"e": definition}, {})
    cap = 4_000  # max_script_players default: the intake seals when largest_board() >= cap
    print("largest_board", fold.largest_board(), "entries", fold.entries, "steps", len(fold.steps["e"]["p"]))
    batches, _ = window.batches(cap)
    started = time.monotonic()
    [result] = await RedisSink(redis_client, "scores").flush(batches, lambda b, p: NO_WATERMARK)
    took = time.monotonic() - started
    print("one script", len(batches), "batches", result.outcome, f"{took:.2f}s")
    assert result.outcome is Outcome.APPLIED
    # steps, not players, size the board: the intake seals a window long before one script gets this big
    assert fold.largest_board() >= n // 2 >= cap
    print(f"a {n}-step script (what sealing prevents) took {took:.2f}s")
