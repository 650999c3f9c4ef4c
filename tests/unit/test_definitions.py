"""The worker's one cache of board definitions (:class:`ingest.definitions.DefinitionCache`): what it keeps,
what it reads again, its bound, and that nothing but itself writes to it."""

from __future__ import annotations

import inspect
from collections.abc import Collection, Mapping

from flusher.batch import Sink
from hotboard.board_store import Found
from hotboard.boards import DEFAULT, BoardDef, DefinitionError
from ingest.definitions import DefinitionCache

WEEKLY = BoardDef(reset="weekly")
BEST = BoardDef(operator="best")


class Store:
    """The store as the sink reads it: declared definitions, undeclared boards (None), unreadable ones."""

    def __init__(self, found: dict[str, Found]) -> None:
        self.found = found
        self.reads: list[list[str]] = []

    async def read(self, boards: Collection[str]) -> Mapping[str, Found]:
        self.reads.append(list(boards))
        return {b: self.found.get(b) for b in boards}


async def test_declared_definitions_are_read_once_and_only_the_missing_boards_are_read() -> None:
    store = Store({"w": WEEKLY, "b": BEST})
    cache = DefinitionCache(store.read, 100)
    assert await cache.get(["w", "b", "w"]) == {"w": WEEKLY, "b": BEST}
    assert await cache.get(["w", "b"]) == {"w": WEEKLY, "b": BEST}
    assert store.reads == [["w", "b"]]  # one read for both, a board asked twice read once; then none
    store.found["x"] = BEST
    assert await cache.get(["b", "x"]) == {"b": BEST, "x": BEST}
    assert store.reads[-1] == ["x"]


async def test_undeclared_and_unreadable_boards_are_answered_and_read_again() -> None:
    """An undeclared board may be declared any time, and an unreadable definition may be repaired: neither is
    kept, so the next fold sees the change."""
    broken = DefinitionError("hb:{u}:def: not a definition hotboard wrote")
    store = Store({"u": broken})
    cache = DefinitionCache(store.read, 100)
    assert await cache.get(["new", "u"]) == {"new": DEFAULT, "u": broken}
    store.found.update(new=WEEKLY, u=BEST)
    assert await cache.get(["new", "u"]) == {"new": WEEKLY, "u": BEST}
    assert store.reads == [["new", "u"], ["new", "u"]]
    assert len(cache) == 2


async def test_the_cache_is_bounded_least_recently_used_first() -> None:
    store = Store({"a": WEEKLY, "b": BEST, "c": WEEKLY})
    cache = DefinitionCache(store.read, 2)
    await cache.get(["a"])
    await cache.get(["b"])
    await cache.get(["a"])  # a is now the most recent
    await cache.get(["c"])  # b goes
    assert len(cache) == 2
    store.reads.clear()
    assert await cache.get(["a", "b", "c"]) == {"a": WEEKLY, "b": BEST, "c": WEEKLY}
    assert store.reads == [["b"]]


async def test_forget_reads_every_definition_again() -> None:
    store = Store({"a": WEEKLY})
    cache = DefinitionCache(store.read, 100)
    await cache.get(["a"])
    cache.forget()
    assert len(cache) == 0
    store.found["a"] = BEST  # redeclared while the worker resynchronised
    assert await cache.get(["a"]) == {"a": BEST}
    assert len(store.reads) == 2


async def test_only_the_cache_writes_to_itself() -> None:
    """The sink reads the store for the cache and is handed no cache (its read takes board names only); an
    answer handed out, or the mapping a read returned, changed afterwards changes nothing cached."""
    assert list(inspect.signature(Sink.load_declared).parameters) == ["self", "boards"]
    answered: dict[str, Found] = {}

    async def read(boards: Collection[str]) -> Mapping[str, Found]:
        answered.update(dict.fromkeys(boards, WEEKLY))
        return answered

    cache = DefinitionCache(read, 100)
    got = await cache.get(["a"])
    got["a"] = BEST
    answered["a"] = BEST
    assert await cache.get(["a"]) == {"a": WEEKLY}
    public = {n for n in dir(cache) if not n.startswith("_")}
    assert public == {"get", "forget"}
