"""The limits of seasonal routing: an event time the router accepts can be flushed (expiry computable up to
year 9999), a far-future one is refused, and a period's expiry is computed once, not once per board."""

from __future__ import annotations

from typing import Any

import pytest

from flusher.seasons import season_args as _season
from hotboard.boards import BoardDef
from hotboard.codec import Decoded, Decoder, InvalidEvent, decode_all
from ingest.seasons import route
from tests.records import json_record


def _route(reset: str, ts: int, written: int = 1_764_590_000_000) -> list[Decoded]:
    d = BoardDef(reset=reset)
    recs = [json_record({"board": "race", "player": "a", "delta": 1, "ts": ts}, timestamp=written)]
    decoded, _ = route(recs, decode_all(recs, Decoder()), {"race": d})
    return decoded


def test_an_event_route_accepts_near_year_9999_can_be_flushed() -> None:
    """An event near year 9999 that route() accepts (daily, keep 4) must have an expiry the sink can compute:
    expire_at_ms walks keep periods forward, and an OverflowError inside flush() is not transient, so every
    worker taking the partition would replay the record and die on it (a poison record, the partition stalled)."""
    for reset, ts in (
        ("daily", 253_401_868_800_000),
        ("monthly", 253_398_758_400_000),
        ("59 23 31 12 *", 253_384_934_400_000),
    ):
        decoded = _route(reset, ts)
        if isinstance(decoded[0], InvalidEvent):
            continue  # dead-lettered: fine
        assert type(decoded[0]) is tuple
        board = decoded[0][0]
        _season(board, BoardDef(reset=reset))  # no OverflowError / ValueError


def test_season_expiry_is_computed_once_per_period_not_once_per_board(monkeypatch: pytest.MonkeyPatch) -> None:
    """The expiry depends on (period id, definition) only: a window touching 100,000 weekly period boards of
    one period computes it once. Cached per board it cost 3.3 s a window (weekly, keep 4; 0.7 s cron) against
    the 0.5 s flush goal."""
    import flusher.seasons as sink

    calls = 0
    sink.period_expiry.cache_clear()
    real = sink.expire_at_ms

    def counting(*a: Any) -> int:
        nonlocal calls
        calls += 1
        return real(*a)

    monkeypatch.setattr(sink, "expire_at_ms", counting)
    d = BoardDef(reset="weekly")
    for i in range(5000):
        sink.season_args(f"g{i}@2026-W49", d)
    assert calls <= 1, f"expire_at_ms computed {calls} times for one period"


def test_far_future_event_time_is_refused() -> None:
    """ts 100 years past the record's timestamp would make race@2126-..., a period board expiring in 2126:
    Redis keys nobody can read (the API serves kept periods around now) that live a century. It is
    dead-lettered instead."""
    written = 1_764_590_000_000
    decoded = _route("daily", written + 100 * 365 * 86_400_000, written)
    assert isinstance(decoded[0], InvalidEvent), decoded
