"""review-11: failing tests for seasons in the worker (pure parts)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from flusher.seasons import season_args as _season
from hotboard.boards import BoardDef
from hotboard.codec import Decoded, Decoder, InvalidEvent, decode_all
from ingest.seasons import route


def _route(reset: str, ts: int, written: int = 1_764_590_000_000) -> list[Decoded]:
    d = BoardDef(reset=reset)
    recs = [
        SimpleNamespace(
            offset=0, timestamp=written, value=orjson.dumps({"board": "race", "player": "a", "delta": 1, "ts": ts})
        )
    ]
    decoded, _ = route(recs, decode_all(recs, Decoder()), {"race": d})
    return decoded


def test_an_event_route_accepts_near_year_9999_can_be_flushed() -> None:
    """route() accepts ts=9999-12-27 on a daily keep=4 board, but the sink's expire_at_ms walks 4 periods
    forward and raises OverflowError inside flush(): not TRANSIENT, so the worker dies and every worker that
    takes the partition replays the same record and dies again (poison record, partition stalled)."""
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
        _season(board, BoardDef(reset=reset))  # raises OverflowError / ValueError today


def test_season_expiry_is_computed_once_per_period_not_once_per_board(monkeypatch: pytest.MonkeyPatch) -> None:
    """_season is lru_cached on (board, definition) with 4096 entries: a window touching 100,000 weekly
    period boards (one period) recomputes parse_id + expire_at_ms 100,000 times: measured 3.3 s per window
    (weekly, keep 4; 0.7 s cron) against the 0.5 s flush goal. The answer depends on (period id, definition)."""
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
    """ts 100 years past the record's timestamp is routed to race@2126-..., a period board that expires in
    2126: Redis keys nobody can read (the API only serves kept periods around now) and that live a century.
    Expected: dead-lettered (e.g. out_of_range when ts > record timestamp + one period or a bound)."""
    written = 1_764_590_000_000
    decoded = _route("daily", written + 100 * 365 * 86_400_000, written)
    assert isinstance(decoded[0], InvalidEvent), decoded
