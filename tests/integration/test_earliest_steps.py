"""One ``earliest`` player's unmergeable steps size the board the intake seals on (not its player count), so
the steps of one busy player cannot grow one script past what max_script_players bounds."""

from __future__ import annotations

import time

import pytest
from redis.asyncio import Redis

from flusher.batch import NO_WATERMARK, Outcome
from flusher.redis_sink import RedisSink
from hotboard import board_store
from hotboard.boards import BoardDef
from hotboard.codec import Decoder, decode_all
from ingest.pending import Window
from tests.records import json_record

pytestmark = pytest.mark.integration


async def test_one_players_unmergeable_steps_count_towards_the_seal(redis_client: Redis) -> None:
    definition = BoardDef("desc", "incr", "earliest")
    await board_store.declare(redis_client, "e", definition)
    n = 200_000
    recs = [
        json_record({"board": "e", "player": "p", "delta": 1 if i % 2 == 0 else -1, "ts": i}, i, timestamp=i)
        for i in range(n)
    ]
    window = Window()
    fold = window.fold_for(0)
    fold.fold_checked(recs, decode_all(recs, Decoder()), {"e": -1}, set(), {"e": definition}, {}, {})
    cap = 4_000  # max_script_players default: the intake seals when largest_board() >= cap
    print("largest_board", fold.largest_board(), "entries", fold.entries, "steps", len(fold.steps["e"]["p"]))
    batches = window.batches(cap)
    started = time.monotonic()
    [result] = await RedisSink(redis_client, "scores").flush(batches, lambda b, p: NO_WATERMARK)
    took = time.monotonic() - started
    print("one script", len(batches), "batches", result.outcome, f"{took:.2f}s")
    assert result.outcome is Outcome.APPLIED
    # steps, not players, size the board: the intake seals a window long before one script gets this big
    assert fold.largest_board() >= n // 2 >= cap
    print(f"a {n}-step script (what sealing prevents) took {took:.2f}s")
