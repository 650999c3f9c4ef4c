"""``hotboard dlq``: read the dead-letter topic, each letter with why it was refused and where it came from.

A letter (:mod:`ingest.dlq`) is the original record plus hotboard's headers: the reason (``hotboard-error``),
the source ``topic:partition:offset`` (``hotboard-source``), and, when the value or key had to be cut, their
original size and digest. This reads from the beginning, outside any consumer group, and commits nothing:
reading never moves anyone's position.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from contextlib import AsyncExitStack
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from cli.exits import EXIT_NOT_FOUND, EXIT_OK, EXIT_UNAVAILABLE
from cli.kafka_cli import add_kafka_options, run_kafka
from cli.options import settings_from
from hotboard import logs
from hotboard.safe_text import escape
from ingest import dlq
from ingest.kafka_config import reader_config, start_clients
from ingest.settings import WorkerSettings

#: Characters of a letter's value shown in the text form (``--json`` shows all of it).
SHOWN_VALUE_CHARS = 200
FETCH_WAIT_MS = 500


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "dlq",
        help="show the dead letters: each refused record with its reason and source",
        description="Print every letter of the dead-letter topic (<topic>.dlq unless --dlq-topic): source "
        "topic:partition:offset, the reason, key and value. Reads from the start, commits nothing.",
    )
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new letters until Ctrl-C")
    p.add_argument("--json", action="store_true", help="one JSON object per letter, the whole value in it")
    add_kafka_options(p, "dlq_topic")
    p.set_defaults(run=cmd_dlq)


def cmd_dlq(args: argparse.Namespace) -> int:
    settings = settings_from(WorkerSettings, args)
    return run_kafka("dlq", lambda: _read(settings, follow=args.follow, as_json=args.json))


async def _read(s: WorkerSettings, *, follow: bool, as_json: bool) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with AsyncExitStack() as stack:
        consumer = AIOKafkaConsumer(**reader_config(s))
        await start_clients(stack, [consumer], s.kafka, s.kafka_start_timeout_s, s)
        await consumer.topics()  # metadata of every topic, so the next line can answer
        partitions = consumer.partitions_for_topic(s.dlq)
        if not partitions:
            said = f"no topic {s.dlq!r} at {s.kafka} (see --topic, --dlq-topic)"
            return logs.command_failed("dlq", said, exit_code=EXIT_NOT_FOUND)
        tps = [TopicPartition(s.dlq, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        progress = time.monotonic()
        while not stop.is_set():
            fetched = await consumer.getmany(timeout_ms=FETCH_WAIT_MS)
            for records in fetched.values():
                for record in records:
                    print(_json(record) if as_json else _line(record), flush=follow)
                progress = time.monotonic()
            if follow:
                continue
            if all([await _caught_up(consumer, tp, ends[tp]) for tp in tps]):
                return EXIT_OK
            if time.monotonic() - progress > s.kafka_start_timeout_s:
                said = f"Kafka at {s.kafka} stopped delivering {s.dlq}"
                return logs.command_failed("dlq", said, exit_code=EXIT_UNAVAILABLE)
    return EXIT_OK


async def _caught_up(consumer: AIOKafkaConsumer, tp: TopicPartition, end: int) -> bool:
    """Past the end read at start; and past the high watermark once a fetch has told it (some brokers answer
    ``end_offsets`` with the base offset of the last batch, not the log end)."""
    position = await consumer.position(tp)
    highwater = consumer.highwater(tp)
    return bool(position >= end and (highwater is None or position >= highwater))


def _headers(record: Any) -> dict[str, str]:
    return {name: bytes(value or b"").decode("utf-8", "backslashreplace") for name, value in record.headers or ()}


def _line(record: Any) -> str:
    """``source  reason: detail  key=...  value=...`` on one line, control characters escaped."""
    headers = _headers(record)
    value = (record.value or b"").decode("utf-8", "backslashreplace")
    if len(value) > SHOWN_VALUE_CHARS:
        value = f"{value[:SHOWN_VALUE_CHARS]}... ({len(record.value)} bytes)"
    if dlq.VALUE_SIZE_HEADER in headers:
        value += f" (cut from {headers[dlq.VALUE_SIZE_HEADER]} bytes)"
    key = (record.key or b"").decode("utf-8", "backslashreplace") if record.key is not None else "-"
    source = headers.get(dlq.SOURCE_HEADER, "?")
    error = headers.get(dlq.ERROR_HEADER, "? (no reason header: not written by hotboard)")
    return "  ".join(escape(part) for part in (source, error, f"key={key}", f"value={value}"))


def _json(record: Any) -> str:
    headers = _headers(record)
    error = headers.get(dlq.ERROR_HEADER)
    return json.dumps(
        {
            "source": headers.get(dlq.SOURCE_HEADER),
            "reason": error.split(":", 1)[0] if error else None,
            "error": error,
            "key": None if record.key is None else record.key.decode("utf-8", "backslashreplace"),
            "value": None if record.value is None else record.value.decode("utf-8", "backslashreplace"),
            "headers": headers,
            "dlq_partition": record.partition,
            "dlq_offset": record.offset,
        },
        separators=(",", ":"),
    )
