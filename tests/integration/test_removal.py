"""``hotboard boards delete`` and ``erase`` run as an operator runs them (a child process), while a worker
process applies events that keep flowing; then the worker is killed with SIGKILL and the whole log replayed
(``HDEL hb:ckpt:{T}``, the runbook's replay). Totals are checked against references computed from the topic:
a deleted board equals the events after its delete point, an erased player is gone and every other exact."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable

import pytest
import redis

from cli.devstack import RedisServer
from cli.loadgen import publish
from hotboard import keys
from hotboard.codec import Event, decode
from tests.integration.conftest import Spawn
from tests.integration.harness import (
    Feeder,
    Totals,
    WorkerProcess,
    read_boards,
    read_topic,
    wait_exact,
    wait_flushing,
    wait_for,
    worker_events,
)

pytestmark = pytest.mark.integration

PARTITIONS = 4
FEED_MAX_S = 60.0  # a feeder that outlasts its command stops by then at the latest (or when its events run out)


def hotboard(*argv: str, env_of: WorkerProcess) -> subprocess.CompletedProcess[str]:
    """``hotboard ARGV`` as an operator types it, with the worker's environment (its Redis, Kafka, topic)."""
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *argv], env=env_of.env, capture_output=True, text=True, timeout=120
    )


def mixed(boards: tuple[str, ...], per_board: int, seed: int) -> list[Event]:
    events = [e for b in boards for e in worker_events(b, 300, per_board)]
    random.Random(seed).shuffle(events)
    return events


