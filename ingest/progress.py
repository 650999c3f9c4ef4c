"""What a worker says in its log without being asked: one summary line per interval, and dead letters rate-limited.

Pure bookkeeping over a clock (``time.monotonic`` unless injected), no I/O: the worker feeds it its counters and
logs the lines it returns. An interval of 0 turns both off (the metrics still count everything).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Counters:
    """A worker's running totals when asked (events applied, windows flushed, dead letters) and its lag now."""

    events: int
    windows: int
    dead_letters: int
    lag: int


class Progress:
    """One line per ``interval_s``: events/s, windows and dead letters over the interval, and the lag now."""

    def __init__(self, interval_s: float, clock: Clock = time.monotonic) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._last: tuple[float, Counters] | None = None
        #: The last line returned (None before the first): what a test or a status page can ask for.
        self.last_line: str | None = None

    def line(self, now: Counters) -> str | None:
        """The summary due now, or None (not due yet, the first call, or off)."""
        if self._interval_s <= 0:
            return None
        at = self._clock()
        if self._last is None:
            self._last = (at, now)
            return None
        since, before = self._last
        elapsed = at - since
        if elapsed < self._interval_s:
            return None
        self._last = (at, now)
        rate = (now.events - before.events) / elapsed
        self.last_line = (
            f"progress: {rate:,.0f} events/s, {now.windows - before.windows} windows, lag {now.lag:,}, "
            f"{now.dead_letters - before.dead_letters} dead letters in the last {elapsed:.0f}s"
        )
        return self.last_line


class DeadLetterLog:
    """At most one line per dead-letter reason per ``interval_s``; the next one says how many were left out."""

    def __init__(self, interval_s: float, clock: Clock = time.monotonic) -> None:
        self._interval_s = interval_s
        self._clock = clock
        #: reason -> (when its last line was logged, letters left out since)
        self._reasons: dict[str, tuple[float, int]] = {}
        #: Lines returned, and letters left out, so far.
        self.logged = 0
        self.left_out = 0

    def line(self, reason: str, where: str, detail: str) -> str | None:
        """The line for one dead letter (``where``: partition and offset), or None when its reason was logged
        less than ``interval_s`` ago (it is counted, and the next line names the count)."""
        if self._interval_s <= 0:
            return None
        at = self._clock()
        last = self._reasons.get(reason)
        if last is not None and at - last[0] < self._interval_s:
            self._reasons[reason] = (last[0], last[1] + 1)
            self.left_out += 1
            return None
        self.logged += 1
        self._reasons[reason] = (at, 0)
        left_out = f" ({last[1]} more {reason} in the last {at - last[0]:.0f}s not logged)" if last and last[1] else ""
        return f"dead letter {reason} at {where}: {detail}{left_out}"
