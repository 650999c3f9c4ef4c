"""Many small boards (per-guild boards): 100,000 boards with a few players each, measured on one redis-server.

Prints, for one window that touches every board (``--boards`` x ``--players`` events, keyed by player over
``--partitions`` partitions) folded by the worker's own fold and flushed by its own sink:

- fold and batching time, and the worker process's RSS growth while the window is pending;
- flush time of the window: first (every board and player new) and again (every score updated), beside the
  floor measured in the same run: the same ZINCRBYs alone, 1,000 boards per Lua script, no watermark, no
  definition check, no meta (what one Redis must do whatever the bookkeeping);
- positioning after a rebalance: the one HMGET of checkpoints, and the lazy watermark lookups the first
  events of every board then make (in the intake's chunks), against the goal of 1 s;
- ``GET /v1/boards``'s page read (``board_store.readable_page``, 100 names) with that many boards registered;
- with ``--breakdown``, where Redis's time goes: the update window flushed again on an emptied server by the
  shipped FLUSH script, by one without the definition check, and by one without the meta hash (no version,
  no ``as_of``: one key fewer per board), and by the candidate layouts of :mod:`bench.board_layouts` (one
  bookkeeping hash per board; one per script call; one per hash slot or per group of boards, each board keeping
  its meta), each beside the floor measured in the same pass, twice. The
  variants are measurements only: each drops a guarantee.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from itertools import chain
from pathlib import Path
from types import SimpleNamespace

import orjson
from hiredis import pack_command
from redis.asyncio import Redis

from bench import board_layouts
from cli.devstack import RedisServer, free_port
from flusher import redis_sink, wire
from flusher.batch import BoardBatch, Outcome
from flusher.redis_sink import RedisSink
from hotboard import board_store, keys, lua
from hotboard.boards import DEFAULT
from hotboard.codec import Decoder
from hotboard.script import Script
from ingest import gc_pacing
from ingest.pending import Window
from ingest.settings import WorkerSettings


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def records(boards: int, players: int, partitions: int, round_no: int) -> dict[int, list[SimpleNamespace]]:
    out: dict[int, list[SimpleNamespace]] = {p: [] for p in range(partitions)}
    for b in range(boards):
        for i in range(players):
            player = f"g{b}-p{i}"
            p = hash(player) % partitions
            body = {"board": f"guild-{b}", "player": player, "delta": 1 + round_no + i}
            out[p].append(SimpleNamespace(offset=len(out[p]) + round_no * boards * players, value=orjson.dumps(body)))
    return out


#: The floor: only the ZINCRBYs of a window, several boards per call (KEYS: boards; ARGV per board: m, then m
#: player/delta pairs).
BARE = """
local a = 1
for k = 1, #KEYS do
  local stop = a + tonumber(ARGV[a])
  for i = a + 1, stop, 2 do redis.call('ZINCRBY', KEYS[k], ARGV[i + 1], ARGV[i]) end
  a = stop + 1
end
return 0
"""
_BARE = Script(BARE)


async def bare_flush(redis: Redis, batches: list[BoardBatch]) -> float:
    """Seconds to apply the batches' deltas as bare ZINCRBYs (on ``bare:{board}``), streamed as the sink streams
    (packed while Redis runs what went out)."""

    def commands() -> Iterator[bytes]:
        for i in range(0, len(batches), 1000):
            chunk = batches[i : i + 1000]
            args: list[object] = []
            for batch in chunk:
                args.append(2 * len(batch.deltas))
                args.extend(chain.from_iterable(batch.deltas.items()))
            yield _BARE.packed([f"bare:{{{b.board}}}" for b in chunk], args)

    started = time.perf_counter()
    replies = await wire.stream(redis, commands())
    seconds = time.perf_counter() - started
    assert not any(isinstance(r, Exception) for r in replies), replies
    return seconds


def zincrby_commands(batches: list[BoardBatch]) -> tuple[list[bytes], list[str]]:
    """The pipelined floor: each (board, player, delta) as its own ZINCRBY command, and its key."""
    commands: list[bytes] = []
    route: list[str] = []
    for batch in batches:
        key = f"plain:{{{batch.board}}}"
        for player, delta in batch.deltas.items():
            commands.append(pack_command(("ZINCRBY", key, delta, player)))  # type: ignore[arg-type]
            route.append(key)
    return commands, route


async def pipelined_flush(redis: Redis, batches: list[BoardBatch]) -> float:
    """Seconds to send the batches' pairs as plain ZINCRBY commands in one pipelined round trip."""
    commands, _ = zincrby_commands(batches)
    started = time.perf_counter()
    replies = await wire.stream(redis, commands)
    seconds = time.perf_counter() - started
    assert not any(isinstance(r, Exception) for r in replies), replies[:3]
    return seconds


