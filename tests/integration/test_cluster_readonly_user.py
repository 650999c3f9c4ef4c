"""The read API on a Redis Cluster as a read-only ACL user (deploy/k8s/README.md, "Redis users"): the one-node
rules (``+@read +@scripting -@write``) are not enough there, since redis-py's cluster client asks ``CLUSTER
SLOTS`` and ``COMMAND`` at start, sends ``READONLY`` on every connection when it reads from replicas, and
``ASKING`` after an ASK redirect while a slot moves. With exactly those four commands more the API answers from
replicas and from masters, Redis refuses nothing, and the user still cannot write. A cluster does not
replicate ACLs: the user is created on every node."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest
import redis
from redis.exceptions import NoPermissionError, RedisClusterException

from cli.devcluster import LocalCluster, poll
from cli.process import LOOPBACK
from flusher.cluster import board_slot
from hotboard import keys
from hotboard.redis_client import split_seeds
from reader_api.app import connect, create_app
from reader_api.settings import ApiSettings
from tests.cluster import TestCluster
from tests.integration.reader_harness import asgi_client

pytestmark = pytest.mark.integration

USER, PASSWORD = "hotboard-api", "api-pw"
#: The one-node user of deploy/k8s (tests/integration/test_reader_readonly.py runs the API on it).
ONE_NODE = ["on", f">{PASSWORD}", "~hb:*", "+@read", "+@scripting", "-@write"]
#: What redis-py's cluster client needs beyond it: the slot map and the command table at start, READONLY on
#: each connection when reading from replicas (not ``+@connection``: that grants CLIENT KILL too)...
AT_START = ["+cluster|slots", "+command", "+readonly"]
#: ... and ASKING, which follows an ASK redirect while a slot moves.
CLUSTER_EXTRA = [*AT_START, "+asking"]
BOARD = "acl-cluster"
SCORES = {f"p{i}": 10 * i for i in range(20)}


@pytest.fixture
def cluster(redis_cluster: TestCluster) -> Iterator[LocalCluster]:
    """The embedded cluster with the board on its master (replicated), the API's user removed after the test."""
    local = redis_cluster.faults()
    master = local.master_of_slot(board_slot(BOARD))
    with local.client(master.port) as c:
        c.zadd(keys.board_key(BOARD), SCORES)
        c.hset(keys.meta_key(BOARD), mapping={keys.META_VERSION: 3, keys.META_AS_OF: 1_700_000_000_000})
        assert c.execute_command("WAIT", 1, 10_000) == 1
    yield local
    for port in local.live_ports():
        with local.client(port) as c:
            c.execute_command("ACL", "DELUSER", USER)
            c.execute_command("ACL", "LOG", "RESET")


def _set_user(local: LocalCluster, rules: list[str]) -> str:
    """The user on every node (``ACL SETUSER`` is per node), each ACL LOG emptied; the API's seed URL."""
    for port in local.live_ports():
        with local.client(port) as c:
            c.execute_command("ACL", "DELUSER", USER)
            c.execute_command("ACL", "SETUSER", USER, *rules)
            c.execute_command("ACL", "LOG", "RESET")
    return f"redis://{USER}:{PASSWORD}@" + ",".join(f"{LOOPBACK}:{p}" for p in local.ports)


def _refused(local: LocalCluster) -> set[str]:
    """The commands (``cluster|slots``...) any node refused the user since its ACL LOG was emptied."""
    found: set[str] = set()
    for port in local.live_ports():
        with local.client(port) as c:
            for entry in c.acl_log():
                found.add(str(entry["object"]))
    return found


async def _answers(settings: ApiSettings) -> tuple[int, int]:
    """(status of top, status of a player) through the app; the data checked when both are 200."""
    client = connect(settings)
    try:
        async with asgi_client(create_app(settings, client)) as api:
            top = await api.get(f"/v1/boards/{BOARD}/top", params={"limit": 3})
            player = await api.get(f"/v1/boards/{BOARD}/players/p10")
            if top.status_code == 200:
                assert [e["player"] for e in top.json()["entries"]] == ["p19", "p18", "p17"], top.text
            if player.status_code == 200:
                assert (player.json()["rank"], player.json()["score"]) == (10, 100), player.text
            return top.status_code, player.status_code
    except (redis.RedisError, RedisClusterException):  # no slot map: "Cluster mode is not enabled on this node"
        return 0, 0
    finally:
        await client.aclose()


def _settings(url: str, read_from: str) -> ApiSettings:
    return ApiSettings(redis=url, redis_cluster=True, api_read_from=read_from)


