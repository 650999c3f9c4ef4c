"""Review of issue 10: the tie time of an event without ``ts`` is the Kafka record timestamp, unbounded.
A producer stamping nanoseconds (or any CreateTime > 2^53 - 1 ms, Kafka allows int64) makes a 19-digit tie
time: the member is no longer "16 digits + player id"."""

from __future__ import annotations

from types import SimpleNamespace

import orjson
import pytest
from redis.asyncio import Redis

from hotboard import board_store
from hotboard.boards import BoardDef
from hotboard.codec import Decoder, decode_all
from ingest.pending import Window

pytestmark = pytest.mark.integration


async def test_a_record_timestamp_beyond_16_digits_is_out_of_range(redis_client: Redis) -> None:
    definition = BoardDef("desc", "set", "earliest")
    await board_store.declare(redis_client, "e", definition)
    ns = 1_764_590_000_000_000_000  # a producer stamping ns instead of ms
    recs = [SimpleNamespace(offset=0, timestamp=ns, value=orjson.dumps({"board": "e", "player": "alice", "score": 7}))]
    window = Window()
    window.fold_for(0).fold_checked(recs, decode_all(recs, Decoder()), {"e": -1}, set(), {"e": definition}, {})
    fold = window.parts[0]
    assert [reason.reason.value for _, reason in fold.dead] == ["out_of_range"]  # not a broken member
    batches, _ = window.batches(100)
    assert batches == []
    assert await redis_client.exists("hb:{e}") == 0
