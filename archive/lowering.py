"""Lowering a topic's checkpoints for a restore or rebuild, and the restoring mark a Redis Cluster swap holds
between its two lowerings (:func:`archive.staging.swap`).

On a cluster the checkpoint hash lives on a slot of its own, so a board's swap lowers the checkpoints right before
it and right after it, two round trips apart; the first lowering marks each partition it names **restoring**
(``<p>:restoring``: a deadline, Redis TIME in ms, which the worker's checkpoint script honours) and the second
clears the mark. Neither writes a checkpoint Redis holds none of: only a whole restore's last lowering does
(:class:`Lowest`). Runs at once (two ``--on-redis-loss`` workers after a FLUSHALL; an operator's restore beside one;
every board's swap names every partition of the topic, so boards of any name) would share that one mark: the
first to clear it would leave the other between its lowerings unmarked, and a worker that resynchronised then
could move a checkpoint past what the other's swapped board holds. So each mark names the run holding it
(``<p>:restoring_by`` = ``<run> <deadline>``, beside the bare deadline old workers read): a marking lowering
refuses, writing nothing, while another run's mark is live on any partition it names (:func:`hold` waits for it),
and a clearing lowering deletes only its own run's mark.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from flusher.batch import NO_WATERMARK
from hotboard import keys
from hotboard.redis_client import Client
from hotboard.script import Script
from hotboard.timing import Backoff

log = logging.getLogger(__name__)

#: How long a restoring mark holds a partition's checkpoint at most (ms): far longer than one board's swap (three
#: round trips; a million-member board's RENAME frees its old members in about a second), so only a restore that
#: died between its two lowerings leaves one behind, and its partitions' checkpoints move again once it passed.
RESTORING_BOUND_MS = 600_000
#: How long a swap waits for another run's mark to be cleared (s) before it gives up (:class:`RestoreBusy`): a mark
#: is held for one board's swap, so a wait this long means the other run stalled or died holding it.
MARK_WAIT_S = 60.0
#: Retries of a refused marking: from 10 ms (a swap is a few round trips) up to half a second apart.
MARK_RETRY_BASE_S, MARK_RETRY_CAP_S = 0.01, 0.5

#: Lower checkpoints, never raise them, and bump each named partition's restore generation (``<p>:gen``, see
#: :func:`hotboard.keys.gen_field`) even where its checkpoint was no higher already: a worker's move decided
#: before (a window it applied to the board this swap replaced) is then refused, and it resynchronises. The new
#: generation is the server's clock in microseconds, or one more than the last where that is not higher: a count
#: from 1 would start over after a FLUSHALL and could name again the generation a worker read before it. From
#: ARGV[first]: (partition, checkpoint, epoch) triples (epoch '0': left as it is). ``fill``: false leaves a checkpoint
#: Redis holds none of absent (a lost Redis's halts wait on it: see :class:`Lowest`). ``mode``: 'lower' alone;
#: 'mark' (cluster only, see archive.staging.swap): first, if any named partition holds a live mark (deadline
#: ahead of Redis TIME) of a run other than ``run`` (a bare ``<p>:restoring`` without a matching
#: ``<p>:restoring_by``: an older version's run, named ''), answer {partition, run, deadline} and write nothing;
#: else lower and set each partition's mark to Redis TIME + ``mark_ms``, held by ``run``; 'clear': lower and
#: delete each partition's mark where ``run`` holds it, never another's. Answers nil when it lowered.
LOWERING = """
local function holder(ckpt_key, p, now_ms, run)  -- another run's live mark on p: {p, its run, deadline}, or nil
  local held = redis.call('HMGET', ckpt_key, p .. ':restoring', p .. ':restoring_by')
  local by, deadline = string.match(held[2] or '', '^(%S*) (%d+)$')
  if by and by ~= run and tonumber(deadline) > now_ms then return {p, by, deadline} end
  -- a bare deadline not the named one's: an older version's run, which names none
  if held[1] and held[1] ~= deadline and (tonumber(held[1]) or 0) > now_ms then return {p, '', held[1]} end
  return nil
