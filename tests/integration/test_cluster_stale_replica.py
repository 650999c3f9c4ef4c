"""A promoted replica that lacks its master's last applied windows, made on purpose on the real 3+3 cluster.

test_cluster.py kills a master just after a confirmed window, so its replica almost surely holds everything.
Here the replica R of the master M holding the boards is frozen (SIGSTOP) and M's replication link to it cut
(``CLIENT KILL TYPE replica`` on M: a frozen process's kernel still buffers what M sends, and R would apply
it when woken; cut, R cannot even reconnect). Windows then land on M with ``WAIT`` short, so their checkpoints
hold (M is chosen without the topic's checkpoints: they sit on a master that survives, the dangerous case).
M is killed -9, R woken and promoted by the cluster's own failover (``cluster-replica-validity-factor 0``: a
replica however far behind may take over, no ``CLUSTER FAILOVER TAKEOVER`` needed). The worker meets the new
master, resynchronises from its watermarks, applies those windows again there, and every board equals the
topic; the read API, from masters and from replicas (M revived as R's replica), answers the reference ranking.

The second test is the same failure with the checkpoints moved on: the worker runs with ``--min-replica-acks 0``,
which is what a master with two replicas looks like when the other one acknowledged the windows and the cluster
promotes the one that did not. The topic's checkpoints then lie past windows the promoted R lacks; the worker, which
knows the watermarks it applied (its ledger, ingest/rewind.py), finds R's boards behind them when it resynchronises
and rewinds their partitions to replay from there (``hotboard_resync_rewinds_total``).
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections.abc import Callable

import pytest
from redis.crc import key_slot

from cli.devcluster import LocalCluster, Node, parse_nodes, poll
from flusher.cluster import board_slot
from hotboard import keys
from hotboard.codec import Event
from ingest.metrics import RESYNC_REASONS
from tests.cluster import TestCluster
from tests.integration.conftest import Spawn
from tests.integration.harness import Feeder, WorkerProcess, wait_exact
from tests.integration.test_cluster import CLUSTER_ENV, PLAIN, _api_matches, read_cluster
from tests.integration.test_removal import topic_totals

pytestmark = pytest.mark.integration

#: Attempts at cutting R off between two windows (a window applied while the cut was made may still reach R).
CUTS = 3


def resyncs(worker: WorkerProcess) -> float:
    return sum(worker.metric("hotboard_resyncs_total", reason=r) for r in RESYNC_REASONS)


def versions(local: LocalCluster, port: int, boards: list[str]) -> list[int]:
    """Each board's meta version on the node at ``port`` (one more per window applied)."""
    with local.client(port) as c:
        if c.info("replication").get("role") == "slave":
            c.execute_command("READONLY")
        got = [c.hget(keys.meta_key(b), keys.META_VERSION) for b in boards]
    return [int(v or 0) for v in got]


def checkpoints(local: LocalCluster, port: int, topic: str) -> dict[str, str]:
    with local.client(port) as c:
        return dict(c.hgetall(keys.checkpoint_key(topic)))


def repl_offset(local: LocalCluster, port: int) -> int:
    with local.client(port) as c:
        return int(c.info("replication")["master_repl_offset"])


def promoted_and_ok(local: LocalCluster, replica: Node) -> Callable[[], bool]:
    """Every live node serves the cluster (``cluster_state:ok``) and sees ``replica`` as a master with slots."""

    def check() -> bool:
        for port in local.live_ports():
            with local.client(port) as c:
                if "cluster_state:ok" not in str(c.execute_command("CLUSTER", "INFO")):
                    return False
                nodes = parse_nodes(str(c.execute_command("CLUSTER", "NODES")))
            if not any(n.node_id == replica.node_id and n.master and n.slots for n in nodes):
                return False
        return True

    return check


def test_a_promoted_replica_lacking_the_last_windows_gets_them_again(
    topic_factory: Callable[..., str], redis_cluster: TestCluster, spawn: Spawn
) -> None:
    promote_a_lacking_replica(topic_factory, redis_cluster, spawn, acks=1)


def test_a_promoted_replica_lacking_checkpointed_windows_gets_them_again(
    topic_factory: Callable[..., str], redis_cluster: TestCluster, spawn: Spawn
) -> None:
    promote_a_lacking_replica(topic_factory, redis_cluster, spawn, acks=0)


