"""Exactly once on a real Redis Cluster (three masters, three replicas): worker processes in cluster mode feed
60 boards spread over every master (plain, dense, earliest, best and a weekly one), through a worker killed
-9, a second worker joining, a master killed -9 right after a window, a replica failover and a live slot
migration; every board equals the reference computed from the events."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from typing import cast

import pytest
import redis
from redis.cluster import ClusterNode

from cli.loadgen import publish
from flusher.cluster import board_slot
from hotboard import keys
from hotboard.boards import BoardDef
from hotboard.codec import Event
from hotboard.redis_client import split_seeds
from reader_api.app import create_app
from reader_api.settings import ApiSettings
from tests.cluster import TestCluster
from tests.integration.conftest import Spawn
from tests.integration.harness import (
    WEEKLY,
    Feeder,
    Totals,
    board_totals,
    declare_boards,
    kill_while_feeding,
    totals_of,
    wait_exact,
)
from tests.integration.reader_harness import asgi_client, reference_ranking
from tests.integration.test_removal import hotboard, topic_totals

pytestmark = pytest.mark.integration

PLAIN = [f"c-{i}" for i in range(56)]
DECLARED = {
    "c-dense": BoardDef(ties="dense"),
    "c-earliest": BoardDef(ties="earliest"),
    "c-best": BoardDef(operator="best"),
    "c-weekly": WEEKLY,
}
#: What a torn read of an ``earliest`` board yields for a player: beyond every total a board can hold.
TORN = 2**63
CLUSTER_ENV = {"HOTBOARD_REDIS_CLUSTER": "true", "HOTBOARD_BACKOFF_MAX_S": "1"}


def cluster_events(count: int, seed: int) -> list[Event]:
    """Events over every board; the weekly board's times straddle this week's start."""
    rng = random.Random(seed)
    boards = [*PLAIN, *DECLARED]
    week = WEEKLY.schedule.period_of(int(time.time() * 1000)).start_ms
    out = []
    for i in range(count):
        board = boards[i % len(boards)]
        player = f"p{rng.randrange(40)}"
        ts = week + rng.randint(-3_600_000, 3_600_000) if board == "c-weekly" else 1_700_000_000_000 + i
        if board == "c-best":
            out.append(Event(board, player, None, ts, op="best", score=rng.randrange(1, 10_000)))
        else:
            out.append(Event(board, player, rng.randrange(-5, 50), ts))
    return out


def reference(events: Sequence[Event]) -> Totals:
    totals = totals_of([e for e in events if e.board != "c-best"], {"c-weekly": WEEKLY})
    best: dict[str, int] = {}
    for e in events:
        if e.board == "c-best" and e.score is not None:
            best[e.player] = max(best.get(e.player, e.score), e.score)
    totals["c-best"] = best
    return totals


def sync_client(seed: str) -> redis.RedisCluster:
    _, seeds = split_seeds(seed)
    return redis.RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in seeds])  # type: ignore[no-untyped-call]


def read_cluster(seed: str, boards: Iterable[str]) -> Totals:
    r = sync_client(seed)
    try:
        out: Totals = {}
        for board in boards:
            if board == "c-earliest":  # member = tie time + player; desc earliest boards keep -total
                members = cast("dict[bytes, bytes]", r.hgetall(keys.members_key(board)))
                # two reads while a worker may apply a window in between: a member it moved reads as missing (a
                # total no reference holds), so the caller's poll reads again instead of failing on a torn read
                scores = {p: r.zscore(keys.board_key(board), m) for p, m in members.items()}
                out[board] = {p.decode(): TORN if s is None else -int(s) for p, s in scores.items()}
            else:
                out[board] = board_totals(r, board)
        return out
    finally:
        r.close()


def declare(seed: str) -> None:
    declare_boards(seed, DECLARED, cluster=True)


def masters_of(cluster: TestCluster, boards: Sequence[str]) -> set[int]:
    local = cluster.faults()
    return {local.master_of_slot(board_slot(b)).port for b in boards}


def test_boards_spread_over_every_master_stay_exact_through_a_kill_and_a_rebalance(
    topic_factory: Callable[..., str], redis_cluster: TestCluster, spawn: Spawn
) -> None:
    seed = redis_cluster.seed
    assert len(masters_of(redis_cluster, [*PLAIN, *DECLARED])) == 3, "the boards must reach every master"
    declare(seed)
    topic = topic_factory(4)
    events = cluster_events(24_000, seed=1)
    expected = reference(events)
    first = spawn(seed, topic, "first", extra_env=CLUSTER_ENV)
    feeder = Feeder(str(first.env["HOTBOARD_KAFKA"]), topic, events, rate=4000)
    feeder.start()
    kill_while_feeding(first, feeder, 1)
    second = spawn(seed, topic, "second", extra_env=CLUSTER_ENV)
    second.wait_ready()
    feeder.finish()
    wait_exact(seed, expected, read=read_cluster)
    assert first.metric("hotboard_replica_acks_short_total") == 0


def test_a_master_killed_right_after_a_window_loses_nothing(
    topic_factory: Callable[..., str], redis_cluster: TestCluster, spawn: Spawn
) -> None:
    """kill -9 the master holding the most boards just after a window landed there: its replica takes over, and
    whatever it lacks is applied again from the held checkpoint (WAIT moved it only once replicated). With no
    replica left behind the new master, windows are applied but not confirmed (counted, retried) until the old
    master returns as its replica."""
    local = redis_cluster.faults()
    seed = redis_cluster.seed
    declare(seed)
    topic = topic_factory(4)
    events = cluster_events(30_000, seed=2)
    worker = spawn(seed, topic, "w", extra_env=CLUSTER_ENV)
    worker.wait_ready()
    feeder = Feeder(str(worker.env["HOTBOARD_KAFKA"]), topic, events, rate=3000)
    feeder.start()
    ports = [local.master_of_slot(board_slot(b)).port for b in PLAIN]
    victim = next(m for m in local.masters() if m.port == max(set(ports), key=ports.count))
    flushed = worker.wait_metric("hotboard_windows_total", 2, result="flushed")
    worker.wait_metric("hotboard_windows_total", flushed + 1, result="flushed")
    try:
        local.kill_master(victim)
        assert feeder.is_alive(), "the events ran out before the kill: the test would prove nothing"
        # the promoted replica has no replica of its own: windows stay applied there, their checkpoints held
        worker.wait_metric("hotboard_replica_acks_short_total", 1)
    finally:
        local.revive(victim.port)  # it rejoins as the new master's replica: WAIT is answered again
    feeder.finish()
    wait_exact(seed, reference(events), read=read_cluster)


def test_a_live_slot_migration_and_a_failover_while_events_flow_stay_exact(
    topic_factory: Callable[..., str], redis_cluster: TestCluster, spawn: Spawn
) -> None:
    """Move the slot of a live board to another master key by key (ASK, TRYAGAIN, then MOVED), then fail a
    master over to its replica; the boards stay exact, and the read API from masters and from replicas
    answers the reference ranking."""
    local = redis_cluster.faults()
    seed = redis_cluster.seed
    declare(seed)
    topic = topic_factory(4)
    events = cluster_events(30_000, seed=3)
    expected = reference(events)
    worker = spawn(seed, topic, "w", extra_env=CLUSTER_ENV)
    worker.wait_ready()
    feeder = Feeder(str(worker.env["HOTBOARD_KAFKA"]), topic, events, rate=3000)
    feeder.start()
    worker.wait_metric("hotboard_windows_total", 2, result="flushed")
    slot = board_slot("c-dense")
    source = local.master_of_slot(slot)
    target = next(m for m in local.masters() if m.node_id != source.node_id)
    # while the board's keys are split over two masters its flushes meet TRYAGAIN: the window waits for the move
    failed = worker.metric("hotboard_windows_total", result="failed")
    split = lambda: _met(worker.wait_metric("hotboard_windows_total", failed + 1, result="failed"))  # noqa: E731
    local.migrate_slot(slot, target, split)
    assert local.master_of_slot(slot).node_id == target.node_id
    other = next(m for m in local.masters() if m.node_id not in (source.node_id, target.node_id))
    local.failover(other)
    assert feeder.is_alive(), "the events ran out before the faults: the test would prove nothing"
    feeder.finish()
    wait_exact(seed, expected, read=read_cluster)
    asyncio.run(_api_matches(seed, expected))


def _met(_: float) -> None:
    """A flush met the slot split over two masters."""


API_BOARDS = (("c-0", "shared"), ("c-dense", "dense"), ("c-best", "shared"))


async def _api_matches(seed: str, expected: Totals, boards: Sequence[tuple[str, str]] = API_BOARDS) -> None:
    """The read API's top of each (board, ties), from masters and from replicas, is the reference ranking."""
    for read_from in ("master", "replica"):
        settings = ApiSettings(redis=seed, redis_cluster=True, api_read_from=read_from)
        async with asgi_client(create_app(settings)) as client:
            for board, ties in boards:
                want = reference_ranking(expected[board], ties=ties)
                got: list[tuple[int, str, int]] = []
                for _ in range(100):  # a replica may trail its master by a moment
                    body = (await client.get(f"/v1/boards/{board}/top", params={"limit": 1000})).json()
                    got = [(e["rank"], e["player"], e["score"]) for e in body["entries"]]
                    if got == want:
                        break
                    await asyncio.sleep(0.05)
                assert got == want, (read_from, board)


