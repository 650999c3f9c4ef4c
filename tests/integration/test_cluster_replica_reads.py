"""``--read-from replica`` on a real Redis Cluster: the read API's scripts run on the board's replica (EVALSHA_RO,
counted by each node's ``INFO commandstats``) and none on any master, for single reads, the live streams'
pipeline and the watermark poll; a replica that never got the scripts (SCRIPT LOAD reaches the masters only)
answers through EVAL_RO; and no read costs a ``COMMAND GETKEYS`` round trip first."""

from __future__ import annotations

import asyncio

import pytest

from cli.devcluster import LocalCluster
from flusher.cluster import board_slot
from hotboard import keys
from reader_api.app import connect, create_app
from reader_api.settings import ApiSettings
from reader_api.snapshot import top_call
from reader_api.streams import RedisReads
from reader_api.waits import Watermarks
from tests.cluster import TestCluster
from tests.integration.reader_harness import asgi_client

pytestmark = pytest.mark.integration

BOARD = "replica-reads"
SCORES = {f"p{i}": 10 * i for i in range(20)}
AS_OF = 1_700_000_000_000
#: The script calls a node counts.
SCRIPT_STATS = ("cmdstat_evalsha", "cmdstat_evalsha_ro", "cmdstat_eval", "cmdstat_eval_ro")


def _calls(local: LocalCluster, port: int) -> dict[str, int]:
    with local.client(port) as c:
        stats = c.info("commandstats")
    names = (*SCRIPT_STATS, "cmdstat_command|getkeys")
    return {name: int(stats[name]["calls"]) for name in names if name in stats}


def _load_board(local: LocalCluster) -> tuple[int, int]:
    """The board written on its master and replicated (WAIT on the writing connection); (master, replica)."""
    master = local.master_of_slot(board_slot(BOARD))
    replica = local.replica_of(master)
    with local.client(master.port) as c:
        c.zadd(keys.board_key(BOARD), SCORES)
        c.hset(keys.meta_key(BOARD), mapping={keys.META_VERSION: 7, keys.META_AS_OF: AS_OF})
        assert c.execute_command("WAIT", 1, 10_000) == 1
    return master.port, replica.port


def test_replica_reads_run_their_scripts_on_the_replica(redis_cluster: TestCluster) -> None:
    local = redis_cluster.faults()
    master, replica = _load_board(local)
    for port in local.live_ports():  # no script cached anywhere (the fixture flushes the masters' only)
        with local.client(port) as c:
            c.script_flush()
            c.config_resetstat()
    asyncio.run(_read(ApiSettings(redis=redis_cluster.seed, redis_cluster=True, api_read_from="replica")))
    on_replica = _calls(local, replica)
    # every read a script on the replica: the first of each script met NOSCRIPT there and ran as EVAL_RO
    assert on_replica.get("cmdstat_evalsha_ro", 0) >= 8, on_replica
    assert on_replica.get("cmdstat_eval_ro", 0) >= 1, on_replica
    assert on_replica.get("cmdstat_evalsha", 0) == 0, on_replica
    for port in local.live_ports():
        stats = _calls(local, port)
        assert stats.get("cmdstat_command|getkeys", 0) == 0, (port, stats)
        if port != replica:
            assert not any(stats.get(name) for name in SCRIPT_STATS), (port, port == master, stats)


async def _read(settings: ApiSettings) -> None:
    redis = connect(settings)
    try:
        async with asgi_client(create_app(settings, redis)) as client:
            base = f"/v1/boards/{BOARD}"
            top = (await client.get(f"{base}/top", params={"limit": 5})).json()
            assert [e["player"] for e in top["entries"]] == ["p19", "p18", "p17", "p16", "p15"], top
            assert top["as_of"] == AS_OF, top
            rank = (await client.get(f"{base}/players/p10")).json()
            assert (rank["rank"], rank["score"]) == (10, 100), rank
            around = (await client.get(f"{base}/players/p10/around", params={"radius": 1})).json()
            assert [e["player"] for e in around["entries"]] == ["p11", "p10", "p9"], around
            friends = (await client.get(f"{base}/players", params={"ids": "p1,p2"})).json()
            assert [e["player"] for e in friends["entries"]] == ["p2", "p1"], friends
            info = (await client.get(base)).json()
            assert (info["size"], info["version"]) == (len(SCORES), 7), info
        # a live stream's round trip (a pipeline) and the watermark poll of an after-token wait
        (reply,) = await RedisReads(redis).replies([top_call(BOARD, 0, 3)])
        assert int(reply[0]) == 1, reply
        assert await Watermarks(redis, "t", 0.05).version(BOARD) == 7
        assert await Watermarks(redis, "t", 0.05).version(BOARD) == 7
    finally:
        await redis.aclose()
