"""The flush step against a real redis-server: atomic, fenced, idempotent on retry, one round trip."""

from __future__ import annotations

from typing import cast

import pytest
from redis.asyncio import Redis

from archive import lowering
from flusher.batch import NO_WATERMARK, BoardBatch, ExpectedWatermark, Outcome
from flusher.redis_sink import RedisSink
from hotboard import keys

pytestmark = pytest.mark.integration


def _expect(marks: dict[tuple[str, int], int]) -> ExpectedWatermark:
    return lambda board, partition: marks.get((board, partition), NO_WATERMARK)


async def _board(redis: Redis, board: str) -> dict[str, int]:
    rows = cast("list[tuple[bytes, float]]", await redis.zrange(keys.board_key(board), 0, -1, withscores=True))
    return {m.decode(): int(s) for m, s in rows}


async def test_apply_then_fence_then_idempotent_retry(redis_client: Redis) -> None:
    sink = RedisSink(redis_client, "scores")
    batch = BoardBatch("g", {"a": 5, "b": -2}, {0: 9, 3: 4})
    [first] = await sink.flush([batch], _expect({}))
    assert first.outcome is Outcome.APPLIED and first.writes == 2 and first.version == 1
    assert await _board(redis_client, "g") == {"a": 5, "b": -2}
    assert await redis_client.hgetall(keys.applied_key("g")) == {b"scores:0": b"9", b"scores:3": b"4"}
    meta = await redis_client.hgetall(keys.meta_key("g"))
    assert meta[b"version"] == b"1" and int(meta[b"as_of"]) > 1_700_000_000_000
    assert await redis_client.zrange(keys.BOARD_INDEX_KEY, 0, -1) == [b"g"]

    # The reply was lost and the same window is sent again: recognised, not applied twice.
    [again] = await sink.flush([batch], _expect({}))
    assert again.outcome is Outcome.ALREADY_APPLIED
    assert await _board(redis_client, "g") == {"a": 5, "b": -2}

    # A zombie still believing the watermarks are where they were before: fenced, nothing touched.
    stale = BoardBatch("g", {"a": 100}, {0: 12})
    [fenced] = await sink.flush([stale], _expect({("g", 0): 5}))
    assert fenced.outcome is Outcome.FENCED and fenced.writes == 0
    assert await _board(redis_client, "g") == {"a": 5, "b": -2}
    assert (await redis_client.hgetall(keys.meta_key("g")))[b"version"] == b"1"

    # The rightful owner, with the right expectation, moves on.
    nxt = BoardBatch("g", {"a": 1, "c": 3}, {0: 12})
    [ok] = await sink.flush([nxt], _expect({("g", 0): 9}))
    assert ok.outcome is Outcome.APPLIED and ok.version == 2
    assert await _board(redis_client, "g") == {"a": 6, "b": -2, "c": 3}


async def test_watermarks_load_per_partition_and_survive_script_flush(redis_client: Redis) -> None:
    sink = RedisSink(redis_client, "scores")
    await sink.flush(
        [BoardBatch("g", {"a": 1}, {0: 5, 1: 7}), BoardBatch("s", {"a": 1}, {1: 3})],
        _expect({}),
    )
    assert await sink.load_watermarks(0, ["g", "s"]) == ({"g": 5, "s": NO_WATERMARK}, NO_WATERMARK)
    await sink.advance_checkpoints({1: (NO_WATERMARK, 2)})
    assert await sink.load_watermarks(1, ["g", "s", "never"]) == ({"g": 7, "s": 3, "never": NO_WATERMARK}, 2)
    await redis_client.script_flush()  # as after a restart: EVALSHA answers NOSCRIPT, the sink reloads
    [res] = await sink.flush([BoardBatch("g", {"b": 2}, {2: 0})], _expect({}))
    assert res.outcome is Outcome.APPLIED
    assert await _board(redis_client, "g") == {"a": 1, "b": 2}


async def test_large_flush_is_exact_and_integer(redis_client: Redis) -> None:
    sink = RedisSink(redis_client, "scores")
    deltas = {f"p{i}": (i * 7919) % 100_003 - 50_000 for i in range(20_000)}
    deltas["big"] = 2**53 - 1
    [res] = await sink.flush([BoardBatch("g", deltas, {0: 1})], _expect({}))
    assert res.outcome is Outcome.APPLIED and res.writes == len(deltas)
    assert await _board(redis_client, "g") == deltas


