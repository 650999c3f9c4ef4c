"""What hotboard reads of a Kafka record, so the fold, the codec and the dead-letter queue are typed without
importing the (untyped) client. The Kafka client's parsed records have it (what the worker's consumer hands over,
see ``ingest/raw_records.py``), and so does its ``ConsumerRecord``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Record(Protocol):
    """One consumed record. Read-only: the worker never changes a record it was given. No topic or partition: the
    parsed record has neither; the worker reads one topic, and each record's partition is its batch's."""

    @property
    def offset(self) -> int: ...

    @property
    def timestamp(self) -> int | None:
        """Milliseconds since the epoch (CreateTime or LogAppendTime); None in the oldest message format."""

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None:
        """None for a tombstone."""

    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


class PlacedRecord(Record, Protocol):
    """A record that knows where it came from: what a stock consumer hands over (aiokafka's ``ConsumerRecord``),
    for readers outside the worker (``hotboard dlq``, tests); the worker's records leave this to the fold."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...
