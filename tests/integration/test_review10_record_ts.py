"""Review of issue 10: the tie time of an event without ``ts`` is the Kafka record timestamp, unbounded.
A producer stamping nanoseconds (or any CreateTime > 2^53 - 1 ms, Kafka allows int64) makes a 19-digit tie
time: the member is no longer "16 digits + player id"."""

from __future__ import annotations

from types import SimpleNamespace

import orjson
import pytest
from redis.asyncio import Redis

from flusher.batch import NO_WATERMARK, Outcome
from flusher.redis_sink import RedisSink
from hotboard import board_store
from hotboard.boards import BoardDef
from hotboard.codec import Decoder, decode_all
from ingest.window import Window
from tests.integration.test_semantics_redis import stored

pytestmark = pytest.mark.integration


async def test_record_timestamp_beyond_16_digits_breaks_the_member(redis_client: Redis) -> None:
    definition = BoardDef("desc", "set", "earliest")
    await board_store.declare(redis_client, "e", definition)
    ns = 1_764_590_000_000_000_000  # a producer stamping ns instead of ms
    recs = [SimpleNamespace(offset=0, timestamp=ns, value=orjson.dumps({"board": "e", "player": "alice", "score": 7}))]
    window = Window()
    window.fold_for(0).fold_checked(recs, decode_all(recs, Decoder()), {"e": -1}, set(), {"e": definition}, {})
    batches, _ = window.batches(100)
    [result] = await RedisSink(redis_client, "scores").flush(batches, lambda b, p: NO_WATERMARK)
    assert result.outcome is Outcome.APPLIED
    members = await redis_client.zrange("hb:{e}", 0, -1)
    print("members", members)
    got = await stored(redis_client, "e", definition)  # decodes player = member[16:]
    assert set(got) == {"alice"}, f"player decoded as {set(got)}"
