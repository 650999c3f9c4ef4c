"""A real Redis Cluster on loopback for tests and benchmarks: three masters and three replicas, each a
``redis-server --cluster-enabled yes`` in its own folder, joined by ``redis-cli --cluster create``.

Every wait polls the servers (``CLUSTER INFO``, ``CLUSTER NODES``, ``INFO replication``); the faults a test
injects (kill -9 a master, ``CLUSTER FAILOVER`` on a replica, a slot moved between masters) are methods here.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from cli.devstack import RedisServer, StackError
from cli.process import LOOPBACK

#: The cluster bus listens on port + 10000, and both must be below 65536.
BUS_OFFSET = 10_000
MAX_PORT = 55_535
NODE_TIMEOUT_MS = 2000
MASTERS = 3


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def cluster_ports(count: int, rng: random.Random | None = None) -> list[int]:
    """``count`` ports below 55536 whose bus ports (port + 10000) are free too."""
    rng = rng or random.Random()
    found: list[int] = []
    for _ in range(2000):
        port = rng.randrange(20_000, MAX_PORT)
        if port not in found and _bindable(port) and _bindable(port + BUS_OFFSET):
            found.append(port)
            if len(found) == count:
                return found
    raise StackError(f"no {count} free port pairs (port, port + {BUS_OFFSET}) below {MAX_PORT + 1}")


@dataclass(frozen=True, slots=True)
class Node:
    """One line of ``CLUSTER NODES``."""

    node_id: str
    port: int
    master: bool
    master_id: str | None
    failed: bool
    slots: tuple[tuple[int, int], ...]


def parse_nodes(text: str) -> list[Node]:
    nodes = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 8:
            continue
        flags = parts[2].split(",")
        slots = []
        for field in parts[8:]:
            if field.startswith("["):  # a slot in migration
                continue
            lo, _, hi = field.partition("-")
            slots.append((int(lo), int(hi or lo)))
        nodes.append(
            Node(
                node_id=parts[0],
                port=int(parts[1].split("@")[0].rsplit(":", 1)[1]),
                master="master" in flags,
                master_id=None if parts[3] == "-" else parts[3],
                failed="fail" in flags or "fail?" in flags or "noaddr" in flags,
                slots=tuple(slots),
            )
        )
    return nodes


def poll(what: str, check: Callable[[], bool], timeout_s: float = 30.0, step_s: float = 0.05) -> None:
    """Wait until ``check()`` holds (errors count as not yet), bounded in time."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (redis.RedisError, OSError) as exc:
            last = exc
        time.sleep(step_s)
    raise StackError(f"{what} did not happen within {timeout_s:.0f}s (last error: {last!r})")


