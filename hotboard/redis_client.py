"""The one place a hotboard process builds its Redis client: one server (``Redis``), or a Redis Cluster
(``RedisCluster``) reached through seed nodes when ``--redis-cluster`` is on.

In cluster mode ``--redis`` names seed nodes: ``redis://host:port`` (one is enough, the client learns the rest
from ``CLUSTER SLOTS``) or ``redis://h1:p1,h2:p2``; user, password, TLS and query options apply to every node.
A cluster has one database: a path other than ``/0`` is refused.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.cluster import LoadBalancingStrategy

#: A client of either kind: both answer the commands hotboard sends through ``execute_command`` and pipelines.
Client = Redis | RedisCluster

#: Read-only script calls, whose keys follow their numkeys like EVAL's and EVALSHA's.
_RO_SCRIPTS = frozenset({"EVAL_RO", "EVALSHA_RO", "eval_ro", "evalsha_ro"})


class _Cluster(RedisCluster):
    """redis-py's cluster client, finding the slot of EVALSHA_RO and EVAL_RO (the read scripts,
    :mod:`hotboard.script`) from their numkeys as it does for EVALSHA: redis-py 8.1 special-cases only EVAL and
    EVALSHA, and asks a node ``COMMAND GETKEYS`` before every other call of a movable-keys command (a round trip
    more per read, all to one node). Single commands and pipelines both route through ``_determine_slot``."""

    async def _determine_slot(self, command: str, *args: Any) -> int:
        return await super()._determine_slot("EVALSHA" if command in _RO_SCRIPTS else command, *args)


def split_seeds(url: str) -> tuple[str, list[tuple[str, int]]]:
    """(the URL with only its first seed, every seed as (host, port)). Raises ValueError on a bad list."""
    parts = urlsplit(url)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    seeds: list[tuple[str, int]] = []
    for item in hosts.split(","):
        host, colon, port = item.strip().rpartition(":")
        if not colon:
            host, port = item.strip(), "6379"
        if not host or not port.isdigit():
            raise ValueError(f"cluster seed {item!r} is not host:port")
        seeds.append((host.strip("[]"), int(port)))
    if parts.path not in ("", "/", "/0"):
        raise ValueError("a Redis Cluster has one database: drop the /<db> from the URL")
    first_host, first_port = seeds[0]
    bracketed = f"[{first_host}]" if ":" in first_host else first_host
    first = f"{userinfo}{at}{bracketed}:{first_port}"  # an IPv6 address keeps its brackets
    return urlunsplit((parts.scheme, first, "", parts.query, "")), seeds


def connect(url: str, *, cluster: bool, read_from_replicas: bool = False, **options: Any) -> Client:
    """The client for ``url``. ``options`` are connection options (timeouts, ``redis_connect_func``: one
    server only); ``read_from_replicas`` spreads reads over each slot's replicas (cluster mode only)."""
    if not cluster:
        return Redis.from_url(url, **options)
    first, seeds = split_seeds(url)
    options.pop("retry", None)  # the cluster client retries itself, after refreshing the slot map
    # a per-connection hook cannot be given to a cluster client: its nodes change, and so does their run_id
    options.pop("redis_connect_func", None)
    if read_from_replicas:
        options["load_balancing_strategy"] = LoadBalancingStrategy.ROUND_ROBIN_REPLICAS
    return _Cluster.from_url(
        first,
        startup_nodes=[ClusterNode(host, port) for host, port in seeds],
        retry=Retry(NoBackoff(), 1),
        **options,
    )


def check_seeds(url: str) -> None:
    """Raise ValueError unless ``url`` is a usable seed list."""
    split_seeds(url)
