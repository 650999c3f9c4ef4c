"""Where retention cut the log, a rebuild from it would lose events: the pure decision, as a table."""

from __future__ import annotations

import pytest

from archive.rebuild import log_cut


@pytest.mark.parametrize(
    ("firsts", "checkpoints", "why"),
    [
        ({0: 0, 1: 0}, {}, None),
        ({0: 0, 1: 0}, {0: 41, 1: -1}, None),
        ({0: 0, 1: 7}, {}, "partition 1 starts at offset 7: retention deleted offsets 0..6"),
        ({0: 7}, {0: 6}, "partition 0 starts at offset 7: retention deleted offsets 0..6"),
        ({0: 7}, {0: 3}, "partition 0: its checkpoint 3 lies below the log start 7"),
        ({0: 0, 1: 9}, {0: 50, 1: 2}, "partition 1: its checkpoint 2 lies below the log start 9"),
    ],
)
def test_a_log_that_no_longer_starts_at_zero_is_named(
    firsts: dict[int, int], checkpoints: dict[int, int], why: str | None
) -> None:
    assert log_cut(firsts, checkpoints) == why
