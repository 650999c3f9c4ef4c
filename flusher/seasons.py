"""What a flush script needs to know of a period board: seed its definition copy, and when its keys expire."""

from __future__ import annotations

from functools import lru_cache

from hotboard.boards import BoardDef
from hotboard.periods import expire_at_ms, split_period_board

__all__ = ["expire_at_ms", "period_expiry", "season_args"]


def season_args(board: str, definition: BoardDef) -> tuple[int, int]:
    """(seed the period's definition copy, expire at ms) of a batch: (0, 0) unless ``board`` is a period."""
    _, period_id = split_period_board(board)
    if period_id is None or not definition.seasonal:
        return 0, 0
    return 1, period_expiry(period_id, definition)


@lru_cache(maxsize=4096)
def period_expiry(period_id: str, definition: BoardDef) -> int:
    """When a period's keys expire: one answer per period and definition, whatever the number of boards."""
    schedule = definition.schedule
    return expire_at_ms(schedule, schedule.parse_id(period_id), definition.keep, definition.grace_ms)
