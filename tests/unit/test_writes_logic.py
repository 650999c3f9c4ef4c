"""The pure parts of the writes: tokens, body parsing by the codec, bearer tokens, the token bucket."""

from __future__ import annotations

import re

import orjson
import pytest

from hotboard.boards import DEFAULT, BoardDef, DefinitionError
from hotboard.codec import Decoder, decode_all
from ingest.pending import Window
from reader_api import tokens
from reader_api.auth import RateLimiter, WriteAuth, load_tokens
from reader_api.errors import ApiError
from reader_api.write_bodies import MAX_EVENTS, judge, judge_score, parse_events, score_event
from tests.records import json_record


@pytest.mark.parametrize("marks", [{}, {0: 0}, {0: 41, 3: 7}, {4095: 2**62}, {i: i * 1000 for i in range(64)}], ids=str)
def test_a_token_round_trips_and_matches_the_documented_pattern(marks: dict[int, int]) -> None:
    token = tokens.encode(marks)
    assert tokens.decode(token) == marks
    assert re.fullmatch(tokens.PATTERN, token)
    assert re.fullmatch(r"[A-Za-z0-9._~-]*", token), "URL-safe as it is"


@pytest.mark.parametrize("token", ["x", "1.", ".1", "1.2_", "1.2,3.4", "1.2__3.4", "-1.2", "1." + "9" * 20])
def test_anything_but_a_token_of_this_api_is_a_422_naming_the_parameter(token: str) -> None:
    with pytest.raises(ApiError) as caught:
        tokens.decode(token)
    assert (caught.value.status, caught.value.parameter) == (422, "after")
    assert not re.fullmatch(tokens.PATTERN, token)


def test_merging_keeps_the_highest_offset_per_partition() -> None:
    assert tokens.merge([(0, 5), (1, 2), (0, 3), (1, 9)]) == {0: 5, 1: 9}
    assert tokens.decode("0.5_0.9_0.1") == {0: 9}


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        ({"player": "a", "delta": 1}, None),
        ({"board": "b", "player": "a", "op": "best", "score": 3, "meta": {"n": 1}}, None),
        ({"player": "a", "delta": "1"}, "bad_type"),
        ({"delta": 1}, "missing_field"),
        ([1], "not_object"),
        ({"player": "a", "op": "x", "delta": 1}, "unsupported_op"),
        ({"player": "a", "delta": 2**60}, "out_of_range"),
        ({"player": "a", "delta": 1, "meta": {"k": "x" * 600}}, "too_large"),
        ({"board": "a b", "player": "a", "delta": 1}, "bad_value"),
    ],
)
def test_each_item_is_judged_by_the_codec_both_as_json_and_ndjson(item: object, reason: str | None) -> None:
    for body, kind in (
        (orjson.dumps([{"player": "ok", "delta": 1}, item]), "application/json"),
        (b'{"player": "ok", "delta": 1}\n' + orjson.dumps(item) + b"\n", "application/x-ndjson; charset=utf-8"),
    ):
        parsed = parse_events(body, kind, Decoder())
        assert [r["reason"] for r in parsed.rejected] == ([] if reason is None else [reason])
        assert [i for i, _, _ in parsed.records] == ([0] if reason else [0, 1])
        if reason is not None:
            assert parsed.rejected[0]["index"] == 1 and parsed.rejected[0]["detail"]


def test_records_are_keyed_by_player_with_the_event_as_value() -> None:
    parsed = parse_events(b'[{"board": "g", "player": "p/1", "delta": 4}]', "application/json", Decoder())
    ((index, key, value),) = parsed.records
    assert (index, key, orjson.loads(value)) == (0, b"p/1", {"board": "g", "player": "p/1", "delta": 4})


#: The boards of the table below: an undeclared board folds as the default (incr), as the worker folds it.
DEFINITIONS: dict[str, BoardDef | DefinitionError] = {
    "arena": DEFAULT,
    "hi": BoardDef("desc", "best"),
    "last": BoardDef("desc", "set"),
    "down": BoardDef("asc", "decr"),
    "broken": DefinitionError("hb:{broken}:def: WRONGTYPE"),
}


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        ({"board": "arena", "player": "c", "score": 5}, "missing_field"),  # no op: the board's incr needs a delta
        ({"board": "arena", "player": "c", "delta": 5}, None),
        ({"board": "arena", "player": "c", "op": "best", "score": 5}, None),  # the event's own op
        ({"player": "c", "score": 5}, "missing_field"),  # the default board, undeclared: incr
        ({"board": "hi", "player": "c", "delta": 5}, "missing_field"),  # best takes a score
        ({"board": "hi", "player": "c", "score": 5}, None),
        ({"board": "hi", "player": "c", "op": "incr", "delta": 5}, None),
        ({"board": "last", "player": "c", "delta": 1}, "missing_field"),
        ({"board": "last", "player": "c", "score": -3}, None),
        ({"board": "down", "player": "c", "delta": -1}, "bad_value"),  # decr takes a delta >= 0
        ({"board": "down", "player": "c", "delta": 2}, None),
        ({"board": "broken", "player": "c", "delta": 1}, "bad_definition"),
    ],
)
def test_each_item_is_judged_against_its_boards_definition_as_the_worker_folds_it(
    item: dict[str, object], reason: str | None
) -> None:
    body = orjson.dumps([{"board": "hi", "player": "ok", "score": 1}, item])
    parsed = parse_events(body, "application/json", Decoder())
    assert parsed.boards() <= DEFINITIONS.keys() | {"global"}
    judged = judge(parsed, {**DEFINITIONS, "global": DEFAULT})
    assert [(r["index"], r["reason"]) for r in judged.rejected] == ([] if reason is None else [(1, reason)])
    assert [i for i, _, _ in judged.records] == ([0, 1] if reason is None else [0])
    # the worker's fold, given the same records and definitions, dead-letters the same item, for the same reason
    records = [json_record(e, offset) for offset, e in enumerate(orjson.loads(body))]
    fold = Window().fold_for(0)
    boards = {"hi", str(item.get("board", "global"))}
    defs = {b: ({**DEFINITIONS, "global": DEFAULT})[b] for b in boards}
    fold.fold_checked(records, decode_all(records, Decoder()), dict.fromkeys(boards, -1), set(), defs, {}, {})
    dead = [(r.offset, e.reason.value, e.detail) for r, e in fold.dead]
    assert dead == [(r["index"], r["reason"], r["detail"]) for r in judged.rejected]


