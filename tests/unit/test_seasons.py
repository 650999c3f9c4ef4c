"""Routing events of seasonal boards to their period, decided from the record alone (injected times only)."""

from __future__ import annotations

import pytest

from flusher.batch import PeriodTarget
from hotboard.boards import DEFAULT, BoardDef
from hotboard.codec import Decoder, InvalidEvent, decode_all
from hotboard.periods import expire_at_ms
from ingest.pending import Window
from ingest.seasons import route
from tests.records import record, utc_ms


def _one(definition: BoardDef, ts: int | None, written: int | None) -> str:
    """The period board an event goes to, or the dead-letter reason."""
    body = b'{"board": "b", "player": "p", "delta": 1' + (b', "ts": %d}' % ts if ts is not None else b"}")
    records = [record(body, timestamp=written)]
    decoded, defs, _ = route(records, decode_all(records, Decoder()), {"b": definition})
    [fields] = decoded
    if isinstance(fields, InvalidEvent):
        return fields.reason.value
    assert defs[fields[0]] == definition
    return fields[0]


WEEKLY = BoardDef(reset="weekly", grace_ms=60_000)


@pytest.mark.parametrize(
    ("definition", "ts", "expected"),
    [
        (WEEKLY, utc_ms(2026, 11, 30), "b@2026-W49"),  # Monday 00:00 opens the week
        (WEEKLY, utc_ms(2026, 11, 30) - 1, "b@2026-W48"),  # the last ms of Sunday
        (WEEKLY, utc_ms(2026, 12, 31, 23, 59), "b@2026-W53"),  # ISO week 53
        (WEEKLY, utc_ms(2027, 1, 3, 12), "b@2026-W53"),  # Sunday 2027-01-03 still belongs to 2026-W53
        (WEEKLY, utc_ms(2027, 1, 4), "b@2027-W01"),
        (BoardDef(reset="monthly"), utc_ms(2026, 1, 31, 23, 59, 59), "b@2026-01"),
        (BoardDef(reset="monthly"), utc_ms(2026, 2, 1), "b@2026-02"),
        (BoardDef(reset="daily"), utc_ms(2024, 2, 29, 23, 0), "b@2024-02-29"),  # a leap day
        (BoardDef(reset="daily"), utc_ms(2024, 3, 1), "b@2024-03-01"),
        (BoardDef(reset="hourly"), utc_ms(2026, 12, 31, 23, 59), "b@2026-12-31T23"),
        (BoardDef(reset="0 7 * * 1"), utc_ms(2026, 12, 7, 7, 0), "b@20261207T0700Z"),
        (BoardDef(reset="0 7 * * 1"), utc_ms(2026, 12, 7, 6, 59), "b@20261130T0700Z"),
    ],
)
def test_an_event_lands_in_the_period_of_its_event_time(definition: BoardDef, ts: int, expected: str) -> None:
    assert _one(definition, ts, ts) == expected


def test_lateness_is_decided_by_the_record_timestamp_against_end_plus_grace() -> None:
    end = utc_ms(2026, 12, 7)  # 2026-W49 ends
    ts = end - 5
    assert _one(WEEKLY, ts, end + 60_000) == "b@2026-W49"  # within the grace: counts where it belongs
    assert _one(WEEKLY, ts, end + 60_001) == "period_closed"
    assert _one(WEEKLY, ts, -1) == "b@2026-W49"  # no record timestamp: never late
    # a replay months later decides the same: nothing here reads a clock
    assert _one(WEEKLY, ts, end + 60_000) == "b@2026-W49"


def test_the_record_timestamp_places_an_event_without_ts() -> None:
    assert _one(WEEKLY, None, utc_ms(2026, 12, 1)) == "b@2026-W49"
    assert _one(WEEKLY, None, -1) == "missing_field"
    assert _one(WEEKLY, None, None) == "missing_field"


def test_boards_that_never_reset_are_untouched_and_times_past_the_calendar_are_refused() -> None:
    assert _one(DEFAULT, utc_ms(2026, 12, 1), utc_ms(2026, 12, 1)) == "b"
    assert _one(WEEKLY, 2**53 - 1, -1) == "out_of_range"


def test_one_route_call_decides_each_event_as_alone_across_period_edges() -> None:
    """The routing keeps each board's last period to skip the calendar for the next event inside it: events that
    hop back and forth over a week's edge, on two seasonal boards and a plain one, in one call, go exactly where
    each would go routed alone (and late or ahead ones are still refused)."""
    edge = utc_ms(2026, 11, 30)
    times = [edge - 1, edge, edge - 1, edge + 5, edge - 2, edge + 604_800_000, edge - 1, edge + 604_800_000 - 1]
    defs = {"b": WEEKLY, "d": BoardDef(reset="daily"), "plain": DEFAULT}
    records = []
    for i, ts in enumerate(times * 3):
        board = ("b", "d", "plain")[i % 3]
        body = b'{"board": "%s", "player": "p", "delta": 1, "ts": %d}' % (board.encode(), ts)
        records.append(record(body, timestamp=edge + (i % 4) * 86_400_000))
    together, _, _ = route(records, decode_all(records, Decoder()), defs)
    alone = [route([r], decode_all([r], Decoder()), defs)[0][0] for r in records]
    assert len({f[0] for f in together if type(f) is tuple}) > 4  # several periods of both boards met
    assert any(isinstance(f, InvalidEvent) for f in together)  # and some refused
    assert [f.reason if isinstance(f, InvalidEvent) else f for f in together] == [
        f.reason if isinstance(f, InvalidEvent) else f for f in alone
    ]


def test_a_period_board_batch_carries_its_board_period_and_expiry_as_routed() -> None:
    """What routing decided goes with the batch, whatever its form and however many partitions fed it: the sink
    reads the logical board, the period and the expiry there instead of parsing the name back."""
    ts = utc_ms(2026, 12, 1)
    week = WEEKLY.schedule.period_of(ts)
    expected = PeriodTarget("b", week.id, expire_at_ms(WEEKLY.schedule, week, WEEKLY.keep, WEEKLY.grace_ms))
    defs = {"b": WEEKLY, "plain": DEFAULT, "best": BoardDef(operator="best", reset="daily")}
    window = Window()
    for partition in (0, 1):
        bodies = [
            b'{"board": "b", "player": "p%d", "delta": 1, "ts": %d}' % (partition, ts),
            b'{"board": "plain", "player": "p", "delta": 1, "ts": %d}' % ts,
            b'{"board": "best", "player": "p", "score": 3, "ts": %d}' % ts,
        ]
        records = [record(body, i, timestamp=ts) for i, body in enumerate(bodies)]
        decoded, routed_defs, periods = route(records, decode_all(records, Decoder()), defs)
        marks = {str(f[0]): -1 for f in decoded if type(f) is tuple}
        window.fold_for(partition).fold_checked(records, decoded, marks, set(), routed_defs, {}, periods)
    batches = {batch.board: batch for batch in window.batches(100)}
    assert batches[f"b@{week.id}"].period == expected
    assert batches[f"b@{week.id}"].offsets == {0: 2, 1: 2}  # both partitions' shares, one batch
    assert batches["plain"].period is None
    best = next(batch for name, batch in batches.items() if name.startswith("best@"))
    assert best.states is not None and best.period is not None and best.period.board == "best"