def test_boards_delete_and_erase_on_the_cluster_while_events_flow(
    topic_factory: Callable[..., str], redis_cluster: TestCluster, spawn: Spawn
) -> None:
    """The delete's one-slot script, then the board off the index (its own slot); the erasure waits
    for the checkpoints. A deleted board equals the events after its delete point, an erased player is gone,
    the index lists the board written again, and every other board is exact."""
    seed = redis_cluster.seed
    topic = topic_factory(4)
    plain = PLAIN[:8]
    rng = random.Random(4)
    events = [Event(plain[i % len(plain)], f"p{rng.randrange(30)}", rng.randrange(1, 9), None) for i in range(24_000)]
    gone = [Event("c-1", "gone", 1000 + i, None) for i in range(20)]
    worker = spawn(seed, topic, "w", extra_env=CLUSTER_ENV)
    worker.wait_ready()
    kafka = str(worker.env["HOTBOARD_KAFKA"])
    feeder = Feeder(kafka, topic, events, rate=2000)
    feeder.start()
    worker.wait_metric("hotboard_windows_total", 3, result="flushed")
    asyncio.run(publish(kafka, topic, gone))
    erased = hotboard("boards", "erase", "c-1", "gone", "--json", env_of=worker)
    assert erased.returncode == 0, erased.stderr
    assert json.loads(erased.stdout)["outcome"] == "erased"
    done = hotboard("boards", "delete", "c-0", "--json", env_of=worker)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    point = {int(p): o for p, o in answer["delete_point"].items()}
    assert answer["outcome"] == "deleted" and min(point.values()) >= 0
    assert feeder.is_alive(), "the removals must land while events still flow"
    feeder.finish()

    def counts(e: Event, partition: int, offset: int) -> bool:
        return e.player != "gone" and (e.board != "c-0" or offset > point[partition])

    expected = topic_totals(kafka, topic, len(events) + len(gone), counts)
    assert 0 < sum(expected["c-0"].values()) < sum(e.delta or 0 for e in events if e.board == "c-0")
    wait_exact(seed, expected, read=read_cluster)
    r = sync_client(seed)
    try:
        assert r.zscore(keys.board_key("c-1"), "gone") is None
        assert r.zscore(keys.BOARD_INDEX_KEY, "c-0") is not None, "written again after its deletion: listed again"
    finally:
        r.close()


