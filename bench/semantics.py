"""Flush cost of fair boards: players/s of ``best``, ``earliest`` and ``dense`` boards against a plain ``incr``
board, measured side by side in one run on one redis-server.

Each variant flushes the same windows through the real sink (``flusher.redis_sink.RedisSink``): ``--players``
players per window (split into scripts of ``--script-players``), ``--windows`` windows, every window touching
every player again with a new score, so the figures are updates, not first inserts. Rounds alternate between
the variants (``--rounds``) and each variant's best round counts, so a noisy neighbour hurts every variant alike.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from redis.asyncio import Redis

from bench.scratch import on_scratch_redis
from flusher.batch import BoardBatch
from flusher.redis_sink import RedisSink
from hotboard import board_store
from hotboard.boards import BoardDef
from hotboard.operators import event, fold

VARIANTS = {
    "incr (plain)": BoardDef("desc", "incr", "shared"),
    "best": BoardDef("desc", "best", "shared"),
    "earliest (best)": BoardDef("desc", "best", "earliest"),
    "dense (incr)": BoardDef("desc", "incr", "dense"),
}
GOAL = 0.5


def window(definition: BoardDef, players: list[str], rng: random.Random, ts: int, per_script: int) -> list[BoardBatch]:
    """One window's batches for ``definition``: each player a score between 0 and 999 (many ties), as the fold
    would leave them (one event per player; the fold's cost is not part of the flush)."""
    out: list[BoardBatch] = []
    for start in range(0, len(players), per_script):
        chunk = players[start : start + per_script]
        scores = [rng.randrange(1000) for _ in chunk]
        batch = BoardBatch("b", {}, {0: ts}, definition)
        if definition.earliest:
            batch.steps = {p: [("best", s, ts)] for p, s in zip(chunk, scores, strict=True)}
        elif definition.operator == "incr":
            batch.deltas = dict(zip(chunk, scores, strict=True))
        else:
            batch.states = {
                p: fold(None, event("best", s, definition.order)) for p, s in zip(chunk, scores, strict=True)
            }
        batch.board = f"b{start // per_script}"
        out.append(batch)
    return out


async def run_variant(url: str, definition: BoardDef, args: argparse.Namespace, round_no: int) -> float:
    """players/s of one variant: fresh boards, ``--windows`` windows flushed one after another."""
    redis = Redis.from_url(url)
    try:
        await redis.flushall()
        sink = RedisSink(redis, "bench")
        players = [f"player-{i}" for i in range(args.players)]
        rng = random.Random(round_no)
        windows = [window(definition, players, rng, w, args.script_players) for w in range(args.windows + 1)]
        for board in {b.board for b in windows[0]}:
            await board_store.declare(redis, board, definition)
        marks: dict[tuple[str, int], int] = {}

        async def flush(batches: list[BoardBatch]) -> None:
            await sink.flush(batches, lambda b, p: marks.get((b, p), -1))
            for batch in batches:
                marks[batch.board, 0] = batch.offsets[0]

        await flush(windows[0])  # first inserts, not measured
        started = time.perf_counter()
        for batches in windows[1:]:
            await flush(batches)
        took = time.perf_counter() - started
        return float(args.players * args.windows) / took
    finally:
        await redis.aclose()


async def bench(url: str, args: argparse.Namespace) -> int:
    best: dict[str, float] = dict.fromkeys(VARIANTS, 0.0)
    for round_no in range(args.rounds):
        for name, definition in VARIANTS.items():
            best[name] = max(best[name], await run_variant(url, definition, args, round_no))
    plain = best["incr (plain)"]
    print(
        f"flush rate, {args.players:,} players per window x {args.windows} windows, "
        f"{args.script_players} players per script, best of {args.rounds} rounds"
    )
    print(f"{'board':<18} {'players/s':>12} {'÷ incr':>8}")
    for name, rate in best.items():
        ratio = rate / plain
        mark = "" if name == "incr (plain)" else ("  ok" if ratio >= GOAL else f"  below the {GOAL} goal")
        print(f"{name:<18} {rate:>12,.0f} {ratio:>8.2f}{mark}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.semantics", description=__doc__.split("\n\n")[0])
    ap.add_argument("--players", type=int, default=100_000)
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--script-players", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    return on_scratch_redis(lambda url: bench(url, args))


if __name__ == "__main__":
    sys.exit(main())
