"""The update-then-rank check of ``bench.writes``: the reference board, and that a wrong answer is caught."""

from __future__ import annotations

from typing import Any

import pytest

from bench.writes import Reference, mismatch


def test_the_reference_is_the_board_right_after_each_write() -> None:
    board = Reference()
    assert board.add("a", 1) == {"score": 1, "rank": 1, "total": 1, "exact": True}
    assert board.add("b", 1) == {"score": 1, "rank": 1, "total": 2, "exact": True}  # shared ties
    assert board.add("a", 1) == {"score": 2, "rank": 1, "total": 2, "exact": True}
    assert board.add("c", 1) == {"score": 1, "rank": 2, "total": 3, "exact": True}


RIGHT: dict[str, Any] = {"score": 2, "rank": 1, "total": 2, "exact": True, "version": 3, "as_of": 1, "token": "0.1"}


def test_the_exact_answer_passes() -> None:
    assert mismatch({"score": 2, "rank": 1, "total": 2, "exact": True}, 200, RIGHT) is None


@pytest.mark.parametrize(
    ("status", "wrong", "said"),
    [
        (200, {"exact": False}, "exact False (want True)"),  # right values, flagged as a later state
        (200, {"score": 3, "version": 4}, "score 3 (want 2); version 4"),  # a later window's score
        (200, {"rank": 2}, "rank 2 (want 1)"),  # the rank from another snapshot than the score
        (200, {"total": 1}, "total 1 (want 2)"),  # older than the write's window
        (202, {"wait": "timeout"}, "status 202"),
    ],
)
def test_a_wrong_answer_is_a_mismatch_saying_what(status: int, wrong: dict[str, Any], said: str) -> None:
    why = mismatch({"score": 2, "rank": 1, "total": 2, "exact": True}, status, {**RIGHT, **wrong})
    assert why is not None and said in why
