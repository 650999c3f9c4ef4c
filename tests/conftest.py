"""Shared fixtures: a session-wide Kafka-protocol broker, per-test topics, per-test redis-servers."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from redis.asyncio import Redis

from cli.devstack import RedisServer, create_topic
from tests.postgres import PostgresServer, fresh_database
from tests.services import REDIS_ENV, embedded_redis, kafka_bootstrap

_topic_ids = itertools.count()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address of a Kafka-protocol broker for the whole session."""
    with kafka_bootstrap(tmp_path_factory.mktemp("kafka")) as bootstrap:
        yield bootstrap


@pytest.fixture
def topic_factory(kafka: str) -> Callable[..., str]:
    """Create a fresh topic (and its .dlq) per call; names never repeat within a session."""

    def make(partitions: int = 8, prefix: str = "scores") -> str:
        name = f"{prefix}-{os.getpid()}-{next(_topic_ids)}"
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(_create(kafka, name, partitions))
        else:  # called from an async test: its loop is busy running the test
            with ThreadPoolExecutor(1) as pool:
                pool.submit(asyncio.run, _create(kafka, name, partitions)).result()
        return name

    return make


async def _create(kafka: str, name: str, partitions: int) -> None:
    await create_topic(kafka, name, partitions)
    await create_topic(kafka, f"{name}.dlq", 1)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own (AOF on, in tmp_path) that the test may kill and restart."""
    server = embedded_redis(tmp_path / "redis")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A Redis URL: HOTBOARD_TEST_REDIS when given (flushed first), else an embedded redis-server."""
    if url := os.environ.get(REDIS_ENV):
        import redis

        redis.Redis.from_url(url).flushdb()
        yield url
        return
    server = embedded_redis(tmp_path / "redis")
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh database (HOTBOARD_TEST_POSTGRES's server, else the machine's on 127.0.0.1:5432), dropped after."""
    with fresh_database() as url:
        yield url


@pytest.fixture
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL of this test's own (initdb in a temp dir), which the test may stop, crash and start again."""
    server = PostgresServer()
    try:
        yield server.init()
    finally:
        server.remove()
