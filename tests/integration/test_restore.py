"""Redis wiped (FLUSHALL, or restarted without persistence on an empty data directory), then ``hotboard restore
--all`` with Kafka unreachable: every board's ranks, scores, tie order and metadata equal what Redis held and the
reference model computed from the events (tests/semantics.py), from the archive alone; a worker started
afterwards replays only the tail and stays exact."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
import redis

from cli.devstack import RedisServer
from cli.main import main as hotboard
from cli.process import free_port
from hotboard import keys
from hotboard.boards import BoardDef
from hotboard.codec import Event
from tests.integration.archive_harness import archiver_process, wait_archived
from tests.integration.conftest import Spawn
from tests.integration.harness import Feeder, declare_boards, skewed_events, totals_of, wait_exact, wait_for
from tests.semantics import Board, Ev, comparable, read_board, reference

pytestmark = pytest.mark.integration

BOARDS = ("global", "board-1", "board-2")
#: board-1 ranks equal scores by who reached them first: the restored members must keep each tie time.
DEFINITIONS = {"board-1": BoardDef(ties="earliest")}


def snapshot(url: str) -> dict[str, Any]:
    """Every board as a reader sees it: members in rank order with scores, player metadata, watermarks."""
    r = redis.Redis.from_url(url)
    try:
        return {
            board: (
                r.zrange(keys.board_key(board), 0, -1, withscores=True),
                r.hgetall(keys.player_meta_key(board)),
                r.hgetall(keys.applied_key(board)),
                r.hgetall(keys.members_key(board)),
                r.hget(keys.def_key(board), "spec"),
            )
            for board in BOARDS
        }
    finally:
        r.close()


def modelled(events: list[Event]) -> dict[str, tuple[Board, dict[str, bytes]]]:
    """board -> the reference model's scores with tie times (tie times only where they rank: ``earliest``), and
    each player's last metadata, computed from the events one by one (tests/semantics.py)."""
    per: dict[str, list[Ev]] = {}
    for e in events:
        per.setdefault(e.board, []).append(
            Ev(e.player, None, e.delta or 0, e.ts_ms or 0, orjson.loads(e.meta) if e.meta is not None else None)
        )
    out = {}
    for board, evs in per.items():
        definition = DEFINITIONS.get(board, BoardDef())
        scores, metas = reference(evs, definition)
        out[board] = (comparable(scores, definition), metas)
    return out


def held(url: str) -> dict[str, tuple[Board, dict[str, bytes]]]:
    """What Redis holds in the model's terms, each board's members checked to be in the model's rank order:
    score, then (``earliest``) tie time, then player id."""
    r = redis.Redis.from_url(url)
    try:
        out = {}
        for board in BOARDS:
            definition = DEFINITIONS.get(board, BoardDef())
            scores = read_board(r, board, definition)
            metas = cast("dict[bytes, bytes]", r.hgetall(keys.player_meta_key(board)))
            out[board] = (comparable(scores, definition), {k.decode(): v for k, v in metas.items()})
            if definition.earliest:  # the rank order itself, as a reader pages it
                ranked = sorted(scores, key=lambda p: (-scores[p][0], scores[p][1], p))
                assert list(scores) == ranked, f"{board}: members out of tie order"
        return out
    finally:
        r.close()


def wipe_redis(server: RedisServer, how: str, tmp_path: Path) -> None:
    """``flushall``: every key deleted; ``restart_empty``: the server stopped and started without persistence on
    an empty data directory (a volume lost), on the same port."""
    if how == "flushall":
        redis.Redis.from_url(server.url).flushall()
        return
    server.stop()
    empty = tmp_path / "redis-empty"
    empty.mkdir()
    server.data_dir, server.appendonly = empty, False
    server.start()
    assert redis.Redis.from_url(server.url).dbsize() == 0