async def test_totals_saturate_at_the_exact_range(redis_client: Redis) -> None:
    """2,049 maximal deltas would take a total past 2^64: a total stops at 2^53-1 (and is counted)."""
    sink = RedisSink(redis_client, "scores")
    top = 2**53 - 1
    results = [
        (await sink.flush([BoardBatch("g", {"whale": top, "krill": -top}, {0: i})], _expect({("g", 0): i - 1})))[0]
        for i in range(3)
    ]
    assert [r.outcome for r in results] == [Outcome.APPLIED] * 3
    assert [r.saturated for r in results] == [0, 2, 2]
    assert await _board(redis_client, "g") == {"whale": top, "krill": -top}
    [back] = await sink.flush([BoardBatch("g", {"whale": -1}, {0: 3})], _expect({("g", 0): 2}))
    assert back.saturated == 0 and (await _board(redis_client, "g"))["whale"] == top - 1


async def test_checkpoints_move_only_from_the_expected_value(redis_client: Redis) -> None:
    sink = RedisSink(redis_client, "scores")
    assert await sink.load_checkpoints([0, 1]) == {}
    first = await sink.advance_checkpoints({0: (NO_WATERMARK, 10), 1: (NO_WATERMARK, 3)})
    assert [r.ok for r in first] == [True, True]
    assert await sink.load_checkpoints([0, 1, 2]) == {0: 10, 1: 3}
    # a stale writer (a zombie, or a worker that missed a FLUSHALL) is refused and told what Redis holds
    stale = await sink.advance_checkpoints({0: (7, 12), 1: (3, 9)})
    assert [(r.ok, r.previous) for r in stale] == [(False, 10), (True, 3)]
    await redis_client.flushall()
    [gone] = await sink.advance_checkpoints({1: (9, 20)})
    assert not gone.ok and gone.previous == NO_WATERMARK


async def test_a_swap_refuses_a_checkpoint_move_decided_before_it_even_at_the_same_checkpoint(
    redis_client: Redis,
) -> None:
    """A restore's lowering that finds the checkpoint no higher changes no checkpoint, but bumps the partition's
    generation: a move from the value the worker knows is refused until it positions again (reading it)."""
    sink = RedisSink(redis_client, "scores")
    ckpt = keys.checkpoint_key("scores")
    await redis_client.hset(ckpt, "0", 10)
    assert await sink.load_checkpoints([0, 1]) == {0: 10}
    await lowering.lower(redis_client, "scores", ["0", 10, 0])  # the archive's checkpoint: the one Redis holds
    checkpoint, gen, untouched = await redis_client.hmget(ckpt, ["0", keys.gen_field(0), keys.gen_field(1)])
    assert (checkpoint, untouched) == (b"10", None) and gen is not None and int(gen) > 0
    [refused, other] = await sink.advance_checkpoints({0: (10, 12), 1: (NO_WATERMARK, 3)})
    assert (refused.ok, refused.previous) == (False, 10) and other.ok, "partition 1 was not swapped: it moves"
    assert await redis_client.hget(ckpt, "0") == b"10"
    assert await sink.load_checkpoints([0]) == {0: 10}
    assert [r.ok for r in await sink.advance_checkpoints({0: (10, 12)})] == [True]
    await redis_client.flushall()  # every field absent again: generation 0, as a fresh worker knows it
    fresh = RedisSink(redis_client, "scores")
    assert [r.ok for r in await fresh.advance_checkpoints({0: (NO_WATERMARK, 5)})] == [True]


async def test_a_restoring_mark_holds_the_checkpoint_until_cleared_or_past_its_deadline(redis_client: Redis) -> None:
    """The lowering before a board's swap on a Redis Cluster marks the partition restoring: every move is refused
    (the worker resynchronises, its windows stay fenced per board) until the lowering after the swap clears the
    mark. A mark past its deadline is a crashed restore's: ignored, and deleted by the move it let through."""
    sink = RedisSink(redis_client, "scores")
    ckpt, mark = keys.checkpoint_key("scores"), keys.restoring_field(0)
    await redis_client.hset(ckpt, "0", 10)
    await lowering.mark(redis_client, "scores", ["0", 10, 0], "run-a")
    assert await sink.load_checkpoints([0, 1]) == {0: 10}  # positioned after the first lowering: its generation
    [refused, other] = await sink.advance_checkpoints({0: (10, 12), 1: (NO_WATERMARK, 3)})
    assert (refused.ok, refused.previous) == (False, 10) and other.ok, "only the marked partition is held"
    assert await redis_client.hget(ckpt, mark) is not None, "a live mark stays"
    await lowering.clear(redis_client, "scores", ["0", 10, 0], "run-a")
    assert await redis_client.hget(ckpt, mark) is None
    assert await sink.load_checkpoints([0]) == {0: 10}
    assert [r.ok for r in await sink.advance_checkpoints({0: (10, 12)})] == [True]
    await redis_client.hset(ckpt, mark, 1)  # a restore that died between its lowerings, long ago
    assert [r.ok for r in await sink.advance_checkpoints({0: (12, 14)})] == [True]
    assert await redis_client.hmget(ckpt, ["0", mark]) == [b"14", None]


