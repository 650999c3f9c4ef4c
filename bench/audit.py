"""Audit benchmark: wall time of ``hotboard audit --board bench`` on one board of many players, with the archive
caught up (nothing to read back from Kafka) and with the archiver stopped while a tail of events landed in Redis
only (that tail read back from the topic and folded).

A private broker and redis-server on free loopback ports, a fresh database on the machine's PostgreSQL
(HOTBOARD_TEST_POSTGRES overrides it); ``hotboard worker`` and ``hotboard archiver`` as processes.

    python -m bench.audit [--players 100000] [--events 300000] [--tail 50000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg
import orjson
import redis
from aiokafka import AIOKafkaProducer

from cli.devstack import KafkaBroker, RedisServer, create_topic
from cli.process import Child, free_port
from hotboard import keys

SERVER = os.environ.get("HOTBOARD_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
BOARD = "bench"


async def produce(kafka: str, topic: str, players: int, count: int, start: int) -> int:
    """``count`` incr events over ``players`` players; returns their summed deltas."""
    producer = AIOKafkaProducer(bootstrap_servers=kafka, acks="all", enable_idempotence=False, linger_ms=5)
    await producer.start()
    total = 0
    try:
        for lo in range(start, start + count, 5000):
            futures = []
            for i in range(lo, min(lo + 5000, start + count)):
                delta = 1 + i % 7
                total += delta
                player = f"p-{i % players}"
                event = {"board": BOARD, "player": player, "delta": delta}
                futures.append(await producer.send(topic, orjson.dumps(event), key=player.encode()))
            await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return total


async def archived(url: str) -> tuple[int, int]:
    conn = await asyncpg.connect(url)
    try:
        row = await conn.fetchrow("SELECT count(*), coalesce(sum(score), 0) FROM hb_scores WHERE board = $1", BOARD)
        return int(row[0]), int(row[1])
    except asyncpg.UndefinedTableError:
        return 0, 0
    finally:
        await conn.close()


def wait(check: object, what: str, timeout_s: float = 600.0) -> None:
    """Poll ``check()`` every half second until it holds."""
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.5)


def redis_total(url: str) -> tuple[int, int]:
    r = redis.Redis.from_url(url)
    try:
        scores: list[tuple[bytes, float]] = r.zrange(keys.board_key(BOARD), 0, -1, withscores=True)  # type: ignore[assignment]
        return len(scores), int(sum(s for _, s in scores))
    finally:
        r.close()


def timed(env: dict[str, str], argv: list[str], runs: int = 3) -> tuple[float, list[str]]:
    """Median wall time of ``hotboard <argv>`` as a process (its start included), and the last run's output lines."""
    times, lines = [], []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "cli.main", *argv], env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - started)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        lines = done.stdout.strip().splitlines()
    return statistics.median(times), lines


def timed_audit(env: dict[str, str], runs: int = 3) -> tuple[float, str]:
    median, lines = timed(env, ["audit", "--board", BOARD], runs)
    return median, lines[-2]


def run(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-audit-"))
    broker, rs = KafkaBroker(free_port(), tmp), RedisServer(free_port(), tmp / "redis")
    (tmp / "redis").mkdir()
    database = f"hb_bench_{uuid.uuid4().hex[:8]}"
    server = SERVER.rsplit("/", 1)[0]
    asyncio.run(admin(SERVER, f'CREATE DATABASE "{database}"'))
    pg = f"{server}/{database}"
    broker.start()
    rs.start()
    try:
        asyncio.run(create_topic(broker.bootstrap, "bench", 8))
        asyncio.run(create_topic(broker.bootstrap, "bench.dlq", 1))
        env = {
            **os.environ,
            "HOTBOARD_REDIS": rs.url,
            "HOTBOARD_KAFKA": broker.bootstrap,
            "HOTBOARD_TOPIC": "bench",
            "HOTBOARD_POSTGRES": pg,
            "HOTBOARD_METRICS_PORT": "0",
            "HOTBOARD_SESSION_TIMEOUT_MS": "6000",
        }
        worker = Child("worker", [sys.executable, "-m", "cli.main", "worker"], log_path=tmp / "worker.log", env=env)
        archiver = Child("archiver", [sys.executable, "-m", "cli.main", "archiver"], log_path=tmp / "arch.log", env=env)
        with worker.start():
            with archiver.start():
                total = asyncio.run(produce(broker.bootstrap, "bench", args.players, args.events, 0))
                want = (args.players, total)
                wait(lambda: redis_total(rs.url) == want, "Redis")
                wait(lambda: asyncio.run(archived(pg)) == want, "the archive")
            caught_up, line = timed_audit(env)
            print(f"{args.players:,} players, archive caught up: {caught_up:.2f} s  ({line})")
            tail = asyncio.run(produce(broker.bootstrap, "bench", args.players, args.tail, args.events))
            wait(lambda: redis_total(rs.url) == (args.players, total + tail), "Redis's tail")
            behind, line = timed_audit(env)
            print(f"{args.players:,} players, {args.tail:,} events read back: {behind:.2f} s  ({line})")
    finally:
        rs.stop()
        broker.stop()
        asyncio.run(admin(SERVER, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))


async def admin(url: str, statement: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--players", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--tail", type=int, default=50_000)
    run(parser.parse_args())


if __name__ == "__main__":
    main()
