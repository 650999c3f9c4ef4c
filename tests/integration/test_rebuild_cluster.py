"""``hotboard rebuild --all --redis-cluster`` on a real Redis Cluster (three masters, three replicas): boards spread
over every master (plain ones with metadata, a dense, an earliest, a best and a weekly season) fed by a worker in
cluster mode, every master wiped (FLUSHALL), the boards declared again, then rebuilt from the Kafka log alone with
the worker stopped: each board equals what the cluster held and the reference computed from the events; a worker
started afterwards folds only the tail and stays exact."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterable
from typing import Any, cast

import orjson
import pytest

from cli.main import main as hotboard
from cli.process import free_port
from hotboard import keys
from hotboard.codec import Event
from tests.cluster import TestCluster
from tests.integration.conftest import Spawn
from tests.integration.harness import Feeder, wait_exact
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

BOARDS = [*PLAIN[:6], *DECLARED]


def events_of(count: int, seed: int) -> list[Event]:
    """The cluster tests' events on ``BOARDS``, every seventh one on a plain board with metadata."""
    out = [e for e in cluster_events(count, seed) if e.board in BOARDS]
    return [
        e._replace(meta=orjson.dumps({"n": i})) if i % 7 == 0 and e.board in PLAIN else e for i, e in enumerate(out)
    ]


def snapshot(seed: str, boards: Iterable[str]) -> dict[str, Any]:
    """What a reader sees of each board (members in rank order with scores, metadata, tie members, dense counts,
    definition, an expiry set or not), and the board index."""
    r = sync_client(seed)
    try:
        out: dict[str, Any] = {
            board: (
                r.zrange(keys.board_key(board), 0, -1, withscores=True),
                r.hgetall(keys.player_meta_key(board)),
                r.hgetall(keys.members_key(board)),
                r.zrange(keys.dense_key(board), 0, -1, withscores=True),
                r.hgetall(keys.counts_key(board)),
                r.hget(keys.def_key(board), "spec"),
                r.pttl(keys.board_key(board)) > 0,
            )
            for board in boards
        }
        out["index"] = r.zrange(keys.BOARD_INDEX_KEY, 0, -1)
        return out
    finally:
        r.close()


def checkpoints(seed: str, topic: str) -> dict[int, int]:
    r = sync_client(seed)
    try:
        held = cast("dict[bytes, bytes]", r.hgetall(keys.checkpoint_key(topic)))
        return {int(p): int(v) for p, v in held.items() if b":" not in p}
    finally:
        r.close()


def test_every_master_wiped_then_rebuild_all_then_only_the_tail(
    kafka: str, topic_factory: Callable[..., str], redis_cluster: TestCluster, spawn: Spawn
) -> None:
    seed = redis_cluster.seed
    assert len(masters_of(redis_cluster, BOARDS)) == 3, "the boards must reach every master"
    declare(seed)
    topic = topic_factory(4)
    events = events_of(16_000, seed=4)
    head, tail = events[: len(events) * 3 // 4], events[len(events) * 3 // 4 :]
    want = reference(head)
    boards = sorted(want)
    assert sum(b.startswith("c-weekly@") for b in boards) == 2, "both weeks of the season"
    worker = spawn(seed, topic, "worker", extra_env=CLUSTER_ENV)
    worker.wait_ready()
    Feeder(kafka, topic, head, rate=6000).finish()
    wait_exact(seed, want, read=read_cluster)
    assert worker.terminate()[0] == 0
    before = snapshot(seed, boards)
    assert before["c-earliest"][2] and before["c-dense"][4] and before[PLAIN[0]][1], "ties, counts, metadata"
    redis_cluster.flush()  # FLUSHALL on every master
    assert snapshot(seed, boards)["index"] == []
    declare(seed)  # definitions are the operator's: declared again, as before the first event

    rebuilt = subprocess.run(
        [sys.executable, "-m", "cli.main", "rebuild", "--all", "--redis-cluster"],
        env={"HOTBOARD_REDIS": seed, "HOTBOARD_TOPIC": topic, "HOTBOARD_KAFKA": kafka},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert f"rebuilt {len(boards) + 1} boards" in rebuilt.stdout, rebuilt.stdout  # the season itself too
    assert snapshot(seed, boards) == before
    assert read_cluster(seed, boards) == want
    # the checkpoints (on their own slot) say the head is applied
    assert sum(cp + 1 for cp in checkpoints(seed, topic).values()) == len(head)

    worker.start()
    worker.wait_ready()
    Feeder(kafka, topic, tail, rate=6000).finish()
    wait_exact(seed, reference(events), read=read_cluster)
    # only the tail is folded again: the rebuilt checkpoints say where the head ends
    assert worker.metric("hotboard_events_total", result="applied") == len(tail)


def test_an_unreachable_cluster_is_exit_3_in_one_line(
    kafka: str, topic_factory: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """No seed node answers: redis-py raises its own cluster error (not a ConnectionError), still exit 3."""
    topic = topic_factory(1)
    argv = ["rebuild", "--all", "--redis-cluster", "--redis", f"redis://127.0.0.1:{free_port()}", "--topic", topic]
    assert hotboard([*argv, "--kafka", kafka]) == 3
    _, err = capsys.readouterr()
    assert len(err.splitlines()) == 1 and "Redis Cluster cannot be connected" in err, err