async def script_seconds(redis: Redis) -> float:
    """Redis's own time in scripts since the last CONFIG RESETSTAT (INFO commandstats), free of client time."""
    stats = await redis.info("commandstats")
    return float(stats.get("cmdstat_evalsha", {}).get("usec", 0)) / 1e6


def fold(parts: dict[int, list[SimpleNamespace]], boards: int) -> Window:
    """The steady fold, as the intake runs it once every board is past its watermark (chunks of 1,000)."""
    decoder = Decoder(max_known_boards=boards)
    fast = {f"guild-{b}": DEFAULT for b in range(boards)}
    window = Window()
    for p, recs in parts.items():
        f = window.fold_for(p)
        for i in range(0, len(recs), 1000):
            done = f.fold_batch(recs[i : i + 1000], fast, decoder)
            assert done.consumed == len(recs[i : i + 1000])
    return window


async def bench(url: str, args: argparse.Namespace) -> None:
    redis = Redis.from_url(url)
    sink = RedisSink(redis, "bench")
    for script in (lua.FLUSH, lua.APPLY, lua.LOOKUP, BARE):
        await redis.script_load(script)  # timed runs pay no NOSCRIPT pass
    marks: dict[tuple[str, int], int] = {}
    print(f"{args.boards:,} boards x {args.players} players, {args.partitions} partitions, one window each")
    for round_no, label in enumerate(("first window (all new)", "second window (updates)")):
        parts = records(args.boards, args.players, args.partitions, round_no)
        rss0 = rss_mib()
        started = time.perf_counter()
        window = fold(parts, args.boards)
        folded = time.perf_counter() - started
        batches = window.batches(4000)
        batched = time.perf_counter() - started - folded
        rss1 = rss_mib()
        await redis.config_resetstat()
        started = time.perf_counter()
        results = await sink.flush(batches, lambda b, p: marks.get((b, p), -1))
        flushed = time.perf_counter() - started
        in_redis = await script_seconds(redis)
        assert all(r.outcome.value == "applied" for r in results)
        await redis.config_resetstat()
        floor = await bare_flush(redis, batches)
        floor_in_redis = await script_seconds(redis)
        pipelined = await pipelined_flush(redis, batches)
        for batch in batches:
            for p, off in batch.offsets.items():
                marks[batch.board, p] = off
        print(
            f"  {label}: fold {folded:.2f} s, batches {batched:.2f} s ({len(batches):,}), "
            f"RSS +{rss1 - rss0:.0f} MiB while pending\n"
            f"    flush {flushed:.2f} s (goal 0.5 s; {in_redis:.2f} s of it in Redis's scripts)\n"
            f"    floor, the bare ZINCRBYs alone: {floor:.2f} s ({floor_in_redis:.2f} s in Redis); "
            f"flush / floor {flushed / floor:.1f}\n"
            f"    floor, the same pairs as pipelined ZINCRBY commands: {pipelined:.2f} s; "
            f"flush / floor {flushed / pipelined:.1f}"
        )
        del window, batches, parts
    await redis.hset("hb:ckpt:{bench}", mapping={str(p): 10**9 for p in range(args.partitions)})
    started = time.perf_counter()
    await sink.load_positions(range(args.partitions))
    positions = time.perf_counter() - started
    names = [f"guild-{b}" for b in range(args.boards)]
    started = time.perf_counter()
    for p in range(args.partitions):
        mine = names[p :: args.partitions]
        for i in range(0, len(mine), 1000):
            await sink.load_watermarks(p, mine[i : i + 1000])
    lookups = time.perf_counter() - started
    print(
        f"  positioning after a rebalance: checkpoints {positions * 1000:.1f} ms (one HMGET, whatever the boards); "
        f"then lazy watermark lookups of all {args.boards:,} boards {lookups:.2f} s (goal 1 s)"
    )
    started = time.perf_counter()
    page, _ = await board_store.readable_page(redis, "guild-5", 100)
    print(f"  GET /v1/boards page of {len(page)}: {(time.perf_counter() - started) * 1000:.1f} ms")
    print(f"  worker process RSS now {rss_mib():.0f} MiB")
    await redis.aclose()