@pytest.mark.parametrize("wipe", ["flushall", "restart_empty"])
def test_flushall_then_restore_without_kafka_then_the_tail(
    kafka: str,
    topic_factory: Callable[..., str],
    redis_server: RedisServer,
    postgres_url: str,
    spawn: Spawn,
    tmp_path: Path,
    wipe: str,
) -> None:
    topic = topic_factory(4)
    declare_boards(redis_server.url, DEFINITIONS)
    raw = skewed_events(20_000)
    base = raw[0].ts_ms or 0
    # event times 4 apart every 4 events: the earliest board's equal scores rank by who reached them first
    events = [
        e._replace(ts_ms=base - 20_000 + i // 4 * 4, meta=orjson.dumps({"n": i}) if i % 7 == 0 else None)
        for i, e in enumerate(raw)
    ]
    head, tail = events[:15_000], events[15_000:]
    worker = spawn(redis_server.url, topic, "worker")
    archiver = archiver_process(kafka, redis_server.url, postgres_url, topic, f"g-{uuid.uuid4().hex[:8]}", tmp_path)
    try:
        archiver.start()
        worker.wait_ready()
        archiver.wait_ready()
        Feeder(kafka, topic, head, rate=10_000).finish()
        wait_exact(redis_server.url, {b: t for b, t in totals_of(head).items() if b != "board-1"})
        wait_archived(postgres_url, {b: t for b, t in totals_of(head).items() if b != "board-1"})
        assert worker.terminate()[0] == 0 and archiver.terminate()[0] == 0
        before = snapshot(redis_server.url)
        assert before["board-1"][0] and before["board-1"][3] and before["global"][1], "tie times and metadata held"
        want = modelled(head)
        ties = [s for s, _ in want["board-1"][0].values()]
        assert len(ties) > len(set(ties)), "equal scores on the earliest board: its tie order is tested"
        wipe_redis(redis_server, wipe, tmp_path)

        dead_kafka = f"127.0.0.1:{free_port()}"
        restored = subprocess.run(
            [sys.executable, "-m", "cli.main", "restore", "--all", "--postgres", postgres_url],
            env={"HOTBOARD_REDIS": redis_server.url, "HOTBOARD_TOPIC": topic, "HOTBOARD_KAFKA": dead_kafka},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert restored.returncode == 0, restored.stderr
        assert "restored 3 boards" in restored.stdout, restored.stdout
        assert "restoring board-1: " in restored.stderr, restored.stderr  # progress, off a terminal: lines
        results = re.compile(r"restored [^ ]+: \d+ players|restored \d+ boards, \d+ players")
        lines = restored.stdout.splitlines()
        assert all(results.fullmatch(line) for line in lines), f"stdout holds only result lines: {restored.stdout}"
        assert len(lines) == 3 + 1, "one line per board restored, then the total"
        assert snapshot(redis_server.url) == before
        assert held(redis_server.url) == want

        worker.start()
        worker.wait_ready()
        Feeder(kafka, topic, tail, rate=10_000).finish()
        wait_exact(redis_server.url, {b: t for b, t in totals_of(events).items() if b != "board-1"})
        everything = modelled(events)
        wait_for(lambda: held(redis_server.url) == everything, timeout_s=30, what="every board equal to the model")
        # only the tail is folded again: the restored checkpoints say where the head ends
        assert worker.metric("hotboard_events_total", result="applied") == len(tail)
    finally:
        archiver.cleanup()


@pytest.mark.parametrize("cluster", [False, True], ids=["redis", "redis-cluster"])
def test_an_unreachable_redis_is_exit_3_in_one_line(
    postgres_url: str, cluster: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """Restore with the archive up and Redis (or every cluster seed) down: the documented exit 3, one line."""
    argv = ["restore", "--all", "--postgres", postgres_url, "--redis", f"redis://127.0.0.1:{free_port()}"]
    assert hotboard([*argv, *(["--redis-cluster"] if cluster else [])]) == 3
    _, err = capsys.readouterr()
    assert len(err.splitlines()) == 1 and err.startswith("hotboard restore: "), err