class LocalCluster:
    """Six redis-servers in ``base_dir`` forming one cluster; :attr:`seed` is a URL for hotboard."""

    def __init__(self, base_dir: Path, ports: list[int] | None = None, *, appendonly: bool = True) -> None:
        """``appendonly=False``: no AOF (benchmarks; the fault tests restart masters from theirs)."""
        self.base_dir = base_dir
        self.appendonly = appendonly
        self.ports = ports or cluster_ports(2 * MASTERS)
        self.servers = {p: self._server(p) for p in self.ports}

    def _server(self, port: int) -> RedisServer:
        folder = self.base_dir / f"node-{port}"
        folder.mkdir(parents=True, exist_ok=True)
        options = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            str(folder / "nodes.conf"),
            "--cluster-node-timeout",
            str(NODE_TIMEOUT_MS),
            # a replica however far behind may take over: tests kill masters on purpose
            "--cluster-replica-validity-factor",
            "0",
        ]
        return RedisServer(port, folder, appendonly=self.appendonly, options=options)

    @property
    def seed(self) -> str:
        """Every node as a seed: a test may kill any of them."""
        return "redis://" + ",".join(f"{LOOPBACK}:{p}" for p in self.ports)

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(host=LOOPBACK, port=port, socket_timeout=10, decode_responses=True)

    def start(self) -> None:
        for server in self.servers.values():
            server.start()
        cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
        create = [cli, "--cluster", "create", *(f"{LOOPBACK}:{p}" for p in self.ports)]
        subprocess.run(
            [*create, "--cluster-replicas", "1", "--cluster-yes"], check=True, capture_output=True, timeout=60
        )
        self.wait_healthy()

    def stop(self) -> None:
        for server in self.servers.values():
            server.kill()

    def nodes(self, port: int | None = None) -> list[Node]:
        """The topology as one live node sees it."""
        for p in [port] if port is not None else self.live_ports():
            with self.client(p) as c:
                return parse_nodes(str(c.execute_command("CLUSTER", "NODES")))
        raise StackError("no cluster node is running")

    def live_ports(self) -> list[int]:
        return [p for p, s in self.servers.items() if s.running]

    def masters(self) -> list[Node]:
        return [n for n in self.nodes() if n.master and not n.failed and n.slots]

    def replica_of(self, master: Node) -> Node:
        found = self._replica(master)
        if found is None:
            raise StackError(f"master {master.port} has no live replica")
        return found

    def _replica(self, master: Node) -> Node | None:
        return next((n for n in self.nodes() if n.master_id == master.node_id and not n.failed), None)

    def master_of_slot(self, slot: int) -> Node:
        for n in self.masters():
            if any(lo <= slot <= hi for lo, hi in n.slots):
                return n
        raise StackError(f"no master serves slot {slot}")

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        """Every node alive says ``cluster_state:ok`` and agrees on three masters each with a linked replica."""

        def healthy() -> bool:
            for p in self.live_ports():
                with self.client(p) as c:
                    if "cluster_state:ok" not in str(c.execute_command("CLUSTER", "INFO")):
                        return False
            masters = self.masters()
            if len(masters) != MASTERS or sum(hi - lo + 1 for m in masters for lo, hi in m.slots) != 16384:
                return False
            for p in self.live_ports():
                if len([n for n in self.nodes(p) if n.master and n.slots and not n.failed]) != MASTERS:
                    return False
            for m in masters:
                replica = self._replica(m)
                if replica is None:
                    return False
                with self.client(replica.port) as c:
                    if c.info("replication").get("master_link_status") != "up":
                        return False
            return True

        poll("the cluster to become healthy", healthy, timeout_s)

    def flush(self) -> None:
        for m in self.masters():
            with self.client(m.port) as c:
                c.flushall()
                c.script_flush()

    # ------------------------------------------------------------------ faults

    def kill_master(self, master: Node) -> Node:
        """kill -9 ``master``; returns its replica once that replica has taken over (node timeout)."""
        replica = self.replica_of(master)
        self.servers[master.port].kill()
        poll("the replica to take over", lambda: any(n.node_id == replica.node_id for n in self.masters()), 30)
        return replica

    def revive(self, port: int) -> None:
        """Restart a killed node on its folder (it rejoins as a replica) and wait for the cluster to heal."""
        self.servers[port].start()
        self.wait_healthy()

    def failover(self, master: Node) -> Node:
        """``CLUSTER FAILOVER`` on ``master``'s replica; returns that replica, now master."""
        replica = self.replica_of(master)
        with self.client(replica.port) as c:
            c.execute_command("CLUSTER", "FAILOVER")
        poll("the failover", lambda: any(n.node_id == replica.node_id for n in self.masters()), 30)
        return replica

    def migrate_slot(self, slot: int, target: Node, between: Callable[[], None] | None = None) -> None:
        """Move ``slot`` to ``target`` live: IMPORTING on the target, MIGRATING on the source, MIGRATE its keys
        in batches, then SETSLOT NODE on every master. ``between`` runs after the first batch moved (the slot is
        split over two masters then: clients get ASK)."""
        source = self.master_of_slot(slot)
        if source.node_id == target.node_id:
            raise ValueError("the slot is on the target already")
        with self.client(target.port) as dst, self.client(source.port) as src:
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
            first = True
            for _ in range(100_000):
                names = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1 if first else 100)
                if not names:
                    break
                src.execute_command("MIGRATE", LOOPBACK, target.port, "", 0, 5000, "KEYS", *names)
                if first and between is not None:
                    between()
                first = False
            for m in self.masters():
                with self.client(m.port) as c:
                    c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
        poll("the slot move to spread", lambda: self.master_of_slot(slot).node_id == target.node_id, 30)
