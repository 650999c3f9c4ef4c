"""Instructions per event of the worker's fold on a fixed batch, counted by callgrind: a figure this noisy
shared machine cannot move (wall-clock rates move by +-20% from run to run; instruction counts do not).

What is counted is :meth:`ingest.intake.Intake.fold` (the intake's hot path: the header check, the chunked
steady fold, and for declared boards the checked fold, the period routing and the definitions) on
``--events`` fixed records in getmany-sized batches over 8 partitions, after a warm-up batch has looked up every
board's definition and watermark (a steady worker has), at the cyclic collector's pace of a running worker
(:mod:`ingest.gc_pacing`). The Kafka client's own record building is not in it (the
fetch-only ceiling measures that). Two cases: ``incr``, 4 undeclared boards of plain ``incr`` events (the
benchmark's load), and ``mix``, declared boards of every kind (``best``, ``dense``, ``earliest``, a weekly
seasonal board) beside a plain one.

    python -m bench.fold_cost [--events 20000] [--case incr|mix]...
    python -m bench.fold_cost --memory 1000000   # RSS per million pending board-player pairs

Instrumentation and collection are switched on only around the measured call (callgrind's client requests,
compiled with gcc into a small library loaded through ctypes), so interpreter start-up, imports and the warm-up
are neither counted nor slowed down by the instrumentation.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import os
import re
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Callable, Collection, Coroutine
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from cli.loadgen import generate
from flusher.batch import NO_WATERMARK
from hotboard.board_store import Found
from hotboard.boards import BoardDef
from hotboard.codec import Event, encode
from hotboard.timing import Backoff
from ingest import gc_pacing
from ingest.assignment import Assignment
from ingest.intake import Intake
from ingest.metrics import WorkerMetrics
from ingest.pending import Pending
from ingest.redis_health import RedisHealth
from ingest.settings import WorkerSettings

TOPIC = "fold-cost"
PARTITIONS = 8
#: Records per getmany, as the worker asks for (``max_poll_records``).
BATCH = 5000
#: A fixed event time and record time (2026-12-01T12:00Z): a fixed input, and inside a weekly period.
TS_MS = 1_796_126_400_000
CASES = ("incr", "mix")
CASE_NAMES = {"incr": "4 undeclared boards, plain incr", "mix": "plain, best, dense, earliest, weekly seasonal"}
#: The mix: board -> definition (None: undeclared, plain incr).
MIX: dict[str, BoardDef | None] = {
    "plain": None,
    "high": BoardDef(operator="best"),
    "dense": BoardDef(ties="dense"),
    "early": BoardDef(ties="earliest"),
    "weekly": BoardDef(reset="weekly"),
}


def events(case: str, count: int, seed: int = 0) -> list[Event]:
    """``count`` Zipf-skewed events of ``case`` (deterministic: same seed, same bytes)."""
    if case == "incr":
        return [e._replace(ts_ms=TS_MS) for e in generate(count, players=100_000, boards=4, seed=seed)]
    names = list(MIX)
    out = []
    for i, e in enumerate(generate(count, players=100_000, boards=1, seed=seed)):
        board = names[i % len(names)]
        if board == "high":
            out.append(Event(board, e.player, None, TS_MS, score=abs(e.delta or 0)))
        else:
            out.append(Event(board, e.player, e.delta, TS_MS))
    return out


def batches(evs: list[Event], first_offset: dict[int, int]) -> list[dict[TopicPartition, list[Any]]]:
    """The events as getmany would return them: keyed by player to 8 partitions, ``BATCH`` records a call."""
    out: list[dict[TopicPartition, list[Any]]] = []
    for start in range(0, len(evs), BATCH):
        batch: dict[TopicPartition, list[Any]] = {}
        for e in evs[start : start + BATCH]:
            p = zlib.crc32(e.player.encode()) % PARTITIONS
            value = encode(e)
            offset = first_offset[p]
            first_offset[p] += 1
            record = ConsumerRecord(
                TOPIC, p, offset, TS_MS, 0, e.player.encode(), value, None, len(e.player), len(value), ()
            )
            batch.setdefault(TopicPartition(TOPIC, p), []).append(record)
        out.append(batch)
    return out


class _Sink:
    """Redis as a steady worker finds it: definitions as declared, no watermark anywhere, checkpoints at -1."""

    def __init__(self, defs: dict[str, BoardDef]) -> None:
        self.defs = defs

    async def load_watermarks(self, partition: int, boards: Collection[str]) -> tuple[dict[str, int], int]:
        return dict.fromkeys(boards, NO_WATERMARK), NO_WATERMARK

    async def load_declared(self, boards: Collection[str]) -> dict[str, Found]:
        return {b: self.defs.get(b) for b in boards}


class _Consumer:
    def pause(self, *tps: TopicPartition) -> None: ...
    def resume(self, *tps: TopicPartition) -> None: ...
    def seek(self, tp: TopicPartition, offset: int) -> None:
        raise AssertionError("the fold cost run never seeks")


def intake(case: str) -> Intake:
    """A real :class:`Intake` on fakes of the consumer and of Redis, every partition positioned at 0."""
    settings = WorkerSettings(topic=TOPIC, metrics_port=0)
    defs = {b: d for b, d in MIX.items() if d is not None} if case == "mix" else {}
    sink: Any = _Sink(defs)
    consumer: Any = _Consumer()
    metrics = WorkerMetrics()
    assignment = Assignment(settings, consumer, sink, metrics)
    assignment.add([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    for p in range(PARTITIONS):
        assignment.parts[p].positioned(NO_WATERMARK, 0)
    return Intake(settings, consumer, assignment, Pending(), sink, metrics, asyncio.Event(), Backoff(), RedisHealth())


def run_sync(coro: Coroutine[Any, Any, None]) -> None:
    """Drive a coroutine that never really waits (the fakes answer at once) without an event loop."""
    try:
        coro.send(None)
    except StopIteration:
        return
    raise AssertionError("the fold waited on something")


def prepared(case: str, count: int) -> tuple[Intake, list[dict[TopicPartition, list[Any]]]]:
    """The intake after a warm-up batch (every board looked up), and the measured batches."""
    offsets = dict.fromkeys(range(PARTITIONS), 0)
    warm = batches(events(case, 2000, seed=1), offsets)
    measured = batches(events(case, count), offsets)
    it = intake(case)
    for b in warm:
        run_sync(it.fold(b))
    return it, measured


def fold_all(it: Intake, measured: list[dict[TopicPartition, list[Any]]]) -> None:
    for b in measured:
        run_sync(it.fold(b))


#: Callgrind's client requests (valgrind/callgrind.h ships with valgrind), compiled once per run.
_REQUESTS = """#include <valgrind/callgrind.h>
void hb_collect_on(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_TOGGLE_COLLECT; }
void hb_collect_off(void) { CALLGRIND_TOGGLE_COLLECT; CALLGRIND_STOP_INSTRUMENTATION; }
"""


def collected(body: Callable[[], None]) -> None:
    """Run ``body`` with callgrind instrumenting and counting (it starts with both off: start-up, imports and
    the warm-up run at valgrind's plain speed and are not counted). Outside valgrind the requests are no-ops."""
    with tempfile.TemporaryDirectory(prefix="fold-cost-") as tmp:
        src, lib = Path(tmp) / "requests.c", Path(tmp) / "requests.so"
        src.write_text(_REQUESTS)
        subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(lib), str(src)], check=True, timeout=60)
        requests = ctypes.CDLL(str(lib))
    requests.hb_collect_on()
    try:
        body()
    finally:
        requests.hb_collect_off()


