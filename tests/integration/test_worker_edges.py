"""Poison records, an unreachable Kafka, and the dev stack's taken port: the edges of the worker's contract."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from cli.devstack import RedisServer, free_port
from hotboard import keys
from hotboard.codec import Event, encode
from ingest.dlq import ERROR_HEADER, SOURCE_HEADER
from tests.integration.conftest import Spawn
from tests.integration.harness import (
    JUNK_DEFINITIONS,
    Feeder,
    WorkerProcess,
    read_topic,
    seed_junk_definitions,
    skewed_events,
    totals_of,
    wait_exact,
)

pytestmark = pytest.mark.integration

POISON: list[tuple[bytes, str]] = [
    (b"not json at all", "not_json"),
    (b"[1, 2, 3]", "not_object"),
    (b'{"board": "global", "delta": 5}', "missing_field"),
    (b'{"player": "p-1", "delta": 1.5}', "bad_type"),
    (b'{"player": "p-1", "delta": true}', "bad_type"),
    (b'{"player": "p-1", "delta": "7"}', "bad_type"),
    (b'{"player": "p-1", "delta": 9007199254740992}', "out_of_range"),
    (b'{"player": "p-1", "delta": 1, "board": "no spaces allowed"}', "bad_value"),
    (b'{"player": "", "delta": 1}', "bad_value"),
    (b'{"player": "a\\u0007b", "delta": 1}', "bad_value"),
    (b'{"player": "p-1", "delta": 1, "op": "set"}', "missing_field"),
    (b'{"player": "p-1", "delta": 1, "op": "max"}', "unsupported_op"),
    (b'{"player": "p-1", "op": "set", "score": -9007199254740992}', "out_of_range"),
    (b'{"player": "p-1", "delta": 1, "meta": [1]}', "bad_type"),
    # 253 levels in 512 bytes: orjson encodes it alone, but no API answer holding it
    (b'{"player": "p-1", "delta": 1, "meta": {"a": ' + b"[" * 252 + b"]" * 252 + b"}}", "too_large"),
    (b'{"player": "p-2", "op": "set", "score": 3, "meta": ' + b'{"b":' * 33 + b"1" + b"}" * 34, "too_large"),
    (b'{"player": "p-1", "score": 5}', "missing_field"),  # the board's operator (incr) needs delta: found at fold time
    (b'{"player": "\xff\xfe", "delta": 1}', "bad_utf8"),
    (b'{"player": "p-1", "delta": 1, "pad": "' + b"x" * (64 * 1024) + b'"}', "too_large"),
]


def test_poison_goes_to_dlq_with_reasons_and_good_events_count(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, tmp_path: Path
) -> None:
    topic = topic_factory(4)
    good = skewed_events(20_000, players=500, boards=2, seed=21)
    stream: list[tuple[bytes, bytes]] = [(e.player.encode(), encode(e)) for e in good]
    rng = random.Random(21)
    for value, _ in POISON:
        stream.insert(rng.randrange(len(stream)), (b"poison-key", value))
    worker = WorkerProcess(
        kafka=kafka,
        redis_url=redis_server.url,
        topic=topic,
        group=f"g-{uuid.uuid4().hex[:8]}",
        log_dir=tmp_path,
        name="w",
    ).start()
    try:
        Feeder(kafka, topic, stream, rate=0).finish()
        wait_exact(redis_server.url, totals_of(good), timeout_s=60)
        dead = asyncio.run(read_topic(kafka, f"{topic}.dlq", len(POISON)))
        assert len(dead) == len(POISON)
        by_value = {}
        for rec in dead:
            headers = dict(rec.headers)
            assert rec.key == b"poison-key"
            src_topic, src_partition, src_offset = headers[SOURCE_HEADER].decode().rsplit(":", 2)
            assert src_topic == topic and int(src_partition) >= 0 and int(src_offset) >= 0
            by_value[rec.value] = headers[ERROR_HEADER].decode()
        for value, reason in POISON:
            assert by_value[value].startswith(reason + ":"), (value[:60], by_value[value])
        assert worker.proc is not None and worker.proc.poll() is None
    finally:
        worker.cleanup()


def test_a_definition_hotboard_did_not_write_dead_letters_its_events_across_restarts(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    """Each junk definition dead-letters its board's events as ``bad_definition`` (acknowledged like any invalid
    record: each once), the other boards count exactly, and a restarted worker reads the junk again and keeps
    going."""
    topic = topic_factory(2)
    seed_junk_definitions(redis_server.url)
    rounds = [skewed_events(2000, players=50, boards=2, seed=seed) for seed in (1, 2)]
    bad = [Event(board, f"p-{i}", 1, None) for board in JUNK_DEFINITIONS for i in range(3)]
    worker = spawn(redis_server.url, topic)
    for n, good in enumerate(rounds, start=1):
        worker.wait_ready()
        Feeder(kafka, topic, [*bad, *good], rate=0).finish()
        worker.wait_metric("hotboard_dlq_total", len(bad), reason="bad_definition", timeout_s=60)
        wait_exact(redis_server.url, totals_of(e for g in rounds[:n] for e in g), timeout_s=60)
        dead = asyncio.run(read_topic(kafka, f"{topic}.dlq", n * len(bad) + 1, timeout_s=3))
        assert len(dead) == n * len(bad)
        assert {dict(rec.headers)[ERROR_HEADER].decode().split(":")[0] for rec in dead} == {"bad_definition"}
        assert worker.proc is not None and worker.proc.poll() is None
        rc, _ = worker.terminate()
        assert rc == 0
        worker.start()
    assert all(not redis.Redis.from_url(redis_server.url).exists(keys.board_key(b)) for b in JUNK_DEFINITIONS)


def test_unreachable_kafka_exits_nonzero_with_a_clear_message(tmp_path: Path) -> None:
    closed = free_port()
    env = {**os.environ, "HOTBOARD_KAFKA_START_TIMEOUT_S": "3", "HOTBOARD_METRICS_PORT": "0"}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", "worker", "--kafka", f"127.0.0.1:{closed}"],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 3
    assert time.monotonic() - started < 30
    assert f"Kafka at 127.0.0.1:{closed} did not answer" in proc.stderr.decode()


def test_dev_refuses_a_taken_port_with_a_clear_error() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "cli.main", "dev", "--kafka-port", str(port), "--redis-port", str(free_port())],
            capture_output=True,
            timeout=60,
        )
    assert proc.returncode == 2
    assert f"port {port} on 127.0.0.1 is already in use" in proc.stderr.decode()