#: FLUSH without a piece of its bookkeeping (the text each variant removes, and what stands in for it).
VARIANTS = {
    "as shipped": [],
    "without the definition check": [("local spec = redis.call('HGET', def_key, 'spec')", "local spec = want")],
    "without the meta hash (version, as_of)": [
        # version 0: nor the deleted-version lookup a new meta (version 1) makes
        ("local version, reborn = redis.call('HINCRBY', meta_key, 'version', 1), 0", "local version, reborn = 0, 0"),
        ("redis.call('HSET', meta_key, 'as_of', now)", ""),
    ],
}


def marks_of(marks: dict[tuple[str, int], int]) -> Callable[[str, int], int]:
    return lambda board, partition: marks.get((board, partition), -1)


async def check_totals(redis: Redis, key: Callable[[str], str], rounds: list[list[BoardBatch]]) -> None:
    """Every board's totals after the windows are the sum of its players' deltas (each variant wrote exactly
    the ZINCRBYs of the shipped flush), read back with one ZRANGE per board in one round trip."""
    want: dict[str, dict[str, int]] = {}
    for batches in rounds:
        for batch in batches:
            mine = want.setdefault(batch.board, {})
            for player, delta in batch.deltas.items():
                mine[player] = mine.get(player, 0) + delta
    boards = list(want)
    reads = (pack_command(("ZRANGE", key(b), 0, -1, "WITHSCORES")) for b in boards)  # type: ignore[arg-type]
    replies = await wire.stream(redis, reads)
    for board, reply in zip(boards, replies, strict=True):
        pairs = reply if reply and isinstance(reply[0], list) else zip(reply[::2], reply[1::2], strict=True)
        got = {member.decode(): int(float(score)) for member, score in pairs}
        assert got == want[board], (board, got, want[board])


async def redis_cpu(redis: Redis) -> float:
    """CPU seconds of Redis's main thread so far: unlike the script time, not inflated while the shared machine
    keeps the server off its core."""
    cpu = await redis.info("cpu")
    return float(cpu["used_cpu_user_main_thread"]) + float(cpu["used_cpu_sys_main_thread"])


async def timed(redis: Redis, window: Awaitable[float]) -> list[float]:
    """[wall, seconds in scripts, Redis CPU seconds] of one window's flush (``window`` answers its wall time)."""
    await redis.config_resetstat()
    cpu = await redis_cpu(redis)
    wall = await window
    return [wall, await script_seconds(redis), await redis_cpu(redis) - cpu]


async def run_shipped(redis: Redis, rounds: list[list[BoardBatch]], cuts: list[tuple[str, str]]) -> list[float]:
    """FLUSH with ``cuts`` through the worker's sink: the figures of the first window, then the update's."""
    text = lua.FLUSH
    for old, new in cuts:
        assert old in text, f"FLUSH changed: {old!r} is gone, update bench.boards.VARIANTS"
        text = text.replace(old, new)
    await redis.script_load(text)
    redis_sink._FLUSH = Script(text)  # bench-only: the sink runs the variant
    sink = RedisSink(redis, "bench")
    marks: dict[tuple[str, int], int] = {}

    async def window(batches: list[BoardBatch]) -> float:
        started = time.perf_counter()
        results = await sink.flush(batches, marks_of(marks))
        seconds = time.perf_counter() - started
        assert all(r.outcome.value == "applied" for r in results)
        for batch in batches:
            for p, off in batch.offsets.items():
                marks[batch.board, p] = off
        return seconds

    out = [x for batches in rounds for x in await timed(redis, window(batches))]
    redis_sink._FLUSH = Script(lua.FLUSH)
    await check_totals(redis, keys.board_key, rounds)
    return out


async def run_layout(
    redis: Redis, rounds: list[list[BoardBatch]], make: Callable[[], board_layouts.Layout]
) -> list[float]:
    layout = make()  # its own watermarks, from none: the server was emptied

    async def window(batches: list[BoardBatch]) -> float:
        seconds, results = await layout.flush(redis, batches)
        assert len(results) == len(batches) and all(r.outcome is Outcome.APPLIED for r in results)
        return seconds

    out = [x for batches in rounds for x in await timed(redis, window(batches))]
    await check_totals(redis, lambda b: f"{layout.prefix}:{{{b}}}", rounds)
    return out