def test_a_zombie_worker_on_the_cluster_is_fenced(
    topic_factory: Callable[..., str], redis_cluster: TestCluster, spawn: Spawn
) -> None:
    """A worker frozen (SIGSTOP) with a window pending past its session timeout: the heir takes every partition
    and applies the same events on every master; the zombie, woken, flushes what it held with the watermarks
    it knew. Its scripts are refused on each master, and the totals exact."""
    seed = redis_cluster.seed
    declare(seed)
    topic = topic_factory(4)
    events = cluster_events(45_000, seed=6)
    env = {**CLUSTER_ENV, "HOTBOARD_REDIS_TIMEOUT_S": "60"}
    zombie = spawn(seed, topic, "zombie", window_ms=500, extra_env=env)
    zombie.wait_ready()
    feeder = Feeder(str(zombie.env["HOTBOARD_KAFKA"]), topic, events, rate=3000)
    feeder.start()
    zombie.wait_metric("hotboard_windows_total", 2, result="flushed")
    zombie.signal(signal.SIGSTOP)
    try:
        heir = spawn(seed, topic, "heir", extra_env=CLUSTER_ENV)
        heir.wait_ready()  # after the zombie's session timeout: every partition is the heir's
        flushed = heir.metric("hotboard_windows_total", result="flushed")
        heir.wait_metric("hotboard_windows_total", flushed + 2, result="flushed")
        assert feeder.is_alive(), "the events ran out: the heir's flushes may not have moved the watermarks"
    finally:
        zombie.signal(signal.SIGCONT)
    zombie.wait_metric("hotboard_windows_total", 1, result="fenced")
    feeder.finish()
    wait_exact(seed, reference(events), read=read_cluster)


