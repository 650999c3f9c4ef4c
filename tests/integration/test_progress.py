"""An in-process worker's progress line and dead-letter lines: counted from what it did, one line per reason."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from cli.loadgen import publish
from tests.integration.harness import run_worker, sample, worker_events, worker_settings

pytestmark = pytest.mark.integration


def test_progress_reports_what_the_worker_did_and_rate_limits_dead_letters(
    kafka: str, topic_factory: Callable[..., str], redis_url: str
) -> None:
    topic = topic_factory(2)
    good = worker_events("b", 50, 600)
    bad = [(f"k{i}".encode(), b"not json") for i in range(30)]
    asyncio.run(publish(kafka, topic, good))
    asyncio.run(publish(kafka, topic, bad))
    settings = worker_settings(kafka, redis_url, topic, "g-progress", progress_interval_s=1)
    worker = asyncio.run(
        run_worker(settings, lambda w: w.dead_letters == 30 and w.progress.last_line is not None, "a progress line")
    )
    now = worker.counters()
    assert (now.events, now.dead_letters) == (600, 30)
    assert now.windows == worker.flushes >= 1
    assert sample(worker, "hotboard_dlq_total", reason="not_json") == 30
    line = worker.progress.last_line or ""
    assert line.startswith("progress: ") and " events/s, " in line and " dead letters in the last 1s" in line, line
    # one reason, one interval (the 30 letters arrive in one window): one line, the other 29 counted for the next
    assert (worker.dead_letter_log.logged, worker.dead_letter_log.left_out) == (1, 29)
