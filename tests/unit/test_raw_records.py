"""The seam on the Kafka client's fetcher (:mod:`ingest.raw_records`): the shape of the aiokafka internals it relies
on, and that the worker's records are the stock records' fields exactly, with the same positions after every
fetch call, for every kind of record set: codecs, transactions (aborted ones and control batches skipped), a fetch
offset inside a batch, the old message format, max_records splits, the lenient parser, a bad CRC, seek and pause."""

from __future__ import annotations

import inspect
import re
import struct
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiokafka
import pytest
from aiokafka import TopicPartition
from aiokafka.consumer import fetcher
from aiokafka.consumer.subscription_state import SubscriptionState
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import calc_crc32c
from aiokafka.structs import ConsumerRecord

from ingest import raw_records
from ingest.kafka_config import consumer_config
from ingest.lenient_records import _LenientMemoryRecords, unreadable_header
from ingest.settings import WorkerSettings
from tests.integration.aborting_broker import ABORT, COMMIT, marker

TP = TopicPartition("scores", 3)
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_installed_client_is_inside_the_pinned_range() -> None:
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    spec = next(d for d in deps if d.startswith("aiokafka"))
    low, high = re.findall(r">=([\d.]+),<([\d.]+)", spec)[0]
    version = tuple(int(x) for x in aiokafka.__version__.split(".")[:2])
    assert tuple(int(x) for x in low.split(".")) <= version < tuple(int(x) for x in high.split(".")), spec
    assert high == "0.15", "widen the pin only after checking the fetcher's shape (ingest/raw_records.py)"


def test_the_fetcher_internals_have_the_shape_the_seam_relies_on() -> None:
    """Fails loudly when an aiokafka release moves what ``ingest/raw_records.py`` replaces or overrides."""
    expected = [
        "tp",
        "records",
        "aborted_transactions",
        "fetch_offset",
        "key_deserializer",
        "value_deserializer",
        "check_crcs",
        "isolation_level",
    ]
    assert list(inspect.signature(raw_records.STOCK.__init__).parameters)[1:] == expected
    assert list(inspect.signature(raw_records.partition_records).parameters) == expected
    # the fetcher builds it by its module-global name, at call time: install() reaches it
    assert "PartitionRecords" in fetcher.Fetcher._proc_fetch_request.__code__.co_names
    # the per-record copy is a method the generator calls, the generator is kept in _records_iterator
    assert "_consumer_record" in raw_records.STOCK._unpack_records.__code__.co_names
    assert "_unpack_records" in raw_records.STOCK.__init__.__code__.co_names
    assert "_records_iterator" in raw_records.STOCK.__init__.__code__.co_names
    # getall iterates the partition records (for ... in), getone calls next() on them
    assert "_partition_records" in fetcher.FetchResult.getall.__code__.co_names
    assert "ConsumerRecord" in raw_records.STOCK._consumer_record.__code__.co_names


def test_the_worker_consumer_is_marked_and_only_it() -> None:
    assert consumer_config(WorkerSettings())["value_deserializer"] is raw_records.keep_bytes
    assert raw_records.keep_bytes(b"x") == b"x" and raw_records.keep_bytes(None) is None


# ---------------------------------------------------------------- record sets


def batch(
    base: int,
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]],
    *,
    codec: int = 0,
    producer_id: int = -1,
    control: bool = False,
) -> bytes:
    txn = producer_id >= 0
    builder = DefaultRecordBatchBuilder(2, codec, int(txn), producer_id, 0 if txn else -1, 0 if txn else -1, 1 << 22)
    for i, (key, value, headers) in enumerate(records):
        assert builder.append(i, timestamp=1_700_000_000_000 + i, key=key, value=value, headers=headers) is not None
    buf = builder.build()
    buf[0:8] = struct.pack(">q", base)
    if control:
        buf[21:23] = struct.pack(">h", struct.unpack(">h", buf[21:23])[0] | 0x20)
        buf[17:21] = calc_crc32c(bytes(buf[21:])).to_bytes(4, "big")
    return bytes(buf)


def events(tag: str, count: int) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    return [
        (f"{tag}{i}".encode(), b'{"player":"%s%d","delta":1}' % (tag.encode(), i), [("h", b"%d" % i)] if i % 3 else [])
        for i in range(count)
    ]


def legacy(base: int, count: int, codec: int) -> bytes:
    """An old-format (v1) compressed message set: its inner offsets start at ``base``."""
    builder = LegacyRecordBatchBuilder(1, codec, 1 << 22)
    for i in range(count):
        builder.append(i, timestamp=1_700_000_000_000, key=b"k%d" % i, value=b"v%d" % i)
    buf = builder.build()
    buf[0:8] = struct.pack(">q", base + count - 1)  # a wrapper message's offset is its last inner offset
    return bytes(buf)


def transactions() -> tuple[bytes, list[tuple[int, int]], set[int]]:
    """(record set, aborted transactions, offsets a committed read returns)."""
    parts = [
        batch(0, events("a", 4)),
        batch(4, events("x", 5), codec=3, producer_id=11),  # aborted
        batch(9, events("b", 2)),  # a plain batch inside the open transaction
        batch(11, [(*marker(ABORT), [])], producer_id=11, control=True),
        batch(12, events("c", 3), codec=1, producer_id=12),  # committed
        batch(15, [(*marker(COMMIT), [])], producer_id=12, control=True),
        batch(16, events("d", 2)),
    ]
    return b"".join(parts), [(11, 4)], {0, 1, 2, 3, 9, 10, 12, 13, 14, 16, 17}


