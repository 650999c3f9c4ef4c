"""The fold: per-partition deltas, merged per board at flush time, with the watermark each board gets; the
checked fold that skips what a board has already applied; bounded batches and exact deltas."""

from __future__ import annotations

import random
from collections import defaultdict

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from flusher.batch import MAX_EXACT, BoardBatch
from hotboard.boards import DEFAULT, BoardDef
from hotboard.codec import Decoder, InvalidEvent, boards_to_check, decode_all
from hotboard.operators import summed
from hotboard.records import Record
from ingest import plain_event
from ingest.folds import PartitionFold
from ingest.pending import Window
from tests.records import json_record, record, records_of


def _rec(offset: int, board: str, player: str, delta: int) -> Record:
    return json_record({"board": board, "player": player, "delta": delta}, offset)


def _fold(window: Window, partition: int, offset: int, board: str, player: str, delta: int) -> None:
    fold = window.fold_for(partition)
    done = fold.fold_batch([_rec(offset, board, player, delta)], {board: DEFAULT}, Decoder())
    assert done.consumed == 1


def _batches(w: Window, max_players: int = 10_000) -> dict[str, BoardBatch]:
    batches = w.batches(max_players)
    return {b.board: b for b in batches}


def test_fold_sums_per_board_and_player() -> None:
    w = Window()
    _fold(w, 0, 0, "g", "a", 5)
    _fold(w, 0, 1, "g", "a", -2)
    _fold(w, 0, 2, "g", "b", 1)
    _fold(w, 0, 3, "s", "a", 7)
    assert w.entries == 3
    assert w.events == 4
    batches = _batches(w)
    assert batches["g"] == BoardBatch("g", {"a": 3, "b": 1}, {0: 3})
    assert batches["s"] == BoardBatch("s", {"a": 7}, {0: 3})


def test_merge_across_partitions_sums_and_names_every_partition() -> None:
    w = Window()
    _fold(w, 0, 10, "g", "a", 1)
    _fold(w, 1, 20, "g", "a", 2)  # a producer that did not key by player: same player on two partitions
    _fold(w, 2, 30, "g", "c", 3)
    _fold(w, 2, 31, "other", "c", 4)
    batches = _batches(w)
    assert batches["g"].deltas == {"a": 3, "c": 3}
    assert batches["g"].offsets == {0: 10, 1: 20, 2: 31}
    assert batches["other"].offsets == {2: 31}
    # merging never mutates a partition's own dict (it is retried as is after a failed flush)
    assert w.folds[0].boards["g"] == {"a": 1}


def test_batches_stay_within_max_players_without_splitting_a_partition() -> None:
    w = Window()
    for p in range(4):
        for i in range(30):
            _fold(w, p, i, "g", f"p{p}-{i}", 1)
    batches = w.batches(max_players=70)
    assert [sorted(b.offsets) for b in batches] == [[0, 1], [2, 3]]
    assert all(len(b.deltas) <= 70 for b in batches)
    assert sum(len(b.deltas) for b in batches) == 120


def test_a_window_sum_beyond_2_53_is_carried_exactly_in_the_clamp_form() -> None:
    w = Window()
    fold = w.fold_for(0)
    records = [_rec(i, "g", "whale", MAX_EXACT) for i in range(3)] + [_rec(3, "g", "minnow", -MAX_EXACT)]
    fold.fold_batch(records, {"g": DEFAULT}, Decoder())
    [batch] = w.batches(10_000)
    assert batch.deltas == {}
    # carried whole: held, and counted, by the script that applies it
    assert batch.states == {"whale": summed(3 * MAX_EXACT), "minnow": summed(-MAX_EXACT)}
    assert fold.boards["g"]["whale"] == 3 * MAX_EXACT  # the partition's own dict is untouched


def test_totals_match_reference_for_random_streams() -> None:
    rng = random.Random(9)
    w = Window()
    ref: defaultdict[tuple[str, str], int] = defaultdict(int)
    for i in range(5000):
        p, board, player, delta = rng.randrange(4), rng.choice("abc"), f"p{rng.randrange(300)}", rng.randint(-9, 9)
        _fold(w, p, i, board, player, delta)
        ref[board, player] += delta
    got = {(b.board, player): d for b in w.batches(10_000) for player, d in b.deltas.items()}
    assert got == dict(ref)


def test_drop_forgets_only_the_revoked_partitions() -> None:
    w = Window()
    _fold(w, 0, 1, "g", "a", 1)
    _fold(w, 1, 1, "g", "b", 1)
    w.drop([0])
    assert [b.deltas for b in w.batches(10_000)] == [{"b": 1}]
    assert w.offsets() == {1: 1}


