"""The group flush script (hotboard.lua_groups.FLUSH_GROUP) against a real redis-server: applied once, a replay
recognised, fenced on a wrong watermark, refused on a moved epoch, another layout or an older tool's write, two
partitions' owners side by side, one version per call (the group's, past any meta hash a board still has, which
goes), period boards expired and seeded."""

from __future__ import annotations

import time
from typing import cast

import pytest
from redis.asyncio import Redis

from hotboard import keys, lua, lua_removal
from hotboard.boards import DEFAULT
from hotboard.group_flush import DefRead, GroupBoard, GroupOutcome, GroupResult, GroupWindow, flush_group
from hotboard.script import Script

pytestmark = pytest.mark.integration

MARKED = DEFAULT.spec + keys.GROUP_SPEC_MARK
P0, P1 = keys.watermark_field("scores", 0), keys.watermark_field("scores", 1)


async def _board(redis: Redis, board: str) -> dict[str, int]:
    rows = cast("list[tuple[bytes, float]]", await redis.zrange(keys.board_key(board), 0, -1, withscores=True))
    return {m.decode(): int(s) for m, s in rows}


async def _group(redis: Redis, tag: str = "7") -> dict[str, str]:
    held = cast("dict[bytes, bytes]", await redis.hgetall(keys.group_key(tag)))
    return {k.decode(): v.decode() for k, v in held.items()}


def _window(marks: dict[str, tuple[int, int]], *boards: GroupBoard, epoch: str = "0") -> GroupWindow:
    return GroupWindow("7", marks, boards, epoch=epoch)


async def _applied(redis: Redis, window: GroupWindow) -> GroupResult:
    result = await flush_group(redis, window)
    assert result.outcome is GroupOutcome.APPLIED, result
    return result


async def test_a_window_applies_once_and_its_replay_is_recognised(redis_client: Redis) -> None:
    window = _window(
        {P0: (-1, 9), P1: (-1, 4)},
        GroupBoard("a", {"x": 5, "y": -2}),
        GroupBoard("b", {"x": keys.MAX_EXACT, "z": 1, "w": -keys.MAX_EXACT}),
    )
    first = await _applied(redis_client, window)
    assert first.versions == (1, 1) and first.saturated == (0, 0)
    assert await _board(redis_client, "a") == {"x": 5, "y": -2}
    group = await _group(redis_client)
    assert int(group.pop("as_of")) > 1_700_000_000_000
    assert group == {P0: "9", P1: "4", "version": "1", "layout": keys.layout_stamp()}
    assert not await redis_client.exists(keys.applied_key("a"), keys.applied_key("b"))
    assert not await redis_client.exists(keys.meta_key("a"), keys.meta_key("b"))  # the group's version is theirs
    assert await redis_client.hget(keys.def_key("a"), "spec") == MARKED.encode()

    again = await flush_group(redis_client, window)  # the reply was lost: the same window once more
    assert again.outcome is GroupOutcome.ALREADY_APPLIED
    assert await _board(redis_client, "a") == {"x": 5, "y": -2}
    assert (await _group(redis_client))["version"] == "1"

    nxt = _window(
        {P0: (9, 12)},
        GroupBoard("a", {"x": 1}, definition=DefRead.MARKED),
        GroupBoard("b", {"x": 1, "w": -1}, definition=DefRead.MARKED),
    )
    second = await _applied(redis_client, nxt)
    assert second.versions == (2, 2) and second.saturated == (0, 2)
    assert await _board(redis_client, "b") == {"x": keys.MAX_EXACT, "z": 1, "w": -keys.MAX_EXACT}
    assert (await _group(redis_client))[P0] == "12"
    assert (await _group(redis_client))["version"] == "2"


async def test_a_wrong_expected_watermark_is_fenced_and_writes_nothing(redis_client: Redis) -> None:
    await _applied(redis_client, _window({P0: (-1, 9)}, GroupBoard("a", {"x": 5})))
    before = await _group(redis_client)
    stale = _window({P0: (5, 12)}, GroupBoard("a", {"x": 100}, definition=DefRead.MARKED))
    fenced = await flush_group(redis_client, stale)
    assert fenced.outcome is GroupOutcome.FENCED and fenced.current == {P0: 9}
    assert await _board(redis_client, "a") == {"x": 5}
    assert await _group(redis_client) == before


