"""Board semantics through the whole fleet: declared boards of every kind, mixed operators and metadata, one
worker killed with SIGKILL while events flow; every board ends equal to the reference computed from the events,
scores and tie times, and a definition declared while workers run is honoured before the board's first event."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import cast

import pytest
import redis

from cli.devstack import RedisServer
from hotboard import keys
from hotboard.boards import BoardDef
from tests.integration.conftest import Spawn
from tests.integration.harness import Feeder, declare_boards, kill_while_feeding, read_topic, wait_for
from tests.semantics import Ev, comparable, random_events, read_board, reference

pytestmark = pytest.mark.integration

BOARDS = {
    "race": BoardDef("desc", "best", "earliest"),
    "speedrun": BoardDef("asc", "best", "dense"),
    "coins": BoardDef("desc", "incr", "shared"),  # with op overrides: set, decr, best
    "lives": BoardDef("desc", "decr", "earliest"),
    "level": BoardDef("asc", "set", "lexical"),
}


def _exact(url: str, expected: dict[str, dict[str, tuple[int, int]]]) -> Callable[[], bool]:
    def check() -> bool:
        r = redis.Redis.from_url(url)
        try:
            return all(comparable(read_board(r, b, BOARDS[b]), BOARDS[b]) == want for b, want in expected.items())
        finally:
            r.close()

    return check


def test_every_board_kind_is_exact_through_kill_9(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    declare_boards(redis_server.url, BOARDS)
    rng = random.Random(10)
    events = {b: random_events(rng, d, 6000, players=300, mixed=b == "coins") for b, d in BOARDS.items()}
    expected = {b: comparable(reference(e, BOARDS[b])[0], BOARDS[b]) for b, e in events.items()}
    topic = topic_factory(4)
    victim = spawn(redis_server.url, topic, "victim")
    steady = spawn(redis_server.url, topic, "steady")
    feeder = Feeder(kafka, topic, _in_order(events, BOARDS, rng), rate=1200)  # 25 s of events: the kills land in them
    feeder.start()
    kill_while_feeding(victim, feeder, 2)
    feeder.finish()
    wait_for(_exact(redis_server.url, expected), timeout_s=90, what="every board equal to the reference")
    r = redis.Redis.from_url(redis_server.url)
    try:
        metas = {b: reference(e, BOARDS[b])[1] for b, e in events.items()}
        for board, want in metas.items():
            held = cast("dict[bytes, bytes]", r.hgetall(keys.player_meta_key(board)))
            assert {k.decode(): v for k, v in held.items()} == want
    finally:
        r.close()
    assert steady.metric("hotboard_rebalances_total") >= 2


def test_a_board_declared_while_workers_run_is_honoured_before_its_first_event(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    topic = topic_factory(2)
    worker = spawn(redis_server.url, topic)
    worker.wait_ready()
    warm = [Ev(f"w{i}", None, 1, 1) for i in range(50)]
    Feeder(kafka, topic, [(e.player.encode(), e.value("warm", BoardDef())) for e in warm], rate=0).finish()
    worker.wait_metric("hotboard_windows_total", 1, result="flushed")

    definition = BoardDef("desc", "best", "earliest")

    declare_boards(redis_server.url, {"fresh": definition})
    events = [Ev("a", None, 5, 10), Ev("a", None, 3, 11), Ev("b", None, 5, 9), Ev("c", None, 7, 12)]
    Feeder(kafka, topic, [(e.player.encode(), e.value("fresh", definition)) for e in events], rate=0).finish()
    expected = comparable(reference(events, definition)[0], definition)
    assert expected == {"a": (5, 10), "b": (5, 9), "c": (7, 12)}

    def exact() -> bool:
        r = redis.Redis.from_url(redis_server.url)
        try:
            return read_board(r, "fresh", definition) == expected
        finally:
            r.close()

    wait_for(exact, timeout_s=30, what="the declared board's best scores and tie times")


def test_seasons_are_exact_through_kill_9_across_a_period_boundary(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    """The core's exactness on a mix of one board that never resets and weekly per-region boards, their events
    either side of this week's start (so a replay after each kill crosses the boundary), and a strict weekly
    board whose last-week events arrive past the grace and are dead-lettered."""
    import asyncio
    import time

    from hotboard.periods import period_board

    weekly = BoardDef("desc", "incr", "shared", reset="weekly", keep=4, grace_ms=8 * 86_400_000)
    us = BoardDef("desc", "best", "earliest", reset="weekly", grace_ms=8 * 86_400_000)
    strict = BoardDef(reset="weekly", grace_ms=60_000)
    boards = {"global": BoardDef(), "weekly-eu": weekly, "weekly-us": us, "weekly-strict": strict}

    declare_boards(redis_server.url, {b: d for b, d in boards.items() if d.seasonal})
    now = int(time.time() * 1000)
    start = weekly.schedule.period_of(now).start_ms
    rng = random.Random(3)
    events: dict[str, list[Ev]] = {}
    for board, definition in boards.items():
        mine = random_events(rng, definition, 5000, players=200, mixed=False)
        events[board] = [Ev(e.player, e.op, e.amount, start + rng.randint(-3_600_000, 60_000)) for e in mine]

    def key(board: str, e: Ev) -> str:
        definition = boards[board]
        return board if not definition.seasonal else period_board(board, definition.schedule.period_of(e.ts).id)

    expected: dict[str, dict[str, tuple[int, int]]] = {}
    late = 0
    for board, evs in events.items():
        if board == "weekly-strict":
            late = sum(1 for e in evs if e.ts < start)
            evs = [e for e in evs if e.ts >= start]
        by_period: dict[str, list[Ev]] = {}
        for e in evs:
            by_period.setdefault(key(board, e), []).append(e)
        for name, group in by_period.items():
            expected[name] = comparable(reference(group, boards[board])[0], boards[board])
    assert late > 100 and len(expected) == 6  # global, both weeks of eu and us, this week of strict

    topic = topic_factory(4)
    victim = spawn(redis_server.url, topic, "victim")
    steady = spawn(redis_server.url, topic, "steady")
    feeder = Feeder(kafka, topic, _in_order(events, boards, rng), rate=500)  # 40 s of events: both kills land in them
    feeder.start()
    kill_while_feeding(victim, feeder, 2)
    feeder.finish()

    def exact() -> bool:
        r = redis.Redis.from_url(redis_server.url)
        try:
            for name, want in expected.items():
                definition = boards[name.split("@")[0]]
                if comparable(read_board(r, name, definition), definition) != want:
                    return False
            return True
        finally:
            r.close()

    wait_for(exact, timeout_s=90, what="every board and period equal to the reference")
    # every late record is in the dead-letter topic (a replay after a kill may send one twice: count sources)
    from ingest.dlq import ERROR_HEADER, SOURCE_HEADER

    letters = asyncio.run(read_topic(kafka, f"{topic}.dlq", late, timeout_s=60))
    sources = set()
    for rec in letters:
        headers = dict(rec.headers)
        assert headers[ERROR_HEADER].decode().startswith("period_closed: ")
        sources.add(headers[SOURCE_HEADER])
    assert len(sources) == late
    assert steady.metric("hotboard_rebalances_total") >= 2


def _in_order(
    events: dict[str, list[Ev]], boards: dict[str, BoardDef], rng: random.Random
) -> list[tuple[bytes, bytes]]:
    """Boards interleaved at random, each board's events in their own order (a player's order is what counts)."""
    queues = {b: list(reversed(e)) for b, e in events.items()}
    out: list[tuple[bytes, bytes]] = []
    while queues:
        board = rng.choice(sorted(queues))
        e = queues[board].pop()
        if not queues[board]:
            del queues[board]
        out.append((e.player.encode(), e.value(board, boards[board])))
    return out
