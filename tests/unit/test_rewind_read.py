"""The rewind's read on a Redis Cluster (flusher/rewind_read.py, through the real ``ClusterSink.load_rewinds``)
over a fake transport that answers a distinct value per (partition, board) and per checkpoint field: every
partition's view holds its own values, in its boards' order, across chunk boundaries inside one partition's
boards; a failed reply fails its own partition, never the others, and never turns into a guessed view. Two
seams: ``routed`` faked, and only each master's exchange faked (the real ``routed`` groups the commands by
master over a three-master slot map and puts the replies back in order)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pytest
from redis.crc import key_slot
from redis.exceptions import ResponseError

from flusher import rewind_read
from flusher.batch import NO_WATERMARK, RewindView
from flusher.cluster import ClusterSink
from hotboard import keys
from hotboard.script import Script

#: partition -> its boards, in the order asked. With a chunk of 5 the 16 pairs go out as 5, 5, 5, 1: partition
#: 0's boards cross the first boundary, 5's the third; boards shared between partitions are asked in other orders.
WANTED = {
    0: ["a", "b", "c", "d", "e", "f", "g"],
    1: ["b", "a"],
    2: ["z"],
    3: [],
    5: ["g", "f", "e", "y", "a", "x"],
}
#: Pairs whose watermark is absent (NO_WATERMARK in the view).
ABSENT = {(1, "a"), (5, "e")}
#: Partitions whose restoring mark (bare, or naming its run) is present.
RESTORING, RESTORING_BY = {2}, {5}


def _mark(p: int, board: str) -> int:
    return 1000 * p + ord(board)


def _command(packed: bytes) -> list[str]:
    """A RESP array of bulk strings back into its parts."""
    lines = packed.decode().split("\r\n")
    return lines[2::2][: int(lines[0][1:])]


class _Hash:
    """The checkpoint hash: a distinct value for each partition's checkpoint fields."""

    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    async def hmget(self, key: str, fields: Sequence[str]) -> list[Any]:
        assert key == keys.checkpoint_key("scores")
        self.asked.append(list(fields))
        return [self._value(f) for f in fields]

    @staticmethod
    def _value(field: str) -> bytes | None:
        p, _, name = field.partition(":")
        part = int(p)
        answers = {
            "": 500 + part,
            "gen": 10 + part,
            "restoring": 77 if part in RESTORING else None,
            "restoring_by": 88 if part in RESTORING_BY else None,
            "epoch": 20 + part,
        }
        value = answers[name]
        return None if value is None else str(value).encode()


def _reply(partition_of: Mapping[str, int], failing: Collection[tuple[int, str]], packed: bytes, key: str) -> Any:
    """The answer to one HGET, from its own key and field: a distinct value per (partition, board)."""
    name, hkey, field = _command(packed)
    assert (name, hkey) == ("HGET", key), "each command routed by its own key's slot"
    board, p = hkey.removeprefix(f"{keys.PREFIX}:{{").removesuffix("}:applied"), partition_of[field]
    if (p, board) in failing:
        return ResponseError(f"CLUSTERDOWN the slot of {board} is not served")
    return None if (p, board) in ABSENT else str(_mark(p, board)).encode()


class _Transport(ClusterSink):
    """The real ClusterSink over a fake ``routed`` answering each HGET by its own key and field; ``failing``
    pairs answer an error reply (a node error for that board's slot)."""

    def __init__(self, failing: frozenset[tuple[int, str]] = frozenset(), client: Any = None) -> None:
        self.hash = _Hash()
        super().__init__(client or self.hash, "scores")  # type: ignore[arg-type]
        self.failing = failing
        self.rounds: list[int] = []
        self.partition_of = {self.field(p): p for p in range(8)}

    async def routed(self, commands: list[bytes], route: list[str], used: Sequence[Script], wait: bool) -> list[Any]:
        assert not used and not wait
        self.rounds.append(len(commands))
        return [_reply(self.partition_of, self.failing, c, k) for c, k in zip(commands, route, strict=True)]