async def test_a_stepped_epoch_refuses_the_window_until_it_is_read_again(redis_client: Redis) -> None:
    await redis_client.hset(keys.group_key("7"), keys.GROUP_EPOCH, "1733200000000000")
    window = _window({P0: (-1, 3)}, GroupBoard("a", {"x": 5}))
    refused = await flush_group(redis_client, window)
    assert refused.outcome is GroupOutcome.EPOCH_MOVED and refused.held == "1733200000000000"
    assert not await redis_client.exists(keys.board_key("a"), keys.meta_key("a"), keys.def_key("a"))
    assert (await _group(redis_client)).keys() == {keys.GROUP_EPOCH}
    read_again = _window({P0: (-1, 3)}, GroupBoard("a", {"x": 5}), epoch="1733200000000000")
    await _applied(redis_client, read_again)
    assert await _board(redis_client, "a") == {"x": 5}


async def test_another_layout_stamp_is_refused(redis_client: Redis) -> None:
    await _applied(redis_client, _window({P0: (-1, 3)}, GroupBoard("a", {"x": 5})))
    other = GroupWindow("7", {P0: (3, 4)}, [GroupBoard("a", {"x": 1}, definition=DefRead.MARKED)], layout="node:64")
    refused = await flush_group(redis_client, other)
    assert refused.outcome is GroupOutcome.OTHER_LAYOUT and refused.held == keys.layout_stamp()
    assert await _board(redis_client, "a") == {"x": 5}


async def test_two_partitions_owners_do_not_fence_each_other(redis_client: Redis) -> None:
    """Owner A holds partition 0, owner B partition 1; both feed board "shared" of one group, each knowing only
    its own partition's group watermark. Neither may fence the other, whatever the interleaving."""
    a_mark, b_mark = -1, -1
    for step in range(4):
        a_new, b_new = 10 * (step + 1), 10 * (step + 1) + 5
        a_board = GroupBoard("shared", {"a": 1}, definition=DefRead.ABSENT if step == 0 else DefRead.MARKED)
        await _applied(redis_client, _window({P0: (a_mark, a_new)}, a_board, GroupBoard(f"only-a-{step}", {"a": 1})))
        b_board = GroupBoard("shared", {"b": 2}, definition=DefRead.MARKED)
        await _applied(redis_client, _window({P1: (b_mark, b_new)}, b_board))
        a_mark, b_mark = a_new, b_new
    assert await _board(redis_client, "shared") == {"a": 4, "b": 8}
    group = await _group(redis_client)
    assert (group[P0], group[P1]) == ("40", "45")


async def test_a_boards_own_meta_is_taken_into_the_groups_version_and_goes(redis_client: Redis) -> None:
    """A board that still has a meta hash (written under the old layout, or by a per-board writer such as ERASE
    since) joins its group's version: the call's version is past the board's own, so no reader sees a board's
    version go back, and the meta hash goes (a reader then reads the group's)."""
    await redis_client.hset(keys.meta_key("old"), mapping={"version": 7, "as_of": 1})
    first = await _applied(redis_client, _window({P0: (-1, 1)}, GroupBoard("old", {"x": 1}), GroupBoard("b", {"x": 1})))
    assert first.versions == (8, 8)
    assert not await redis_client.exists(keys.meta_key("old"))
    assert (await _group(redis_client))["version"] == "8"

    erase = Script(lua_removal.ERASE)  # a per-board writer that does not know the group (step 3 of the plan)
    b_keys = [keys.board_key("b"), keys.meta_key("b"), keys.def_key("b"), keys.player_meta_key("b")]
    b_keys += [keys.members_key("b"), keys.dense_key("b"), keys.counts_key("b")]
    assert int((await erase(redis_client, b_keys, ["x"]))[0]) == 1
    # ERASE knows no group yet (step 3 of the plan): it starts the board's own meta over, below the group's
    assert await redis_client.hget(keys.meta_key("b"), "version") == b"1"
    await redis_client.hset(keys.meta_key("b"), "version", 20)  # as if the board's own versions ran ahead

    marked = DefRead.MARKED
    window = _window(
        {P0: (1, 2)}, GroupBoard("old", {"x": 1}, definition=marked), GroupBoard("b", {"y": 1}, definition=marked)
    )
    second = await _applied(redis_client, window)
    assert second.versions == (21, 21)
    assert not await redis_client.exists(keys.meta_key("b"))
    assert (await _group(redis_client))["version"] == "21"

    third = await _applied(redis_client, _window({P0: (2, 3)}, GroupBoard("b", {"y": 1}, definition=marked)))
    assert third.versions == (22,)
    assert await _board(redis_client, "b") == {"y": 2}


