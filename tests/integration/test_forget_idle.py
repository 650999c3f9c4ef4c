"""Idle boards leave a worker's watermark bookkeeping (a long-running worker does not hold every board and
period it ever saw), and their next events count exactly once: looked up again, never fenced."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest

from cli.devstack import RedisServer
from tests.integration.conftest import Spawn
from tests.integration.harness import Feeder, kill_while_feeding, wait_exact, wait_for

pytestmark = pytest.mark.integration


def _events(boards: range, players: int, delta: int) -> list[tuple[bytes, bytes]]:
    out = []
    for b in boards:
        for i in range(players):
            player = f"p{b}-{i}"
            out.append((player.encode(), orjson.dumps({"board": f"guild-{b}", "player": player, "delta": delta + i})))
    return out


def test_forgotten_boards_count_exactly_when_they_return(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    topic = topic_factory(2)
    worker = spawn(redis_server.url, topic, extra_env={"HOTBOARD_FORGET_IDLE_BOARDS_S": "1"})
    worker.wait_ready()
    Feeder(kafka, topic, _events(range(100), 3, 1), rate=0).finish()
    expected = {f"guild-{b}": {f"p{b}-{i}": 1 + i for i in range(3)} for b in range(100)}
    wait_exact(redis_server.url, expected)

    # nothing arrives: within two intervals every board is forgotten, by every partition that knew it
    wait_for(lambda: worker.metric("hotboard_boards_forgotten_total") >= 100, timeout_s=30, what="boards forgotten")
    wait_for(lambda: worker.metric("hotboard_known_boards") == 0, timeout_s=30, what="no board known")

    # they come back (and new ones with them): looked up again, applied once, nothing fenced
    Feeder(kafka, topic, _events(range(50, 150), 3, 10), rate=0).finish()
    for b in range(50, 150):
        board = expected.setdefault(f"guild-{b}", {})
        for i in range(3):
            board[f"p{b}-{i}"] = board.get(f"p{b}-{i}", 0) + 10 + i
    wait_exact(redis_server.url, expected)
    assert worker.metric("hotboard_resyncs_total", reason="fenced") == 0
    assert worker.metric("hotboard_resyncs_total", reason="checkpoint") == 0


def test_boards_forgotten_and_revisited_while_workers_die_stay_exact(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    """Waves of boards, each busy for about 2 s and then idle (as a week's period boards), some coming
    back three waves later (after they were forgotten), through two workers, one killed with SIGKILL twice."""
    events: list[tuple[bytes, bytes]] = []
    for wave in range(30):
        events += _events(range(wave * 20, wave * 20 + 20), 3, 1)
        if wave >= 3:
            events += _events(range((wave - 3) * 20, (wave - 3) * 20 + 10), 3, 1)  # back after ~3 s idle
    expected: dict[str, dict[str, int]] = {}
    for _, value in events:
        body = orjson.loads(value)
        board = expected.setdefault(body["board"], {})
        board[body["player"]] = board.get(body["player"], 0) + body["delta"]

    topic = topic_factory(4)
    env = {"HOTBOARD_FORGET_IDLE_BOARDS_S": "1"}
    victim = spawn(redis_server.url, topic, "victim", extra_env=env)
    steady = spawn(redis_server.url, topic, "steady", extra_env=env)
    feeder = Feeder(kafka, topic, events, rate=90)  # 30 waves of about 2 s (5,100 events in about a minute)
    feeder.start()
    forgotten = lambda: steady.metric("hotboard_boards_forgotten_total") > 0  # noqa: E731
    kill_while_feeding(victim, feeder, 2, lambda: wait_for(forgotten, timeout_s=30, what="a forgotten board"))
    feeder.finish()
    wait_exact(redis_server.url, expected, timeout_s=90)
    assert steady.metric("hotboard_boards_forgotten_total") > 0
