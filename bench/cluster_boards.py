"""The many-boards window and one hot board on a three-master Redis Cluster (``python -m bench.boards
--cluster``), flushed by the worker's cluster sink (one round per master, ``WAIT`` for one replica each), beside
two floors measured on the same cluster in the same run:

- scripted: the same ZINCRBYs in bare Lua scripts, as many boards per call as a slot allows (a script touches
  one slot), one round per master;
- pipelined: the same (board, player, delta) triples as plain ZINCRBY commands, one round per master.

Writes per master count what the window must write there: each board's ZINCRBYs and its bookkeeping (the
watermark HSET, the meta version and ``as_of``), divided by the flush's wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable
from itertools import chain
from pathlib import Path
from types import SimpleNamespace

import orjson
from redis.asyncio import Redis, RedisCluster

from bench.boards import BARE, fold, records, script_seconds, zincrby_commands
from cli.devcluster import LocalCluster
from cli.process import LOOPBACK
from flusher.batch import BOOKKEEPING_WRITES_PER_BOARD, BoardBatch
from flusher.cluster import ClusterSink, board_slot
from hotboard import lua, lua_definitions
from hotboard.boards import DEFAULT
from hotboard.codec import Decoder
from hotboard.redis_client import connect
from hotboard.script import Script
from ingest.pending import Window

_BARE = Script(BARE)


class Masters:
    """A plain client per master: its scripts loaded before timed runs, its own time in scripts read after."""

    def __init__(self, client: RedisCluster) -> None:
        self.names = sorted(n.name for n in client.get_primaries())
        self.plain = {name: Redis(host=LOOPBACK, port=int(name.rsplit(":", 1)[1])) for name in self.names}
        self._client = client

    def of(self, board: str) -> str:
        return str(self._client.nodes_manager.get_node_from_slot(board_slot(board)).name)

    async def prepare(self) -> None:
        for r in self.plain.values():
            for text in (lua.FLUSH, lua.APPLY, lua.LOOKUP, lua_definitions.MARK_SEASONAL, BARE):
                await r.script_load(text)
            await r.config_resetstat()

    async def script_seconds(self) -> dict[str, float]:
        return {name: await script_seconds(r) for name, r in self.plain.items()}

    async def close(self) -> None:
        for r in self.plain.values():
            await r.aclose()


async def timed(call: Awaitable[object]) -> float:
    """Seconds ``call`` (a coroutine not started yet) takes."""
    started = time.perf_counter()
    await call
    return time.perf_counter() - started


def bare_commands(batches: list[BoardBatch]) -> tuple[list[bytes], list[str]]:
    """Bare ZINCRBY scripts, one slot per call (up to 1,000 boards), and the key each is routed by."""
    ordered = sorted(batches, key=lambda b: board_slot(b.board))
    commands: list[bytes] = []
    route: list[str] = []
    i = 0
    while i < len(ordered):
        slot = board_slot(ordered[i].board)
        j = i
        while j < len(ordered) and j - i < 1000 and board_slot(ordered[j].board) == slot:
            j += 1
        chunk = ordered[i:j]
        args: list[object] = []
        for batch in chunk:
            args.append(2 * len(batch.deltas))
            args.extend(chain.from_iterable(batch.deltas.items()))
        commands.append(_BARE.packed([f"bare:{{{b.board}}}" for b in chunk], args))
        route.append(f"bare:{{{chunk[0].board}}}")
        i = j
    return commands, route


async def floors(sink: ClusterSink, batches: list[BoardBatch]) -> tuple[float, float]:
    """Seconds of the scripted floor and of the pipelined one (commands packed before the clock starts)."""
    scripted, scripted_route = bare_commands(batches)
    plain, plain_route = zincrby_commands(batches)
    script_s = await timed(sink.routed(scripted, scripted_route, (_BARE,), wait=False))
    plain_s = await timed(sink.routed(plain, plain_route, (), wait=False))
    return script_s, plain_s


def writes_per_master(masters: Masters, batches: list[BoardBatch]) -> Counter[str]:
    out: Counter[str] = Counter()
    boards: set[str] = set()
    for batch in batches:
        name = masters.of(batch.board)
        out[name] += batch.players
        if batch.board not in boards:
            boards.add(batch.board)
            out[name] += BOOKKEEPING_WRITES_PER_BOARD
    return out


async def many_boards(client: RedisCluster, masters: Masters, args: argparse.Namespace) -> None:
    sink = ClusterSink(client, "bench", min_replica_acks=1)
    marks: dict[tuple[str, int], int] = {}
    names = [f"guild-{b}" for b in range(args.boards)]
    spread = Counter(masters.of(b) for b in names)
    slots = len({board_slot(b) for b in names})
    print(
        f"cluster, 3 masters (+1 replica each, WAIT 1): {args.boards:,} boards on {slots:,} slots, per master "
        + ", ".join(f"{spread[n]:,}" for n in masters.names)
    )
    for round_no, label in enumerate(("first window (all new)", "second window (updates)")):
        batches = fold(records(args.boards, args.players, args.partitions, round_no), args.boards).batches(4000)
        await masters.prepare()
        flush_s = await timed(sink.flush(batches, lambda b, p: marks.get((b, p), -1)))
        in_redis = await masters.script_seconds()
        writes = writes_per_master(masters, batches)
        script_floor, plain_floor = await floors(sink, batches)
        for batch in batches:
            for p, off in batch.offsets.items():
                marks[batch.board, p] = off
        rates = ", ".join(f"{writes[n] / flush_s:,.0f}" for n in masters.names)
        busy = ", ".join(f"{in_redis[n]:.2f}" for n in masters.names)
        print(
            f"  {label}: flush {flush_s:.2f} s ({busy} s in each master's scripts); writes/s per master {rates}\n"
            f"    floor: scripted (one slot per call) {script_floor:.2f} s, pipelined ZINCRBY {plain_floor:.2f} s; "
            f"flush / floor {flush_s / script_floor:.1f} and {flush_s / plain_floor:.1f}"
        )


def hot_records(events: int, players: int, partitions: int, round_no: int) -> dict[int, list[SimpleNamespace]]:
    out: dict[int, list[SimpleNamespace]] = {p: [] for p in range(partitions)}
    for i in range(events):
        player = f"h{(i * 7919) % players}"
        p = hash(player) % partitions
        body = orjson.dumps({"board": "hot", "player": player, "delta": 1 + i % 5})
        out[p].append(SimpleNamespace(offset=len(out[p]) + round_no * events, value=body))
    return out


def hot_fold(parts: dict[int, list[SimpleNamespace]]) -> Window:
    window = Window()
    decoder = Decoder(max_known_boards=1)
    for p, recs in parts.items():
        f = window.fold_for(p)
        for i in range(0, len(recs), 1000):
            f.fold_batch(recs[i : i + 1000], {"hot": DEFAULT}, decoder)
    return window


async def hot_board(client: RedisCluster, masters: Masters, args: argparse.Namespace) -> None:
    """Windows of one board: its events folded by the worker's fold (in), its players' writes on its one
    master (out)."""
    sink = ClusterSink(client, "bench-hot", min_replica_acks=1)
    marks: dict[tuple[str, int], int] = {}
    fold_s = flush_s = 0.0
    writes = 0
    for round_no in range(args.hot_windows):
        parts = hot_records(args.hot_events, args.hot_players, args.partitions, round_no)
        started = time.perf_counter()
        window = hot_fold(parts)
        batches = window.batches(4000)
        fold_s += time.perf_counter() - started
        flush_s += await timed(sink.flush(batches, lambda b, p: marks.get((b, p), -1)))
        writes += sum(b.players for b in batches) + BOOKKEEPING_WRITES_PER_BOARD * len(batches)
        for batch in batches:
            for p, off in batch.offsets.items():
                marks[batch.board, p] = max(off, marks.get((batch.board, p), -1))
    events = args.hot_events * args.hot_windows
    print(
        f"one hot board on {masters.of('hot')} ({args.hot_windows} windows of {args.hot_events:,} events over "
        f"{args.hot_players:,} players): in {events / fold_s:,.0f} events/s folded "
        f"({events / (fold_s + flush_s):,.0f} with the flushes one after the other); "
        f"out {writes / flush_s:,.0f} writes/s on its master, {flush_s / args.hot_windows:.2f} s per flush"
    )


async def run(seed: str, args: argparse.Namespace) -> None:
    client = connect(seed, cluster=True)
    assert isinstance(client, RedisCluster)
    await client.initialize()
    masters = Masters(client)
    try:
        await many_boards(client, masters, args)
        await hot_board(client, masters, args)
    finally:
        await masters.close()
        await client.aclose()


def cluster(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        local = LocalCluster(Path(tmp), appendonly=False)
        local.start()
        try:
            asyncio.run(run(local.seed, args))
        finally:
            local.stop()