async def test_the_shipped_flush_refuses_a_marked_board(redis_client: Redis) -> None:
    """An older worker sees no applied hash (the -1 it expects) on a group board: the spec marker refuses it."""
    await _applied(redis_client, _window({P0: (-1, 9)}, GroupBoard("a", {"x": 5})))
    flush = Script(lua.FLUSH)
    a_keys = [keys.board_key("a"), keys.applied_key("a"), keys.meta_key("a"), keys.def_key("a")]
    reply = await flush(redis_client, a_keys, [1, P0, -1, 9, DEFAULT.spec, 0, 0, 2, "x", 5])
    assert [int(reply[0][0]), reply[0][1]] == [-2, MARKED.encode()]
    assert await _board(redis_client, "a") == {"x": 5}


async def test_an_older_tools_delete_or_create_is_seen(redis_client: Redis) -> None:
    await _applied(redis_client, _window({P0: (-1, 1)}, GroupBoard("a", {"x": 5})))
    delete = Script(lua_removal.DELETE)
    a_keys = [keys.board_key("a"), keys.applied_key("a"), keys.meta_key("a"), keys.def_key("a")]
    a_keys += [keys.player_meta_key("a"), keys.members_key("a"), keys.dense_key("a"), keys.counts_key("a")]
    await delete(redis_client, a_keys, ["a", P0, 1])  # an older `boards delete`: no epoch step
    seen = await flush_group(redis_client, _window({P0: (1, 2)}, GroupBoard("a", {"x": 1}, definition=DefRead.MARKED)))
    assert seen.outcome is GroupOutcome.FOREIGN_WRITE and seen.held == "1 0"

    await redis_client.hset(keys.def_key("c"), mapping={"spec": "asc/incr/shared"})  # an older `boards create`
    seen = await flush_group(redis_client, _window({P0: (1, 2)}, GroupBoard("c", {"x": 1})))
    assert seen.outcome is GroupOutcome.FOREIGN_WRITE and seen.held == "1 0"
    assert not await redis_client.exists(keys.board_key("c"))
    assert (await _group(redis_client))[P0] == "1"


async def test_a_declared_boards_spec_is_checked_then_marked(redis_client: Redis) -> None:
    await redis_client.hset(keys.def_key("d"), mapping={"spec": "asc/incr/shared", "order": "asc"})
    folded_as_default = _window({P0: (-1, 1)}, GroupBoard("d", {"x": 1}, definition=DefRead.DECLARED))
    refused = await flush_group(redis_client, folded_as_default)
    assert refused.outcome is GroupOutcome.REDEFINED and (refused.board, refused.held) == ("d", "asc/incr/shared")
    assert not await redis_client.exists(keys.board_key("d"))

    declared = _window({P0: (-1, 1)}, GroupBoard("d", {"x": 1}, spec="asc/incr/shared", definition=DefRead.DECLARED))
    await _applied(redis_client, declared)
    assert await redis_client.hget(keys.def_key("d"), "spec") == b"asc/incr/shared" + keys.GROUP_SPEC_MARK.encode()
    assert await redis_client.hget(keys.def_key("d"), "order") == b"asc"


