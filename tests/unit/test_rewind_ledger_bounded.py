"""The ledger's last windows stay bounded by forget_idle across positionings: a board idle since a positioning (never
looked up again, so no watermark kept) leaves it as it would have without the positioning."""

from __future__ import annotations

from tests.unit.test_rewind import _Rig


async def test_a_board_idle_since_a_positioning_leaves_the_ledger() -> None:
    """b gets one window, then the partition resynchronises (any cause) and b never gets another event (last
    week's period board). forget_idle must drop b's last window as it would have without the resync."""
    rig = _Rig()
    await rig.applied_past_the_checkpoint()  # b at 120, checkpoint 130
    assert await rig.resync() == 131  # b whole: nothing to rewind, its last window kept
    for _ in range(5):  # many idle periods
        rig.state.forget_idle(pending=set())
    assert len(rig.state.ledger) == 0, f"ledger still holds {rig.state.ledger.entries()}"


async def test_without_a_resync_the_same_board_leaves() -> None:
    rig = _Rig()
    await rig.applied_past_the_checkpoint()
    for _ in range(5):
        rig.state.forget_idle(pending=set())
    assert len(rig.state.ledger) == 0
