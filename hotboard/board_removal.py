"""Removing data: a whole board (``hotboard boards delete``) or one player of it (``erase``), each in one script
(:mod:`hotboard.lua_removal`), safe while workers run.

A deleted board keeps its watermarks, raised to the **delete point**: per partition of the topic, the last
offset of the log when the command read it (or what was applied already, if further). Events at or below it
never count again, whether a worker held them in a window at that moment or a replay brings them back; events
after it start the board afresh. A player is erased only once every event sent before the command is applied
(the topic's checkpoints reached the log's end it read): no window in flight can then hold an event of the
player from before, and replays are skipped by the board's watermarks as always. Events of the player sent
later count again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hotboard import keys, lua_removal
from hotboard.redis_client import Client
from hotboard.script import Script

_DELETE = Script(lua_removal.DELETE)
_ERASE = Script(lua_removal.ERASE)

#: How a removal script reaches Redis: (script, keys, args) -> its reply. None: straight to ``redis``. On a
#: Redis Cluster the command gives one that ends on the board's master with WAIT for its replicas, as a window
#: does (:meth:`flusher.cluster.ClusterSink.replicated`): a replica promoted right after then holds the removal,
#: and cannot bring the board or the player back.
Send = Callable[[Script, Sequence[str], Sequence[Any]], Awaitable[Any]]


def _sender(redis: Client, send: Send | None) -> Send:
    async def direct(script: Script, keys_: Sequence[str], args: Sequence[Any]) -> Any:
        return await script(redis, keys_, args)

    return send or direct


@dataclass(frozen=True, slots=True)
class Deleted:
    #: False: nothing of the board was there (nothing was written).
    found: bool
    #: The delete's version, one past the board's (a board written again goes on from it).
    version: int
    #: partition -> the delete point (-1: the partition had no event yet).
    points: dict[int, int]
    #: Only what an earlier delete keeps was there (deleted before, not written or declared since): the
    #: watermarks are raised to ``points`` all the same.
    already_deleted: bool = False


@dataclass(frozen=True, slots=True)
class Erased:
    #: False: the board held nothing of the player.
    found: bool
    #: The player's stored score before (None: not on the board).
    score: float | None


async def epochs(redis: Client, topic: str, partitions: list[int]) -> dict[int, int]:
    """partition -> its log epoch (:func:`hotboard.keys.epoch_field`), which names its watermark field."""
    raw = await redis.hmget(keys.checkpoint_key(topic), [keys.epoch_field(p) for p in partitions])
    return {p: int(v) if v is not None else 0 for p, v in zip(partitions, raw, strict=True)}


async def checkpoints(redis: Client, topic: str, partitions: list[int]) -> dict[int, int]:
    """partition -> its checkpoint (-1 when absent); none asked (every partition empty), none read."""
    if not partitions:
        return {}
    raw = await redis.hmget(keys.checkpoint_key(topic), [str(p) for p in partitions])
    return {p: int(v) if v is not None else -1 for p, v in zip(partitions, raw, strict=True)}


async def delete(
    redis: Client, topic: str, board: str, last_offsets: Mapping[int, int], send: Send | None = None
) -> Deleted:
    """Delete ``board``, its delete point per partition at least ``last_offsets`` (partition -> the log's last
    offset, -1 when empty); its script goes by ``send``."""
    partitions = sorted(last_offsets)
    epoch = await epochs(redis, topic, partitions)
    args: list[str | int] = [board]
    for p in partitions:
        args += (keys.watermark_field(topic, p, epoch[p]), last_offsets[p])
    board_keys = [
        *(keys.board_key(board), keys.applied_key(board), keys.meta_key(board), keys.def_key(board)),
        *(keys.player_meta_key(board), keys.members_key(board), keys.dense_key(board), keys.counts_key(board)),
    ]
    # 1. The board's script, on its slot. 2. Off the index (a slot of its own): a worker registering the board
    # (its ZADD comes before its window) until now is undone here. 3. Listed again if it holds something by
    # then: a window past the delete point, or a declaration, landed since the script, and its own ZADD may
    # have come before ours. One landing after the check lists it itself (the worker's ZADD follows the
    # window's reply, a declaration's its script).
    reply = await _sender(redis, send)(_DELETE, board_keys, args)
    status = int(reply[0])
    if not status:
        return Deleted(False, 0, {})
    await redis.zrem(keys.BOARD_INDEX_KEY, board)
    if await redis.exists(keys.board_key(board), keys.meta_key(board), keys.def_key(board)):
        await redis.zadd(keys.BOARD_INDEX_KEY, {board: 0})
    points = {p: int(v) for p, v in zip(partitions, reply[2:], strict=True)}
    return Deleted(True, int(reply[1]), points, already_deleted=status == 2)


async def erase(redis: Client, board: str, player: str, send: Send | None = None) -> Erased:
    """Remove ``player`` from ``board`` (score, tie time, dense count, meta) in one step, sent by ``send``."""
    board_keys = [
        *(keys.board_key(board), keys.meta_key(board), keys.def_key(board), keys.player_meta_key(board)),
        *(keys.members_key(board), keys.dense_key(board), keys.counts_key(board)),
    ]
    reply = await _sender(redis, send)(_ERASE, board_keys, [player])
    if not int(reply[0]):
        return Erased(False, None)
    return Erased(True, None if reply[1] is None else float(reply[1]))
