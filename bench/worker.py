"""Worker benchmark: worker throughput vs fetch-only ceilings, flush rate vs redis-benchmark, write reduction.

Two fetch-only ceilings (besides the one that also parses every value): the client as shipped (a ``ConsumerRecord``
per record, the interpreter's GC pace), and the client on the worker's own consume path (its parsed records,
``ingest/raw_records.py``, at its collector's pace, ``ingest/gc_pacing.py``), which says what the fetch itself costs
the worker; the worker is reported against both, each run's ceilings and worker run back to back.

Everything is measured side by side in one run on a private embedded stack (Tansu + redis-server on free
loopback ports), so the ratios compare like with like on this machine. The write accounting is taken from
Redis itself (``INFO commandstats``, cross-checked against the AOF) and the minimum is recomputed from the
bench's own copy of the events, never from the worker's counters.

    python -m bench.worker [--events 1000000] [--players 100000] [--boards 4] [--zipf 1.1] [--partitions 8]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import gc
import io
import itertools
import logging
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.partitioner import DefaultPartitioner
from orjson import loads
from redis.asyncio import Redis

from bench import fetch_cost, fold_cost
from cli.devstack import KafkaBroker, RedisServer, create_topic, free_port
from cli.loadgen import generate, publish
from cli.process import spawn, stop_process
from flusher.batch import (
    BOOKKEEPING_WRITES_PER_BOARD,
    CHECKPOINT_WRITES_PER_PARTITION,
    NO_WATERMARK,
    BoardBatch,
    Outcome,
)
from flusher.redis_sink import RedisSink
from hotboard import keys
from hotboard.codec import Event
from ingest import gc_pacing, raw_records
from ingest.kafka_config import consumer_config
from ingest.settings import WorkerSettings
from ingest.worker import FlushReport, Worker

T = TypeVar("T")
TOPIC = "bench-scores"
WRITE_COMMANDS = ("zincrby", "hset", "hincrby")
REDIS_BENCHMARK = "/usr/bin/redis-benchmark"
SESSION_TIMEOUT_MS = 6000
#: Fixed events whose fold is counted under callgrind, and pending pairs whose memory is measured.
FOLD_EVENTS = 20_000
MEMORY_PAIRS = 1_000_000
clock = time.perf_counter


# ---------------------------------------------------------------------------------------------- the events


@dataclass(slots=True)
class Preload:
    """Our own copy of what was published: the reference for offsets, minimum writes and exact totals."""

    events: list[Event]
    #: partition -> event indices in offset order (offset == position, verified against the broker).
    by_partition: dict[int, list[int]]
    seconds: float

    def end(self, partition: int) -> int:
        """Next offset after the last event of ``partition`` (what a covering commit must reach)."""
        return len(self.by_partition.get(partition, ()))

    def totals(self) -> dict[str, dict[str, int]]:
        out: defaultdict[str, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))
        for e in self.events:
            out[e.board][e.player] += e.delta or 0
        return {b: dict(d) for b, d in out.items()}


async def preload(bootstrap: str, args: argparse.Namespace) -> Preload:
    """Generate, publish, and recompute each event's partition the way loadgen.publish picks it."""
    events = list(generate(args.events, players=args.players, zipf=args.zipf, boards=args.boards, seed=args.seed))
    partitions = list(range(args.partitions))
    partitioner = DefaultPartitioner()
    cache: dict[str, int] = {}  # one murmur2 per distinct player, not per event
    by_partition: dict[int, list[int]] = {p: [] for p in partitions}
    for i, e in enumerate(events):
        p = cache.get(e.player)
        if p is None:
            p = cache[e.player] = partitioner(e.player.encode(), partitions, partitions)
        by_partition[p].append(i)
    stats = await publish(bootstrap, TOPIC, events)
    if stats.events != len(events):
        raise SystemExit(f"publish sent {stats.events} of {len(events)} events")
    return Preload(events, by_partition, stats.seconds)


# ---------------------------------------------------------------------------------------------- ceiling


@dataclass(slots=True)
class FetchRun:
    events: int
    first_batch: int
    t_first: float
    t_end: float
    problems: list[str] = field(default_factory=list)
    highwater: dict[int, int | None] = field(default_factory=dict)
    cpu_s: float = 0.0  # this process's CPU time between t_first and t_end

    @property
    def rate(self) -> float:
        """Events/s from the first record fetched; the first batch is excluded (its fetch preceded t_first)."""
        return (self.events - self.first_batch) / max(1e-9, self.t_end - self.t_first)


