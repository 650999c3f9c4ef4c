"""Redis wiped (FLUSHALL), then ``hotboard restore --all`` with Kafka unreachable: every board's ranks, scores,
tie order and metadata equal what Redis held, from the archive alone; a worker started afterwards replays only
the tail and stays exact."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from cli.devstack import RedisServer
from cli.main import main as hotboard
from cli.process import free_port
from hotboard import keys
from hotboard.boards import BoardDef
from tests.integration.archive_harness import archiver_process, wait_archived
from tests.integration.conftest import Spawn
from tests.integration.harness import Feeder, declare_boards, skewed_events, totals_of, wait_exact

pytestmark = pytest.mark.integration

BOARDS = ("global", "board-1", "board-2")
#: board-1 ranks equal scores by who reached them first: the restored members must keep each tie time.
DEFINITIONS = {"board-1": BoardDef(ties="earliest")}


def snapshot(url: str) -> dict[str, Any]:
    """Every board as a reader sees it: members in rank order with scores, player metadata, watermarks."""
    r = redis.Redis.from_url(url)
    try:
        return {
            board: (
                r.zrange(keys.board_key(board), 0, -1, withscores=True),
                r.hgetall(keys.player_meta_key(board)),
                r.hgetall(keys.applied_key(board)),
                r.hgetall(keys.members_key(board)),
                r.hget(keys.def_key(board), "spec"),
            )
            for board in BOARDS
        }
    finally:
        r.close()


def test_flushall_then_restore_without_kafka_then_the_tail(
    kafka: str,
    topic_factory: Callable[..., str],
    redis_server: RedisServer,
    postgres_url: str,
    spawn: Spawn,
    tmp_path: Path,
) -> None:
    topic = topic_factory(4)
    declare_boards(redis_server.url, DEFINITIONS)
    events = [e._replace(meta=orjson.dumps({"n": i})) if i % 7 == 0 else e for i, e in enumerate(skewed_events(20_000))]
    head, tail = events[:15_000], events[15_000:]
    worker = spawn(redis_server.url, topic, "worker")
    archiver = archiver_process(kafka, redis_server.url, postgres_url, topic, f"g-{uuid.uuid4().hex[:8]}", tmp_path)
    try:
        archiver.start()
        worker.wait_ready()
        archiver.wait_ready()
        Feeder(kafka, topic, head, rate=10_000).finish()
        wait_exact(redis_server.url, {b: t for b, t in totals_of(head).items() if b != "board-1"})
        wait_archived(postgres_url, {b: t for b, t in totals_of(head).items() if b != "board-1"})
        assert worker.terminate()[0] == 0 and archiver.terminate()[0] == 0
        before = snapshot(redis_server.url)
        assert before["board-1"][0] and before["board-1"][3] and before["global"][1], "tie times and metadata held"
        redis.Redis.from_url(redis_server.url).flushall()

        dead_kafka = f"127.0.0.1:{free_port()}"
        restored = subprocess.run(
            [sys.executable, "-m", "cli.main", "restore", "--all", "--postgres", postgres_url],
            env={"HOTBOARD_REDIS": redis_server.url, "HOTBOARD_TOPIC": topic, "HOTBOARD_KAFKA": dead_kafka},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert restored.returncode == 0, restored.stderr
        assert "restored 3 boards" in restored.stdout, restored.stdout
        assert snapshot(redis_server.url) == before

        worker.start()
        worker.wait_ready()
        Feeder(kafka, topic, tail, rate=10_000).finish()
        wait_exact(redis_server.url, {b: t for b, t in totals_of(events).items() if b != "board-1"})
        # only the tail is folded again: the restored checkpoints say where the head ends
        assert worker.metric("hotboard_events_total", result="applied") == len(tail)
    finally:
        archiver.cleanup()


@pytest.mark.parametrize("cluster", [False, True], ids=["redis", "redis-cluster"])
def test_an_unreachable_redis_is_exit_3_in_one_line(
    postgres_url: str, cluster: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """Restore with the archive up and Redis (or every cluster seed) down: the documented exit 3, one line."""
    argv = ["restore", "--all", "--postgres", postgres_url, "--redis", f"redis://127.0.0.1:{free_port()}"]
    assert hotboard([*argv, *(["--redis-cluster"] if cluster else [])]) == 3
    _, err = capsys.readouterr()
    assert len(err.splitlines()) == 1 and err.startswith("hotboard restore: "), err
