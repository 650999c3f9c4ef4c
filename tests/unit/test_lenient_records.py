"""Every way the client refuses a damaged batch is one the worker catches (and halts the partition for), with
either record parser: a failure outside ``UNDECODABLE`` would end the worker instead."""

from __future__ import annotations

import aiokafka.codec
import pytest
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords, _MemoryRecordsPy
from aiokafka.record.util import calc_crc32c

from ingest.lenient_records import UNDECODABLE, _LenientMemoryRecords

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
PARSERS = [MemoryRecords, _MemoryRecordsPy, _LenientMemoryRecords]


def batch(codec: int) -> bytearray:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i in range(50):
        builder.append(i, timestamp=None, key=b"k%d" % i, value=b'{"player":"p%d","delta":1}' % i, headers=[])
    return bytearray(builder.build())


def damaged(codec: int, at: float, cut: int) -> bytes:
    """The batch with the byte at fraction ``at`` of its records inverted, or ``cut`` bytes removed there; the
    length and CRC fixed, as a broker would hand it out."""
    buf = batch(codec)
    pos = 61 + int((len(buf) - 61) * at)
    if cut:
        del buf[pos : pos + cut]
        buf[8:12] = (len(buf) - 12).to_bytes(4, "big")
    else:
        buf[pos] ^= 0xFF
    buf[17:21] = calc_crc32c(bytes(buf[21:])).to_bytes(4, "big")
    return bytes(buf)


def read_all(parser: type, data: bytes) -> int:
    records, count = parser(data), 0
    while (b := records.next_batch()) is not None:
        count += sum(1 for _ in b)
    return count


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(("at", "cut"), [(0.0, 0), (0.3, 0), (0.5, 0), (0.9, 0), (0.5, 5), (0.99, 1), (0.2, 40)])
def test_a_damaged_compressed_batch_decodes_or_raises_what_the_worker_catches(
    parser: type, codec: str, at: float, cut: int
) -> None:
    try:
        read_all(parser, damaged(CODECS[codec], at, cut))
    except UNDECODABLE:
        pass  # the partition halts at it


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("codec", ["snappy", "lz4", "zstd"])
def test_a_codec_without_its_library_raises_what_the_worker_catches(
    parser: type, codec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = bytes(batch(CODECS[codec]))
    monkeypatch.setattr(aiokafka.codec, "cramjam", None)
    with pytest.raises(UNDECODABLE):
        read_all(parser, data)


def test_a_bad_crc_is_caught() -> None:
    """The fetcher checks CRCs itself (check_crcs) and raises CorruptRecordException."""
    assert issubclass(CorruptRecordException, UNDECODABLE)