def ceiling_config(settings: WorkerSettings, raw: bool = False) -> dict[str, Any]:
    """The worker's own consumer configuration (one definition, ``ingest.kafka_config``), in a fresh group that
    starts at the beginning (the ceiling has no checkpoints to seek from), with the client's records as shipped:
    a ``ConsumerRecord`` per record, not the parsed records the worker's consumer takes (``ingest.raw_records``),
    so the ceiling stays this client's own fetch rate. ``raw``: the worker's parsed records after all (its
    ``value_deserializer``, the seam's marker), for the ceiling on the worker's own consume path."""
    return {
        **consumer_config(settings),
        "group_id": f"ceiling-{uuid.uuid4().hex[:8]}",
        "auto_offset_reset": "earliest",
        "value_deserializer": raw_records.keep_bytes if raw else None,
    }


async def fetch_ceiling(
    bootstrap: str, pre: Preload, settings: WorkerSettings, timeout_s: float, decode: bool = False, raw: bool = False
) -> FetchRun:
    """Fetch-only consumer in its own fresh group: counts records, spot-checks the last one per batch (a dict
    lookup per partition per getmany, negligible) so the offset model of our preload is verified for free.
    ``decode``: also ``orjson.loads`` every value (the least a consumer of JSON events does: the second ceiling).
    ``raw``: the worker's consume path, its parsed records (``ingest/raw_records.py``) at its collector's pace
    (``ingest/gc_pacing.py``), held from start to stop as the worker holds it: what the client costs the worker."""
    if raw:
        raw_records.install()  # as the worker does (idempotent; inert for the stock ceilings' consumers)
    consumer = AIOKafkaConsumer(**{**ceiling_config(settings, raw), "bootstrap_servers": bootstrap})
    consumer.subscribe([TOPIC])
    await asyncio.wait_for(consumer.start(), 30)
    pace = contextlib.ExitStack()
    if raw:
        pace.enter_context(gc_pacing.worker_pace(settings.max_poll_records))
    try:
        n = len(pre.events)
        count = first_batch = 0
        t_first = cpu0 = 0.0
        problems: list[str] = []
        deadline = time.monotonic() + timeout_s
        events, by_partition = pre.events, pre.by_partition
        while count < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"ceiling fetched {count}/{n} events in {timeout_s:.0f}s")
            batch = await consumer.getmany(timeout_ms=100, max_records=settings.max_poll_records)
            if not batch:
                continue
            got = 0
            for tp, records in batch.items():
                got += len(records)
                if decode:
                    for record in records:
                        loads(record.value)
                last = records[-1]
                span = last.offset - records[0].offset + 1
                idx = by_partition[tp.partition]
                if (
                    span != len(records)
                    or last.offset >= len(idx)
                    or last.key != events[idx[last.offset]].player.encode()
                ):
                    problems.append(f"p{tp.partition}@{last.offset}: span {span} for {len(records)} records or key")
            if not t_first:
                t_first, first_batch, cpu0 = clock(), got, time.process_time()
            count += got
        t_end, cpu = clock(), time.process_time() - cpu0
        high = {p: consumer.highwater(tp) for p in by_partition for tp in [_tp(p)]}
        return FetchRun(count, first_batch, t_first, t_end, problems[:5], high, cpu)
    finally:
        pace.close()
        await asyncio.wait_for(consumer.stop(), 30)


def _tp(partition: int) -> TopicPartition:
    return TopicPartition(TOPIC, partition)


# ---------------------------------------------------------------------------------------------- worker


@dataclass(slots=True)
class WorkerRun:
    first_batch: int = 0
    t_first: float = 0.0
    t_last_fetch: float = 0.0  # every partition's last offset fetched
    t_flushed: float = 0.0  # FlushReport covering every end
    t_committed: float = 0.0  # commit covering every end
    reports: list[tuple[float, FlushReport]] = field(default_factory=list)
    stats_before: dict[str, dict[str, int]] = field(default_factory=dict)
    stats_after: dict[str, dict[str, int]] = field(default_factory=dict)
    fenced: int = 0
    failed: int = 0
    cpu_first: float = 0.0  # process_time() at t_first and at t_committed: is the Python core the bottleneck?
    cpu_committed: float = 0.0
    # filled in by bench() after the run
    accounting: Accounting | None = None
    issued: dict[str, int] = field(default_factory=dict)
    aof: dict[str, int] | None = None
    want_aof: dict[str, int] = field(default_factory=dict)
    exact: bool = False
    why: str = ""

    def rate(self, events: int) -> float:
        return (events - self.first_batch) / max(1e-9, self.t_committed - self.t_first)


