"""Reset schedules (seasons): which period an event time falls in, and the period ids in key names.

Pure and clock-free: callers pass every timestamp (integer ms since the epoch, UTC), so a replay months later
puts each event in the same period and decides lateness exactly as the first pass did. Calendar arithmetic is
done with ``datetime`` in UTC only; cron expressions are parsed and iterated by croniter, never by hand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Final

from croniter import CroniterError, croniter

CALENDAR: Final = ("hourly", "daily", "weekly", "monthly")
NEVER: Final = "never"
SEPARATOR: Final = "@"

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MS: Final = timedelta(milliseconds=1)
_MINUTE_MS: Final = 60_000
#: Calendar id formats: strict, zero-padded, so one period has exactly one id.
_ID_RE: Final = {
    "hourly": re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2})"),
    "daily": re.compile(r"(\d{4})-(\d{2})-(\d{2})"),
    "weekly": re.compile(r"(\d{4})-W(\d{2})"),
    "monthly": re.compile(r"(\d{4})-(\d{2})"),
}
_CRON_ID_RE: Final = re.compile(r"(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})Z")


@dataclass(frozen=True, slots=True)
class Period:
    """One period of a schedule: ``[start_ms, end_ms)`` in ms since the epoch, UTC."""

    id: str
    start_ms: int
    end_ms: int


def _dt(ms: int) -> datetime:
    return _EPOCH + ms * _MS  # exact in integer ms, and never the local zone (unlike fromtimestamp)


def _ms(dt: datetime) -> int:
    return (dt - _EPOCH) // _MS


@dataclass(frozen=True, slots=True)
class Schedule:
    """A parsed ``reset`` value; build it with :func:`parse_reset`. ``never`` boards have no periods."""

    reset: str  # canonical text: one of CALENDAR, NEVER, or the cron expression with single spaces

    @property
    def never(self) -> bool:
        return self.reset == NEVER

    @property
    def cron(self) -> bool:
        return self.reset not in CALENDAR and not self.never

    def period_of(self, ts_ms: int) -> Period:
        """The period holding event time ``ts_ms`` (start <= ts < end)."""
        self._require_periods()
        if ts_ms < 0:  # an unknown Kafka timestamp (-1) must not land silently in 1969-12-31
            raise ValueError(f"event time {ts_ms} ms is before the epoch (unknown?): it has no period")
        return self._period_of(ts_ms)

    def _period_of(self, ts_ms: int) -> Period:
        if self.cron:
            return self._cron_period(ts_ms)
        start = self._floor(_dt(ts_ms))
        return Period(self._calendar_id(start), _ms(start), _ms(self._after(start)))

    def previous(self, period: Period) -> Period:
        """The period just before ``period``."""
        self._require_periods()
        return self._period_of(period.start_ms - 1)

    def next(self, period: Period) -> Period:
        """The period just after ``period``."""
        self._require_periods()
        return self._period_of(period.end_ms)

    def parse_id(self, period_id: str) -> Period:
        """The period named ``period_id``; ValueError when it names no period of this schedule (a cron time
        that is not a fire time, ``2026-W54``, ``2026-13``, a non-canonical spelling)."""
        self._require_periods()
        try:
            start = self._id_start(period_id)
            period = self._period_of(_ms(start))
        except (ValueError, OverflowError) as exc:
            raise ValueError(f"{period_id!r} is not a period id of schedule {self.reset!r}: {exc}") from None
        if period.id != period_id:
            raise ValueError(
                f"{period_id!r} is not a period id of schedule {self.reset!r} (did you mean {period.id!r}?)"
            )
        return period

    def kept(self, now_ms: int, keep: int) -> list[Period]:
        """The current period at ``now_ms`` and the ``keep`` closed ones before it, newest first; fewer when
        the epoch comes first (no event time is before it: a leap-day season kept 500 times went to year 0).
        Memoised per current period: ``keep`` may be 1,000 and the API asks on every request."""
        if keep < 0:
            raise ValueError(f"keep must be >= 0, got {keep}")
        return list(_kept(self, self.period_of(now_ms), keep))

    def _require_periods(self) -> None:
        if self.never:
            raise ValueError("schedule 'never' has no periods: check Schedule.never first")

    def _floor(self, dt: datetime) -> datetime:
        if self.reset == "hourly":
            return dt.replace(minute=0, second=0, microsecond=0)
        day = dt.replace(hour=0, minute=0, second=0, microsecond=0)
        if self.reset == "daily":
            return day
        if self.reset == "weekly":
            return day - timedelta(days=day.weekday())  # ISO weeks start on Monday
        return day.replace(day=1)

    def _after(self, start: datetime) -> datetime:
        if self.reset == "hourly":
            return start + timedelta(hours=1)
        if self.reset == "daily":
            return start + timedelta(days=1)
        if self.reset == "weekly":
            return start + timedelta(weeks=1)
        return start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)

    def _calendar_id(self, start: datetime) -> str:
        if self.reset == "hourly":
            return start.strftime("%Y-%m-%dT%H")
        if self.reset == "daily":
            return start.strftime("%Y-%m-%d")
        if self.reset == "weekly":
            iso = start.isocalendar()
            return f"{iso.year:04d}-W{iso.week:02d}"
        return start.strftime("%Y-%m")

    def _id_start(self, period_id: str) -> datetime:
        """The start an id names, before checking it is a period start (ValueError for a malformed id)."""
        if self.cron:
            m = _CRON_ID_RE.fullmatch(period_id)
            if not m:
                raise ValueError("expected YYYYMMDDTHHMMZ")
            y, mo, d, h, mi = map(int, m.groups())
            return datetime(y, mo, d, h, mi, tzinfo=UTC)
        m = _ID_RE[self.reset].fullmatch(period_id)
        if not m:
            raise ValueError(f"malformed {self.reset} id")
        parts = list(map(int, m.groups()))
        if self.reset == "weekly":
            return datetime.combine(datetime.fromisocalendar(parts[0], parts[1], 1), datetime.min.time(), UTC)
        if self.reset == "monthly":
            return datetime(parts[0], parts[1], 1, tzinfo=UTC)
        if self.reset == "hourly":
            y, mo, d, h = parts
            return datetime(y, mo, d, h, tzinfo=UTC)
        y, mo, d = parts
        return datetime(y, mo, d, tzinfo=UTC)

    def _cron_period(self, ts_ms: int) -> Period:
        return _cron_period(self.reset, ts_ms // _MINUTE_MS * _MINUTE_MS)


@lru_cache(maxsize=4096)
def _cron_period(expr: str, minute_ms: int) -> Period:
    """Memoised per (expression, minute), bounded: croniter costs ~0.3 ms a call, and a worker asks once per event.
    Fire times are whole minutes, so the latest fire <= ts is the latest fire before the next minute (croniter's
    get_prev and get_next are strict)."""
    it = croniter(expr, _dt(minute_ms + _MINUTE_MS))
    start = it.get_prev(datetime)
    end = it.get_next(datetime)
    return Period(start.strftime("%Y%m%dT%H%MZ"), _ms(start), _ms(end))


@lru_cache(maxsize=128)  # one per (schedule, current period, keep), shared by boards: ~130 KB at keep = 1000
def _kept(schedule: Schedule, current: Period, keep: int) -> tuple[Period, ...]:
    periods = [current]
    if schedule.cron:  # one croniter walking back: a new one per step costs 4x (0.4 ms a step)
        it = croniter(schedule.reset, _dt(current.start_ms))
        while len(periods) <= keep and periods[-1].start_ms > 0:
            start = it.get_prev(datetime)
            periods.append(Period(start.strftime("%Y%m%dT%H%MZ"), _ms(start), periods[-1].start_ms))
        return tuple(periods)
    while len(periods) <= keep and periods[-1].start_ms > 0:  # a period starting at or before 0 holds the epoch
        periods.append(schedule.previous(periods[-1]))
    return tuple(periods)


def parse_reset(text: str) -> Schedule:
    """Validate a board's ``reset``: never, hourly, daily, weekly, monthly, or a 5-field cron expression (UTC)."""
    value = text.strip()
    if value in (NEVER, *CALENDAR):
        return Schedule(value)
    fields = value.split()
    if len(fields) != 5:
        raise ValueError(
            f"reset {text!r}: expected never, hourly, daily, weekly, monthly or a 5-field cron expression "
            f"(minute hour day-of-month month day-of-week, UTC); got {len(fields)} field(s)"
        )
    if re.search(r"(?<![A-Za-z])[RrHh](?![A-Za-z])", value):  # R, H(0-29), not THU: random and hashed values
        # would put one event in different periods in different processes
        raise ValueError(f"reset {text!r}: random (R) and hashed (H) cron values are not deterministic")
    expr = " ".join(fields)
    try:
        croniter(expr, _EPOCH).get_next(datetime)  # parses, and proves it ever fires (not e.g. Feb 30)
    except CroniterError as exc:
        raise ValueError(f"reset {text!r}: not a valid cron expression, or it never fires: {exc}") from None
    return Schedule(expr)


