"""``hotboard audit``: proves Redis exact against the archive and the topic, board by board, player by player.

For each board both snapshots are read (:mod:`archive.audit_state`) with their watermarks. Where Redis is ahead
of the archive on a partition, the events between the two watermarks are read back from Kafka (a plain consumer,
no group, nothing committed), decoded, routed and folded by the worker's own code (:mod:`hotboard.codec`,
:func:`ingest.seasons.route`, :class:`ingest.folds.PartitionFold`), and carried onto the archive's state: the
result must be Redis's, player by player. Where the archive is ahead (a lagging worker), the same is done the
other way round. A player with no event in between must be equal on both sides.

A player is left unverified (and named) when its events in between lie on two partitions moving opposite ways;
a board is left unverified when Kafka no longer holds the events in between, or when Redis and the archive hold
different log epochs of a partition (a re-created topic).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from archive import audit_log
from archive.audit_state import (
    PlayerState,
    Snapshot,
    advance,
    archive_epochs,
    folded_players,
    read_archive,
    read_redis,
    redis_epochs,
)
from archive.pool import Archive
from archive.restore import board_names
from archive.settings import ArchiverSettings
from archive.sink import ArchiveSink
from flusher.batch import NO_WATERMARK
from hotboard import keys
from hotboard.boards import DEFAULT, BoardDef, DefinitionError
from hotboard.codec import Decoded, Decoder, decode_all
from hotboard.kafka_security import client_kwargs
from hotboard.redis_client import Client
from ingest.folds import PartitionFold
from ingest.seasons import route

#: Each fetch waits at most this long for records.
FETCH_WAIT_MS = 500


@dataclass(frozen=True, slots=True)
class Difference:
    board: str
    player: str
    redis: PlayerState | None
    expected: PlayerState | None
    #: What ``expected`` was computed from: "archive", "archive + events" or "redis + events" (then ``redis``
    #: holds the archive's state and ``expected`` Redis's carried forward).
    basis: str


@dataclass(slots=True)
class BoardAudit:
    board: str
    players: int = 0
    events: int = 0
    differences: list[Difference] = field(default_factory=list)
    unverified_players: list[str] = field(default_factory=list)
    #: Why the board could not be checked at all, or None.
    unverified: str | None = None

    @property
    def exact(self) -> bool:
        return not self.differences and not self.unverified_players and self.unverified is None


@dataclass(slots=True)
class _Board:
    name: str
    definition: BoardDef
    redis: Snapshot
    archive: Snapshot


class KafkaRange:
    """Reads partitions' offset ranges back from the topic, outside any group."""

    def __init__(self, settings: ArchiverSettings) -> None:
        self._s = settings
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.kafka,
            **client_kwargs(settings),
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
        )

    async def __aenter__(self) -> KafkaRange:
        await asyncio.wait_for(self._consumer.start(), self._s.kafka_start_timeout_s)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    async def partitions(self) -> list[int]:
        await asyncio.wait_for(self._consumer.topics(), self._s.kafka_start_timeout_s)
        return sorted(self._consumer.partitions_for_topic(self._s.topic) or ())

    async def first_offsets(self, partitions: Collection[int]) -> dict[int, int]:
        tps = [TopicPartition(self._s.topic, p) for p in partitions]
        found = await asyncio.wait_for(self._consumer.beginning_offsets(tps), self._s.kafka_start_timeout_s)
        return {tp.partition: int(o) for tp, o in found.items()}

    async def read(self, partition: int, after: int, upto: int, timeout_s: float) -> list[Any]:
        """Records at offsets ``after`` < o <= ``upto``, in order. Raises TimeoutError if they do not all come."""
        tp = TopicPartition(self._s.topic, partition)
        self._consumer.assign([tp])
        self._consumer.seek(tp, after + 1)
        out: list[Any] = []
        last = after
        deadline = time.monotonic() + timeout_s
        while last < upto:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"partition {partition}: offsets {last + 1}..{upto} did not arrive")
            batches = await self._consumer.getmany(tp, timeout_ms=FETCH_WAIT_MS)
            for record in batches.get(tp, ()):
                if last < record.offset <= upto:  # a record seen twice is taken once
                    out.append(record)
                    last = record.offset
                elif record.offset > upto:
                    last = upto
        return out


def _text(member: Any) -> str:
    return member.decode() if isinstance(member, bytes) else str(member)


def _fold_ranges(
    boards: dict[str, _Board],
    records: dict[int, list[Any]],
    defs: dict[str, BoardDef | DefinitionError],
) -> tuple[PartitionFold, PartitionFold, dict[str, int]]:
    """(forward, backward, events per board): the events Redis holds beyond the archive, folded, and those the
    archive holds beyond Redis."""
    forward, backward = PartitionFold(), PartitionFold()
    counts: dict[str, int] = {}
    decoder = Decoder()
    for partition in sorted(records):
        part = records[partition]
        routed = route(part, decode_all(part, decoder), defs)
        picked: dict[bool, tuple[list[Any], list[Decoded]]] = {True: ([], []), False: ([], [])}
        for record, fields in zip(part, routed.decoded, strict=True):
            board = boards.get(fields[0]) if type(fields) is tuple else None
            if board is None:
                continue
            a, r = board.archive.mark(partition), board.redis.mark(partition)
            if a < record.offset <= r or r < record.offset <= a:
                picked[a < r][0].append(record)
                picked[a < r][1].append(fields)
                counts[board.name] = counts.get(board.name, 0) + 1
        for ahead, fold in ((True, forward), (False, backward)):
            taken, decoded = picked[ahead]
            marks = dict.fromkeys((f[0] for f in decoded if type(f) is tuple), NO_WATERMARK)
            fold.fold_checked(taken, decoded, marks, set(), routed.defs, {}, routed.periods)
    return forward, backward, counts