end
local function lower(ckpt_key, args, first, mode, run, mark_ms, fill)  -- args: the table holding the triples
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local now_ms = math.floor(now / 1000)
  if mode == 'mark' then  -- every partition checked before any is written
    for i = first, #args, 3 do
      local busy = holder(ckpt_key, args[i], now_ms, run)
      if busy then return busy end
    end
  end
  local deadline = string.format('%.0f', now_ms + mark_ms)
  for i = first, #args, 3 do
    local partition, lowered, epoch = args[i], args[i + 1], args[i + 2]
    local cur = redis.call('HGET', ckpt_key, partition)
    if (fill and not cur) or (cur and tonumber(cur) > tonumber(lowered)) then
      redis.call('HSET', ckpt_key, partition, lowered)
    end
    if epoch ~= '0' then redis.call('HSET', ckpt_key, partition .. ':epoch', epoch) end
    local gen = tonumber(redis.call('HGET', ckpt_key, partition .. ':gen') or '0')
    local moved = math.max(gen + 1, now)
    if moved == gen then moved = now end  -- at 2^53 and above gen + 1 is gen itself (a double)
    redis.call('HSET', ckpt_key, partition .. ':gen', string.format('%.0f', moved))
    local bare, named = partition .. ':restoring', partition .. ':restoring_by'
    if mode == 'mark' then
      redis.call('HSET', ckpt_key, bare, deadline, named, run .. ' ' .. deadline)
    elseif mode == 'clear' then
      local held = redis.call('HMGET', ckpt_key, bare, named)
      local by, until_ms = string.match(held[2] or '', '^(%S*) (%d+)$')
      if by == run then
        redis.call('HDEL', ckpt_key, named)
        if held[1] == until_ms then redis.call('HDEL', ckpt_key, bare) end  -- else an older version's, set over it
      end
    end
  end
  return nil
end
"""
#: Lower checkpoints (and bump generations) alone, or with the restoring mark. KEYS: the checkpoint hash. ARGV:
#: mode, run, mark_ms, fill ('1' or '0'; see LOWERING), then (partition, checkpoint, epoch) triples.
_LOWER = Script(
    LOWERING
    + """
