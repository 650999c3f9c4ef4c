"""The worker's consumer hands the fold the Kafka client's own parsed records, not a ``ConsumerRecord`` copy of each.

aiokafka parses a fetched record batch in C (its Cython ``DefaultRecord``: offset, timestamp, key, value, headers),
then copies every record into a ``ConsumerRecord`` dataclass in Python. Counted by callgrind, the copy is about half
of what consuming a record costs (``python -m bench.fetch_cost``). The worker reads nothing the parsed record lacks
(:class:`hotboard.records.Record`; the partition is the key of the dict ``getmany`` returns), so its consumer skips
the copy.

The seam is one class of the client's fetcher, ``PartitionRecords``: one fetched partition's records. Its generator
``_unpack_records`` stays the client's own, with everything exactness rests on: the CRC check, committed reads only
(aborted transactions and control batches skipped), compressed batches of every codec, the next fetch offset after
every record (what positions, seeks and pauses are checked against). Only its per-record copy, ``_consumer_record``,
returns the parsed record as it is, and ``FetchResult.getall`` iterates that generator directly.

Which consumer takes the seam is said by its configuration: ``value_deserializer=keep_bytes`` (values stay bytes,
which is also all it does where the seam is absent). Every other consumer of the process (the benchmark's ceiling,
a test's reader) gets ``ConsumerRecord`` as before. The seam relies on aiokafka internals, hence the pinned range in
pyproject.toml; ``tests/unit/test_raw_records.py`` checks their shape and fails loudly when a release changes it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from aiokafka.consumer import fetcher
from aiokafka.consumer.fetcher import PartitionRecords

#: The client's own class: what every consumer not marked with :func:`keep_bytes` still gets.
STOCK: type[Any] = PartitionRecords


def keep_bytes(value: bytes | None) -> bytes | None:
    """The worker's ``value_deserializer``: values stay bytes, and the consumer hands over parsed records."""
    return value


class RawPartitionRecords(PartitionRecords):  # type: ignore[misc]
    """``PartitionRecords`` whose records are the parser's own (offset, timestamp, key, value, headers)."""

    def _consumer_record(self, tp: Any, record: Any) -> Any:
        return record

    def __iter__(self) -> Iterator[Any]:
        # the generator itself: the client's ``__next__`` around it is one more Python call per record
        records = self._records_iterator
        return iter(()) if records is None else records


def partition_records(
    tp: Any,
    records: Any,
    aborted_transactions: Any,
    fetch_offset: int,
    key_deserializer: Any,
    value_deserializer: Any,
    check_crcs: bool,
    isolation_level: int,
) -> Any:
    """What the fetcher builds for one fetched partition: the raw kind for a consumer marked with
    :func:`keep_bytes` (and no key deserializer), the client's own for every other."""
    kind = RawPartitionRecords if value_deserializer is keep_bytes and key_deserializer is None else STOCK
    return kind(
        tp,
        records,
        aborted_transactions,
        fetch_offset,
        key_deserializer,
        value_deserializer,
        check_crcs,
        isolation_level,
    )


def install() -> None:
    """Let the fetcher build :func:`partition_records` (idempotent). Process-wide, as the fetcher module is, but
    inert for every consumer not built with ``value_deserializer=keep_bytes``."""
    fetcher.PartitionRecords = partition_records