@pytest.mark.parametrize("read_from", ["replica", "master"])
def test_the_api_reads_a_cluster_as_the_read_only_cluster_user(cluster: LocalCluster, read_from: str) -> None:
    url = _set_user(cluster, [*ONE_NODE, *CLUSTER_EXTRA])
    assert asyncio.run(_answers(_settings(url, read_from))) == (200, 200)
    assert _refused(cluster) == set()  # not one command of the client or the API refused
    writer = redis.RedisCluster.from_url(split_seeds(url)[0])  # the user through one seed
    try:
        assert writer.zscore(keys.board_key(BOARD), "p1") == 10
        with pytest.raises(NoPermissionError):
            writer.zadd(keys.board_key(BOARD), {"intruder": 1})
        with pytest.raises(NoPermissionError):
            writer.execute_command("CLUSTER", "NODES")  # type: ignore[no-untyped-call]  # only SLOTS of CLUSTER
    finally:
        writer.close()
    assert _refused(cluster) == {"zadd", "cluster|nodes"}


def test_the_one_node_user_and_every_extra_permission_less_is_refused_on_a_cluster(cluster: LocalCluster) -> None:
    """The one-node rules fail on a cluster in both modes; each extra permission is needed, READONLY by replica
    reads only (master reads answer without it)."""
    extra = {r.removeprefix("+") for r in CLUSTER_EXTRA}
    url = _set_user(cluster, ONE_NODE)
    for read_from in ("replica", "master"):
        assert asyncio.run(_answers(_settings(url, read_from))) != (200, 200), read_from
        assert _refused(cluster) and _refused(cluster) <= extra
    for missing in AT_START:
        url = _set_user(cluster, [*ONE_NODE, *(r for r in CLUSTER_EXTRA if r != missing)])
        assert asyncio.run(_answers(_settings(url, "replica"))) != (200, 200), missing
        assert _refused(cluster) == {missing.removeprefix("+")}, missing
        master_reads = asyncio.run(_answers(_settings(url, "master")))
        assert (master_reads == (200, 200)) == (missing == "+readonly"), (missing, master_reads)


def _migrate(local: LocalCluster, slot: int, first: str, between: Callable[[], None]) -> None:
    """Move ``slot`` to another master as :meth:`LocalCluster.migrate_slot` does, the key ``first`` alone first."""
    source = local.master_of_slot(slot)
    target = next(m for m in local.masters() if m.node_id != source.node_id)
    with local.client(target.port) as dst, local.client(source.port) as src:
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
        try:
            src.execute_command("MIGRATE", LOOPBACK, target.port, "", 0, 5000, "KEYS", first)
            between()
        finally:
            if rest := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
                src.execute_command("MIGRATE", LOOPBACK, target.port, "", 0, 5000, "KEYS", *rest)
            for m in local.masters():
                with local.client(m.port) as c:
                    c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
    poll("the slot move to spread", lambda: local.master_of_slot(slot).node_id == target.node_id, 30)


@pytest.mark.parametrize("first", [keys.board_key(BOARD), keys.meta_key(BOARD)])
def test_reads_during_a_slot_migration_need_asking_too(cluster: LocalCluster, first: str) -> None:
    """While the board's slot moves (one of its keys on the target already), redis-py follows the master's ASK
    redirect with ``ASKING`` on the target: refused without ``+asking``; with it the reader answers as an
    unrestricted user does (a 503 either way while the board's keys are split over two masters), nothing is
    refused, and the board answers once the slot has moved. (A replica gives no ASK: it answers from what it
    holds.)"""
    read_from = "master"
    url = _set_user(cluster, [*ONE_NODE, *AT_START])
    seen: dict[str, object] = {}

    def halfway() -> None:
        seen["r0"] = asyncio.run(_answers(_settings(url, read_from)))
        seen["without"] = _refused(cluster)
        _set_user(cluster, [*ONE_NODE, *CLUSTER_EXTRA])
        seen["reader"] = asyncio.run(_answers(_settings(url, read_from)))
        seen["full"] = asyncio.run(_answers(_settings(cluster.seed, read_from)))
        seen["with"] = _refused(cluster)

    _migrate(cluster, board_slot(BOARD), first, halfway)
    assert seen["without"] == {"asking"}, seen
    assert seen["with"] == set(), seen
    assert seen["reader"] == seen["full"], seen
    assert asyncio.run(_answers(_settings(url, read_from))) == (200, 200)  # the slot on its new master
    assert _refused(cluster) == set()
