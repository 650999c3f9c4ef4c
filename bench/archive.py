"""Archiver benchmark, side by side in one run: events/s of ``hotboard archiver`` (5 s windows into PostgreSQL)
against ``hotboard worker`` (1 s windows into Redis) on the same preloaded topic, each alone, three runs each,
interleaved: from the member's readiness to the moment its store holds every event (Redis: every player's total;
the archive: the same, read with one query per poll).

A private broker and redis-server on free loopback ports, a fresh database per archiver run on the machine's
PostgreSQL (HOTBOARD_TEST_POSTGRES overrides it); the members as processes of their own.

    python -m bench.archive [--players 100000] [--events 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis

from bench.audit import SERVER, admin, archived, produce, redis_total, wait
from cli.devstack import KafkaBroker, RedisServer, create_topic
from cli.process import LOOPBACK, Child, free_port, url_answers


def timed(name: str, env: dict[str, str], log: Path, done: object) -> float:
    """Seconds from ``name`` being ready to ``done()`` holding."""
    port = free_port()
    child = Child(
        name,
        [sys.executable, "-m", "cli.main", name],
        log_path=log,
        env={**env, "HOTBOARD_METRICS_PORT": str(port), "HOTBOARD_GROUP": f"g-{uuid.uuid4().hex[:8]}"},
        ready=lambda: url_answers(f"http://{LOOPBACK}:{port}/readyz"),
    )
    with child.start(timeout_s=60):
        started = time.perf_counter()
        wait(done, name, timeout_s=900)
        return time.perf_counter() - started


def runs_of(rates: list[float]) -> str:
    return ", ".join(f"{r:,.0f}" for r in rates)


def run(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-archive-"))
    broker, rs = KafkaBroker(free_port(), tmp), RedisServer(free_port(), tmp / "redis")
    (tmp / "redis").mkdir()
    broker.start()
    rs.start()
    try:
        asyncio.run(create_topic(broker.bootstrap, "bench", 8))
        asyncio.run(create_topic(broker.bootstrap, "bench.dlq", 1))
        total = asyncio.run(produce(broker.bootstrap, "bench", args.players, args.events, 0))
        want = (args.players, total)
        env = {
            **os.environ,
            "HOTBOARD_REDIS": rs.url,
            "HOTBOARD_KAFKA": broker.bootstrap,
            "HOTBOARD_TOPIC": "bench",
            "HOTBOARD_METRICS_HOST": LOOPBACK,
            "HOTBOARD_SESSION_TIMEOUT_MS": "6000",
        }
        rates: dict[str, list[float]] = {"worker": [], "archiver": []}
        admin_url = SERVER.rsplit("/", 1)[0]
        for run_no in range(3):
            redis.Redis.from_url(rs.url).flushall()
            s = timed(
                "worker",
                {**env, "HOTBOARD_WINDOW_MS": "1000"},
                tmp / f"worker-{run_no}.log",
                lambda: redis_total(rs.url) == want,
            )
            rates["worker"].append(args.events / s)
            database = f"hb_bench_{uuid.uuid4().hex[:8]}"
            asyncio.run(admin(SERVER, f'CREATE DATABASE "{database}"'))
            pg = f"{admin_url}/{database}"
            try:
                s = timed(
                    "archiver",
                    {**env, "HOTBOARD_POSTGRES": pg},
                    tmp / f"archiver-{run_no}.log",
                    lambda pg=pg: asyncio.run(archived(pg)) == want,
                )
            finally:
                asyncio.run(admin(SERVER, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
            rates["archiver"].append(args.events / s)
        worker, archiver = statistics.median(rates["worker"]), statistics.median(rates["archiver"])
        print(f"{args.events:,} events, {args.players:,} players, 8 partitions; events/s, median of 3:")
        print(f"  hotboard worker   (1 s windows, Redis)       {worker:>10,.0f}   runs {runs_of(rates['worker'])}")
        print(f"  hotboard archiver (5 s windows, PostgreSQL)  {archiver:>10,.0f}   runs {runs_of(rates['archiver'])}")
        print(f"  ratio {archiver / worker:.2f} (goal >= 0.8)")
    finally:
        rs.stop()
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--players", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=1_000_000)
    run(parser.parse_args())


if __name__ == "__main__":
    main()
