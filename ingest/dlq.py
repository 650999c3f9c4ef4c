"""Dead letters: invalid records go to ``<topic>.dlq`` with the original key, value and headers plus why.

Every letter is capped to fit any producer (``max_bytes``): a value or key beyond its share is truncated, and
its original size and SHA-256 travel in headers. Letters wait in an outbox until the broker acknowledges them;
a partition's checkpoint never passes an unacknowledged letter, so a crash re-reads and re-sends it (the DLQ is
at-least-once) while a DLQ that keeps refusing holds only the checkpoint, never the boards.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from hotboard.codec import InvalidEvent
from hotboard.records import Record
from ingest.folds import DeadLetter
from ingest.lenient_records import header_name_ok

log = logging.getLogger(__name__)

ERROR_HEADER = "hotboard-error"
SOURCE_HEADER = "hotboard-source"
#: The reason header is cut to this: a letter's headers must fit beside its capped value.
MAX_ERROR_HEADER_BYTES = 1024
#: Set when the value (or key) was cut: the original length in bytes, and the SHA-256 of the original.
VALUE_SIZE_HEADER = "hotboard-value-size"
VALUE_SHA256_HEADER = "hotboard-value-sha256"
KEY_SIZE_HEADER = "hotboard-key-size"
#: "key", "value" or "key,value": which of them was null in the original (Kafka needs one to send).
NULL_HEADER = "hotboard-null"
#: How many original headers were left out because they did not fit.
HEADERS_DROPPED_HEADER = "hotboard-headers-dropped"

#: Bytes kept of an original key; the rest of a letter's budget goes to the value and headers.
KEY_BUDGET = 1024
#: Bytes of the letter budget the original headers may take at most.
HEADERS_BUDGET = 16 * 1024
#: Bytes of the letter budget reserved for hotboard's own headers and record overhead.
OWN_BUDGET = 2048


@dataclass(frozen=True, slots=True)
class Letter:
    """One record for the DLQ, already capped, with where it came from."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]

    @property
    def size(self) -> int:
        return len(self.key or b"") + len(self.value or b"") + sum(len(k) + len(v) for k, v in self.headers)


def past_checkpoints(
    letters: list[tuple[int, DeadLetter]], checkpoints: Mapping[int, int]
) -> list[tuple[int, DeadLetter]]:
    """The letters still to send: a letter at or below its partition's checkpoint was acknowledged before the
    checkpoint passed it, and a rewind (:mod:`ingest.rewind`) replays its record for the boards that lack
    windows there, never for the DLQ again."""
    return [(p, dead) for p, dead in letters if dead[0].offset > checkpoints.get(p, -1)]


def letter(topic: str, partition: int, record: Record, error: InvalidEvent, max_bytes: int) -> Letter:
    """The dead letter of ``record`` (read from ``partition`` of ``topic``): original key, value and headers, cut
    to ``max_bytes`` in all."""
    return build(topic, partition, record.offset, record.key, record.value, record.headers, str(error), max_bytes)


def build(
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]],
    error: str,
    max_bytes: int,
) -> Letter:
    own: list[tuple[str, bytes]] = [
        (ERROR_HEADER, error.encode()[:MAX_ERROR_HEADER_BYTES]),
        (SOURCE_HEADER, f"{topic}:{partition}:{offset}".encode()),
    ]
    nulls = [name for name, part in (("key", key), ("value", value)) if part is None]
    if nulls:
        own.append((NULL_HEADER, ",".join(nulls).encode()))
    if key is not None and len(key) > KEY_BUDGET:
        own.append((KEY_SIZE_HEADER, str(len(key)).encode()))
        key = key[:KEY_BUDGET]
    budget = max(0, max_bytes - OWN_BUDGET - len(key or b""))
    # The original headers first (tracing ids and the like are what an operator looks for), then the value.
    header_budget = min(HEADERS_BUDGET, budget)
    kept: list[tuple[str, bytes]] = []
    dropped = 0
    for name, data in headers or ():
        size = len(name) + len(data or b"")
        if not header_name_ok(name):
            dropped += 1  # a header name that is not UTF-8 (what made the record unreadable): cannot be sent
        elif size <= header_budget:
            kept.append((name, data or b""))
            header_budget -= size
            budget -= size
        else:
            dropped += 1
    if value is not None and len(value) > budget:
        own += [
            (VALUE_SIZE_HEADER, str(len(value)).encode()),
            (VALUE_SHA256_HEADER, hashlib.sha256(value).hexdigest().encode()),
        ]
        value = value[:budget]
    if dropped:
        own.append((HEADERS_DROPPED_HEADER, str(dropped).encode()))
    if key is None and value is None:
        value = b""  # Kafka refuses a record with neither; the null header says both were null
    return Letter(partition, offset, key, value, kept + own)


class DeadLetters:
    """The outbox of dead letters and the producer that empties it."""

    def __init__(self, producer: AIOKafkaProducer, topic: str, max_bytes: int, send_timeout_s: float) -> None:
        self._producer = producer
        self.topic = topic
        self.max_bytes = max_bytes
        self._timeout_s = send_timeout_s
        self._outbox: list[Letter] = []
        self.failures = 0

    def add(self, letters: list[Letter]) -> None:
        self._outbox.extend(letters)

    @property
    def pending(self) -> int:
        return len(self._outbox)

    @property
    def pending_bytes(self) -> int:
        return sum(letter.size for letter in self._outbox)

    def lowest_pending(self) -> dict[int, int]:
        """partition -> offset of its oldest unacknowledged letter: its checkpoint must stay below."""
        low: dict[int, int] = {}
        for item in self._outbox:
            if item.offset < low.get(item.partition, item.offset + 1):
                low[item.partition] = item.offset
        return low

    def drop(self, partitions: set[int]) -> None:
        """Revoked or repositioned partitions: their letters are sent again by whoever replays them."""
        self._outbox = [item for item in self._outbox if item.partition not in partitions]

    async def send_pending(self) -> int:
        """Send the outbox and wait for the acknowledgements, all within ``send_timeout_s``; what the broker
        refused or did not acknowledge in time stays for the next flush (also when the caller is cancelled
        meanwhile: a letter leaves the outbox only once acknowledged). Returns the letters sent."""
        if not self._outbox:
            return 0
        batch = list(self._outbox)
        futures: dict[int, asyncio.Future[Any]] = {}
        try:
            async with asyncio.timeout(self._timeout_s):
                for i, item in enumerate(batch):
                    try:
                        futures[i] = await self._producer.send(
                            self.topic, value=item.value, key=item.key, headers=item.headers
                        )
                    except (KafkaError, AssertionError, ValueError, TypeError) as exc:
                        log.warning("dead letter %d:%d refused: %r", item.partition, item.offset, exc)
                if futures:
                    await asyncio.wait(futures.values())
        except TimeoutError:
            pass  # what is not acknowledged by now stays in the outbox
        finally:
            acked = {
                id(item)
                for i, item in enumerate(batch)
                if (f := futures.get(i)) is not None and f.done() and not f.cancelled() and f.exception() is None
            }
            self._outbox = [item for item in self._outbox if id(item) not in acked]
        kept = len(batch) - len(acked)
        if kept:
            self.failures += kept
            log.warning("%d dead letters not acknowledged by %s; kept for the next flush", kept, self.topic)
        return len(acked)
