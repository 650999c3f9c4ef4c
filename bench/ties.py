"""Read cost of fair ties: rank and around-me rates on a board where 90% of the players share one score, for
``shared``, ``dense`` and ``earliest`` boards side by side with a ``lexical`` one (Redis's order, the plain
reads). The goal: every fair variant >= 0.7 x lexical.

One private redis-server on a free loopback port holds the four boards, built directly per the layout of
:mod:`hotboard.boards` (pipelined ZADD/HSET in big chunks; what the workers would write). The questions go
through :class:`reader_api.snapshot.Snapshots` (the API's own scripts and reply parsing, no HTTP): one
connection, one request at a time, each cell a bounded time. The cells are interleaved round by round, so
drift of the machine hits every variant alike; a cell's figure is its median round.

    python -m bench.ties [--players 1000000] [--tied 0.9] [--seconds 1] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import uvloop
from redis.asyncio import Redis

from cli.devstack import RedisServer
from cli.process import free_port
from hotboard import board_store, keys
from hotboard.boards import TIE_DIGITS, BoardDef
from reader_api.snapshot import Snapshots

VARIANTS = ("lexical", "shared", "dense", "earliest")
QUESTIONS = ("rank", "around(5)")
TIED_SCORE = 1_000
CHUNK = 20_000
SAMPLE = 4_096


@dataclass(frozen=True, slots=True)
class Cell:
    rps: float
    p50_ms: float
    p99_ms: float
    #: Redis's own time per script call (INFO commandstats), free of the client's noise.
    redis_us: float


def scores_of(players: int, tied: float, seed: int = 10) -> list[int]:
    """``tied`` of the players on TIED_SCORE; the others spread over 0..players (ties among them too)."""
    rng = random.Random(seed)
    return [TIED_SCORE if rng.random() < tied else rng.randrange(players) for _ in range(players)]


async def build(redis: Redis, board: str, ties: str, scores: list[int]) -> float:
    """The board as the workers lay it out (``desc``; earliest stores -score, member = tie time + id)."""
    started = time.monotonic()
    definition = BoardDef("desc", "incr", ties)  # type: ignore[arg-type]
    await board_store.declare(redis, board, definition)
    sign = definition.sign
    rng = random.Random(board)
    for first in range(0, len(scores), CHUNK):
        names = [f"p-{i}" for i in range(first, min(len(scores), first + CHUNK))]
        async with redis.pipeline(transaction=False) as pipe:
            if definition.earliest:
                members = {p: f"{rng.randrange(10**12):0{TIE_DIGITS}d}{p}" for p in names}
                pipe.zadd(keys.board_key(board), {members[p]: sign * scores[first + i] for i, p in enumerate(names)})
                pipe.hset(keys.members_key(board), mapping={p: m for p, m in members.items()})
            else:
                pipe.zadd(keys.board_key(board), {p: sign * scores[first + i] for i, p in enumerate(names)})
            await pipe.execute()
    if ties == "dense":
        counts: dict[int, int] = {}
        for s in scores:
            counts[s] = counts.get(s, 0) + 1
        distinct = list(counts.items())
        for first in range(0, len(distinct), CHUNK):
            part = distinct[first : first + CHUNK]
            async with redis.pipeline(transaction=False) as pipe:
                pipe.zadd(keys.dense_key(board), {str(s): s for s, _ in part})
                pipe.hset(keys.counts_key(board), mapping={str(s): n for s, n in part})
                await pipe.execute()
    await redis.hset(keys.meta_key(board), mapping={keys.META_VERSION: 1, keys.META_AS_OF: int(time.time() * 1000)})
    return time.monotonic() - started


async def measure(
    redis: Redis, snapshots: Snapshots, board: str, question: str, names: list[str], seconds: float
) -> Cell:
    """Sequential requests on one connection for ``seconds`` (at most one pass over 100 x the sample)."""
    await redis.config_resetstat()
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    for i in range(100 * len(names)):
        started = time.perf_counter()
        if question == "rank":
            await snapshots.player(board, names[i % len(names)])
        else:
            await snapshots.around(board, names[i % len(names)], 5)
        now = time.perf_counter()
        latencies.append(now - started)
        if now >= deadline:
            break
    stats = await redis.info("commandstats")
    latencies.sort()
    p50, p99 = latencies[len(latencies) // 2] * 1000, latencies[int(0.99 * len(latencies))] * 1000
    return Cell(len(latencies) / sum(latencies), p50, p99, float(stats["cmdstat_evalsha"]["usec_per_call"]))


async def check(snapshots: Snapshots, scores: list[int]) -> None:
    """A tied player's rank on each board is what its policy says, so the figures are of right answers."""
    tied = next(i for i, s in enumerate(scores) if s == TIED_SCORE)
    better = sum(s > TIED_SCORE for s in scores)
    shared = (await snapshots.player("shared", f"p-{tied}"))["rank"]
    dense = (await snapshots.player("dense", f"p-{tied}"))["rank"]
    assert shared == better + 1, (shared, better)
    assert dense == len({s for s in scores if s > TIED_SCORE}) + 1, dense
    for board in ("lexical", "earliest"):
        rank = (await snapshots.player(board, f"p-{tied}"))["rank"]
        assert better < rank <= better + scores.count(TIED_SCORE), (board, rank)


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="hotboard-bench-ties-") as tmp:
        server = RedisServer(free_port(), Path(tmp), appendonly=False)
        server.start()
        redis = Redis.from_url(server.url, socket_timeout=120, max_connections=1)
        try:
            info = await redis.info("server")
            print(
                f"hotboard ties read benchmark: Redis {info['redis_version']}, {os.cpu_count()} CPUs, "
                f"Python {sys.version.split()[0]}"
            )
            scores = scores_of(args.players, args.tied)
            for ties in VARIANTS:
                took = await build(redis, ties, ties, scores)
                print(f"  built {ties:<8} board of {args.players:,} players in {took:.1f}s")
            snapshots = Snapshots(redis)
            await check(snapshots, scores)
            rng = random.Random(1)
            names = [f"p-{rng.randrange(args.players)}" for _ in range(SAMPLE)]
            rounds: dict[tuple[str, str], list[Cell]] = {}
            for _ in range(args.rounds):
                for question in QUESTIONS:
                    for ties in VARIANTS:
                        cell = await measure(redis, snapshots, ties, question, names, args.seconds)
                        rounds.setdefault((question, ties), []).append(cell)
        finally:
            await redis.aclose()
            server.stop()
    print()
    print(
        f"board of {args.players:,} players, {args.tied:.0%} on one score; 1 connection, sequential script calls "
        f"(Snapshots), median of {args.rounds} x {args.seconds:g}s per cell"
    )
    print(
        f"{'question':<10} | {'ties':<8} | {'req/s':>8} | {'p50 ms':>6} | {'p99 ms':>6} | {'x lexical':>9} | "
        f"{'Redis us/call':>13} | {'x lexical':>9}"
    )
    print("-" * 90)
    for question in QUESTIONS:
        median = {t: statistics.median(c.rps for c in rounds[(question, t)]) for t in VARIANTS}
        server_us = {t: statistics.median(c.redis_us for c in rounds[(question, t)]) for t in VARIANTS}
        for ties in VARIANTS:
            cells = rounds[(question, ties)]
            p50 = statistics.median(c.p50_ms for c in cells)
            p99 = statistics.median(c.p99_ms for c in cells)
            print(
                f"{question:<10} | {ties:<8} | {median[ties]:>8,.0f} | {p50:>6.3f} | {p99:>6.3f} | "
                f"{median[ties] / median['lexical']:>9.2f} | {server_us[ties]:>13.1f} | "
                f"{server_us['lexical'] / server_us[ties]:>9.2f}"
            )
    print("goal: every fair variant >= 0.70 x lexical (both ratios: rate / lexical's, lexical's us / its us)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--players", type=int, default=1_000_000)
    parser.add_argument("--tied", type=float, default=0.9, help="share of the players on one score")
    parser.add_argument("--seconds", type=float, default=1.0, help="per cell and round")
    parser.add_argument("--rounds", type=int, default=3)
    uvloop.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
