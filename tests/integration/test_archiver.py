"""The archiver end to end: the topic folded into the PostgreSQL archive exactly once, in a consumer group of its
own, beside a worker feeding Redis; through a SIGKILL mid-window, and through PostgreSQL crashing mid-run."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from cli.devstack import RedisServer
from tests.integration.archive_harness import archive_totals, archiver_process, wait_archived
from tests.integration.conftest import Spawn
from tests.integration.harness import Feeder, skewed_events, totals_of, wait_exact
from tests.postgres import PostgresServer

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


def test_a_crashed_postgres_and_a_killed_archiver_leave_the_archive_exact(
    kafka: str,
    topic_factory: Callable[..., str],
    redis_server: RedisServer,
    postgres_server: PostgresServer,
    tmp_path: Path,
) -> None:
    """Under load: crash PostgreSQL (immediate stop) and keep it down while events flow: the archiver stays up,
    holds its offsets and pauses fetching at its pending bound; then, with PostgreSQL back, SIGKILL the archiver
    mid-window (twice). The archive equals the topic."""
    topic = topic_factory(4)
    events = skewed_events(100_000, players=20_000, seed=9)
    archiver = archiver_process(
        kafka, redis_server.url, postgres_server.url, topic, f"g-{uuid.uuid4().hex[:8]}", tmp_path
    )
    archiver.env["HOTBOARD_MAX_PENDING_ENTRIES"] = "3000"
    feeder = Feeder(kafka, topic, events, rate=4000)
    try:
        archiver.start()
        archiver.wait_ready()
        feeder.start()
        archiver.wait_metric("hotboard_windows_total", 1, result="flushed")
        postgres_server.stop("immediate")
        archiver.wait_metric("hotboard_windows_total", 2, result="failed")
        archiver.wait_metric("hotboard_backpressure_paused", 1)  # memory bounded while the archive is away
        assert feeder.is_alive(), "the outage must overlap the load"
        assert archiver.proc is not None and archiver.proc.poll() is None, "the archiver stays up"
        assert archiver.status("/healthz") == 200
        postgres_server.start()
        for _ in range(2):
            flushed = archiver.metric("hotboard_windows_total", result="flushed")
            archiver.wait_metric("hotboard_windows_total", flushed + 1, result="flushed")
            assert feeder.is_alive(), "the events ran out before the kill: the test would prove nothing"
            archiver.kill()
            archiver.start()
            archiver.wait_ready()
        feeder.finish()
        wait_archived(postgres_server.url, totals_of(events), timeout_s=120)
        assert archive_totals(postgres_server.url, ["global"])["global"], "the archive holds the board"
    finally:
        archiver.cleanup()
