"""The Redis server the worker writes to: it must never evict a key, and it must stay the server the worker's
positions and watermarks were read from.

Eviction: period boards are the only keys with a TTL, so a ``volatile-*`` policy (the default of some managed
services) would evict a board's ``:applied`` hash, the board, or its ``:counts`` one at a time: double counts,
losses, wrong dense ranks. The worker refuses to start unless Redis says ``noeviction`` (in a cluster, every
primary says it).

Identity: redis-py reconnects on its own (its retry, its pool's checks), so a restart that lost the last writes
can pass with no error reaching the worker. Every new connection therefore reads the server's ``run_id``; one
from another server refuses the connection until the worker has resynchronised from it.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import RedisError, ResponseError

from hotboard.redis_client import Client

REQUIRED_POLICY = "noeviction"


class EvictionPolicyError(Exception):
    """Redis may evict keys (or will not say whether it does): the worker must not write to it."""


class ServerRestarted(RedisError):
    """A new connection reached a Redis other than the one the worker positioned from. Not a ConnectionError:
    redis-py would retry it, and every retry meets the same server."""


async def eviction_policy(redis: Client, node: ClusterNode | None = None) -> str | None:
    """Redis's ``maxmemory-policy`` (of cluster ``node`` when given): from ``INFO memory`` (readable where
    CONFIG is disabled, as on managed services), else from ``CONFIG GET``; None when neither answers."""
    target: dict[str, Any] = {} if node is None else {"target_nodes": node}
    try:
        policy = (await redis.info("memory", **target)).get("maxmemory_policy")
    except ResponseError:
        policy = None
    if policy:
        return _text(policy)
    try:
        reply = await redis.config_get("maxmemory-policy", **target)
    except ResponseError:
        return None
    found = [v for k, v in reply.items() if _text(k) == "maxmemory-policy"]  # str or bytes keys
    return _text(found[0]) if found and found[0] else None


async def require_noeviction(redis: Client) -> None:
    """Raises :class:`EvictionPolicyError` (one line) unless Redis says ``noeviction``: in a cluster, every
    node, replicas too (each primary holds its own slots' boards, and a replica is a primary after a
    failover), the refusal naming the first that does not. Raises what Redis raises when it cannot be reached
    (the caller retries)."""
    if not isinstance(redis, RedisCluster):
        _check(await eviction_policy(redis), "")
        return
    await redis.initialize()  # the node map, from the seeds (a no-op once read)
    for node in redis.get_nodes():
        _check(await eviction_policy(redis, node), f" on {node.server_type or 'node'} {node.name}")


def _check(policy: str | None, where: str) -> None:
    if policy is None:
        raise EvictionPolicyError(
            f"cannot read Redis maxmemory-policy{where} (neither INFO memory nor CONFIG GET answers it); hotboard "
            f"needs maxmemory-policy {REQUIRED_POLICY}: an evicted key is a lost or double-counted total"
        )
    if policy != REQUIRED_POLICY:
        raise EvictionPolicyError(
            f"Redis maxmemory-policy is {policy}{where}; hotboard needs {REQUIRED_POLICY} (an evicted key is a lost "
            f"or double-counted total): set maxmemory-policy {REQUIRED_POLICY}"
        )


class ServerIdentity:
    """The ``run_id`` of the server the worker's state came from, checked on every new connection (pass
    :meth:`on_connect` as redis-py's ``redis_connect_func``)."""

    def __init__(self) -> None:
        #: The server positioned from; None until the first connection.
        self.known: str | None = None
        #: The other server a new connection met, until :meth:`accept`.
        self.restarted_as: str | None = None

    async def on_connect(self, conn: AbstractConnection) -> None:
        await conn.on_connect()
        await conn.send_command("INFO", "server")
        run_id = parse_run_id(await conn.read_response())
        self.seen(run_id)

    def seen(self, run_id: str) -> None:
        """A reply of the server ``run_id``: raises :class:`ServerRestarted` unless it is the known one."""
        if self.known is None:
            self.known = run_id
        elif run_id != self.known:
            self.restarted_as = run_id
            raise ServerRestarted(f"Redis restarted (run_id {self.known} -> {run_id}): resynchronise first")

    def accept(self) -> None:
        """The worker forgot what it knew and reads everything from the new server: connect to it."""
        if self.restarted_as is not None:
            self.known, self.restarted_as = self.restarted_as, None


def parse_run_id(info: Any) -> str:
    for line in _text(info).splitlines():
        if line.startswith("run_id:"):
            return line[len("run_id:") :].strip()
    raise ResponseError("INFO server has no run_id")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
