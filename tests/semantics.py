"""The reference model of board semantics, computed without hotboard's fold: every event applied one by one, in
offset order, exactly as the event contract states it (and the driver that feeds the same events through the real
fold, window by window, as the worker's intake does)."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import orjson
from redis.asyncio import Redis

from flusher.batch import NO_WATERMARK, BoardBatch, Outcome, Sink
from hotboard import earliest, keys
from hotboard.boards import BoardDef
from hotboard.codec import Decoder, decode_all
from hotboard.records import Record
from ingest.pending import Window
from tests.records import record

#: player -> (score, tie time): tie time is the event time of the last event that changed the score.
Board = dict[str, tuple[int, int]]


@dataclass(frozen=True)
class Ev:
    player: str
    op: str | None  # None: the board's operator
    amount: int
    ts: int
    meta: dict[str, object] | None = None

    def value(self, board: str, definition: BoardDef) -> bytes:
        operator = self.op or definition.operator
        body: dict[str, object] = {"board": board, "player": self.player, "ts": self.ts}
        body["delta" if operator in ("incr", "decr") else "score"] = self.amount
        if self.op is not None:
            body["op"] = self.op
        if self.meta is not None:
            body["meta"] = self.meta
        return orjson.dumps(body)


def one_event(op: str, amount: int, value: int | None, desc: bool) -> int:
    """The score after one event from ``value`` (None: no score yet), exact, never held."""
    if op == "incr":
        return (value or 0) + amount
    if op == "decr":
        return max((value or 0) - amount, 0)
    if op == "set" or value is None:
        return amount
    return max(value, amount) if desc else min(value, amount)


def reference(events: Sequence[Ev], definition: BoardDef) -> tuple[Board, dict[str, bytes]]:
    """Scores with tie times, and the last meta per player."""
    board: Board = {}
    metas: dict[str, bytes] = {}
    desc = definition.order == "desc"
    for e in events:
        old = board.get(e.player)
        new = one_event(e.op or definition.operator, e.amount, None if old is None else old[0], desc)
        if old is None or new != old[0]:
            board[e.player] = (new, e.ts)
        if e.meta is not None:
            metas[e.player] = orjson.dumps(e.meta)
    return board, metas


def random_events(rng: random.Random, definition: BoardDef, count: int, players: int, mixed: bool) -> list[Ev]:
    """Events of the board's operator, or (``mixed``) of every operator; small amounts, many ties, equal times."""
    out: list[Ev] = []
    for i in range(count):
        op = rng.choice(["incr", "decr", "set", "best", None]) if mixed else None
        operator = op or definition.operator
        amount = rng.randint(0, 4) if operator == "decr" else rng.randint(-3, 6)
        meta: dict[str, object] | None = {"name": f"n{i}"} if rng.random() < 0.1 else None
        out.append(Ev(f"p{rng.randrange(players)}", op, amount, 1_000 + i // 3, meta))
    return out


def random_case(seed: int, definition: BoardDef) -> tuple[str, list[Ev], list[list[BoardBatch]]]:
    """Board ``b<seed>``: random events (mixed operators on odd seeds), folded into windows cut at random."""
    rng = random.Random(seed)
    count = rng.randint(20, 150)
    events = random_events(rng, definition, count, players=rng.randint(2, 12), mixed=seed % 2 == 1)
    cuts = rng.sample(range(count + 1), k=rng.randint(0, 6))
    board = f"b{seed}"
    return board, events, fold_windows(board, definition, events, cuts, rng.randint(1, 3), rng.randint(2, 9))


def partition_of(player: str, partitions: int) -> int:
    return sum(player.encode()) % partitions


def fold_windows(
    board: str, definition: BoardDef, events: Sequence[Ev], cuts: Sequence[int], partitions: int, max_players: int
) -> list[list[BoardBatch]]:
    """The events as the worker folds them: keyed by player into ``partitions``, cut into windows at ``cuts``
    (indices into ``events``), each window's records through the fast loop and then the general fold, as
    ``ingest.intake`` does. Returns each window's batches."""
    decoder = Decoder()
    offsets = [0] * partitions
    records: list[tuple[int, Record]] = []
    for e in events:
        p = partition_of(e.player, partitions)
        records.append((p, record(e.value(board, definition), offsets[p], timestamp=e.ts)))
        offsets[p] += 1
    fast: list[dict[str, BoardDef]] = [{} for _ in range(partitions)]
    clear: list[set[str]] = [set() for _ in range(partitions)]
    windows: list[list[BoardBatch]] = []
    bounds = [0, *sorted(cuts), len(records)]
    for start, end in itertools.pairwise(bounds):
        window = Window()
        for p in range(partitions):
            mine = [r for q, r in records[start:end] if q == p]
            if not mine:
                continue
            fold = window.fold_for(p)
            steady = fold.fold_batch(mine, fast[p], decoder)
            rest = mine[steady.consumed :]
            if rest:
                defs = {board: definition}
                fold.fold_checked(rest, decode_all(rest, decoder), {board: -1}, clear[p], defs, fast[p], {})
        windows.append(window.batches(max_players))
    return windows


def emulate(windows: Sequence[Sequence[BoardBatch]]) -> tuple[dict[str, tuple[int, int | None]], dict[str, bytes]]:
    """What the flush scripts do with the batches, in Python (hotboard.operators / hotboard.earliest): checks the
    fold and the merge without Redis; the Redis test checks the scripts against the reference itself."""
    from hotboard import earliest, operators

    scores: dict[str, tuple[int, int | None]] = {}
    metas: dict[str, bytes] = {}
    for batches in windows:
        for batch in batches:
            desc = batch.definition.order == "desc"
            for player, delta in batch.deltas.items():
                old = scores.get(player)
                scores[player] = ((old[0] if old else 0) + delta, None)
            for player, state in (batch.states or {}).items():
                old = scores.get(player)
                scores[player] = (operators.result(state, old[0] if old else None), None)
            for player, steps in (batch.steps or {}).items():
                old = scores.get(player)
                start = None if old is None or old[1] is None else (old[0], old[1])
                replayed = earliest.replay(steps, start, desc)
                assert replayed is not None
                scores[player] = replayed
            metas.update(batch.metas or {})
    return scores, metas


def read_board(r: Any, board: str, definition: BoardDef) -> Board:
    """player -> (score, tie time; 0 unless ``earliest``), decoded from the layout in hotboard.boards (a sync
    redis client)."""
    from hotboard import earliest, keys

    out: Board = {}
    for raw, score in r.zrange(keys.board_key(board), 0, -1, withscores=True):
        member = raw.decode()
        value = int(score) * definition.sign
        if definition.earliest:
            out[earliest.player_of(member)] = (value, int(member[: earliest.TIE_DIGITS]))
        else:
            out[member] = (value, 0)
    return out


def comparable(board: Board, definition: BoardDef) -> Board:
    """Tie times matter on ``earliest`` boards only."""
    return board if definition.earliest else {p: (v, 0) for p, (v, _) in board.items()}


# ---------------------------------------------------------------- the same, on a real Redis


async def hash_of(redis: Redis, key: str) -> dict[bytes, bytes]:
    return cast("dict[bytes, bytes]", await redis.hgetall(key))


def pairs_of(rows: object) -> list[tuple[bytes, float]]:
    return cast("list[tuple[bytes, float]]", rows)


async def stored(redis: Redis, board: str, definition: BoardDef) -> dict[str, tuple[int, int | None]]:
    """player -> (score, tie time or None), decoded from the layout in hotboard.boards."""
    rows = cast("list[tuple[bytes, float]]", await redis.zrange(keys.board_key(board), 0, -1, withscores=True))
    out: dict[str, tuple[int, int | None]] = {}
    for raw, score in rows:
        member = raw.decode()
        value = int(score) * definition.sign
        if definition.earliest:
            out[earliest.player_of(member)] = (value, int(member[:16]))
        else:
            out[member] = (value, None)
    if definition.earliest:
        mapping = {k.decode(): v.decode() for k, v in (await hash_of(redis, keys.members_key(board))).items()}
        assert {p: earliest.member(t, p) for p, (_, t) in out.items() if t is not None} == mapping
    return out


async def check_dense(redis: Redis, board: str, scores: dict[str, tuple[int, int | None]]) -> None:
    """A dense board's count hash and distinct-score set agree with its scores."""
    counts = Counter(v for v, _ in scores.values())
    held = {int(k): int(v) for k, v in (await hash_of(redis, keys.counts_key(board))).items()}
    assert held == dict(counts)
    distinct = [
        (m.decode(), int(s)) for m, s in pairs_of(await redis.zrange(keys.dense_key(board), 0, -1, withscores=True))
    ]
    assert distinct == [(str(v), v) for v in sorted(counts)]


async def flush_all(sink: Sink, windows: list[list[BoardBatch]]) -> None:
    """Flush ``windows`` in order, each expecting the watermarks the previous ones left; every batch applies."""
    marks: dict[tuple[str, int], int] = {}
    for batches in windows:
        results = await sink.flush(batches, lambda b, p: marks.get((b, p), NO_WATERMARK))
        assert all(r.outcome is Outcome.APPLIED for r in results), results
        for batch in batches:
            for p, offset in batch.offsets.items():
                marks[batch.board, p] = offset
