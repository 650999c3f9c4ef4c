"""What a person sees when a command cannot start: one line naming what failed, the documented exit code (2: a
setting to change; 3: a server to wait for), no traceback, and a bounded wait. Each case is a real process
against real sockets: a port held by another listener, a closed port for Kafka or Redis."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from cli.process import LOOPBACK, free_port

pytestmark = pytest.mark.integration


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another process listens on (on every interface, as the worker's ops port binds by default)."""
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def hotboard(*argv: str, timeout_s: float = 60) -> tuple[int, str, float]:
    """Exit code, stderr and seconds taken of ``hotboard ARGV`` (no HOTBOARD_* from the caller's environment)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOTBOARD_")}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", *argv],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout_s,
        check=False,
    )
    return proc.returncode, proc.stderr.decode(), time.monotonic() - started


def assert_one_line(stderr: str, *expected: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert len(stderr.splitlines()) == 1, stderr
    for part in expected:
        assert part in stderr, stderr


def test_a_worker_whose_metrics_port_is_taken_exits_2_naming_it_before_reaching_kafka(taken_port: int) -> None:
    """Kafka is a closed port here: had the worker tried it first, it would exit 3 with Kafka's message."""
    closed = free_port()
    code, err, _ = hotboard("worker", "--metrics-port", str(taken_port), "--kafka", f"{LOOPBACK}:{closed}")
    assert code == 2
    assert_one_line(err, f"metrics port {taken_port} ", "--metrics-port")


def test_a_worker_waits_for_an_unreachable_redis_a_bounded_time_then_exits_3_naming_redis() -> None:
    redis_port, kafka_port = free_port(), free_port()
    argv = ["--redis", f"redis://hb:s3cret@{LOOPBACK}:{redis_port}/0", "--kafka", f"{LOOPBACK}:{kafka_port}"]
    code, err, seconds = hotboard("worker", "--metrics-port", "0", "--redis-start-timeout-s", "2", *argv)
    assert code == 3 and seconds < 20, (code, seconds, err)
    assert "Traceback" not in err and "s3cret" not in err, err
    errors = [line for line in err.splitlines() if " ERROR " in line]
    named = f"Redis at redis://hb:***@{LOOPBACK}:{redis_port}/0 did not answer within 2s"
    assert len(errors) == 1 and named in errors[0]
    assert errors[0] == err.splitlines()[-1]  # the retries before it are warnings naming Redis too
    assert all("Redis" in line for line in err.splitlines()), err


@pytest.mark.parametrize("option", ["--api-port", "--api-metrics-port"])
def test_the_api_exits_2_naming_a_taken_port(taken_port: int, option: str) -> None:
    other = "--api-metrics-port" if option == "--api-port" else "--api-port"
    code, err, _ = hotboard("api", option, str(taken_port), other, str(free_port()))
    assert code == 2
    assert_one_line(err, f"port {taken_port} on 127.0.0.1 is not available", option)


@pytest.mark.parametrize(
    "argv",
    [
        ["produce", "--count", "10"],
        ["send", "--player", "p", "--delta", "1"],
        ["send", "-"],
        ["dlq"],
        ["dlq", "--follow"],
    ],
)
def test_a_kafka_client_command_exits_3_in_one_line_when_kafka_is_unreachable(argv: list[str]) -> None:
    closed = f"{LOOPBACK}:{free_port()}"
    code, err, seconds = hotboard(*argv, "--kafka", closed, "--kafka-start-timeout-s", "2")
    assert code == 3 and seconds < 20, (code, seconds, err)
    assert_one_line(err, f"hotboard {argv[0]}: Kafka at {closed} did not answer within 2s")
