"""Lowering a topic's checkpoints for a restore or rebuild, and the restoring mark a Redis Cluster swap holds between
its two lowerings (:func:`archive.staging.swap`).

On a cluster the checkpoint hash lives on a slot of its own, so a board's swap lowers the checkpoints right before
it and right after it, two round trips apart; the first lowering marks each partition it names **restoring**
(``<p>:restoring``: a deadline, Redis TIME in ms, which the worker's checkpoint script honours) and the second
clears the mark. Neither writes a checkpoint Redis holds none of: only a whole restore's last lowering does
(:class:`archive.restore_run.Lowest`). Runs at once (two ``--on-redis-loss`` workers after a FLUSHALL; an operator's
restore beside one; every board's swap names every partition of the topic, so boards of any name) would share that
one mark: the first to clear it would leave the other between its lowerings unmarked, and a worker that
resynchronised then could move a checkpoint past what the other's swapped board holds. So each mark names the run
holding it (``<p>:restoring_by`` = ``<run> <deadline>``, beside the bare deadline old workers read): a marking
lowering refuses, writing nothing, while another run's mark is live on any partition it names (:func:`hold` waits
for it), and a clearing lowering deletes only its own run's mark."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
#: :func:`hotboard.keys.gen_field`) even where its checkpoint was no higher already: a worker's move decided before
#: (a window it applied to the board this swap replaced) is then refused, and it resynchronises. The new generation
#: is the server's clock in microseconds, or one more than the last where that is not higher: a count from 1 would
#: start over after a FLUSHALL and could name again the generation a worker read before it. From ARGV[first]:
#: (partition, checkpoint, epoch) triples (epoch '0': left as it is). ``fill``: false leaves a checkpoint Redis holds
#: none of absent (a lost Redis's halts wait on it: see :class:`archive.restore_run.Lowest`). ``mode``: 'lower'
#: alone; 'mark' (cluster only, see archive.staging.swap): first, if any named partition holds a live mark (deadline
#: ahead of Redis TIME) of a run other than ``run`` (a bare ``<p>:restoring`` without a matching
#: ``<p>:restoring_by``: an older version's run, named ''), answer {partition, run, deadline} and write nothing; else
#: lower and set each partition's mark to Redis TIME + ``mark_ms``, held by ``run``; 'clear': lower and delete each
#: partition's mark where ``run`` holds it, never another's. Answers nil when it lowered.
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
