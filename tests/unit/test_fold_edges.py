"""The fold's edges: the fast loop refuses what the codec refuses, and a board keeps one definition per window
(its summed and stepped events together, and across partitions)."""

from __future__ import annotations

import orjson
import pytest

from hotboard.boards import DEFAULT, BoardDef
from hotboard.codec import Decoder, InvalidEvent, decode_all
from hotboard.records import Record
from ingest.pending import Window
from tests.records import json_record


def _rec(offset: int, body: dict[str, object]) -> Record:
    return json_record(body, offset, timestamp=1000 + offset)


@pytest.mark.parametrize("score", ["x", 1.5, 2**60, [1], True])
def test_fast_path_refuses_what_the_decoder_refuses(score: object) -> None:
    """{delta, score: <invalid>} on a summed board: the decoder dead-letters it (bad_type / out_of_range), and
    so must the fast loop, or the same record would count in the steady state and be dead-lettered on a replay
    or a rebuild (which go through fold_checked)."""
    body = {"board": "b", "player": "p", "delta": 5, "score": score}
    with pytest.raises(InvalidEvent):
        Decoder().fields(orjson.dumps(body))
    fold = Window().fold_for(0)
    fold.fold_batch([_rec(0, body)], {"b": DEFAULT}, Decoder())
    assert fold.boards.get("b", {}) == {}, "fast path folded an event the decoder calls invalid"
    assert len(fold.dead) == 1


def test_a_board_summed_then_stepped_in_one_window_keeps_its_sums() -> None:
    """A partition's fast path holds board b under the default (state.fast), then the definition cache (LRU,
    bounded) evicts b and reloads it, declared ``earliest`` meanwhile (b still empty). The next non-plain event
    folds into ``steps``: the window keeps the summed deltas too, and its batch carries the definition it was
    folded under (which the script then refuses), not the late one."""
    decoder = Decoder()
    window = Window()
    fold = window.fold_for(0)
    fast: dict[str, BoardDef] = {}
    clear: set[str] = set()
    first = [_rec(0, {"board": "b", "player": "a", "delta": 1})]
    fold.fold_checked(first, decode_all(first, decoder), {"b": -1}, clear, {"b": DEFAULT}, fast, {})
    more = [_rec(1, {"board": "b", "player": "a", "delta": 10})]
    fold.fold_batch(more, fast, decoder)
    late = BoardDef("desc", "incr", "earliest")
    last = [_rec(2, {"board": "b", "player": "z", "delta": 3, "meta": {"n": 1}})]
    fold.fold_checked(last, decode_all(last, decoder), {"b": -1}, clear, {"b": late}, fast, {})
    [batch] = window.batches(100)
    assert batch.definition == DEFAULT  # pinned for the window: the script refuses it (the stored one is late)
    carried = set(batch.deltas) | set(batch.steps or {}) | set(batch.states or {})
    assert carried == {"a", "z"}, f"player a's 11 points are dropped: batch carries {carried}"


def test_two_partitions_folded_under_two_definitions_flush_under_one_spec() -> None:
    """The same race across partitions: partition 0 folded b as plain incr (sums), partition 1 under
    ``desc/set``. Merged into one batch under one spec, one partition's events would be applied under the other's
    definition instead of being refused; so each definition gets its own batch (or spec)."""
    decoder = Decoder()
    window = Window()
    for p, definition, body in (
        (0, BoardDef("desc", "set", "shared"), {"board": "b", "player": "a", "score": 7}),
        (1, DEFAULT, {"board": "b", "player": "c", "delta": 4}),
    ):
        recs = [_rec(0, body)]
        window.fold_for(p).fold_checked(recs, decode_all(recs, decoder), {"b": -1}, set(), {"b": definition}, {}, {})
    batches = window.batches(100)
    specs = {b.definition.spec for b in batches}
    assert len(batches) == 2 or len(specs) == 2, f"one batch, one spec {specs}: a mismatch is never refused"
