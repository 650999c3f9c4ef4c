"""The operator algebra against a sequential reference model: events applied one by one to a score that may be
absent, written from the operators' definitions (Nakama's), not from clamps."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hotboard.keys import MAX_EXACT
from hotboard.operators import (
    HOLD,
    IDENTITY,
    OPERATORS,
    ORDERS,
    Folded,
    Op,
    ScriptArgs,
    apply,
    compose,
    event,
    fold,
    op_of,
    result,
    script_args,
    summed,
)

M = MAX_EXACT
Event = tuple[str, int]


def reference(events: list[Event], order: str, current: int | None) -> int | None:
    """One event at a time, exact; no hold."""
    score = current
    for operator, amount in events:
        if operator == "incr":
            score = (score or 0) + amount
        elif operator == "decr":
            score = max((score or 0) - amount, 0)
        elif operator == "set" or score is None:
            score = amount
        else:
            score = max(score, amount) if order == "desc" else min(score, amount)
    return score


def hold(x: int) -> int:
    return max(-M, min(M, x))


def held_reference(events: list[Event], order: str, current: int | None) -> int:
    """The reference flushed once: held at the bound."""
    score = reference(events, order, current)
    assert score is not None
    return hold(score)


def folded(events: list[Event], order: str) -> Folded:
    state: Folded | None = None
    for operator, amount in events:
        state = fold(state, event(operator, amount, order))
    assert state is not None
    return state


# Small amounts hit the boundaries (0, equal scores, a decr to exactly 0) often; large ones the hold.
small = st.integers(-20, 20)
amounts = st.one_of(small, st.integers(-M, M))


@st.composite
def events(draw: st.DrawFn, amount: st.SearchStrategy[int] = amounts, min_size: int = 1) -> list[Event]:
    out: list[Event] = []
    for operator in draw(st.lists(st.sampled_from(OPERATORS), min_size=min_size, max_size=30)):
        value = draw(amount)
        out.append((operator, abs(value) if operator == "decr" else value))
    return out


currents = st.one_of(st.none(), small, st.integers(-M, M))
orders = st.sampled_from(ORDERS)
bounds = st.one_of(st.none(), st.integers(-50, 50))
ops = st.builds(Op, st.integers(-50, 50), bounds, bounds)  # any clamp, lo > hi included


@settings(max_examples=1000)
@given(ops, ops, st.integers(-120, 120))
def test_compose_is_then(first: Op, then: Op, x: int) -> None:
    op = compose(first, then)
    assert apply(op, x) == apply(then, apply(first, x))
    if op.lo is not None and op.hi is not None:
        assert op.lo <= op.hi
        assert op.d == 0 or op.lo < op.hi


@settings(max_examples=500)
@given(ops, ops, ops, st.integers(-200, 200))
def test_compose_is_associative_and_identity_is_neutral(f: Op, g: Op, h: Op, x: int) -> None:
    assert compose(compose(f, g), h) == compose(f, compose(g, h))  # one normal form per function
    assert apply(compose(IDENTITY, f), x) == apply(compose(f, IDENTITY), x) == apply(f, x)


@settings(max_examples=1000)
@given(events(), orders, currents)
def test_one_window_equals_events_one_by_one(evs: list[Event], order: str, current: int | None) -> None:
    assert result(folded(evs, order), current) == held_reference(evs, order, current)


@settings(max_examples=500)
@given(events(small), orders, st.one_of(st.none(), small), st.data())
def test_windows_split_anywhere_equal_one_window(
    evs: list[Event], order: str, current: int | None, data: st.DataObject
) -> None:
    """Totals far from the bound: any split, flushed window by window, equals one window and the events."""
    cuts = sorted(data.draw(st.lists(st.integers(0, len(evs)), max_size=4)))
    score = current
    for start, end in zip([0, *cuts], [*cuts, len(evs)], strict=True):
        if start < end:
            score = result(folded(evs[start:end], order), score)
    assert score == reference(evs, order, current) == result(folded(evs, order), current)


@settings(max_examples=500)
@given(events(), events(), orders, currents)
def test_two_windows_merge_in_order(first: list[Event], then: list[Event], order: str, current: int | None) -> None:
    """Folding a window's fold into another is folding the concatenation; flushing twice holds in between."""
    merged = fold(folded(first, order), folded(then, order))
    assert merged == folded(first + then, order)
    expected = held_reference(then, order, held_reference(first, order, current))
    assert result(folded(then, order), result(folded(first, order), current)) == expected


@settings(max_examples=300)
@given(st.lists(amounts, min_size=1, max_size=30), currents)
def test_incr_fast_path_is_a_sum(deltas: list[int], current: int | None) -> None:
    assert folded([("incr", d) for d in deltas], "desc") == summed(sum(deltas))
    assert result(summed(sum(deltas)), current) == hold((current or 0) + sum(deltas))