class _Master:
    """A master of the fake slot map: its connection is itself."""

    def __init__(self, first_slot: int, end_slot: int) -> None:
        self.slots = range(first_slot, end_slot)
        self.exchanges = 0

    def acquire_connection(self) -> _Master:
        return self

    def release(self, conn: _Master) -> None:
        assert conn is self


class _SlotMap:
    def __init__(self) -> None:
        self.masters = [_Master(0, 5461), _Master(5461, 10923), _Master(10923, 16384)]

    def get_node_from_slot(self, slot: int) -> _Master:
        return next(m for m in self.masters if slot in m.slots)


class _Cluster:
    """A client whose slot map has three masters and whose checkpoint hash is ``hash``."""

    def __init__(self, hash_: _Hash) -> None:
        self.nodes_manager = _SlotMap()
        self.hmget = hash_.hmget

    async def initialize(self) -> None:
        pass


class _Wire(_Transport):
    """The real ``routed`` too (commands grouped by master, one round each, replies put back in order): only
    each master's exchange on its connection is faked."""

    def __init__(self, failing: frozenset[tuple[int, str]] = frozenset()) -> None:
        hash_ = _Hash()
        super().__init__(failing, _Cluster(hash_))
        self.hash = hash_

    async def routed(self, commands: list[bytes], route: list[str], used: Sequence[Script], wait: bool) -> list[Any]:
        self.rounds.append(len(commands))
        return await ClusterSink.routed(self, commands, route, used, wait)

    async def _exchange(
        self, conn: Any, commands: list[bytes], ask: list[bool], key: str, wait: bool
    ) -> tuple[list[Any], int | None]:
        assert isinstance(conn, _Master) and not any(ask) and not wait
        conn.exchanges += 1
        replies = []
        for packed in commands:
            _, hkey, _ = _command(packed)
            assert int(key_slot(hkey.encode())) in conn.slots, "sent to the master of its slot"
            replies.append(_reply(self.partition_of, self.failing, packed, hkey))
        return replies, None


TRANSPORTS = [_Transport, _Wire]


def _expected(p: int) -> RewindView:
    marks = {b: NO_WATERMARK if (p, b) in ABSENT else _mark(p, b) for b in WANTED[p]}
    return RewindView(marks, 500 + p, 10 + p, p in RESTORING | RESTORING_BY, 20 + p)


@pytest.fixture
def chunk_of_5(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rewind_read, "REWIND_CHUNK", 5)


@pytest.mark.usefixtures("chunk_of_5")
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_each_partition_reads_its_own_watermarks_in_order_across_chunk_boundaries(
    transport: type[_Transport],
) -> None:
    sink = transport()
    views = await sink.load_rewinds(WANTED)
    assert list(views) == list(WANTED)
    for p in WANTED:
        view = views[p]
        assert isinstance(view, RewindView)
        assert view == _expected(p), f"partition {p}"
        assert list(view.marks) == WANTED[p], f"partition {p}: its boards in the order asked"
    assert sink.rounds == [5, 5, 5, 1], "chunks of REWIND_CHUNK watermarks"
    if isinstance(sink, _Wire):  # the replies of three masters put back in order, chunk by chunk
        assert all(m.exchanges >= 2 for m in sink._cluster.nodes_manager.masters)  # type: ignore[attr-defined]
    assert len(sink.hash.asked) == 1 and len(sink.hash.asked[0]) == 5 * len(WANTED)


@pytest.mark.usefixtures("chunk_of_5")
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_failed_reply_fails_its_partition_alone(transport: type[_Transport]) -> None:
    sink = transport(failing=frozenset({(5, "y")}))  # in the last full chunk, beside partition 2's board
    views = await sink.load_rewinds(WANTED)
    failed = views[5]
    assert isinstance(failed, ResponseError) and "CLUSTERDOWN" in str(failed)
    assert {p: views[p] for p in WANTED if p != 5} == {p: _expected(p) for p in WANTED if p != 5}
    assert [f for f in sink.hash.asked[0] if f.startswith("5")] == [], "no checkpoint fields for a failed one"


async def test_no_partition_no_read() -> None:
    sink = _Transport()
    assert await sink.load_rewinds({}) == {}
    assert sink.rounds == [] and sink.hash.asked == []