def promote_a_lacking_replica(
    topic_factory: Callable[..., str], redis_cluster: TestCluster, spawn: Spawn, *, acks: int
) -> None:
    """``acks`` 1: the windows R lacks hold their checkpoints (WAIT falls short); 0: the checkpoints move past them
    (as the other replica of a two-replica master would have let them)."""
    local = redis_cluster.faults()
    seed = redis_cluster.seed
    topic = topic_factory(4)
    # M: the master holding the most boards, but not the checkpoints. The checkpoints lost with M's windows would
    # make R consistent by itself; the checkpoints on a master that survives are what held back must protect
    ckpt_port = local.master_of_slot(int(key_slot(keys.checkpoint_key(topic).encode()))).port
    ports = {b: local.master_of_slot(board_slot(b)).port for b in PLAIN}
    counts = {p: list(ports.values()).count(p) for p in set(ports.values()) - {ckpt_port}}
    master = next(m for m in local.masters() if m.port == max(counts, key=lambda p: counts[p]))
    replica = local.replica_of(master)
    on_m = [b for b in PLAIN if ports[b] == master.port]
    elsewhere = [b for b in PLAIN if ports[b] != master.port][:6]
    with local.client(replica.port) as c:  # why the cluster's own failover promotes a replica however far behind
        assert c.config_get("cluster-replica-validity-factor") == {"cluster-replica-validity-factor": "0"}
    rng = random.Random(7)
    events = [
        Event(
            rng.choice(on_m if rng.random() < 0.8 else elsewhere), f"p{rng.randrange(40)}", rng.randrange(-5, 50), None
        )
        for _ in range(45_000)
    ]
    worker = spawn(seed, topic, "w", extra_env={**CLUSTER_ENV, "HOTBOARD_MIN_REPLICA_ACKS": str(acks)})
    worker.wait_ready()
    kafka = str(worker.env["HOTBOARD_KAFKA"])
    feeder = Feeder(kafka, topic, events, rate=3000)
    feeder.start()
    frozen = local.servers[replica.port].proc
    assert frozen is not None
    killed = False
    try:
        for cuts in range(1, CUTS + 1):  # noqa: B007 - reported after the loop
            # right after a confirmed window (windows are 500 ms apart): freeze R, then cut M's link to it
            flushed = worker.wait_metric("hotboard_windows_total", 2, result="flushed")
            worker.wait_metric("hotboard_windows_total", flushed + 1, result="flushed")
            frozen.send_signal(signal.SIGSTOP)
            with local.client(master.port) as m:
                m.execute_command("CLIENT", "KILL", "TYPE", "replica")
                assert m.info("replication")["connected_slaves"] == 0
            cut_offset, cut_versions = repl_offset(local, master.port), versions(local, master.port, on_m)
            cut_checkpoints = checkpoints(local, ckpt_port, topic)
            if acks:
                short = worker.metric("hotboard_replica_acks_short_total")
                held = worker.wait_metric("hotboard_replica_acks_short_total", short + 1, timeout_s=20)
            else:  # nothing waits for R: two more windows land on M (and their checkpoints move)
                flushed = worker.metric("hotboard_windows_total", result="flushed")
                worker.wait_metric("hotboard_windows_total", flushed + 2, result="flushed", timeout_s=20)
            resynced = resyncs(worker)
            if any(a > b for a, b in zip(versions(local, master.port, on_m), cut_versions, strict=True)):
                break  # a window landed on M after the cut: R cannot have it
            # the one window in flight at the cut reached R before it: R would hold all of M. Wake R, again
            frozen.send_signal(signal.SIGCONT)
            local.wait_healthy()
        else:
            pytest.fail(f"no window landed on M after {CUTS} cuts of its replica")
        if acks:  # the checkpoint holds while M confirms nothing: another short round, the same checkpoints
            before = checkpoints(local, ckpt_port, topic)
            worker.wait_metric("hotboard_replica_acks_short_total", held + 1, timeout_s=20)
            assert checkpoints(local, ckpt_port, topic) == before, "a checkpoint moved past windows R lacks"
        else:  # the dangerous case: checkpoints (on a master that survives) moved past windows R lacks
            assert worker.metric("hotboard_replica_acks_short_total") == 0
            assert checkpoints(local, ckpt_port, topic) != cut_checkpoints, "no checkpoint moved after the cut"
        applied_on_m = versions(local, master.port, on_m)
        lost_offset = repl_offset(local, master.port)
        assert lost_offset > cut_offset
        assert feeder.is_alive(), "the events ran out before the kill: the test would prove nothing"
        local.servers[master.port].kill()
        killed = True
        frozen.send_signal(signal.SIGCONT)
        assert repl_offset(local, replica.port) <= cut_offset < lost_offset, "R got writes from after the cut"
        lacking = versions(local, replica.port, on_m)
        assert any(r < m for r, m in zip(lacking, applied_on_m, strict=True)), (lacking, applied_on_m)
        started = time.monotonic()
        poll("R promoted and the cluster ok", promoted_and_ok(local, replica), timeout_s=45, step_s=0.1)
        promoted_s = time.monotonic() - started
        deadline = time.monotonic() + 60
        while resyncs(worker) <= resynced and time.monotonic() < deadline:
            time.sleep(0.1)
        assert resyncs(worker) > resynced, "the worker never resynchronised from the promoted replica"
        # R has no replica of its own: its windows stay applied, their checkpoints held, until M returns as one
        local.revive(master.port)
        killed = False
    finally:
        frozen.send_signal(signal.SIGCONT)
        if killed:
            local.revive(master.port)
    feeder.finish()
    expected = topic_totals(kafka, topic, len(events), lambda *_: True)
    wait_exact(seed, expected, read=read_cluster)
    asyncio.run(_api_matches(seed, expected, [(b, "shared") for b in [*on_m[:3], *elsewhere[:1]]]))
    rewinds = sum(worker.metric("hotboard_resync_rewinds_total", partition=str(p)) for p in range(4))
    if acks:  # the windows R lacks lie past the held checkpoints: resuming after them is enough
        assert rewinds == 0
    else:  # the worker found R's boards behind the watermarks it had applied, and replayed from there
        assert rewinds >= 1
    print(f"promotion took {promoted_s:.1f}s; cuts {cuts}")
