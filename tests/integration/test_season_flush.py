"""Flushing seasonal boards on a real redis-server: a stale cached definition is refused, a replayed expired
period is not fenced, grouped flushes mix plain, fenced and period boards, and the registry holds boards only."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from redis.asyncio import Redis

from flusher.batch import NO_WATERMARK, Outcome
from flusher.redis_sink import RedisSink
from hotboard import board_store, keys
from hotboard.boards import BoardDef, DefinitionError
from hotboard.codec import Decoder, decode_all
from ingest.definitions import DefinitionCache
from ingest.pending import Window
from ingest.seasons import route
from tests.records import json_record, utc_ms

pytestmark = pytest.mark.integration


def _batches(defs: dict[str, BoardDef | DefinitionError], events: list[tuple[int, str, int, int, int]]) -> list[Any]:
    """(offset, player, delta, ts, written) on board ``race`` -> the window's batches."""
    records = [
        json_record({"board": "race", "player": p, "delta": d, "ts": ts}, o, timestamp=w) for o, p, d, ts, w in events
    ]
    decoded, defs, periods = route(records, decode_all(records, Decoder()), defs)
    marks = {str(f[0]): -1 for f in decoded if type(f) is tuple}
    window = Window()
    window.fold_for(0).fold_checked(records, decoded, marks, set(), defs, {}, periods)
    return window.batches(100)


async def test_a_stale_cached_seasonal_definition_is_refused_not_seeded(redis_client: Redis) -> None:
    """B declared weekly; a worker caches it (its first events were all late, nothing was written, so B may
    still be redeclared). B is redeclared daily. The worker's next window goes to race@<week> with the stale
    weekly spec, and the period's definition copy is absent: seeding the stale spec there would freeze B as
    daily while its scores sit in a weekly period no reader looks at. The answer is REDEFINED (the worker
    refolds with daily)."""
    await board_store.declare(redis_client, "race", BoardDef(reset="weekly"))
    sink = RedisSink(redis_client, "scores")
    cache = DefinitionCache(sink.load_declared, 100)
    stale = await cache.get(["race"])
    assert isinstance(stale["race"], BoardDef) and stale["race"].reset == "weekly"
    await board_store.declare(redis_client, "race", BoardDef(reset="daily"))  # allowed: nothing written yet
    now = int(datetime.now(UTC).timestamp() * 1000)
    cached = await cache.get(["race"])  # the worker's cache still answers weekly
    batches = _batches(cached, [(0, "a", 5, now, now)])
    results = await sink.flush(batches, lambda b, p: NO_WATERMARK)
    stored = await redis_client.hget(keys.def_key("race"), "spec")
    period_spec = await redis_client.hget(keys.def_key(batches[0].board), "spec")
    print("board:", batches[0].board, "outcome:", results[0].outcome, "B spec:", stored, "period spec:", period_spec)
    assert results[0].outcome is Outcome.REDEFINED


async def test_a_replayed_old_period_is_not_fenced_on_its_second_window(redis_client: Redis) -> None:
    """Replay (or a lagging worker) of a period past its expiry: nothing is written, so nothing is left to fence
    the next window of the same period with. A FENCED answer there would resync every partition on every window
    of the replay (a fenced storm that looks like a zombie)."""
    definition = BoardDef(reset="daily", keep=1, grace_ms=0)
    await board_store.declare(redis_client, "race", definition)
    sink = RedisSink(redis_client, "scores")
    ts = utc_ms(2020, 1, 1, 12)
    first = _batches({"race": definition}, [(0, "a", 5, ts, ts)])
    r1 = await sink.flush(first, lambda b, p: NO_WATERMARK)
    assert r1[0].outcome is Outcome.ALREADY_APPLIED  # past its expiry: nothing written, nothing to fence later
    assert await redis_client.exists(keys.applied_key(first[0].board)) == 0
    second = _batches({"race": definition}, [(1, "a", 5, ts + 1, ts + 1)])
    r2 = await sink.flush(second, lambda b, p: 0)  # what the worker expects after its own window
    print("second window:", r2[0].outcome, r2[0].current)
    assert r2[0].outcome is not Outcome.FENCED


async def test_grouped_flush_mixed_fenced_and_period_boards(redis_client: Redis) -> None:
    """A FLUSH group mixing plain boards, a fenced board in the middle and a period board answers one reply per
    board in order, and each board's expiry is its own."""
    sink = RedisSink(redis_client, "scores")
    now = int(datetime.now(UTC).timestamp() * 1000)
    season = BoardDef(reset="daily", keep=1, grace_ms=0)
    await board_store.declare(redis_client, "race", season)
    records = [
        json_record({"board": b, "player": "p", "delta": i + 1}, i, timestamp=now)
        for i, b in enumerate(["p1", "p2", "race", "p3"])
    ]
    decoded, defs, periods = route(
        records, decode_all(records, Decoder()), {"p1": BoardDef(), "p2": BoardDef(), "race": season, "p3": BoardDef()}
    )
    window = Window()
    window.fold_for(0).fold_checked(
        records, decoded, {str(f[0]): -1 for f in decoded if type(f) is tuple}, set(), defs, {}, periods
    )
    batches = window.batches(100)
    await redis_client.hset(keys.applied_key("p2"), "scores:0", 99)  # p2 fenced
    await redis_client.script_flush()  # NOSCRIPT on every command: the groups are resent once
    res = await sink.flush(batches, lambda b, p: NO_WATERMARK)
    got = {r.board: r.outcome for r in res}
    print(got)
    assert got["p2"] is Outcome.FENCED
    assert all(o is Outcome.APPLIED for b, o in got.items() if b != "p2")
    for b in ("p1", "p3"):
        assert await redis_client.pttl(keys.board_key(b)) == -1
        assert await redis_client.zscore(keys.board_key(b), "p") is not None
    assert await redis_client.zscore(keys.board_key("p2"), "p") is None
    race = next(b for b in got if b.startswith("race@"))
    assert await redis_client.pttl(keys.board_key(race)) > 0
    assert [b.board for b in batches] == list(got)


async def test_the_registry_holds_boards_not_their_periods(redis_client: Redis) -> None:
    definition = BoardDef(reset="hourly")
    await board_store.declare(redis_client, "race", definition)
    sink = RedisSink(redis_client, "scores")
    now = int(datetime.now(UTC).timestamp() * 1000)
    for hour in range(3):
        ts = now - hour * 3_600_000
        assert await sink.flush(_batches({"race": definition}, [(hour, "a", 1, ts, ts)]), lambda b, p: -1)
    assert list(sink._registered) == ["race"]
    assert await redis_client.zrange(keys.BOARD_INDEX_KEY, 0, -1) == [b"race"]
