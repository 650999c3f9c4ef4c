"""What the audit compares: one board's players and watermarks as Redis holds them and as the archive holds them,
each read as one consistent snapshot (a MULTI over the board's keys, which share one hash tag and so one slot on
a cluster too; one repeatable-read transaction in PostgreSQL), and the pure step that carries a snapshot forward
by a fold of the events between the two sets of watermarks.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from archive.pool import Archive
from flusher.batch import NO_WATERMARK
from hotboard import earliest, keys, operators
from hotboard.boards import BoardDef
from hotboard.redis_client import Client
from ingest.folds import PartitionFold

#: One player as stored: (score, tie time in ms on ``earliest`` boards else None, meta or None).
PlayerState = tuple[int, int | None, bytes | None]


@dataclass(slots=True)
class Snapshot:
    """A board on one side: player -> state, and partition -> the last offset applied (absent: none)."""

    players: dict[str, PlayerState]
    marks: dict[int, int]

    def mark(self, partition: int) -> int:
        return self.marks.get(partition, NO_WATERMARK)


def _marks(rows: dict[str, int], topic: str, epochs: dict[int, int], partitions: Collection[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for p in partitions:
        found = rows.get(keys.watermark_field(topic, p, epochs.get(p, 0)))
        if found is not None:
            out[p] = int(found)
    return out


async def redis_epochs(redis: Client, topic: str, partitions: Collection[int]) -> dict[int, int]:
    raw = await redis.hmget(keys.checkpoint_key(topic), [keys.epoch_field(p) for p in partitions])
    return {p: int(v) for p, v in zip(partitions, raw, strict=True) if v is not None}


async def archive_epochs(archive: Archive, topic: str) -> dict[int, int]:
    async with archive.connection() as conn:
        rows = await conn.fetch("SELECT partition, epoch FROM hb_checkpoints WHERE topic = $1", topic)
    return {r["partition"]: r["epoch"] for r in rows}


async def read_redis(
    redis: Client, board: str, definition: BoardDef, topic: str, epochs: dict[int, int], partitions: Collection[int]
) -> Snapshot:
    """Redis's snapshot, one MULTI: on a client whose read timeout allows for the board's size (see
    :data:`archive.settings.SNAPSHOT_TIMEOUT_S`)."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.zrange(keys.board_key(board), 0, -1, withscores=True)
        pipe.hgetall(keys.applied_key(board))
        pipe.hgetall(keys.player_meta_key(board))
        zset, applied, metas = await pipe.execute()
    players: dict[str, PlayerState] = {}
    meta = {k.decode(): v for k, v in metas.items()}
    for raw, score in zset:
        member = raw.decode()
        if definition.earliest:
            player = earliest.player_of(member)
            tie: int | None = int(member[: earliest.TIE_DIGITS])
            value = definition.sign * int(score)
        else:
            player, tie, value = member, None, int(score)
        players[player] = (value, tie, meta.get(player))
    rows = {k.decode(): int(v) for k, v in applied.items() if v.lstrip(b"-").isdigit()}
    return Snapshot(players, _marks(rows, topic, epochs, partitions))


async def read_archive(
    archive: Archive,
    board: str,
    definition: BoardDef,
    topic: str,
    epochs: dict[int, int],
    partitions: Collection[int],
    timeout_s: float | None = None,
) -> Snapshot:
    """The archive's snapshot; ``timeout_s`` bounds its reads in place of the pool's statement timeout (None)."""
    async with archive.connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        marks = await conn.fetch("SELECT field, last_offset FROM hb_watermarks WHERE board = $1", board)
        query = "SELECT player, score, tie_ms, meta FROM hb_scores WHERE board = $1"
        rows = await conn.fetch(query, board, timeout=timeout_s)
    players: dict[str, PlayerState] = {
        r["player"]: (r["score"], int(r["tie_ms"] or 0) if definition.earliest else None, r["meta"]) for r in rows
    }
    return Snapshot(players, _marks({r["field"]: r["last_offset"] for r in marks}, topic, epochs, partitions))


def folded_players(fold: PartitionFold, board: str) -> set[str]:
    """Players the fold touched on ``board``."""
    out: set[str] = set()
    for table in (fold.boards, fold.ops, fold.steps, fold.metas):
        out.update(table.get(board, ()))
    return out


def advance(
    fold: PartitionFold, board: str, player: str, state: PlayerState | None, definition: BoardDef
) -> PlayerState | None:
    """``state`` after the fold's events of ``player`` on ``board``: the flush scripts' arithmetic (as Python in
    :mod:`hotboard.operators` and :mod:`hotboard.earliest`, which the scripts are tested against)."""
    score, tie, meta = state if state is not None else (None, None, None)
    steps: dict[str, Any] = fold.steps.get(board, {})
    states: dict[str, Any] = fold.ops.get(board, {})
    deltas: dict[str, int] = fold.boards.get(board, {})
    if player in steps:
        after = earliest.replay(steps[player], None if score is None else (score, tie or 0), definition.order == "desc")
        if after is not None:
            score, tie = after
    elif player in states:
        score = operators.result(states[player], score)
    elif player in deltas:
        score = operators.result(operators.summed(deltas[player]), score)
    meta = fold.metas.get(board, {}).get(player, meta)
    return None if score is None else (score, tie, meta)
