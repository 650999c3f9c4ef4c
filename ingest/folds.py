"""The window fold: pure bookkeeping of pending per-player deltas, no I/O.

Events are folded per partition (``partition -> board -> player -> delta``) so a revoked partition's pending
work can be dropped on its own, and so each board's batch knows which partitions fed it and up to which
offset. At flush time the partitions are merged per board into :class:`BoardBatch` es of at most
``max_players`` players each (one short script each): one sorted-set write per distinct board-player pair,
plus the board's watermark and meta bookkeeping.

Two folds: :meth:`PartitionFold.fold_batch`, the hot loop of plain ``incr`` events on boards known to be past
their watermark, and :meth:`PartitionFold.fold_checked`, every other event (each checked against its board's
watermark after a repositioning, and the first time a board is seen).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from flusher.batch import PeriodTarget
from hotboard import codec, earliest
from hotboard.boards import BoardDef, DefinitionError
from hotboard.codec import MAX_VALUE_BYTES, Decoded, Decoder, InvalidEvent, Reason, against
from hotboard.earliest import Step
from hotboard.keys import MAX_EXACT, PLAYER_MAX_CHARS
from hotboard.operators import Folded as OpState
from hotboard.operators import event as op_event
from hotboard.operators import fold as op_fold
from hotboard.operators import summed
from hotboard.records import Record
from ingest.plain_event import decode_plain

#: (the consumed record, why it is invalid). Kept in the window like a delta until its flush.
DeadLetter = tuple[Record, InvalidEvent]


class FoldCounts(NamedTuple):
    """What one fold call did with its records (``invalid`` includes events their board's operator refuses)."""

    consumed: int
    applied: int
    invalid: int
    duplicate: int


def _boards() -> defaultdict[str, dict[str, int]]:
    return defaultdict(dict)


@dataclass(slots=True)
class PartitionFold:
    """Pending deltas of one partition since its last successful flush."""

    #: board -> player -> summed delta. Boards whose events all are ``incr`` (and whose ties are not
    #: ``earliest``) live here. The player dicts are plain dicts: the interpreter's specialised subscripts for
    #: exact dicts make the hot loop's ``+=`` cheaper than a defaultdict's.
    boards: defaultdict[str, dict[str, int]] = field(default_factory=_boards)
    #: board -> player -> folded clamp, for boards with any other operator in this window.
    ops: dict[str, dict[str, OpState]] = field(default_factory=dict)
    #: board -> player -> steps to replay, for ``earliest`` boards (see :mod:`hotboard.earliest`).
    steps: dict[str, dict[str, list[Step]]] = field(default_factory=dict)
    #: Steps held in ``steps``, and the most players any one board holds: kept as the fold goes (a walk over
    #: every board per call would cost milliseconds with 100,000 boards).
    step_count: int = 0
    largest: int = 0
    #: board -> player -> the last ``meta`` seen (compact JSON).
    metas: dict[str, dict[str, bytes]] = field(default_factory=dict)
    #: board -> the definition its events were folded under (the flush script checks it is still the one).
    defs: dict[str, BoardDef] = field(default_factory=dict)
    #: The fast path's boards last passed to :meth:`fold_batch` (their definitions, for the flush).
    fast: dict[str, BoardDef] = field(default_factory=dict)
    #: period board -> its period as routed, taken with its definition (so its expiry is that definition's).
    periods: dict[str, PeriodTarget] = field(default_factory=dict)
    #: Last offset folded (valid, invalid or skipped alike); -1 when nothing was folded yet.
    last_offset: int = -1
    #: First offset folded (as ``last_offset``): every board's events of this fold lie at or past it.
    first_offset: int = -1
    entries: int = 0
    events: int = 0
    #: Oldest and newest event time seen (ms), for freshness; None when events carried no ts.
    min_ts_ms: int | None = None
    max_ts_ms: int | None = None
    #: Invalid records waiting to be dead-lettered with this window.
    dead: list[DeadLetter] = field(default_factory=list)

    def fold_batch(self, records: Sequence[Record], fast: dict[str, BoardDef], decoder: Decoder) -> FoldCounts:
        """Fold plain ``incr`` events (no ``op``, no ``meta``) of boards in ``fast`` (past their watermark, and
        summed by their definition); returns how many records were consumed: all of them, or up to the first
        valid event that needs more (its watermark looked up, or another operator: the caller continues with
        :meth:`fold_checked`).

        The hot loop of the worker. An event of the usual shape is accepted right here after one typed decode in
        C (:mod:`ingest.plain_event`) and, for a player new on its board, the player check; anything else goes
        through ``decoder.fields``, the one definition of validity, which accepts it or says why not (the record
        is then kept for the dead-letter topic). No exception
        leaves this loop with deltas past ``last_offset``: bookkeeping is settled in ``finally``.
        """
        boards = self.boards
        if self.ops:  # boards that left the += form in this window take the general fold
            fast = {b: d for b, d in fast.items() if b not in self.ops}
        self.fast = fast
        #: this call's fast boards -> their pending deltas: one plain-dict lookup per event, not two
        tables: dict[str, dict[str, int]] = {}
        # typed without None so the fold below indexes it unguarded: None (another board) is tested first
        get_table: Callable[[str], dict[str, int]] = tables.get  # type: ignore[assignment]
        slow = decoder.fields
        decode = decode_plain
        dead = self.dead
        dead_before = len(dead)
        max_bytes, max_chars = MAX_VALUE_BYTES, PLAYER_MAX_CHARS
        added = 0
        largest = self.largest
        first_ts = last_ts = None
        done = 0
        try:
            for record in records:
                value: Any = record.value  # a tombstone's None fails in loads(): the slow path says why
                try:
                    event = decode(value)  # the usual shape, types and ranges checked in C
                    board = event.board
                    player = event.player
                    delta = event.delta
                    ts = event.ts
                    deltas = get_table(board)
                    if deltas is None and board in fast:
                        deltas = tables[board] = boards[board]
                    plain = deltas is not None and len(value) <= max_bytes
                    # a player already pending on this board was validated when it was added
                    new = plain and player not in deltas
                    if new:
                        plain = 0 < len(player) <= max_chars and player.isprintable()
                except Exception:  # noqa: BLE001 - not JSON, no value, not an object, a wrong type: the slow path says why
                    plain = False
                if not plain:
                    try:
                        board, player, op, amount, _, ts, meta = slow(value)
                    except InvalidEvent as exc:
                        dead.append((record, exc))
                        done += 1
                        continue
                    if board not in fast or op not in (None, "incr") or meta is not None or amount is None:
                        break  # its watermark or its operator decides: the general fold
                    delta = amount
                    deltas = boards[board]
                    new = player not in deltas
                if new:  # counted here, not by walking every board after the loop: 100,000 boards make that slow
                    deltas[player] = delta
                    added += 1
                    if len(deltas) > largest:
                        largest = len(deltas)
                else:
                    deltas[player] += delta
                last_ts = ts
                done += 1
        finally:
            self.largest = largest
            invalid = len(dead) - dead_before
            # the first folded event's time, found after the loop (one decode per call, not a test per event)
            if done > invalid:
                first_ts = codec.first_ts(records, done, decoder)
            self._settle(records, done, invalid, added, first_ts, last_ts)
        return FoldCounts(done, done - invalid, invalid, 0)

    def fold_checked(
        self,
        records: Sequence[Record],
        decoded: Sequence[Decoded],
        watermarks: dict[str, int],
        clear: set[str],
        defs: Mapping[str, BoardDef | DefinitionError],
        fast: dict[str, BoardDef],
        periods: Mapping[str, PeriodTarget],
    ) -> FoldCounts:
        """The general fold: every operator, ``meta``, and each event checked against its board's watermark
        (``decoded`` holds each record's fields or why it is invalid, see :func:`decode_all`; every valid board
        must be in ``watermarks`` and ``defs``, every period board in ``periods``: see
        :func:`ingest.seasons.route`). An event at or below the watermark was applied already and is skipped. A
        board whose watermark lies behind moves to ``clear``, and to ``fast`` if it sums."""
        dead = self.dead
        dead_before = len(dead)
        added = 0
        duplicates = 0
        first_ts = last_ts = None
        done = 0
        try:
            for record, fields in zip(records, decoded, strict=True):
                done += 1
                if isinstance(fields, InvalidEvent):
                    dead.append((record, fields))
                    continue
                board, player, op, delta, score, ts, meta = fields
                if board not in clear:
                    if record.offset <= watermarks[board]:
                        duplicates += 1
                        continue
                    clear.add(board)
                # One definition per board for the whole fold: a cache reload mid-window must not split it
                # (the flush script refuses the window if this one is stale).
                found = self.defs.get(board) or (self.fast.get(board) if board in self.boards else None) or defs[board]
                try:  # an unreadable definition; the board's own operator needs the other field
                    definition, operator, amount = against(found, op, delta, score)
                except InvalidEvent as exc:
                    dead.append((record, exc))
                    continue
                if definition.summable and board not in fast:
                    fast[board] = definition  # only once an event folded: its flush checks the definition
                if board not in self.defs:  # the board's first event in this fold: its period goes with it
                    self.defs[board] = definition
                    target = periods.get(board) if periods else None
                    if target is not None:
                        self.periods[board] = target
                if definition.earliest and ts is None:
                    ts = max(int(record.timestamp or 0), 0)  # the tie time comes from the record, never a clock
                    if ts > MAX_EXACT:
                        dead.append(
                            (record, InvalidEvent(Reason.OUT_OF_RANGE, f"no ts; record timestamp {ts} > 2^53-1"))
                        )
                        continue
                added += self._apply(board, player, operator, amount, definition, ts)
                if meta is not None:
                    self.metas.setdefault(board, {})[player] = meta
                if first_ts is None:
                    first_ts = ts
                last_ts = ts
        finally:
            invalid = len(dead) - dead_before
            self._settle(records, done, invalid + duplicates, added, first_ts, last_ts)
        return FoldCounts(done, done - invalid - duplicates, invalid, duplicates)

    def _apply(self, board: str, player: str, operator: str, amount: int, definition: BoardDef, ts: int | None) -> int:
        """Fold one event; returns how many pending entries it added (a player, or a step)."""
        if definition.earliest:
            steps = self.steps.setdefault(board, {}).setdefault(player, [])
            before = len(steps)
            earliest.push(steps, (operator, amount, ts or 0), definition.order == "desc")
            self.step_count += len(steps) - before
            return len(steps) - before
        table: dict[str, Any]
        if operator == "incr" and board not in self.ops:
            table = self.boards[board]
            new = player not in table
            table[player] = table.get(player, 0) + amount
        else:
            states = self.ops.get(board)
            if states is None:  # leaves the += form for this window: what was summed so far comes first
                states = self.ops[board] = {p: summed(d) for p, d in self.boards.pop(board, {}).items()}
            table = states
            new = player not in states
            states[player] = op_fold(states.get(player), op_event(operator, amount, definition.order))
        if new and len(table) > self.largest:
            self.largest = len(table)
        return int(new)

    def _settle(
        self,
        records: Sequence[Record],
        done: int,
        not_folded: int,
        added: int,
        first_ts: int | None,
        last_ts: int | None,
    ) -> None:
        self.entries += added
        self.events += done - not_folded
        if done:
            self.last_offset = records[done - 1].offset
            if self.first_offset < 0:
                self.first_offset = records[0].offset
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
        # steps, not players, size an earliest board's script: one player's unmergeable steps count each
        return max(self.largest, self.step_count)
