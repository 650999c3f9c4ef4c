"""``hotboard audit --redis-cluster`` on a real Redis Cluster (three masters, three replicas), with a worker and an
archiver in cluster mode: 0 differences on boards spread over every master, then the player corrupted on purpose
(a ZINCRBY on its master) named with its board."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from hotboard import keys
from tests.cluster import TestCluster
from tests.integration.archive_harness import archiver_process, wait_archived
from tests.integration.conftest import Spawn
from tests.integration.harness import Feeder, wait_exact
from tests.integration.test_audit import run_audit
from tests.integration.test_cluster import (
    CLUSTER_ENV,
    DECLARED,
    PLAIN,
    cluster_events,
    declare,
    masters_of,
    read_cluster,
    reference,
    sync_client,
)

pytestmark = pytest.mark.integration

#: A handful of boards over the three masters: plain ones, a dense, an earliest, a best and a weekly one.
BOARDS = [*PLAIN[:6], *DECLARED]


def test_audit_on_a_cluster_is_clean_and_names_a_corrupted_player(
    kafka: str,
    topic_factory: Callable[..., str],
    redis_cluster: TestCluster,
    postgres_url: str,
    spawn: Spawn,
    tmp_path: Path,
) -> None:
    seed = redis_cluster.seed
    assert len(masters_of(redis_cluster, BOARDS)) == 3, "the boards must reach every master"
    declare(seed)
    topic = topic_factory(2)
    events = [e for e in cluster_events(20_000, seed=5) if e.board in BOARDS]
    expected = reference(events)
    worker = spawn(seed, topic, "worker", extra_env=CLUSTER_ENV)
    archiver = archiver_process(kafka, seed, postgres_url, topic, f"g-{uuid.uuid4().hex[:8]}", tmp_path)
    archiver.env.update(CLUSTER_ENV)
    try:
        archiver.start()
        worker.wait_ready()
        archiver.wait_ready()
        Feeder(kafka, topic, events, rate=0).finish()
        wait_exact(seed, expected, read=read_cluster)
        wait_archived(postgres_url, {b: t for b, t in expected.items() if b != "c-earliest"})

        clean = run_audit(kafka, seed, postgres_url, topic, "--redis-cluster")
        assert clean.returncode == 0, clean.stdout + clean.stderr
        audited = {
            line.split(":")[0].removeprefix("board ") for line in clean.stdout.splitlines() if line.startswith("board ")
        }
        assert set(expected) <= audited, clean.stdout  # every board (and both weeks of the season) was read
        assert "0 boards not exact" in clean.stdout, clean.stdout

        victim_board = "c-dense"
        r = sync_client(seed)
        first = r.zrange(keys.board_key(victim_board), 0, 0)[0]
        assert isinstance(first, bytes)
        victim = first.decode()
        r.zincrby(keys.board_key(victim_board), 1, victim)
        r.close()
        corrupted = run_audit(kafka, seed, postgres_url, topic, "--redis-cluster")
        assert corrupted.returncode == 1, corrupted.stdout + corrupted.stderr
        differs = [line for line in corrupted.stdout.splitlines() if line.startswith("DIFFERS")]
        assert len(differs) == 1 and f"board={victim_board} player={victim} " in differs[0], corrupted.stdout
    finally:
        archiver.cleanup()
