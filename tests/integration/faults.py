"""Fault injection, in-process: a TCP proxy that can cut a worker off from Redis while Redis keeps running, and
Kafka records no well-behaved producer writes (built with aiokafka's batch API)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.record.util import calc_crc32c

from cli.devstack import free_port

#: Where a v2 record batch's records (compressed or not) begin, after its 61-byte header.
_RECORDS_AT = 61


#: One record as produced: (key, value, headers).
Raw = tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]


class TcpProxy:
    """127.0.0.1:port -> target, on its own event loop thread. ``cut()`` closes every connection and refuses
    new ones (a network partition: the server itself keeps running, same run_id); ``restore()`` heals it."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._cut = False
        #: While holding, bytes from clients are kept here instead of reaching the server (in order).
        self._holding = False
        self._held: list[tuple[asyncio.StreamWriter, bytes]] = []
        #: ``stall_large_replies``: a connection's reply bytes past this count wait ``_stall_s`` once.
        self._stall_after: int | None = None
        self._stall_s = 0.0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        assert self._ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def cut(self) -> None:
        asyncio.run_coroutine_threadsafe(self._set_cut(True), self._loop).result(5)

    def restore(self) -> None:
        asyncio.run_coroutine_threadsafe(self._set_cut(False), self._loop).result(5)

    def hold(self) -> None:
        """Keep every byte clients send from now on (a request stuck in the network); ``release()`` delivers."""
        asyncio.run_coroutine_threadsafe(self._set_hold(True), self._loop).result(5)

    def release(self) -> None:
        asyncio.run_coroutine_threadsafe(self._set_hold(False), self._loop).result(5)

    def stall_large_replies(self, after_bytes: int, seconds: float) -> None:
        """Each connection's server-to-client bytes past ``after_bytes`` wait ``seconds`` once, before they pass
        (a large reply stalled in the network: small commands are not delayed, whatever the machine's speed)."""
        self._stall_after, self._stall_s = after_bytes, seconds

    def held(self) -> bytes:
        return asyncio.run_coroutine_threadsafe(self._held_bytes(), self._loop).result(5)

    async def _held_bytes(self) -> bytes:
        return b"".join(data for _, data in self._held)

    async def _set_hold(self, hold: bool) -> None:
        self._holding = hold
        if not hold:
            for dst, data in self._held:
                dst.write(data)
            self._held.clear()

    async def _set_cut(self, cut: bool) -> None:
        self._cut = cut
        if cut:
            for writer in list(self._writers):
                writer.transport.abort()
            self._writers.clear()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, upstream: bool) -> None:
            passed, stalled = 0, False
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await src.read(65536):
                    if upstream and self._holding:
                        self._held.append((dst, data))
                        continue
                    passed += len(data)
                    if not upstream and not stalled and self._stall_after is not None and passed > self._stall_after:
                        stalled = True
                        await asyncio.sleep(self._stall_s)
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))
        self._writers.difference_update((writer, up_writer))


async def send_raw(
    kafka: str,
    topic: str,
    partition: int,
    records: list[Raw],
    *,
    patch: tuple[bytes, bytes] | None = None,
    compression_type: str | None = None,
    flip_payload: bool = False,
) -> None:
    """Send ``(key, value, headers)`` records as one batch, bypassing the producer's checks (null key and
    value). ``patch`` replaces bytes in the built batch and fixes its CRC: a header name that is not UTF-8,
    which only other clients (Go, librdkafka) write. ``flip_payload`` inverts a byte in the middle of the
    (compressed) records and fixes the CRC: a batch the broker accepts and no codec can decode."""
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka,
        enable_idempotence=False,
        max_request_size=8 << 20,
        max_batch_size=4 << 20,
        compression_type=compression_type,
    )
    await producer.start()
    try:
        batch: Any = producer.create_batch()
        for key, value, headers in records:
            assert batch.append(key=key, value=value, timestamp=None, headers=headers) is not None
        if patch is not None or flip_payload:
            buf = bytearray(batch._build())
            if patch is not None:
                old, new = patch
                assert len(old) == len(new) and buf.count(old) == 1
                buf = buf.replace(old, new)
            if flip_payload:
                middle = _RECORDS_AT + (len(buf) - _RECORDS_AT) // 2
                buf[middle] ^= 0xFF
            buf[17:21] = calc_crc32c(bytes(buf[21:])).to_bytes(4, "big")  # v2 batch: CRC-32C of attributes..end
            batch._buffer = buf
        await (await producer.send_batch(batch, topic, partition=partition))
    finally:
        await producer.stop()
