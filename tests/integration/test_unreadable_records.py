"""Records the Kafka client cannot parse (a header name that is not UTF-8): each is dead-lettered on its own,
once, and the valid records around it are folded, also when Redis fails meanwhile."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from ingest.worker import Worker
from tests.integration.faults import Raw, send_raw
from tests.integration.harness import (
    checkpoint,
    read_boards,
    run_worker,
    worker_settings,
)

pytestmark = pytest.mark.integration


async def test_a_redis_blip_while_reading_past_an_unreadable_record_loses_nothing(
    kafka: str, topic_factory: Callable[..., str], redis_url: str
) -> None:
    """A Redis error in the watermark lookup while folding the records read past an unreadable one: the fold
    seeks back to next_offset and returns, and the valid event at next_offset must then be folded, not
    dead-lettered as the unreadable record."""
    topic = topic_factory(1)
    good: list[Raw] = [(f"p{i}".encode(), orjson.dumps({"player": f"p{i}", "delta": 1}), []) for i in range(5)]
    bad = (b"k", b'{"player":"p","delta":1}', [("XX", b"v")])
    await send_raw(kafka, topic, 0, [*good, bad, *good], patch=(b"XX", b"\xff\xfe"))  # unreadable at offset 5
    settings = worker_settings(kafka, redis_url, topic, f"g-{topic}")
    failed: list[bool] = []

    async def blip_once(worker: Worker) -> None:
        real = worker._sink.load_watermarks

        async def load(partition: int, boards: Any) -> Any:
            if not failed:
                failed.append(True)
                raise ConnectionError("injected: one Redis blip")
            return await real(partition, boards)

        worker._sink.load_watermarks = load  # type: ignore[method-assign]

    await run_worker(settings, lambda w: checkpoint(redis_url, topic) == 10, "checkpoint 10", blip_once)
    got = read_boards(redis_url, ["global"])["global"]
    assert got == {f"p{i}": 2 for i in range(5)}, got


async def test_valid_records_after_an_unreadable_one_in_the_same_batch_are_folded(
    kafka: str, topic_factory: Callable[..., str], redis_url: str
) -> None:
    """One producer batch: 5 good, one header name that is not UTF-8, 5 good. Fetching from offset 6 returns the
    same batch (it starts at 0) and the client parses past offset 5 again: only offset 5 is dead-lettered, and
    every valid record after it in its batch is folded."""
    topic = topic_factory(1)
    good: list[Raw] = [(f"p{i}".encode(), orjson.dumps({"player": f"p{i}", "delta": 1}), []) for i in range(5)]
    bad = (b"k", b'{"player":"p","delta":1}', [("XX", b"v")])
    await send_raw(kafka, topic, 0, [*good, bad, *good], patch=(b"XX", b"\xff\xfe"))  # unreadable at offset 5
    settings = worker_settings(kafka, redis_url, topic, f"g-{topic}")
    await run_worker(settings, lambda w: checkpoint(redis_url, topic) == 10, "checkpoint 10")
    got = read_boards(redis_url, ["global"])["global"]
    assert got == {f"p{i}": 2 for i in range(5)}, got
