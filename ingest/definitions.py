"""The worker's board definitions: one bounded cache, and this object its one owner.

Definitions come from the store through the sink's plain read (:meth:`flusher.batch.Sink.load_declared`, no
cache of its own) and leave with the batches folded under them; nothing else writes here. A cached definition
is safe to use because the flush scripts compare the ``spec`` a window was folded under with the stored one and
refuse the window when they differ (the worker then re-reads it and folds again from Redis's checkpoint); once
a board was written its definition never changes. Only declared definitions are kept: an undeclared board can
still be declared, and until its first window lands no flush script would notice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping

from hotboard.board_store import Found
from hotboard.boards import DEFAULT, BoardDef, DefinitionError
from hotboard.bounded import BoundedCache

#: Reads boards' definitions from the store: board -> declared definition, None (undeclared) or why not.
Read = Callable[[Collection[str]], Awaitable[Mapping[str, Found]]]


class DefinitionCache:
    """Declared definitions of the boards seen, bounded by entries: 100,000 boards must not mean 100,000 cached
    hashes forever (past ``max_entries`` the least recently used is read again when next needed)."""

    __slots__ = ("_entries", "_read")

    def __init__(self, read: Read, max_entries: int) -> None:
        self._read = read
        self._entries: BoundedCache[str, BoardDef] = BoundedCache(max_entries)

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, boards: Iterable[str]) -> dict[str, BoardDef | DefinitionError]:
        """board -> its definition (the default for an undeclared one) or why it cannot be read; one read of
        the store for the boards not cached, none when all are."""
        wanted = list(dict.fromkeys(boards))
        out: dict[str, BoardDef | DefinitionError] = {}
        missing: list[str] = []
        for board in wanted:
            cached = self._entries.get(board)
            if cached is None:
                missing.append(board)
            else:
                out[board] = cached
        if missing:
            found = await self._read(missing)
            for board in missing:
                got = found[board]
                if isinstance(got, BoardDef):
                    self._entries.put(board, got)
                out[board] = DEFAULT if got is None else got
        return out

    def forget(self) -> None:
        """After a resynchronisation: every definition is read again (one may have been redeclared meanwhile)."""
        self._entries.clear()
