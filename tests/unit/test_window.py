"""The fold: per-partition deltas, merged per board at flush time, with the watermark each board gets."""

from __future__ import annotations

import random
from collections import defaultdict
from types import SimpleNamespace

import pytest

from ingest.codec import Decoder, InvalidEvent
from ingest.window import BoardBatch, PartitionFold, Window
from ingest.worker import resume_offset


def _fold(window: Window, partition: int, offset: int, board: str, player: str, delta: int) -> None:
    fold = window.fold_for(partition)
    fold.add(board, player, delta)
    fold.last_offset = offset


def test_fold_sums_per_board_and_player() -> None:
    w = Window()
    _fold(w, 0, 0, "g", "a", 5)
    _fold(w, 0, 1, "g", "a", -2)
    _fold(w, 0, 2, "g", "b", 1)
    _fold(w, 0, 3, "s", "a", 7)
    assert w.entries == 3
    assert w.events == 4
    batches = {b.board: b for b in w.batches()}
    assert batches["g"] == BoardBatch("g", {"a": 3, "b": 1}, {0: 3})
    assert batches["s"] == BoardBatch("s", {"a": 7}, {0: 3})


def test_merge_across_partitions_sums_and_names_every_partition() -> None:
    w = Window()
    _fold(w, 0, 10, "g", "a", 1)
    _fold(w, 1, 20, "g", "a", 2)  # a producer that did not key by player: same player on two partitions
    _fold(w, 2, 30, "g", "c", 3)
    _fold(w, 2, 31, "other", "c", 4)
    batches = {b.board: b for b in w.batches()}
    assert batches["g"].deltas == {"a": 3, "c": 3}
    assert batches["g"].offsets == {0: 10, 1: 20, 2: 31}
    assert batches["other"].offsets == {2: 31}
    # merging never mutates a partition's own dict (it is retried as is after a failed flush)
    assert w.parts[0].boards["g"] == {"a": 1}


def test_totals_match_reference_for_random_streams() -> None:
    rng = random.Random(9)
    w = Window()
    ref: defaultdict[tuple[str, str], int] = defaultdict(int)
    for i in range(5000):
        p, board, player, delta = rng.randrange(4), rng.choice("abc"), f"p{rng.randrange(300)}", rng.randint(-9, 9)
        _fold(w, p, i, board, player, delta)
        ref[board, player] += delta
    got = {(b.board, player): d for b in w.batches() for player, d in b.deltas.items()}
    assert got == dict(ref)


def test_drop_forgets_only_the_revoked_partitions() -> None:
    w = Window()
    _fold(w, 0, 1, "g", "a", 1)
    _fold(w, 1, 1, "g", "b", 1)
    w.drop([0])
    assert [b.deltas for b in w.batches()] == [{"b": 1}]
    assert w.offsets() == {1: 1}


def test_empty_window_and_timestamps() -> None:
    w = Window()
    assert w.is_empty() and w.batches() == [] and w.entries == 0
    fold = w.fold_for(0)
    assert w.is_empty()  # a fold with nothing in it is still empty
    fold.note_ts(5)
    fold.note_ts(3)
    fold.note_ts(9)
    assert (fold.min_ts_ms, fold.max_ts_ms) == (3, 9)


@pytest.mark.parametrize(
    ("watermarks", "expected"),
    [({}, None), ({"g": 41}, 42), ({"g": 41, "s": 7, "t": 100}, 8), ({"g": -1}, 0)],
)
def test_resume_after_the_lowest_watermark(watermarks: dict[str, int], expected: int | None) -> None:
    assert resume_offset(watermarks) == expected


def _records(values: list[bytes | None]) -> list[SimpleNamespace]:
    return [SimpleNamespace(offset=i, value=v) for i, v in enumerate(values)]


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
    fold = PartitionFold()
    decoder = Decoder()
    decoder.known_boards.add("global")
    folded = fold.fold_batch(_records(values), decoder)

    reference: defaultdict[tuple[str, str], int] = defaultdict(int)
    reasons: list[str] = []
    ref_decoder = Decoder()
    for v in values:
        try:
            board, player, delta, _ = ref_decoder.fields(v)
        except InvalidEvent as exc:
            reasons.append(exc.reason.value)
            continue
        reference[board, player] += delta
    got = {(board, player): d for board, deltas in fold.boards.items() for player, d in deltas.items()}
    assert got == dict(reference)
    assert folded == len(values) - len(reasons) == fold.events
    assert [exc.reason.value for _, exc in fold.dead] == reasons
    assert fold.entries == len(reference)
    assert fold.last_offset == len(values) - 1
    assert fold.min_ts_ms == fold.max_ts_ms == 1700000000000
