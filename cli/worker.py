"""``hotboard worker``: run one worker of the fleet until SIGTERM drains it."""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol, Self

from archive.redis_loss import RestoringWorker, restores
from cli.exits import EXIT_CONFIG, EXIT_UNAVAILABLE
from cli.options import add_options, settings_from
from flusher.server import EvictionPolicyError
from hotboard import logs, redis_connect
from ingest.kafka_config import KafkaUnavailable
from ingest.settings import WorkerSettings
from ingest.startup import OpsPortTaken, RedisUnavailable
from ingest.worker import Worker


class Member(Protocol):
    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    async def run(self) -> None: ...


def add_parser(sub: Any) -> None:
    p = sub.add_parser("worker", help="run one worker (scale out by starting more with the same --group)")
    add_options(p, WorkerSettings)
    p.set_defaults(run=cmd_worker)


def cmd_worker(args: argparse.Namespace) -> int:
    settings = settings_from(WorkerSettings, args)
    redis_connect.check(settings)
    settings.check_replica_acks()
    if restores(settings):
        return run_member("worker", lambda: RestoringWorker(settings))
    return run_member("worker", lambda: Worker(settings))


def run_member(command: str, make: Callable[[], Member]) -> int:
    """Run a consumer-group member (a worker, an archiver) until SIGTERM drains it; its exit code."""

    async def main() -> None:
        async with make() as member:
            await member.run()

    try:
        asyncio.run(main())
    except (KafkaUnavailable, RedisUnavailable) as exc:  # after the retries the log shows: the last log line
        logging.getLogger("hotboard").error("%s", exc)
        return EXIT_UNAVAILABLE
    except (EvictionPolicyError, OpsPortTaken) as exc:
        return logs.command_failed(command, str(exc), exit_code=EXIT_CONFIG)
    return 0
