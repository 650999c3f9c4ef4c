"""The audit's pure core: a snapshot carried forward by a fold, and the verdict per player (which side is the
base follows which side is behind on the partitions of the player's events)."""

from __future__ import annotations

import pytest

from archive.audit import BoardAudit, _Board, _compare
from archive.audit_state import PlayerState, Snapshot, advance
from hotboard import operators
from hotboard.boards import DEFAULT, BoardDef
from ingest.folds import PartitionFold

EARLIEST = BoardDef(ties="earliest")


def fold_of(**tables: dict[str, object]) -> PartitionFold:
    fold = PartitionFold()
    for name, players in tables.items():
        getattr(fold, name)["b"] = dict(players)
    return fold


@pytest.mark.parametrize(
    ("fold", "definition", "before", "after"),
    [
        (fold_of(boards={"p": 5}), DEFAULT, (10, None, None), (15, None, None)),
        (fold_of(boards={"p": 5}), DEFAULT, None, (5, None, None)),
        (fold_of(ops={"p": operators.event("set", 3)}), DEFAULT, (10, None, b"{}"), (3, None, b"{}")),
        (fold_of(ops={"p": operators.event("decr", 30)}), DEFAULT, (10, None, None), (0, None, None)),
        (fold_of(boards={"p": 1}, metas={"p": b'{"a":1}'}), DEFAULT, (1, None, b"{}"), (2, None, b'{"a":1}')),
        (fold_of(steps={"p": [("incr", 2, 700)]}), EARLIEST, (4, 100, None), (6, 700, None)),
        (fold_of(steps={"p": [("best", 2, 700)]}), EARLIEST, (4, 100, None), (4, 100, None)),
        (fold_of(), DEFAULT, (4, None, None), (4, None, None)),
    ],
)
def test_advance(fold: PartitionFold, definition: BoardDef, before: PlayerState | None, after: PlayerState) -> None:
    assert advance(fold, "b", "p", before, definition) == after


def board(redis: dict[str, PlayerState], archive: dict[str, PlayerState], r: int, a: int) -> _Board:
    return _Board("b", DEFAULT, Snapshot(redis, {0: r}), Snapshot(archive, {0: a}))


def verdict(b: _Board, forward: PartitionFold, backward: PartitionFold) -> BoardAudit:
    out = BoardAudit("b")
    _compare(b, forward, backward, out)
    return out


def test_redis_ahead_equals_the_archive_plus_the_events() -> None:
    b = board({"p": (15, None, None), "q": (1, None, None)}, {"p": (10, None, None), "q": (1, None, None)}, 9, 4)
    assert verdict(b, fold_of(boards={"p": 5}), PartitionFold()).exact


def test_archive_ahead_equals_redis_plus_the_events() -> None:
    b = board({"p": (10, None, None)}, {"p": (15, None, None)}, 4, 9)
    assert verdict(b, PartitionFold(), fold_of(boards={"p": 5})).exact


def test_a_corrupted_player_is_named_with_its_board() -> None:
    b = board({"p": (16, None, None), "q": (2, None, None)}, {"p": (10, None, None), "q": (1, None, None)}, 9, 4)
    out = verdict(b, fold_of(boards={"p": 5}), PartitionFold())
    assert [(d.board, d.player, d.basis) for d in out.differences] == [
        ("b", "p", "archive + events"),
        ("b", "q", "archive"),
    ]


def test_a_player_only_one_side_holds_differs() -> None:
    out = verdict(board({"p": (1, None, None)}, {}, 4, 4), PartitionFold(), PartitionFold())
    assert [(d.player, d.redis, d.expected) for d in out.differences] == [("p", (1, None, None), None)]


def test_events_on_partitions_moving_opposite_ways_leave_the_player_unverified() -> None:
    out = verdict(board({}, {}, 4, 4), fold_of(boards={"p": 1}), fold_of(boards={"p": 1}))
    assert out.unverified_players == ["p"] and not out.exact