def test_empty_window_and_timestamps() -> None:
    w = Window()
    assert w.is_empty() and w.batches(10) == [] and w.entries == 0
    fold = w.fold_for(0)
    assert w.is_empty()  # a fold with nothing in it is still empty
    fold.note_ts(5)
    fold.note_ts(3)
    fold.note_ts(9)
    assert (fold.min_ts_ms, fold.max_ts_ms) == (3, 9)


def test_steady_fold_stops_at_the_first_board_not_known_past_its_watermark() -> None:
    fold = PartitionFold()
    records = [
        _rec(0, "g", "a", 1),
        record(b"junk", 1),
        _rec(2, "new", "a", 5),
        _rec(3, "g", "a", 1),
    ]
    done = fold.fold_batch(records, {"g": DEFAULT}, Decoder())
    assert (done.consumed, done.applied, done.invalid) == (2, 1, 1)
    assert fold.last_offset == 1 and fold.boards["g"] == {"a": 1}


@pytest.mark.parametrize(
    ("watermark", "expected_new", "duplicates"),
    [
        (-1, {"a": 7}, 0),  # a board this partition never fed takes every event
        (11, {"a": 5}, 1),  # applied up to 11 already: the event at 11 is skipped, 12 is new
        (12, {}, 2),  # applied up to the end of the records: nothing new
    ],
)
def test_checked_fold_skips_what_a_board_applied_and_then_clears_it(
    watermark: int, expected_new: dict[str, int], duplicates: int
) -> None:
    fold = PartitionFold()
    clear = {"g"}
    watermarks = {"new": watermark}
    records = [_rec(10, "g", "x", 1), _rec(11, "new", "a", 2), _rec(12, "new", "a", 5), _rec(13, "g", "x", 1)]
    defs = dict.fromkeys(("g", "new"), DEFAULT)
    done = fold.fold_checked(records, decode_all(records, Decoder()), watermarks, clear, defs, {}, {})
    assert done.duplicate == duplicates and done.applied == 4 - duplicates and done.consumed == 4
    assert dict(fold.boards.get("new", {})) == expected_new and fold.boards["g"] == {"x": 2}
    assert ("new" in clear) == (watermark < 12)
    assert fold.last_offset == 13 and fold.events == 4 - duplicates


def test_boards_to_check_lists_valid_unknown_boards_only() -> None:
    records = [_rec(0, "g", "a", 1), _rec(1, "s", "a", 1), record(None, 2)]
    assert boards_to_check(decode_all(records, Decoder()), {"g": 3}) == {"s"}


def test_an_unexpected_error_leaves_no_delta_past_the_last_offset() -> None:
    """A record whose value blows up mid-fold (here: a value that is not bytes at all) is dead-lettered; nothing
    escapes, and every delta folded lies at or below last_offset."""

    class Hostile(bytes):
        def __len__(self) -> int:
            raise RecursionError("hostile")

    fold = PartitionFold()
    records = [
        _rec(0, "g", "a", 1),
        record(Hostile(b'{"player":"b","delta":1}'), 1),
        _rec(2, "g", "c", 1),
    ]
    done = fold.fold_batch(records, {"g": DEFAULT}, Decoder())
    assert done.consumed == 3 and done.invalid == 1
    assert fold.boards["g"] == {"a": 1, "c": 1} and fold.last_offset == 2


def test_deeply_nested_values_are_dead_lettered_not_raised() -> None:
    deep = b'{"player": "p", "delta": 1, "op": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    fold = PartitionFold()
    done = fold.fold_batch([record(deep)], {"global": DEFAULT}, Decoder())
    assert done.invalid == 1 and fold.dead[0][1].reason.value == "unsupported_op"


