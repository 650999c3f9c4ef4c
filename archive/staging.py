"""A board staged beside its live keys and swapped in whole: what ``hotboard restore`` and ``hotboard rebuild``
share.

The staged keys (``hb:{B}:applied:restoring:<run>``, ...) carry the board's hash tag, so on a Redis Cluster they
live on its slot; one script renames them over the live keys (and deletes the live keys with no staged
counterpart), so a reader sees the old board or the new one, never half of either. ``<run>`` is a random token
of each staging (:func:`run_token`): two restores or rebuilds of one board at once (every ``--on-redis-loss``
worker restores every board after a FLUSHALL) each stage and swap in a whole snapshot of their own, one after
the other, instead of one renaming the other's half-staged board in. Every write to a staging key also sets
``STAGING_TTL_MS`` on the board's staging keys, in the same round trip, so a run that dies leaves none behind.
The same script lowers the topic's checkpoints (and bumps each partition's restore generation), except on a
cluster, where the checkpoint hash lives on a slot of its own (:func:`swap`, :mod:`archive.lowering`); there each
swap ends with ``WAIT`` on the board's master, as a window does (:class:`SwapAcks`), before anything that counts
on it is written on another master.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any

from hiredis import pack_command
from redis.asyncio import RedisCluster

from archive import lowering, restore_run
from flusher import wire
from flusher.cluster import ClusterSink, ReplicaAcksShort
from hotboard import earliest, keys
from hotboard.boards import BoardDef, to_hash
from hotboard.redis_client import Client
from hotboard.script import Script

#: The live keys of a board, in this order (:func:`live_keys`): KEYS[i] and KEYS[i + 8] is its restored twin.
_KINDS: tuple[Callable[[str], str], ...] = (
    keys.board_key,
    keys.applied_key,
    keys.meta_key,
    keys.def_key,
    keys.player_meta_key,
    keys.members_key,
    keys.dense_key,
    keys.counts_key,
)
#: Swap a restored board in, and lower the topic's checkpoints to the archive's as of the snapshot the board was read
#: from, in the same step: a worker that was fenced on this board, or whose checkpoint move is refused, then replays
#: from no later than what the board holds (lowered only before and after every swap, a worker resynchronised in
#: between wrote the tail on top of a board lacking the events before it, and the second lowering came too late: the
#: watermarks skipped them). KEYS: the 8 live keys, their 8 restored twins, the checkpoint hash (left out on a Redis
#: Cluster, where it lives on another slot: see :func:`swap`). ARGV: the archived version (-1: a seasonal board's own
#: meta, which holds no version), when the keys expire (ms; 0: never), fill ('1': a checkpoint Redis holds none of is
#: written too, see :func:`archive.lowering.lower`), then (partition, checkpoint, epoch) triples as for
#: :func:`archive.lowering.lower` (none without the checkpoint hash). Every staging writes the applied or the meta
#: twin: with neither, the staged board expired (``STAGING_TTL_MS``, a run stalled that long), and the swap refuses
#: rather than delete the live board. A renamed key keeps its staging TTL (RENAME moves it along), so it is set to
#: the board's expiry or removed (PERSIST).
_SWAP = Script(
    lowering.LOWERING
    + f"""
local archived, expire_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
local kinds = {len(_KINDS)}  -- KEYS[1..kinds]: the live keys in _KINDS order; KEYS[i + kinds]: the twin of KEYS[i]
local live_meta, staged_board, staged_applied, staged_meta = KEYS[3], KEYS[1 + kinds], KEYS[2 + kinds], KEYS[3 + kinds]
local ckpt_key = KEYS[2 * kinds + 1]  -- nil on a Redis Cluster, whose swap has no triples to lower
if redis.call('EXISTS', staged_applied, staged_meta) == 0 then return redis.error_reply('staged board expired') end
lower(ckpt_key, ARGV, 4, 'lower', '', 0, ARGV[3] == '1')
if archived >= 0 then
  local live = tonumber(redis.call('HGET', live_meta, '{keys.META_VERSION}') or '0')
  redis.call('HSET', staged_meta, '{keys.META_VERSION}', math.max(live, archived) + 1)
end
for i = 1, kinds do
  local live_key, staged_key = KEYS[i], KEYS[i + kinds]
  if redis.call('EXISTS', staged_key) == 1 then
    redis.call('RENAME', staged_key, live_key)
    if expire_ms > 0 then redis.call('PEXPIREAT', live_key, expire_ms) else redis.call('PERSIST', live_key) end
  else
    redis.call('DEL', live_key)
  end
