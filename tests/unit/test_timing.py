"""The flush loop's pacing: a drift-corrected ticker that skips missed ticks, and capped jittered backoff."""

from __future__ import annotations

import asyncio

import pytest

from hotboard.timing import Backoff, ticker, wait_or_stop


async def test_ticker_skips_missed_ticks_instead_of_bursting() -> None:
    now = [100.0]
    stop = asyncio.Event()
    ticks = []
    async for tick in ticker(0.01, stop, clock=lambda: now[0]):
        ticks.append(tick)
        # each iteration "takes" this long on the injected clock; the third is slow (3.5 intervals)
        now[0] += 0.035 if len(ticks) == 3 else 0.01
        if len(ticks) == 5:
            stop.set()
    # the injected clock stands still while the ticker waits, so the third iteration ends at 2 + 3.5 = 5.5
    # intervals: ticks 4 and 5 were missed and are skipped (no burst), the next is 6 on the same grid, then 7
    assert ticks == [1, 2, 3, 6, 7]


async def test_ticker_and_wait_end_as_soon_as_stop_is_set() -> None:
    stop = asyncio.Event()
    stop.set()
    assert [t async for t in ticker(60.0, stop)] == []
    assert await wait_or_stop(stop, 60.0) is True
    assert await wait_or_stop(asyncio.Event(), 0.0) is False


@pytest.mark.parametrize(("failures", "ceiling"), [(1, 0.2), (2, 0.4), (5, 3.2), (6, 5.0), (40, 5.0)])
def test_backoff_doubles_up_to_its_cap_with_jitter(failures: int, ceiling: float) -> None:
    backoff = Backoff(base_s=0.1, cap_s=5.0)
    delays = [backoff.next_delay() for _ in range(failures)]
    assert ceiling / 2 <= delays[-1] <= ceiling
    backoff.reset()
    assert 0.1 <= backoff.next_delay() <= 0.2
