"""Where a candidate layout's flush spends its wall time: ``python -m bench.flush_timeline``.

For layouts (b), (d) and (e) of :mod:`bench.board_layouts` (100,000 boards x 3 players, the update window), prints
when the last packed command went out, when the last reply came back, and the whole flush, measured around
:mod:`flusher.wire`'s writes and reads: packing overlaps Redis, the rest (waiting for Redis's tail, building the
per-board results) does not.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from redis.asyncio import Redis

from bench import board_layouts
from bench.boards import fold, records, script_seconds
from bench.scratch import on_scratch_redis
from flusher import wire
from ingest import gc_pacing
from ingest.settings import WorkerSettings

_write, _replies = wire._write, wire._replies


async def main_async(url: str, boards: int) -> None:
    marks: dict[str, float] = {}

    async def write(conn: Any, buffer: list[bytes], count: int, sent: list[bytes] | None) -> int:
        count = await _write(conn, buffer, count, sent)
        marks["last write"] = time.perf_counter()
        return count

    async def replies(conn: Any, count: int) -> list[Any]:
        out = await _replies(conn, count)
        marks["last reply"] = time.perf_counter()
        return out

    wire._write, wire._replies = write, replies  # bench-only: timestamps around the wire
    redis = Redis.from_url(url)
    for text in board_layouts.SCRIPTS:
        await redis.script_load(text)
    rounds = [fold(records(boards, 3, 8, r), boards).batches(4000) for r in (0, 1)]
    layouts: list[type[board_layouts.Layout]] = [
        board_layouts.PerGroup,
        board_layouts.PerCall,
        board_layouts.ProductGroup,
    ]
    for make in layouts:
        await redis.flushall()
        layout = make()
        for name, batches in zip(("first window", "update window"), rounds, strict=True):
            await redis.config_resetstat()
            started = time.perf_counter()
            await layout.flush(redis, batches)
            done = time.perf_counter() - started
            print(
                f"{layout.name:<40} {name:<14} last write {marks['last write'] - started:.2f} s, last reply "
                f"{marks['last reply'] - started:.2f} s, done {done:.2f} s; Redis in scripts "
                f"{await script_seconds(redis):.2f} s"
            )
    await redis.aclose()


def main() -> int:
    with gc_pacing.worker_pace(WorkerSettings.model_fields["max_poll_records"].default):  # as bench.boards
        on_scratch_redis(lambda url: main_async(url, 100_000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
