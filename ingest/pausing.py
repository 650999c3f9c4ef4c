"""Who paused a partition, and why: fetching resumes only when no reason is left.

One owner for every pause, in the spirit of Quix Streams' ``PausingManager``: a resynchronisation while paused
for backpressure once left fetching paused forever because two reasons shared one boolean.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class PauseReason(StrEnum):
    POSITIONING = "positioning"  # assigned or resynchronising: not yet seeked from Redis
    BACKPRESSURE = "backpressure"  # too much pending: wait for flushes to land
    HALTED = "halted"  # history lost: wait for an operator


class Pauses:
    def __init__(self) -> None:
        self._why: dict[int, set[PauseReason]] = {}

    def pause(self, partitions: Iterable[int], reason: PauseReason) -> list[int]:
        """Add ``reason``; returns the partitions that were fetching until now (pause them in the consumer)."""
        newly = []
        for p in partitions:
            reasons = self._why.setdefault(p, set())
            if not reasons:
                newly.append(p)
            reasons.add(reason)
        return newly

    def release(self, partitions: Iterable[int], reason: PauseReason) -> list[int]:
        """Drop ``reason``; returns the partitions with no reason left (resume them in the consumer)."""
        free = []
        for p in partitions:
            reasons = self._why.get(p)
            if reasons is None or reason not in reasons:
                continue
            reasons.discard(reason)
            if not reasons:
                free.append(p)
        return free

    def forget(self, partitions: Iterable[int]) -> None:
        """Revoked partitions: nothing to resume."""
        for p in partitions:
            self._why.pop(p, None)

    def reasons(self, partition: int) -> frozenset[PauseReason]:
        return frozenset(self._why.get(partition, ()))

    def paused_for(self, reason: PauseReason) -> list[int]:
        return sorted(p for p, reasons in self._why.items() if reason in reasons)
