"""The hot path's cost, counted: instructions per event under callgrind of the intake's fold on a fixed batch
(:mod:`bench.fold_cost`), and of consuming a fixed fetch through the Kafka client's fetcher, alone and with the
fold (:mod:`bench.fetch_cost`). Counts, not seconds, so a machine shared with five test suites cannot fool them:
the same code gives the same count to within a few instructions, run after run.

The budgets are the measurements below plus 10%: a count moves by about 2% when unrelated code changes the
interpreter's memory layout, while the hot path's own changes move it by far more (docs/benchmarks.md records the
figures). A change that makes it slower fails; one that makes it faster should lower the budget. Losing the seam
of ``ingest/raw_records.py`` fails the consuming budgets (a ``ConsumerRecord`` per record costs about three times
as much to consume), and so does losing the worker's collector pace (``ingest/gc_pacing.py``: +15% on consuming).
"""

from __future__ import annotations

import shutil

import pytest

from bench import fetch_cost, fold_cost

#: Instructions per event measured with ``python -m bench.fold_cost --events 5000`` (both folds decoding with
#: the typed decoder of ``ingest/plain_event.py``, at the worker's collector pace), + 10%.
MEASURED = {"incr": 6_035, "mix": 22_154}
#: Measured with ``python -m bench.fetch_cost --events 5000 --records raw [--fold]`` at the worker's collector pace
#: (``ingest/gc_pacing.py``; at the interpreter's pace 3,964 and 10,174; with stock ``ConsumerRecord``s 10,212 and
#: 16,288).
MEASURED_CONSUMING = {"consume": 3_455, "consume + fold": 9_664}
EVENTS = 5000


def within_budget(what: str, per_event: float, measured: int) -> None:
    budget = round(measured * 1.10)
    assert per_event <= budget, (
        f"{what} costs {per_event:,.0f} instructions per event, budget {budget:,} (measured {measured:,})"
    )


@pytest.fixture(autouse=True)
def _callgrind() -> None:
    missing = [tool for tool in ("valgrind", "gcc") if shutil.which(tool) is None]
    assert not missing, f"{missing} not installed: run scripts/install-system-deps.sh"


@pytest.mark.parametrize("case", sorted(MEASURED))
def test_fold_instructions_per_event_stay_within_budget(case: str) -> None:
    per_event, folded = fold_cost.count_instructions(case, EVENTS)
    assert folded > EVENTS, "the measured batches were not folded"
    within_budget(f"the {case} fold", per_event, MEASURED[case])


@pytest.mark.parametrize("stage", sorted(MEASURED_CONSUMING))
def test_consuming_instructions_per_event_stay_within_budget(stage: str) -> None:
    per_event, consumed = fetch_cost.count_instructions("raw", EVENTS, fold=stage != "consume")
    assert consumed.startswith(f"consumed {EVENTS} as DefaultRecord in "), consumed
    within_budget(stage, per_event, MEASURED_CONSUMING[stage])
