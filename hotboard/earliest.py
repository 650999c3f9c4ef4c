"""``earliest`` boards: a player's tie time is the event time of the last event that changed their score, so
among equal scores whoever reached the score first ranks higher, identically across replays, restarts and
rebuilds (event times come from the records, never from a clock). Pure, no I/O.

Which event last changed a score depends on the score before the window, which only Redis knows, so a window
keeps each player's events as a short list of :data:`Step` s that the flush script replays (:func:`replay` is
the same rule in Python, the reference the script is tested against). Consecutive steps whose combined effect
and change time are the same for every starting score merge into one (:func:`push`), so a player's list stays
one step long for the usual streams: incr after incr of one sign, best after best, anything after a set.

The extra operator ``put`` is a set that counts as a change even to an equal value: ``set 5, set 7`` is
``put 7`` (the second set changed the score whatever came before). Totals are held at +-MAX_EXACT after each
step (on other boards after each window; both are exact within the bound).
"""

from __future__ import annotations

from hotboard.boards import TIE_DIGITS

__all__ = ["TIE_DIGITS", "Step", "member", "player_of", "push", "replay", "tie_text"]
from hotboard.keys import MAX_EXACT

#: (operator, amount, event time in ms): operator is incr, decr, set, best or put.
Step = tuple[str, int, int]
#: A player's score and tie time, or None for a player with no score yet.
State = tuple[int, int] | None

_CONSTANT = ("set", "put")


def tie_text(ts_ms: int) -> str:
    """The tie time as it starts a member: 16 digits, so members sort by time among equal scores."""
    return str(ts_ms).zfill(TIE_DIGITS)


def member(ts_ms: int, player: str) -> str:
    return tie_text(ts_ms) + player


def player_of(member_text: str) -> str:
    return member_text[TIE_DIGITS:]


def _hold(x: int) -> int:
    return -MAX_EXACT if x < -MAX_EXACT else MAX_EXACT if x > MAX_EXACT else x


def _better(a: int, b: int, desc: bool) -> bool:
    return a > b if desc else a < b


def step_value(op: str, amount: int, value: int | None, desc: bool) -> int:
    """The score after one step from ``value`` (None: no score yet)."""
    if op == "incr":
        return _hold((value or 0) + amount)
    if op == "decr":
        return max((value or 0) - amount, 0)
    if op == "best" and value is not None:
        return amount if _better(amount, value, desc) else value
    return amount  # set, put, a first best


def replay(steps: list[Step], state: State, desc: bool) -> State:
    """Apply ``steps`` one by one: the reference of the flush script's loop."""
    for op, amount, ts in steps:
        value = None if state is None else state[0]
        new = step_value(op, amount, value, desc)
        if state is None or new != state[0] or op == "put":
            state = (new, ts)
    return state


def push(steps: list[Step], step: Step, desc: bool) -> None:
    """Append ``step``, merged into the last one where that changes nothing for any starting score."""
    if not steps:
        steps.append(step)
        return
    op, amount, ts = step
    last_op, last_amount, _ = steps[-1]
    if op == "put":
        steps[:] = [step]  # a forced change to a constant: nothing before it matters
    elif op == "incr" and amount == 0:
        return  # never changes a score that exists, and the list already gives one
    elif last_op in _CONSTANT:
        # The score before ``step`` is known (last_amount), so is whether it changes it.
        new = step_value(op, amount, last_amount, desc)
        if new != last_amount:
            steps[:] = [("put", new, ts)]
    elif (
        op == "incr"
        and last_op == "incr"
        and (last_amount > 0) == (amount > 0)
        and abs(last_amount + amount) <= MAX_EXACT
    ):
        # One sign only: from a score near the bound, +1 then -1 one by one is held in between (M, then M - 1),
        # where +0 would leave M. Of one sign, a sum past the bound only goes further past it.
        steps[-1] = ("incr", last_amount + amount, ts)
    elif op == "best" and last_op == "best":
        if _better(amount, last_amount, desc):
            steps[-1] = step
    else:
        steps.append(step)
