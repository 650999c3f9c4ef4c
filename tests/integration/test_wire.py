"""The sink's send path on a real redis-server: a window streamed in many writes, NOSCRIPT answered on every
command of it, many seasonal boards registered at once, watermark lookups as one script."""

from __future__ import annotations

from typing import cast

import pytest
from redis.asyncio import Redis

from flusher import wire
from flusher.batch import NO_WATERMARK, BoardBatch, Outcome, PeriodTarget
from flusher.redis_sink import RedisSink
from hotboard import board_store, keys, lua
from hotboard.boards import BoardDef
from hotboard.periods import expire_at_ms

pytestmark = pytest.mark.integration

DENSE = BoardDef(ties="dense")


def _window(boards: int, round_no: int) -> list[BoardBatch]:
    """Plain boards (shared FLUSH calls) with a dense board (its own APPLY) every 97th, three players each."""
    out = []
    for b in range(boards):
        deltas = {f"g{b}-p{i}": 1 + i + round_no for i in range(3)}
        definition = DENSE if b % 97 == 0 else BoardDef()
        out.append(BoardBatch(f"w-{b}", deltas, {b % 3: 10 + round_no}, definition))
    return out


async def _totals(redis: Redis, board: str) -> dict[str, int]:
    rows = cast("list[tuple[bytes, float]]", await redis.zrange(keys.board_key(board), 0, -1, withscores=True))
    return {m.decode(): int(s) for m, s in rows}


async def test_a_window_in_many_writes_after_noscript_is_applied_once_per_board(
    redis_client: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wire, "WRITE_BYTES", 2048)  # every few commands a write of its own
    sink = RedisSink(redis_client, "scores", script_players=300)
    for b in range(0, 3000, 97):
        await board_store.declare(redis_client, f"w-{b}", DENSE)
    first = _window(3000, 0)
    await redis_client.script_flush()  # every command of the window answers NOSCRIPT: all are sent again
    results = await sink.flush(first, lambda board, p: NO_WATERMARK)
    assert [r.board for r in results] == [b.board for b in first]
    assert {r.outcome for r in results} == {Outcome.APPLIED}
    assert [r.version for r in results] == [1] * 3000

    # the same window once more (a lost reply): every board recognises it, nothing is applied twice
    again = await sink.flush(_window(3000, 0), lambda board, p: NO_WATERMARK)
    assert {r.outcome for r in again} == {Outcome.ALREADY_APPLIED}

    second = _window(3000, 1)
    results = await sink.flush(second, lambda board, p: 10)
    assert {r.outcome for r in results} == {Outcome.APPLIED}
    for b in (0, 1, 96, 97, 2999):
        assert await _totals(redis_client, f"w-{b}") == {f"g{b}-p{i}": 3 + 2 * i for i in range(3)}
    assert await redis_client.zcard(keys.dense_key("w-97")) == 3
    assert await redis_client.zcard(keys.BOARD_INDEX_KEY) == 3000


async def test_many_new_seasonal_boards_are_marked_in_one_round_trip(redis_client: Redis) -> None:
    weekly = BoardDef(reset="weekly")
    for b in range(400):
        await board_store.declare(redis_client, f"s-{b}", weekly)
    await board_store.declare(redis_client, "s-7", BoardDef(reset="daily"))  # the worker still folds it weekly
    sink = RedisSink(redis_client, "scores")
    week = weekly.schedule.parse_id("2026-W49")
    expiry = expire_at_ms(weekly.schedule, week, weekly.keep, weekly.grace_ms)
    batches = [
        BoardBatch(f"s-{b}@{week.id}", {"a": 1}, {0: 5}, weekly, period=PeriodTarget(f"s-{b}", week.id, expiry))
        for b in range(400)
    ]
    await redis_client.script_flush()
    results = await sink.flush(batches, lambda board, p: NO_WATERMARK)
    assert {r.outcome for r in results} == {Outcome.REDEFINED}  # one stale definition refuses the window
    marked = [await redis_client.hget(keys.meta_key(f"s-{b}"), keys.META_PERIODS) for b in range(400)]
    assert marked.count(None) == 1 and marked[7] is None
    assert await redis_client.zcard(keys.BOARD_INDEX_KEY) == 400

    retry = await sink.flush([b for b in batches if b.board != "s-7@2026-W49"], lambda board, p: NO_WATERMARK)
    assert {r.outcome for r in retry} == {Outcome.APPLIED}
    assert await _totals(redis_client, "s-399@2026-W49") == {"a": 1}


async def test_lookups_read_the_checkpoint_with_the_watermarks(redis_client: Redis) -> None:
    sink = RedisSink(redis_client, "scores")
    await sink.flush([BoardBatch(f"l-{b}", {"a": 1}, {0: b}) for b in range(0, 2000, 2)], lambda b, p: NO_WATERMARK)
    await sink.advance_checkpoints({0: (NO_WATERMARK, 7)})
    await redis_client.script_flush()
    marks, checkpoint = await sink.load_watermarks(0, [f"l-{b}" for b in range(2000)])
    assert checkpoint == 7
    assert marks == {f"l-{b}": b if b % 2 == 0 else NO_WATERMARK for b in range(2000)}
    assert await sink.load_watermarks(1, ["l-0"]) == ({"l-0": NO_WATERMARK}, NO_WATERMARK)