def test_removals_on_the_cluster_wait_for_the_board_masters_replica(
    kafka: str, topic_factory: Callable[..., str], redis_cluster: TestCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """``boards erase`` and ``delete`` end like a window: WAIT on the board's master for its replica. With that
    replica frozen (SIGSTOP) each is applied on the master but not confirmed: exit 3, saying a failover could
    undo it; once the replica is back a rerun confirms it, and the replica holds the deletion."""
    from cli.main import main

    local = redis_cluster.faults()
    master = local.master_of_slot(board_slot("c-0"))
    replica = local.replica_of(master)
    seed = f"redis://127.0.0.1:{master.port}"  # not the frozen node: a seed that never answers stalls the client
    topic = topic_factory(2)
    common = ["--redis", seed, "--redis-cluster", "--kafka", kafka, "--topic", topic]
    assert main(["boards", "create", "c-0", "--redis", seed, "--redis-cluster"]) == 0
    with local.client(master.port) as m:
        m.zadd(keys.board_key("c-0"), {"p": 5, "q": 3})
    capsys.readouterr()
    frozen = local.servers[replica.port].proc
    assert frozen is not None
    frozen.send_signal(signal.SIGSTOP)
    try:
        for argv in (["erase", "c-0", "p"], ["delete", "c-0"]):
            assert main(["boards", *argv, *common, "--replica-ack-timeout-ms", "300"]) == 3, argv
            out, err = capsys.readouterr()
            assert out == "" and "confirmed on 0 replicas, fewer than 1" in err and err.count("\n") == 1, err
        with local.client(master.port) as m:  # applied on the master all the same
            assert m.exists(keys.board_key("c-0"), keys.def_key("c-0")) == 0
            assert m.hget(keys.applied_key("c-0"), keys.APPLIED_DELETED_VERSION) is not None
    finally:
        frozen.send_signal(signal.SIGCONT)
    local.wait_healthy()
    assert main(["boards", "delete", "c-0", *common]) == 1  # confirmed now; the board was deleted already
    assert "deleted already" in capsys.readouterr().err
    with local.client(replica.port) as r:  # WAIT returned: the replica has it, no polling needed
        r.execute_command("READONLY")
        assert r.exists(keys.board_key("c-0"), keys.def_key("c-0")) == 0
        assert r.hget(keys.applied_key("c-0"), keys.APPLIED_DELETED_VERSION) is not None
