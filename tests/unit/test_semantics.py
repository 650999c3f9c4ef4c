"""Any mix of operators, split into windows and partitions at random points, folds into batches whose single
application equals applying the events one by one (hypothesis, against tests/semantics.reference)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from hotboard.boards import OPERATORS, ORDERS, TIES, BoardDef
from tests.semantics import emulate, fold_windows, random_events, reference

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