def test_fold_batch_agrees_with_the_codec_on_every_input() -> None:
    """The fast path may only accept what the codec accepts, with the same fields; the rest is dead-lettered
    with the codec's reason."""
    rng = random.Random(5)
    templates: list[bytes | None] = [
        b'{"player": "p-%d", "delta": %d}',
        b'{"board": "b%d", "player": "x", "delta": %d}',
        b'{"player": "p-%d", "delta": %d, "ts": 1700000000000}',
        b'{"player": "p-%d\\u2028", "delta": %d}',
        b'{"player": "p-%d\\u0007", "delta": %d}',
        b'{"player": "p-%d", "delta": %d, "op": "set"}',
        b'{"player": "p-%d", "delta": "%d"}',
        b'{"player": "p-%d", "delta": %d.5}',
        b'{"player": "p-%d", "delta": %d, "ts": -1}',
        b'{"board": "bad board %d", "player": "x", "delta": %d}',
        b"[%d, %d]",
        b"not json %d %d",
        None,
    ]
    values: list[bytes | None] = []
    for _ in range(3000):
        t = rng.choice(templates)
        values.append(None if t is None else t % (rng.randrange(5), rng.randint(-9, 9)))
    values.append(b'{"player": "p", "delta": 1, "pad": "' + b"x" * 65_536 + b'"}')
    values[:0] = [
        b'{"player": "p-1", "delta": 2, "meta": {"a": ' + b"[" * 252 + b"]" * 252 + b"}}",  # meta too deep
        b'{"player": "p-1", "delta": 2, "meta": {"a": ' + b"[" * 40 + b"]" * 40 + b"}}",
        b'{"player": "p-1", "delta": 2, "ts": 1700000000000, "pad": ' + b"[" * 300 + b"]" * 300 + b"}",  # ignored
    ]
    fold = PartitionFold()
    decoder = Decoder()
    clear = {"global", *(f"b{i}" for i in range(5))}
    folded = fold.fold_batch(records_of(values), dict.fromkeys(clear, DEFAULT), decoder)

    reference: defaultdict[tuple[str, str], int] = defaultdict(int)
    reasons: list[str] = []
    ref_decoder = Decoder()
    for v in values:
        try:
            board, player, _, delta, _, _, _ = ref_decoder.fields(v)
        except InvalidEvent as exc:
            reasons.append(exc.reason.value)
            continue
        reference[board, player] += delta or 0
    got = {(board, player): d for board, deltas in fold.boards.items() for player, d in deltas.items()}
    assert got == dict(reference)
    assert folded.consumed == len(values) and folded.applied == len(values) - len(reasons) == fold.events
    assert [exc.reason.value for _, exc in fold.dead] == reasons
    assert fold.entries == len(reference)
    assert fold.last_offset == len(values) - 1
    assert fold.min_ts_ms == fold.max_ts_ms == 1700000000000


def test_shares_of_different_forms_merge_in_partition_order() -> None:
    """One player fed by two partitions: partition 0 summed +5, partition 1 set it to 3 then added 1. The merged
    batch is one clamp: +5 then set 3 then +1, i.e. 4 whatever the score before; the partitions' own dicts are
    not touched (a failed flush builds the batches again)."""
    from hotboard.boards import BoardDef
    from hotboard.operators import result

    w = Window()
    _fold(w, 0, 0, "g", "x", 5)
    set_3 = orjson.dumps({"board": "g", "player": "x", "op": "set", "score": 3})
    records = [record(set_3), _rec(1, "g", "x", 1)]
    fold = w.fold_for(1)
    fold.fold_checked(records, decode_all(records, Decoder()), {"g": -1}, set(), {"g": BoardDef()}, {}, {})
    [batch] = w.batches(100)
    assert batch.states is not None and batch.deltas == {} and batch.offsets == {0: 0, 1: 1}
    assert result(batch.states["x"], 100) == 4 and result(batch.states["x"], None) == 4
    assert w.folds[0].boards["g"] == {"x": 5} and "x" in w.folds[1].ops["g"]
    [again] = w.batches(100)
    assert again.states == batch.states


# --- the fast fold against the codec, on adversarial JSON (hypothesis) -------------------------------------------
# Each record is built from JSON fragments, so that the bytes, not only the values, vary: duplicate keys (orjson
# keeps the last), escaped keys, bools, floats and integer literals past 2^53 and 2^64 where integers are wanted,
# unicode escapes and lone surrogates, raw bytes that are not UTF-8, control characters, whitespace that JSON
# allows and some it does not, deep nesting in fields the contract ignores, truncations and trailing bytes.

_FAST = {"global": DEFAULT, "b1": DEFAULT, "b2": DEFAULT}


def _mostly(
    usual: st.SearchStrategy[bytes], odd: st.SearchStrategy[bytes], one_in: int = 6
) -> st.SearchStrategy[bytes]:
    """``odd`` once in ``one_in`` draws, else ``usual``: enough valid events that what the fast path accepts
    matters as much as what it refuses."""
    return st.sampled_from([usual] * (one_in - 1) + [odd]).flatmap(lambda chosen: chosen)


