"""Waiting until a board covers some offsets of the topic, without polling Redis per request.

A board's watermarks (``hb:{B}:applied``, one field per partition of the topic) move in the same script as its
scores, so "the watermark of partition p is at least o" means the board shows every event of p up to o that
went to it. The topic's checkpoint (``hb:ckpt:{T}``) says every event up to its offset reached its board (or
the dead-letter topic): it covers a write to another board, or to a board that sees no more events of p.

One poller per board, started by the first waiter and ended with the last, reads the board's version and
watermarks in one snapshot (:data:`hotboard.lua_reads.MARKS`) and the checkpoints, every ``poll_s``,
however many requests wait on that board. Each waiter remembers the last version seen *not* covering it (a
board without meta reads as the version its next window goes on from): when the first covering snapshot is
the version right after it, that snapshot is exactly the state right after the covering window was applied
(every step that changes a board moves its version: a window, an erase, a delete, a swap). Past it (two steps
between two polls) the snapshot is not known to be that state: Redis keeps no order of the steps, and either
order leaves the same scores, watermarks and version (tests/integration/test_waits.py). An update-then-rank
waiter's player is read in that same script, only once its mark is covered, so a window landing after the poll
cannot slip in before the read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from hotboard import keys, lua_reads
from hotboard.redis_client import Client
from hotboard.script import Script
from reader_api.errors import REDIS_FAILURES
from reader_api.snapshot import board_keys
from reader_api.tokens import Marks

log = logging.getLogger("hotboard.api")

_MARKS = Script(lua_reads.MARKS)
#: Backoff of a poller while Redis fails: up to this many poll intervals between tries.
_MAX_BACKOFF_POLLS = 50


class Covered(StrEnum):
    #: The board's watermarks cover every mark.
    BOARD = "board"
    #: The checkpoints cover a mark the board's watermark does not: that event went to another board, or
    #: (``board_only`` waits) to the dead-letter topic.
    CHECKPOINT = "checkpoint"


@dataclass(frozen=True, slots=True)
class Coverage:
    how: Covered
    #: The board version of the snapshot that first showed the coverage.
    version: int | None
    #: The last version seen not covering the marks; None when the first snapshot looked at covered them.
    before: int | None
    #: A ``player`` wait covered by the board: the player's PLAYER reply from that same snapshot.
    reply: list[Any] | None = None


@dataclass(eq=False)
class _Waiter:
    marks: Marks
    board_only: bool
    future: asyncio.Future[Coverage]
    before: int | None = None
    #: The player to read in the snapshot that covers the (one) mark.
    player: str | None = None


@dataclass(eq=False)
class _Board:
    waiters: set[_Waiter] = field(default_factory=set)
    task: asyncio.Task[None] | None = None


def _keys(board: str) -> list[str]:
    """The poll's KEYS: those of a player's read, then the applied hash."""
    return [*board_keys(board), keys.applied_key(board)]


def _int(raw: object) -> int | None:
    if raw is None or raw is False:
        return None
    try:
        return int(raw)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return None


class Watermarks:
    def __init__(self, redis: Client, topic: str, poll_s: float) -> None:
        self._redis = redis
        self.topic = topic
        self.poll_s = poll_s
        self._boards: dict[str, _Board] = {}
        #: partition -> its log epoch, as last read (names the watermark field).
        self._epochs: dict[int, int] = {}
        self.polls = 0  # snapshots taken, for tests and metrics

    async def version(self, board: str) -> int | None:
        """The board's version now, as the poll reads it; None when Redis does not answer. Read before the
        events of a write exist, it is a version not covering them: the waiter's ``before`` even when the
        acknowledgement comes after their window was applied, and the first poll sees them covered."""
        try:
            reply = await _MARKS(self._redis, _keys(board), [0])
        except REDIS_FAILURES as exc:
            log.warning("version of board %s unreadable: %r", board, exc)
            return None
        return _int(reply[0])

    async def wait(
        self,
        board: str,
        marks: Mapping[int, int],
        timeout_s: float,
        board_only: bool = False,
        before: int | None = None,
        player: str | None = None,
    ) -> Coverage | None:
        """Until ``board`` covers ``marks`` (``board_only``: by its own watermarks, or the checkpoints say the
        events went elsewhere), or None after ``timeout_s``. ``before``: a version known not to cover them.
        ``player`` (one mark): read that player in the snapshot the board first covers it in."""
        if not marks:
            return Coverage(Covered.BOARD, None, None)
        assert player is None or len(marks) == 1
        waiter = _Waiter(dict(marks), board_only, asyncio.get_running_loop().create_future(), before, player)
        entry = self._boards.setdefault(board, _Board())
        entry.waiters.add(waiter)
        if entry.task is None or entry.task.done():
            entry.task = asyncio.create_task(self._poll(board, entry))
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.future), timeout_s)
        except TimeoutError:
            return None
        finally:
            entry.waiters.discard(waiter)

    async def _poll(self, board: str, entry: _Board) -> None:
        failures = 0
        while entry.waiters:
            try:
                await self._tick(board, entry)
                failures = 0
            except REDIS_FAILURES as exc:
                failures += 1
                log.warning("watermarks of board %s unreadable: %r", board, exc)
            await asyncio.sleep(self.poll_s * min(_MAX_BACKOFF_POLLS, 2**failures))
        if self._boards.get(board) is entry:
            del self._boards[board]

    async def _tick(self, board: str, entry: _Board) -> None:
        waiters = [w for w in entry.waiters if not w.future.done()]
        partitions = sorted({p for w in waiters for p in w.marks})
        if not partitions:
            return
        epochs = dict(self._epochs)
        # the checkpoints first: one covering an event means its board's watermark was written before it
        raw = await self._redis.hmget(
            keys.checkpoint_key(self.topic), [f for p in partitions for f in (str(p), keys.epoch_field(p))]
        )
        checkpoints = {p: _int(raw[2 * i]) for i, p in enumerate(partitions)}
        for i, p in enumerate(partitions):
            self._epochs[p] = _int(raw[2 * i + 1]) or 0
        fields = [keys.watermark_field(self.topic, p, epochs.get(p, 0)) for p in partitions]
        place = {p: i + 1 for i, p in enumerate(partitions)}
        readers = [w for w in waiters if w.player is not None]
        reads: list[str | int] = []
        for w in readers:
            ((p, offset),) = w.marks.items()
            reads += (w.player or "", place[p], offset)
        reply = await _MARKS(self._redis, _keys(board), [len(fields), *fields, *reads])
        self.polls += 1
        if any(self._epochs[p] != epochs.get(p, 0) for p in partitions):
            return  # a partition moved to a new log: read its new fields next time
        version = _int(reply[0])
        applied = {p: _int(reply[i]) for p, i in place.items()}
        players = dict(zip(readers, reply[1 + len(fields) :], strict=True))
        for w in waiters:
            how = self._covered(w, applied, checkpoints)
            if how is None:
                w.before = version
            else:
                read = players.get(w) if how is Covered.BOARD else None
                w.future.set_result(Coverage(how, version, w.before, read or None))

    @staticmethod
    def _covered(w: _Waiter, applied: dict[int, int | None], checkpoints: dict[int, int | None]) -> Covered | None:
        how = Covered.BOARD
        for p, offset in w.marks.items():
            mark, checkpoint = applied.get(p), checkpoints.get(p)
            if mark is not None and mark >= offset:
                continue
            if checkpoint is not None and checkpoint >= offset:
                how = Covered.CHECKPOINT
                continue
            return None
        return how

    def epoch(self, partition: int) -> int:
        """The partition's log epoch as last read (names its watermark field)."""
        return self._epochs.get(partition, 0)

    async def close(self) -> None:
        tasks = [b.task for b in self._boards.values() if b.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._boards.clear()
