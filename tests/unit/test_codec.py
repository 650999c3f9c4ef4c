"""The event contract, as a table: what is accepted, and why each bad input is rejected."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest

from hotboard.codec import MAX_META_BYTES, MAX_META_DEPTH, Decoder, Event, InvalidEvent, Reason, decode, encode


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            b'{"board": "global", "player": "p-42", "delta": 10, "ts": 1764500000123}',
            Event("global", "p-42", 10, 1764500000123),
        ),
        (b'{"player": "p-42", "delta": -3}', Event("global", "p-42", -3, None)),
        (b'{"player": "x", "delta": 0, "extra": [1, 2]}', Event("global", "x", 0, None)),
        (
            b'{"board": "s:2026.w48_eu-1", "player": "a:b.c-d", "delta": 1}',
            Event("s:2026.w48_eu-1", "a:b.c-d", 1, None),
        ),
        (
            b'{"player": "\xc3\xa9l\xc3\xa8ve \xf0\x9f\x8e\xae", "delta": 1}',
            Event("global", "\u00e9l\u00e8ve \U0001f3ae", 1, None),
        ),
        (b'{"player": "p", "delta": 9007199254740991}', Event("global", "p", 2**53 - 1, None)),
        (b'{"player": "p", "delta": -9007199254740991}', Event("global", "p", -(2**53 - 1), None)),
        (b'{"player": "p", "delta": 1, "op": "incr"}', Event("global", "p", 1, None, "incr")),
        (b'{"player": "p", "op": "set", "score": -7}', Event("global", "p", None, None, "set", -7)),
        (
            b'{"player": "p", "op": "best", "score": 9007199254740991}',
            Event("global", "p", None, None, "best", 2**53 - 1),
        ),
        (b'{"player": "p", "op": "decr", "delta": 0}', Event("global", "p", 0, None, "decr")),
        (b'{"player": "p", "score": 3}', Event("global", "p", None, None, None, 3)),  # the board's operator decides
        (
            b'{"player": "p", "delta": 1, "meta": {"name": "Zo\\u00eb", "c": "NZ"}}',
            Event("global", "p", 1, None, meta='{"name":"Zoë","c":"NZ"}'.encode()),
        ),
        (b'{"player": "p", "delta": 1, "meta": null}', Event("global", "p", 1, None)),
        (b'{"player": "p", "delta": 1, "ts": 9007199254740991}', Event("global", "p", 1, 2**53 - 1)),
        (b'{"player": "' + b"x" * 128 + b'", "delta": 1}', Event("global", "x" * 128, 1, None)),
        (b'{"board": "' + b"b" * 64 + b'", "player": "p", "delta": 1}', Event("b" * 64, "p", 1, None)),
    ],
)
def test_valid_events(value: bytes, expected: Event) -> None:
    assert decode(value) == expected


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, Reason.NOT_JSON),
        (b"", Reason.NOT_JSON),
        (b"{not json", Reason.NOT_JSON),
        (b"\xff\xfe{}", Reason.BAD_UTF8),
        (b'{"player": "\xed\xa0\x80", "delta": 1}', Reason.BAD_UTF8),
        (b"[]", Reason.NOT_OBJECT),
        (b'"a string"', Reason.NOT_OBJECT),
        (b"42", Reason.NOT_OBJECT),
        (b"null", Reason.NOT_OBJECT),
        (b'{"delta": 1}', Reason.MISSING_FIELD),
        (b'{"player": "p"}', Reason.MISSING_FIELD),
        (b'{"player": null, "delta": 1}', Reason.MISSING_FIELD),
        (b'{"player": 42, "delta": 1}', Reason.BAD_TYPE),
        (b'{"player": "p", "delta": 1.0}', Reason.BAD_TYPE),
        (b'{"player": "p", "delta": 1e3}', Reason.BAD_TYPE),
        (b'{"player": "p", "delta": "1"}', Reason.BAD_TYPE),
        (b'{"player": "p", "delta": true}', Reason.BAD_TYPE),
        (b'{"player": "p", "delta": false}', Reason.BAD_TYPE),
        (b'{"player": "p", "delta": 9007199254740992}', Reason.OUT_OF_RANGE),
        (b'{"player": "p", "delta": -9007199254740992}', Reason.OUT_OF_RANGE),
        (b'{"player": "p", "op": "set", "score": 9007199254740992}', Reason.OUT_OF_RANGE),
        (b'{"player": "p", "op": "best", "score": -9007199254740992}', Reason.OUT_OF_RANGE),
        (b'{"player": "p", "delta": 1, "ts": 9007199254740992}', Reason.OUT_OF_RANGE),
        (b'{"player": "p", "delta": 123456789012345678901234567890}', Reason.OUT_OF_RANGE),
        (b'{"player": "p", "op": "set", "score": 1.5}', Reason.BAD_TYPE),
        (b'{"player": "p", "op": "best", "delta": 1}', Reason.MISSING_FIELD),
        (b'{"player": "p", "op": "incr", "score": 1}', Reason.MISSING_FIELD),
        (b'{"player": "p", "op": "decr", "delta": -1}', Reason.BAD_VALUE),
        (b'{"player": "p", "op": "max", "score": 1}', Reason.UNSUPPORTED_OP),
        (b'{"player": "p", "op": 7, "delta": 1}', Reason.UNSUPPORTED_OP),
        (b'{"player": "p", "op": ["set"], "delta": 1}', Reason.UNSUPPORTED_OP),
        (b'{"player": "p", "delta": 1, "meta": "Zoe"}', Reason.BAD_TYPE),
        (b'{"player": "p", "delta": 1, "meta": [1]}', Reason.BAD_TYPE),
        (b'{"player": "p", "delta": 1, "meta": {"n": "' + b"x" * 505 + b'"}}', Reason.TOO_LARGE),
        (b'{"player": "p", "delta": 1, "board": 7}', Reason.BAD_TYPE),
        (b'{"player": "p", "delta": 1, "board": ""}', Reason.BAD_VALUE),
        (b'{"player": "p", "delta": 1, "board": "has space"}', Reason.BAD_VALUE),
        (b'{"player": "p", "delta": 1, "board": "hb{x}"}', Reason.BAD_VALUE),
        (b'{"player": "p", "delta": 1, "board": "' + b"b" * 65 + b'"}', Reason.BAD_VALUE),
        (b'{"player": "", "delta": 1}', Reason.BAD_VALUE),
        (b'{"player": "' + b"x" * 129 + b'", "delta": 1}', Reason.BAD_VALUE),
        (b'{"player": "a\\nb", "delta": 1}', Reason.BAD_VALUE),
        (b'{"player": "a\\u0000b", "delta": 1}', Reason.BAD_VALUE),
        (b'{"player": "a\\u007fb", "delta": 1}', Reason.BAD_VALUE),
        (b'{"player": "a\\u0085b", "delta": 1}', Reason.BAD_VALUE),
        (b'{"player": "p", "delta": 1, "ts": "now"}', Reason.BAD_TYPE),
        (b'{"player": "p", "delta": 1, "ts": -1}', Reason.BAD_TYPE),
        (b'{"player": "p", "delta": 1, "ts": 1.5}', Reason.BAD_TYPE),
        (b'{"player": "p", "delta": 1, "op": "set"}', Reason.MISSING_FIELD),
        (b'{"player": "p", "delta": 1, "pad": "' + b"x" * 65_536 + b'"}', Reason.TOO_LARGE),
    ],
)
def test_invalid_events_name_their_reason(value: bytes | None, reason: Reason) -> None:
    with pytest.raises(InvalidEvent) as caught:
        decode(value)
    assert caught.value.reason is reason
    assert str(caught.value).startswith(reason.value + ": ")


def test_decoder_board_cache_does_not_let_bad_boards_through() -> None:
    decoder = Decoder(max_known_boards=1)
    assert decoder.decode(b'{"board": "a", "player": "p", "delta": 1}').board == "a"
    assert decoder.decode(b'{"board": "b", "player": "p", "delta": 1}').board == "b"  # cache full: still checked
    with pytest.raises(InvalidEvent):
        decoder.decode(b'{"board": "no good", "player": "p", "delta": 1}')


def test_encode_round_trips() -> None:
    event = Event("s:1", "p-\u00e9", -(2**53 - 1), 1764500000123)
    assert decode(encode(event)) == event
    assert decode(encode(event._replace(ts_ms=None))) == event._replace(ts_ms=None)
    scored = Event("b", "p", None, 5, "best", 2**53 - 1, b'{"name":"x"}')
    assert decode(encode(scored)) == scored


_EVENT = b'{"player": "p", "delta": 1, "meta": '


def _nested_meta(depth: int) -> bytes:
    """An event whose ``meta`` is ``depth`` objects deep (the meta object itself is level 1), or arrays inside."""
    inner = b'{"a":' * depth + b"1" + b"}" * depth
    return _EVENT + inner + b"}"


def _nested_array_meta(depth: int) -> bytes:
    inner = b"[" * (depth - 1) + b"]" * (depth - 1)
    return _EVENT + b'{"a":' + inner + b"}}"


@pytest.mark.parametrize("make", [_nested_meta, _nested_array_meta])
def test_meta_nested_up_to_the_limit_is_accepted_and_every_answer_can_encode_it(make: Callable[[int], bytes]) -> None:
    """The API wraps meta in a few levels of its own (entries, an entry): orjson refuses past 254 levels, so
    an accepted meta must leave room for any answer."""
    value = make(MAX_META_DEPTH)
    meta = decode(value).meta
    assert meta is not None and len(meta) <= MAX_META_BYTES
    answer = {"entries": [{"meta": orjson.Fragment(meta)}]}
    deep = orjson.loads(orjson.dumps(answer))
    for _ in range(50):  # 100 more levels: far deeper wrapping than any answer has
        deep = {"x": [deep]}
    orjson.dumps(deep)


@pytest.mark.parametrize(
    ("make", "depth"),
    [(_nested_meta, d) for d in (MAX_META_DEPTH + 1, 64, 90)]
    + [(_nested_array_meta, d) for d in (MAX_META_DEPTH + 1, 64, 252, 253, 254, 255, 300)],
)
def test_meta_nested_past_the_limit_is_dead_lettered_too_large(make: Callable[[int], bytes], depth: int) -> None:
    """A meta 252-254 levels deep fits in 512 bytes and encodes once, but no answer holding it can be encoded
    (it would break every page holding that player): refused by its depth, whatever its size."""
    value = make(depth)
    with pytest.raises(InvalidEvent) as caught:
        decode(value)
    assert caught.value.reason is Reason.TOO_LARGE
    if len(value) - len(_EVENT) - 1 <= MAX_META_BYTES:  # small enough: only its depth can refuse it
        assert f"limit {MAX_META_DEPTH}" in caught.value.detail
