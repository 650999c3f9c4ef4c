"""The fleet against a real Kafka-protocol broker and a real redis-server: every board must end exactly equal
to the sum of its events through crashes, rebalances, zombies and Redis outages."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from cli.devstack import RedisServer
from hotboard import lua
from hotboard.script import digest
from tests.integration.conftest import Spawn
from tests.integration.faults import TcpProxy
from tests.integration.harness import (
    Feeder,
    kill_while_feeding,
    seasonal_mix,
    skewed_events,
    totals_of,
    wait_exact,
    zincrby_calls,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("workers", [1, 3])
def test_many_skewed_events_are_exact_and_writes_collapse(
    workers: int, kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    topic = topic_factory(8)
    events = skewed_events(100_000, players=20_000, boards=4, seed=workers)
    fleet = [spawn(redis_server.url, topic) for _ in range(workers)]
    before = zincrby_calls(redis_server.url)
    Feeder(kafka, topic, events, rate=0).finish()
    wait_exact(redis_server.url, totals_of(events), timeout_s=90)
    writes = zincrby_calls(redis_server.url) - before
    assert 0 < writes < len(events) / 4, f"{writes} sorted-set writes for {len(events)} events"
    for w in fleet:
        rc, took = w.terminate()
        assert rc == 0, w.log()
        assert took < 10


def test_kill_9_three_times_while_events_flow(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    topic = topic_factory(8)
    # one board that never resets and two weekly ones whose events straddle this week's start
    events, expected = seasonal_mix(redis_server.url, skewed_events(120_000, seed=7), seed=7)
    victim = spawn(redis_server.url, topic, "victim")
    steady = spawn(redis_server.url, topic, "steady")
    feeder = Feeder(kafka, topic, events, rate=3000)  # 40 s of events: every kill lands while they flow
    feeder.start()
    kill_while_feeding(victim, feeder, 3)
    feeder.finish()
    wait_exact(redis_server.url, expected, timeout_s=90)
    # each kill moved partitions: the steady member saw the fleet change every time (join, crash, join...)
    assert steady.metric("hotboard_rebalances_total") >= 4


def test_rebalance_join_then_leave(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    topic = topic_factory(8)
    events = skewed_events(50_000, seed=11)
    first = spawn(redis_server.url, topic, "first")
    feeder = Feeder(kafka, topic, events, rate=2500)
    feeder.start()
    first.wait_metric("hotboard_windows_total", 2, result="flushed")
    second = spawn(redis_server.url, topic, "second")
    second.wait_ready()
    first.wait_metric("hotboard_rebalances_total", 2)  # it gave partitions to the newcomer
    rc, took = first.terminate()
    assert rc == 0, first.log()
    assert took < 10, f"SIGTERM drain took {took:.1f}s"
    second.wait_metric("hotboard_rebalances_total", 2)  # and the newcomer took them over
    feeder.finish()
    wait_exact(redis_server.url, totals_of(events), timeout_s=90)


def test_zombie_is_fenced(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    """Deterministic: the zombie's flush is caught in the network (the proxy holds it) and the zombie frozen
    past its session timeout; the heir takes every partition and applies the same events; then the zombie's
    stale flush arrives and the zombie wakes up. Its scripts must be refused, and the totals exact."""
    topic = topic_factory(8)
    # 30 s of events (they still flow once the heir owns everything), two weekly boards straddling this week
    events, expected = seasonal_mix(redis_server.url, skewed_events(90_000, seed=13), seed=13)
    with TcpProxy(redis_server.port) as proxy:
        zombie = spawn(proxy.url, topic, "zombie", window_ms=500, extra_env={"HOTBOARD_REDIS_TIMEOUT_S": "60"})
        zombie.wait_ready()
        feeder = Feeder(kafka, topic, events, rate=3000)
        feeder.start()
        zombie.wait_metric("hotboard_windows_total", 2, result="flushed")
        proxy.hold()
        deadline = time.monotonic() + 30
        flushes = [digest(lua.FLUSH).encode(), digest(lua.APPLY).encode()]  # not the lookups, not the checkpoints
        while not any(sha in proxy.held() for sha in flushes):  # a flush with pending work is on its way
            assert time.monotonic() < deadline, "the zombie never started a flush"
            time.sleep(0.05)
        zombie.signal(signal.SIGSTOP)
        heir = spawn(redis_server.url, topic, "heir")
        heir.wait_ready()  # after the zombie's session timeout: every partition is the heir's
        flushed = heir.metric("hotboard_windows_total", result="flushed")
        heir.wait_metric("hotboard_windows_total", flushed + 2, result="flushed")
        assert feeder.is_alive(), "the events ran out: the heir's flushes may not have moved the watermarks"
        proxy.release()  # the stale flush reaches Redis now
        zombie.signal(signal.SIGCONT)
        zombie.wait_metric("hotboard_windows_total", 1, result="fenced")
        feeder.finish()
        wait_exact(redis_server.url, expected, timeout_s=90)
        assert zombie.metric("hotboard_resyncs_total", reason="fenced") >= 1


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_redis_outage_holds_and_catches_up(
    how: str, kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    topic = topic_factory(8)
    events, expected = seasonal_mix(redis_server.url, skewed_events(40_000, seed=17), seed=17)
    worker = spawn(redis_server.url, topic)
    feeder = Feeder(kafka, topic, events, rate=2500)
    feeder.start()
    worker.wait_metric("hotboard_windows_total", 2, result="flushed")
    if how == "sigkill":
        redis_server.kill()  # AOF everysec: up to a second of acknowledged writes may be gone
    else:
        redis_server.stop()
    worker.wait_metric("hotboard_windows_total", 2, result="failed")  # the outage is felt, pending work held
    redis_server.start()
    feeder.finish()
    wait_exact(redis_server.url, expected, timeout_s=90)
    assert worker.proc is not None and worker.proc.poll() is None, "worker must ride out the outage"
    if how == "sigkill":
        assert worker.metric("hotboard_resyncs_total", reason="redis_restart") >= 1


def test_backpressure_bounds_memory_while_redis_is_down(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    topic = topic_factory(8)
    events = skewed_events(30_000, players=20_000, seed=19)
    worker = spawn(redis_server.url, topic, extra_env={"HOTBOARD_MAX_PENDING_ENTRIES": "500"})
    feeder = Feeder(kafka, topic, events, rate=3000)
    feeder.start()
    worker.wait_metric("hotboard_windows_total", 2, result="flushed")
    redis_server.stop()
    worker.wait_metric("hotboard_backpressure_paused", 1)  # far more than 500 distinct pairs arrived
    assert worker.metric("hotboard_pending_entries") <= 500 + 5000  # the bound plus at most one fetch
    redis_server.start()
    feeder.finish()
    wait_exact(redis_server.url, totals_of(events), timeout_s=90)
    assert worker.metric("hotboard_backpressure_paused") == 0
