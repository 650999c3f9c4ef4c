"""Reset schedules put every event time in one period, with one id, around every boundary: month ends, leap
days, ISO week 53, Monday 00:00, midnight, cron fire times; lateness and expiry never drop a live period."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hotboard.periods import (
    Period,
    expire_at_ms,
    is_late,
    parse_reset,
    period_board,
    split_period_board,
)

RESETS = ["hourly", "daily", "weekly", "monthly", "*/15 * * * *", "0 7 * * 1", "0 0 1 */3 *", "30 2 * * mon-fri"]
HOUR = 3_600_000
DAY = 24 * HOUR


def ms(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: int = 0, milli: int = 0) -> int:
    dt = datetime(y, mo, d, h, mi, s, tzinfo=UTC)
    return int(dt.timestamp()) * 1000 + milli


def at(reset: str, *when: int) -> Period:
    return parse_reset(reset).period_of(ms(*when))


# --- parse_reset ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reset", ["never", *RESETS])
def test_parse_reset_accepts_the_documented_values(reset: str) -> None:
    schedule = parse_reset(reset)
    assert schedule.reset == reset
    assert schedule.never == (reset == "never")


def test_cron_is_canonicalised_so_equal_schedules_compare_equal() -> None:
    assert parse_reset("  */15   * * *  * ") == parse_reset("*/15 * * * *")
    assert parse_reset("*/15 * * * *").cron and not parse_reset("daily").cron


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "5-field"),
        ("yearly", "5-field"),
        ("Daily", "5-field"),
        ("@daily", "5-field"),
        ("* * * * * *", "got 6 field"),
        ("0 7 * *", "got 4 field"),
        ("61 * * * *", "not a valid cron"),
        ("0 25 * * *", "not a valid cron"),
        ("0 0 * 13 *", "not a valid cron"),
        ("x y z w v", "not a valid cron"),
        ("0 0 30 2 *", "never fires"),
        ("H * * * *", "not deterministic"),
        ("R 0 * * *", "not deterministic"),
        ("H(0-29) * * * *", "not deterministic"),
    ],
)
def test_parse_reset_refuses_anything_else_clearly(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_reset(text)


def test_day_names_are_not_mistaken_for_hashed_values() -> None:
    assert at("0 0 * * THU", 2026, 12, 1).id == "20261126T0000Z"
    assert at("0 0 1 MAR,APR *", 2026, 12, 1).id == "20260401T0000Z"


def test_never_has_no_periods_and_says_so() -> None:
    never = parse_reset("never")
    assert never.never
    period = Period("2026-12-01", 0, DAY)
    for call in (
        lambda: never.period_of(0),
        lambda: never.previous(period),
        lambda: never.next(period),
        lambda: never.parse_id("2026-12-01"),
        lambda: never.kept(0, 4),
    ):
        with pytest.raises(ValueError, match="never"):
            call()


def test_an_unknown_event_time_has_no_period() -> None:
    with pytest.raises(ValueError, match="before the epoch"):
        parse_reset("daily").period_of(-1)


# --- calendar boundaries -------------------------------------------------------------------------------------


def test_daily_month_and_year_ends() -> None:
    assert at("daily", 2026, 1, 31, 23, 59, 59, 999) == Period("2026-01-31", ms(2026, 1, 31), ms(2026, 2, 1))
    assert at("daily", 2026, 2, 1).id == "2026-02-01"
    assert at("daily", 2026, 12, 31, 12) == Period("2026-12-31", ms(2026, 12, 31), ms(2027, 1, 1))
    assert at("daily", 2027, 1, 1).id == "2027-01-01"


def test_daily_leap_day() -> None:
    daily = parse_reset("daily")
    leap = daily.period_of(ms(2024, 2, 29, 12))
    assert leap == Period("2024-02-29", ms(2024, 2, 29), ms(2024, 3, 1))
    assert daily.previous(daily.period_of(ms(2024, 3, 1))) == leap
    assert daily.next(daily.period_of(ms(2023, 2, 28))).id == "2023-03-01"
    with pytest.raises(ValueError):
        daily.parse_id("2023-02-29")
    assert daily.parse_id("2024-02-29") == leap


def test_monthly_lengths_leap_february_and_year_end() -> None:
    assert at("monthly", 2024, 2, 29, 23, 59, 59, 999) == Period("2024-02", ms(2024, 2, 1), ms(2024, 3, 1))
    assert at("monthly", 2023, 2, 15).end_ms - at("monthly", 2023, 2, 15).start_ms == 28 * DAY
    assert at("monthly", 2026, 1, 31, 23, 59, 59, 999).end_ms == ms(2026, 2, 1)
    assert at("monthly", 2026, 12, 31, 23, 59, 59, 999) == Period("2026-12", ms(2026, 12, 1), ms(2027, 1, 1))
    assert at("monthly", 2027, 1, 1).id == "2027-01"


def test_weekly_starts_monday_midnight_exactly() -> None:
    assert at("weekly", 2026, 12, 1, 7) == Period("2026-W49", ms(2026, 11, 30), ms(2026, 12, 7))
    assert at("weekly", 2026, 11, 30).id == "2026-W49"  # Monday 00:00 opens the week
    assert at("weekly", 2026, 11, 29, 23, 59, 59, 999).id == "2026-W48"  # the last ms of the week before


@pytest.mark.parametrize(
    ("year", "monday", "next_monday"),
    [(2020, (2020, 12, 28), (2021, 1, 4)), (2026, (2026, 12, 28), (2027, 1, 4)), (2015, (2015, 12, 28), (2016, 1, 4))],
)
def test_iso_week_53(year: int, monday: tuple[int, int, int], next_monday: tuple[int, int, int]) -> None:
    weekly = parse_reset("weekly")
    w53 = Period(f"{year}-W53", ms(*monday), ms(*next_monday))
    assert weekly.period_of(ms(year + 1, 1, 3, 23, 59, 59, 999)) == w53  # early January, previous ISO year
    assert weekly.period_of(ms(year, 12, 31)) == w53
    assert weekly.parse_id(f"{year}-W53") == w53
    assert weekly.next(w53).id == f"{year + 1}-W01"
    assert weekly.previous(weekly.next(w53)) == w53


def test_weekly_iso_year_differs_from_the_calendar_year() -> None:
    assert at("weekly", 2024, 12, 30).id == "2025-W01"  # Monday 2024-12-30 opens ISO 2025
    assert at("weekly", 2027, 1, 1).id == "2026-W53"
    assert parse_reset("weekly").previous(at("weekly", 2025, 1, 1)).id == "2024-W52"


def test_hourly_across_midnight_and_year_end() -> None:
    hourly = parse_reset("hourly")
    last = hourly.period_of(ms(2026, 12, 31, 23, 59, 59, 999))
    assert last == Period("2026-12-31T23", ms(2026, 12, 31, 23), ms(2027, 1, 1))
    assert hourly.next(last) == Period("2027-01-01T00", ms(2027, 1, 1), ms(2027, 1, 1, 1))
    assert hourly.parse_id("2026-12-01T07") == Period("2026-12-01T07", ms(2026, 12, 1, 7), ms(2026, 12, 1, 8))


@pytest.mark.parametrize(
    ("reset", "newest", "before"),
    [
        ("hourly", "2027-01-01T00", "2026-12-31T23"),
        ("daily", "2027-01-01", "2026-12-31"),
        ("weekly", "2027-W01", "2026-W53"),
        ("monthly", "2027-01", "2026-12"),
        ("0 7 * * 1", "20270104T0700Z", "20261228T0700Z"),
        ("*/15 * * * *", "20270101T0000Z", "20261231T2345Z"),
    ],
)
def test_previous_across_the_year_end(reset: str, newest: str, before: str) -> None:
    schedule = parse_reset(reset)
    assert schedule.previous(schedule.parse_id(newest)).id == before


# --- cron ----------------------------------------------------------------------------------------------------


def test_cron_every_quarter_hour() -> None:
    assert at("*/15 * * * *", 2026, 12, 1, 7, 14, 59, 999) == Period(
        "20261201T0700Z", ms(2026, 12, 1, 7), ms(2026, 12, 1, 7, 15)
    )
    assert at("*/15 * * * *", 2026, 12, 1, 7, 15).id == "20261201T0715Z"
    assert at("*/15 * * * *", 2026, 12, 1, 0, 0).id == "20261201T0000Z"
    assert at("*/15 * * * *", 2026, 11, 30, 23, 59, 59, 999).id == "20261130T2345Z"


def test_cron_monday_seven() -> None:
    monday = Period("20261130T0700Z", ms(2026, 11, 30, 7), ms(2026, 12, 7, 7))
    assert at("0 7 * * 1", 2026, 11, 30, 7) == monday  # a fire time opens its period
    assert at("0 7 * * 1", 2026, 12, 7, 6, 59, 59, 999) == monday  # the last ms
    assert at("0 7 * * 1", 2026, 11, 30, 6, 59, 59, 999).id == "20261123T0700Z"
    assert parse_reset("0 7 * * 1").parse_id("20261130T0700Z") == monday


@pytest.mark.parametrize("bad", ["20261201T0700Z", "20261130T0701Z", "2026-11-30", "20261130T0700", "20261332T0700Z"])
def test_cron_id_must_be_a_fire_time(bad: str) -> None:
    with pytest.raises(ValueError, match="not a period id"):
        parse_reset("0 7 * * 1").parse_id(bad)


# --- parse_id ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reset", "bad"),
    [
        ("monthly", "2026-13"),
        ("monthly", "2026-00"),
        ("monthly", "2026-1"),
        ("monthly", "2026-12-01"),
        ("daily", "2026-02-30"),
        ("daily", "2026-12-1"),
        ("daily", " 2026-12-01"),
        ("daily", "2026-12"),
        ("weekly", "2026-W54"),
        ("weekly", "2025-W53"),
        ("weekly", "2026-W00"),
        ("weekly", "2026-W5"),
        ("weekly", "2026-w49"),
        ("hourly", "2026-12-01T24"),
        ("hourly", "2026-12-01"),
        ("hourly", "20261201T0700Z"),
    ],
)
def test_parse_id_refuses_what_is_not_a_period_of_the_schedule(reset: str, bad: str) -> None:
    with pytest.raises(ValueError, match="not a period id"):
        parse_reset(reset).parse_id(bad)


TIMES = st.integers(min_value=ms(1971, 1, 1), max_value=ms(2200, 1, 1))  # periods starting after the epoch


@settings(max_examples=300)
@given(reset=st.sampled_from(RESETS), ts=TIMES)
def test_every_time_is_in_exactly_one_period_with_one_id(reset: str, ts: int) -> None:
    schedule = parse_reset(reset)
    period = schedule.period_of(ts)
    assert period.start_ms <= ts < period.end_ms
    assert schedule.parse_id(period.id) == period
    assert schedule.period_of(period.start_ms) == period == schedule.period_of(period.end_ms - 1)
    before = schedule.previous(period)
    assert before.end_ms == period.start_ms and before.id < period.id
    assert schedule.next(before) == period
    assert schedule.next(period).start_ms == period.end_ms


# --- kept, lateness, expiry ----------------------------------------------------------------------------------


def test_kept_is_the_current_period_and_the_closed_ones_newest_first() -> None:
    kept = parse_reset("weekly").kept(ms(2021, 1, 5), 3)
    assert [p.id for p in kept] == ["2021-W01", "2020-W53", "2020-W52", "2020-W51"]
    assert [p.id for p in parse_reset("daily").kept(ms(2024, 3, 1), 0)] == ["2024-03-01"]
    with pytest.raises(ValueError, match="keep"):
        parse_reset("daily").kept(0, -1)


@given(reset=st.sampled_from(RESETS), now=TIMES, keep=st.integers(min_value=0, max_value=10))
def test_kept_periods_are_contiguous(reset: str, now: int, keep: int) -> None:
    kept = parse_reset(reset).kept(now, keep)
    assert len(kept) == keep + 1 or (len(kept) < keep + 1 and kept[-1].start_ms <= 0 < kept[-1].end_ms)
    assert kept[0].start_ms <= now < kept[0].end_ms
    assert all(newer.start_ms == older.end_ms for newer, older in pairwise(kept))


def test_is_late_only_beyond_the_grace() -> None:
    period = at("daily", 2026, 12, 1)
    grace = 60_000
    assert not is_late(period, period.start_ms, grace)
    assert not is_late(period, period.end_ms, grace)  # the next period's first ms: within the grace
    assert not is_late(period, period.end_ms + grace, grace)
    assert is_late(period, period.end_ms + grace + 1, grace)
    assert is_late(period, period.end_ms + 1, 0)
    assert not is_late(period, -1, 0)  # unknown record timestamp: never late
    assert not is_late(period, -1, grace)


def test_expiry_is_the_keep_th_next_period_end_or_the_grace() -> None:
    daily = parse_reset("daily")
    period = daily.parse_id("2026-12-01")
    assert expire_at_ms(daily, period, 4, 60_000) == ms(2026, 12, 6)
    assert expire_at_ms(daily, period, 0, 60_000) == period.end_ms + 60_000
    assert expire_at_ms(daily, period, 1, 3 * DAY) == period.end_ms + 3 * DAY  # a grace longer than keep
    with pytest.raises(ValueError, match="keep"):
        expire_at_ms(daily, period, -1, 0)


@settings(max_examples=300)
@given(
    reset=st.sampled_from(RESETS),
    ts=TIMES,
    keep=st.integers(min_value=0, max_value=8),
    grace=st.integers(min_value=0, max_value=40 * DAY),
)
def test_a_period_never_expires_while_kept_or_open_to_late_events(reset: str, ts: int, keep: int, grace: int) -> None:
    schedule = parse_reset(reset)
    period = schedule.period_of(ts)
    expiry = expire_at_ms(schedule, period, keep, grace)
    assert expiry >= period.end_ms + grace
    last = period
    for _ in range(keep):
        last = schedule.next(last)
    assert expiry >= last.end_ms
    assert period not in schedule.kept(expiry, keep)
    assert period in schedule.kept(last.end_ms - 1, keep)  # still among the kept until then


# --- names and zones -----------------------------------------------------------------------------------------


def test_period_board_names() -> None:
    assert period_board("B", "2026-W49") == "B@2026-W49"
    assert split_period_board("B@2026-W49") == ("B", "2026-W49")
    assert split_period_board("s:eu.w-1@20261201T0700Z") == ("s:eu.w-1", "20261201T0700Z")
    assert split_period_board("global") == ("global", None)


@pytest.fixture
def far_local_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A local zone 14 hours from UTC: any use of it would move period boundaries."""
    monkeypatch.setenv("TZ", "Pacific/Kiritimati")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("far_local_zone")
def test_the_local_zone_is_never_used() -> None:
    assert at("daily", 2026, 12, 1, 23, 30) == Period("2026-12-01", ms(2026, 12, 1), ms(2026, 12, 2))
    assert at("0 7 * * 1", 2026, 11, 30, 7).id == "20261130T0700Z"
    assert parse_reset("hourly").parse_id("2026-12-01T07").start_ms == ms(2026, 12, 1, 7)


@pytest.mark.parametrize(
    ("reset", "keep", "last"), [("0 0 29 2 *", 500, "19680229T0000Z"), ("monthly", 1000, "1970-01")]
)
def test_kept_periods_stop_at_the_epoch(reset: str, keep: int, last: str) -> None:
    """No event time is before the epoch: a leap-day season kept 500 times walked back to year 0 (an error)."""
    kept = parse_reset(reset).kept(ms(2026, 12, 1), keep)
    assert kept[-1].id == last and kept[-1].start_ms <= 0 < kept[-1].end_ms
    assert all(newer.start_ms == older.end_ms for newer, older in pairwise(kept))
