"""A tolerant reading of Kafka record batches, for the rare batch aiokafka's parser refuses.

aiokafka decodes every header name as strict UTF-8; Go and librdkafka producers can write names that are not,
and then the whole batch fails to parse on every fetch, the valid records in it included. While the worker
walks such a partition, the fetcher builds its records with this module's pure-Python parser instead, which
decodes header names with ``surrogateescape``; the worker dead-letters the records whose names do not round
trip and folds the rest. Outside that walk the fast C parser is used: this one is several times slower.
"""

from __future__ import annotations

import contextlib
import gzip
import struct
import zlib
from collections.abc import Iterator
from typing import Any, SupportsIndex, overload

import cramjam
from aiokafka.consumer import fetcher
from aiokafka.errors import CorruptRecordException, UnsupportedCodecError
from aiokafka.record.default_records import _DefaultRecordBatchPy
from aiokafka.record.memory_records import _MemoryRecordsPy

from hotboard.records import Record

#: What the client raises, while it builds a fetch's records, for a batch it cannot decode: records that do not
#: parse (a header name that is not UTF-8, a bad CRC), a codec without its library, compressed bytes that no
#: codec reads (gzip, and cramjam's snappy, lz4, zstd). Never a network or broker error: those are retried.
UNDECODABLE: tuple[type[Exception], ...] = (
    ValueError,
    CorruptRecordException,
    UnsupportedCodecError,
    NotImplementedError,
    cramjam.DecompressionError,
    zlib.error,
    gzip.BadGzipFile,
    EOFError,
    struct.error,
)


class _LenientSlice(bytearray):
    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return super().decode(encoding, "surrogateescape")


class _LenientBuffer(bytearray):
    """Slices decode leniently; single bytes stay ints (the varint decoder reads them)."""

    @overload
    def __getitem__(self, key: SupportsIndex) -> int: ...
    @overload
    def __getitem__(self, key: slice) -> bytearray: ...
    def __getitem__(self, key: SupportsIndex | slice) -> int | bytearray:
        if isinstance(key, slice):
            return _LenientSlice(super().__getitem__(key))
        return super().__getitem__(key)


class _LenientBatch(_DefaultRecordBatchPy):  # type: ignore[misc]
    def __init__(self, buffer: Any) -> None:
        super().__init__(buffer)
        self._buffer: bytearray = _LenientBuffer(self._buffer)

    def _maybe_uncompress(self) -> None:
        super()._maybe_uncompress()
        if type(self._buffer) is not _LenientBuffer:
            self._buffer = _LenientBuffer(self._buffer)


class _LenientMemoryRecords(_MemoryRecordsPy):  # type: ignore[misc]
    def next_batch(self, *args: Any) -> Any:
        next_slice = self._next_slice
        if next_slice is not None and len(next_slice) > self.MAGIC_OFFSET and next_slice[self.MAGIC_OFFSET] >= 2:
            self._cache_next()
            return _LenientBatch(next_slice)
        return super().next_batch(*args)


class _Walks:
    """How many lenient walks this process began: process-wide, as the patch itself is."""

    count = 0


def lenient_walks() -> int:
    """Lenient walks begun in this process. Until the first, no record can carry a header name that is not
    UTF-8 (the strict parser refuses the whole batch instead), so the intake skips the per-record check."""
    return _Walks.count


@contextlib.contextmanager
def lenient_fetches() -> Iterator[None]:
    """Fetch responses that arrive meanwhile are parsed leniently (process-wide: one consumer per worker)."""
    _Walks.count += 1  # before the patch: a record parsed leniently is never folded unchecked
    original = fetcher.MemoryRecords
    fetcher.MemoryRecords = _LenientMemoryRecords
    try:
        yield
    finally:
        fetcher.MemoryRecords = original


def header_name_ok(name: str) -> bool:
    """False for a header name read leniently from bytes that are not UTF-8 (it cannot be sent again)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def unreadable_header(record: Record) -> str | None:
    """The first header name of ``record`` that is not valid UTF-8, escaped; None when all are."""
    for name, _ in record.headers or ():
        if not header_name_ok(name):
            return str(name.encode("utf-8", "surrogateescape").hex())
    return None
