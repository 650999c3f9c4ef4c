"""Clocks and pacing: a drift-corrected ticker and capped exponential backoff."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable


async def ticker(
    interval_s: float, stop: asyncio.Event, clock: Callable[[], float] = time.monotonic
) -> AsyncIterator[int]:
    """Yield once per interval on a fixed grid (a slow iteration does not push later ticks back); ends
    as soon as ``stop`` is set."""
    start = clock()
    tick = 0
    while not stop.is_set():
        tick += 1
        delay = start + tick * interval_s - clock()
        if delay < 0:  # fell behind: skip missed ticks instead of bursting
            tick += int(-delay // interval_s) + 1
            delay = start + tick * interval_s - clock()
        if await wait_or_stop(stop, delay):
            return
        yield tick


async def wait_or_stop(stop: asyncio.Event, timeout_s: float) -> bool:
    """Sleep up to ``timeout_s``; True when ``stop`` was set meanwhile."""
    try:
        await asyncio.wait_for(stop.wait(), timeout=max(timeout_s, 0.0))
    except TimeoutError:
        return False
    return True


class Backoff:
    """Capped exponential backoff with full jitter; ``reset()`` after a success."""

    def __init__(self, base_s: float = 0.1, cap_s: float = 5.0) -> None:
        self.base_s = base_s
        self.cap_s = cap_s
        self.failures = 0

    def next_delay(self) -> float:
        self.failures += 1
        ceiling = min(self.cap_s, self.base_s * 2 ** min(self.failures, 30))
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.failures = 0