async def run_worker(bootstrap: str, redis_url: str, pre: Preload, redis: Redis, timeout_s: float) -> WorkerRun:
    """One in-process Worker end to end. Its consumer's getmany/commit are wrapped (bench-side instrumentation,
    one await per call) to timestamp the first record fetched and the commit that covers every partition."""
    settings = WorkerSettings(
        kafka=bootstrap,
        redis=redis_url,
        topic=TOPIC,
        group=f"worker-{uuid.uuid4().hex[:8]}",
        metrics_port=0,
        session_timeout_ms=SESSION_TIMEOUT_MS,
    )
    run = WorkerRun()
    ends = {p: pre.end(p) for p in pre.by_partition if pre.end(p) > 0}
    fetched: dict[int, int] = {}
    covered: dict[int, int] = {}
    committed: dict[int, int] = {}
    done = asyncio.Event()

    def on_flush(report: FlushReport) -> None:
        run.reports.append((clock(), report))
        for p, last in report.offsets.items():
            covered[p] = max(covered.get(p, -1), last + 1)
        if not run.t_flushed and all(covered.get(p, 0) >= e for p, e in ends.items()):
            run.t_flushed = clock()

    run.stats_before = await commandstats(redis)
    async with Worker(settings, handle_signals=False, on_flush=on_flush) as worker:
        consumer = worker._consumer  # bench instrumentation only
        getmany, commit = consumer.getmany, consumer.commit

        async def timed_getmany(*partitions: Any, **kw: Any) -> Any:
            batch = await getmany(*partitions, **kw)
            if batch:
                if not run.t_first:
                    run.t_first, run.first_batch = clock(), sum(len(r) for r in batch.values())
                    run.cpu_first = time.process_time()
                for tp, records in batch.items():
                    fetched[tp.partition] = max(fetched.get(tp.partition, 0), records[-1].offset + 1)
                if not run.t_last_fetch and all(fetched.get(p, 0) >= e for p, e in ends.items()):
                    run.t_last_fetch = clock()
            return batch

        async def timed_commit(offsets: Any = None) -> None:
            await commit(offsets)
            for tp, off in (offsets or {}).items():
                committed[tp.partition] = max(committed.get(tp.partition, 0), int(off))
            if not run.t_committed and all(committed.get(p, 0) >= e for p, e in ends.items()):
                run.t_committed, run.cpu_committed = clock(), time.process_time()
                done.set()

        consumer.getmany, consumer.commit = timed_getmany, timed_commit
        task = asyncio.create_task(worker.run(), name="bench-worker")
        try:
            waiter = asyncio.create_task(done.wait())
            finished, _ = await asyncio.wait({waiter, task}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if task in finished:
                task.result()  # surface the worker's exception
                raise RuntimeError("worker exited before covering every partition")
            if not done.is_set():
                raise TimeoutError(f"worker did not commit the last offsets within {timeout_s:.0f}s: {worker!r}")
        finally:
            worker.stop()
            await asyncio.wait_for(task, 20)
        run.fenced, run.failed = worker.fenced, worker.failed_flushes
    run.stats_after = await commandstats(redis)
    return run


async def commandstats(redis: Redis) -> dict[str, dict[str, int]]:
    """``INFO commandstats`` as {command: {calls, usec}}; missing commands read as zero."""
    info = await redis.info("commandstats")
    out: dict[str, dict[str, int]] = {}
    for name, row in info.items():
        if name.startswith("cmdstat_"):
            out[name.removeprefix("cmdstat_")] = {"calls": int(row["calls"]), "usec": int(row["usec"])}
    return out


def stat_delta(
    before: dict[str, dict[str, int]], after: dict[str, dict[str, int]], cmd: str, key: str = "calls"
) -> int:
    return after.get(cmd, {}).get(key, 0) - before.get(cmd, {}).get(key, 0)


async def lua_calls_counted(redis: Redis) -> bool:
    """Redis counts commands issued from inside a script in commandstats? Probe once on scratch keys."""
    before = await commandstats(redis)
    probe = (
        "redis.call('ZINCRBY', KEYS[1], 1, 'x'); redis.call('HSET', KEYS[2], 'f', 1); "
        "redis.call('HINCRBY', KEYS[2], 'v', 1)"
    )
    await redis.eval(probe, 2, "bench:probe:{z}", "bench:probe:{z}:h")
    after = await commandstats(redis)
    await redis.delete("bench:probe:{z}", "bench:probe:{z}:h")
    return all(stat_delta(before, after, c) == 1 for c in WRITE_COMMANDS)


def aof_offsets(data_dir: Path) -> tuple[Path, int] | None:
    """The current incremental AOF file (Redis 7 multi-part AOF) and its size, to read what a phase appended."""
    manifests = list(data_dir.glob("appendonlydir/*.manifest"))
    if not manifests:
        return None
    incr = [line.split()[1] for line in manifests[0].read_text().splitlines() if "type i" in line]
    if not incr:
        return None
    path = data_dir / "appendonlydir" / incr[-1]
    return path, path.stat().st_size


def aof_count(start: tuple[Path, int] | None, data_dir: Path) -> dict[str, int] | None:
    """Count write commands appended to the AOF since ``start`` (None when a rewrite rotated the file)."""
    now = aof_offsets(data_dir)
    if start is None or now is None or now[0] != start[0]:
        return None
    with start[0].open("rb") as f:
        f.seek(start[1])
        data = f.read()
    counts: defaultdict[str, int] = defaultdict(int)
    pos, n = 0, len(data)
    while pos < n:  # RESP arrays: *<argc>\r\n then $<len>\r\n<bytes>\r\n per argument
        end = data.index(b"\r\n", pos)
        argc = int(data[pos + 1 : end])
        pos = end + 2
        name = b""
        for i in range(argc):
            end = data.index(b"\r\n", pos)
            size = int(data[pos + 1 : end])
            if i == 0:
                name = data[end + 2 : end + 2 + size]
            pos = end + 2 + size + 2
        counts[name.decode().lower()] += 1
    return dict(counts)


async def settled_aof(start: tuple[Path, int] | None, data_dir: Path, want: dict[str, int]) -> dict[str, int] | None:
    """AOF counts once Redis has written its buffer out: with appendfsync everysec a write can be postponed
    while a background fsync is slow, so re-read for a few seconds before calling it a mismatch."""
    counts = None
    for _ in range(12):
        counts = aof_count(start, data_dir)
        if counts is None or all(counts.get(c, 0) == want[c] for c in want):
            break
        await asyncio.sleep(0.5)
    return counts


# ---------------------------------------------------------------------------------------------- writes


@dataclass(slots=True)
class Accounting:
    minimum: int
    min_pairs: int
    min_bookkeeping: int
    covered_ok: bool
    boards_match: bool
    #: ZINCRBY by 0 (a window's deltas for the player cancel out) on a member that exists already: Redis
    #: changes nothing and does not replicate it, so the AOF shows this many fewer ZINCRBYs than commandstats.
    zero_noops: int


def minimum_writes(pre: Preload, reports: list[tuple[float, FlushReport]]) -> Accounting:
    """Sum over flushes of distinct board-player pairs in the offset ranges each flush covered, plus the fixed
    bookkeeping per board batch and per partition checkpoint, computed from our own events and the reports."""
    events = pre.events
    prev = {p: -1 for p in pre.by_partition}
    pairs_total = bookkeeping = zero_noops = 0
    boards_match = True
    existing: set[tuple[str, str]] = set()
    for _, report in reports:
        pairs: defaultdict[tuple[str, str], int] = defaultdict(int)
        for p, last in report.offsets.items():
            for i in pre.by_partition[p][prev[p] + 1 : last + 1]:
                e = events[i]
                pairs[e.board, e.player] += e.delta or 0
            prev[p] = last
        zero_noops += sum(1 for pair, net in pairs.items() if net == 0 and pair in existing)
        existing.update(pairs)
        boards = {b for b, _ in pairs}
        boards_match &= boards == {r.board for r in report.results}
        pairs_total += len(pairs)
        # per board batch (a board's share of a window may be split into several short scripts), plus the
        # checkpoint of every partition the flush covered
        bookkeeping += BOOKKEEPING_WRITES_PER_BOARD * len(report.results)
        bookkeeping += CHECKPOINT_WRITES_PER_PARTITION * len(report.offsets)
    covered_ok = all(prev[p] == pre.end(p) - 1 for p in pre.by_partition)
    return Accounting(pairs_total + bookkeeping, pairs_total, bookkeeping, covered_ok, boards_match, zero_noops)


async def exact(redis: Redis, pre: Preload) -> tuple[bool, str]:
    """Every board equals the totals of our own events (members and integer scores)."""
    want = pre.totals()
    bad = []
    for board, expected in want.items():
        rows: list[Any] = await redis.zrange(keys.board_key(board), 0, -1, withscores=True)
        got = {bytes(m).decode(): int(s) for m, s in rows}
        if got != expected:
            diff = sum(1 for p in set(got) | set(expected) if got.get(p) != expected.get(p))
            bad.append(f"{board}: {diff} players differ")
    return not bad, "; ".join(bad)


# ---------------------------------------------------------------------------------------------- flush rate


@dataclass(slots=True)
class FlushRun:
    seconds: float
    build_s: float  # RedisSink._commands: building and packing the arguments (separately timed, same batch)
    redis_usec: int  # EVALSHA time inside Redis (commandstats usec delta)


async def flush_once(redis: Redis, sink: RedisSink, players: int, tag: str) -> FlushRun:
    """One RedisSink.flush of ``players`` distinct players to a fresh key, expected watermark -1."""
    batch = BoardBatch(f"bench-flush-{tag}", {f"p-{i}": 1 + i % 7 for i in range(players)}, {0: 0})
    before = await commandstats(redis)
    t0 = clock()
    results = await sink.flush([batch], lambda board, partition: NO_WATERMARK)
    seconds = clock() - t0
    after = await commandstats(redis)
    if results[0].outcome is not Outcome.APPLIED or results[0].writes != players:
        raise RuntimeError(f"flush bench not applied: {results[0]}")
    if await redis.zcard(keys.board_key(batch.board)) != players:
        raise RuntimeError("flush bench: wrong cardinality")
    t1 = clock()
    # bench-only: the Python share (building and packing the arguments)
    list(sink._commands([batch], lambda board, partition: NO_WATERMARK, []))
    build = clock() - t1
    return FlushRun(seconds, build, stat_delta(before, after, "evalsha", "usec"))


def redis_benchmark(port: int, timeout_s: float = 90) -> float:
    """requests/s of the reference pipelined ZINCRBY load, parsed from --csv (falls back to the -q text)."""
    cmd = [
        REDIS_BENCHMARK,
        "-p",
        str(port),
        "-P",
        "1000",
        "-n",
        "1000000",
        "-r",
        "100000",
        "--csv",
        "ZINCRBY",
        "benchkey",
        "1",
        "member:__rand_int__",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=True).stdout
    rows = [r for r in csv.reader(io.StringIO(out)) if r]
    for header, row in itertools.pairwise(rows):
        if "rps" in header:
            return float(row[header.index("rps")])
    match = re.findall(r"([\d.]+)\s+requests per second", out)
    if not match:
        raise RuntimeError(f"cannot parse redis-benchmark output: {out[-300:]!r}")
    return float(match[-1])


# ---------------------------------------------------------------------------------------------- report


def machine_info(load_at_start: float) -> list[str]:
    cpu = ""
    with open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?")
    redis_version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True, timeout=10).stdout
    return [
        f"machine: nproc={os.cpu_count()} cpu={cpu!r} {platform.system()} {platform.release()}",
        f"redis-server --version: {redis_version.strip()}",
        f"python {platform.python_version()}; load avg (1 min) start {load_at_start:.1f}, end {os.getloadavg()[0]:.1f}",
    ]


def fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def table(rows: list[tuple[str, str, str, str, str]]) -> str:
    head = ("figure", "measured", "reference", "ratio", "target")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(5)]
    line = "+-" + "-+-".join("-" * w for w in widths) + "-+"
    fmt = "| " + " | ".join(f"{{:{'<' if i == 0 else '>'}{w}}}" for i, w in enumerate(widths)) + " |"
    return "\n".join([line, fmt.format(*head), line, *(fmt.format(*r) for r in rows), line])


async def bounded(what: str, aw: Awaitable[T], timeout_s: float) -> T:
    try:
        return await asyncio.wait_for(aw, timeout_s)
    except TimeoutError:
        raise SystemExit(f"bench: {what} did not finish within {timeout_s:.0f}s") from None


class PySpy:
    """Optional: sample this very process with py-spy during the worker phase only (raw collapsed stacks)."""

    def __init__(self, out: str | None) -> None:
        self.out = out
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PySpy:
        if self.out:
            spy = Path(sys.executable).with_name("py-spy")
            self.proc = spawn(
                [
                    str(spy),
                    "record",
                    "--pid",
                    str(os.getpid()),
                    "--format",
                    "raw",
                    "--rate",
                    "250",
                    "--nonblocking",
                    "-o",
                    self.out,
                ],
                quiet=True,
            )
            time.sleep(1.0)  # let it attach before the phase starts
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            stop_process(self.proc, 30, signal.SIGINT)  # py-spy writes its file on SIGINT


