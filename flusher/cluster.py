"""The sink on a Redis Cluster: every board's window stays one atomic, fenced script on its slot; the boards of
each master go out in one pipelined round trip per window, all masters at once.

- A FLUSH call carries boards of one slot only (Redis refuses a script whose keys span two: CROSSSLOT), so
  the batches are ordered by slot and a group breaks where the slot changes.
- MOVED (the slot lives elsewhere now) and ASK (the slot is mid-migration and the board's keys are on the
  target) ran nothing: the command is sent again where Redis points; TRYAGAIN (a board's keys are split between
  the two masters of a migration) ran nothing either, and is retried shortly. Should a command have run
  after all, its board's watermarks already say so: the script answers "applied already" and writes nothing.
- Replication is asynchronous. When a window is to count as done, the round of each master it wrote to ends
  with ``WAIT`` on that same connection; fewer replicas than ``min_replica_acks`` raise
  :class:`ReplicaAcksShort` and the window is retried: its boards answer "applied already", the checkpoint
  holds until the replicas have it, and a promoted replica that lacks a board's window takes it again.
- Checkpoints (``hb:ckpt:{T}``) and the board index live on slots of their own. The per-board watermarks are
  the truth; the checkpoint is a resume hint that moves only after every board of its window is confirmed on
  its master's replicas.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from hiredis import pack_command
from redis.asyncio import RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.crc import key_slot
from redis.exceptions import AskError, ConnectionError, MovedError, RedisError, TryAgainError

from flusher import rewind_read, wire
from flusher.batch import BoardBatch, BoardResult, ExpectedWatermark, RewindView
from flusher.redis_sink import _APPLY, _FLUSH, SCRIPT_PLAYERS, RedisSink
from flusher.server import parse_run_id
from hotboard import keys
from hotboard.script import Script, rerun_unknown

#: Rounds of redirections (MOVED, ASK) one call follows before it gives up (a transient failure: retried).
MAX_REDIRECTS = 8
#: How long TRYAGAIN (a board split by a migration in progress) is retried within one call.
TRYAGAIN_S = 1.0
_ASKING = b"*1\r\n$6\r\nASKING\r\n"


class ReplicaAcksShort(RedisError):
    """A master confirmed a window's writes on fewer replicas than required: retry the window."""


def board_slot(board: str) -> int:
    return int(key_slot(keys.board_key(board).encode()))


def _ack_tags() -> list[str]:
    """slot -> a hash tag in it: the write before WAIT goes to a key of the master's own slot."""
    tags: list[str | None] = [None] * 16384
    missing, i = 16384, 0
    while missing:
        slot = int(key_slot(str(i).encode()))
        if tags[slot] is None:
            tags[slot] = str(i)
            missing -= 1
        i += 1
    return [t for t in tags if t is not None]


