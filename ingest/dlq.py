"""Dead letters: invalid records go to ``<topic>.dlq`` with the original key, value and headers plus why."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer

from ingest.codec import InvalidEvent

ERROR_HEADER = "hotboard-error"
SOURCE_HEADER = "hotboard-source"

#: (the consumed record, why it is invalid). Kept in the window like a delta until its flush.
DeadLetter = tuple[Any, InvalidEvent]


def dead_letter_headers(record: Any, error: InvalidEvent) -> list[tuple[str, bytes]]:
    return [
        *(record.headers or ()),
        (ERROR_HEADER, str(error).encode()),
        (SOURCE_HEADER, f"{record.topic}:{record.partition}:{record.offset}".encode()),
    ]


class DeadLetters:
    """Dead letters are pending state of their window: they are sent and acknowledged at the start of the
    window's flush, before any watermark or offset passes them. A crash after the send but before the flush
    re-reads and re-sends them, so the DLQ is at-least-once while the boards stay exactly-once."""

    def __init__(self, producer: AIOKafkaProducer, topic: str) -> None:
        self._producer = producer
        self.topic = topic

    async def send_all(self, letters: Sequence[DeadLetter]) -> None:
        """Send and wait for every acknowledgement; raises if any failed (the flush retries them all)."""
        futures = [
            await self._producer.send(
                self.topic, value=record.value, key=record.key, headers=dead_letter_headers(record, error)
            )
            for record, error in letters
        ]
        await asyncio.gather(*futures)
