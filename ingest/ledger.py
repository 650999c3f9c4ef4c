"""One partition's ledger of the windows this worker applied to its boards, kept across positionings: what a
rewind (:mod:`ingest.rewind`) compares with what Redis holds. No I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple


class Applied(NamedTuple):
    """One window this worker applied to a board on a partition."""

    #: The board's watermark for the partition after it (the window's last offset of the partition).
    mark: int
    #: The watermark it replaced (the flush's compare-and-set; NO_WATERMARK: the board's first on it).
    prev: int
    #: Where the board's events of the window begin at the earliest: past ``prev``, at or past the window's
    #: first record of the partition.
    first: int
    #: The run of this worker's windows on the board this one ends (each taking the board from the watermark
    #: the one before left, across positionings while the ledger describes Redis): the watermark it began from
    #: and its first window's
    #: ``first``; None: this window alone.
    base: int | None = None
    floor: int | None = None

    def lacked_from(self, held: int) -> int:
        """The first offset a board holding watermark ``held`` (present, below ``mark``) may lack: the window's
        first when only it is lacked, the run's when the board holds where the run began or a value inside it
        (the runs' windows are this worker's, each at or past the run's first), else just past ``held``."""
        if held == self.prev:
            return self.first
        if self.base is not None and self.floor is not None and self.base <= held < self.prev:
            return max(held + 1, self.floor)
        return held + 1


class Ledger:
    """One partition's record of the windows this worker applied, kept across its positionings: the last window
    per board (until the board goes idle or the ledger no longer describes Redis), and the entries a positioning
    found still owed (a board behind them) until a window of the board lands at or past them or the checkpoint
    this worker moves passes them (the replay reached them). Bounded by the boards in use: the idle boards go with
    the watermarks (:meth:`forget`), the owed ones once the replay passes them."""

    __slots__ = ("_owed", "_recent", "epoch", "gen")

    def __init__(self) -> None:
        self._recent: dict[str, Applied] = {}
        self._owed: dict[str, Applied] = {}
        #: The restore generation and epoch of the positioning the entries were applied under.
        self.gen = 0
        self.epoch = 0

    def __len__(self) -> int:
        return len(self._recent.keys() | self._owed.keys())

    def entries(self) -> dict[str, Applied]:
        """board -> the newest window this worker applied to it (owed, or its last)."""
        out = dict(self._owed)
        for board, applied in self._recent.items():
            if board not in out or applied.mark > out[board].mark:
                out[board] = applied
        return out

    def owed(self) -> Mapping[str, Applied]:
        return self._owed

    def last_windows(self) -> Mapping[str, Applied]:
        """board -> the last window this worker applied to it (kept across positionings, see :meth:`forget`)."""
        return self._recent

    def applied(self, board: str, mark: int, prev: int, first: int) -> None:
        """A window of this worker took ``board`` from ``prev`` to ``mark``, its events at or past ``first``."""
        last = self._recent.get(board)
        if last is not None and prev == last.mark:  # the run goes on
            base = last.prev if last.base is None else last.base
            self._recent[board] = Applied(mark, prev, first, base, last.first if last.floor is None else last.floor)
        else:
            self._recent[board] = Applied(mark, prev, first)
        if self._owed:
            owed = self._owed.get(board)
            if owed is not None and mark >= owed.mark:
                del self._owed[board]

    def checkpoint_moved(self, checkpoint: int) -> None:
        """This worker moved the checkpoint to ``checkpoint``: every owed entry at or below it is replayed."""
        if self._owed:
            self._owed = {b: a for b, a in self._owed.items() if a.mark > checkpoint}

    def forget(self, boards: Iterable[str]) -> None:
        """Idle boards leave the last windows (never the owed entries)."""
        for board in boards:
            self._recent.pop(board, None)

    def positioned(self, owed: Mapping[str, Applied], gen: int, epoch: int, reset: bool) -> None:
        """A positioning under restore generation ``gen`` and ``epoch`` found ``owed`` behind. The last windows
        stay unless ``reset`` (the ledger no longer describes Redis): a board its master holds whole now may still
        lack a window on a replica that fails over later, and a run of windows goes on across the positioning."""
        if reset:
            self._recent = {}
        self._owed = dict(owed)
        self.gen = gen
        self.epoch = epoch

    def clear(self) -> None:
        self._recent = {}
        self._owed = {}