async def test_a_halt_pins_its_checkpoint_and_a_lift_for_a_new_log_moves_the_epoch(redis_client: Redis) -> None:
    sink = RedisSink(redis_client, "scores")
    ckpt = keys.checkpoint_key("scores")
    await redis_client.hset(ckpt, "0", 40)
    await sink.record_halt(0, "beyond_log_end")
    assert await redis_client.hget(ckpt, "0:halt") == b"beyond_log_end 40"  # the checkpoint Redis holds
    [refused] = await sink.advance_checkpoints({0: (40, 45)})
    assert not refused.ok and await redis_client.hget(ckpt, "0") == b"40", "a halted checkpoint is the operator's"

    await redis_client.hdel(ckpt, "0")  # the operator: replay the new log from its start
    assert await sink.lift_halt(0, ("beyond_log_end", 39), new_log=True) is None, "not the halt recorded"
    assert await sink.lift_halt(0, ("beyond_log_end", 40), new_log=True) == NO_WATERMARK
    assert await redis_client.hmget(ckpt, ["0:halt", "0:epoch"]) == [None, b"1"]
    assert sink.field(0) == "scores:0:1"

    # the epoch is read with the positions; a lift for the same log keeps it
    other = RedisSink(redis_client, "scores")
    await other.load_positions([0])
    assert other.field(0) == "scores:0:1"
    await redis_client.hset(ckpt, "0", 7)
    await other.record_halt(0, "retention_lost")
    await redis_client.hset(ckpt, "0", 9)
    assert await other.lift_halt(0, ("retention_lost", 7), new_log=False) == 9
    assert (await redis_client.hget(ckpt, "0:epoch"), other.field(0)) == (b"1", "scores:0:1")

    # the flush and the lookup use the epoch's field: the old log's watermark on the board is not this log's
    await redis_client.hset(keys.applied_key("g"), "scores:0", 1000)
    marks, checkpoint = await other.load_watermarks(0, ["g"])
    assert (marks, checkpoint) == ({"g": NO_WATERMARK}, 9)
    [applied] = await other.flush([BoardBatch("g", {"a": 1}, {0: 10})], _expect({}))
    assert applied.outcome is Outcome.APPLIED
    assert await redis_client.hgetall(keys.applied_key("g")) == {b"scores:0": b"1000", b"scores:0:1": b"10"}


async def test_checkpoint_and_halt_scripts_go_by_sha_and_survive_script_flush(redis_client: Redis) -> None:
    """Every script the sink runs goes by its SHA1 (EVALSHA), its text only after a NOSCRIPT: the checkpoint
    step of every window as much as the flush."""
    sink = RedisSink(redis_client, "scores")
    ckpt = keys.checkpoint_key("scores")
    await redis_client.script_flush()  # as after a restart: each script answers NOSCRIPT once, then is loaded
    await redis_client.config_resetstat()
    assert [r.ok for r in await sink.advance_checkpoints({0: (NO_WATERMARK, 10)})] == [True]
    assert [r.ok for r in await sink.advance_checkpoints({0: (10, 12)})] == [True]
    await sink.record_halt(0, "retention_lost")
    assert await redis_client.hget(ckpt, "0:halt") == b"retention_lost 12"
    await redis_client.hset(ckpt, "0", 20)
    assert await sink.lift_halt(0, ("retention_lost", 12), new_log=False) == 20
    stats = await redis_client.info("commandstats")
    assert "cmdstat_eval" not in stats, "a script was sent as text"
    assert stats["cmdstat_evalsha"]["calls"] >= 4


async def test_a_generation_read_before_a_flushall_is_not_current_after_a_restore_that_follows_it(
    redis_client: Redis,
) -> None:
    """A worker positioned after two lowerings (generation 2); Redis is FLUSHALLed (the run_id stays) and restored
    from an archive whose checkpoint is the worker's: its two lowerings count the generation up from absent to 2
    again. The move the worker decided before the wipe (its window is on no board now) must still be refused."""
    sink = RedisSink(redis_client, "scores")
    for _ in range(2):
        await lowering.lower(redis_client, "scores", ["0", 10, 0])
    assert await sink.load_checkpoints([0]) == {0: 10}
    await redis_client.flushall()
    for _ in range(2):  # hotboard restore: before the swaps and after them
        await lowering.lower(redis_client, "scores", ["0", 10, 0])
    [move] = await sink.advance_checkpoints({0: (10, 12)})
    assert not move.ok, "a generation counted up from absent again names another restore"