_WS = _mostly(
    st.sampled_from([b"", b"", b"", b" ", b"\n", b"\t", b"\r\n "]), st.sampled_from([b"\x0c", b"\xc2\xa0"]), 200
)
_PIECES = [b"p", b"q", b"1", b"-", b"a" * 64, b"\\u0000", b"\\u0007", b"\\u001f", b"\\u007f", b"\\u009f", b"\\u2028"]
_PIECES += [b"\\ud800", b"\\udc00", b"\\ud83d\\ude00", b"\\ud83d", b'\\"', b"\\\\", b"\\/", b"\\n", b"\\x", b"\\u00e9"]
_PIECES += [b"\xff", b"\xc3\xa9", b"\xed\xa0\x80", b"\xe2\x80\xa8", b"\x01", b"\x7f", b" ", b"\xf0\x9f\x98\x80"]
_STRING = _mostly(
    st.sampled_from([b'"p1"', b'"p2"', b'"p3"', b'"p\\u0031"', b'"\\ud83d\\ude00"', b'"\xc3\xa9"', b'"p\\u2028"']),
    st.one_of(
        st.lists(st.sampled_from(_PIECES), max_size=4).map(lambda parts: b'"' + b"".join(parts) + b'"'),
        st.text(max_size=6).map(orjson.dumps),
    ),
)
_EDGE_INTS = [2**53 - 1, -(2**53 - 1), 2**53, -(2**53), 2**63, -(2**63) - 1, 2**64, 10**30, 0]
_INT = _mostly(
    st.integers(-9, 9).map(lambda i: str(i).encode()),
    st.one_of(
        st.sampled_from(_EDGE_INTS).map(lambda i: str(i).encode()),
        st.sampled_from([b"-0", b"1.0", b"2.5", b"1e2", b"1E+2", b"-0.0", b"true", b"false", b"null", b'"5"']),
        st.sampled_from([b"01", b"+1", b"NaN", b"Infinity", b"1e999", b"0x1", b"[1]", b"{}"]),
    ),
)
_TS = _mostly(st.just(b"1700000000000"), st.one_of(st.sampled_from([b"0", b"-1", b"null", b"1.7e12"]), _INT))
_BOARD = _mostly(
    st.sampled_from([b'"global"', b'"b1"', b'"b2"', b'"b\\u0031"']),
    st.one_of(st.sampled_from([b'"other"', b'"bad board"']), _INT),
)
_NESTED = st.sampled_from([1, 2, 40, 300, 1100]).map(lambda n: b"[" * n + b"]" * n)
_ANY = _mostly(
    st.one_of(_STRING, _INT, st.sampled_from([b"{}", b'{"a":1}', b"[]", b"[[1]]"])),
    st.one_of(_NESTED, st.sampled_from([b'{"a":"\xff"}', b'["\\ud800"]', b"1e999", b'"\x01"'])),
)
_OP = st.one_of(st.sampled_from([b'"incr"', b'"set"', b'"decr"', b'"best"', b"null", b'"INCR"', b"1"]), _ANY)
_META = st.one_of(st.sampled_from([b"null", b"{}", b'{"a":1}', b"[]", b'{"a":' + b"[" * 40 + b"]" * 40 + b"}"]), _ANY)
_FIELD = {b"board": _BOARD, b"player": _STRING, b"delta": _INT, b"ts": _TS, b"score": _INT, b"op": _OP}
_FIELD |= {b"meta": _META, b"pad": _ANY, b"pl\\u0061yer": _STRING, b"Player": _STRING, b"": _ANY, b"delta ": _INT}


@st.composite
def _json_event(draw: st.DrawFn) -> bytes | None:
    """One record value: mostly the usual event shape, with fields left out, repeated and added."""
    shape = draw(st.sampled_from(["event"] * 15 + ["tombstone", "not an object", "truncated", "trailing", "bom"]))
    if shape == "tombstone":
        return None
    if shape == "not an object":
        return draw(st.one_of(_ANY, st.just(b'[{"player": "p1", "delta": 1}]')))
    usual = [b"board", b"player", b"delta", b"ts"]
    keys = [k for k in usual if draw(st.sampled_from([True] * 9 + [False]))]
    if draw(st.sampled_from([False, False, True])):  # duplicates, extra and odd fields
        keys += draw(st.lists(st.sampled_from(sorted(_FIELD)), min_size=1, max_size=3))
    keys = draw(st.permutations(keys))
    pairs = [draw(_WS) + b'"' + k + b'"' + draw(_WS) + b":" + draw(_WS) + draw(_FIELD[k]) + draw(_WS) for k in keys]
    value = draw(_WS) + b"{" + b",".join(pairs) + b"}" + draw(_WS)
    if shape == "truncated":
        return value[: draw(st.integers(0, max(0, len(value) - 1)))]
    if shape == "trailing":
        return value + draw(st.sampled_from([b"x", b"\x00", b"}", b"{}", b"\xff"]))
    return b"\xef\xbb\xbf" + value if shape == "bom" else value


