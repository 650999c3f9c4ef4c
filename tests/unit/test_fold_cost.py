"""The fold's cost, counted: instructions per event of the intake's fold on a fixed batch under callgrind
(:mod:`bench.fold_cost`). Counts, not seconds, so a machine shared with five test suites cannot fool it: the
same code gives the same count to within a few instructions, run after run.

The budgets are the measurement below plus 10%: the count moves by about 2% when unrelated code changes the
interpreter's memory layout, while the fold's own changes move it by far more (docs/benchmarks.md records the
figures). A change that makes the fold slower fails; one that makes it faster should lower the budget.
"""

from __future__ import annotations

import shutil

import pytest

from bench.fold_cost import count_instructions

#: Instructions per event measured with ``python -m bench.fold_cost --events 5000`` (both folds decoding with
#: the typed decoder of ``ingest/plain_event.py``), + 10%.
MEASURED = {"incr": 6_051, "mix": 22_511}
BUDGET = {case: round(n * 1.10) for case, n in MEASURED.items()}
EVENTS = 5000


@pytest.mark.parametrize("case", sorted(BUDGET))
def test_fold_instructions_per_event_stay_within_budget(case: str) -> None:
    missing = [tool for tool in ("valgrind", "gcc") if shutil.which(tool) is None]
    assert not missing, f"{missing} not installed: run scripts/install-system-deps.sh"
    per_event, folded = count_instructions(case, EVENTS)
    assert folded > EVENTS, "the measured batches were not folded"
    assert per_event <= BUDGET[case], (
        f"the {case} fold costs {per_event:,.0f} instructions per event, budget {BUDGET[case]:,} "
        f"(measured {MEASURED[case]:,})"
    )