async def run_floor(redis: Redis, rounds: list[list[BoardBatch]]) -> list[float]:
    out = [x for batches in rounds for x in await timed(redis, bare_flush(redis, batches))]
    await check_totals(redis, lambda b: f"bare:{{{b}}}", rounds)
    return out


async def breakdown(url: str, args: argparse.Namespace) -> None:
    redis = Redis.from_url(url)
    rounds = [fold(records(args.boards, args.players, args.partitions, r), args.boards).batches(4000) for r in (0, 1)]
    for text in (BARE, *board_layouts.SCRIPTS):
        await redis.script_load(text)
    sizes = [len(g) for g in board_layouts.groups_of(rounds[1])]
    print(
        "where the window's Redis time goes: each variant on an emptied server right after the floor (bare\n"
        "ZINCRBYs, 1,000 boards per call) on an emptied server, every board's totals checked after both;\n"
        f"(b)'s {len(sizes)} groups (one call each) hold {min(sizes):,}-{max(sizes):,} boards. Seconds: wall, in "
        "scripts (INFO commandstats), Redis main-thread CPU; / floor: the update's over the floor's just before\n"
        f"  {'':<56} {'first window':^17} | {'update window':^17} | {'update / floor':^14}"
    )
    layouts: list[type[board_layouts.Layout]] = [
        board_layouts.PerBoard,
        board_layouts.PerBoardNoHash,
        board_layouts.PerCall,
        board_layouts.PerSlot,
        board_layouts.PerSlotNoMeta,
        board_layouts.PerGroup,
        board_layouts.PerGroupPrev,
        board_layouts.ProductGroup,
    ]
    entries = [(name, partial(run_shipped, redis, rounds, cuts)) for name, cuts in VARIANTS.items()]
    entries += [(layout.name, partial(run_layout, redis, rounds, layout)) for layout in layouts]
    if args.only:
        entries = [(name, run) for name, run in entries if any(name.startswith(o) for o in args.only)]
    for pass_no in range(1, args.passes + 1):  # interleaved: this machine drifts
        for name, run in entries:
            await redis.flushall()
            floor = await run_floor(redis, rounds)
            await redis.flushall()
            got = await run()
            for label, row in (("floor, just before", floor), (f"{name} (pass {pass_no})", got)):
                cells = " ".join(f"{x:5.2f}" for x in row[:3]) + " | " + " ".join(f"{x:5.2f}" for x in row[3:])
                ratios = " ".join(f"{x / f:4.2f}" for x, f in zip(row[3:], floor[3:], strict=True))
                print(f"  {label:<56} {cells} | {ratios}")
    await redis.aclose()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.boards", description=__doc__.split("\n\n")[0])
    ap.add_argument("--boards", type=int, default=100_000)
    ap.add_argument("--players", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument(
        "--breakdown", action="store_true", help="FLUSH without parts of its bookkeeping, and other layouts"
    )
    ap.add_argument(
        "--only", action="append", default=[], help="--breakdown: only the variants whose name starts so (repeatable)"
    )
    ap.add_argument("--passes", type=int, default=2, help="--breakdown: interleaved passes over the variants")
    ap.add_argument("--cluster", action="store_true", help="then the same window and one hot board on a cluster")
    ap.add_argument("--hot-events", type=int, default=300_000, help="--cluster: events per window of the hot board")
    ap.add_argument("--hot-players", type=int, default=30_000, help="--cluster: players of the hot board")
    ap.add_argument("--hot-windows", type=int, default=3, help="--cluster: windows of the hot board")
    args = ap.parse_args(argv)
    # the worker's pace of the cyclic collector (ingest/gc_pacing.py): at the interpreter's, building a window's
    # 100,000 per-board objects runs collections that walk every batch alive, which no worker pays
    pace = gc_pacing.worker_pace(WorkerSettings.model_fields["max_poll_records"].default)
    with pace, tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(free_port(), Path(tmp), appendonly=False)
        server.start()
        try:
            asyncio.run(bench(server.url, args))
            if args.breakdown:
                asyncio.run(breakdown(server.url, args))
        finally:
            server.stop()
    if args.cluster:
        from bench import cluster_boards

        cluster_boards.cluster(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