def _fold_everything(values: list[bytes | None], fast: dict[str, BoardDef]) -> tuple[PartitionFold, list[int]]:
    """fold_batch over ``values`` again and again, stepping over each record it stops at (a valid event it
    leaves to the general fold); returns the fold and the offsets it stopped at."""
    fold, decoder, records, stops, start = PartitionFold(), Decoder(), records_of(values), [], 0
    while start < len(records):
        start += fold.fold_batch(records[start:], fast, decoder).consumed
        if start < len(records):
            stops.append(start)
            start += 1
    return fold, stops


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_json_event(), min_size=1, max_size=24))
@example([b'{"player": "p1", "delta": 1, "ts": -1, "ts": 5}', b'{"player": "p1", "delta": true, "delta": 2}'])
@example([b'{"player": "p1", "delta": 1, "delta": 9007199254740992}', b'{"player": "p1", "player": "p2"}'])
@example([b'{"player": "p\\u0000", "delta": 1}', b'{"player": "p1", "delta": 1, "pad": "\xff"}'])
@example([b'{"player": "p1", "delta": 1, "pad": ' + b"[" * 1100 + b"]" * 1100 + b"}", b'{"player": "\\ud800"}'])
@example([b'{"board": "b1", "board": null, "player": "p1", "delta": 1}', b'{"pl\\u0061yer": "p2", "delta": 3}'])
def test_fold_batch_agrees_with_the_codec_on_adversarial_json(values: list[bytes | None]) -> None:
    """Record by record, what the codec says decides: an invalid record is dead-lettered with its reason, a valid
    plain ``incr`` of a fast board is summed with the codec's own values, and any other valid event stops the
    fast fold (it is the general fold's); the fast path may change none of it."""
    fold, stops = _fold_everything(values, _FAST)
    totals: defaultdict[tuple[str, str], int] = defaultdict(int)
    reasons, expected_stops = [], []
    calls: list[list[int | None]] = [[]]  # the event times folded by each fold_batch call
    reference = Decoder()
    for i, v in enumerate(values):
        try:
            board, player, op, delta, _, ts, meta = reference.fields(v)
        except InvalidEvent as exc:
            reasons.append(exc.reason.value)
            continue
        if board not in _FAST or op not in (None, "incr") or meta is not None or delta is None:
            expected_stops.append(i)
            calls.append([])
            continue
        totals[board, player] += delta
        calls[-1].append(ts)
    assert stops == expected_stops
    assert [exc.reason.value for _, exc in fold.dead] == reasons
    got = {(board, player): d for board, deltas in fold.boards.items() for player, d in deltas.items()}
    assert got == dict(totals)
    assert fold.events == len(values) - len(reasons) - len(stops) and fold.entries == len(totals)
    # freshness samples the first and the last event each call folds
    noted = [ts for times in calls if times for ts in (times[0], times[-1]) if ts is not None]
    assert (fold.min_ts_ms, fold.max_ts_ms) == ((min(noted), max(noted)) if noted else (None, None))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_json_event(), min_size=1, max_size=24), st.booleans())
@example(
    [b'{"player": "p1", "delta": 1, "ts": -1, "ts": 5}', b'{"board": "new", "player": "p\\u2028", "delta": 1}'], True
)
@example([b'{"player": "p\\u0000", "delta": 1}', b'{"player": "p1", "delta": 1, "pad": "\xff"}'], False)
def test_the_checked_folds_decoding_agrees_with_the_codec(values: list[bytes | None], known: bool) -> None:
    """What the checked fold reads (``plain_event.decode_all``: the typed decoder for the usual shape, the codec
    for the rest) is what the codec alone reads, field for field and reason for reason, with the boards already
    validated or not."""
    ours, reference = Decoder(), Decoder()
    for decoder in (ours, reference) if known else ():
        decoder.known_boards.update(_FAST)
    records = records_of(values)
    got = [(f.reason, f.detail) if isinstance(f, InvalidEvent) else f for f in plain_event.decode_all(records, ours)]
    want = [(f.reason, f.detail) if isinstance(f, InvalidEvent) else f for f in decode_all(records, reference)]
    assert got == want
    assert ours.known_boards == reference.known_boards
