"""Rebuild benchmark: wall time of ``hotboard rebuild --board bench`` (the log read back from offset 0, folded, the
board swapped in), side by side with a worker replaying the same log in place after a FLUSHALL.

A private broker and redis-server on free loopback ports; ``hotboard worker`` and ``hotboard rebuild`` as
processes, as an operator runs them.

    python -m bench.rebuild [--players 100000] [--events 300000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import redis

from bench.audit import produce, redis_total, timed, wait
from cli.devstack import KafkaBroker, RedisServer, create_topic
from cli.process import Child, free_port


def run(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-rebuild-"))
    broker, rs = KafkaBroker(free_port(), tmp), RedisServer(free_port(), tmp / "redis")
    (tmp / "redis").mkdir()
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
            "HOTBOARD_METRICS_PORT": "0",
            "HOTBOARD_SESSION_TIMEOUT_MS": "6000",
        }
        worker = Child("worker", [sys.executable, "-m", "cli.main", "worker"], log_path=tmp / "worker.log", env=env)
        with worker.start():
            total = asyncio.run(produce(broker.bootstrap, "bench", args.players, args.events, 0))
            want = (args.players, total)
            wait(lambda: redis_total(rs.url) == want, "Redis")
        rebuilt, lines = timed(env, ["rebuild", "--board", "bench"])
        assert redis_total(rs.url) == want, "the rebuilt board is the log's sum"
        print(
            f"rebuild --board bench, {args.events:,} events, {args.players:,} players: {rebuilt:.2f} s  ({lines[-1]})"
        )
        redis.Redis.from_url(rs.url).flushall()
        started = time.perf_counter()
        with worker.start():
            wait(lambda: redis_total(rs.url) == want, "the replay", timeout_s=900)
            replayed = time.perf_counter() - started
        print(f"worker replay in place after FLUSHALL, same log: {replayed:.2f} s (ratio {replayed / rebuilt:.2f})")
    finally:
        rs.stop()
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--players", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=300_000)
    run(parser.parse_args())


if __name__ == "__main__":
    main()
