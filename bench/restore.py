"""Restore benchmark, side by side in one run: ``hotboard restore --board bench`` of a board of many players
from PostgreSQL against ``redis-benchmark`` ZADD on the same redis-server (the floor), then the audit time of
that board.

The archive is filled directly (``COPY`` into ``hb_scores``, one ``hb_boards`` row, a watermark and a
checkpoint per partition), not by the archiver: a million players through the archiver would take minutes and
measure the archiver. Every 10th player carries metadata.

The floor is the members/s of the fastest of three ZADD loads from ``redis-benchmark`` (one connection, as
restore uses), each adding as many members as the board has players: one member per ZADD pipelined 1,000 deep,
100 members per ZADD pipelined 10 deep, and 10,000 members per ZADD one at a time (restore's own command shape),
members drawn at random over as many ids as the board has players, into a key of its own deleted after each run.
Restore is timed in process (``archive.restore.restore``, from reading the archive to the last swap), the
audit as the ``hotboard audit --board bench`` command (interpreter start included; the archive and Redis agree,
so nothing is read back from Kafka: it proves the restored board exact too), with the default timeouts: its one
``MULTI`` read of a million members outlasts the 5 s ``--redis-timeout-s`` here, and has a timeout of its own
(``--snapshot-timeout-s``).

A private broker (the audit reads the topic's partitions) and redis-server on free loopback ports, a fresh
database on the machine's PostgreSQL (HOTBOARD_TEST_POSTGRES overrides it).

    python -m bench.restore [--players 1000000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import redis
from redis.asyncio import Redis

from archive.pool import Archive
from archive.restore import restore
from bench.archive import runs_of
from bench.audit import SERVER, admin, timed_audit
from cli.devstack import KafkaBroker, RedisServer, create_topic
from cli.process import free_port
from hotboard import keys
from hotboard.boards import DEFAULT

BOARD = "bench"
TOPIC = "bench"
PARTITIONS = 8
COPY_ROWS = 100_000
FLOOR_KEY = "hb:floor"
#: (members per ZADD, pipeline depth): the floor is the faster.
FLOOR_SHAPES = ((1, 1000), (100, 10), (10_000, 1))


def player_row(i: int) -> tuple[str, str, int, None, bytes | None]:
    meta = f'{{"n":{i}}}'.encode() if i % 10 == 0 else None
    return (BOARD, f"p-{i}", (i * 7919) % 1_000_003, None, meta)


async def fill(url: str, players: int) -> None:
    """The schema (migrated by the pool), then the board's rows by COPY, ``COPY_ROWS`` at a time."""
    async with Archive(url) as archive, archive.connection() as conn:
        await conn.execute(
            "INSERT INTO hb_boards (board, spec, version, as_of_ms) VALUES ($1, $2, $3, $4)",
            BOARD,
            DEFAULT.spec,
            players // COPY_ROWS + 1,
            int(time.time() * 1000),
        )
        for lo in range(0, players, COPY_ROWS):
            rows = [player_row(i) for i in range(lo, min(lo + COPY_ROWS, players))]
            await conn.copy_records_to_table(
                "hb_scores", records=rows, columns=("board", "player", "score", "tie_ms", "meta")
            )
        for p in range(PARTITIONS):
            last = 1000 + p
            await conn.execute(
                "INSERT INTO hb_watermarks VALUES ($1, $2, $3)", BOARD, keys.watermark_field(TOPIC, p), last
            )
            await conn.execute(
                "INSERT INTO hb_checkpoints (topic, partition, checkpoint) VALUES ($1, $2, $3)", TOPIC, p, last
            )
        await conn.execute("ANALYZE hb_scores")


def floor_rate(port: int, players: int, members: int, depth: int) -> float:
    """Members/s of ``redis-benchmark``: ``members`` random members per ZADD, ``depth`` commands pipelined."""
    pairs = [arg for _ in range(members) for arg in ("__rand_int__", "p-__rand_int__")]
    requests = max(depth, players // members)
    command = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", "1", "-P", str(depth)]
    command += ["-n", str(requests), "-r", str(players), "--csv", "ZADD", FLOOR_KEY, *pairs]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=True,
    )
    redis.Redis(port=port).delete(FLOOR_KEY)
    rps = float(done.stdout.strip().splitlines()[-1].split(",")[1].strip('"'))
    return rps * members


async def timed_restore(pg: str, url: str) -> tuple[float, int]:
    client = Redis.from_url(url)
    try:
        await client.flushall()
        async with Archive(pg) as archive:
            started = time.perf_counter()
            done = await restore(archive, client, TOPIC, BOARD, lambda _: None)
            seconds = time.perf_counter() - started
        assert await client.zcard(keys.board_key(BOARD)) == done[0].players
        return seconds, done[0].players
    finally:
        await client.aclose()


def run(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-restore-"))
    broker, rs = KafkaBroker(free_port(), tmp), RedisServer(free_port(), tmp / "redis")
    (tmp / "redis").mkdir()
    database = f"hb_bench_{uuid.uuid4().hex[:8]}"
    asyncio.run(admin(SERVER, f'CREATE DATABASE "{database}"'))
    pg = f"{SERVER.rsplit('/', 1)[0]}/{database}"
    broker.start()
    rs.start()
    try:
        asyncio.run(create_topic(broker.bootstrap, TOPIC, PARTITIONS))
        started = time.perf_counter()
        asyncio.run(fill(pg, args.players))
        print(f"archive filled by COPY: {args.players:,} players in {time.perf_counter() - started:.1f} s")
        floors: dict[tuple[int, int], list[float]] = {shape: [] for shape in FLOOR_SHAPES}
        restores: list[float] = []
        for _ in range(args.runs):
            for shape in FLOOR_SHAPES:
                floors[shape].append(floor_rate(rs.port, args.players, *shape))
            seconds, players = asyncio.run(timed_restore(pg, rs.url))
            assert players == args.players
            restores.append(players / seconds)
        print(f"{args.players:,}-player board, one redis-server; members/s, median of {args.runs}:")
        for (members, depth), rates in floors.items():
            load = f"{members:>6} members/command, -P {depth:<4}"
            print(f"  redis-benchmark ZADD, {load}  {statistics.median(rates):>12,.0f}")
        floor = max(statistics.median(rates) for rates in floors.values())
        rate = statistics.median(restores)
        print(f"  hotboard restore --board {BOARD}                        {rate:>12,.0f}   runs {runs_of(restores)}")
        print(f"  ratio {rate / floor:.2f} of the floor (goal >= 0.5)")
        env = {
            **os.environ,
            "HOTBOARD_REDIS": rs.url,
            "HOTBOARD_KAFKA": broker.bootstrap,
            "HOTBOARD_TOPIC": TOPIC,
            "HOTBOARD_POSTGRES": pg,
        }
        seconds, line = timed_audit(env, runs=1)
        print(f"hotboard audit --board {BOARD}: {seconds:.2f} s  ({line})")
    finally:
        rs.stop()
        broker.stop()
        asyncio.run(admin(SERVER, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--players", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    run(parser.parse_args())


if __name__ == "__main__":
    main()
