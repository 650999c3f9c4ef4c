"""Instructions per event of consuming a fixed fetch, and of consuming and folding it, counted by callgrind: the
Kafka client's own share of the worker's cost, which :mod:`bench.fold_cost` leaves out.

A fixed fetch: the ``incr`` events of :mod:`bench.fold_cost` keyed to 8 partitions and written as producer batches
(``cli.loadgen.BATCH_EVENTS`` records a batch, uncompressed), one fetch response per partition holding all its
batches. What is counted is what ``getmany`` does with them once they arrived: the fetcher's ``PartitionRecords``
(the record batches parsed by the client's C parser, CRCs checked, committed reads only) drained by its
``fetched_records`` in calls of ``max_poll_records`` records, exactly as the worker's consumer does (the socket
read and the response decoding are not in it); with ``--fold``, each call's records then go through the worker's
fold (:meth:`ingest.intake.Intake.fold`, as :mod:`bench.fold_cost` counts it). Two kinds of records: ``stock``, a
``ConsumerRecord`` built per record (aiokafka as shipped), and ``raw``, the parsed records the worker's consumer
hands over (:mod:`ingest.raw_records`). Both run at the cyclic collector's pace of a running worker
(:mod:`ingest.gc_pacing`).

    python -m bench.fetch_cost [--events 20000] [--records stock|raw]... [--fold]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import struct
import sys
import zlib
from collections import OrderedDict
from typing import Any

from aiokafka import TopicPartition
from aiokafka.consumer import fetcher
from aiokafka.consumer.subscription_state import SubscriptionState
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords

from bench.fold_cost import PARTITIONS, TOPIC, TS_MS, callgrind, collected, events, intake, run_sync
from cli.loadgen import BATCH_EVENTS
from hotboard.codec import encode
from ingest import gc_pacing, raw_records
from ingest.settings import WorkerSettings

KINDS = ("stock", "raw")
TPS = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
#: Per fetch call, as the worker asks.
MAX_RECORDS = WorkerSettings().max_poll_records


def record_sets(count: int, seed: int, first_offset: dict[int, int]) -> dict[int, bytes]:
    """partition -> the bytes of one fetch response's record set: ``count`` events keyed by player, in batches
    of ``BATCH_EVENTS`` records, offsets continuing from ``first_offset`` (advanced)."""
    keyed: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(PARTITIONS)}
    for e in events("incr", count, seed=seed):
        key = e.player.encode()
        keyed[zlib.crc32(key) % PARTITIONS].append((key, encode(e)))
    out: dict[int, bytes] = {}
    for p, records in keyed.items():
        data = bytearray()
        for start in range(0, len(records), BATCH_EVENTS):
            builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
            chunk = records[start : start + BATCH_EVENTS]
            for delta, (key, value) in enumerate(chunk):
                assert builder.append(delta, timestamp=TS_MS, key=key, value=value, headers=[]) is not None
            batch = builder.build()
            batch[0:8] = struct.pack(">q", first_offset[p])  # the base offset: outside the CRC, as a broker sets it
            first_offset[p] += len(chunk)
            data += batch
        out[p] = bytes(data)
    return out


class Consumer:
    """The fetcher side of a consumer assigned every partition at offset 0: ``fetched(sets)`` buffers one fetch
    response per partition as the fetcher's ``_proc_fetch_request`` does; ``drain()`` is what ``getmany`` returns,
    call after call, until the buffer is empty."""

    def __init__(self, kind: str) -> None:
        raw_records.install()
        self._value_deserializer = raw_records.keep_bytes if kind == "raw" else None
        self.subscription = SubscriptionState()
        self.subscription.assign_from_user(set(TPS))
        for tp in TPS:
            self.subscription.seek(tp, 0)
        # a fetcher without its client and background fetches: only what fetched_records reads
        self.fetcher: Any = fetcher.Fetcher.__new__(fetcher.Fetcher)
        self.fetcher._subscriptions = self.subscription
        self.fetcher._records = OrderedDict()
        self.fetcher._wait_consume_future = None
        self.fetcher._closed = False

    def fetched(self, sets: dict[int, bytes]) -> None:
        assignment = self.subscription.subscription.assignment
        for p, data in sets.items():
            tp = TPS[p]
            records = fetcher.PartitionRecords(
                tp,
                MemoryRecords(data),
                [],
                assignment.state_value(tp).position,
                None,
                self._value_deserializer,
                True,
                fetcher.READ_COMMITTED,
            )
            self.fetcher._records[tp] = fetcher.FetchResult(
                tp, assignment=assignment, partition_records=records, backoff=0
            )

    def drain(self) -> list[dict[TopicPartition, list[Any]]]:
        out = []
        while self.fetcher._records:
            box: list[dict[TopicPartition, list[Any]]] = []
            run_sync(self._getmany(box))
            out.append(box[0])
        return out

    async def _getmany(self, box: list[dict[TopicPartition, list[Any]]]) -> None:
        box.append(await self.fetcher.fetched_records((), timeout=0, max_records=MAX_RECORDS))


def inner(kind: str, count: int, fold: bool) -> None:
    async def main() -> None:  # the subscription's futures want a running loop; nothing below awaits
        offsets = dict.fromkeys(range(PARTITIONS), 0)
        warm, measured = record_sets(2000, 1, offsets), record_sets(count, 0, offsets)
        consumer, it = Consumer(kind), intake("incr")
        consumer.fetched(warm)
        for batch in consumer.drain():
            run_sync(it.fold(batch))
        consumer.fetched(measured)
        calls: list[dict[TopicPartition, list[Any]]] = []

        def body() -> None:
            for batch in consumer.drain():
                if fold:
                    run_sync(it.fold(batch))
                calls.append(batch)

        collected(body)
        got = sum(len(records) for batch in calls for records in batch.values())
        kinds = {type(r).__name__ for batch in calls for records in batch.values() for r in records}
        folded = sum(f.events for w in (it._pending.active, *it._pending.sealed) for f in w.folds.values())
        print(f"consumed {got} as {','.join(sorted(kinds))} in {len(calls)} calls; folded {folded}")

    with gc_pacing.worker_pace(MAX_RECORDS):  # the collector's pace of a running worker, for either kind
        asyncio.run(main())


def count_instructions(kind: str, count: int, fold: bool) -> tuple[float, str]:
    """(instructions per event, what was consumed) of consuming ``count`` events as ``kind`` records."""
    args = ["--inner", "--records", kind, "--events", str(count), *(["--fold"] if fold else [])]
    total, stdout = callgrind("bench.fetch_cost", *args)
    return total / count, re.findall(r"^consumed .*$", stdout, re.MULTILINE)[-1]


def figures(events: int) -> list[str]:
    """The benchmark's lines: instructions per event of consuming, and of consuming and folding, either kind."""
    lines = [f"fetch cost (python -m bench.fetch_cost [--fold], callgrind, {events:,} fixed events after a warm-up):"]
    for fold in (False, True):
        per = {kind: count_instructions(kind, events, fold)[0] for kind in KINDS}
        lines.append(
            f"  instructions per event, {'consume + fold' if fold else 'consume'}: {per['stock']:,.0f} with a "
            f"ConsumerRecord per record (stock), {per['raw']:,.0f} with the parsed records (the worker's), "
            f"{per['raw'] / per['stock']:.2f}x"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fetch_cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--records", choices=KINDS, action="append")
    ap.add_argument("--fold", action="store_true", help="also fold every call's records (the worker's intake)")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    kinds = args.records or list(KINDS)
    if args.inner:
        inner(kinds[0], args.events, args.fold)
        return 0
    what = "consume + fold" if args.fold else "consume"
    for kind in kinds:
        per_event, consumed = count_instructions(kind, args.events, args.fold)
        print(f"{what} instructions per event ({kind} records, {args.events:,} events, callgrind): {per_event:,.0f}")
        print(f"  {consumed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