return lower(KEYS[1], ARGV, 5, ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1')
"""
)


@dataclass(frozen=True)
class Holder:
    """Another run's live restoring mark on ``partition``: ``run`` ('' for a run of an older version, which names
    none) holds it until ``deadline_ms`` (Redis TIME)."""

    partition: str
    run: str
    deadline_ms: int

    def __str__(self) -> str:
        who = f"run {self.run}" if self.run else "a run of an older hotboard version (its mark names no run)"
        return f"partition {self.partition} is marked restoring by {who} until {self.deadline_ms} (ms, Redis TIME)"


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
    reads it in every snapshot (see :meth:`missing`). With no board swapped in, the first lowering's counts."""

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
#: The last lowering of a restore, in one step: refused (nothing written) where the run token KEYS[2] (a set, see
#: :class:`WholeRestore`) does not hold ARGV[1] + 1 members; else the triples lowered (filling where ARGV[2] is
#: '1'), and, where ARGV[1] is above 0 (boards were swapped in), every other partition the hash holds a checkpoint
#: of brought down to none: its first checkpoint was written after the last board's snapshot was read, so that
#: board may hold none of its events. The token is then deleted. KEYS: the checkpoint hash, the run token (the
#: hash's tag: the same slot; absent for a restore of one board, whose ARGV[1] is -1 for no check). ARGV: the
#: swaps, fill, then (partition, checkpoint, epoch) triples.
_FINISH = Script(
    LOWERING
    + f"""
local swaps = tonumber(ARGV[1])
if KEYS[2] and redis.call('SCARD', KEYS[2]) ~= swaps + 1 then return redis.error_reply('{_INTERRUPTED}') end
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
return 1
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

    async def begin(self, redis: Client) -> None:
        await _BEGIN(redis, [self.key], [RUN_TOKEN_TTL_MS])

    def swapped(self) -> None:
        """One more swap of the run landed (its script counted it on the token)."""
        self.swaps += 1

    async def finish(self, redis: Client, lowered: Sequence[Any]) -> None:
        """The last lowering, filling the checkpoints Redis holds none of, only while the token counts every swap
        (else :class:`RestoreInterrupted`, nothing written)."""
        try:
            await _FINISH(redis, [keys.checkpoint_key(self.topic), self.key], [self.swaps, "1", *lowered])
        except ResponseError as exc:
            if _INTERRUPTED in str(exc):
                raise RestoreInterrupted(
                    f"Redis lost data during the restore of topic {self.topic} (its run token no longer counts the "
                    "boards swapped in): they may be gone, so no lost checkpoint was written; run the restore again"
                ) from exc
            raise


class RestoreBusy(TimeoutError):
    """Another restore or rebuild held a restoring mark on the topic's partitions for longer than a swap waits:
    a TimeoutError, so the commands exit 3 (retry later) and a worker's own restore tries again at its next
    look."""

    def __init__(self, topic: str, holder: Holder, waited_s: float) -> None:
        super().__init__(
            f"restore busy on topic {topic}: {holder}, not cleared within {waited_s:g} s; another hotboard restore "
            "or rebuild is swapping a board in: run this again once it finished (or its mark passed its deadline)"
        )
        self.holder = holder


async def lower(redis: Client, topic: str, lowered: Sequence[Any], *, fill: bool = True) -> None:
    """Lower the topic's checkpoints to ``lowered`` ((partition, checkpoint, epoch) triples), bumping generations;
    ``fill``: write those Redis holds none of, too (else they stay absent)."""
    await _LOWER(redis, [keys.checkpoint_key(topic)], ["lower", "", 0, _flag(fill), *lowered])


def _flag(fill: bool) -> str:
    return "1" if fill else "0"


async def mark(
    redis: Client,
    topic: str,
    lowered: Sequence[Any],
    run: str,
    bound_ms: int = RESTORING_BOUND_MS,
    *,
    fill: bool = True,
) -> Holder | None:
    """One marking lowering: as :func:`lower`, and each named partition marked restoring by ``run`` for
    ``bound_ms``; or, while another run's mark is live on one of them, nothing written and that mark back."""
    reply = await _LOWER(redis, [keys.checkpoint_key(topic)], ["mark", run, bound_ms, _flag(fill), *lowered])
    if reply is None:
        return None
    partition, by, deadline = (x.decode() if isinstance(x, bytes) else str(x) for x in reply)
    return Holder(partition, by, int(float(deadline)))  # an older version's bare mark: a Lua number


async def hold(
    redis: Client, topic: str, lowered: Sequence[Any], run: str, wait_s: float | None = None, *, fill: bool = True
) -> None:
    """:func:`mark`, tried again (capped exponential backoff) while another run holds a mark, for at most
    ``wait_s`` (None: ``MARK_WAIT_S``, read at each call); then :class:`RestoreBusy` naming it."""
    wait_s = MARK_WAIT_S if wait_s is None else wait_s
    backoff = Backoff(MARK_RETRY_BASE_S, MARK_RETRY_CAP_S)
    deadline = time.monotonic() + wait_s
    while (holder := await mark(redis, topic, lowered, run, fill=fill)) is not None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RestoreBusy(topic, holder, wait_s)
        if backoff.failures == 0:
            log.info("%s on topic %s: waiting up to %g s for it to be cleared", holder, topic, wait_s)
        await asyncio.sleep(min(backoff.next_delay(), left))


async def clear(redis: Client, topic: str, lowered: Sequence[Any], run: str, *, fill: bool = True) -> None:
    """The lowering after a swap: as :func:`lower`, and each named partition's mark deleted where ``run`` holds
    it (a mark of another run, one that expired and was taken over included, is left to it)."""
    await _LOWER(redis, [keys.checkpoint_key(topic)], ["clear", run, 0, _flag(fill), *lowered])
