"""The archiver end to end: the topic folded into the PostgreSQL archive exactly once, in a consumer group of its
own, beside a worker feeding Redis; through a SIGKILL mid-window, and through PostgreSQL crashing mid-run."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from cli.devstack import RedisServer
from tests.integration.archive_harness import archiver_process, wait_archived
from tests.integration.conftest import Spawn
from tests.integration.harness import Feeder, skewed_events, totals_of, wait_exact

pytestmark = pytest.mark.integration


def test_the_archive_equals_the_topic_beside_a_worker(
    kafka: str,
    topic_factory: Callable[..., str],
    redis_server: RedisServer,
    postgres_url: str,
    spawn: Spawn,
    tmp_path: Path,
) -> None:
    topic = topic_factory(4)
    events = skewed_events(20_000, seed=5)
    worker = spawn(redis_server.url, topic, "worker")
    archiver = archiver_process(kafka, redis_server.url, postgres_url, topic, f"g-{uuid.uuid4().hex[:8]}", tmp_path)
    try:
        archiver.start()
        worker.wait_ready()
        archiver.wait_ready()
        Feeder(kafka, topic, events, rate=10_000).finish()
        expected = totals_of(events)
        wait_exact(redis_server.url, expected)
        wait_archived(postgres_url, expected)
        assert archiver.metric("hotboard_windows_total", result="flushed") >= 1
        assert archiver.status("/healthz") == 200
        assert archiver.metric("hotboard_archive_lag_records") == 0
    finally:
        archiver.cleanup()
