"""What is folded and not yet flushed: the active window and the sealed ones waiting for their flush."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ingest.window import Window


@dataclass(slots=True)
class Pending:
    """Everything folded and not yet flushed: the active window and the sealed ones, oldest first (the first
    is retried as is after a failed flush)."""

    active: Window = field(default_factory=Window)
    sealed: list[Window] = field(default_factory=list)

    @property
    def entries(self) -> int:
        return self.active.entries + sum(w.entries for w in self.sealed)

    def seal(self) -> None:
        if not self.active.is_empty():
            self.sealed.append(self.active)
            self.active = Window()

    def drop(self, partitions: Iterable[int]) -> None:
        gone = set(partitions)
        for window in (self.active, *self.sealed):
            window.drop(gone)
        self.sealed = [w for w in self.sealed if w.parts]

    def clear(self) -> None:
        self.active = Window()
        self.sealed = []
