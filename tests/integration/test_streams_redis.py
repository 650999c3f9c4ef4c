"""reader_api.streams on a real redis-server: changes to a board that no version names still reach its streams."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from hotboard import board_removal, board_store
from hotboard.boards import from_spec
from reader_api import snapshot
from reader_api.stream_settings import StreamSettings
from reader_api.streams import Answer, Question, RedisReads, StreamMetrics, Streams

pytestmark = pytest.mark.integration

TOPIC = "scores"


def top_question(board: str) -> Question:
    async def answer(reply: Any) -> Answer:
        header, page = snapshot.top(board, reply)
        return Answer(header.version, orjson.dumps(page))

    return Question(("top", board), board, snapshot.top_call(board, 0, 10), answer)


async def test_a_declared_board_never_flushed_that_is_deleted_ends_its_streams_with_an_error(
    redis_client: Redis,
) -> None:
    """A declared board with no window yet has no version; deleting it leaves none either. Its streams must still
    be told the board is gone (one error event), not keep the empty board's answer until they end."""
    await board_store.declare(redis_client, "fresh", from_spec("asc/incr/shared"))
    settings = StreamSettings(api_max_streams=10, api_stream_poll_ms=60_000)  # polled by hand
    streams = Streams(StreamMetrics(CollectorRegistry()), settings, RedisReads(redis_client))
    question = top_question("fresh")
    subscription, first = await streams.subscribe(question)
    assert first.version is None and not first.error
    await board_removal.delete(redis_client, TOPIC, "fresh", {0: -1})
    await streams.poll(streams._boards["fresh"])
    gone = subscription.take()
    assert gone is not None and gone.error and b"board_not_found" in gone.body
    await streams.close()
