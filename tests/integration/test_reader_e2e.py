"""End to end: score events through Kafka and a real worker come back through the read API."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from cli.loadgen import publish
from hotboard.codec import Event
from ingest.settings import WorkerSettings
from ingest.worker import Worker
from reader_api.app import create_app
from reader_api.settings import ApiSettings
from tests.integration.reader_harness import asgi_client, reference_ranking

pytestmark = pytest.mark.integration

BOARDS = ("global", "arena:eu-1.x")
PLAYERS = ["alice", "bob", "x y", "a:b.c-d", "a/b", *(f"p-{i}" for i in range(40))]


def make_events(seed: int, count: int) -> list[Event]:
    rng = random.Random(seed)
    now = int(time.time() * 1000)
    return [Event(rng.choice(BOARDS), rng.choice(PLAYERS), rng.randint(-5, 50), now) for _ in range(count)]


def totals(events: list[Event]) -> dict[str, dict[str, int]]:
    result: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for e in events:
        result[e.board][e.player] += e.delta or 0
    return {board: dict(scores) for board, scores in result.items()}


@pytest.fixture
def topic(topic_factory: Callable[..., str]) -> str:
    """Created in a sync fixture: the factory runs its own event loop."""
    return topic_factory(partitions=4)


async def test_events_come_back_through_the_api(kafka: str, topic: str, redis_url: str) -> None:
    events = make_events(seed=7, count=3000)
    expected = totals(events)
    settings = WorkerSettings(
        kafka=kafka,
        redis=redis_url,
        topic=topic,
        group=f"reader-e2e-{os.getpid()}-{topic}",
        metrics_port=0,
        session_timeout_ms=6000,
    )
    async with Worker(settings, handle_signals=False) as worker:
        task = asyncio.create_task(worker.run())
        try:
            await publish(kafka, topic, events)
            async with asgi_client(create_app(ApiSettings(redis=redis_url))) as client:
                last: dict[str, Any] = {}
                deadline = time.monotonic() + 60
                while True:
                    last = {b: (await client.get(f"/v1/boards/{b}/top", params={"limit": 1000})).json() for b in BOARDS}
                    done = all(last[b].get("total") == len(expected[b]) for b in BOARDS) and all(
                        [(e["rank"], e["player"], e["score"]) for e in last[b]["entries"]]
                        == reference_ranking(expected[b])
                        for b in BOARDS
                    )
                    if done:
                        break
                    assert time.monotonic() < deadline, f"API never showed all events: {last}"
                    await asyncio.sleep(0.2)
                for board in BOARDS:
                    assert isinstance(last[board]["as_of"], int)
                    ranking = reference_ranking(expected[board])
                    rank, player, score = ranking[len(ranking) // 2]
                    one = (await client.get(f"/v1/boards/{board}/players/{player.replace('/', '%2F')}")).json()
                    assert (one["rank"], one["score"]) == (rank, score)
                    near = (await client.get(f"/v1/boards/{board}/players/alice/around", params={"radius": 2})).json()
                    assert "alice" in [e["player"] for e in near["entries"]]
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)
