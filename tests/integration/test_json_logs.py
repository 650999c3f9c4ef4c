"""``hotboard worker --log-format json`` as a real process: from start to a SIGTERM drain, with events and a
dead letter on the way, everything on stderr is a JSON object per line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from cli.process import free_port
from tests.integration.harness import Feeder, skewed_events, totals_of, wait_exact

pytestmark = pytest.mark.integration


def test_the_worker_writes_only_json_lines(
    kafka: str, topic_factory: Callable[..., str], redis_url: str, tmp_path: Path
) -> None:
    topic = topic_factory(2)
    metrics_port = free_port()
    env = {
        **os.environ,
        "HOTBOARD_METRICS_HOST": "127.0.0.1",
        "HOTBOARD_SESSION_TIMEOUT_MS": "6000",
        "HOTBOARD_WINDOW_MS": "200",
    }
    command = [sys.executable, "-m", "cli.main", "worker", "--log-format", "json", "--kafka", kafka]
    command += ["--redis", redis_url, "--topic", topic, "--group", f"g-{topic}", "--metrics-port", str(metrics_port)]
    stderr_path = tmp_path / "stderr"
    with stderr_path.open("wb") as stderr:
        proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr)
    try:
        events = skewed_events(500, players=50, boards=2, seed=3)
        Feeder(kafka, topic, [(b"bad", b"not json")], rate=0).finish()
        Feeder(kafka, topic, events, rate=0).finish()
        wait_exact(redis_url, totals_of(events), timeout_s=60)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, stderr_path.read_text()
    assert out == b""
    lines = stderr_path.read_bytes().splitlines()
    assert lines, "the worker logged nothing"
    entries = []
    for line in lines:
        try:
            entries.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
    assert all({"ts", "level", "logger", "message"} <= entry.keys() for entry in entries)
    messages = [entry["message"] for entry in entries if entry["logger"] == "hotboard.worker"]
    assert any(m.startswith("assigned partitions") for m in messages), messages
    assert any(m.startswith("drained") for m in messages), messages
