"""``hotboard rebuild``: Redis wiped (FLUSHALL), the boards declared again, then rebuilt from the Kafka log alone
(a subprocess, as an operator runs it): every board's scores, tie order, metadata and dense counts equal a
reference computed from the events and what the worker had written; a worker started afterwards folds only the
tail. Where retention cut the log the command refuses, and rebuilds from what the log keeps once told to."""

from __future__ import annotations

import asyncio
import random
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import pytest
import redis

from archive.audit import KafkaRange
from cli.devstack import RedisServer
from cli.main import main as hotboard
from hotboard import keys
from hotboard.boards import BoardDef
from tests.integration.conftest import Spawn
from tests.integration.harness import WEEKLY, Feeder, declare_boards, read_topic, wait_for
from tests.semantics import Board, Ev, comparable, random_events, read_board, reference

pytestmark = pytest.mark.integration

#: A default board, a best/dense one, an earliest one (ties by who got there first) and a weekly season.
DEFINITIONS = {
    "speed": BoardDef(order="desc", operator="best", ties="dense"),
    "race": BoardDef(order="asc", operator="best", ties="earliest"),
    "season": WEEKLY,
}
PLAIN = BoardDef()
#: (board, event), in the order they are sent: one player's events keep it on its partition.
Sent = list[tuple[str, Ev]]
#: What ``hotboard rebuild`` prints on stdout: results only (each board rebuilt, each skipped, the total), as
#: ``hotboard restore`` does; its progress goes to stderr.
RESULT_LINE = re.compile(
    r"rebuilt [^ ]+: \d+ players|SKIPPED [^ ]+: .+|rebuilt \d+ boards, \d+ players \(\d+ invalid records\)"
)


def definition_of(board: str) -> BoardDef:
    return DEFINITIONS.get(board.split("@")[0], PLAIN)


def make_events(count: int, seed: int) -> Sent:
    """Every operator on the three plain boards, incr events either side of this week's start on the season."""
    rng = random.Random(seed)
    start = WEEKLY.schedule.period_of(int(time.time() * 1000)).start_ms
    out: Sent = []
    for board in ("global", "speed", "race"):
        out += [(board, e) for e in random_events(rng, definition_of(board), count, players=40, mixed=True)]
    season = random_events(rng, PLAIN, count, players=40, mixed=False)
    out += [("season", Ev(e.player, None, e.amount, start + rng.randint(-3_600_000, 3_600_000))) for e in season]
    rng.shuffle(out)  # a player's events keep their relative order on its partition, as in the reference
    return out


def wire(events: Sent) -> list[tuple[bytes, bytes]]:
    return [(e.player.encode(), e.value(board, definition_of(board))) for board, e in events]


def expected(events: Sent) -> dict[str, tuple[Board, dict[str, bytes]]]:
    """board (a season's events in their period's board) -> its reference scores with tie times, and metas."""
    per: dict[str, list[Ev]] = {}
    for board, e in events:
        name = f"{board}@{WEEKLY.schedule.period_of(e.ts).id}" if board == "season" else board
        per.setdefault(name, []).append(e)
    out = {}
    for name, evs in per.items():
        scores, metas = reference(evs, definition_of(name))
        out[name] = (comparable(scores, definition_of(name)), metas)
    return out


def hash_of(r: Any, key: str) -> dict[bytes, bytes]:
    return cast("dict[bytes, bytes]", r.hgetall(key))


def held(url: str, boards: Sequence[str]) -> dict[str, tuple[Board, dict[str, bytes]]]:
    r = redis.Redis.from_url(url)
    try:
        out: dict[str, tuple[Board, dict[str, bytes]]] = {}
        for name in boards:
            d = definition_of(name)
            metas = {k.decode(): v for k, v in hash_of(r, keys.player_meta_key(name)).items()}
            out[name] = (comparable(read_board(r, name, d), d), metas)
        return out
    finally:
        r.close()


def snapshot(url: str, boards: Sequence[str]) -> dict[str, Any]:
    """What a reader sees of each board: members in rank order with scores, metadata, tie members, dense counts,
    definition, expiry set or not."""
    r = redis.Redis.from_url(url)
    try:
        return {
            name: (
                r.zrange(keys.board_key(name), 0, -1, withscores=True),
                r.hgetall(keys.player_meta_key(name)),
                r.hgetall(keys.members_key(name)),
                r.zrange(keys.dense_key(name), 0, -1, withscores=True),
                r.hgetall(keys.counts_key(name)),
                r.hgetall(keys.def_key(name)).get(b"spec"),
                r.pttl(keys.board_key(name)) > 0,
            )
            for name in boards
        }
    finally:
        r.close()


