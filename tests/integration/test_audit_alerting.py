"""A failed audit is visible to Prometheus: ``hotboard audit`` records each audit of every board in the archive,
and the archiver exports the last one's outcome (``hotboard_archive_audit_*``), which the alerts read. Real
worker, archiver, Redis, Kafka and PostgreSQL; asserted on the archiver's /metrics."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from archive import audit_log, schema
from archive.archiver import ArchiverMetrics
from archive.pool import Archive
from cli.devstack import RedisServer
from hotboard import keys
from tests.integration.archive_harness import archiver_process, wait_archived
from tests.integration.conftest import Spawn
from tests.integration.harness import Feeder, WorkerProcess, skewed_events, totals_of, wait_exact
from tests.integration.test_audit import run_audit

pytestmark = pytest.mark.integration

LAST_RUN = "hotboard_archive_audit_last_run_timestamp_seconds"
LAST_SUCCESS = "hotboard_archive_audit_last_success_timestamp_seconds"
NOT_EXACT = "hotboard_archive_audit_boards_not_exact"
DIFFER = "hotboard_archive_audit_players_differ"
RUNS = "hotboard_archive_audit_runs_not_exact"
AWAITED = "hotboard_archive_audit_awaited_since_timestamp_seconds"


def wait_gauge(process: WorkerProcess, name: str, check: Callable[[float], bool], timeout_s: float = 30.0) -> float:
    deadline = time.monotonic() + timeout_s
    value = process.metric(name)
    while not check(value):
        assert time.monotonic() < deadline, f"{name} = {value} after {timeout_s:.0f}s"
        time.sleep(0.1)
        value = process.metric(name)
    return value


def test_the_archiver_exports_the_last_audit_and_a_corrupted_player_flips_it(
    kafka: str,
    topic_factory: Callable[..., str],
    redis_server: RedisServer,
    postgres_url: str,
    spawn: Spawn,
    tmp_path: Path,
) -> None:
    topic, url = topic_factory(2), redis_server.url
    events = skewed_events(3_000, players=200)
    worker = spawn(url, topic, "worker")
    archiver = archiver_process(kafka, url, postgres_url, topic, f"g-{uuid.uuid4().hex[:8]}", tmp_path)
    archiver.env["HOTBOARD_AUDIT_READ_S"] = "0.2"
    try:
        before_start = time.time()
        archiver.start()
        worker.wait_ready()
        archiver.wait_ready()
        Feeder(kafka, topic, events, rate=0).finish()
        expected = totals_of(events)
        wait_exact(url, expected)
        wait_archived(postgres_url, expected)
        # never audited: no run, no success; the staleness clock runs from the archiver's start, not from 1970
        assert archiver.metric(LAST_RUN) == 0 and archiver.metric(LAST_SUCCESS) == 0
        assert before_start <= archiver.metric(AWAITED) <= time.time()
        assert archiver.metric(DIFFER) == 0 and archiver.metric(RUNS) == 0

        started = time.time()
        clean = run_audit(kafka, url, postgres_url, topic)
        assert clean.returncode == 0, clean.stdout + clean.stderr
        success = wait_gauge(archiver, LAST_SUCCESS, lambda v: v > 0)
        assert started <= success <= time.time()
        assert archiver.metric(NOT_EXACT) == 0 and archiver.metric(LAST_RUN) == success == archiver.metric(AWAITED)

        r = redis.Redis.from_url(url)
        r.zincrby(keys.board_key("global"), 1, "p-1")  # behind the worker's back
        r.close()
        corrupted = run_audit(kafka, url, postgres_url, topic)
        assert corrupted.returncode == 1, corrupted.stdout + corrupted.stderr
        assert wait_gauge(archiver, NOT_EXACT, lambda v: v > 0) == 1  # one board: global
        assert archiver.metric(LAST_RUN) > success == archiver.metric(LAST_SUCCESS), "the last success stays"
        assert archiver.metric(DIFFER) == 1 and archiver.metric(RUNS) == 1  # a difference: pages at once

        # an audit of one board is not an audit of every board: the gauges keep the last full one
        one = run_audit(kafka, url, postgres_url, topic, "--board", "board-1")
        assert one.returncode == 0, one.stdout + one.stderr
        assert archiver.metric(NOT_EXACT) == 1

        # the player put right, a board whose definition cannot be read: unverified, no difference (a ticket),
        # and the second audit in a row not exact (a page)
        r = redis.Redis.from_url(url)
        r.zincrby(keys.board_key("global"), -1, "p-1")
        r.set(keys.def_key("broken"), "not a hash")
        r.zadd(keys.BOARD_INDEX_KEY, {"broken": 0})
        unverified = run_audit(kafka, url, postgres_url, topic)
        assert unverified.returncode == 1, unverified.stdout + unverified.stderr
        assert wait_gauge(archiver, RUNS, lambda v: v > 1) == 2
        assert archiver.metric(DIFFER) == 0 and archiver.metric(NOT_EXACT) == 1

        r.zrem(keys.BOARD_INDEX_KEY, "broken")
        r.close()
        exact = run_audit(kafka, url, postgres_url, topic)
        assert exact.returncode == 0, exact.stdout + exact.stderr
        assert wait_gauge(archiver, RUNS, lambda v: v == 0) == 0
        assert archiver.metric(NOT_EXACT) == 0 and archiver.metric(LAST_SUCCESS) == archiver.metric(AWAITED)
    finally:
        archiver.cleanup()


async def test_a_never_audited_install_is_awaited_since_the_archive_was_made_not_since_a_restart(
    postgres_url: str,
) -> None:
    """No audit has run: the staleness clock starts when the archive was created (read from it), so an archiver
    restarted every hour (a deploy) does not push HotboardAuditStale off for ever."""
    async with Archive(postgres_url) as archive:
        async with archive.connection() as conn:
            await schema.migrate(conn)
        made = await audit_log.last(archive)
        assert made.finished_at_ms == 0 and 0 < made.due_since_ms <= time.time() * 1000
        first, restarted = ArchiverMetrics(), ArchiverMetrics()  # two processes, the second started later
        restarted.started_at = first.started_at + 3600
        for metrics in (first, restarted):
            metrics.audited(await audit_log.last(archive))
        assert {gauge(m, AWAITED) for m in (first, restarted)} == {made.due_since_ms / 1000}


def gauge(metrics: ArchiverMetrics, name: str) -> float:
    value = metrics.registry.get_sample_value(name)
    assert value is not None, name
    return value
