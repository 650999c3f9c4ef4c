"""Fixtures of the worker tests: a factory of worker processes on one consumer group."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.harness import WorkerProcess

Spawn = Callable[..., WorkerProcess]


@pytest.fixture
def spawn(kafka: str, tmp_path: Path) -> Iterator[Spawn]:
    """Factory of worker processes on one consumer group; all are killed at the end of the test."""
    started: list[WorkerProcess] = []
    group = f"g-{uuid.uuid4().hex[:8]}"

    def make(redis_url: str, topic: str, name: str | None = None, **kw: object) -> WorkerProcess:
        w = WorkerProcess(
            kafka=kafka,
            redis_url=redis_url,
            topic=topic,
            group=group,
            log_dir=tmp_path,
            name=name or f"w{len(started)}",
            **kw,  # type: ignore[arg-type]
        )
        started.append(w)
        return w.start()

    yield make
    for w in started:
        w.cleanup()


from tests.cluster import redis_cluster, redis_cluster_session  # noqa: E402, F401 - fixtures of the cluster tests
