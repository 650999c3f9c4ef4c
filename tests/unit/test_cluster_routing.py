"""The cluster sink's pure pieces: a FLUSH call never holds boards of two slots (Redis would refuse it with
CROSSSLOT), the groups still break at the player and board bounds, and the replies of the ASKING commands sent
before redirected calls are stripped so that each reply stays with its own command."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import count
from typing import Any

import hiredis
import pytest
from redis.asyncio import RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.crc import key_slot
from redis.exceptions import NoScriptError

from flusher.batch import BoardBatch, BoardResult, ExpectedWatermark, Outcome
from flusher.cluster import ClusterSink, _skip_asking, board_slot
from flusher.redis_sink import _FLUSH, RedisSink
from hotboard.boards import BoardDef


def same_slot(board: str, n: int) -> list[str]:
    """``n`` boards sharing ``board``'s slot, ``board`` first (a bounded search: 16,384 slots)."""
    found = [board]
    for i in count():
        assert i < 2_000_000
        if len(found) == n:
            return found
        name = f"s{i}"
        if board_slot(name) == board_slot(board):
            found.append(name)
    raise AssertionError


def sink(script_players: int = 4000) -> ClusterSink:
    # never connects: only the commands are built
    client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", 1)])
    return ClusterSink(client, "t", script_players)


def commands(s: ClusterSink, batches: list[BoardBatch]) -> list[tuple[bool, list[int], list[bytes]]]:
    """(an APPLY?, the batches it carries, its KEYS) per command."""
    owners: list[tuple[bool, list[int]]] = []
    packed = list(s._commands(batches, lambda board, partition: -1, owners))
    out = []
    for command, (apply, owned) in zip(packed, owners, strict=True):
        reader = hiredis.Reader()
        reader.feed(command)
        parts: list[bytes] = reader.gets()
        assert parts[0] == b"EVALSHA" and (parts[1] == _FLUSH.sha.encode()) != apply
        out.append((apply, owned, parts[3 : 3 + int(parts[2])]))
    return out


def batch(board: str, players: int = 1, definition: BoardDef | None = None) -> BoardBatch:
    deltas = {f"p{i}": 1 for i in range(players)}
    return BoardBatch(board, deltas, {0: 7}, definition or BoardDef())


def slots_of(key_list: list[bytes]) -> set[int]:
    return {int(key_slot(k)) for k in key_list}


def test_a_flush_call_holds_one_slot_and_breaks_where_the_slot_changes() -> None:
    a1, a2, a3 = same_slot("a", 3)
    b1, b2 = same_slot("b", 2)
    dense = BoardDef(ties="dense")  # an APPLY of its own, between two boards of one slot: the group goes on
    batches = [batch(a1), batch(a2), batch("x", definition=dense), batch(a3), batch(b1), batch(b2), batch(a1)]
    got = commands(sink(), batches)
    assert [(apply, owned) for apply, owned, _ in got] == [
        (True, [2]),
        (False, [0, 1, 3]),
        (False, [4, 5]),
        (False, [6]),  # back to a's slot: a new group (the cluster sink orders by slot first, so this is rare)
    ]
    for _, _, key_list in got:
        assert len(slots_of(key_list)) == 1, key_list


BOUNDS = [(3, 7, [[0, 1], [2, 3], [4]]), (1, 4000, [[0, 1, 2, 3, 4]])]


@pytest.mark.parametrize(("players", "per_call", "expected"), BOUNDS)
def test_the_player_bound_still_breaks_a_group_of_one_slot(
    players: int, per_call: int, expected: list[list[int]]
) -> None:
    boards = same_slot("c", 5)
    got = commands(sink(per_call), [batch(b, players) for b in boards])
    assert [owned for _, owned, _ in got] == expected


async def test_the_flush_sends_by_slot_and_answers_in_the_order_given(monkeypatch: pytest.MonkeyPatch) -> None:
    boards = ["q", "r", "s", "t", "u", "v"]
    sent: list[str] = []

    async def echo(self: RedisSink, batches: Sequence[BoardBatch], expected: ExpectedWatermark) -> list[BoardResult]:
        sent.extend(b.board for b in batches)
        return [BoardResult(b.board, Outcome.APPLIED, b.players) for b in batches]

    monkeypatch.setattr(RedisSink, "flush", echo)
    results = await sink().flush([batch(b) for b in boards], lambda board, partition: -1)
    assert sent == sorted(boards, key=board_slot) and sent != boards  # reordered: the test means something
    assert [r.board for r in results] == boards


@pytest.mark.parametrize(
    ("replies", "ask", "kept"),
    [
        ([b"r0", b"r1"], [False, False], [b"r0", b"r1"]),
        ([b"OK", b"r0", b"r1"], [True, False], [b"r0", b"r1"]),
        ([b"r0", b"OK", b"r1", b"OK", b"r2"], [False, True, True], [b"r0", b"r1", b"r2"]),
        ([b"OK", b"r0"], [True], [b"r0"]),
    ],
)
def test_asking_replies_are_stripped_and_each_reply_stays_with_its_command(
    replies: list[Any], ask: list[bool], kept: list[Any]
) -> None:
    assert _skip_asking(replies, ask) == kept


async def test_a_noscript_reply_loads_the_scripts_on_that_master_and_resends_just_its_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A master that lost its scripts (a promoted replica: SCRIPT LOAD is not replicated) answers NOSCRIPT: the
    round loads the scripts on that master only, sends just those calls once more on the same connection, and
    keeps the fewest replica acks of the two exchanges."""
    loaded: list[tuple[Any, ...]] = []
    exchanges: list[tuple[list[bytes], list[bool]]] = []
    answers: Iterator[tuple[list[Any], int | None]] = iter(
        [([NoScriptError("NOSCRIPT"), b"r1", NoScriptError("NOSCRIPT")], 2), ([b"r0", b"r2"], 1)]
    )

    class Node:
        def acquire_connection(self) -> str:
            return "conn"

        def release(self, conn: str) -> None:
            assert conn == "conn"

        async def execute_command(self, *args: Any) -> Any:
            loaded.append(args)
            return b"sha"

    async def exchange(
        self: ClusterSink, conn: Any, commands: list[bytes], ask: list[bool], key: str, wait: bool
    ) -> tuple[list[Any], int | None]:
        assert conn == "conn" and key == "k0" and wait
        exchanges.append((commands, ask))
        return next(answers)

    monkeypatch.setattr(ClusterSink, "_exchange", exchange)
    node: Any = Node()
    asking: dict[int, ClusterNode] = {2: node}
    got = await sink()._round(node, [0, 1, 2], [b"c0", b"c1", b"c2"], ["k0", "k1", "k2"], asking, [_FLUSH], True)
    assert got == ([b"r0", b"r1", b"r2"], 1)
    assert loaded == [("SCRIPT", "LOAD", _FLUSH.text)]
    assert exchanges == [([b"c0", b"c1", b"c2"], [False, False, True]), ([b"c0", b"c2"], [False, True])]
