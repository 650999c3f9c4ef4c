"""The Redis Cluster of the test session: ``HOTBOARD_TEST_REDIS_CLUSTER`` (a seed URL of a cluster the tests may
flush) when given, else six embedded redis-servers on loopback (:class:`cli.devcluster.LocalCluster`).

Tests that inject faults (kill a master, fail over, move a slot) need the embedded one; against an external
cluster they skip locally and fail under CI like any missing service.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from cli.devcluster import LocalCluster
from cli.devstack import StackError
from tests.services import unavailable

CLUSTER_ENV = "HOTBOARD_TEST_REDIS_CLUSTER"


@dataclass
class TestCluster:
    """A cluster for one test: ``seed`` for hotboard, ``local`` for faults (None on an external cluster)."""

    __test__ = False

    seed: str
    local: LocalCluster | None

    def faults(self) -> LocalCluster:
        if self.local is None:
            unavailable("an embedded Redis Cluster (faults cannot be injected into an external one)")
        assert self.local is not None
        return self.local

    def flush(self) -> None:
        if self.local is not None:
            self.local.wait_healthy()
            self.local.flush()
            return
        client = redis.RedisCluster.from_url(self.seed.split(",")[0])
        try:
            client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
        finally:
            client.close()


def session_cluster(base_dir: Path) -> Iterator[TestCluster]:
    """The session's cluster (the fixture ``redis_cluster`` in tests/integration/conftest.py)."""
    if seed := os.environ.get(CLUSTER_ENV):
        yield TestCluster(seed, None)
        return
    local = LocalCluster(base_dir)
    try:
        local.start()
    except (StackError, OSError, subprocess.SubprocessError) as exc:
        local.stop()
        unavailable(f"an embedded Redis Cluster ({exc})")
    try:
        yield TestCluster(local.seed, local)
    finally:
        local.stop()


@pytest.fixture(scope="session")
def redis_cluster_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    yield from session_cluster(tmp_path_factory.mktemp("cluster"))


@pytest.fixture
def redis_cluster(redis_cluster_session: TestCluster) -> TestCluster:
    """The session's cluster, healthy (three masters, each with a linked replica) and empty."""
    redis_cluster_session.flush()
    return redis_cluster_session