def _compare(board: _Board, forward: PartitionFold, backward: PartitionFold, out: BoardAudit) -> None:
    name, definition = board.name, board.definition
    ahead, behind = folded_players(forward, name), folded_players(backward, name)
    players = set(board.redis.players) | set(board.archive.players) | ahead | behind
    out.players = len(players)
    for player in sorted(players):
        in_redis, in_archive = board.redis.players.get(player), board.archive.players.get(player)
        if player in ahead and player in behind:
            out.unverified_players.append(player)
            continue
        if player in behind:  # the archive is ahead: Redis carried forward must be the archive
            expected = advance(backward, name, player, in_redis, definition)
            if expected != in_archive:
                out.differences.append(Difference(name, player, in_archive, expected, "redis + events"))
            continue
        expected = advance(forward, name, player, in_archive, definition) if player in ahead else in_archive
        if expected != in_redis:
            out.differences.append(
                Difference(name, player, in_redis, expected, "archive + events" if player in ahead else "archive")
            )


def _ranges(
    boards: dict[str, _Board],
    results: dict[str, BoardAudit],
    partitions: Sequence[int],
    firsts: dict[int, int],
    epochs: tuple[dict[int, int], dict[int, int]],
) -> dict[int, tuple[int, int]]:
    """partition -> (after, upto): the offsets to read back, from the lowest watermark to the highest over every
    board. A board Kafka cannot serve (or whose epochs differ) is marked unverified and dropped from ``boards``."""
    ranges: dict[int, tuple[int, int]] = {}
    in_redis, in_archive = epochs
    for b in list(boards.values()):
        for p in partitions:
            lo, hi = sorted((b.archive.mark(p), b.redis.mark(p)))
            if lo == hi:
                continue
            why = None
            e_r, e_a = in_redis.get(p, 0), in_archive.get(p, 0)
            if e_r != e_a:
                why = f"partition {p} is in log epoch {e_r} in Redis, {e_a} in the archive"
            elif lo + 1 < firsts[p]:
                why = f"Kafka no longer holds offsets {lo + 1}..{firsts[p] - 1} of partition {p}"
            if why is not None:
                results[b.name].unverified = why
                del boards[b.name]
                break
            old = ranges.get(p, (lo, hi))
            ranges[p] = (min(old[0], lo), max(old[1], hi))
    return ranges


async def audit(
    settings: ArchiverSettings,
    archive: Archive,
    redis: Client,
    board: str | None,
    progress: Callable[[BoardAudit], None],
    *,
    snapshots: Client | None = None,
    snapshot_timeout_s: float | None = None,
) -> list[BoardAudit]:
    """Audit every board (``board`` None) or one board and its periods; ``progress`` hears each board's result.
    Each board's snapshots are read through ``snapshots`` (a client with a longer read timeout; None: ``redis``)
    and with ``snapshot_timeout_s`` as PostgreSQL's statement timeout (None: the pool's)."""
    topic, now_ms = settings.topic, int(time.time() * 1000)
    async with KafkaRange(settings) as kafka:
        partitions = await kafka.partitions()
        names = set(await board_names(archive, board))
        indexed = [_text(m) for m in await redis.zrange(keys.BOARD_INDEX_KEY, 0, -1)]
        names.update(b for b in indexed if board is None or b == board)
        async with archive.connection() as conn:
            expired = {
                r["board"]
                for r in await conn.fetch(
                    "SELECT board FROM hb_boards WHERE expires_at_ms > 0 AND expires_at_ms <= $1", now_ms
                )
            }
        found = await ArchiveSink(archive, redis, topic).load_declared(sorted(names - expired))
        r_epochs, a_epochs = await redis_epochs(redis, topic, partitions), await archive_epochs(archive, topic)
        results: dict[str, BoardAudit] = {}
        boards: dict[str, _Board] = {}
        for name, definition in sorted(found.items()):
            results[name] = BoardAudit(name)
            if isinstance(definition, DefinitionError):
                results[name].unverified = f"its definition cannot be read: {definition}"
                continue
            d = definition or DEFAULT
            snap_r = await read_redis(snapshots or redis, name, d, topic, r_epochs, partitions)
            snap_a = await read_archive(archive, name, d, topic, a_epochs, partitions, snapshot_timeout_s)
            boards[name] = _Board(name, d, snap_r, snap_a)
        firsts = await kafka.first_offsets(partitions)
        ranges = _ranges(boards, results, partitions, firsts, (r_epochs, a_epochs))
        records = {p: await kafka.read(p, lo, hi, settings.kafka_start_timeout_s) for p, (lo, hi) in ranges.items()}
    logical = {f[0] for part in records.values() for f in decode_all(part, Decoder()) if type(f) is tuple}
    declared = await ArchiveSink(archive, redis, topic).load_declared(logical)
    defs: dict[str, BoardDef | DefinitionError] = {b: DEFAULT if d is None else d for b, d in declared.items()}
    forward, backward, counts = _fold_ranges(boards, records, defs)
    for name, b in boards.items():
        results[name].events = counts.get(name, 0)
        _compare(b, forward, backward, results[name])
    for result in results.values():
        progress(result)
    if board is None:  # the archiver's gauges read it (archive.audit_log)
        await audit_log.record(archive, list(results.values()), int(time.time() * 1000))
    return list(results.values())
