"""The eviction-policy refusal reads every node of a Redis Cluster, not only redis-py's default node: one
primary that may evict (or a replica, a primary after a failover) is enough to lose or double-count totals, and
the refusal names it."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.exceptions import ResponseError

from flusher.server import EvictionPolicyError, require_noeviction


class FakeCluster(RedisCluster):
    """Cluster-shaped: primaries with their own policy; a command without ``target_nodes`` goes to the first
    one (redis-py's default node). ``None``: INFO memory lacks the field and CONFIG is disabled."""

    def __init__(self, policies: dict[int, str | None], replicas: tuple[int, ...] = ()) -> None:
        # no super().__init__: no connections
        self.nodes = {
            port: ClusterNode("127.0.0.1", port, "replica" if port in replicas else "primary") for port in policies
        }
        self.by_name = {node.name: policies[port] for port, node in self.nodes.items()}
        self.initialized = False
        self.asked: list[str] = []

    async def initialize(self, *args: Any, **kwargs: Any) -> RedisCluster:
        self.initialized = True
        return self

    def get_nodes(self) -> list[ClusterNode]:
        assert self.initialized, "the node map is read before the nodes"
        return list(self.nodes.values())

    def _policy(self, target_nodes: ClusterNode | None) -> str | None:
        node = target_nodes or next(iter(self.nodes.values()))
        self.asked.append(node.name)
        return self.by_name[node.name]

    async def info(self, section: Any = None, *args: Any, target_nodes: Any = None, **kw: Any) -> Any:
        policy = self._policy(target_nodes)
        return {"used_memory": 1} if policy is None else {"maxmemory_policy": policy}

    async def config_get(self, pattern: Any = "*", *args: Any, target_nodes: Any = None, **kw: Any) -> Any:
        if self._policy(target_nodes) is None:
            raise ResponseError("unknown command 'CONFIG'")
        return {}


async def test_every_primary_is_read_and_the_one_that_may_evict_is_named() -> None:
    cluster = FakeCluster({7000: "noeviction", 7001: "noeviction", 7002: "allkeys-lru"})
    with pytest.raises(EvictionPolicyError) as caught:
        await require_noeviction(cluster)
    message = str(caught.value)
    assert "allkeys-lru" in message and "127.0.0.1:7002" in message and "\n" not in message, message
    assert "127.0.0.1:7000" not in message


async def test_a_cluster_whose_primaries_all_say_noeviction_is_accepted() -> None:
    cluster = FakeCluster({7000: "noeviction", 7001: "noeviction", 7002: "noeviction"})
    await require_noeviction(cluster)
    assert {"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"} <= set(cluster.asked)


async def test_a_primary_that_will_not_say_is_refused_by_name() -> None:
    cluster = FakeCluster({7000: "noeviction", 7001: None})
    with pytest.raises(EvictionPolicyError, match=r"cannot read .*127\.0\.0\.1:7001"):
        await require_noeviction(cluster)


async def test_a_replica_that_may_evict_is_refused_by_name() -> None:
    cluster = FakeCluster({7000: "noeviction", 7003: "volatile-lru"}, replicas=(7003,))
    with pytest.raises(EvictionPolicyError, match=r"volatile-lru on replica 127\.0\.0\.1:7003"):
        await require_noeviction(cluster)