end
local token = KEYS[2 * kinds + 2]  -- a whole restore's run token (one server only): names this swap, if it exists
if token and redis.call('EXISTS', token) == 1 then redis.call('SADD', token, staged_board) end
return 1
"""
)
#: How long a staging key lives past the last write of its run (ms): a staged board is written in seconds (a
#: million players in about 10 s) and swapped right after, so only a run that died or stalled for an hour loses
#: it; its keys then go by themselves instead of staying in Redis forever.
STAGING_TTL_MS = 3_600_000
#: Rows written per round trip (see :func:`stage_players`).
CHUNK = 10_000
#: The fields a period's definition copy holds (what the flush script seeds, see hotboard.lua).
_COPIED = ("spec", "order", "operator", "ties")


class SwapUnconfirmed(TimeoutError):
    """A board's swap landed on its master, but fewer of that master's replicas than required confirmed it in time:
    a failover now could bring the old board back, so nothing counting on the swap is written (a whole restore's
    lost checkpoints, its run token's count). A TimeoutError, so the commands exit 3 (run again) and a worker's own
    restore tries again after a backoff; the rerun swaps the board in afresh."""


class SwapAcks:
    """How a swap reaches a Redis Cluster that must confirm it (``--min-replica-acks``, ``--replica-ack-timeout-ms``):
    through a window's own helper (:meth:`flusher.cluster.ClusterSink.replicated`), the swap script and then, on the
    same connection to the board's master, the ack write and ``WAIT`` (built once per run: :func:`swap_acks`)."""

    def __init__(self, redis: RedisCluster, topic: str, count: int, timeout_ms: int) -> None:
        self._sink = ClusterSink(redis, topic, min_replica_acks=count, replica_ack_timeout_ms=timeout_ms)

    async def swap(self, keys_: Sequence[str], args: Sequence[Any]) -> None:
        """The swap script (KEYS: the live keys then their twins), confirmed, else :class:`SwapUnconfirmed`."""
        sink = self._sink
        try:
            await sink.replicated(_SWAP, keys_, args)
        except ReplicaAcksShort:
            raise SwapUnconfirmed(
                f"the swap of board {keys_[0]} is applied on its master but confirmed on {sink.last_acks} replicas, "
                f"fewer than {sink.min_replica_acks} within {sink.replica_ack_timeout_ms} ms (--min-replica-acks, "
                "--replica-ack-timeout-ms): a failover now could undo it, so no checkpoint counting on it was "
                "written; run it again once the replicas answer"
            ) from None


def swap_acks(redis: Client, topic: str, count: int, timeout_ms: int) -> SwapAcks | None:
    """The confirmation each swap of a run waits for: None on one server (no replicas to ask) or where ``count``
    is 0, whose swaps go out as they always did."""
    if count <= 0 or not isinstance(redis, RedisCluster):
        return None
    return SwapAcks(redis, topic, count, timeout_ms)


def live_keys(board: str) -> list[str]:
    """The keys a swap replaces, in the order :func:`swap` takes them."""
    return [kind(board) for kind in _KINDS]


def run_token() -> str:
    """A fresh token naming one staging of a board: runs at once never share a staging key."""
    return secrets.token_hex(4)


def staging_keys(live: Sequence[str], run: str) -> list[str]:
    """The twins of ``live`` the staging ``run`` writes: each on its live key's slot (the same hash tag)."""
    return [f"{k}:restoring:{run}" for k in live]


async def stage_hash(redis: Client, twin: Sequence[str], index: int, mapping: dict[Any, Any]) -> None:
    """HSET ``mapping`` into the staging key ``twin[index]``, renewing the staging TTL in the same round trip."""
    if mapping:
        await _written(redis, twin, [_pack(("HSET", twin[index], *(x for kv in mapping.items() for x in kv)))])


def period_copy(definition: BoardDef) -> dict[Any, Any]:
    """What a period's own definition hash holds of its board's definition."""
    return {k: v for k, v in to_hash(definition, 0).items() if k in _COPIED}


async def swap(
    redis: Client,
    topic: str,
    live: Sequence[str],
    twin: Sequence[str],
    args: Sequence[Any],
    lowered: Sequence[Any],
    run: str,
    wait_s: float | None = None,
    *,
    fill: bool = True,
    token: str | None = None,
    acks: SwapAcks | None = None,
) -> None:
    """Swap the staged ``twin`` (of the staging ``run``) in over ``live``. ``args``: the archived version (-1: a
    seasonal board's own meta) and when the keys expire (ms, 0: never); ``lowered``: (partition, checkpoint, epoch)
    triples the topic's checkpoints are lowered to (``fill``: where Redis holds none too, see
    :func:`archive.lowering.lower`). On one server the script lowers them in the same step; on a
    Redis Cluster the checkpoint hash lives on a slot of its own (a script may not span two), so they are lowered
    right before the swap and right after it, two round trips apart. The first lowering also marks each partition
    restoring, held by ``run`` (waiting up to ``wait_s``, default ``MARK_WAIT_S``, while another run holds a mark, then
    :class:`archive.lowering.RestoreBusy`): until the second clears it (a failed swap, or a first lowering whose
    reply was lost, too), no worker moves those checkpoints, so none that resynchronised in between resumes past
    what the swapped board holds (docs/archive.md). ``token``: a whole restore's run token, which the swap counts
    (:class:`archive.restore_run.WholeRestore`): in the same script on one server, right after it on a cluster.
    ``acks`` (a cluster's, :func:`swap_acks`): the swap ends with WAIT on the board's master, and too few replicas
    raise :class:`SwapUnconfirmed` before the token counts it (the mark is cleared all the same: a worker's own
    window on that master waits for the same replicas before its checkpoint moves)."""
    flagged = [*args, "1" if fill else "0"]
    if not isinstance(redis, RedisCluster):
        await _SWAP(
            redis, [*live, *twin, keys.checkpoint_key(topic), *([token] if token else [])], [*flagged, *lowered]
        )
        return

    async def swapped() -> None:
        if acks is None:
            await _SWAP(redis, [*live, *twin], flagged)
        else:
            await acks.swap([*live, *twin], flagged)

    if not lowered:
        await swapped()
    else:
        try:
            # inside the try: a reply lost after the marking lowering ran (a timeout) must still clear its mark
            await lowering.hold(redis, topic, lowered, run, wait_s, fill=fill)
            await swapped()
        finally:
            await lowering.clear(redis, topic, lowered, run, fill=fill)
    if token:
        await restore_run.count_swap(redis, token, twin[0])


async def stage_players(redis: Client, twin: Sequence[str], definition: BoardDef, rows: Sequence[Any]) -> None:
    """Rows ``(player, score, tie_ms, meta)`` into the staging keys ``twin``, ``CHUNK`` at a time."""
    for i in range(0, len(rows), CHUNK):
        await _write_chunk(redis, twin, definition, rows[i : i + CHUNK])


async def _write_chunk(redis: Client, twin: Sequence[str], definition: BoardDef, rows: Sequence[Any]) -> None:
    """One chunk of rows ``(player, score, tie_ms, meta)``: a ZADD of every member, an HSET of the metadata (and
    of the members, on ``earliest`` boards; the score counts on ``dense`` ones), packed by hiredis in C and
    streamed in one round trip (redis-py's pipeline packs 20,000 arguments in Python)."""
    if not rows:
        return
    if definition.earliest:
        sign = definition.sign
        members = [(r[0], earliest.member(r[2] or 0, r[0])) for r in rows]
        zset = [x for r, (_, m) in zip(rows, members, strict=True) for x in (sign * r[1], m)]
    else:
        members = []
        zset = [x for r in rows for x in (r[1], r[0])]
    commands = [_pack(("ZADD", twin[0], *zset))]
    metas = [x for r in rows if r[3] is not None for x in (r[0], r[3])]
    if metas:
        commands.append(_pack(("HSET", twin[4], *metas)))
    if members:
        commands.append(_pack(("HSET", twin[5], *(x for pair in members for x in pair))))
    if definition.ties == "dense":
        counts: dict[int, int] = {}
        for r in rows:
            counts[r[1]] = counts.get(r[1], 0) + 1
        for score, n in counts.items():
            commands.append(_pack(("HINCRBY", twin[7], score, n)))
            commands.append(_pack(("ZADD", twin[6], score, score)))
    await _written(redis, twin, commands)


async def _written(redis: Client, twin: Sequence[str], commands: list[bytes]) -> None:
    """``commands`` and a PEXPIRE of every staging key (one on a key not written yet does nothing), streamed in one
    round trip: each write keeps the whole staged board alive ``STAGING_TTL_MS`` longer."""
    commands += [_pack(("PEXPIRE", k, STAGING_TTL_MS)) for k in twin]
    replies = await _stream(redis, twin[0], commands)
    failed = next((r for r in replies if isinstance(r, Exception)), None)
    if failed is not None:
        raise failed


async def _stream(redis: Client, key: str, commands: list[bytes]) -> list[Any]:
    """Packed commands on one connection: the server's, or on a cluster the master of ``key``'s slot (every
    restoring key of a board shares it)."""
    if not isinstance(redis, RedisCluster):
        return await wire.stream(redis, commands)
    await redis.initialize()
    node = redis.get_node_from_key(key)
    assert node is not None, "an initialised cluster client knows every slot's master"
    conn = node.acquire_connection()
    try:
        return await wire.stream_on(conn, commands)
    finally:
        node.release(conn)


def _pack(command: tuple[Any, ...]) -> bytes:
    return pack_command(command)  # type: ignore[no-any-return]
