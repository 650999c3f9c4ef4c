"""What is folded and not yet flushed: windows (every partition's fold since the last flush), the active one and
the sealed ones waiting for their flush."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from flusher.batch import BoardBatch
from ingest.batching import merge
from ingest.folds import DeadLetter, PartitionFold


@dataclass(slots=True)
class Window:
    """Pending work of every assigned partition since the last successful flush."""

    folds: dict[int, PartitionFold] = field(default_factory=dict)

    def fold_for(self, partition: int) -> PartitionFold:
        fold = self.folds.get(partition)
        if fold is None:
            fold = self.folds[partition] = PartitionFold()
        return fold

    @property
    def entries(self) -> int:
        """Pending board-player pairs (an upper bound when producers split one player over partitions)."""
        return sum(fold.entries for fold in self.folds.values())

    @property
    def events(self) -> int:
        return sum(fold.events for fold in self.folds.values())

    @property
    def dead_count(self) -> int:
        return sum(len(fold.dead) for fold in self.folds.values())

    def is_empty(self) -> bool:
        return all(fold.last_offset < 0 for fold in self.folds.values())

    def largest_board(self) -> int:
        """Most players any one partition holds for any one board: what one script would carry at least."""
        return max((fold.largest_board() for fold in self.folds.values()), default=0)

    def take_dead_letters(self) -> list[tuple[int, DeadLetter]]:
        """(partition, dead letter) of every fold, in partition order of folding; the folds keep none."""
        letters = [(p, letter) for p, fold in self.folds.items() for letter in fold.dead]
        for fold in self.folds.values():
            fold.dead = []
        return letters

    def drop(self, partitions: Iterable[int]) -> None:
        for partition in partitions:
            self.folds.pop(partition, None)

    def offsets(self) -> dict[int, int]:
        """partition -> last folded offset, for partitions that folded anything."""
        return {p: fold.last_offset for p, fold in self.folds.items() if fold.last_offset >= 0}

    def first_offsets(self) -> dict[int, int]:
        """partition -> first folded offset, for partitions that folded anything."""
        return {p: fold.first_offset for p, fold in self.folds.items() if fold.last_offset >= 0}

    def batches(self, max_players: int) -> list[BoardBatch]:
        """The window as board batches of at most ``max_players`` players where partitions allow
        (:func:`ingest.batching.merge`)."""
        return merge(self.folds, max_players)


@dataclass(slots=True)
class Pending:
    """Everything folded and not yet flushed: the active window and the sealed ones, oldest first (the first
    is retried as is after a failed flush)."""

    active: Window = field(default_factory=Window)
    sealed: list[Window] = field(default_factory=list)

    @property
    def entries(self) -> int:
        return self.active.entries + sum(w.entries for w in self.sealed)

    def boards_of(self, partition: int) -> set[str]:
        """Every board with pending work from ``partition``, in any window."""
        out: set[str] = set()
        for window in (self.active, *self.sealed):
            fold = window.folds.get(partition)
            if fold is not None:
                out.update(fold.boards, fold.ops, fold.steps)
        return out

    def seal(self) -> None:
        if not self.active.is_empty():
            self.sealed.append(self.active)
            self.active = Window()

    def drop(self, partitions: Iterable[int]) -> None:
        gone = set(partitions)
        for window in (self.active, *self.sealed):
            window.drop(gone)
        self.sealed = [w for w in self.sealed if w.folds]

    def clear(self) -> None:
        self.active = Window()
        self.sealed = []
