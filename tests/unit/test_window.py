"""The fold: per-partition deltas, merged per board at flush time, with the watermark each board gets; the
checked fold that skips what a board has already applied; bounded batches and exact deltas."""

from __future__ import annotations

import random
from collections import defaultdict

import orjson
import pytest

from flusher.batch import MAX_EXACT, BoardBatch
from hotboard.boards import DEFAULT
from hotboard.codec import Decoder, InvalidEvent, boards_to_check, decode_all
from hotboard.records import Record
from ingest.pending import Window
from ingest.window import PartitionFold
from tests.records import json_record, record, records_of


def _rec(offset: int, board: str, player: str, delta: int) -> Record:
    return json_record({"board": board, "player": player, "delta": delta}, offset)


def _fold(window: Window, partition: int, offset: int, board: str, player: str, delta: int) -> None:
    fold = window.fold_for(partition)
    done = fold.fold_batch([_rec(offset, board, player, delta)], {board: DEFAULT}, Decoder())
    assert done.consumed == 1


def _batches(w: Window, max_players: int = 10_000) -> dict[str, BoardBatch]:
    batches, saturated = w.batches(max_players)
    assert saturated == 0
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
    assert w.parts[0].boards["g"] == {"a": 1}


def test_batches_stay_within_max_players_without_splitting_a_partition() -> None:
    w = Window()
    for p in range(4):
        for i in range(30):
            _fold(w, p, i, "g", f"p{p}-{i}", 1)
    batches, _ = w.batches(max_players=70)
    assert [sorted(b.offsets) for b in batches] == [[0, 1], [2, 3]]
    assert all(len(b.deltas) <= 70 for b in batches)
    assert sum(len(b.deltas) for b in batches) == 120


def test_a_window_sum_beyond_2_53_is_held_at_the_exact_range() -> None:
    w = Window()
    fold = w.fold_for(0)
    records = [_rec(i, "g", "whale", MAX_EXACT) for i in range(3)] + [_rec(3, "g", "minnow", -MAX_EXACT)]
    fold.fold_batch(records, {"g": DEFAULT}, Decoder())
    [batch], saturated = w.batches(10_000)
    assert batch.deltas == {"whale": MAX_EXACT, "minnow": -MAX_EXACT}
    assert saturated == 1
    assert fold.boards["g"]["whale"] == 3 * MAX_EXACT  # the fold itself stays exact; only what is sent is held


def test_totals_match_reference_for_random_streams() -> None:
    rng = random.Random(9)
    w = Window()
    ref: defaultdict[tuple[str, str], int] = defaultdict(int)
    for i in range(5000):
        p, board, player, delta = rng.randrange(4), rng.choice("abc"), f"p{rng.randrange(300)}", rng.randint(-9, 9)
        _fold(w, p, i, board, player, delta)
        ref[board, player] += delta
    got = {(b.board, player): d for b in w.batches(10_000)[0] for player, d in b.deltas.items()}
    assert got == dict(ref)


def test_drop_forgets_only_the_revoked_partitions() -> None:
    w = Window()
    _fold(w, 0, 1, "g", "a", 1)
    _fold(w, 1, 1, "g", "b", 1)
    w.drop([0])
    assert [b.deltas for b in w.batches(10_000)[0]] == [{"b": 1}]
    assert w.offsets() == {1: 1}


def test_empty_window_and_timestamps() -> None:
    w = Window()
    assert w.is_empty() and w.batches(10) == ([], 0) and w.entries == 0
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
    done = fold.fold_checked(records, decode_all(records, Decoder()), watermarks, clear, defs, {})
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
    fold.fold_checked(records, decode_all(records, Decoder()), {"g": -1}, set(), {"g": BoardDef()}, {})
    [batch] = w.batches(100)[0]
    assert batch.states is not None and batch.deltas == {} and batch.offsets == {0: 0, 1: 1}
    assert result(batch.states["x"], 100) == 4 and result(batch.states["x"], None) == 4
    assert w.parts[0].boards["g"] == {"x": 5} and "x" in w.parts[1].ops["g"]
    [again] = w.batches(100)[0]
    assert again.states == batch.states