@settings(max_examples=1000)
@given(events(st.one_of(small, st.integers(-4 * M, 4 * M))), orders, currents)
# A window's delta one past -2 MAX_EXACT on a score at +MAX_EXACT: clipped at -2 MAX_EXACT it landed exactly on the
# bound, so the hold was not counted although the exact result lies beyond it.
@example(evs=[("incr", -(2 * M + 1))], order="desc", current=M)
@example(evs=[("incr", 2 * M + 1)], order="asc", current=-M)
def test_script_args_in_doubles_equal_the_exact_result(evs: list[Event], order: str, current: int | None) -> None:
    """What Lua would compute with doubles, from script_args, is the exact held result."""
    state = folded(evs, order)
    args = ScriptArgs(*script_args(state))
    assert all(-(2 * M + 1) <= v <= 2 * M + 1 for v in args)
    assert (args.d1 >= 0 and args.d2 >= 0) or (args.d1 <= 0 and args.d2 <= 0)
    if current is None:
        lua = float(args.absent)
    else:
        lua = min(max((float(current) + float(args.d1)) + float(args.d2), float(args.lo)), float(args.hi))
    held = max(-float(M), min(float(M), lua))  # the script's hold, counted where it changes the value
    assert held == result(state, current)
    exact = state.absent if current is None else apply(state.op, current)
    assert (held != lua) == (abs(exact) > M)


@pytest.mark.parametrize(
    ("evs", "order", "current", "expected"),
    [
        ([("decr", 5)], "desc", None, 0),  # a first decr leaves 0
        ([("decr", 5)], "desc", 3, 0),
        ([("decr", 2)], "desc", 3, 1),
        ([("incr", 5)], "desc", None, 5),  # an absent player starts from 0
        ([("incr", -5)], "asc", None, -5),  # incr is not held at 0
        ([("best", 7)], "desc", 9, 9),
        ([("best", 7)], "desc", 3, 7),
        ([("best", 7)], "asc", 9, 7),  # asc keeps the lower
        ([("best", 7)], "asc", 3, 3),
        ([("best", -5)], "desc", None, -5),  # an absent player takes the score, not max(0, -5)
        ([("best", -5), ("best", -9)], "asc", None, -9),
        ([("set", 4), ("incr", 3)], "desc", 100, 7),
        ([("incr", 3), ("set", 4)], "desc", None, 4),
        ([("incr", 3), ("set", 4)], "desc", 100, 4),
        ([("set", -5), ("decr", 0)], "desc", None, 0),  # Nakama's GREATEST(score - delta, 0) lifts a negative
        ([("set", -5), ("decr", 3)], "desc", 10, 0),
        ([("decr", 0)], "desc", -5, 0),
        ([("decr", 3), ("incr", 2)], "desc", 1, 2),
        ([("set", 0), ("best", -1)], "asc", None, -1),
        ([("incr", M), ("incr", M)], "desc", M, M),  # held at the bound
        ([("incr", M), ("incr", M), ("incr", -M)], "desc", 0, M),  # exact inside a window, held at its end
        ([("set", -M), ("incr", -10)], "desc", None, -M),
    ],
)
def test_boundaries(evs: list[Event], order: str, current: int | None, expected: int) -> None:
    assert result(folded(evs, order), current) == expected
    assert held_reference(evs, order, current) == expected


def test_operators_as_clamps() -> None:
    assert op_of("incr", -3, "asc") == Op(-3)
    assert op_of("decr", 3) == Op(-3, 0)
    assert op_of("set", -4, "asc") == Op(0, -4, -4)
    assert op_of("best", 4, "desc") == Op(0, 4)
    assert op_of("best", 4, "asc") == Op(0, None, 4)
    assert compose(op_of("incr", 3), op_of("set", 9)) == Op(0, 9, 9)
    assert compose(op_of("set", 9), op_of("incr", 3)) == Op(0, 12, 12)
    assert compose(Op(5, None, 1), HOLD) == Op(5, -M, 1)
    assert compose(op_of("set", 2 * M), HOLD) == Op(0, M, M)  # lo > hi: the constant hi


@pytest.mark.parametrize(
    ("operator", "amount", "order", "message"),
    [
        ("decr", -1, "desc", "decr takes a delta >= 0"),
        ("max", 1, "desc", "unknown operator 'max'"),
        ("incr", 1, "down", "unknown order 'down'"),
    ],
)
def test_rejected(operator: str, amount: int, order: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        event(operator, amount, order)


@settings(max_examples=500)
@given(
    st.lists(st.tuples(st.sampled_from(["best", "incr", "set"]), st.integers(-50, 50)), min_size=1, max_size=8),
    st.sampled_from(["desc", "asc"]),
    st.one_of(st.none(), st.integers(-60, 60)),
)
def test_best_scores_is_the_clamp_when_it_says_so(evs: list[tuple[str, int]], order: str, current: int | None) -> None:
    from hotboard.operators import best_scores

    state = None
    for op, amount in evs:
        state = fold(state, event(op, amount, order))
    assert state is not None
    found = best_scores({"p": state}, order)
    if all(op == "best" for op, _ in evs):
        assert found is not None  # any run of bests folds to one best
    if found is not None:
        s = found["p"]
        lua = s if current is None else (max(current, s) if order == "desc" else min(current, s))
        assert lua == result(state, current)