async def bench(args: argparse.Namespace, kafka: KafkaBroker, redis_server: RedisServer) -> int:
    t_start, load_at_start = time.monotonic(), os.getloadavg()[0]
    bootstrap, redis_url = kafka.bootstrap, redis_server.url
    await bounded("create topic", create_topic(bootstrap, TOPIC, args.partitions), 30)
    await bounded("create dlq topic", create_topic(bootstrap, f"{TOPIC}.dlq", 1), 30)
    pre = await bounded("preload", preload(bootstrap, args), 300)
    if args.gc_freeze:
        # Our copy of the events (a million tuples) is in neither system under test: frozen out of the cyclic
        # GC's generations, no full collection of a ceiling or a worker run walks it (each costs 100-500 ms). The
        # worker's own pace (ingest/gc_pacing.py) runs no full collection here; without the freeze the ceilings
        # alone would pay for walking our copy.
        gc.collect()
        gc.freeze()
    n = len(pre.events)
    print(f"preloaded {n:,} events in {pre.seconds:.1f}s; per partition: {[pre.end(p) for p in pre.by_partition]}")

    settings = WorkerSettings(
        kafka=bootstrap, redis=redis_url, topic=TOPIC, metrics_port=0, session_timeout_ms=SESSION_TIMEOUT_MS
    )
    # Ceiling and worker runs alternate, so drifting load on this shared machine hits both alike; each side is
    # reported by its best run (and its median, in the details).
    ceilings: list[FetchRun] = []
    decoding: list[FetchRun] = []
    raws: list[FetchRun] = []  # the fetch-only ceiling on the worker's own consume path
    wruns: list[WorkerRun] = []
    redis = Redis.from_url(redis_url, socket_timeout=60)
    try:
        lua_counted = await lua_calls_counted(redis)
        for i in range(args.runs):
            if not args.skip_ceiling:
                ceilings.append(await bounded("ceiling", fetch_ceiling(bootstrap, pre, settings, 120), 150))
                c = ceilings[-1]
                print(f"ceiling run: {c.rate:,.0f} events/s (python CPU {c.cpu_s / (c.t_end - c.t_first):.0%} of wall)")
                decoding.append(await bounded("ceiling", fetch_ceiling(bootstrap, pre, settings, 120, True), 150))
                c = decoding[-1]
                print(
                    f"aiokafka + orjson run: {c.rate:,.0f} events/s (python CPU {c.cpu_s / (c.t_end - c.t_first):.0%})"
                )
                raws.append(await bounded("ceiling", fetch_ceiling(bootstrap, pre, settings, 120, raw=True), 150))
                c = raws[-1]
                print(
                    f"fetch-only run on the worker's consume path (raw records + GC pacing): {c.rate:,.0f} events/s "
                    f"(python CPU {c.cpu_s / (c.t_end - c.t_first):.0%})"
                )
            await redis.flushall(asynchronous=False)  # every worker run starts from empty boards
            aof_start = aof_offsets(redis_server.data_dir)
            with PySpy(args.pyspy if i == 0 else None):
                run = await bounded("worker", run_worker(bootstrap, redis_url, pre, redis, 180), 220)
            run.accounting = run_acc = minimum_writes(pre, run.reports)
            run.issued = {c: stat_delta(run.stats_before, run.stats_after, c) for c in WRITE_COMMANDS}
            want_aof = {**run.issued, "zincrby": run.issued["zincrby"] - run_acc.zero_noops}
            run.aof = await settled_aof(aof_start, redis_server.data_dir, want_aof)
            run.want_aof = want_aof
            run.exact, run.why = await exact(redis, pre)
            wruns.append(run)
            print(f"worker run: {run.rate(len(pre.events)):,.0f} events/s, exact: {run.exact}")
        wrun = max(wruns, key=lambda r: r.rate(len(pre.events)))
        issued, aof, want_aof = wrun.issued, wrun.aof, wrun.want_aof
        acc = wrun.accounting
        assert acc is not None
        is_exact, why = all(r.exact for r in wruns), "; ".join(r.why for r in wruns if not r.exact)
        all_minimal = all(r.accounting is not None and sum(r.issued.values()) == r.accounting.minimum for r in wruns)

        flushes: list[FlushRun] = []
        rb: list[float] = []
        if not args.skip_flush:
            sink = RedisSink(redis, "bench-flush")
            await flush_once(redis, sink, 1000, "warmup")  # script load, connection warm
            for i in range(3):
                flushes.append(await bounded("flush", flush_once(redis, sink, 100_000, str(i)), 60))
                await redis.delete("benchkey")
                rb.append(await asyncio.to_thread(redis_benchmark, redis_server.port))
    finally:
        await redis.aclose()

    # ------------------------------------------------------------------ print
    total_issued = sum(issued.values())
    registry_zadds = stat_delta(wrun.stats_before, wrun.stats_after, "zadd")
    ceiling = max((c.rate for c in ceilings), default=0.0)
    wrate = wrun.rate(n)
    rows: list[tuple[str, str, str, str, str]] = [
        (
            "1. worker end to end vs fetch-only ceiling (events/s)",
            fmt_rate(wrate),
            fmt_rate(ceiling),
            f"{wrate / ceiling:.2f}" if ceiling else "-",
            ">= 0.70",
        ),
    ]
    references = [
        ("1b. worker end to end vs aiokafka + orjson.loads (events/s)", decoding),
        ("1r. worker end to end vs fetch-only on the worker's consume path: raw records + GC pacing (events/s)", raws),
    ]
    for label, runs in references:
        if best := max((c.rate for c in runs), default=0.0):
            rows.append((label, fmt_rate(wrate), fmt_rate(best), f"{wrate / best:.2f}", ""))
    if flushes:
        fl = statistics.median(100_000 / f.seconds for f in flushes)
        ref = statistics.median(rb)
        rows.append(
            (
                "2. flush 100k players, RedisSink.flush vs redis-benchmark -P 1000 (/s, median of 3)",
                fmt_rate(fl),
                fmt_rate(ref),
                f"{fl / ref:.2f}",
                ">= 0.80",
            )
        )
    zincrby = issued["zincrby"]
    rows += [
        ("3a. events / ZINCRBY writes", f"{n:,} / {zincrby:,}", "", f"{n / max(1, zincrby):.2f}", ">> 1"),
        (
            "3b. events / all writes (ZINCRBY+HSET+HINCRBY)",
            f"{n:,} / {total_issued:,}",
            "",
            f"{n / max(1, total_issued):.2f}",
            ">> 1",
        ),
        (
            "3c. writes issued (commandstats) / minimum",
            f"{total_issued:,}",
            f"{acc.minimum:,}",
            f"{total_issued / max(1, acc.minimum):.4f}",
            "= 1.0",
        ),
    ]
    print()
    print("command: python -m bench.worker " + shlex.join(sys.argv[1:]))
    print(
        f"options: events={args.events} players={args.players} boards={args.boards} zipf={args.zipf} "
        f"partitions={args.partitions} seed={args.seed}"
    )
    print("\n".join(machine_info(load_at_start)))
    print(table(rows))
    print(f"exact (every worker run): {'yes' if is_exact else 'no'}" + ("" if is_exact else f" ({why})"))
    print(f"writes issued = minimum in every worker run: {'yes' if all_minimal else 'no'}")
    wrates = [r.rate(n) for r in wruns]
    crates = [c.rate for c in ceilings]
    if crates:
        mw, mc, mr = statistics.median(wrates), statistics.median(crates), statistics.median(x.rate for x in raws)
        print(
            f"median of {len(wruns)} runs: worker {mw:,.0f} vs ceiling {mc:,.0f} events/s = {mw / mc:.2f}; vs "
            f"fetch-only on the worker's consume path (raw records + GC pacing) {mr:,.0f} = {mw / mr:.2f}"
        )
    for i, (c, d, p, w) in enumerate(zip(ceilings, decoding, raws, wruns, strict=False)):
        # each quadruple ran back to back: the fairest pairing on a machine whose load drifts
        wr = w.rate(n)
        w_cpu = (n - w.first_batch) / max(1e-9, w.cpu_committed - w.cpu_first)
        c_cpu, d_cpu, p_cpu = ((x.events - x.first_batch) / max(1e-9, x.cpu_s) for x in (c, d, p))
        print(
            f"run {i + 1}: worker {wr:,.0f} / fetch-only {c.rate:,.0f} = {wr / c.rate:.2f}, / aiokafka+orjson "
            f"{d.rate:,.0f} = {wr / d.rate:.2f}, / fetch-only on the worker's consume path {p.rate:,.0f} = "
            f"{wr / p.rate:.2f}; per CPU-second of this process (less moved by other load): "
            f"worker {w_cpu:,.0f} / fetch-only {c_cpu:,.0f} = {w_cpu / c_cpu:.2f}, / aiokafka+orjson {d_cpu:,.0f} = "
            f"{w_cpu / d_cpu:.2f}, / worker's consume path {p_cpu:,.0f} = {w_cpu / p_cpu:.2f}"
        )
    if not args.skip_callgrind:
        print("\n".join(await asyncio.to_thread(fold_cost.figures, FOLD_EVENTS, MEMORY_PAIRS)))
        print("\n".join(await asyncio.to_thread(fetch_cost.figures, FOLD_EVENTS)))
    # ------------------------------------------------------------------ details
    print("details:")
    for i, c in enumerate(ceilings):
        print(
            f"  ceiling run {i + 1}: {c.rate:,.0f} ev/s over {c.t_end - c.t_first:.2f}s (first batch {c.first_batch}"
            f" excluded, python CPU {c.cpu_s / (c.t_end - c.t_first):.0%});"
            f" highwater matches publish: {all(c.highwater[p] == pre.end(p) for p in pre.by_partition)};"
            f" offset/key spot checks: {'ok' if not c.problems else c.problems}"
        )
    for i, c in enumerate(raws):
        print(
            f"  ceiling run {i + 1} on the worker's consume path (raw records + GC pacing): {c.rate:,.0f} ev/s over "
            f"{c.t_end - c.t_first:.2f}s (python CPU {c.cpu_s / (c.t_end - c.t_first):.0%});"
            f" highwater matches publish: {all(c.highwater[p] == pre.end(p) for p in pre.by_partition)};"
            f" offset/key spot checks: {'ok' if not c.problems else c.problems}"
        )
    span = wrun.t_committed - wrun.t_first
    worker_cpu = (wrun.cpu_committed - wrun.cpu_first) / span
    fetch_rate = (n - wrun.first_batch) / max(1e-9, wrun.t_last_fetch - wrun.t_first)
    print(
        f"  worker: {span:.2f}s first record -> covering commit; last record fetched at "
        f"+{wrun.t_last_fetch - wrun.t_first:.2f}s (fetch+fold rate {fetch_rate:,.0f} ev/s), "
        f"covering flush at +{wrun.t_flushed - wrun.t_first:.2f}s; {len(wrun.reports)} flushes, "
        f"fenced={wrun.fenced} failed={wrun.failed}; python CPU {worker_cpu:.0%} of wall"
    )
    flush_s = [r.duration_s for _, r in wrun.reports]
    if flush_s:
        print(
            f"  worker flush durations: median {statistics.median(flush_s) * 1000:.0f} ms,"
            f" max {max(flush_s) * 1000:.0f} ms;"
            f" entries per flush: {[r.entries for _, r in wrun.reports]}"
        )
    print(
        f"  writes issued by command (commandstats delta): {issued}; plus ZADD {keys.BOARD_INDEX_KEY}={registry_zadds}"
        f" (board registry, once per new board per process; not in the minimum); Lua inner calls counted in"
        f" commandstats: {lua_counted}"
    )
    if aof is not None:
        aof_w = {c: aof.get(c, 0) for c in WRITE_COMMANDS}
        print(
            f"  AOF cross-check (script effects as replicated): {aof_w}; equals commandstats minus {acc.zero_noops}"
            f" ZINCRBY-by-0 no-ops on existing members (not replicated by Redis): {aof_w == want_aof}"
        )
    else:
        print("  AOF cross-check: unavailable (no multi-part AOF or it was rewritten during the run)")
    worker_writes = sum(r.writes for _, rep in wrun.reports for r in rep.results)
    print(
        f"  minimum: {acc.min_pairs:,} distinct board-player pairs per flush + {acc.min_bookkeeping:,} bookkeeping "
        f"({BOOKKEEPING_WRITES_PER_BOARD} per board batch, {CHECKPOINT_WRITES_PER_PARTITION} per partition checkpoint "
        f"per flush); reports cover every partition end: {acc.covered_ok}; "
        f"boards per flush match: {acc.boards_match}; worker's own ZINCRBY count {worker_writes:,}"
    )
    for i, (f, r) in enumerate(zip(flushes, rb, strict=True)):
        print(
            f"  flush run {i + 1}: {f.seconds * 1000:.0f} ms ({100_000 / f.seconds:,.0f}/s); of which arg build "
            f"~{f.build_s * 1000:.0f} ms, EVALSHA inside Redis {f.redis_usec / 1000:.0f} ms; redis-benchmark {r:,.0f}/s"
        )
    print(f"  total bench time {time.monotonic() - t_start:.0f}s")
    ok = is_exact and all_minimal and acc.covered_ok
    return 0 if ok else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.worker", description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--players", type=int, default=100_000)
    ap.add_argument("--boards", type=int, default=4)
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=3, help="alternating fetch-only and worker runs; best of each")
    ap.add_argument("--skip-ceiling", action="store_true", help="profiling runs: worker phase only")
    ap.add_argument("--skip-flush", action="store_true", help="profiling runs: no flush-rate section")
    ap.add_argument(
        "--gc-freeze",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep the benchmark's own copy of the events out of the cyclic GC (on by default: it is in neither "
        "system under test; --no-gc-freeze: as recorded before the worker paced its collector)",
    )
    ap.add_argument("--skip-callgrind", action="store_true", help="no fold instruction counts, no memory figure")
    ap.add_argument("--pyspy", metavar="FILE", help="py-spy raw stacks of the worker phase (perturbs figures)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="hotboard-bench-") as tmp:
        kafka = KafkaBroker(free_port(), Path(tmp))
        redis_dir = Path(tmp) / "redis"
        redis_dir.mkdir()
        redis_server = RedisServer(free_port(), redis_dir)
        try:
            kafka.start()
            redis_server.start()
            return asyncio.run(bench(args, kafka, redis_server))
        finally:
            redis_server.stop()
            kafka.stop()


if __name__ == "__main__":
    sys.exit(main())
