"""Any mix of operators, split into windows and partitions at random points, folds into batches whose single
application equals applying the events one by one (hypothesis, against tests/semantics.reference)."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from flusher.batch import BoardBatch
from hotboard import operators
from hotboard.boards import OPERATORS, ORDERS, TIES, BoardDef
from hotboard.keys import MAX_EXACT
from tests.semantics import Ev, emulate, fold_windows, one_event, random_events, reference

DEFS = st.builds(BoardDef, st.sampled_from(ORDERS), st.sampled_from(OPERATORS), st.sampled_from(TIES))
#: Tie times are the subtle part: earliest boards get a run of their own.
EARLIEST = st.builds(BoardDef, st.sampled_from(ORDERS), st.sampled_from(OPERATORS), st.just("earliest"))
CASE = (st.integers(0, 2**32), st.integers(0, 80), st.integers(1, 3), st.integers(1, 6), st.booleans())


@settings(max_examples=1500, deadline=None)
@given(DEFS, *CASE)
def test_windows_fold_to_the_sequential_result(
    definition: BoardDef, seed: int, count: int, partitions: int, max_players: int, mixed: bool
) -> None:
    rng = random.Random(seed)
    events = random_events(rng, definition, count, players=rng.randint(1, 8), mixed=mixed)
    cuts = rng.sample(range(count + 1), k=min(count + 1, rng.randint(0, 5)))
    windows = fold_windows("b", definition, events, cuts, partitions, max_players)
    expected, metas = reference(events, definition)
    got, got_metas = emulate(windows)
    assert {p: v for p, (v, _) in got.items()} == {p: v for p, (v, _) in expected.items()}
    if definition.earliest:
        assert got == expected  # tie times too
    assert got_metas == metas
    for batches in windows:
        assert all(b.definition == definition for b in batches)
        assert all(b.players <= max_players for b in batches if len(b.offsets) > 1)


@settings(max_examples=3000, deadline=None)
@given(EARLIEST, *CASE)
def test_earliest_tie_times_survive_any_split(
    definition: BoardDef, seed: int, count: int, partitions: int, max_players: int, mixed: bool
) -> None:
    test_windows_fold_to_the_sequential_result.hypothesis.inner_test(  # type: ignore[attr-defined]
        definition, seed, count, partitions, max_players, mixed
    )


def test_a_window_delta_past_minus_2_53_on_a_positive_score_is_carried_not_held() -> None:
    """The case a seed of the big-amount suite found: a score of 8, then a window whose incr events sum to
    -2^53, one past the exact range although the total (8 - 2^53) is inside it. Holding the window's delta at
    -(2^53 - 1) before adding it left the total one too high."""
    definition = BoardDef("desc", "incr", "shared")
    events = [Ev("p", "set", 8, 1_000), Ev("p", None, -MAX_EXACT, 1_001), Ev("p", None, -1, 1_002)]
    windows = fold_windows("b", definition, events, [1], partitions=1, max_players=10)
    expected, _ = reference(events, definition)
    assert expected == {"p": (8 - MAX_EXACT - 1, 1_002)}
    got, _ = emulate(windows)
    assert got["p"][0] == 8 - MAX_EXACT - 1


M = MAX_EXACT
#: Amounts that reach, cross and sit next to the exact range from one or two events (and small ones, which land
#: exactly on it or one short): every one is an amount the codec accepts.
NEAR = st.sampled_from([0, 1, 2, 3, 8, 2**52, 2**52 + 1, M - 8, M - 2, M - 1, M])
OPS = st.sampled_from(["incr", "decr", "set", "best", None])


@st.composite
def _near_bounds(draw: st.DrawFn) -> list[Ev]:
    out: list[Ev] = []
    for i in range(draw(st.integers(1, 8))):
        op, amount = draw(OPS), draw(NEAR)
        if op != "decr" and draw(st.booleans()):
            amount = -amount
        out.append(Ev(f"p{draw(st.integers(0, 2))}", op, abs(amount) if op is None else amount, 1_000 + i))
    return out


def _hold(x: float) -> float:
    return max(-float(M), min(float(M), x))


def _held_reference(events: list[Ev], definition: BoardDef, cuts: list[int]) -> dict[str, int]:
    """Events one by one in exact integers, each player's total held at +-MAX_EXACT when a window is applied (at
    each cut), or after every event on ``earliest`` boards (operators and earliest docstrings)."""
    scores: dict[str, int] = {}
    desc = definition.order == "desc"
    bounds = [0, *sorted(cuts), len(events)]
    for start, end in itertools.pairwise(bounds):
        touched: set[str] = set()
        for e in events[start:end]:
            new = one_event(e.op or definition.operator, e.amount, scores.get(e.player), desc)
            scores[e.player] = int(_hold(new)) if definition.earliest else new
            touched.add(e.player)
        for player in touched:
            scores[player] = max(-M, min(M, scores[player]))
    return scores


def _in_doubles(windows: list[list[BoardBatch]]) -> dict[str, int]:
    """What the flush scripts compute, in doubles as Lua and ZINCRBY do, from exactly the numbers sent (each
    converted to the nearest double, as tonumber and Redis's parser do)."""
    scores: dict[str, float] = {}
    for batches in windows:
        for batch in batches:
            desc = batch.definition.order == "desc"
            for player, delta in batch.deltas.items():
                assert -M <= delta <= M  # a plain delta is exact as a double
                scores[player] = _hold(scores.get(player, 0.0) + float(delta))
            states = batch.states or {}
            best = operators.best_scores(states, batch.definition.order) if states else None
            for player, state in states.items():
                old = scores.get(player)
                if best is not None:
                    new = float(best[player])
                    if old is not None and ((desc and old > new) or (not desc and old < new)):
                        new = old
                    scores[player] = _hold(new)
                    continue
                d1, d2, lo, hi, absent = map(float, operators.script_args(state))
                scores[player] = _hold(float(absent) if old is None else min(max((old + d1) + d2, lo), hi))
            for player, steps in (batch.steps or {}).items():
                v = scores.get(player)
                for op, amount, _ in steps:
                    a = float(amount)
                    if op == "incr":
                        v = _hold((v or 0.0) + a)
                    elif op == "decr":
                        v = max((v or 0.0) - a, 0.0)
                    elif op == "best" and v is not None:
                        v = a if (desc and a > v) or (not desc and a < v) else v
                    else:
                        v = a
                assert v is not None
                scores[player] = v
    assert all(v.is_integer() for v in scores.values())
    return {p: int(v) for p, v in scores.items()}


@settings(max_examples=1500, deadline=None)
@given(DEFS, _near_bounds(), st.data())
def test_windows_near_both_bounds_equal_the_events_one_by_one(
    definition: BoardDef, events: list[Ev], data: st.DataObject
) -> None:
    """Every operator (best on an asc board keeps the worst), near +-(2^53 - 1), split into windows and
    partitions anywhere: the fold, the batches and the scripts' double arithmetic equal the exact events one by
    one, held where a window is applied."""
    cuts = data.draw(st.lists(st.integers(0, len(events)), max_size=3, unique=True))
    partitions, max_players = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    windows = fold_windows("b", definition, events, cuts, partitions, max_players)
    assert _in_doubles(windows) == _held_reference(events, definition, cuts), (definition.spec, events, cuts)