def rebuild_command(url: str, kafka: str, topic: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "rebuild", *args],
        env={"HOTBOARD_REDIS": url, "HOTBOARD_TOPIC": topic, "HOTBOARD_KAFKA": kafka},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_flushall_then_rebuild_from_the_log_then_the_tail(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    topic, url = topic_factory(4), redis_server.url
    events = make_events(600, seed=7)
    head, tail = events[:1800], events[1800:]
    boards = sorted(expected(events))
    assert sum("@" in b for b in boards) == 2, "both weeks of the season"
    declare_boards(url, DEFINITIONS)
    worker = spawn(url, topic, "worker")
    worker.wait_ready()
    Feeder(kafka, topic, wire(head), rate=5_000).finish()
    want = expected(head)
    wait_for(lambda: held(url, sorted(want)) == want, timeout_s=60, what="the worker applied the head")
    assert worker.terminate()[0] == 0
    before = snapshot(url, sorted(want))
    assert before["race"][2] and before["speed"][4] and before["global"][1], "tie times, dense counts, metadata"
    r = redis.Redis.from_url(url)
    r.flushall()
    declare_boards(url, DEFINITIONS)  # definitions are the operator's: declared again, as before the first event

    done = rebuild_command(url, kafka, topic, "--all")
    assert done.returncode == 0, done.stderr
    assert f"rebuilt {len(want) + 1} boards" in done.stdout, done.stdout  # the season itself too
    lines = done.stdout.splitlines()
    assert all(RESULT_LINE.fullmatch(line) for line in lines), f"stdout holds only result lines: {done.stdout}"
    assert sorted(line.split(":")[0].removeprefix("rebuilt ") for line in lines[:-1]) == sorted([*want, "season"])
    assert "read " in done.stderr and "records (partition " in done.stderr, done.stderr  # progress, off a terminal
    assert snapshot(url, sorted(want)) == before
    ends = {p: int(v) for p, v in hash_of(r, keys.checkpoint_key(topic)).items() if b":" not in p}
    assert sum(e + 1 for e in ends.values()) == len(head), "the checkpoints say the head is applied"
    assert {k.decode(): int(v) for k, v in hash_of(r, keys.applied_key("global")).items()} == {
        f"{topic}:{p.decode()}": e for p, e in ends.items()
    }
    assert r.hget(keys.meta_key("season"), keys.META_PERIODS) == b"1"

    worker.start()
    worker.wait_ready()
    Feeder(kafka, topic, wire(tail), rate=5_000).finish()
    want = expected(events)
    wait_for(lambda: held(url, boards) == want, timeout_s=60, what="the worker applied the tail")
    # only the tail is folded again: the rebuilt checkpoints say where the head ends
    assert worker.metric("hotboard_events_total", result="applied") == len(tail)
    r.close()


def test_a_live_board_rebuilt_under_a_running_worker_stays_exact(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    """The worker keeps writing while one board is rebuilt: it is fenced on the swapped board, resynchronises from
    the lowered checkpoints and replays the tail; every board ends exact."""
    topic, url = topic_factory(4), redis_server.url
    events = make_events(1500, seed=11)
    declare_boards(url, DEFINITIONS)
    worker = spawn(url, topic, "worker")
    worker.wait_ready()
    Feeder(kafka, topic, wire(events[:1500]), rate=5_000).finish()
    feeder = Feeder(kafka, topic, wire(events[1500:]), rate=1_000)
    feeder.start()
    r = redis.Redis.from_url(url)
    r.zadd(keys.board_key("speed"), {"intruder": 5})  # a board gone wrong: the rebuild puts it right
    done = rebuild_command(url, kafka, topic, "--board", "speed")
    assert done.returncode == 0, done.stderr
    assert feeder.is_alive(), "the rebuild must land while events flow"
    feeder.finish()
    want = expected(events)
    wait_for(lambda: held(url, sorted(want)) == want, timeout_s=60, what="every board exact")
    # fenced on the swapped board, or its checkpoint move refused: either way it resynchronised from Redis
    assert sum(worker.metric("hotboard_resyncs_total", reason=why) for why in ("fenced", "checkpoint")) >= 1
    r.close()


@pytest.fixture
def log_starts_at_five(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """Retention, simulated: the embedded broker has no DeleteRecords, so the rebuild is told each partition's log
    starts at offset 5 (what a real Kafka answers after retention)."""
    start = 5
    real = KafkaRange.first_offsets

    async def first_offsets(self: KafkaRange, partitions: Any) -> dict[int, int]:
        return {p: max(o, start) for p, o in (await real(self, partitions)).items()}

    monkeypatch.setattr(KafkaRange, "first_offsets", first_offsets)
    yield start


def test_a_log_cut_by_retention_is_refused_unless_accepted(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, log_starts_at_five: int
) -> None:
    topic, url = topic_factory(2), redis_server.url
    events = make_events(100, seed=3)
    declare_boards(url, DEFINITIONS)
    Feeder(kafka, topic, wire(events), rate=0).finish()
    r = redis.Redis.from_url(url)
    r.zadd(keys.board_key("global"), {"kept": 1})
    argv = ["rebuild", "--all", "--redis", url, "--kafka", kafka, "--topic", topic]

    assert hotboard(argv) == 2  # refused: docs/archive.md, exit codes
    assert r.zrange(keys.board_key("global"), 0, -1) == [b"kept"], "nothing touched"
    assert not r.exists(keys.checkpoint_key(topic))

    assert hotboard([*argv, "--accept-retention-loss"]) == 0
    sent = {e.value(board, definition_of(board)): (board, e) for board, e in events}
    records = asyncio.run(read_topic(kafka, topic, len(events)))
    in_order = sorted(records, key=lambda x: (x.partition, x.offset))
    kept: Sent = [sent[rec.value or b""] for rec in in_order if rec.offset >= log_starts_at_five]
    # per player the partition order is the send order: the reference over the kept records, partition by partition
    want = expected(kept)
    assert held(url, sorted(want)) == want
    checkpoints = {int(p): int(v) for p, v in hash_of(r, keys.checkpoint_key(topic)).items() if b":" not in p}
    assert set(checkpoints) == {0, 1} and sum(v + 1 for v in checkpoints.values()) == len(events)
    r.close()
