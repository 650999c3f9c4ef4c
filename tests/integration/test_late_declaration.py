"""A board declared after the worker saw it: its first events are invalid under the default definition
(``score`` only: producers started before the operator declared the board ``set``), so no batch of it is
flushed and the flush script's spec check never refreshes the worker's cached default. Once the board is
declared, its ``set`` events must count, not go on being dead-lettered."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import redis

from cli.devstack import RedisServer
from hotboard import board_store, keys
from hotboard.boards import BoardDef
from tests.integration.conftest import Spawn
from tests.integration.harness import Feeder, wait_for
from tests.semantics import Ev

pytestmark = pytest.mark.integration


def test_a_board_declared_after_its_events_were_dead_lettered_is_honoured(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    from redis.asyncio import Redis

    topic = topic_factory(1)
    worker = spawn(redis_server.url, topic)
    worker.wait_ready()
    definition = BoardDef("desc", "set", "shared")
    early = [Ev(f"p{i}", None, 10 + i, 1) for i in range(5)]
    Feeder(kafka, topic, [(e.player.encode(), e.value("levels", definition)) for e in early], rate=0).finish()
    worker.wait_metric("hotboard_dlq_total", 5, reason="missing_field")  # right: undeclared = incr

    async def declare() -> None:
        client = Redis.from_url(redis_server.url)
        try:
            await board_store.declare(client, "levels", definition)
        finally:
            await client.aclose()

    asyncio.run(declare())
    later = [Ev(f"q{i}", None, 20 + i, 2) for i in range(5)]
    Feeder(kafka, topic, [(e.player.encode(), e.value("levels", definition)) for e in later], rate=0).finish()

    def applied() -> bool:
        r = redis.Redis.from_url(redis_server.url)
        try:
            return r.zcard(keys.board_key("levels")) == 5
        finally:
            r.close()

    try:
        wait_for(applied, timeout_s=20, what="the declared set board's scores")
    finally:
        print("dlq missing_field:", worker.metric("hotboard_dlq_total", reason="missing_field"))
