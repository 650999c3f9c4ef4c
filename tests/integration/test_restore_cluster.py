"""``hotboard restore --all --redis-cluster`` on a real Redis Cluster (three masters, three replicas): boards
spread over every master, every master wiped (FLUSHALL), then restored from the archive alone with Kafka
unreachable: each board's members, scores, tie order, metadata, watermark fields and definition equal what
the cluster held; a worker started afterwards replays only the tail and stays exact."""

from __future__ import annotations

import random
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest

from cli.process import free_port
from hotboard import keys
from hotboard.codec import Event
from tests.cluster import TestCluster
from tests.integration.archive_harness import archiver_process, wait_archived
from tests.integration.conftest import Spawn
from tests.integration.harness import Feeder, declare_boards, totals_of, wait_exact
from tests.integration.test_cluster import CLUSTER_ENV, DECLARED, PLAIN, masters_of, read_cluster, sync_client

pytestmark = pytest.mark.integration

DEFINITIONS = {b: DECLARED[b] for b in ("c-dense", "c-earliest")}
BOARDS = (*PLAIN[:10], *DEFINITIONS)


def events_of(count: int, seed: int) -> list[Event]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        meta = orjson.dumps({"n": i}) if i % 7 == 0 else None
        board, player = BOARDS[i % len(BOARDS)], f"p{rng.randrange(60)}"
        out.append(Event(board, player, rng.randrange(-5, 50), 1_700_000_000_000 + i, meta=meta))
    return out


def snapshot(seed: str, boards: Iterable[str]) -> dict[str, Any]:
    """Every board as a reader sees it (members in rank order with scores, metadata, tie members, dense counts),
    its watermarks and definition, and the board index."""
    r = sync_client(seed)
    try:
        out: dict[str, Any] = {
            board: (
                r.zrange(keys.board_key(board), 0, -1, withscores=True),
                r.hgetall(keys.player_meta_key(board)),
                r.hgetall(keys.applied_key(board)),
                r.hgetall(keys.members_key(board)),
                r.hgetall(keys.counts_key(board)),
                r.hget(keys.def_key(board), "spec"),
            )
            for board in boards
        }
        out["index"] = r.zrange(keys.BOARD_INDEX_KEY, 0, -1)
        return out
    finally:
        r.close()


def _fields_of_marks(snap: dict[str, Any]) -> dict[str, Any]:
    """``snap`` with each board's watermarks reduced to their fields."""
    return {b: v if b == "index" else (*v[:2], sorted(v[2]), *v[3:]) for b, v in snap.items()}


def test_every_master_wiped_then_restore_all_then_only_the_tail(
    kafka: str,
    topic_factory: Callable[..., str],
    redis_cluster: TestCluster,
    postgres_url: str,
    spawn: Spawn,
    tmp_path: Path,
) -> None:
    seed = redis_cluster.seed
    assert len(masters_of(redis_cluster, BOARDS)) == 3, "the boards must reach every master"
    declare_boards(seed, DEFINITIONS, cluster=True)
    topic = topic_factory(4)
    events = events_of(12_000, seed=3)
    head, tail = events[:9_000], events[9_000:]
    worker = spawn(seed, topic, "worker", extra_env=CLUSTER_ENV)
    group = f"g-{uuid.uuid4().hex[:8]}"
    archiver = archiver_process(kafka, seed, postgres_url, topic, group, tmp_path, extra_env=CLUSTER_ENV)
    try:
        archiver.start()
        worker.wait_ready()
        archiver.wait_ready()
        Feeder(kafka, topic, head, rate=6000).finish()
        wait_exact(seed, totals_of(head), read=read_cluster)
        wait_archived(postgres_url, totals_of(head))
        assert worker.terminate()[0] == 0 and archiver.terminate()[0] == 0
        before = snapshot(seed, BOARDS)
        assert before["c-earliest"][3] and before["c-dense"][4] and before[PLAIN[0]][1], "ties, counts, metadata"
        redis_cluster.flush()  # FLUSHALL on every master
        assert snapshot(seed, BOARDS)["index"] == []

        restored = subprocess.run(
            [sys.executable, "-m", "cli.main", "restore", "--all", "--redis-cluster", "--postgres", postgres_url],
            env={"HOTBOARD_REDIS": seed, "HOTBOARD_TOPIC": topic, "HOTBOARD_KAFKA": f"127.0.0.1:{free_port()}"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert restored.returncode == 0, restored.stderr
        assert f"restored {len(BOARDS)} boards" in restored.stdout, restored.stdout
        # the watermarks' values are the last offset of the window that touched the board, and the archiver's
        # windows are not the worker's: the fields must match, and the replay below proves the values right
        assert _fields_of_marks(snapshot(seed, BOARDS)) == _fields_of_marks(before)

        worker.start()
        worker.wait_ready()
        Feeder(kafka, topic, tail, rate=6000).finish()
        wait_exact(seed, totals_of(events), read=read_cluster)
        # only the tail is folded again: the restored checkpoints (on their own slot) say where the head ends
        assert worker.metric("hotboard_events_total", result="applied") == len(tail)
    finally:
        archiver.cleanup()