@pytest.mark.parametrize(
    ("body", "kind", "status", "code"),
    [
        (b"{}", "application/json", 400, "not_an_array"),
        (b"[", "application/json", 400, "invalid_json"),
        (b"[]", "text/csv", 415, "unsupported_media_type"),
        (b"[]", None, 415, "unsupported_media_type"),
        (orjson.dumps([{}] * (MAX_EVENTS + 1)), "application/json", 413, "too_many_events"),
        (b"{}\n" * (MAX_EVENTS + 1), "application/x-ndjson", 413, "too_many_events"),
    ],
)
def test_a_body_that_is_no_list_of_events_is_a_4xx(body: bytes, kind: str | None, status: int, code: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_events(body, kind, Decoder())
    assert (caught.value.status, caught.value.code) == (status, code)


def test_the_single_score_event_takes_board_player_and_ts_from_the_request() -> None:
    value = score_event("g", "p", b'{"op": "best", "score": 9, "meta": {"n": 1}}', "application/json", 123)
    assert orjson.loads(value) == {"op": "best", "score": 9, "meta": {"n": 1}, "board": "g", "player": "p", "ts": 123}
    for body, code in ((b'{"delta": 1, "board": "x"}', "invalid_event"), (b'{"op": "best"}', "missing_field")):
        with pytest.raises(ApiError) as caught:
            score_event("g", "p", body, "application/json", 1)
        assert (caught.value.status, caught.value.code) == (422, code)


@pytest.mark.parametrize(
    ("board", "body", "code"),
    [
        ("arena", b'{"score": 5}', "missing_field"),
        ("hi", b'{"delta": 5}', "missing_field"),
        ("down", b'{"delta": -1}', "bad_value"),
        ("broken", b'{"delta": 1}', "bad_definition"),
        ("hi", b'{"score": 5}', None),
        ("arena", b'{"op": "set", "score": 5}', None),
    ],
)
def test_the_single_score_is_judged_against_the_boards_definition_a_422_with_the_reason(
    board: str, body: bytes, code: str | None
) -> None:
    value = score_event(board, "p", body, "application/json", 1)
    if code is None:
        judge_score(value, DEFINITIONS[board])
        return
    with pytest.raises(ApiError) as caught:
        judge_score(value, DEFINITIONS[board])
    assert (caught.value.status, caught.value.code) == (422, code) and caught.value.message


def test_bearer_tokens(tmp_path: object) -> None:
    auth = WriteAuth(["one", "two"])
    assert auth.check("Bearer two").scope != auth.check("bearer one").scope
    for header in (None, "", "Bearer", "Bearer three", "Basic one", "Bearer onex"):
        with pytest.raises(ApiError) as caught:
            auth.check(header)
        assert caught.value.status == 401 and caught.value.headers == {"WWW-Authenticate": 'Bearer realm="hotboard"'}
    with pytest.raises(ApiError) as caught:
        WriteAuth([]).check("Bearer one")
    assert caught.value.status == 403


def test_tokens_come_from_the_setting_and_the_file(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "tokens"
    path.write_text("# writers\nfile-one\n\n  file-two  \n")
    assert load_tokens(" a, ,b", str(path)) == ["a", "b", "file-one", "file-two"]
    assert load_tokens("", "") == []


def test_the_token_bucket_refills_at_its_rate_and_says_when_to_retry() -> None:
    now = [0.0]
    limiter = RateLimiter(rate=10.0, burst=20, clock=lambda: now[0])
    limiter.take("a", 20)
    with pytest.raises(ApiError) as caught:
        limiter.take("a", 5)
    assert caught.value.status == 429 and caught.value.headers == {"Retry-After": "1"}
    limiter.take("b", 20)  # each writer has its own bucket
    now[0] = 0.5
    limiter.take("a", 5)
    now[0] = 100.0
    limiter.take("a", 1000)  # larger than the bucket: waits for a full one, never refused for ever
    with pytest.raises(ApiError):
        limiter.take("a", 1)
