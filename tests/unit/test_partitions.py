"""Where a partition resumes, and when it must halt instead; who paused a partition and when it resumes."""

from __future__ import annotations

import pytest

from ingest.partitions import Halt, HaltReason, Seek, position
from ingest.pausing import PauseReason, Pauses


@pytest.mark.parametrize(
    ("checkpoint", "committed", "log_start", "expected"),
    [
        (41, 99, 0, Seek(42)),  # after the checkpoint, never at the committed offset
        (41, None, 10, Seek(42)),
        (None, None, 0, Seek(0)),  # nothing anywhere: the beginning
        (None, 99, 0, Seek(0)),  # Redis emptied but the log is whole: replaying it makes the boards exact
        (None, None, 500, Seek(500)),  # a group new to a trimmed topic: what the log keeps
        (None, 99, 500, HaltReason.REDIS_LOST),  # Redis lost it and so did Kafka: halt
        (41, 99, 500, HaltReason.RETENTION_LOST),  # retention deleted 42..499 before they were applied
        (499, 99, 500, Seek(500)),
    ],
)
def test_position(checkpoint: int | None, committed: int | None, log_start: int, expected: object) -> None:
    got = position(checkpoint, committed, log_start)
    if isinstance(expected, HaltReason):
        assert isinstance(got, Halt) and got.reason is expected
        assert got.lost == (log_start - checkpoint - 1 if checkpoint is not None else 0)
    else:
        assert got == expected


def test_a_partition_resumes_only_when_no_reason_is_left() -> None:
    pauses = Pauses()
    assert pauses.pause([0, 1], PauseReason.POSITIONING) == [0, 1]
    assert pauses.pause([1, 2], PauseReason.BACKPRESSURE) == [2]  # 1 was paused already
    # the resync-while-backpressured bug: releasing one reason must not resume a partition held by another
    assert pauses.release([0, 1], PauseReason.POSITIONING) == [0]
    assert pauses.reasons(1) == {PauseReason.BACKPRESSURE}
    assert pauses.release([1, 2], PauseReason.BACKPRESSURE) == [1, 2]
    assert pauses.release([1], PauseReason.BACKPRESSURE) == []  # not paused for it: nothing to resume
    pauses.pause([3], PauseReason.HALTED)
    pauses.forget([3])
    assert pauses.paused_for(PauseReason.HALTED) == []


def test_idle_boards_are_forgotten_the_busy_and_the_pending_kept() -> None:
    from hotboard.boards import BoardDef
    from ingest.partitions import PartitionState

    state = PartitionState(0)
    state.positioned(checkpoint=100, resume=101)
    state.learned({"idle": 40, "ahead": 150, "looked-up": -1})
    for board in ("idle", "ahead", "looked-up"):
        state.clear.add(board)
        state.fast[board] = BoardDef()
    assert state.forget_idle(pending=set()) == 0  # every one was seen since the last call
    state.applied("busy", 100)
    assert state.forget_idle(pending={"looked-up"}) == 1  # idle goes; looked-up is in a pending window
    assert set(state.watermarks) == {"ahead", "looked-up", "busy"}  # ahead: its watermark still skips records
    assert "idle" not in state.clear and "idle" not in state.fast
    state.checkpoint_moved(200)
    assert state.forget_idle(pending=set()) == 3  # nothing seen since: all idle, all below the checkpoint
    assert state.watermarks == {} and state.clear == set() and state.fast == {}
