"""The operator algebra: every score operator is a clamp, clamps compose into clamps, so a window folds any
sequence of operations on one player into one state in O(1) per event. Pure, no I/O.

An operator is ``x -> min(max(x + d, lo), hi)`` (:class:`Op`; ``None`` is an absent bound, -inf or +inf):

- ``incr δ``: ``(δ, None, None)``;
- ``decr δ`` (δ >= 0): ``(-δ, 0, None)``. As Nakama's ``GREATEST(score - δ, 0)``: a decr never leaves a score
  below 0, and one applied to a negative score (a ``set`` may make one) lifts it to 0, even ``decr 0``;
- ``set c``: ``(0, c, c)``;
- ``best s``: ``(0, s, None)`` on ``desc`` boards (keeps the higher), ``(0, None, s)`` on ``asc`` boards.

A player with no score yet starts from 0 for ``incr`` and ``decr`` (a first ``decr`` leaves 0) and takes the
event's score for ``set`` and ``best`` (a first ``best -5`` gives -5, not ``max(0, -5)``). That is not a clamp
of 0, so a fold carries it beside the clamp: :class:`Folded` ``(op, absent)``.

Arithmetic inside a window is exact (Python ints, no floats anywhere). Totals are held at +-MAX_EXACT when a
window is applied: :func:`result` is the exact sequential value, held there. A total that reaches the bound
is held at each flush, as a ZINCRBY total is, so splitting a window changes a result only when an
intermediate total passed 2^53. :func:`script_args` gives the flush script numbers a double holds exactly.
An incr-only board keeps its ``+=`` sum per player (the fast path): :func:`summed` is that sum as a fold, and
:func:`carried` the form a window's sums take when one passes 2^53 (never held before it is applied).
"""

from __future__ import annotations

from typing import NamedTuple

from hotboard.boards import OPERATORS, ORDERS, Operator, Order
from hotboard.keys import MAX_EXACT

__all__ = [
    "OPERATORS",
    "ORDERS",
    "Folded",
    "Op",
    "Operator",
    "Order",
    "carried",
    "event",
    "fold",
    "result",
    "script_args",
]


class Op(NamedTuple):
    """``x -> min(max(x + d, lo), hi)``; ``None`` bounds are unbounded. :func:`compose` keeps ``lo <= hi``
    and ``d == 0`` when ``lo == hi`` (a constant), so equal functions mostly have equal tuples."""

    d: int
    lo: int | None = None
    hi: int | None = None


IDENTITY = Op(0)


def op_of(operator: str, amount: int, order: str = "desc") -> Op:
    """The clamp of one event. Raises ValueError for an unknown operator or order, or a negative decr."""
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}; expected one of {', '.join(ORDERS)}")
    if operator == "incr":
        return Op(amount)
    if operator == "decr":
        if amount < 0:
            raise ValueError(f"decr takes a delta >= 0, got {amount}")
        return Op(-amount, 0)
    if operator == "set":
        return Op(0, amount, amount)
    if operator == "best":
        return Op(0, amount) if order == "desc" else Op(0, None, amount)
    raise ValueError(f"unknown operator {operator!r}; expected one of {', '.join(OPERATORS)}")


def apply(op: Op, x: int) -> int:
    z = x + op.d
    if op.lo is not None and z < op.lo:
        z = op.lo
    if op.hi is not None and z > op.hi:
        z = op.hi
    return z


def compose(first: Op, then: Op) -> Op:
    """``then`` after ``first``, as one clamp: d = d1 + d2, lo = max(lo1 + d2, lo2),
    hi = min(max(hi1 + d2, lo2), hi2). Shifting by d2 commutes with max/min, and
    ``max(min(a, b), c) = min(max(a, c), max(b, c))``; lo > hi would mean "constant hi", so lo is lowered to
    hi (same function), and the d of a constant is 0."""
    d1, lo1, hi1 = first
    d2, lo2, hi2 = then
    if lo1 is None:
        lo = lo2
    else:
        lo = lo1 + d2 if lo2 is None or lo1 + d2 > lo2 else lo2
    if hi1 is None:
        hi = hi2  # +inf + d2 = +inf; max(+inf, lo2) = +inf
    else:
        hi = hi1 + d2
        if lo2 is not None and lo2 > hi:
            hi = lo2
        if hi2 is not None and hi2 < hi:
            hi = hi2
    if lo is not None and hi is not None and lo >= hi:
        return Op(0, hi, hi)
    return Op(d1 + d2, lo, hi)


class Folded(NamedTuple):
    """A window's operations on one player: ``op`` maps a score the player had before the window to the one
    it leaves; ``absent`` is what it leaves for a player with no score before it. Every operator gives an
    absent player a score, so ``absent`` is fixed from the first event on; an empty window is no Folded
    (None)."""

    op: Op
    absent: int


