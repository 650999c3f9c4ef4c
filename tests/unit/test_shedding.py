"""Which idle connection gives way at the cap: silent before partial before resting, oldest first, never busy."""

from __future__ import annotations

from reader_api.shedding import Idle, Shedder


class Conn:
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False

    def shed(self) -> None:
        self.closed = True


def test_tiers_then_age_and_never_a_busy_or_the_kept_connection() -> None:
    shedder: Shedder[Conn] = Shedder()
    resting, partial, old_silent, new_silent, busy = (Conn(n) for n in ("resting", "partial", "old", "new", "busy"))
    shedder.mark(resting, Idle.RESTING)
    shedder.mark(partial, Idle.PARTIAL)
    shedder.mark(old_silent, Idle.SILENT)
    shedder.mark(new_silent, Idle.SILENT)
    shedder.mark(busy, Idle.SILENT)
    shedder.mark(busy, None)  # it sent a request
    order = []
    while shedder.shed_one(keep=new_silent):
        order.append(next(c.name for c in (resting, partial, old_silent, busy) if c.closed and c.name not in order))
    assert order == ["old", "partial", "resting"]
    assert not busy.closed and not new_silent.closed
    assert shedder.shedding == {old_silent, partial, resting}
    shedder.forget(old_silent)
    assert old_silent not in shedder.shedding and shedder.tier(new_silent) is Idle.SILENT


def test_a_connection_marked_again_is_the_newest_of_its_tier() -> None:
    shedder: Shedder[Conn] = Shedder()
    a, b, me = Conn("a"), Conn("b"), Conn("me")
    for conn in (a, b):
        shedder.mark(conn, Idle.RESTING)
    shedder.mark(a, None)
    shedder.mark(a, Idle.RESTING)  # answered another request: now newer than b
    assert shedder.shed_one(keep=me) and b.closed and not a.closed
