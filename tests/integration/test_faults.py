"""The exactly-once guarantee under the faults an operations team would inject on purpose. Each test injects one
fault through real processes and real servers and checks the boards against totals computed from the events
themselves (or that the worker halts, loudly, where history is gone)."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Sequence

import orjson
import pytest
import redis
from aiokafka import AIOKafkaConsumer, TopicPartition
from redis.asyncio import Redis

from cli.devstack import RedisServer
from cli.loadgen import publish
from flusher.batch import BoardBatch, BoardResult, ExpectedWatermark
from hotboard import keys
from hotboard.codec import Event
from ingest import dlq
from ingest.kafka_config import consumer_config
from ingest.partitions import HaltReason
from ingest.settings import WorkerSettings
from ingest.worker import Worker
from tests.integration.conftest import Spawn
from tests.integration.faults import TcpProxy, send_raw
from tests.integration.harness import (
    Feeder,
    WorkerProcess,
    checkpoint,
    log_starts_at,
    read_boards,
    read_topic,
    run_worker,
    sample,
    skewed_events,
    totals_of,
    wait_exact,
    wait_while_running,
    worker_events,
    worker_settings,
)

pytestmark = pytest.mark.integration


# ---------------------------------------------------------------- 1. a rebalance during the flush backoff


def _flushing_then_cut(
    spawn: Spawn, kafka: str, proxy: TcpProxy, topic: str, events: Sequence[Event], *, backoff_max_s: int
) -> tuple[WorkerProcess, Feeder]:
    """A worker behind ``proxy`` flushing while ``events`` flow at 2,500/s, then cut off from Redis."""
    first = spawn(proxy.url, topic, "first", extra_env={"HOTBOARD_BACKOFF_MAX_S": str(backoff_max_s)})
    first.wait_ready()
    feeder = Feeder(kafka, topic, events, rate=2500)
    feeder.start()
    first.wait_metric("hotboard_windows_total", 2, result="flushed")
    proxy.cut()
    return first, feeder


def test_rebalance_while_cut_off_from_redis_counts_nothing_twice(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    """A network cut between worker and Redis (Redis keeps running, same run_id), then a second member joins:
    the first worker's revoked partitions must leave no pending state behind in either window."""
    topic = topic_factory(8)
    events = skewed_events(30_000, seed=23)
    with TcpProxy(redis_server.port) as proxy:
        first, feeder = _flushing_then_cut(spawn, kafka, proxy, topic, events, backoff_max_s=1)
        first.wait_metric("hotboard_windows_total", 1, result="failed")
        folded = first.metric("hotboard_events_total", result="applied")
        first.wait_metric("hotboard_events_total", folded + 2000, result="applied")  # pending while cut off
        second = spawn(redis_server.url, topic, "second")
        second.wait_ready()
        first.wait_metric("hotboard_rebalances_total", 2)
        proxy.restore()
        feeder.finish()
        wait_exact(redis_server.url, totals_of(events), timeout_s=90)