def topic_totals(kafka: str, topic: str, count: int, counts: Callable[[Event, int, int], bool]) -> Totals:
    """Each board's per-player sum over the topic's records that ``counts(event, partition, offset)``."""
    records = asyncio.run(read_topic(kafka, topic, count))
    assert len(records) == count, f"read {len(records)} of {count} records"
    out: defaultdict[str, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in records:
        e = decode(r.value)
        if counts(e, r.partition, r.offset):
            out[e.board][e.player] += e.delta or 0
    return {b: dict(d) for b, d in out.items()}


def replay_whole_log(worker: WorkerProcess, url: str, topic: str, ends: dict[int, int]) -> None:
    """SIGKILL, the checkpoints removed (the log is replayed from its start), a restart, and back at the end."""
    worker.kill()
    r = redis.Redis.from_url(url)
    try:
        r.delete(keys.checkpoint_key(topic))
        worker.start()
        worker.wait_ready()

        def caught_up() -> bool:
            held = r.hmget(keys.checkpoint_key(topic), [str(p) for p in ends])
            return all(v is not None and int(v) >= ends[p] for p, v in zip(ends, held, strict=True))

        wait_for(caught_up, timeout_s=90, what="the replay reached the log's end")
    finally:
        r.close()


def checkpoints_now(url: str, topic: str) -> dict[int, int]:
    r = redis.Redis.from_url(url)
    try:
        return {p: int(r.hget(keys.checkpoint_key(topic), str(p)) or -1) for p in range(PARTITIONS)}
    finally:
        r.close()


def test_delete_while_events_flow_keeps_only_later_events_through_a_replay(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    topic = topic_factory(PARTITIONS)
    events = mixed(("doomed", "kept"), 24_000, seed=5)  # at most 32 s of events: they flow until the delete returned
    worker = spawn(redis_server.url, topic)
    worker.wait_ready()
    feeder = Feeder(kafka, topic, events, rate=1500, max_s=FEED_MAX_S)
    feeder.start()
    wait_flushing(redis_server.url, "doomed", windows=3)
    assert feeder.is_alive(), "the events ran out before the delete: the test would prove nothing"
    done = hotboard("boards", "delete", "doomed", "--json", env_of=worker)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    point = {int(p): o for p, o in answer["delete_point"].items()}
    assert answer["outcome"] == "deleted" and set(point) == set(range(PARTITIONS)) and min(point.values()) >= 0
    assert feeder.is_alive(), "the delete must land while events still flow"
    feeder.stop()
    events = events[: feeder.finish().events]

    def counts(e: Event, partition: int, offset: int) -> bool:
        return e.board != "doomed" or offset > point[partition]

    expected = topic_totals(kafka, topic, len(events), counts)
    assert 0 < sum(expected["doomed"].values()) < sum(e.delta or 0 for e in events if e.board == "doomed")
    wait_exact(redis_server.url, expected)
    listed = hotboard("boards", "list", env_of=worker)
    assert "doomed\t" in listed.stdout, "a board written again after its deletion is listed again"
    version = int(redis.Redis.from_url(redis_server.url).hget(keys.meta_key("doomed"), keys.META_VERSION) or 0)
    assert version > answer["version"], "versions go on past the deleted board's: no reader cache serves it"

    replay_whole_log(worker, redis_server.url, topic, checkpoints_now(redis_server.url, topic))
    assert read_boards(redis_server.url, expected) == expected


def test_erase_while_events_flow_removes_the_player_through_a_replay(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    topic = topic_factory(PARTITIONS)
    others = mixed(("b",), 48_000, seed=7)  # at most 32 s of events: they flow until the erase returned
    gone = [Event("b", "gone", 1000 + i, None, meta=b'{"name":"G"}') for i in range(50)]
    worker = spawn(redis_server.url, topic, window_ms=4000)  # long windows: the player's events wait in one
    worker.wait_ready()
    feeder = Feeder(kafka, topic, others, rate=1500, max_s=FEED_MAX_S)
    feeder.start()
    wait_flushing(redis_server.url, "b", windows=2)
    # the player's last events just before the erasure: still in a worker's window when the command starts
    asyncio.run(publish(kafka, topic, gone))
    started = time.monotonic()
    done = hotboard("boards", "erase", "b", "gone", "--json", env_of=worker)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"board": "b", "player": "gone", "outcome": "erased"}
    assert feeder.is_alive(), f"the erasure must land while events still flow ({time.monotonic() - started:.1f}s)"
    feeder.stop()
    others = others[: feeder.finish().events]
    expected = topic_totals(kafka, topic, len(others) + len(gone), lambda e, _p, _o: e.player != "gone")
    wait_exact(redis_server.url, expected)
    r = redis.Redis.from_url(redis_server.url)
    try:
        assert r.zscore(keys.board_key("b"), "gone") is None
        assert r.hget(keys.player_meta_key("b"), "gone") is None
        replay_whole_log(worker, redis_server.url, topic, checkpoints_now(redis_server.url, topic))
        assert read_boards(redis_server.url, expected) == expected
        assert r.zscore(keys.board_key("b"), "gone") is None and r.hget(keys.player_meta_key("b"), "gone") is None
    finally:
        r.close()


def test_erase_keeps_dense_counts_and_tie_times_whole(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    """On a ``dense`` board the player's score leaves the distinct scores when it was the last holding it; on an
    ``earliest`` board its member (tie time + id) and its entry in the members hash go."""
    topic = topic_factory(PARTITIONS)
    worker = spawn(redis_server.url, topic)
    for board, ties in (("d", "dense"), ("e", "earliest")):
        assert hotboard("boards", "create", board, "--ties", ties, env_of=worker).returncode == 0
    events = [Event(b, p, s, None) for b in ("d", "e") for p, s in (("x", 5), ("y", 5), ("z", 9), ("w", 3))]
    asyncio.run(publish(kafka, topic, events))
    worker.wait_ready()
    wait_exact(redis_server.url, {"d": {"x": 5, "y": 5, "z": 9, "w": 3}})
    for player in ("x", "z"):
        done = hotboard("boards", "erase", "d", player, env_of=worker)
        assert done.returncode == 0 and done.stdout == f"erased {player} from d\n", done.stderr
    done = hotboard("boards", "erase", "e", "w", env_of=worker)
    assert done.returncode == 0, done.stderr
    again = hotboard("boards", "erase", "e", "w", env_of=worker)
    assert again.returncode == 0 and again.stdout == "w is not on e: nothing to erase\n"
    r = redis.Redis.from_url(redis_server.url)
    try:
        assert r.zrange(keys.board_key("d"), 0, -1, withscores=True) == [(b"w", 3.0), (b"y", 5.0)]
        assert r.hgetall(keys.counts_key("d")) == {b"3": b"1", b"5": b"1"}
        assert r.zrange(keys.dense_key("d"), 0, -1) == [b"3", b"5"]
        assert set(r.hkeys(keys.members_key("e"))) == {b"x", b"y", b"z"}
        assert [m[16:] for m in r.zrange(keys.board_key("e"), 0, -1)] == [b"z", b"x", b"y"]
    finally:
        r.close()


def test_refusals_are_one_line_with_their_exit_codes(
    kafka: str, topic_factory: Callable[..., str], redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unknown board or topic 1, invalid 2, Kafka unreachable or workers not caught up 3; nothing written."""
    from cli.devstack import free_port
    from cli.main import main

    topic = topic_factory(2)
    common = ("--redis", redis_url, "--kafka", kafka, "--topic", topic)
    asyncio.run(publish(kafka, topic, [Event("b", "p", 1, None)]))
    cases = [
        (("boards", "delete", "nothing-here", *common), 1, "no board 'nothing-here'"),
        (("boards", "delete", "b", "--redis", redis_url, "--kafka", kafka, "--topic", "no-such-topic"), 1, "no topic"),
        (("boards", "erase", "b", "bad\x01id", *common), 2, "player must be"),
        (("boards", "delete", "b", *common[:2], "--kafka", f"127.0.0.1:{free_port()}", "--topic", topic), 3, "Kafka"),
        (("boards", "erase", "b", "p", "--wait-s", "0.5", *common), 3, "Nothing was erased"),
    ]
    for argv, code, said in cases:
        assert main(list(argv)) == code, argv
        out, err = capsys.readouterr()
        assert out == "" and said in err and err.count("\n") == 1, (argv, err)
    assert redis.Redis.from_url(redis_url).keys("hb:{b}*") == []


def test_a_second_delete_says_the_board_was_deleted_already(
    kafka: str, topic_factory: Callable[..., str], redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A delete run again (a retry, a second operator) exits 1 saying the board was deleted already, where a
    first one exits 0; the delete point it names is the one it raised the watermarks to."""
    from cli.main import main

    topic = topic_factory(2)
    common = ("--redis", redis_url, "--kafka", kafka, "--topic", topic)
    asyncio.run(publish(kafka, topic, [Event("b", "p", 1, None)]))
    assert main(["boards", "create", "b", "--redis", redis_url]) == 0
    capsys.readouterr()
    assert main(["boards", "delete", "b", "--json", *common]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["outcome"] == "deleted"
    for extra in ((), ("--json",)):
        assert main(["boards", "delete", "b", *extra, *common]) == 1
        out, err = capsys.readouterr()
        assert out == "" and "'b' was deleted already" in err and err.count("\n") == 1, err
        shown = " ".join(f"{p}:{o}" for p, o in first["delete_point"].items())
        assert shown in err
    r = redis.Redis.from_url(redis_url)
    try:
        assert r.zscore(keys.BOARD_INDEX_KEY, "b") is None
        assert r.exists(keys.def_key("b"), keys.board_key("b"), keys.meta_key("b")) == 0
    finally:
        r.close()