async def test_a_period_board_is_seeded_expires_and_is_skipped_past_its_expiry(redis_client: Redis) -> None:
    spec = "desc/incr/shared|weekly|4|60000"
    expire_ms = int(time.time() * 1000) + 3_600_000
    gone_ms = int(time.time() * 1000) - 1_000
    window = _window(
        {P0: (-1, 5)},
        GroupBoard("s@2026-W49", {"x": 2}, spec=spec, expire_at_ms=expire_ms),
        GroupBoard("s@2026-W40", {"x": 2}, spec=spec, expire_at_ms=gone_ms),
        GroupBoard("plain", {"x": 1}),
    )
    result = await _applied(redis_client, window)
    assert result.versions == (1, 0, 1)
    assert not await redis_client.exists(keys.meta_key("s@2026-W49"))
    live = [keys.board_key("s@2026-W49"), keys.def_key("s@2026-W49")]
    for key in live:
        assert abs(await redis_client.pexpiretime(key) - expire_ms) <= 1, key
    assert await redis_client.hget(keys.def_key("s@2026-W49"), "spec") == (spec + keys.GROUP_SPEC_MARK).encode()
    assert await redis_client.hget(keys.def_key("s@2026-W49"), "ties") == b"shared"
    assert await redis_client.pttl(keys.board_key("plain")) == -1
    assert not await redis_client.exists(keys.board_key("s@2026-W40"), keys.meta_key("s@2026-W40"))


async def test_a_call_of_expired_boards_only_moves_the_watermarks_not_the_version(redis_client: Redis) -> None:
    """No board changed: readers of the group's boards must not see a new version (a cache refetch, a feed frame)."""
    await _applied(redis_client, _window({P0: (-1, 1)}, GroupBoard("plain", {"x": 1})))
    before = await _group(redis_client)
    gone_ms = int(time.time() * 1000) - 1_000
    spec = "desc/incr/shared|weekly|4|60000"
    result = await _applied(
        redis_client, _window({P0: (1, 2)}, GroupBoard("s@2026-W40", {"x": 2}, spec=spec, expire_at_ms=gone_ms))
    )
    assert result.versions == (0,) and result.saturated == (0,)
    after = await _group(redis_client)
    assert after[P0] == "2" and (after["version"], after["as_of"]) == (before["version"], before["as_of"])


async def test_a_meta_version_that_is_no_number_refuses_the_call_before_any_write(redis_client: Redis) -> None:
    """The meta hashes are all read before the first write: one bad version leaves every other board's meta, and
    every key, as it was (a refusal part-way would lose a board's version for good)."""
    await redis_client.hset(keys.meta_key("a"), mapping={"version": 50, "as_of": 1})
    await redis_client.hset(keys.meta_key("b"), mapping={"version": "oops"})
    refused = await flush_group(
        redis_client, _window({P0: (-1, 1)}, GroupBoard("a", {"x": 1}), GroupBoard("b", {"x": 1}))
    )
    assert refused.outcome is GroupOutcome.BAD_META and (refused.board, refused.held) == ("b", "oops")
    assert await redis_client.hget(keys.meta_key("a"), "version") == b"50"
    assert not await redis_client.exists(keys.board_key("a"), keys.def_key("a"), keys.group_key("7"))

    await redis_client.delete(keys.meta_key("b"))  # the operator's repair
    applied = await _applied(redis_client, _window({P0: (-1, 1)}, GroupBoard("a", {"x": 1}), GroupBoard("b", {"x": 1})))
    assert applied.versions == (51, 51)


async def test_taking_a_meta_in_leaves_its_other_fields(redis_client: Redis) -> None:
    await redis_client.hset(keys.meta_key("a"), mapping={"version": 3, "as_of": 1, "prev": 2, "note": "kept"})
    await _applied(redis_client, _window({P0: (-1, 1)}, GroupBoard("a", {"x": 1})))
    assert await redis_client.hgetall(keys.meta_key("a")) == {b"note": b"kept"}
    assert (await _group(redis_client))["version"] == "4"
