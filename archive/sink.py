"""The archive as a :class:`flusher.batch.Sink`: the worker's fold, windows and flush order, applied to
PostgreSQL exactly once for the reasons Redis is (docs/guarantees.md): a window's rows and its (board,
partition) watermarks change in one transaction, after a compare-and-set on those watermarks; the checkpoints
move in a second one, only from the value the archiver knows.

A window is one transaction: the boards' rows locked in name order (writers of one board queue there, as
scripts queue in Redis), their watermarks read and compared, then every player row of the boards that passed
copied into a staging table (COPY) and applied by one ``INSERT ... ON CONFLICT`` whose arithmetic is the flush
scripts' (:mod:`archive.schema`). Definitions of boards the archive holds come from it (a written board's
definition never changes); the others from Redis, where boards are declared.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator, Sequence
from typing import Any

from archive import schema
from archive.pool import Archive
from flusher.batch import NO_WATERMARK, BoardBatch, BoardResult, CheckpointResult, ExpectedWatermark, Outcome
from hotboard import board_store, keys, operators
from hotboard.board_store import Found
from hotboard.boards import DefinitionError, from_spec
from hotboard.redis_client import Client

_M = keys.MAX_EXACT
#: A summed delta as a clamp that never binds: (old + d) is within +-2 MAX_EXACT, then held like ZINCRBY's total.
_OPEN = (-2 * _M, 2 * _M)

_APPLY = """
INSERT INTO hb_scores AS s (board, player, score, tie_ms, meta)
SELECT t.board, t.player,
       CASE WHEN t.ops IS NOT NULL THEN r.score
            WHEN o.score IS NULL THEN hb_hold(t.absent)
            ELSE hb_hold(least(greatest(o.score + t.d1 + t.d2, t.lo), t.hi)) END,
       CASE WHEN t.ops IS NOT NULL THEN r.tie ELSE o.tie_ms END,
       coalesce(t.meta, o.meta)
FROM hb_stage t
LEFT JOIN hb_scores o ON o.board = t.board AND o.player = t.player
LEFT JOIN LATERAL hb_replay(o.score, o.tie_ms, t.ops, t.amounts, t.ts, t.descending) r ON t.ops IS NOT NULL
ON CONFLICT (board, player) DO UPDATE
SET score = EXCLUDED.score, tie_ms = EXCLUDED.tie_ms, meta = EXCLUDED.meta
WHERE (s.score, s.tie_ms, s.meta) IS DISTINCT FROM (EXCLUDED.score, EXCLUDED.tie_ms, EXCLUDED.meta)
"""


def stage_rows(batch: BoardBatch) -> Iterator[tuple[Any, ...]]:
    """The batch's players as staging rows: a clamp (d1, d2, lo, hi, absent) or earliest steps, and the meta."""
    board, desc, metas = batch.board, batch.definition.order == "desc", batch.metas or {}
    if batch.steps is not None:
        for player, steps in batch.steps.items():
            ops, amounts, ts = zip(*steps, strict=True)
            yield board, player, None, None, None, None, None, ops, amounts, ts, desc, metas.get(player)
    elif batch.states is not None:
        for player, state in batch.states.items():
            yield (board, player, *operators.script_args(state), None, None, None, desc, metas.get(player))
    else:
        lo, hi = _OPEN
        for player, delta in batch.deltas.items():
            yield board, player, delta, 0, lo, hi, delta, None, None, None, desc, metas.get(player)