async def test_only_the_commands_redis_forgot_are_sent_again(redis_client: Redis) -> None:
    """APPLY known, FLUSH forgotten: the plain boards' calls answer NOSCRIPT and go again, the dense boards'
    calls ran once; every board exact, every result in its batch's place."""
    for b in range(0, 1000, 97):
        await board_store.declare(redis_client, f"w-{b}", DENSE)
    await redis_client.script_flush()
    await redis_client.script_load(lua.APPLY)
    window = _window(1000, 0)
    results = await RedisSink(redis_client, "scores", script_players=300).flush(window, lambda b, p: NO_WATERMARK)
    assert [(r.board, r.outcome, r.version) for r in results] == [(b.board, Outcome.APPLIED, 1) for b in window]
    for b in (0, 1, 97, 999):
        assert await _totals(redis_client, f"w-{b}") == {f"g{b}-p{i}": 1 + i for i in range(3)}


async def test_a_window_cut_short_by_an_error_is_exact_on_its_retry(
    redis_client: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commands go out while later ones are built: an error half-way leaves the first boards applied. The
    retry, with the same expectations, is recognised where it ran and applied where it did not."""
    monkeypatch.setattr(wire, "WRITE_BYTES", 2048)
    sink = RedisSink(redis_client, "scores", script_players=300)
    for script in (lua.FLUSH, lua.APPLY):
        await redis_client.script_load(script)  # known: what goes out runs (no NOSCRIPT pass to retry)
    for b in range(0, 3000, 97):
        await board_store.declare(redis_client, f"w-{b}", DENSE)
    calls = 0

    def failing(board: str, partition: int) -> int:
        nonlocal calls
        calls += 1
        if calls == 1500:
            raise RuntimeError("injected: the window's arguments cannot be built")
        return NO_WATERMARK

    with pytest.raises(RuntimeError, match="injected"):
        await sink.flush(_window(3000, 0), failing)
    assert 0 < await redis_client.zcard(keys.board_key("w-1")) and not await redis_client.exists("hb:{w-2999}")
    results = await sink.flush(_window(3000, 0), lambda b, p: NO_WATERMARK)
    outcomes = [r.outcome for r in results]
    assert Outcome.ALREADY_APPLIED in outcomes and Outcome.APPLIED in outcomes
    assert set(outcomes) == {Outcome.ALREADY_APPLIED, Outcome.APPLIED}
    for b in range(3000):
        assert await _totals(redis_client, f"w-{b}") == {f"g{b}-p{i}": 1 + i for i in range(3)}


async def test_the_registered_boards_are_bounded_and_registered_again(
    redis_client: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flusher import redis_sink

    monkeypatch.setattr(redis_sink, "MAX_REGISTERED", 25)
    sink = RedisSink(redis_client, "scores")
    for round_no in range(4):
        batches = [BoardBatch(f"r-{round_no}-{b}", {"a": 1}, {0: round_no}) for b in range(10)]
        await sink.flush(batches, lambda board, p: NO_WATERMARK)
        assert len(sink._registered) <= 25
    await redis_client.delete(keys.BOARD_INDEX_KEY)  # lost (as with a Redis restart): registered again
    [again] = await sink.flush([BoardBatch("r-0-0", {"a": 1}, {0: 9})], lambda board, p: 0)
    assert again.outcome is Outcome.APPLIED
    assert await redis_client.zrange(keys.BOARD_INDEX_KEY, 0, -1) == [b"r-0-0"]


async def test_a_board_flushed_every_window_stays_registered_past_the_bound(
    redis_client: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The least recently flushed boards are forgotten first, not every board at once."""
    from flusher import redis_sink

    monkeypatch.setattr(redis_sink, "MAX_REGISTERED", 25)
    sink = RedisSink(redis_client, "scores")
    marks: dict[str, int] = {}
    for round_no in range(8):
        batches = [BoardBatch("hot", {"a": 1}, {0: round_no})]
        batches += [BoardBatch(f"r-{round_no}-{b}", {"a": 1}, {0: round_no}) for b in range(10)]
        results = await sink.flush(batches, lambda board, p: marks.get(board, NO_WATERMARK))
        marks["hot"] = round_no
        assert all(r.outcome is Outcome.APPLIED for r in results)
        registered = await redis_client.zrange(keys.BOARD_INDEX_KEY, 0, -1)
        assert (b"hot" in registered) == (round_no == 0), f"window {round_no}: hot registered again"
        await redis_client.delete(keys.BOARD_INDEX_KEY)  # what a window registers is what the next one looks at
