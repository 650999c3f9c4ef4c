"""The one way tests build consumed Kafka records: aiokafka's own ``ConsumerRecord``, so a fake has every
attribute the worker may read (:class:`hotboard.records.Record`), with defaults for the ones a test ignores."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import orjson
from aiokafka.structs import ConsumerRecord

from hotboard.records import Record

TOPIC = "scores"
CREATE_TIME = 0  # Kafka's timestamp type of a producer-stamped record


def record(
    value: bytes | None,
    offset: int = 0,
    *,
    timestamp: int | None = 0,
    key: bytes | None = None,
    headers: Sequence[tuple[str, bytes]] = (),
    partition: int = 0,
    topic: str = TOPIC,
) -> Record:
    """One record as the consumer hands it over; ``value=None`` is a tombstone."""
    # The serialized sizes are unknown (-1): the worker never reads them, and a hostile value may not even have one.
    rec: Record = ConsumerRecord(
        topic, partition, offset, timestamp, CREATE_TIME, key, value, None, -1, -1, list(headers)
    )
    return rec


def json_record(body: Mapping[str, object], offset: int = 0, *, timestamp: int | None = 0) -> Record:
    """A record whose value is ``body`` as JSON (an event, valid or not)."""
    return record(orjson.dumps(body), offset, timestamp=timestamp)


def records_of(values: Sequence[bytes | None]) -> list[Record]:
    """One record per value, at offsets 0, 1, 2 ..."""
    return [record(v, i) for i, v in enumerate(values)]


def utc_ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    """A record timestamp (milliseconds since the epoch) for a UTC wall-clock time."""
    return int(datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp() * 1000)
