"""Seasonal boards: each event goes to the period of its event time, or to the dead-letter topic when its
period closed before the record was written. Pure, no I/O, no clock: decided from the record alone, so a replay
months later decides exactly as the first pass did.

A period of board ``B`` is a board of its own, ``B@<period id>`` (``hb:{B@2026-W49}``: its own hash tag, so
periods spread over a cluster), folded and flushed like any other board under ``B``'s definition. Nothing runs
at a period's start: a period exists once its first event is applied. What routing decided of a period (its
logical board, id and expiry) travels with the period board's batches (:class:`flusher.batch.PeriodTarget`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import NamedTuple

from flusher.batch import PeriodTarget
from hotboard.boards import BoardDef, DefinitionError
from hotboard.codec import TS, Decoded, InvalidEvent, Reason
from hotboard.periods import Period, expire_at_ms, is_late, period_board
from hotboard.records import Record


@lru_cache(maxsize=4096)
def _expiry(period: Period, definition: BoardDef) -> int:
    return expire_at_ms(definition.schedule, period, definition.keep, definition.grace_ms)


class Routed(NamedTuple):
    #: Each record's fields, a seasonal board's events renamed to their period board, or why it is invalid.
    decoded: list[Decoded]
    #: The definitions given, and each period board's (its board's).
    defs: dict[str, BoardDef | DefinitionError]
    #: period board -> what its batches carry to the sink.
    periods: dict[str, PeriodTarget]


def route(
    records: Sequence[Record], decoded: Sequence[Decoded], defs: Mapping[str, BoardDef | DefinitionError]
) -> Routed:
    """``decoded`` with every event of a seasonal board renamed to its period board (or turned into a dead
    letter: ``period_closed``, or no event time at all), ``defs`` extended with the period boards, and each
    period board's target."""
    out: list[Decoded] = []
    out_defs = dict(defs)
    periods: dict[str, PeriodTarget] = {}
    seasonal = {b: d for b, d in defs.items() if isinstance(d, BoardDef) and d.seasonal}
    if not seasonal:
        return Routed(list(decoded), out_defs, periods)
    #: board -> its last period, that period's expiry and board name: a period is [start, end), so an event
    #: time inside it needs no calendar arithmetic
    last: dict[str, tuple[Period, int, str]] = {}
    for record, fields in zip(records, decoded, strict=True):
        definition = seasonal.get(fields[0]) if type(fields) is tuple else None
        if definition is None:
            out.append(fields)
            continue
        assert type(fields) is tuple
        written = record.timestamp if record.timestamp is not None else -1
        ts = fields[TS] if fields[TS] is not None else written
        if ts < 0:
            out.append(
                InvalidEvent(
                    Reason.MISSING_FIELD, "ts is required on a seasonal board when the record has no timestamp"
                )
            )
            continue
        hit = last.get(fields[0])
        if hit is not None and hit[0].start_ms <= ts < hit[0].end_ms:
            period, expires, name = hit
        else:
            try:
                period = definition.schedule.period_of(ts)
                expires = _expiry(period, definition)
            except (ValueError, OverflowError):  # near year 9999: no calendar holds it, or its expiry
                out.append(InvalidEvent(Reason.OUT_OF_RANGE, f"event time {ts} ms has no period that can expire"))
                continue
            name = period_board(fields[0], period.id)
            last[fields[0]] = (period, expires, name)
            periods[name] = PeriodTarget(fields[0], period.id, expires)
        if written >= 0 and period.start_ms - written > period.end_ms - period.start_ms:
            # more than a period ahead of the record: a period nobody reads, kept until expires (maybe 2126)
            out.append(
                InvalidEvent(
                    Reason.OUT_OF_RANGE,
                    f"event time {ts} is more than a period past the record timestamp {written} (expiry {expires})",
                )
            )
            continue
        if is_late(period, written, definition.grace_ms):
            why = f"event time {ts} is in period {period.id}, closed at {period.end_ms} (+{definition.grace_ms} ms)"
            out.append(InvalidEvent(Reason.PERIOD_CLOSED, f"{why}; record written at {written}"))
            continue
        out_defs[name] = definition
        out.append((name, *fields[1:]))
    return Routed(out, out_defs, periods)