@pytest.mark.parametrize("joiner", ["same_topic", "other_topic"])
def test_a_rebalance_right_after_redis_heals_during_the_backoff(
    joiner: str, kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    """Heal a cut while the worker sleeps in a long backoff, then rebalance: ``on_revoked``'s flush succeeds, and
    must take the active window with the sealed one. When the same partitions come back (``other_topic``: a
    member of the same group on another topic joins, so the worker keeps every partition) they are fetched and
    folded again and no revoked partition fences the flush: a window kept across would count twice."""
    topic = topic_factory(8)
    events = skewed_events(30_000, seed=23)
    with TcpProxy(redis_server.port) as proxy:
        first, feeder = _flushing_then_cut(spawn, kafka, proxy, topic, events, backoff_max_s=20)
        first.wait_metric("hotboard_windows_total", 8, result="failed", timeout_s=90)  # next backoff: 10-20 s
        proxy.restore()
        second = spawn(redis_server.url, topic if joiner == "same_topic" else topic_factory(1), "second")
        if joiner == "same_topic":
            second.wait_ready()
        first.wait_metric("hotboard_rebalances_total", 2)
        feeder.finish()
        wait_exact(redis_server.url, totals_of(events), timeout_s=90)


# ---------------------------------------------------------------- 2. the resume point is a per-partition checkpoint


async def test_a_board_whose_first_batch_was_lost_is_replayed(
    kafka: str, topic_factory: Callable[..., str], redis_url: str
) -> None:
    """A worker dies after the first board's script of a window reached Redis and before the second's: the
    second board has no watermark on the partition, and must not be skipped by the next owner."""
    topic = topic_factory(1)
    events = worker_events("a", 5, 50) + worker_events("b", 5, 500)
    await publish(kafka, topic, events)
    group = f"g-{topic}"

    async def crash_after_first_batch(worker: Worker) -> None:
        real = worker._sink.flush

        async def flush(batches: Sequence[BoardBatch], expected: ExpectedWatermark) -> list[BoardResult]:
            await real(batches[:1], expected)
            raise RuntimeError("injected: the worker dies mid-pipeline")

        worker._sink.flush = flush  # type: ignore[method-assign]  # fault injection

    settings = worker_settings(kafka, redis_url, topic, group, window_ms=3000)
    with pytest.raises(RuntimeError, match="injected"):
        await run_worker(settings, lambda w: False, "the injected crash", crash_after_first_batch)
    half = read_boards(redis_url, ["a", "b"])
    assert sum(map(len, half.values())) == 5, f"exactly one board took the window: {half}"
    await run_worker(
        worker_settings(kafka, redis_url, topic, group),
        lambda w: read_boards(redis_url, ["a", "b"]) == totals_of(events),
        "exact boards",
    )


async def test_a_partition_without_checkpoint_starts_at_the_beginning_not_the_committed_offset(
    kafka: str, topic_factory: Callable[..., str], redis_url: str
) -> None:
    topic = topic_factory(1)
    events = worker_events("global", 7, 110)
    await publish(kafka, topic, events)
    group = f"g-{topic}"
    tp = TopicPartition(topic, 0)
    committer = AIOKafkaConsumer(bootstrap_servers=kafka, group_id=group, enable_auto_commit=False)
    await committer.start()
    try:
        committer.assign([tp])
        await committer.commit({tp: 100})  # an earlier run whose Redis writes are gone
    finally:
        await committer.stop()
    expected = totals_of(events)
    await run_worker(
        worker_settings(kafka, redis_url, topic, group),
        lambda w: read_boards(redis_url, ["global"]) == expected,
        "exact",
    )


# ---------------------------------------------------------------- 3. Redis lost data


def test_redis_emptied_while_running_is_rebuilt_from_the_log(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    """FLUSHALL (or an emptied volume, or no persistence) with the same run_id: the worker notices (its next
    compare-and-set fails) and, the log still starting at 0, replays it."""
    topic = topic_factory(4)
    events = skewed_events(20_000, seed=29)
    worker = spawn(redis_server.url, topic)
    worker.wait_ready()
    feeder = Feeder(kafka, topic, events, rate=4000)
    feeder.start()
    worker.wait_metric("hotboard_windows_total", 3, result="flushed")
    redis.Redis.from_url(redis_server.url).flushall()
    feeder.finish()
    wait_exact(redis_server.url, totals_of(events), timeout_s=90)
    assert (
        worker.metric("hotboard_resyncs_total", reason="fenced")
        + worker.metric("hotboard_resyncs_total", reason="checkpoint")
        >= 1
    )


async def test_history_gone_from_redis_and_kafka_halts_loudly(
    kafka: str, topic_factory: Callable[..., str], redis_url: str
) -> None:
    topic = topic_factory(2)
    events = worker_events("global", 9, 200)
    await publish(kafka, topic, events)
    group = f"g-{topic}"
    settings = worker_settings(kafka, redis_url, topic, group)
    await run_worker(settings, lambda w: read_boards(redis_url, ["global"]) == totals_of(events), "the first pass")
    await Redis.from_url(redis_url).flushall()  # Redis comes back empty; the log has been trimmed meanwhile

    async def trimmed(worker: Worker) -> None:
        await log_starts_at(worker, 60)

    worker = await run_worker(settings, lambda w: len(w.halted) == 2, "both partitions to halt", trimmed)
    assert {h.reason for h in worker.halted.values()} == {HaltReason.REDIS_LOST}
    assert sample(worker, "hotboard_redis_data_loss") == 2 and not worker.ready
    assert read_boards(redis_url, ["global"]) == {"global": {}}, "a halted partition applies nothing"


async def test_a_resume_point_deleted_by_retention_halts_and_counts_the_loss(
    kafka: str, topic_factory: Callable[..., str], redis_url: str
) -> None:
    topic = topic_factory(1)
    await publish(kafka, topic, worker_events("global", 3, 100))
    group = f"g-{topic}"
    settings = worker_settings(kafka, redis_url, topic, group)
    await run_worker(
        settings,
        lambda w: all(st.checkpoint == 99 for st in w._assignment.parts.values()) and bool(w._assignment.parts),
        "checkpoint 99",
    )
    await publish(kafka, topic, worker_events("global", 3, 100, start=100))

    async def trimmed(worker: Worker) -> None:
        await log_starts_at(worker, 150)

    worker = await run_worker(settings, lambda w: bool(w.halted), "the halt", trimmed)
    assert [h.reason for h in worker.halted.values()] == [HaltReason.RETENTION_LOST]
    assert sample(worker, "hotboard_records_lost_total") == 50


async def test_flushall_does_not_lose_a_board_not_looked_up_since_positioning(
    kafka: str, topic_factory: Callable[..., str], redis_url: str
) -> None:
    """quiet@0, busy@1..100 applied; the worker restarts (watermarks are looked up lazily: none known); FLUSHALL;
    quiet@101. The lookup answers 'no watermark' from the emptied Redis: quiet's batch must not apply (and write
    watermark 101) before the checkpoint CAS notices the loss, or the replay from 0 skips quiet@0 under it."""
    topic = topic_factory(1)
    events = [Event("quiet", "q", 5, None)] + [Event("busy", f"b{i % 7}", 1, None) for i in range(100)]
    await publish(kafka, topic, events)
    group = f"g-{topic}"
    settings = worker_settings(kafka, redis_url, topic, group)
    await run_worker(settings, lambda w: checkpoint(redis_url, topic) == 100, "checkpoint 100")
    more = [Event("quiet", "q", 7, None)]
    async with Worker(settings, handle_signals=False) as worker:
        task = asyncio.create_task(worker.run())
        try:
            await wait_while_running(
                lambda: worker.ready and worker._assignment.parts[0].checkpoint == 100, task, "positioned"
            )
            await Redis.from_url(redis_url).flushall()
            await publish(kafka, topic, more)
            await wait_while_running(
                lambda: checkpoint(redis_url, topic) == 101, task, "checkpoint 101 after the replay"
            )
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)
    got = read_boards(redis_url, ["quiet", "busy"])
    assert got == totals_of(events + more), got


# ---------------------------------------------------------------- 4. checkpoints tied to their log


def test_checkpoints_beyond_the_log_end_halt_instead_of_skipping(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    """A topic deleted and re-created under the same name: Redis still holds the old log's positions."""
    topic = topic_factory(1)
    r = redis.Redis.from_url(redis_server.url)
    r.hset(keys.checkpoint_key(topic), "0", 1000)
    r.hset(keys.applied_key("global"), keys.watermark_field(topic, 0), 1000)
    r.zadd(keys.BOARD_INDEX_KEY, {"global": 0})
    Feeder(kafka, topic, worker_events("global", 5, 100), rate=0).finish()
    worker = spawn(redis_server.url, topic)
    worker.wait_metric("hotboard_redis_data_loss", 1)
    assert worker.status("/readyz") == 503
    assert read_boards(redis_server.url, ["global"]) == {"global": {}}


# ---------------------------------------------------------------- 5. a quiet board does not pin the replay


def test_a_board_fed_once_long_ago_does_not_pin_the_replay(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    topic = topic_factory(1)
    events = worker_events("quiet", 1, 1) + worker_events("busy", 1000, 120_000)
    Feeder(kafka, topic, events, rate=0).finish()
    first = spawn(redis_server.url, topic, "first")
    wait_exact(redis_server.url, totals_of(events), timeout_s=120)
    r = redis.Redis.from_url(redis_server.url)
    deadline = time.monotonic() + 30
    while r.hget(keys.checkpoint_key(topic), "0") != str(len(events) - 1).encode():
        assert time.monotonic() < deadline, "the checkpoint never reached the last offset"
        time.sleep(0.1)
    first.kill()
    again = spawn(redis_server.url, topic, "again")
    again.wait_ready()
    more = worker_events("busy", 1000, 10, start=7)
    Feeder(kafka, topic, more, rate=0).finish()
    wait_exact(redis_server.url, totals_of(events + more), timeout_s=60)
    assert again.metric("hotboard_events_total", result="duplicate") < 1200


# ---------------------------------------------------------------- 7. committed reads only


def test_the_worker_reads_committed_records_only() -> None:
    """An aborted transaction must not be counted: the configuration both the worker and the benchmark use
    (``test_transactions.py`` makes the broker's answers transactional and checks the totals)."""
    config = consumer_config(WorkerSettings())
    assert config["isolation_level"] == "read_committed"
    assert config["auto_offset_reset"] == "none"


# ---------------------------------------------------------------- 8 and 9. no single record stops a worker


async def test_poison_neither_stalls_nor_crashes_a_worker(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    topic = topic_factory(1)
    good = [worker_events("global", 4, 20, start=i * 20) for i in range(5)]
    deep = b'{"player": "p", "delta": 1, "op": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    huge = b'{"player": "p", "delta": 1, "pad": "' + b"x" * (1 << 20) + b'"}'

    def raw(events: list[Event]) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]]:
        return [(e.player.encode(), orjson.dumps({"player": e.player, "delta": e.delta}), []) for e in events]

    await send_raw(kafka, topic, 0, [*raw(good[0]), (b"k", deep, [])])
    await send_raw(kafka, topic, 0, [*raw(good[1]), (None, None, [])])
    await send_raw(kafka, topic, 0, [*raw(good[2]), (b"k", huge, [("trace", b"t" * 100)])])
    await send_raw(
        kafka,
        topic,
        0,
        [*raw(good[3]), (b"k", b'{"player":"p","delta":1}', [("XX", b"v")])],
        patch=(b"XX", b"\xff\xfe"),
    )
    await send_raw(kafka, topic, 0, raw(good[4]))
    worker = spawn(redis_server.url, topic)
    everything = [e for chunk in good for e in chunk]
    wait_exact(redis_server.url, totals_of(everything), timeout_s=90)
    worker.wait_metric("hotboard_events_total", 4, result="invalid")
    letters = await read_topic(kafka, f"{topic}.dlq", 4)
    reasons = {dict(r.headers)[dlq.ERROR_HEADER].decode().split(":")[0]: r for r in letters}
    assert sorted(reasons) == ["not_json", "too_large", "unreadable", "unsupported_op"], reasons
    null = dict(reasons["not_json"].headers)
    assert null[dlq.NULL_HEADER] == b"key,value"
    big = reasons["too_large"]
    big_headers = dict(big.headers)
    assert int(big_headers[dlq.VALUE_SIZE_HEADER]) == len(huge)
    assert big_headers[dlq.VALUE_SHA256_HEADER].decode() == hashlib.sha256(huge).hexdigest()
    assert big.value is not None and len(big.value) < 200_000 and big_headers["trace"] == b"t" * 100
    assert worker.status("/readyz") == 200 and worker.status("/healthz") == 200
    assert worker.proc is not None and worker.proc.poll() is None


def test_dead_letters_count_against_the_backpressure_bound(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    """A DLQ that refuses everything: letters wait in memory, so they count against the bound."""
    topic = topic_factory(1)
    bad = [(f"k{i}".encode(), b"not json") for i in range(3000)]
    Feeder(kafka, topic, bad, rate=0).finish()
    worker = spawn(
        redis_server.url,
        topic,
        extra_env={
            "HOTBOARD_DLQ_TOPIC": "no such topic!",
            "HOTBOARD_MAX_PENDING_ENTRIES": "300",
            "HOTBOARD_MAX_POLL_RECORDS": "100",
            "HOTBOARD_DLQ_SEND_TIMEOUT_S": "0.5",
        },
    )
    worker.wait_metric("hotboard_backpressure_paused", 1)
    worker.wait_metric("hotboard_dlq_failures_total", 1)
    pending = worker.metric("hotboard_pending_entries")
    assert 300 <= pending <= 300 + 100, pending
    assert worker.metric("hotboard_events_total", result="invalid") <= 400


# ---------------------------------------------------------------- 10. bounded work per script


def test_a_huge_window_is_flushed_as_short_scripts(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    topic = topic_factory(1)
    events = worker_events("global", 100_000, 100_000)
    r = redis.Redis.from_url(redis_server.url)
    r.config_set("slowlog-log-slower-than", 50_000)  # microseconds
    r.slowlog_reset()
    Feeder(kafka, topic, events, rate=0).finish()
    # 2,000 players a script: well inside 50 ms even on a loaded machine (the default, 4,000, takes 10-25 ms)
    spawn(redis_server.url, topic, window_ms=5000, extra_env={"HOTBOARD_MAX_SCRIPT_PLAYERS": "2000"})
    wait_exact(redis_server.url, totals_of(events), timeout_s=120)
    slow = [(e["duration"], e["command"][:40]) for e in r.slowlog_get(128) if e["command"].startswith(b"EVALSHA")]
    assert not slow, f"scripts over 50 ms: {slow}"


# ---------------------------------------------------------------- 11. totals beyond the exact range


async def test_totals_saturate_and_the_top_page_still_answers(
    kafka: str, topic_factory: Callable[..., str], redis_url: str
) -> None:
    topic = topic_factory(1)
    top = 2**53 - 1
    events = [Event("global", "whale", top, None)] * 2049 + [Event("global", "krill", -top, None)] * 3
    await publish(kafka, topic, events)
    worker = await run_worker(
        worker_settings(kafka, redis_url, topic, f"g-{topic}"),
        lambda w: read_boards(redis_url, ["global"]) == {"global": {"whale": top, "krill": -top}},
        "saturated totals",
    )
    assert sample(worker, "hotboard_saturated_total") >= 2
    client = Redis.from_url(redis_url)
    try:
        scores = await client.zrange(keys.board_key("global"), 0, -1, withscores=True)
    finally:
        await client.aclose()
    assert all(abs(float(row[1])) <= top for row in scores)
