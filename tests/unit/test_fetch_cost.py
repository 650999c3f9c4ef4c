"""What consuming costs, counted: instructions per event of draining a fixed fetch through the Kafka client's fetcher
(and of folding it too) under callgrind (:mod:`bench.fetch_cost`). Counts, not seconds: a shared machine cannot
fool them.

The budgets are the measurement below plus 10%, as in ``test_fold_cost.py``. A change that makes consuming slower
fails; so does losing the seam of ``ingest/raw_records.py`` (a ``ConsumerRecord`` per record again costs about
three times as much to consume).
"""

from __future__ import annotations

import shutil

import pytest

from bench.fetch_cost import count_instructions

#: Instructions per event measured with ``python -m bench.fetch_cost --events 5000 --records raw [--fold]``
#: (stock ``ConsumerRecord``s: 11,734 and 17,787), + 10%.
MEASURED = {"consume": 3_964, "consume + fold": 10_174}
BUDGET = {stage: round(n * 1.10) for stage, n in MEASURED.items()}
EVENTS = 5000


@pytest.mark.parametrize("stage", sorted(BUDGET))
def test_consuming_instructions_per_event_stay_within_budget(stage: str) -> None:
    missing = [tool for tool in ("valgrind", "gcc") if shutil.which(tool) is None]
    assert not missing, f"{missing} not installed: run scripts/install-system-deps.sh"
    per_event, consumed = count_instructions("raw", EVENTS, fold=stage != "consume")
    assert consumed.startswith(f"consumed {EVENTS} as DefaultRecord in "), consumed
    assert per_event <= BUDGET[stage], (
        f"{stage} costs {per_event:,.0f} instructions per event, budget {BUDGET[stage]:,} "
        f"(measured {MEASURED[stage]:,})"
    )
