"""The Redis server a worker writes to: one that may evict keys is refused at start, and a restart is noticed on
the first new connection to it, even when redis-py reconnects without an error reaching the worker."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
import redis

from cli.devstack import RedisServer
from cli.process import free_port
from ingest.worker import Worker
from tests.cluster import TestCluster
from tests.integration.faults import Raw, send_raw
from tests.integration.harness import (
    WorkerProcess,
    checkpoint,
    read_boards,
    sample,
    wait_while_running,
    worker_settings,
)

pytestmark = pytest.mark.integration


def _server(tmp_path: Path, *options: str, appendonly: bool = True) -> RedisServer:
    server = RedisServer(
        free_port(), tmp_path / f"redis-{len(list(tmp_path.iterdir()))}", appendonly=appendonly, options=options
    )
    server.data_dir.mkdir(parents=True)
    server.start()
    return server


def _events(board: str, count: int, delta: int) -> list[Raw]:
    return [
        (f"p{i}".encode(), orjson.dumps({"board": board, "player": f"p{i % 9}", "delta": delta}), [])
        for i in range(count)
    ]


# ---------------------------------------------------------------- eviction policy


def _refused_start(kafka: str, redis_url: str, topic: str, tmp_path: Path, **env: str) -> str:
    """``hotboard worker`` run to its end: it must exit 2 (refused at start); returns its last stderr line."""
    w = WorkerProcess(
        kafka=kafka, redis_url=redis_url, topic=topic, group=f"g-{topic}", log_dir=tmp_path, name="w", extra_env=env
    )
    run = subprocess.run(
        [sys.executable, "-m", "cli.main", "worker"], env=w.env, capture_output=True, timeout=60, check=False
    )
    assert run.returncode == 2, run.stderr.decode()[-2000:]
    return run.stderr.decode().strip().splitlines()[-1]


@pytest.mark.parametrize("policy", ["volatile-lru", "allkeys-lru", "volatile-ttl"])
@pytest.mark.parametrize("config", ["CONFIG allowed", "CONFIG disabled"])
def test_a_worker_refuses_a_redis_that_may_evict_keys(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path, policy: str, config: str
) -> None:
    """``hotboard worker`` exits non-zero at start, its last line naming maxmemory-policy, and writes nothing;
    with CONFIG disabled (as on managed Redis) the policy is read from INFO memory."""
    disabled = ("--rename-command", "CONFIG", "") if config == "CONFIG disabled" else ()
    server = _server(tmp_path, "--maxmemory-policy", policy, *disabled)
    try:
        last = _refused_start(kafka, server.url, topic_factory(1), tmp_path)
        assert "maxmemory-policy" in last and policy in last, last
        assert redis.Redis.from_url(server.url).dbsize() == 0
    finally:
        server.stop()


def test_a_worker_runs_on_noeviction_with_config_disabled(
    topic_factory: Callable[..., str], tmp_path: Path, spawn: Callable[..., WorkerProcess]
) -> None:
    server = _server(tmp_path, "--rename-command", "CONFIG", "")
    try:
        worker = spawn(server.url, topic_factory(1))
        worker.wait_ready()
    finally:
        server.stop()


def test_a_worker_refuses_a_cluster_any_of_whose_primaries_may_evict(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path, redis_cluster: TestCluster
) -> None:
    """``--redis-cluster``: each primary in turn set to ``allkeys-lru`` (the others on noeviction), whichever
    node redis-py picks as its default: the worker exits 2 at start naming that primary, and writes nothing."""
    local = redis_cluster.faults()
    topic = topic_factory(1)
    for master in local.masters():
        with local.client(master.port) as node:
            node.config_set("maxmemory-policy", "allkeys-lru")
            try:
                last = _refused_start(kafka, redis_cluster.seed, topic, tmp_path, HOTBOARD_REDIS_CLUSTER="true")
            finally:
                node.config_set("maxmemory-policy", "noeviction")
        assert "allkeys-lru" in last and f"127.0.0.1:{master.port}" in last, last
        for m in local.masters():
            with local.client(m.port) as c:
                assert c.dbsize() == 0, m


# ---------------------------------------------------------------- identity


async def test_a_redis_restart_between_two_flushes_is_noticed_on_the_silent_reconnect(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """Board ``a`` is flushed from partition 0 and its checkpoint written; Redis restarts empty on the same port
    (it lost every write, as an AOF-less server or a FLUSHALL-equivalent restart does) while the worker is idle,
    and redis-py has dropped its dead sockets, so no command fails. Partition 1 then feeds a new board ``b``:
    its lookup and flush go over connections redis-py opens again without a word. The restart must be seen
    there and partition 0 replayed: ``a`` is back, exact."""
    server = _server(tmp_path, appendonly=False)
    try:
        topic = topic_factory(2)
        await send_raw(kafka, topic, 0, _events("a", 50, 3))
        async with Worker(worker_settings(kafka, server.url, topic, f"g-{topic}"), handle_signals=False) as worker:
            task = asyncio.create_task(worker.run())
            try:
                await wait_while_running(lambda: checkpoint(server.url, topic, 0) == 49, task, "partition 0 flushed")
                await asyncio.to_thread(server.stop)
                await asyncio.to_thread(server.start)
                # redis-py drops a dead socket (its retry, its health check) and connects again on next use,
                # with no error reaching the caller: here, every pooled socket at once
                assert isinstance(worker._redis, redis.asyncio.Redis)
                await worker._redis.connection_pool.disconnect()
                await send_raw(kafka, topic, 1, _events("b", 30, 2))
                expected = {
                    "a": {f"p{i}": 3 * len(range(i, 50, 9)) for i in range(9)},
                    "b": {f"p{i}": 2 * len(range(i, 30, 9)) for i in range(9)},
                }
                await wait_while_running(
                    lambda: read_boards(server.url, ["a", "b"]) == expected, task, "a and b exact", 30
                )
                assert sample(worker, "hotboard_resyncs_total", reason="redis_restart") >= 1
            finally:
                worker.stop()
                await asyncio.wait_for(task, 30)
    finally:
        server.stop()
