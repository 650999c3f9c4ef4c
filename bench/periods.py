"""``python -m bench.periods``: what ``GET /v1/boards/{board}/periods`` and a far-past ``?period=`` cost per
request on a daily board keeping 1,000 periods that all exist (Redis commands from INFO commandstats, CPU
time of this process, which runs the app in-process on a throwaway redis-server)."""

from __future__ import annotations

import time
from typing import Any

import httpx
from redis.asyncio import Redis

from bench.scratch import on_scratch_redis
from hotboard import board_store, keys
from hotboard.boards import BoardDef
from hotboard.periods import period_board
from reader_api.app import create_app
from reader_api.settings import ApiSettings

NOW_MS = 1_796_212_800_000  # 2026-12-02T12:00Z
REQUESTS = 20


def _commands(stats: dict[str, Any]) -> int:
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


async def _per_request(redis: Redis, client: httpx.AsyncClient, url: str) -> tuple[float, float]:
    """(Redis commands, CPU ms) per request of ``url``, after one warm-up request."""
    assert (await client.get(url)).status_code == 200
    before, cpu = _commands(await redis.info("commandstats")), time.process_time()
    for _ in range(REQUESTS):
        assert (await client.get(url)).status_code == 200
    cpu = time.process_time() - cpu
    return (_commands(await redis.info("commandstats")) - before) / REQUESTS, cpu * 1000 / REQUESTS


async def run(url: str) -> None:
    redis = Redis.from_url(url)
    daily = BoardDef(reset="daily", keep=1000, grace_ms=300_000)
    await board_store.declare(redis, "long", daily, now_ms=1)
    kept = daily.schedule.kept(NOW_MS, daily.keep)
    async with redis.pipeline(transaction=False) as pipe:
        for period in kept:
            name = period_board("long", period.id)
            pipe.zadd(keys.board_key(name), {"a": 1})
            pipe.hset(keys.meta_key(name), mapping={keys.META_VERSION: 1, keys.META_AS_OF: 1})
        await pipe.execute()
    app = create_app(ApiSettings(redis=url), clock=lambda: NOW_MS)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench") as client,
    ):
        commands, cpu_ms = await _per_request(redis, client, "/v1/boards/long/periods")
        print(f"/periods, keep=1000, 1,000 existing: {commands:.0f} Redis commands, {cpu_ms:.1f} ms CPU per request")
        _, cpu_ms = await _per_request(redis, client, f"/v1/boards/long/top?period={kept[-1].id}")
        print(f"top?period=<oldest kept>: {cpu_ms:.1f} ms CPU per request")
    await redis.aclose()


def main() -> None:
    on_scratch_redis(run)


if __name__ == "__main__":
    main()