def is_late(period: Period, record_ts_ms: int, grace_ms: int) -> bool:
    """A record is late (dead-lettered ``period_closed``) when its Kafka timestamp is past the period's end
    plus the grace; decided from the record alone, so a replay decides the same. ``< 0`` means unknown: never late."""
    return record_ts_ms >= 0 and record_ts_ms > period.end_ms + grace_ms


def expire_at_ms(schedule: Schedule, period: Period, keep: int, grace_ms: int) -> int:
    """When a period's keys may expire: once it is no longer among the ``keep`` closed periods kept (the end
    of the ``keep``-th period after it) and no longer receives late events (its end plus the grace)."""
    if keep < 0:
        raise ValueError(f"keep must be >= 0, got {keep}")
    last = period
    for _ in range(keep):
        last = schedule.next(last)
    return max(last.end_ms, period.end_ms + grace_ms)


def period_board(board: str, period_id: str) -> str:
    """The name of a board's period, as used in key hash tags: ``B@2026-W49``."""
    return f"{board}{SEPARATOR}{period_id}"


def split_period_board(name: str) -> tuple[str, str | None]:
    """``B@2026-W49`` -> (``B``, ``2026-W49``); a name without a period -> (name, None)."""
    board, sep, period_id = name.rpartition(SEPARATOR)
    return (board, period_id) if sep else (name, None)
