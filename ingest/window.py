"""The window fold: pure bookkeeping of pending per-player deltas, no I/O.

Events are folded per partition (``partition -> board -> player -> delta``) so a revoked partition's
pending work can be dropped on its own, and so each board's flush knows which partitions fed it and up to
which offset. At flush time the partitions are merged per board into one :class:`BoardBatch`: one
sorted-set write per distinct board-player pair, plus the board's watermark and meta bookkeeping.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from hotboard.keys import DEFAULT_BOARD, PLAYER_MAX_CHARS
from ingest.codec import MAX_ABS_DELTA, MAX_VALUE_BYTES, Decoder, InvalidEvent

#: Redis writes per board per window besides the ZINCRBYs: the watermark HSET, the meta version HINCRBY
#: and the meta as_of HSET. Part of the "minimum possible writes" the benchmark checks against.
BOOKKEEPING_WRITES_PER_BOARD = 3


def _player_deltas() -> defaultdict[str, int]:
    return defaultdict(int)


@dataclass(slots=True)
class PartitionFold:
    """Pending deltas of one partition since its last successful flush."""

    #: board -> player -> summed delta; missing keys read as 0, so the hot loop is one ``+=``.
    boards: defaultdict[str, defaultdict[str, int]] = field(default_factory=lambda: defaultdict(_player_deltas))
    #: Last offset folded (valid, invalid or skipped alike); -1 when nothing was folded yet.
    last_offset: int = -1
    entries: int = 0
    events: int = 0
    #: Oldest and newest event time seen (ms), for freshness; None when events carried no ts.
    min_ts_ms: int | None = None
    max_ts_ms: int | None = None
    #: Invalid records waiting to be dead-lettered with this window: ``(record, error)``.
    dead: list[tuple[Any, Any]] = field(default_factory=list)

    def add(self, board: str, player: str, delta: int) -> None:
        deltas = self.boards[board]
        if player not in deltas:
            self.entries += 1
        deltas[player] += delta
        self.events += 1

    def fold_batch(self, records: Sequence[Any], decoder: Decoder) -> int:
        """Fold Kafka records that lie past every watermark of their partition; returns the events folded.

        The hot loop of the worker. A well-formed event on a known board is accepted right here after one
        orjson parse and a few exact type checks; anything else (a new board, an unusual player id, an
        invalid record) goes through ``decoder.fields``, the one definition of validity, which either
        accepts it or says why not (the record is then kept for the dead-letter topic).
        """
        boards = self.boards
        known = decoder.known_boards
        slow = decoder.fields
        loads = orjson.loads
        dead = self.dead
        dead_before = len(dead)
        max_bytes, max_chars, default_board = MAX_VALUE_BYTES, PLAYER_MAX_CHARS, DEFAULT_BOARD
        min_delta, max_delta = -MAX_ABS_DELTA, MAX_ABS_DELTA
        before = sum(map(len, boards.values()))
        last_ts = None
        for record in records:
            value = record.value
            try:
                obj = loads(value)
                player = obj["player"]
                delta = obj["delta"]
                board = obj.get("board", default_board)
                ts = obj.get("ts")
                fast = (
                    "op" not in obj
                    and board in known
                    and 0 < len(player) <= max_chars
                    and player.isprintable()  # AttributeError unless a str
                    and type(delta) is int  # exact: bool is an int subclass; floats would make totals inexact
                    and min_delta <= delta <= max_delta
                    and ((type(ts) is int and ts >= 0) or ts is None)
                    and len(value) <= max_bytes
                )
            except (ValueError, TypeError, KeyError, AttributeError):
                # not JSON, no value, not an object, a field missing or of the wrong type: the slow path says why
                fast = False
            if not fast:
                try:
                    board, player, delta, ts = slow(value)
                except InvalidEvent as exc:
                    dead.append((record, exc))
                    continue
            boards[board][player] += delta
            last_ts = ts
        folded = len(records) - (len(dead) - dead_before)
        self.entries += sum(map(len, boards.values())) - before
        self.events += folded
        if records:
            self.last_offset = records[-1].offset
        # Freshness from the batch's first and last valid events (a partition's events arrive in time order),
        # not from every event: two comparisons per event would cost more than the histogram is worth.
        if folded:
            if last_ts is not None:
                self.note_ts(last_ts)
            for record in records:
                try:
                    first_ts = slow(record.value)[3]
                except InvalidEvent:
                    continue
                if first_ts is not None:
                    self.note_ts(first_ts)
                break
        return folded

    def note_ts(self, ts_ms: int) -> None:
        if self.min_ts_ms is None or ts_ms < self.min_ts_ms:
            self.min_ts_ms = ts_ms
        if self.max_ts_ms is None or ts_ms > self.max_ts_ms:
            self.max_ts_ms = ts_ms


@dataclass(slots=True)
class BoardBatch:
    """Everything one board receives in one flush: summed deltas and the new watermark per partition."""

    board: str
    deltas: dict[str, int]
    #: partition -> last offset of that partition covered by this batch.
    offsets: dict[int, int]


@dataclass(slots=True)
class Window:
    """Pending work of every assigned partition since the last successful flush."""

    parts: dict[int, PartitionFold] = field(default_factory=dict)

    def fold_for(self, partition: int) -> PartitionFold:
        fold = self.parts.get(partition)
        if fold is None:
            fold = self.parts[partition] = PartitionFold()
        return fold

    @property
    def entries(self) -> int:
        """Pending board-player pairs (an upper bound when producers split one player over partitions)."""
        return sum(fold.entries for fold in self.parts.values())

    @property
    def events(self) -> int:
        return sum(fold.events for fold in self.parts.values())

    def is_empty(self) -> bool:
        return all(fold.last_offset < 0 for fold in self.parts.values())

    def dead_letters(self) -> list[tuple[Any, Any]]:
        return [letter for fold in self.parts.values() for letter in fold.dead]

    def drop(self, partitions: Iterable[int]) -> None:
        for partition in partitions:
            self.parts.pop(partition, None)

    def offsets(self) -> dict[int, int]:
        """partition -> last folded offset, for partitions that folded anything."""
        return {p: fold.last_offset for p, fold in self.parts.items() if fold.last_offset >= 0}

    def batches(self) -> list[BoardBatch]:
        """Merge the partitions per board. Partitions of one player rarely overlap (the record key is the
        player id), so the common case is adopting one partition's dict without copying it."""
        out: dict[str, BoardBatch] = {}
        for partition, fold in self.parts.items():
            for board, deltas in fold.boards.items():
                batch = out.get(board)
                if batch is None:
                    out[board] = BoardBatch(board, deltas, {partition: fold.last_offset})
                    continue
                if len(batch.offsets) == 1:
                    batch.deltas = dict(batch.deltas)  # never mutate a partition's own dict
                merged = batch.deltas
                # Usually disjoint (one player, one partition): C-speed update, Python only for the overlap.
                summed = {player: merged[player] + deltas[player] for player in merged.keys() & deltas.keys()}
                merged.update(deltas)
                merged.update(summed)
                batch.offsets[partition] = fold.last_offset
        return list(out.values())