def plain() -> bytes:
    return b"".join(batch(b * 10, events(f"p{b}-", 10), codec=b % 5) for b in range(5))


# ---------------------------------------------------------------- both kinds, side by side


def consume(
    data: bytes,
    value_deserializer: Any,
    *,
    fetch_offset: int = 0,
    aborted: list[tuple[int, int]] | None = None,
    max_records: int | None = None,
    memory: Callable[[bytes], Any] = MemoryRecords,
    between: Callable[[SubscriptionState, int], None] | None = None,
) -> tuple[list[Any], list[tuple[int, int | None]]]:
    """Every record the fetcher path hands over, and (records, position) after each getall call."""
    raw_records.install()
    subscription = SubscriptionState()
    subscription.assign_from_user({TP})
    subscription.seek(TP, fetch_offset)
    assignment = subscription.subscription.assignment
    records = fetcher.PartitionRecords(
        TP, memory(data), aborted, fetch_offset, None, value_deserializer, True, fetcher.READ_COMMITTED
    )
    result = fetcher.FetchResult(TP, assignment=assignment, partition_records=records, backoff=0)
    got: list[Any] = []
    calls: list[tuple[int, int | None]] = []
    for call in range(1000):
        if not result.has_more():
            break
        if between is not None:
            between(subscription, call)
        part = result.getall(max_records)
        got += part
        state = assignment.state_value(TP)
        calls.append((len(part), state.position if state.has_valid_position else None))
    return got, calls


def fields(records: list[Any]) -> list[tuple[Any, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


def same_both_ways(data: bytes, **kw: Any) -> list[Any]:
    stock, stock_calls = consume(data, None, **kw)
    raw, raw_calls = consume(data, raw_records.keep_bytes, **kw)
    assert all(type(r) is ConsumerRecord for r in stock)
    assert raw and not any(isinstance(r, ConsumerRecord) for r in raw)
    assert fields(raw) == fields(stock)
    assert raw_calls == stock_calls
    return raw


async def test_plain_batches_of_every_codec_come_out_the_same_with_headers() -> None:
    raw = same_both_ways(plain())
    assert [r.offset for r in raw] == list(range(50))
    assert raw[1].headers == [("h", b"1")]


@pytest.mark.parametrize("max_records", [None, 1, 7, 5000])
async def test_committed_reads_skip_aborted_and_control_batches_alike(max_records: int | None) -> None:
    data, aborted, committed = transactions()
    raw = same_both_ways(data, aborted=aborted, max_records=max_records)
    assert {r.offset for r in raw} == committed
    _, calls = consume(data, raw_records.keep_bytes, aborted=aborted, max_records=max_records)
    assert calls[-1][1] == 18, "the position passes the last batch"


@pytest.mark.parametrize("codec", list(CODECS.values()))
async def test_a_fetch_offset_inside_a_batch_skips_what_precedes_it(codec: int) -> None:
    data = batch(100, events("m", 20), codec=codec)
    assert [r.offset for r in same_both_ways(data, fetch_offset=113)] == list(range(113, 120))


@pytest.mark.parametrize("codec", [1, 2, 3])
async def test_old_format_compressed_message_sets_come_out_the_same(codec: int) -> None:
    data = legacy(40, 6, codec) + legacy(46, 4, codec)
    assert [r.offset for r in same_both_ways(data, fetch_offset=43, max_records=3)] == list(range(43, 50))


async def test_the_lenient_parser_behind_the_seam_keeps_unreadable_names_visible() -> None:
    good = batch(0, [(b"k", b"v", [("XX", b"1")]), (b"k2", b"v2", [])])
    data = good.replace(b"XX", b"\xff\xfe")
    data = data[:17] + calc_crc32c(data[21:]).to_bytes(4, "big") + data[21:]
    raw = same_both_ways(data, memory=_LenientMemoryRecords)
    assert unreadable_header(raw[0]) == "fffe" and unreadable_header(raw[1]) is None


async def test_a_bad_crc_raises_the_same_either_way() -> None:
    data = bytearray(plain())
    data[100] ^= 0xFF
    for deserializer in (None, raw_records.keep_bytes):
        with pytest.raises(CorruptRecordException):
            consume(bytes(data), deserializer)


async def test_a_seek_or_a_pause_between_calls_drops_the_buffered_rest_either_way() -> None:
    def seek_back(subscription: SubscriptionState, call: int) -> None:
        if call == 2:
            subscription.seek(TP, 3)

    def pause(subscription: SubscriptionState, call: int) -> None:
        if call == 1:
            subscription.pause(TP)

    for between in (seek_back, pause):
        same_both_ways(plain(), max_records=4, between=between)
        _, calls = consume(plain(), raw_records.keep_bytes, max_records=4, between=between)
        assert calls[-1][0] == 0 and len(calls) <= 3, calls


async def test_other_consumers_of_the_process_keep_their_records() -> None:
    stock, _ = consume(plain(), None)
    upper, _ = consume(plain(), bytes.upper)
    assert type(stock[0]) is ConsumerRecord and upper[0].value == stock[0].value.upper()
