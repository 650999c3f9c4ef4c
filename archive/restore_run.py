"""What one restore run owns beside its swaps: the checkpoints it may write where Redis lost them, or raise where
retention deleted what Redis lacks (:class:`Lowest`), and, for a restore of every board, the run token that shows
Redis lost none of its swaps (:class:`WholeRestore`), checked in the last lowering's own step (:data:`_FINISH`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from redis.exceptions import ResponseError

from archive.lowering import LOWERING
from flusher.batch import NO_WATERMARK
from hotboard import keys
from hotboard.redis_client import Client
from hotboard.script import Script
from ingest.partitions import HaltReason

log = logging.getLogger(__name__)


class Lowest:
    """The checkpoints a whole restore may write where Redis holds none: per partition, the lowest any snapshot a
    board was swapped in from named.

    A lost Redis's partitions halt (``redis_lost``) with no checkpoint, and a halt lifts once the checkpoint is
    written. So until every board is swapped in, no lowering writes a checkpoint Redis holds none of (``fill``
    false): a restore that dies between two swaps leaves the halt for the next one, instead of a worker replaying
    only the tail onto boards that are still empty. The last lowering then writes this: every swapped board holds
    everything up to it (a snapshot's checkpoints only grow with the archive), so the replay misses nothing.

    Only the boards' snapshots count: the first lowering's swaps no board in (where the archive had no checkpoint
    of a partition yet there, and has one by the first board, that one is right). A partition one board's snapshot
    lacked (neither the archive nor Redis had its checkpoint then) is left out: that board may lack events of it
    that a later snapshot covers, so the checkpoint stays unwritten and the partition halted, for a restore that
    reads it in every snapshot (see :meth:`missing`). With no board swapped in, the first lowering's counts.

    The same last lowering **raises** to it a checkpoint Redis still holds, where that is lower, of a partition
    halted ``retention_lost`` at that very checkpoint (:data:`_RAISE_LOST`): retention deleted records after it that
    were never applied, so the worker cannot replay them, but the archiver (a consumer of its own) applied them, and
    every board now holds what its snapshot held. Exact for the same reason as the fill: every event up to it is in
    every board (the boards not swapped in were not in the archive then, so no event up to it was theirs), and later
    ones replay once, each board's watermarks skipping what it holds. Never a running partition's (its worker replays
    from its own, the watermarks skip), never another halt's, never by a restore of one board."""

    def __init__(self) -> None:
        self._first: list[Any] = []
        self._lowest: dict[str, tuple[int, int]] = {}
        self._seen: dict[str, int] = {}
        self._snapshots = 0
        #: Boards swapped in (their snapshots added).
        self.swaps = 0

    def first(self, lowered: Sequence[Any]) -> None:
        """The first lowering's (partition, checkpoint, epoch) triples: what counts while no board is swapped in."""
        self._first = list(lowered)

    def add(self, lowered: Sequence[Any], *, swapped: bool = True) -> None:
        """The triples of the snapshot one board was swapped in from (``swapped`` false: of a listing of the
        boards, which counts as a snapshot but swaps nothing in)."""
        self.swaps += swapped
        self._snapshots += 1
        for i in range(0, len(lowered), 3):
            partition, checkpoint, epoch = str(lowered[i]), int(lowered[i + 1]), int(lowered[i + 2])
            self._seen[partition] = self._seen.get(partition, 0) + 1
            held = self._lowest.get(partition)
            if held is None or checkpoint < held[0]:
                self._lowest[partition] = (checkpoint, epoch)

    def missing(self) -> set[str]:
        """Partitions some board's snapshot named and another's lacked: left out of :meth:`triples`."""
        return {p for p, n in self._seen.items() if n < self._snapshots}

    def triples(self) -> list[Any]:
        """(partition, checkpoint, epoch) triples: the lowest of each partition every board's snapshot named."""
        if not self._snapshots:
            return list(self._first)
        out: list[Any] = []
        for partition, (checkpoint, epoch) in sorted(self._lowest.items()):
            if self._seen[partition] == self._snapshots:
                out += (partition, checkpoint, epoch)
        return out


class RestoreInterrupted(TimeoutError):
    """Redis lost data while a whole restore ran (its run token, on the checkpoint hash's slot, no longer counts
    the swaps the run made: a FLUSHALL, or a restart from an RDB or AOF older than some of them): boards it swapped
    in may be gone with it, so it writes no checkpoint Redis lost, and the partitions stay halted. A TimeoutError,
    so the command exits 3 (run it again) and a worker's own restore tries again after a backoff."""


#: How long a whole restore's run token lives (ms): far past any restore; a run that dies leaves none for long.
RUN_TOKEN_TTL_MS = 86_400_000
#: The marker of the final lowering's refusal (see :data:`_FINISH`).
_INTERRUPTED = "hotboard restore interrupted"
#: The raise of a whole restore's last lowering (see :class:`Lowest`): each named partition whose halt field reads
#: ``retention_lost <c>`` with ``<c>`` the checkpoint Redis holds now (the halt still stands: only an operator or a
#: restore moves a halted partition's checkpoint) and whose triple's checkpoint is above ``<c>`` goes up to it. The
#: halt stays recorded at ``<c>``, so the checkpoint now differs from it and the halt lifts at the next look (the
#: worker's, or the LossRestorer's right after). Answers the partitions raised.
_RAISE_LOST = f"""
local function raise_lost(ckpt_key, args, first)
  local raised = {{}}
  for i = first, #args, 3 do
    local partition, lowest, epoch = args[i], args[i + 1], tonumber(args[i + 2])
    local held = redis.call('HMGET', ckpt_key, partition, partition .. ':halt', partition .. ':epoch')
    local at = string.match(held[2] or '', '^{HaltReason.RETENTION_LOST.value} (%-?%d+)$')
    -- only in the log the archive's checkpoint is an offset of: after a re-created topic the two may be in
    -- different log epochs (the archiver's halt is lifted apart from the worker's), and the offsets not comparable
    local same_log = epoch == tonumber(held[3] or '0')
    if held[1] and at and same_log and tonumber(at) == tonumber(held[1]) and tonumber(lowest) > tonumber(at) then
      redis.call('HSET', ckpt_key, partition, lowest)
      table.insert(raised, partition)
    end
  end
  return raised
end
"""
#: The last lowering of a restore, in one step: refused (nothing written) where the run token KEYS[2] (a set, see
#: :class:`WholeRestore`) does not hold ARGV[1] + 1 members; else, where ARGV[2] is '1' (a whole restore), the
#: ``retention_lost`` checkpoints below the triples raised (:data:`_RAISE_LOST`), then the triples lowered (filling
#: where ARGV[2] is '1'), and, where ARGV[1] is above 0 (boards were swapped in), every other partition the hash
#: holds a checkpoint of brought down to none: its first checkpoint was written after the last board's snapshot was
#: read, so that board may hold none of its events. The token is then deleted. KEYS: the checkpoint hash, the run
#: token (the hash's tag: the same slot; absent for a restore of one board, whose ARGV[1] is -1 for no check). ARGV:
#: the swaps, fill, then (partition, checkpoint, epoch) triples. Answers the partitions raised.
_FINISH = Script(
    LOWERING
    + _RAISE_LOST
    + f"""
local swaps = tonumber(ARGV[1])
if KEYS[2] and redis.call('SCARD', KEYS[2]) ~= swaps + 1 then return redis.error_reply('{_INTERRUPTED}') end
local raised = {{}}
if KEYS[2] and ARGV[2] == '1' then raised = raise_lost(KEYS[1], ARGV, 3) end
lower(KEYS[1], ARGV, 3, 'lower', '', 0, ARGV[2] == '1')
if swaps > 0 then
  local named, unnamed = {{}}, {{}}
  for i = 3, #ARGV, 3 do named[ARGV[i]] = true end
  for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.match(field, '^%d+$') and not named[field] then
      table.insert(unnamed, field)
      table.insert(unnamed, '{NO_WATERMARK}')
      table.insert(unnamed, '0')
    end
  end
  lower(KEYS[1], unnamed, 1, 'lower', '', 0, false)
end
if KEYS[2] then redis.call('DEL', KEYS[2]) end
return raised
"""
)
#: Count one swap on a whole restore's run token KEYS[1] (the member ARGV[1] names the swap: a retried count is one
#: count), only while the token exists (a token Redis lost stays lost).
_COUNT = Script("if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('SADD', KEYS[1], ARGV[1]) end")
#: Start a run token: one member (a set never exists empty), its TTL. KEYS: the token. ARGV: the TTL (ms).
_BEGIN = Script(
    "redis.call('DEL', KEYS[1]); redis.call('SADD', KEYS[1], '-'); return redis.call('PEXPIRE', KEYS[1], ARGV[1])"
)


async def count_swap(redis: Client, token: str, swap: str) -> None:
    """The swap ``swap`` (its staged keys' name) counted on ``token``: on a cluster, right after the swap."""
    await _COUNT(redis, [token], [swap])


async def finish(redis: Client, topic: str, lowered: Sequence[Any], swaps: int) -> None:
    """The last lowering of a restore of one board (no token, no fill), and of the partitions no snapshot named
    where ``swaps`` > 0 (see :data:`_FINISH`)."""
    await _FINISH(redis, [keys.checkpoint_key(topic)], [-1 if swaps <= 0 else swaps, "0", *lowered])


class WholeRestore:
    """A restore of every board, counted on the checkpoint hash's slot: a run token (a set) started before the
    first lowering, to which each swap's own script adds the swap's name, only while it exists. What Redis keeps
    after a crash is a prefix of what it was sent (a FLUSHALL keeps nothing, and no later swap brings the token
    back), so a token that still names every swap at the end shows that the swaps are all there, and only then, in
    the same step, are the lost checkpoints written (:meth:`finish`). On a Redis Cluster the boards live on other
    masters, whose losses the token does not see: there it counts right after each swap, on the checkpoint hash's
    master (docs/archive.md)."""

    def __init__(self, topic: str, run: str) -> None:
        self.topic = topic
        self.key = f"{keys.checkpoint_key(topic)}:restore:{run}"
        self.swaps = 0
        #: The ``retention_lost`` partitions :meth:`finish` raised to the archive's (see :class:`Lowest`).
        self.raised: list[int] = []

    async def begin(self, redis: Client) -> None:
        await _BEGIN(redis, [self.key], [RUN_TOKEN_TTL_MS])

    def swapped(self) -> None:
        """One more swap of the run landed (its script counted it on the token)."""
        self.swaps += 1

    async def finish(self, redis: Client, lowered: Sequence[Any]) -> None:
        """The last lowering, filling the checkpoints Redis holds none of and raising the ``retention_lost`` ones
        below it, only while the token counts every swap (else :class:`RestoreInterrupted`, nothing written)."""
        try:
            raised = await _FINISH(redis, [keys.checkpoint_key(self.topic), self.key], [self.swaps, "1", *lowered])
        except ResponseError as exc:
            if _INTERRUPTED in str(exc):
                raise RestoreInterrupted(
                    f"Redis lost data during the restore of topic {self.topic} (its run token no longer counts the "
                    "boards swapped in): they may be gone, so no lost checkpoint was written; run the restore again"
                ) from exc
            raise
        self.raised = sorted(int(p) for p in raised)
        if self.raised:
            log.warning(
                "partitions %s were halted retention_lost below the archive's checkpoints: raised to them (every "
                "board now holds every event up to them)",
                self.raised,
            )
