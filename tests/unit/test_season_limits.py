"""The limits of seasonal routing: an event time the router accepts has an expiry (computable up to year 9999),
a far-future one is refused, and a period's expiry is computed once, not once per board."""

from __future__ import annotations

from typing import Any

import pytest

import ingest.seasons
from hotboard.boards import BoardDef
from hotboard.codec import Decoded, Decoder, InvalidEvent, Reason, decode_all
from hotboard.periods import expire_at_ms
from ingest.seasons import Routed, route
from tests.records import json_record


def _routed(reset: str, ts: int, written: int = 1_764_590_000_000) -> Routed:
    d = BoardDef(reset=reset)
    recs = [json_record({"board": "race", "player": "a", "delta": 1, "ts": ts}, timestamp=written)]
    return route(recs, decode_all(recs, Decoder()), {"race": d})


def _route(reset: str, ts: int, written: int = 1_764_590_000_000) -> list[Decoded]:
    return _routed(reset, ts, written).decoded


def test_an_event_route_accepts_near_year_9999_has_an_expiry() -> None:
    """An event near year 9999 that route() accepts (daily, keep 4) must come with its period's expiry:
    expire_at_ms walks keep periods forward, and an OverflowError past routing (in the flush) is not
    transient, so every worker taking the partition would replay the record and die on it (a poison record,
    the partition stalled). Routing computes it, or dead-letters the event."""
    accepted = 0
    for reset, ts in (
        ("daily", 253_401_868_800_000),
        ("daily", 253_401_264_000_000),  # 9999-12-20: its keep still fits the calendar
        ("monthly", 253_398_758_400_000),
        ("monthly", 253_370_764_800_000),  # 9999-01
        ("59 23 31 12 *", 253_384_934_400_000),
    ):
        decoded, _, periods = _routed(reset, ts, written=ts)  # written then: not refused as far-future
        if isinstance(decoded[0], InvalidEvent):
            assert decoded[0].reason is Reason.OUT_OF_RANGE and not periods
            continue  # dead-lettered: fine
        assert type(decoded[0]) is tuple
        target = periods[decoded[0][0]]
        assert target.board == "race" and decoded[0][0] == f"race@{target.period_id}"
        assert target.expire_at_ms > ts
        accepted += 1
    assert accepted == 2, "the cases that fit the calendar must be routed, with their expiry"


def test_season_expiry_is_computed_once_per_period_not_once_per_board(monkeypatch: pytest.MonkeyPatch) -> None:
    """The expiry depends on (period id, definition) only: a window touching 100,000 weekly period boards of
    one period computes it once. Cached per board it cost 3.3 s a window (weekly, keep 4; 0.7 s cron) against
    the 0.5 s flush goal."""
    calls = 0
    ingest.seasons._expiry.cache_clear()
    real = expire_at_ms

    def counting(*a: Any) -> int:
        nonlocal calls
        calls += 1
        return real(*a)

    monkeypatch.setattr(ingest.seasons, "expire_at_ms", counting)
    d = BoardDef(reset="weekly")
    ts = 1_764_590_000_000
    recs = [json_record({"board": f"g{i}", "player": "a", "delta": 1, "ts": ts}, i, timestamp=ts) for i in range(5000)]
    _, _, periods = route(recs, decode_all(recs, Decoder()), {f"g{i}": d for i in range(5000)})
    assert len(periods) == 5000 and len({p.expire_at_ms for p in periods.values()}) == 1
    assert calls == 1, f"expire_at_ms computed {calls} times for one period"


def test_far_future_event_time_is_refused() -> None:
    """ts 100 years past the record's timestamp would make race@2126-..., a period board expiring in 2126:
    Redis keys nobody can read (the API serves kept periods around now) that live a century. It is
    dead-lettered instead."""
    written = 1_764_590_000_000
    decoded = _route("daily", written + 100 * 365 * 86_400_000, written)
    assert isinstance(decoded[0], InvalidEvent), decoded
