"""What hotboard reads of a Kafka record: the part of aiokafka's ``ConsumerRecord`` the worker depends on, so
the fold, the codec and the dead-letter queue are typed without importing the (untyped) client."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Record(Protocol):
    """One consumed record. Read-only: the worker never changes a record it was given."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

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
