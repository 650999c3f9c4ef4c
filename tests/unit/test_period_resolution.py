"""``?period=`` resolution (reader_api.seasons.resolve): board definition + parameter + the API's clock -> the
period board to read, or the error. Pure: the clock is a plain argument, pinned around calendar boundaries."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hotboard.boards import DEFAULT, BoardDef
from hotboard.periods import Period, Schedule
from reader_api.errors import ApiError
from reader_api.seasons import NotKept, Target, resolve


def ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    return int(datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()) * 1000


WEEKLY = BoardDef(reset="weekly", keep=2)
DAILY = BoardDef(reset="daily", keep=3)
MONTHLY = BoardDef(reset="monthly", keep=1)


def name(definition: BoardDef, period: str | None, now_ms: int) -> str:
    return resolve("race", definition, period, now_ms).name


@pytest.mark.parametrize(
    ("definition", "period", "now", "expected"),
    [
        # month end: the last ms of January is January; the next ms is February, and January its previous
        (MONTHLY, None, ms(2026, 1, 31, 23, 59, 59) + 999, "race@2026-01"),
        (MONTHLY, "current", ms(2026, 2, 1), "race@2026-02"),
        (MONTHLY, "previous", ms(2026, 2, 1), "race@2026-01"),
        # ISO week 53 of 2026 runs from Monday 2026-12-28 to Sunday 2027-01-03
        (WEEKLY, None, ms(2026, 12, 31, 12), "race@2026-W53"),
        (WEEKLY, None, ms(2027, 1, 3, 23, 59), "race@2026-W53"),
        (WEEKLY, None, ms(2027, 1, 4), "race@2027-W01"),
        (WEEKLY, "previous", ms(2027, 1, 4), "race@2026-W53"),
        (WEEKLY, "2026-W52", ms(2027, 1, 4), "race@2026-W52"),
        # leap day
        (DAILY, None, ms(2028, 2, 29, 12), "race@2028-02-29"),
        (DAILY, "previous", ms(2028, 2, 29, 12), "race@2028-02-28"),
        (DAILY, "previous", ms(2028, 3, 1), "race@2028-02-29"),
        (DAILY, "2028-02-29", ms(2028, 3, 2), "race@2028-02-29"),
        # previous across a year end
        (DAILY, "previous", ms(2027, 1, 1), "race@2026-12-31"),
        (MONTHLY, "previous", ms(2027, 1, 15), "race@2026-12"),
        (BoardDef(reset="0 7 * * *", keep=1), "previous", ms(2027, 1, 1, 8), "race@20261231T0700Z"),
    ],
)
def test_period_resolves_to_its_period_board(definition: BoardDef, period: str | None, now: int, expected: str) -> None:
    assert name(definition, period, now) == expected


def test_target_carries_the_period_and_the_kept_ones_newest_first() -> None:
    target = resolve("race", WEEKLY, None, ms(2027, 1, 4))
    assert target.board == "race" and target.period is not None and target.period.id == "2027-W01"
    assert [p.id for p in target.kept] == ["2027-W01", "2026-W53", "2026-W52"]
    assert target.period.start_ms == ms(2027, 1, 4) and target.period.end_ms == ms(2027, 1, 11)


@pytest.mark.parametrize(
    ("definition", "period", "now"),
    [
        (WEEKLY, "2026-W51", ms(2027, 1, 4)),  # one beyond keep=2
        (WEEKLY, "2027-W02", ms(2027, 1, 4)),  # not started (a future period)
        (BoardDef(reset="daily", keep=0), "previous", ms(2027, 1, 1)),  # keep 0: only the current one
        (MONTHLY, "2026-11", ms(2027, 1, 1)),
    ],
)
def test_a_period_outside_the_kept_ones_is_not_kept(definition: BoardDef, period: str, now: int) -> None:
    with pytest.raises(NotKept) as caught:
        resolve("race", definition, period, now)
    assert caught.value.board == "race"
    assert caught.value.kept == tuple(definition.schedule.kept(now, definition.keep))


@pytest.mark.parametrize(
    ("definition", "period"),
    [
        (WEEKLY, "2026-W54"),
        (WEEKLY, "2025-W53"),
        (WEEKLY, "2026-w49"),
        (DAILY, "2027-02-29"),
        (DAILY, "2026-1-01"),
        (MONTHLY, "2026-13"),
        (MONTHLY, "latest"),
        (BoardDef(reset="0 7 * * *"), "20261231T0800Z"),
    ],
)
def test_a_malformed_period_id_is_invalid(definition: BoardDef, period: str) -> None:
    with pytest.raises(ApiError) as caught:
        resolve("race", definition, period, ms(2027, 1, 4))
    assert (caught.value.status, caught.value.code, caught.value.parameter) == (422, "invalid_parameter", "period")


def test_a_board_that_never_resets_is_itself_and_refuses_other_periods() -> None:
    now = ms(2027, 1, 4)
    assert resolve("plain", DEFAULT, None, now) == Target("plain", "plain")
    assert resolve("plain", DEFAULT, "current", now) == Target("plain", "plain")
    for period in ("previous", "2026-W53"):
        with pytest.raises(ApiError) as caught:
            resolve("plain", DEFAULT, period, now)
        assert caught.value.status == 422 and "never resets" in caught.value.message


@pytest.mark.parametrize("reset", ["hourly", "daily", "weekly", "monthly", "0 7 * * 1-5"])
@pytest.mark.parametrize("now", [ms(2026, 12, 31, 23, 59), ms(2027, 1, 4), ms(2028, 2, 29, 6), ms(2028, 3, 1)])
def test_kept_walk_agrees_with_the_kept_list(reset: str, now: int) -> None:
    """resolve walks back only as far as the period asked; it must accept exactly Schedule.kept's periods."""
    for keep in range(4):
        definition = BoardDef(reset=reset, keep=keep)
        schedule = definition.schedule
        kept = schedule.kept(now, keep)
        candidates = [schedule.next(kept[0]), *schedule.kept(now, keep + 3)]
        for p in candidates:
            try:
                accepted = resolve("b", definition, p.id, now).period == p
            except NotKept:
                accepted = False
            assert accepted == (p in kept), (reset, keep, p.id)


def test_a_far_past_period_is_resolved_without_walking_the_kept_ones_each_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``?period=`` of the oldest kept period walked back ``keep`` periods on every request (~19 ms)."""
    definition = BoardDef(reset="daily", keep=1000)
    now = int(datetime(2026, 12, 2, 12, tzinfo=UTC).timestamp()) * 1000
    oldest = definition.schedule.kept(now, definition.keep)[-1].id
    steps = [0]
    previous = Schedule.previous

    def counted(self: Schedule, period: Period) -> Period:
        steps[0] += 1
        return previous(self, period)

    monkeypatch.setattr(Schedule, "previous", counted)
    for _ in range(3):
        assert resolve("g", definition, oldest, now).period == definition.schedule.parse_id(oldest)
    assert steps[0] <= 1, f"{steps[0]} steps back for three requests"
