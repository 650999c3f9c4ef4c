"""Period boards on a real redis-server: the fold routes by event time, each period is its own board with a copy
of its board's definition, keys expire after ``keep`` periods (never before end + grace), and the board's
definition is fixed once a period was written."""

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
from hotboard.periods import expire_at_ms
from ingest.pending import Window
from ingest.seasons import route
from tests.records import json_record, utc_ms

pytestmark = pytest.mark.integration


def _fold(window: Window, partition: int, definition: BoardDef, events: list[tuple[int, str, int, int]]) -> None:
    """(offset, player, delta, ts) on board ``race`` folded into ``window`` for ``partition`` under
    ``definition`` (what that partition's chunk read from the worker's cache)."""
    records = [
        json_record({"board": "race", "player": p, "delta": d, "ts": ts}, o, timestamp=ts) for o, p, d, ts in events
    ]
    decoded, defs, periods = route(records, decode_all(records, Decoder()), {"race": definition})
    marks = {str(f[0]): -1 for f in decoded if type(f) is tuple}
    window.fold_for(partition).fold_checked(records, decoded, marks, set(), defs, {}, periods)


async def _flush(redis: Redis, definition: BoardDef, events: list[tuple[str, int, int]]) -> list[Any]:
    """(player, delta, ts) on board ``race``, written when they happened, through routing, fold and flush."""
    window = Window()
    _fold(window, 0, definition, [(i, p, d, ts) for i, (p, d, ts) in enumerate(events)])
    batches = window.batches(100)
    results = await RedisSink(redis, "scores").flush(batches, lambda b, p: NO_WATERMARK)
    assert all(r.outcome in (Outcome.APPLIED, Outcome.ALREADY_APPLIED) for r in results), results
    return batches


async def test_periods_are_boards_of_their_own_that_expire_after_keep_periods(redis_client: Redis) -> None:
    definition = BoardDef("desc", "incr", "shared", reset="weekly", keep=2, grace_ms=60_000)
    await board_store.declare(redis_client, "race", definition)
    now = int(datetime.now(UTC).timestamp() * 1000)
    this_week = definition.schedule.period_of(now)
    last_week = definition.schedule.previous(this_week)
    # events either side of the boundary, each written when it happened
    await _flush(
        redis_client, definition, [("a", 5, this_week.start_ms - 1), ("a", 7, this_week.start_ms), ("b", 1, now)]
    )
    old, new = f"race@{last_week.id}", f"race@{this_week.id}"
    assert await redis_client.zscore(keys.board_key(old), "a") == 5
    assert await redis_client.zrange(keys.board_key(new), 0, -1, withscores=True) == [(b"b", 1.0), (b"a", 7.0)]
    assert await redis_client.hget(keys.def_key(new), "spec") == definition.spec.encode()
    assert await redis_client.hget(keys.def_key(new), "ties") == b"shared"
    for period in (last_week, this_week):
        name = f"race@{period.id}"
        expire = expire_at_ms(definition.schedule, period, definition.keep, definition.grace_ms)
        assert expire >= period.end_ms + 2 * 7 * 86_400_000
        for key in (keys.board_key(name), keys.applied_key(name), keys.meta_key(name), keys.def_key(name)):
            assert await redis_client.execute_command("PEXPIRETIME", key) == expire, key  # type: ignore[no-untyped-call]
    # a seasonal board is written once a period is: its definition is now fixed
    with pytest.raises(DefinitionError, match="already has scores"):
        await board_store.declare(redis_client, "race", BoardDef(reset="daily"))
    assert await redis_client.zrange(keys.BOARD_INDEX_KEY, 0, -1) == [b"race"]  # the board, not its periods


async def test_a_period_long_past_its_keep_is_not_resurrected_by_a_replay(redis_client: Redis) -> None:
    definition = BoardDef(reset="daily", keep=1, grace_ms=0)
    await board_store.declare(redis_client, "race", definition)
    ts = utc_ms(2020, 1, 1, 12)
    batches = await _flush(redis_client, definition, [("a", 5, ts)])
    assert [b.board for b in batches] == ["race@2020-01-01"]
    # past its expiry: the script writes nothing (a write would expire at once), so old history stays gone
    assert await redis_client.exists(keys.board_key("race@2020-01-01"), keys.meta_key("race@2020-01-01")) == 0


async def test_a_board_that_never_resets_gets_no_expiry(redis_client: Redis) -> None:
    definition = BoardDef()
    now = int(datetime.now(UTC).timestamp() * 1000)
    await _flush(redis_client, definition, [("a", 5, now)])
    assert await redis_client.pttl(keys.board_key("race")) == -1
    assert await redis_client.exists(keys.def_key("race")) == 0  # nothing seeded: the default stays implicit


@pytest.mark.parametrize("fresh_first", [True, False])
async def test_every_batch_of_a_window_is_checked_against_the_board_definition(
    redis_client: Redis, fresh_first: bool
) -> None:
    """``race`` is redeclared weekly -> daily while its first events are folded: partition 0's chunk was folded
    under the cached weekly definition, then the cache let it go and partition 1's chunk read daily. One window,
    two period boards. Whichever batch comes first, the weekly one must not seed ``race@<week>`` (a period the
    API never reads, since race is daily): the window is refused as redefined and nothing is written."""
    weekly, daily = BoardDef(reset="weekly"), BoardDef(reset="daily")
    await board_store.declare(redis_client, "race", weekly)
    await board_store.declare(redis_client, "race", daily)  # allowed: nothing written yet
    now = int(datetime.now(UTC).timestamp() * 1000)
    window = Window()
    folds = [(1, daily, [(0, "b", 3, now)]), (0, weekly, [(0, "a", 5, now)])]
    for partition, definition, events in folds if fresh_first else folds[::-1]:
        _fold(window, partition, definition, events)
    batches = window.batches(100)
    week = f"race@{weekly.schedule.period_of(now).id}"
    assert week in {b.board for b in batches}
    results = await RedisSink(redis_client, "scores").flush(batches, lambda b, p: NO_WATERMARK)
    assert {r.outcome for r in results} == {Outcome.REDEFINED}
    assert await redis_client.exists(keys.board_key(week), keys.def_key(week), keys.applied_key(week)) == 0


async def test_a_registered_seasonal_board_still_checks_each_batch_definition(redis_client: Redis) -> None:
    """The sink remembers ``race`` as registered (marked daily): a later batch folded under another definition
    (a stale cache entry) is still checked, not waved through to seed its own period."""
    weekly, daily = BoardDef(reset="weekly"), BoardDef(reset="daily")
    await board_store.declare(redis_client, "race", daily)
    sink = RedisSink(redis_client, "scores")
    now = int(datetime.now(UTC).timestamp() * 1000)
    first = Window()
    _fold(first, 0, daily, [(0, "a", 1, now)])
    assert {r.outcome for r in await sink.flush(first.batches(100), lambda b, p: NO_WATERMARK)} == {Outcome.APPLIED}
    second = Window()
    _fold(second, 1, weekly, [(0, "b", 2, now)])
    results = await sink.flush(second.batches(100), lambda b, p: NO_WATERMARK)
    week = f"race@{weekly.schedule.period_of(now).id}"
    assert {r.outcome for r in results} == {Outcome.REDEFINED}
    assert await redis_client.exists(keys.board_key(week), keys.def_key(week)) == 0