def inner(case: str, count: int) -> None:
    with gc_pacing.worker_pace(BATCH):  # the collector's pace of a running worker
        it, measured = prepared(case, count)
        collected(lambda: fold_all(it, measured))
    folded = sum(f.events for w in (it._pending.active, *it._pending.sealed) for f in w.folds.values())
    print(f"folded {folded}")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def pending_memory(pairs: int, boards: int = 10) -> tuple[int, int]:
    """(pending board-player pairs, resident bytes they added) after folding ``pairs`` distinct pairs (``boards``
    boards x ``pairs / boards`` players) through the intake, in chunks so the records themselves come and go.
    What pymalloc keeps of the freed records and parses after the fold counts too: this is what a worker holds."""
    it = intake("incr")
    offsets = dict.fromkeys(range(PARTITIONS), 0)
    players = pairs // boards
    names = [f"guild-{b}" for b in range(boards)]
    chunk = 50_000
    gc.collect()
    before = rss_bytes()
    for start in range(0, players * boards, chunk):
        evs = [Event(names[i % boards], f"p-{i // boards}", 1 + i % 7, TS_MS) for i in range(start, start + chunk)]
        for b in batches(evs, offsets):
            run_sync(it.fold(b))
        del evs
    gc.collect()
    return it._pending.entries, rss_bytes() - before


def callgrind(module: str, *args: str) -> tuple[int, str]:
    """(instructions counted, stdout) of ``python -m module args`` under callgrind, which counts only where the
    program calls :func:`collected` (a fixed hash seed: the same input gives the same count)."""
    with tempfile.TemporaryDirectory(prefix="fold-cost-") as tmp:
        out = Path(tmp) / "callgrind.out"
        cmd = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            "--collect-atstart=no",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-m",
            module,
            *args,
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"callgrind run failed: {proc.stderr[-2000:]}")
        totals = re.findall(r"^(?:summary|totals): (\d+)", out.read_text(), re.MULTILINE)
        return int(totals[-1]), proc.stdout


def count_instructions(case: str, count: int) -> tuple[float, int]:
    """(instructions per event, events folded) of ``case`` under callgrind."""
    total, stdout = callgrind("bench.fold_cost", "--inner", "--case", case, "--events", str(count))
    return total / count, int(re.findall(r"folded (\d+)", stdout)[-1])


def figures(events: int, pairs: int) -> list[str]:
    """The benchmark's lines: instructions per event of each case, and the memory of ``pairs`` pending pairs
    (measured in a fresh process, so nothing else of the benchmark's heap is in it)."""
    lines = [f"fold cost (python -m bench.fold_cost, callgrind, {events:,} fixed events after a warm-up):"]
    for case in CASES:
        per_event, _ = count_instructions(case, events)
        lines.append(f"  instructions per event, {case} ({CASE_NAMES[case]}): {per_event:,.0f}")
    memory = subprocess.run(
        [sys.executable, "-m", "bench.fold_cost", "--memory", str(pairs)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    lines.append(f"  {memory.stdout.strip()} (python -m bench.fold_cost --memory {pairs})")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fold_cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--case", choices=CASES, action="append")
    ap.add_argument("--memory", type=int, metavar="PAIRS", help="RSS of PAIRS pending board-player pairs instead")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.memory:
        entries, rss = pending_memory(args.memory)
        print(
            f"pending memory: {entries:,} board-player pairs pending, RSS +{rss / 2**20:,.0f} MiB = "
            f"{rss / 2**20 / (entries / 1e6):,.0f} MiB per million pairs"
        )
        return 0
    cases = args.case or list(CASES)
    if args.inner:
        inner(cases[0], args.events)
        return 0
    for case in cases:
        per_event, folded = count_instructions(case, args.events)
        print(
            f"fold instructions per event ({case}, {args.events:,} events, callgrind): {per_event:,.0f}"
            f" ({folded:,} folded)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