def event(operator: str, amount: int, order: str = "desc") -> Folded:
    """One event as a one-event fold: its clamp, and the score it gives an absent player."""
    op = op_of(operator, amount, order)
    return Folded(op, apply(op, 0) if operator in ("incr", "decr") else amount)


def summed(delta: int) -> Folded:
    """The fold of incr-only events whose deltas sum to ``delta``: what the fast path's ``+=`` holds."""
    return Folded(Op(delta), delta)


def carried(deltas: dict[str, int]) -> dict[str, Folded] | None:
    """Summed deltas in the clamp form when one of them leaves +-MAX_EXACT (None: every one is within and goes as
    it is). A window's sum may pass 2^53 while the total it lands on does not (8, then -(2^53 - 1) and -1 in one
    window: 8 - 2^53). Held at the bound before it is added, the delta would leave that total one off; a
    double cannot carry it either (2^53 + 1 rounds), so it goes as :func:`script_args`' two parts and is held,
    and counted, only where the script applies it. Rare: one comparison pass per batch otherwise."""
    if max(deltas.values()) <= MAX_EXACT and min(deltas.values()) >= -MAX_EXACT:
        return None
    return {player: summed(delta) for player, delta in deltas.items()}


def fold(state: Folded | None, step: Folded) -> Folded:
    """``state`` followed by ``step``. Associative, so ``step`` may itself be a fold of many events (two
    windows, or two partitions' shares of one player, merged in order)."""
    if state is None:
        return step
    op, absent = state
    return Folded(compose(op, step.op), apply(step.op, absent))


def _hold(x: int) -> int:
    return -MAX_EXACT if x < -MAX_EXACT else MAX_EXACT if x > MAX_EXACT else x


def result(state: Folded, current: int | None) -> int:
    """The score after the window: the exact sequential value, held at +-MAX_EXACT. ``current`` is the
    player's score before the window (within +-MAX_EXACT, as every stored total), None when absent."""
    return _hold(state.absent if current is None else apply(state.op, current))


#: The whole range of stored totals, as a clamp.
HOLD = Op(0, -MAX_EXACT, MAX_EXACT)


class ScriptArgs(NamedTuple):
    """One player's window as the flush script takes it; every number within +-(2 MAX_EXACT + 1). The new score is
    ``absent`` for an absent player, else ``min(max((x + d1) + d2, lo), hi)``, added in that order, and then
    held at +-MAX_EXACT (the script counts each hold). Within +-MAX_EXACT every number is exact as a double;
    beyond it a double rounds, but monotonically and never back inside the bound, so a result beyond is held
    exactly as the exact one is: d1 and d2 have one sign, so a partial sum past 2^53 only grows past it."""

    d1: int
    d2: int
    lo: int
    hi: int
    absent: int


def _clip(x: int) -> int:
    m = 2 * MAX_EXACT
    return -m if x < -m else m if x > m else x


def script_args(state: Folded) -> tuple[int, int, int, int, int]:
    """``state`` as (d1, d2, lo, hi, absent), see :class:`ScriptArgs`: what the script evaluates in doubles equals
    :func:`result` for every ``current`` within +-MAX_EXACT. On that domain a d, lo or hi beyond +-2 MAX_EXACT
    leaves the result beyond the bound either way, so each is clipped there (d one further), and d is split into
    two parts of at most MAX_EXACT and MAX_EXACT + 1. Runs once per player per flush: kept to a few comparisons
    (0.8 µs per player)."""
    (d, lo, hi), absent = state
    m = MAX_EXACT
    # d is clipped one further out than the rest: from a score at -+MAX_EXACT a d of +-2 MAX_EXACT lands exactly on
    # the bound, and one more must still land beyond it (the result is held either way; the hold is counted).
    d = -2 * m - 1 if d < -2 * m - 1 else 2 * m + 1 if d > 2 * m + 1 else d
    d1 = -m if d < -m else m if d > m else d
    lo = -2 * m if lo is None else _clip(lo)
    hi = 2 * m if hi is None else _clip(hi)
    return d1, d - d1, lo, hi, _clip(absent)


def best_scores(states: dict[str, Folded], order: str) -> dict[str, int] | None:
    """player -> score when every state is a plain ``best`` (keep the better of the score before and this
    one, or this one for an absent player), as any run of best events folds to; None otherwise."""
    out: dict[str, int] = {}
    desc = order == "desc"
    for player, ((d, lo, hi), absent) in states.items():
        bound = lo if desc else hi
        if d or bound != absent or (hi if desc else lo) is not None:
            return None
        out[player] = absent
    return out
