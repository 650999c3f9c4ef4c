"""A transactional broker's answers, made from the embedded one: it runs no transactions (it refuses producer ids
it did not issue), so a proxy in front of it rewrites Fetch responses as Kafka would send them after a producer
wrote a transaction and committed or aborted it.

Plain batches are produced first, at offsets the broker assigns; :class:`AbortingBroker` is told which batches
(by base offset) belong to a transaction and which single-record batch is the marker that ends it. In every
Fetch response it sets the transactional bit and the producer id on those batches, the control bit on the
marker (whose record must already be a COMMIT or ABORT control record, see :func:`marker`, in an uncompressed
batch: brokers never compress control batches), and lists each
aborted producer in the partition's ``aborted_transactions`` from its first offset, as the broker's
transaction index does. Offsets, high watermarks and everything else are the broker's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka.protocol import fetch
from aiokafka.record.util import calc_crc32c

from cli.devstack import LOOPBACK, KafkaBroker, free_port

FETCH = 1
#: Where a v2 batch keeps its magic byte, CRC, attributes and producer id/epoch/sequence.
_MAGIC_AT, _CRC_AT, _ATTRIBUTES_AT, _PRODUCER_AT = 16, 17, 21, 43
_TRANSACTIONAL, _CONTROL = 0x10, 0x20
ABORT, COMMIT = 0, 1


def marker(kind: int, coordinator_epoch: int = 0) -> tuple[bytes, bytes]:
    """The (key, value) of a control record: version 0 and the marker type; version 0 and the epoch."""
    return struct.pack(">hh", 0, kind), struct.pack(">hi", 0, coordinator_epoch)


@dataclass
class Transaction:
    producer_id: int
    #: Base offsets of the transaction's data batches, and of the batch holding its marker record.
    batches: list[int]
    marker_at: int
    aborted: bool


@dataclass
class _Rewrite:
    topic: str
    partition: int
    transactions: list[Transaction] = field(default_factory=list)
    #: Batches rewritten so far (a test checks the rewrite happened at all).
    patched: int = 0


class _Broker(KafkaBroker):
    """The embedded broker, listening on one port and advertising the proxy's."""

    def __init__(self, port: int, advertised: int, log_dir: Path) -> None:
        super().__init__(port, log_dir)
        self.advertised = advertised

    def command(self) -> list[str]:
        cmd = super().command()
        cmd[-1] = f"tcp://{LOOPBACK}:{self.advertised}"
        return cmd


class AbortingBroker:
    """``async with AbortingBroker(log_dir, topic) as broker``: ``broker.bootstrap`` is the proxy; every client
    (admin, producers, the worker) reaches the broker through it, as the broker advertises the proxy's port."""

    def __init__(self, log_dir: Path, topic: str, partition: int = 0) -> None:
        self.port = free_port()
        log_dir.mkdir(parents=True, exist_ok=True)
        self._broker = _Broker(free_port(), self.port, log_dir)
        self.rewrite = _Rewrite(topic, partition)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    async def __aenter__(self) -> AbortingBroker:
        await asyncio.to_thread(self._broker.start)
        self._server = await asyncio.start_server(self._handle, LOOPBACK, self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        await asyncio.to_thread(self._broker.stop)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(LOOPBACK, self._broker.port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        #: correlation id -> (api key, api version) of the requests in flight on this connection
        asked: dict[int, tuple[int, int]] = {}

        async def requests() -> None:
            for frame in await _frames(reader):
                api_key, version, correlation = struct.unpack_from(">hhi", frame, 4)
                asked[correlation] = (api_key, version)
                up_writer.write(frame)

        async def responses() -> None:
            for frame in await _frames(up_reader):
                (correlation,) = struct.unpack_from(">i", frame, 4)
                api_key, version = asked.pop(correlation, (-1, -1))
                if api_key == FETCH:
                    body = _rewrite_fetch(self.rewrite, version, frame[8:])
                    frame = struct.pack(">ii", 4 + len(body), correlation) + body
                writer.write(frame)

        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            await asyncio.gather(_pump(requests), _pump(responses))
        for w in (writer, up_writer):
            w.transport.abort()
        self._writers.difference_update((writer, up_writer))


async def _pump(step: object) -> None:
    while True:
        await step()  # type: ignore[operator]


async def _frames(reader: asyncio.StreamReader) -> list[bytes]:
    """The next whole frame (size prefix included), as a one-item list."""
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return [struct.pack(">i", size) + await reader.readexactly(size)]


def _rewrite_fetch(rewrite: _Rewrite, version: int, body: bytes) -> bytes:
    response_type = getattr(fetch, f"FetchResponse_v{version}")
    response = response_type.decode(body)
    partition_names = response.SCHEMA.fields[response.SCHEMA.names.index("topics")].array_of
    names = partition_names.fields[partition_names.names.index("partitions")].array_of.names
    aborted_at, records_at = names.index("aborted_transactions"), names.index("message_set")
    topics = []
    for topic, partitions in response.topics:
        out = []
        for part in partitions:
            if topic == rewrite.topic and part[0] == rewrite.partition and part[records_at]:
                part = list(part)
                part[records_at] = _patch_batches(rewrite, part[records_at])
                part[aborted_at] = [(t.producer_id, min(t.batches)) for t in rewrite.transactions if t.aborted]
                part = tuple(part)
            out.append(part)
        topics.append((topic, out))
    response.topics = topics
    encoded: bytes = response.encode()
    return encoded


def _patch_batches(rewrite: _Rewrite, data: bytes) -> bytes:
    marks: dict[int, tuple[int, int]] = {}
    for t in rewrite.transactions:
        marks.update(dict.fromkeys(t.batches, (t.producer_id, _TRANSACTIONAL)))
        marks[t.marker_at] = (t.producer_id, _TRANSACTIONAL | _CONTROL)
    buf = bytearray(data)
    for start, end in _batches(buf):
        base = struct.unpack_from(">q", buf, start)[0]
        if base in marks and buf[start + _MAGIC_AT] == 2:
            producer_id, bits = marks[base]
            (attributes,) = struct.unpack_from(">h", buf, start + _ATTRIBUTES_AT)
            struct.pack_into(">h", buf, start + _ATTRIBUTES_AT, attributes | bits)
            struct.pack_into(">qhi", buf, start + _PRODUCER_AT, producer_id, 0, 0)
            crc = calc_crc32c(bytes(buf[start + _ATTRIBUTES_AT : end]))
            struct.pack_into(">I", buf, start + _CRC_AT, crc)
            rewrite.patched += 1
    return bytes(buf)


def _batches(buf: bytearray) -> Iterator[tuple[int, int]]:
    """(start, end) of every whole batch; a trailing partial one (cut by the fetch size) is left alone."""
    pos = 0
    while pos + 12 <= len(buf):
        (length,) = struct.unpack_from(">i", buf, pos + 8)
        end = pos + 12 + length
        if end > len(buf):
            return
        yield pos, end
        pos = end
