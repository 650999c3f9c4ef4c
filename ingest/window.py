"""The window fold: pure bookkeeping of pending per-player deltas, no I/O.

Events are folded per partition (``partition -> board -> player -> delta``) so a revoked partition's pending
work can be dropped on its own, and so each board's batch knows which partitions fed it and up to which
offset. At flush time the partitions are merged per board into :class:`BoardBatch` es of at most
``max_players`` players each (one short script each): one sorted-set write per distinct board-player pair,
plus the board's watermark and meta bookkeeping.

Two folds: :meth:`PartitionFold.fold_batch`, the hot loop for boards known to be past their watermark, and
:meth:`PartitionFold.fold_checked`, which checks each event against its board's watermark (after a
repositioning, and the first time a board is seen).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from flusher.batch import MAX_EXACT, BoardBatch
from hotboard.codec import MAX_ABS_DELTA, MAX_VALUE_BYTES, Decoder, Fields, InvalidEvent
from hotboard.keys import DEFAULT_BOARD, PLAYER_MAX_CHARS

#: (the consumed record, why it is invalid). Kept in the window like a delta until its flush.
DeadLetter = tuple[Any, InvalidEvent]


class Folded(NamedTuple):
    """What one fold call did with its records."""

    consumed: int
    applied: int
    invalid: int
    duplicate: int


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
    #: Invalid records waiting to be dead-lettered with this window.
    dead: list[DeadLetter] = field(default_factory=list)

    def fold_batch(self, records: Sequence[Any], clear: Collection[str], decoder: Decoder) -> Folded:
        """Fold records whose boards are in ``clear`` (past their watermark); returns how many records were
        consumed: all of them, or up to the first valid event whose board needs the watermark check (the
        caller looks its watermark up and continues with :meth:`fold_checked`).

        The hot loop of the worker. A well-formed event is accepted right here after one orjson parse and a
        few exact type checks; anything else goes through ``decoder.fields``, the one definition of validity,
        which accepts it or says why not (the record is then kept for the dead-letter topic). No exception
        leaves this loop with deltas past ``last_offset``: bookkeeping is settled in ``finally``.
        """
        boards = self.boards
        slow = decoder.fields
        loads = orjson.loads
        dead = self.dead
        dead_before = len(dead)
        max_bytes, max_chars, default_board = MAX_VALUE_BYTES, PLAYER_MAX_CHARS, DEFAULT_BOARD
        min_delta, max_delta = -MAX_ABS_DELTA, MAX_ABS_DELTA
        before = sum(map(len, boards.values()))
        first_ts = last_ts = None
        done = 0
        try:
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
                        and board in clear
                        and 0 < len(player) <= max_chars
                        and player.isprintable()  # AttributeError unless a str
                        and type(delta) is int  # exact: bool is an int subclass; floats would make totals inexact
                        and min_delta <= delta <= max_delta
                        and ((type(ts) is int and ts >= 0) or ts is None)
                        and len(value) <= max_bytes
                    )
                except Exception:  # noqa: BLE001 - not JSON, no value, not an object, a wrong type: the slow path says why
                    fast = False
                if not fast:
                    try:
                        board, player, delta, ts = slow(value)
                    except InvalidEvent as exc:
                        dead.append((record, exc))
                        done += 1
                        continue
                    if board not in clear:
                        break  # its watermark decides: the caller looks it up
                boards[board][player] += delta
                last_ts = ts
                done += 1
        finally:
            invalid = len(dead) - dead_before
            # the first folded event's time, found after the loop (one decode per call, not a test per event)
            if done > invalid:
                first_ts = _first_ts(records, done, decoder)
            self._settle(records, done, invalid, before, first_ts, last_ts)
        return Folded(done, done - invalid, invalid, 0)

    def fold_checked(
        self,
        records: Sequence[Any],
        decoded: Sequence[Decoded],
        watermarks: dict[str, int],
        clear: set[str],
    ) -> Folded:
        """Fold records checking each event against its board's watermark (``decoded`` holds each record's
        fields or why it is invalid, see :func:`decode_all`; every valid board must be in ``watermarks``); an
        event at or below it was applied already and is skipped. A board whose watermark lies behind moves to
        ``clear``."""
        boards = self.boards
        dead = self.dead
        dead_before = len(dead)
        before = sum(map(len, boards.values()))
        duplicates = 0
        first_ts = last_ts = None
        done = 0
        try:
            for record, fields in zip(records, decoded, strict=True):
                done += 1
                if isinstance(fields, InvalidEvent):
                    dead.append((record, fields))
                    continue
                board, player, delta, ts = fields
                if board not in clear:
                    if record.offset <= watermarks[board]:
                        duplicates += 1
                        continue
                    clear.add(board)
                boards[board][player] += delta
                if first_ts is None:
                    first_ts = ts
                last_ts = ts
        finally:
            invalid = len(dead) - dead_before
            self._settle(records, done, invalid + duplicates, before, first_ts, last_ts)
        return Folded(done, done - invalid - duplicates, invalid, duplicates)

    def _settle(
        self,
        records: Sequence[Any],
        done: int,
        not_folded: int,
        entries_before: int,
        first_ts: int | None,
        last_ts: int | None,
    ) -> None:
        self.entries += sum(map(len, self.boards.values())) - entries_before
        self.events += done - not_folded
        if done:
            self.last_offset = records[done - 1].offset
        # Freshness from the first and last folded events (a partition's events arrive in time order), not
        # from every event: two comparisons per event would cost more than the histogram is worth.
        for ts in (first_ts, last_ts):
            if ts is not None:
                self.note_ts(ts)

    def note_ts(self, ts_ms: int) -> None:
        if self.min_ts_ms is None or ts_ms < self.min_ts_ms:
            self.min_ts_ms = ts_ms
        if self.max_ts_ms is None or ts_ms > self.max_ts_ms:
            self.max_ts_ms = ts_ms

    def largest_board(self) -> int:
        return max(map(len, self.boards.values()), default=0)


def _first_ts(records: Sequence[Any], done: int, decoder: Decoder) -> int | None:
    """The event time of the first valid record among ``records[:done]``."""
    for i in range(done):
        try:
            return decoder.fields(records[i].value)[3]
        except InvalidEvent:
            continue
    return None


#: One record's fields, or why it is invalid.
Decoded = Fields | InvalidEvent


def decode_all(records: Iterable[Any], decoder: Decoder) -> list[Decoded]:
    """Every record through the codec once: the checked fold and the watermark lookup share the result."""
    out: list[Decoded] = []
    for record in records:
        try:
            out.append(decoder.fields(record.value))
        except InvalidEvent as exc:
            out.append(exc)
    return out


def boards_to_check(decoded: Iterable[Decoded], known: Collection[str]) -> set[str]:
    """Valid boards in ``decoded`` whose watermark this partition has not looked up yet."""
    return {f[0] for f in decoded if type(f) is tuple and f[0] not in known}


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

    @property
    def dead_count(self) -> int:
        return sum(len(fold.dead) for fold in self.parts.values())

    def is_empty(self) -> bool:
        return all(fold.last_offset < 0 for fold in self.parts.values())

    def largest_board(self) -> int:
        """Most players any one partition holds for any one board: what one script would carry at least."""
        return max((fold.largest_board() for fold in self.parts.values()), default=0)

    def take_dead_letters(self) -> list[DeadLetter]:
        letters = [letter for fold in self.parts.values() for letter in fold.dead]
        for fold in self.parts.values():
            fold.dead = []
        return letters

    def drop(self, partitions: Iterable[int]) -> None:
        for partition in partitions:
            self.parts.pop(partition, None)

    def offsets(self) -> dict[int, int]:
        """partition -> last folded offset, for partitions that folded anything."""
        return {p: fold.last_offset for p, fold in self.parts.items() if fold.last_offset >= 0}

    def batches(self, max_players: int) -> tuple[list[BoardBatch], int]:
        """Merge the partitions per board into batches of at most ``max_players`` players where partitions
        allow (one partition's share of a board is never split: its watermark moves once). Returns the batches
        and how many deltas were held at +-MAX_EXACT (a window's sum can pass 2^53 when each event does not).

        Partitions of one player rarely overlap (the record key is the player id), so the common case is
        adopting one partition's dict without copying it."""
        out: list[BoardBatch] = []
        open_batch: dict[str, BoardBatch] = {}
        saturated = 0
        for partition, fold in self.parts.items():
            for board, deltas in fold.boards.items():
                if not deltas and fold.last_offset < 0:
                    continue
                batch = open_batch.get(board)
                if batch is None or len(batch.deltas) + len(deltas) > max_players:
                    batch = open_batch[board] = BoardBatch(board, deltas, {partition: fold.last_offset})
                    out.append(batch)
                    continue
                if len(batch.offsets) == 1:
                    batch.deltas = dict(batch.deltas)  # never mutate a partition's own dict
                merged = batch.deltas
                # Usually disjoint (one player, one partition): C-speed update, Python only for the overlap.
                summed = {player: merged[player] + deltas[player] for player in merged.keys() & deltas.keys()}
                merged.update(deltas)
                merged.update(summed)
                batch.offsets[partition] = fold.last_offset
        for batch in out:
            if batch.deltas and (max(batch.deltas.values()) > MAX_EXACT or min(batch.deltas.values()) < -MAX_EXACT):
                held = {p: max(-MAX_EXACT, min(MAX_EXACT, d)) for p, d in batch.deltas.items()}
                saturated += sum(1 for p, d in held.items() if d != batch.deltas[p])
                batch.deltas = held
        return out, saturated