class ClusterSink(RedisSink):
    """:class:`flusher.redis_sink.RedisSink` on a Redis Cluster."""

    def __init__(
        self,
        redis: RedisCluster,
        topic: str,
        script_players: int = SCRIPT_PLAYERS,
        *,
        min_replica_acks: int = 1,
        replica_ack_timeout_ms: int = 1000,
    ) -> None:
        super().__init__(redis, topic, script_players)
        self._cluster = redis
        self._slot_of = board_slot
        self.min_replica_acks = min_replica_acks
        self.replica_ack_timeout_ms = replica_ack_timeout_ms
        self._tags: list[str] | None = None
        self._stale = False
        #: Windows whose replicas fell short, and the fewest acknowledgements seen in the last round.
        self.short_acks = 0
        self.last_acks: int | None = None

    async def server_id(self) -> str:
        """The masters and their run_ids: it changes when one restarts or a replica takes over."""
        await self._refresh_if_stale()
        primaries = self._cluster.get_primaries()
        try:
            infos = await asyncio.gather(*(n.execute_command("INFO", "server") for n in primaries))
        except (ConnectionError, TimeoutError, OSError):
            self._stale = True  # a master went away: read the slot map again before the next call
            raise
        return ",".join(sorted(f"{n.name}={_run_id(info)}" for n, info in zip(primaries, infos, strict=True)))

    async def load_watermarks(self, partition: int, boards: Collection[str]) -> tuple[dict[str, int], int]:
        """As on one server, but the checkpoint and the watermarks sit on different slots: read in one round
        per master, not atomically together. The fence still checks every watermark at the flush."""
        ordered = list(boards)
        field = self.field(partition)
        commands = [_pack("HGET", self._key, str(partition))]
        commands += [_pack("HGET", keys.applied_key(b), field) for b in ordered]
        route = [self._key, *map(keys.applied_key, ordered)]
        checkpoint, *rows = await self.routed(commands, route, (), wait=False)
        marks = {b: -1 if v is None else int(v) for b, v in zip(ordered, rows, strict=True)}
        return marks, -1 if checkpoint is None else int(checkpoint)

    def rewind_chunk(self) -> int:
        return rewind_read.REWIND_CHUNK

    async def load_rewinds(self, wanted: Mapping[int, Collection[str]]) -> dict[int, RewindView | Exception]:
        """Every partition's boards' watermarks (one round per master per chunk of REWIND_CHUNK, all partitions
        together), then, for those read, each one's checkpoint, restore generation, restoring mark and epoch in
        one HMGET: a restore landing between the two reads shows in the second (:mod:`flusher.rewind_read`)."""
        marks = await rewind_read.read_marks(self.routed, self.field, wanted)
        read = [p for p, got in marks.items() if not isinstance(got, Exception)]
        held = await self._cluster.hmget(self._key, rewind_read.checkpoint_fields(read)) if read else []
        return rewind_read.views(marks, read, held)

    async def flush(self, batches: Sequence[BoardBatch], expected: ExpectedWatermark) -> list[BoardResult]:
        """Ordered by slot (FLUSH groups break where it changes), answered in the order given."""
        order = sorted(range(len(batches)), key=lambda i: board_slot(batches[i].board))
        results = await super().flush([batches[i] for i in order], expected)
        out: list[BoardResult | None] = [None] * len(batches)
        for result, i in zip(results, order, strict=True):
            out[i] = result
        return [r for r in out if r is not None]

    async def _send_window(
        self, commands: Iterator[bytes], owners: list[tuple[bool, list[int]]], batches: Sequence[BoardBatch]
    ) -> list[Any]:
        packed = list(commands)
        route = [keys.board_key(batches[owned[0]].board) for _, owned in owners]
        return await self.routed(packed, route, (_FLUSH, _APPLY), wait=True)

    async def _send_keyed(self, commands: list[bytes], route: list[str], used: Sequence[Script]) -> list[Any]:
        return await self.routed(commands, route, used, wait=False)

    async def replicated(self, script: Script, keys_: Sequence[str], args: Sequence[Any]) -> Any:
        """One script on the master of its first key's slot, ending like a window's round there: the ack write
        and WAIT for ``min_replica_acks`` replicas (raises :class:`ReplicaAcksShort`: applied on the master, not
        confirmed). For the one-slot removal scripts of ``hotboard boards delete`` and ``erase``."""
        [reply] = await self.routed([script.packed(keys_, args)], [keys_[0]], (script,), wait=True)
        if isinstance(reply, Exception):
            raise reply
        return reply

    # ---------------------------------------------------------------- the transport

    async def routed(self, commands: list[bytes], route: list[str], used: Sequence[Script], wait: bool) -> list[Any]:
        """Each command to the master of its ``route`` key's slot, one round per master, all at once; replies
        in order (error replies as exceptions). Redirections are followed; ``wait``: each round that carried
        commands ends with WAIT, and too few replicas raise :class:`ReplicaAcksShort`."""
        await self._refresh_if_stale()
        nodes = self._cluster.nodes_manager
        replies: list[Any] = [None] * len(commands)
        pending = list(range(len(commands)))
        asking: dict[int, ClusterNode] = {}
        deadline = time.monotonic() + TRYAGAIN_S
        fewest: int | None = None
        for _ in range(MAX_REDIRECTS + int(TRYAGAIN_S / 0.02)):
            by_node: dict[ClusterNode, list[int]] = {}
            for i in pending:
                node = asking.get(i) or nodes.get_node_from_slot(int(key_slot(route[i].encode())))
                by_node.setdefault(node, []).append(i)
            rounds = await asyncio.gather(
                *(self._round(node, idx, commands, route, asking, used, wait) for node, idx in by_node.items()),
                return_exceptions=True,
            )
            failure = next((r for r in rounds if isinstance(r, BaseException)), None)
            if failure is not None:
                if isinstance(failure, ConnectionError | TimeoutError | OSError):
                    self._stale = True  # a master went away: read the slot map again before the next call
                raise failure
            pending, asking, retry_later = [], {}, False
            for (_, idx), result in zip(by_node.items(), rounds, strict=True):
                assert not isinstance(result, BaseException)
                got, acks = result
                if acks is not None:
                    fewest = acks if fewest is None else min(fewest, acks)
                for i, reply in zip(idx, got, strict=True):
                    if isinstance(reply, MovedError):
                        await nodes.move_slot(reply)
                        pending.append(i)
                    elif isinstance(reply, AskError):
                        target = nodes.get_node(reply.host, reply.port)
                        if target is None:
                            self._stale = True
                            raise reply
                        asking[i] = target
                        pending.append(i)
                    elif isinstance(reply, TryAgainError) and time.monotonic() < deadline:
                        retry_later = True
                        pending.append(i)
                    else:
                        replies[i] = reply
            if not pending:
                break
            if retry_later:
                await asyncio.sleep(0.02)
        if pending:
            raise TryAgainError("the slots kept moving, or a migration kept a board split: retried later")
        if wait:
            self.last_acks = fewest
            if fewest is not None and fewest < self.min_replica_acks:
                self.short_acks += 1
                raise ReplicaAcksShort(
                    f"a master confirmed the window on {fewest} replicas, fewer than {self.min_replica_acks} "
                    f"within {self.replica_ack_timeout_ms} ms: the checkpoint holds and the window is retried"
                )
        return replies

    async def _round(
        self,
        node: ClusterNode,
        idx: list[int],
        commands: list[bytes],
        route: list[str],
        asking: dict[int, ClusterNode],
        used: Sequence[Script],
        wait: bool,
    ) -> tuple[list[Any], int | None]:
        """One master's commands on one connection (the WAIT must follow its writes there); NOSCRIPT replies
        ran nothing: :func:`hotboard.script.rerun_unknown` sends just those calls again, once ``resend`` has
        loaded the scripts on this master (the cluster client's own SCRIPT LOAD goes to every master, so
        ``rerun_unknown`` is given no scripts to load itself)."""
        conn = node.acquire_connection()
        try:
            ask = [i in asking for i in idx]
            key = route[idx[0]]
            replies, acks = await self._exchange(conn, [commands[i] for i in idx], ask, key, wait)
            fewest = [acks]

            async def resend(again: list[int]) -> list[Any]:
                for script in used:
                    await node.execute_command("SCRIPT", "LOAD", script.text)
                resent, resent_acks = await self._exchange(
                    conn, [commands[idx[j]] for j in again], [ask[j] for j in again], key, wait
                )
                if fewest[0] is not None and resent_acks is not None:
                    fewest[0] = min(fewest[0], resent_acks)
                return resent

            return await rerun_unknown(self._cluster, (), replies, resend), fewest[0]
        finally:
            node.release(conn)

    async def _exchange(
        self, conn: Any, commands: list[bytes], ask: list[bool], key: str, wait: bool
    ) -> tuple[list[Any], int | None]:
        out: list[bytes] = []
        for command, asked in zip(commands, ask, strict=True):
            if asked:
                out.append(_ASKING)
            out.append(command)
        waits = wait and self.min_replica_acks > 0
        if waits:
            # WAIT counts the replicas holding this connection's last write: one write on this master's own
            # slot first, so that a round of windows applied already waits for what an earlier round wrote
            if self._tags is None:
                self._tags = _ack_tags()
            tag = self._tags[int(key_slot(key.encode()))]
            out.append(_pack("SET", f"{keys.PREFIX}:ack:{{{tag}}}", "1", "PX", 60_000))
            out.append(_pack("WAIT", self.min_replica_acks, self.replica_ack_timeout_ms))
        replies = await wire.stream_on(conn, out)
        acks = None
        if waits:
            *replies, _, acked = replies
            acks = 0 if isinstance(acked, Exception) else int(acked)
        return _skip_asking(replies, ask), acks

    async def _refresh_if_stale(self) -> None:
        await self._cluster.initialize()  # a client that never sent a command has no slot map yet
        if self._stale:
            await self._cluster.nodes_manager.initialize()
            self._stale = False


def _pack(*parts: Any) -> bytes:
    return pack_command(tuple(parts))  # type: ignore[no-any-return]


def _skip_asking(replies: list[Any], ask: list[bool]) -> list[Any]:
    """The replies without those of the ASKING commands sent before redirected ones."""
    out, it = [], iter(replies)
    for asked in ask:
        if asked:
            next(it)
        out.append(next(it))
    return out


def _run_id(info: Any) -> str:
    if isinstance(info, dict):
        return str(info["run_id"])
    return parse_run_id(info)
