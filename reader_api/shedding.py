"""Which connection gives way when the API is at its connection cap: an idle one, never a request.

uvicorn's ``limit_concurrency`` counts every open connection, so about as many connections as the cap that
never send a byte (reopened after each head timeout) made every request on the pod a 503, probes included,
at 1 % CPU. Here a connection is *idle* while no request of it is in flight, in one of three tiers, shed in
this order, oldest first within a tier:

1. ``SILENT``: connected, nothing sent yet (what a connection flood is made of);
2. ``PARTIAL``: inside a request head (a slow or trickling client; a normal head is one packet);
3. ``RESTING``: a keep-alive connection between requests (a real client, most likely: shed last).

A new connection past the cap sheds one idle connection, so open connections stay at the cap and a flood
only churns itself; a request is refused (503) only when every other connection has a request in flight.
"""

from __future__ import annotations

import enum
from typing import Generic, Protocol, TypeVar


class Idle(enum.IntEnum):
    SILENT = 0
    PARTIAL = 1
    RESTING = 2


class Sheddable(Protocol):
    def shed(self) -> None:
        """Close the connection now (it has no request in flight)."""


C = TypeVar("C", bound=Sheddable)


class Shedder(Generic[C]):
    """The idle connections of one server by tier, oldest first; and the ones shed but not yet gone (their
    ``connection_lost`` comes a loop iteration later, and they no longer count against the cap)."""

    def __init__(self) -> None:
        self._tiers: tuple[dict[C, None], ...] = tuple({} for _ in Idle)  # dicts as insertion-ordered sets
        self._where: dict[C, Idle] = {}
        self.shedding: set[C] = set()

    def mark(self, conn: C, tier: Idle | None) -> None:
        """``conn`` is now idle in ``tier`` (the newest of it), or busy (None)."""
        old = self._where.pop(conn, None)
        if old is not None:
            del self._tiers[old][conn]
        if tier is not None:
            self._where[conn] = tier
            self._tiers[tier][conn] = None

    def tier(self, conn: C) -> Idle | None:
        return self._where.get(conn)

    def forget(self, conn: C) -> None:
        """``conn`` is closed."""
        self.mark(conn, None)
        self.shedding.discard(conn)

    def shed_one(self, keep: C) -> bool:
        """Close the oldest connection of the first non-empty tier other than ``keep``; False if none is idle."""
        for tier in self._tiers:
            victim = next((c for c in tier if c is not keep), None)
            if victim is not None:
                self.mark(victim, None)
                self.shedding.add(victim)
                victim.shed()
                return True
        return False