class ArchiveSink:
    """Windows into the archive; the checkpoints, halts and epochs of the archiver's own partitions."""

    def __init__(self, archive: Archive, redis: Client, topic: str, clock: Any = time.time) -> None:
        self._archive = archive
        self._redis = redis
        self._topic = topic
        self._clock = clock
        self._epochs: dict[int, int] = {}

    def field(self, partition: int) -> str:
        return keys.watermark_field(self._topic, partition, self._epochs.get(partition, 0))

    def forget_registry(self) -> None:
        """Nothing cached of the archive's own: a Redis restart changes no row here."""

    async def server_id(self) -> str:
        """The archive's identity, made with its schema: another one (a new database) means resynchronise."""
        async with self._archive.connection() as conn:
            return str(await conn.fetchval("SELECT id FROM hb_archive"))

    # ---------------------------------------------------------------- positions and halts

    async def load_checkpoints(self, partitions: Collection[int]) -> dict[int, int]:
        return (await self.load_positions(partitions))[0]

    async def load_positions(self, partitions: Collection[int]) -> tuple[dict[int, int], dict[int, tuple[str, int]]]:
        async with self._archive.connection() as conn:
            rows = await conn.fetch(
                "SELECT partition, checkpoint, halt, epoch FROM hb_checkpoints "
                "WHERE topic = $1 AND partition = ANY($2)",
                self._topic,
                list(partitions),
            )
        checkpoints: dict[int, int] = {}
        halts: dict[int, tuple[str, int]] = {}
        for p in partitions:
            self._epochs[p] = 0
        for row in rows:
            p = row["partition"]
            if row["checkpoint"] is not None:
                checkpoints[p] = row["checkpoint"]
            if row["halt"] is not None:
                reason, _, at = row["halt"].partition(" ")
                halts[p] = (reason, int(at))
            self._epochs[p] = row["epoch"]
        return checkpoints, halts

    async def record_halt(self, partition: int, reason: str) -> None:
        async with self._archive.connection() as conn:
            await conn.execute(
                "INSERT INTO hb_checkpoints (topic, partition, halt) VALUES ($1, $2, $3 || ' -1') "
                "ON CONFLICT (topic, partition) DO UPDATE "
                "SET halt = $3 || ' ' || coalesce(hb_checkpoints.checkpoint, -1)",
                self._topic,
                partition,
                reason,
            )

    async def lift_halt(self, partition: int, recorded: tuple[str, int], new_log: bool) -> int | None:
        reason, at = recorded
        async with self._archive.connection() as conn:
            row = await conn.fetchrow(
                "UPDATE hb_checkpoints SET halt = NULL, epoch = epoch + $4::int WHERE topic = $1 AND partition = $2 "
                "AND halt = $3 RETURNING epoch, checkpoint",
                self._topic,
                partition,
                f"{reason} {at}",
                1 if new_log else 0,
            )
        if row is None:
            return None
        self._epochs[partition] = row["epoch"]
        return NO_WATERMARK if row["checkpoint"] is None else int(row["checkpoint"])

    async def advance_checkpoints(self, moves: dict[int, tuple[int, int]]) -> list[CheckpointResult]:
        if not moves:
            return []
        parts = list(moves)
        async with self._archive.connection() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO hb_checkpoints (topic, partition) SELECT $1, unnest($2::int[]) ON CONFLICT DO NOTHING",
                self._topic,
                parts,
            )
            rows = await conn.fetch(
                "SELECT partition, checkpoint, halt FROM hb_checkpoints WHERE topic = $1 AND partition = ANY($2) "
                "ORDER BY partition FOR UPDATE",
                self._topic,
                parts,
            )
            held = {r["partition"]: (_or_none(r["checkpoint"]), r["halt"]) for r in rows}
            out = [
                CheckpointResult(p, held[p][0] == old and held[p][1] is None, held[p][0])
                for p, (old, _) in moves.items()
            ]
            ok = [r.partition for r in out if r.ok]
            await conn.execute(
                "UPDATE hb_checkpoints c SET checkpoint = m.new FROM unnest($2::int[], $3::bigint[]) AS m(p, new) "
                "WHERE c.topic = $1 AND c.partition = m.p",
                self._topic,
                ok,
                [moves[p][1] for p in ok],
            )
        return out

    # ---------------------------------------------------------------- what the fold reads

    async def load_watermarks(self, partition: int, boards: Collection[str]) -> tuple[dict[str, int], int]:
        ordered = list(boards)
        async with self._archive.connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            checkpoint = await conn.fetchval(
                "SELECT checkpoint FROM hb_checkpoints WHERE topic = $1 AND partition = $2", self._topic, partition
            )
            rows = await conn.fetch(
                "SELECT board, last_offset FROM hb_watermarks WHERE field = $1 AND board = ANY($2)",
                self.field(partition),
                ordered,
            )
        marks = dict.fromkeys(ordered, NO_WATERMARK)
        marks.update((r["board"], r["last_offset"]) for r in rows)
        return marks, NO_WATERMARK if checkpoint is None else int(checkpoint)

    async def load_declared(self, boards: Collection[str]) -> dict[str, Found]:
        """The archive's definition of each board it holds (fixed once written, so it may be cached as declared);
        Redis's for the others (declared, None when undeclared, or why it cannot be read)."""
        async with self._archive.connection() as conn:
            rows = await conn.fetch("SELECT board, spec FROM hb_boards WHERE board = ANY($1)", list(boards))
        out: dict[str, Found] = {}
        for row in rows:
            try:
                out[row["board"]] = from_spec(row["spec"])
            except DefinitionError as exc:
                out[row["board"]] = exc
        rest = [b for b in boards if b not in out]
        if rest:
            out.update(await board_store.load_declared(self._redis, rest))
        return out

    # ---------------------------------------------------------------- the window

    async def flush(self, batches: Sequence[BoardBatch], expected: ExpectedWatermark) -> list[BoardResult]:
        if not batches:
            return []
        now_ms = int(self._clock() * 1000)
        seeds: dict[str, tuple[str, int]] = {}  # board -> (spec, expiry) of a row the archive may not have yet
        for batch in batches:
            spec = batch.definition.spec
            seeds.setdefault(batch.board, (spec, batch.period.expire_at_ms if batch.period else 0))
            if batch.period is not None:
                seeds.setdefault(batch.period.board, (spec, 0))  # the seasonal board itself: its definition, no scores
        names = sorted(seeds)
        async with self._archive.connection() as conn, conn.transaction():
            # 1. every board's row, locked in name order: a zombie's window waits here, then sees the new marks
            # a board deleted before goes on from the delete's version (kept with its watermarks, archive.removal)
            await conn.execute(
                "INSERT INTO hb_boards (board, spec, expires_at_ms, version) SELECT u.b, u.s, u.e, "
                "coalesce(w.last_offset, 0) FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(b, s, e) "
                "LEFT JOIN hb_watermarks w ON w.board = u.b AND w.field = $4 ON CONFLICT DO NOTHING",
                names,
                [seeds[b][0] for b in names],
                [seeds[b][1] for b in names],
                keys.APPLIED_DELETED_VERSION,
            )
            specs = {
                r["board"]: r["spec"]
                for r in await conn.fetch(
                    "SELECT board, spec FROM hb_boards WHERE board = ANY($1) ORDER BY board FOR UPDATE", names
                )
            }
            marks: dict[tuple[str, str], int] = {
                (r["board"], r["field"]): r["last_offset"]
                for r in await conn.fetch(
                    "SELECT board, field, last_offset FROM hb_watermarks WHERE board = ANY($1)", names
                )
            }
            # 2. the compare-and-set of each batch, as the flush script's fence
            results = [self._fence(b, expected, marks, specs, now_ms) for b in batches]
            passed = [b for b, r in zip(batches, results, strict=True) if r.outcome is Outcome.APPLIED]
            # 3. the rows, by rounds: a board's second batch applies after its first (a player may be in both)
            for rows in _rounds(passed):
                await conn.copy_records_to_table("hb_stage", records=rows, columns=schema.STAGE_COLUMNS)
                await conn.execute(_APPLY)
                await conn.execute("TRUNCATE hb_stage")
            # 4. the new watermarks and each board's version, in the same transaction
            new = [(b.board, self.field(p), o) for b in passed for p, o in b.offsets.items()]
            await conn.execute(
                "INSERT INTO hb_watermarks SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) "
                "ON CONFLICT (board, field) DO UPDATE SET last_offset = EXCLUDED.last_offset",
                [n[0] for n in new],
                [n[1] for n in new],
                [n[2] for n in new],
            )
            await conn.execute(
                "UPDATE hb_boards b SET version = b.version + n.c, as_of_ms = $2 "
                "FROM (SELECT board, count(*) AS c FROM unnest($1::text[]) AS board GROUP BY board) n "
                "WHERE b.board = n.board",
                [b.board for b in passed],
                now_ms,
            )
        return results

    def _fence(
        self,
        batch: BoardBatch,
        expected: ExpectedWatermark,
        marks: dict[tuple[str, str], int],
        specs: dict[str, str],
        now_ms: int,
    ) -> BoardResult:
        board = batch.board
        expire_ms = batch.period.expire_at_ms if batch.period else 0
        if 0 < expire_ms <= now_ms:
            return BoardResult(board, Outcome.ALREADY_APPLIED, 0)  # a period past its expiry: nothing to keep
        current = {p: marks.get((board, self.field(p)), NO_WATERMARK) for p in batch.offsets}
        if any(current[p] != expected(board, p) for p in batch.offsets):
            if all(current[p] == o for p, o in batch.offsets.items()):
                return BoardResult(board, Outcome.ALREADY_APPLIED, 0)
            return BoardResult(board, Outcome.FENCED, 0, current=current)
        if specs.get(board) != batch.definition.spec:
            return BoardResult(board, Outcome.REDEFINED, 0)
        return BoardResult(board, Outcome.APPLIED, batch.players)


def _or_none(checkpoint: int | None) -> int:
    return NO_WATERMARK if checkpoint is None else int(checkpoint)


def _rounds(batches: Sequence[BoardBatch]) -> Iterator[list[tuple[Any, ...]]]:
    """Staging rows in rounds: round k holds the k-th batch of every board (usually there is one round)."""
    seen: dict[str, int] = {}
    rounds: list[list[tuple[Any, ...]]] = []
    for batch in batches:
        k = seen[batch.board] = seen.get(batch.board, -1) + 1
        if k == len(rounds):
            rounds.append([])
        rounds[k].extend(stage_rows(batch))
    yield from rounds
