"""The cyclic garbage collector's pace while a worker runs.

CPython collects its youngest generation whenever the tracked objects allocated and not yet freed pass 700. A fetch
hands the fold ``max_poll_records`` parsed records, two tracked objects each (the record and its header list), all
alive until folded: at the interpreter's pace every fetch runs about fourteen collections, each walking the records
alive so far and promoting them, so that older collections walk them again (and, in a benchmark holding its own
copy of a million events, the full ones walk that too). Counted by callgrind, that is a third of what consuming a
record costs (``python -m bench.fetch_cost``). While a worker runs, the young threshold sits above what a fetch
holds: a folded fetch's records are freed by their reference counts, as before, and only cyclic garbage (rare on
this path) waits for the collector, which still runs when allocations outgrow the threshold.

Process-wide, as the collector is: the first worker of a process sets the pace, the last one to stop restores the
interpreter's (tests and the benchmark run several workers, and other consumers, in one process).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

#: Tracked objects per parsed record (the record, its header list), and how many fetches' worth the young
#: generation holds before a collection.
TRACKED_PER_RECORD = 2
MARGIN = 5


class _Holders:
    """Workers holding the pace in this process, and the thresholds they found."""

    count = 0
    found: tuple[int, int, int] = (0, 0, 0)


@contextlib.contextmanager
def worker_pace(max_poll_records: int) -> Iterator[None]:
    """Hold the worker's pace (never below the interpreter's, and never where automatic collection is off)."""
    if _Holders.count == 0:
        _Holders.found = found = gc.get_threshold()
        if found[0] > 0:
            gc.set_threshold(max(found[0], TRACKED_PER_RECORD * max_poll_records * MARGIN), found[1], found[2])
    _Holders.count += 1
    try:
        yield
    finally:
        _Holders.count -= 1
        if _Holders.count == 0:
            gc.set_threshold(*_Holders.found)
