"""``hotboard send`` and ``hotboard dlq`` as a person runs them (subprocesses) against the real broker and a real
worker: a sent event reaches its board; an invalid one is refused with the codec's reason and never reaches the
topic; stdin lines are reported one by one; the DLQ shows a worker's letter with its reason and source, and
``--follow`` prints a letter that arrives while it waits."""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import orjson
import pytest

from cli.devstack import RedisServer
from cli.loadgen import publish
from tests.integration.conftest import Spawn
from tests.integration.harness import read_topic, wait_exact

pytestmark = pytest.mark.integration


def hotboard(kafka: str, *argv: str, stdin: bytes = b"", timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOTBOARD_KAFKA": kafka, "HOTBOARD_KAFKA_START_TIMEOUT_S": "10"}
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", *argv], input=stdin, env=env, capture_output=True, timeout=timeout_s
    )
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def values(kafka: str, topic: str, expected: int) -> list[tuple[bytes | None, bytes | None]]:
    """The (key, value) of every record of ``topic``, waiting up to 3 s for more than ``expected``."""
    return [(r.key, r.value) for r in asyncio.run(read_topic(kafka, topic, expected + 1, timeout_s=3))]


def test_a_sent_event_is_folded_by_a_worker_into_its_board(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    topic = topic_factory(4)
    spawn(redis_server.url, topic)
    meta = '{"name": "Alice"}'
    first = hotboard(kafka, "send", "--topic", topic, "--board", "b", "--player", "alice", "--delta", "7")
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith(f"sent to {topic} partition ")
    again = hotboard(
        kafka, "send", "--topic", topic, "--board", "b", "--player", "alice", "--delta", "5", "--meta", meta
    )
    assert again.returncode == 0, again.stderr
    wait_exact(redis_server.url, {"b": {"alice": 12}}, timeout_s=60)
    assert {key for key, _ in values(kafka, topic, 2)} == {b"alice"}  # keyed by player


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--player", "", "--delta", "1"], "bad_value"),
        (["--player", "p", "--op", "set", "--delta", "3"], "missing_field"),
        (["--player", "p", "--delta", "1", "--meta", "[1]"], "bad_type"),
        (["--player", "p", "--delta", "1", "--board", "no spaces"], "bad_value"),
        (["--player", "p", "--delta", "9007199254740992"], "out_of_range"),
        (["--player", "p"], "missing_field"),
    ],
)
def test_an_invalid_event_is_refused_with_the_codec_reason_and_nothing_is_sent(
    kafka: str, topic_factory: Callable[..., str], argv: list[str], reason: str
) -> None:
    topic = topic_factory(1)
    done = hotboard(kafka, "send", "--topic", topic, *argv)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"hotboard send: refused: {reason}: ") and len(done.stderr.splitlines()) == 1
    assert values(kafka, topic, 0) == []


def test_send_from_stdin_reports_every_line_and_exits_2_when_one_is_refused(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(2)
    good = [b'{"player":"alice","delta":1}', b'{"board":"speed","player":"bob","op":"best","score":40}']
    lines = [good[0], b"not json", b"", good[1], b'{"player":"","delta":1}']
    done = hotboard(kafka, "send", "-", "--topic", topic, stdin=b"\n".join(lines) + b"\n")
    assert done.returncode == 2, done.stderr
    assert [line.split(" partition ")[0] for line in done.stdout.splitlines()] == [
        f"line 1: sent to {topic}",
        f"line 4: sent to {topic}",
    ]
    refused = done.stderr.splitlines()
    assert refused[0].startswith("line 2: refused: not_json: ")
    assert refused[1].startswith("line 5: refused: bad_value: ")
    assert refused[2:] == ["2 sent, 2 refused"]
    assert sorted(values(kafka, topic, 2)) == [(b"alice", good[0]), (b"bob", good[1])]
    clean = hotboard(kafka, "send", "-", "--topic", topic, stdin=good[0] + b"\n")
    assert clean.returncode == 0 and clean.stderr == "1 sent, 0 refused\n"


def test_dlq_shows_the_letter_of_a_malformed_event_with_its_reason_and_source(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    topic = topic_factory(2)
    worker = spawn(redis_server.url, topic)
    asyncio.run(publish(kafka, topic, [(b"k-1", b"not json"), (b"k-2", b'{"player":"z","delta":1.5}')]))
    worker.wait_metric("hotboard_dlq_total", 1, reason="not_json")
    worker.wait_metric("hotboard_dlq_total", 1, reason="bad_type")
    done = hotboard(kafka, "dlq", "--topic", topic, "--json")
    assert done.returncode == 0, done.stderr
    letters = {letter["key"]: letter for letter in map(json.loads, done.stdout.splitlines())}
    assert set(letters) == {"k-1", "k-2"}
    assert letters["k-1"]["reason"] == "not_json" and letters["k-1"]["value"] == "not json"
    assert letters["k-2"]["reason"] == "bad_type" and letters["k-2"]["error"].startswith("bad_type: delta ")
    for letter in letters.values():
        source_topic, partition, offset = letter["source"].rsplit(":", 2)
        assert source_topic == topic and int(partition) in (0, 1) and int(offset) >= 0
    text = hotboard(kafka, "dlq", "--topic", topic)
    assert text.returncode == 0 and len(text.stdout.splitlines()) == 2
    line = next(line for line in text.stdout.splitlines() if "key=k-1" in line)
    assert line.startswith(f"{letters['k-1']['source']}  not_json: ") and line.endswith("value=not json")


def test_dlq_follow_prints_a_letter_that_arrives_while_it_waits_and_stops_on_ctrl_c(
    kafka: str, topic_factory: Callable[..., str], redis_server: RedisServer, spawn: Spawn
) -> None:
    topic = topic_factory(1)
    worker = spawn(redis_server.url, topic)
    env = {**os.environ, "HOTBOARD_KAFKA": kafka}
    follower = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "dlq", "--follow", "--topic", topic],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        asyncio.run(publish(kafka, topic, [(b"late", orjson.dumps({"player": "p", "op": "max", "delta": 1}))]))
        worker.wait_metric("hotboard_dlq_total", 1, reason="unsupported_op")
        line = _read_line(follower, timeout_s=30)
        assert line.startswith(f"{topic}:0:0  unsupported_op: ") and "key=late" in line
        follower.send_signal(signal.SIGINT)
        assert follower.wait(timeout=15) == 0
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()


def _read_line(proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    """The first line ``proc`` prints, waiting at most ``timeout_s``."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if selector.select(timeout=max(0.0, deadline - time.monotonic())):
                return proc.stdout.readline().decode()
    raise AssertionError(f"no line within {timeout_s:.0f}s")
