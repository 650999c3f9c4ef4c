"""hotboard.board_removal on a real redis-server, with a worker's writes landing at chosen points inside a delete:
the board index ends listing the board exactly when the board holds something, and a second delete of a board
says it was deleted already."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from flusher.batch import NO_WATERMARK, BoardBatch, Outcome
from flusher.redis_sink import RedisSink
from hotboard import board_removal, keys, lua_removal
from hotboard.boards import DEFAULT
from hotboard.script import digest

pytestmark = pytest.mark.integration

TOPIC = "scores"
_DELETE_SHA = digest(lua_removal.DELETE)


class Interleaved:
    """The client a delete runs on, running ``before`` and ``after`` (another client's writes: a worker's)
    around its DELETE script, and ``after_unlist`` after the first ZREM of the board index that follows it."""

    def __init__(
        self,
        redis: Redis,
        before: Callable[[], Awaitable[None]] | None = None,
        after: Callable[[], Awaitable[None]] | None = None,
        after_unlist: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._redis: Any = redis  # execute_command is untyped in redis-py
        self._before, self._after, self._after_unlist = before, after, after_unlist
        self.script_runs = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._redis, name)

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        deleting = args[:2] == ("EVALSHA", _DELETE_SHA)
        if deleting and self._before:
            await self._before()
        reply = await self._redis.execute_command(*args, **options)
        if deleting:
            self.script_runs += 1
            if self._after:
                await self._after()
        return reply

    async def zrem(self, name: str, *values: str) -> Any:
        reply = await self._redis.zrem(name, *values)
        if name == keys.BOARD_INDEX_KEY and self._after_unlist and self.script_runs:
            hook, self._after_unlist = self._after_unlist, None
            await hook()
        return reply


async def _write(redis: Redis, board: str, offset: int, expected: int) -> Outcome:
    """One window of ``board`` on partition 0 up to ``offset``, flushed by a worker's sink (a fresh one, so it
    registers the board in the index first, as a worker that never flushed the board does)."""
    batch = BoardBatch(board, {"p": 1}, {0: offset}, DEFAULT)
    [result] = await RedisSink(redis, TOPIC).flush([batch], lambda b, p: expected)
    return result.outcome


async def _listed(redis: Redis, board: str) -> bool:
    return await redis.zscore(keys.BOARD_INDEX_KEY, board) is not None


async def test_a_registration_landing_just_before_the_delete_script_leaves_the_board_unlisted(
    redis_client: Redis,
) -> None:
    """A worker that never flushed the board registers it (ZADD on the index's own slot) while the delete is
    under way, just before the board's script: the board is deleted, and not listed."""
    assert await _write(redis_client, "b", 5, NO_WATERMARK) is Outcome.APPLIED

    async def register() -> None:
        await redis_client.zadd(keys.BOARD_INDEX_KEY, {"b": 0})

    client = Interleaved(redis_client, before=register)
    done = await board_removal.delete(client, TOPIC, "b", {0: 7})  # type: ignore[arg-type]
    assert not await _listed(redis_client, "b")
    assert await redis_client.exists(keys.board_key("b"), keys.meta_key("b")) == 0
    assert done.found and not done.already_deleted and done.points == {0: 7}


@pytest.mark.parametrize("where", ["after the script", "after the index removal"])
async def test_a_board_written_again_during_the_delete_stays_listed(redis_client: Redis, where: str) -> None:
    """A window past the delete point lands once the board's script ran (the board starts afresh, and its
    worker lists it again), before or after the delete's own index removal: the board is listed."""
    assert await _write(redis_client, "b", 5, NO_WATERMARK) is Outcome.APPLIED

    async def reborn() -> None:
        assert await _write(redis_client, "b", 9, 7) is Outcome.APPLIED

    hooks = {"after": reborn} if where == "after the script" else {"after_unlist": reborn}
    client = Interleaved(redis_client, **hooks)
    done = await board_removal.delete(client, TOPIC, "b", {0: 7})  # type: ignore[arg-type]
    assert done.found and done.points == {0: 7}
    assert await redis_client.zrange(keys.board_key("b"), 0, -1, withscores=True) == [(b"p", 1.0)]
    assert await _listed(redis_client, "b")


async def test_a_second_delete_says_the_board_was_deleted_already(redis_client: Redis) -> None:
    """Only the kept watermarks are left of a deleted board: a second delete answers already deleted, raises the
    watermarks to its own delete point (a step of the board: its version is one past the first's, so a wait that
    saw the first never takes a window after the second for its own), and lists nothing."""
    assert await _write(redis_client, "b", 5, NO_WATERMARK) is Outcome.APPLIED
    first = await board_removal.delete(redis_client, TOPIC, "b", {0: 7})
    assert first.found and not first.already_deleted
    again = await board_removal.delete(redis_client, TOPIC, "b", {0: 11})
    assert again.found and again.already_deleted
    assert again.version == first.version + 1 and again.points == {0: 11}
    assert not await _listed(redis_client, "b")
    never = await board_removal.delete(redis_client, TOPIC, "never-written", {0: 11})
    assert not never.found and not never.already_deleted


async def test_an_erasure_on_a_topic_without_events_waits_for_no_checkpoint(redis_client: Redis) -> None:
    assert await board_removal.checkpoints(redis_client, TOPIC, []) == {}
