"""The tie time of an event without ``ts`` is its Kafka record timestamp, which Kafka allows up to int64. A
producer stamping nanoseconds (any CreateTime past 2^53 - 1 ms) would make a 19-digit tie time, and the member
would no longer be "16 digits + player id": such an event is out of range."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from hotboard import board_store
from hotboard.boards import BoardDef
from hotboard.codec import Decoder, decode_all
from ingest.pending import Window
from tests.records import json_record

pytestmark = pytest.mark.integration


async def test_a_record_timestamp_beyond_16_digits_is_out_of_range(redis_client: Redis) -> None:
    definition = BoardDef("desc", "set", "earliest")
    await board_store.declare(redis_client, "e", definition)
    ns = 1_764_590_000_000_000_000  # a producer stamping ns instead of ms
    recs = [json_record({"board": "e", "player": "alice", "score": 7}, timestamp=ns)]
    window = Window()
    window.fold_for(0).fold_checked(recs, decode_all(recs, Decoder()), {"e": -1}, set(), {"e": definition}, {}, {})
    fold = window.folds[0]
    assert [reason.reason.value for _, reason in fold.dead] == ["out_of_range"]  # not a broken member
    batches = window.batches(100)
    assert batches == []
    assert await redis_client.exists("hb:{e}") == 0
