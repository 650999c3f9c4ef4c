"""``hotboard restore --all | --board B``: rebuild boards in Redis from the PostgreSQL archive alone (no Kafka),
each swapped in atomically with its watermarks, definition, periods and their expiry."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, TextIO

from redis.exceptions import ClusterError, RedisClusterException, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from archive.pool import Archive, ArchiveUnavailable
from archive.restore import Copied, Restored, restore
from archive.settings import ArchiverSettings
from cli.exits import EXIT_UNAVAILABLE
from cli.options import add_options, settings_from
from cli.progress import Progress
from hotboard import logs, redis_connect

#: ``min_replica_acks`` and ``replica_ack_timeout_ms``: on a Redis Cluster each swap waits for its board master's
#: replicas, as a window does (archive.staging.SwapAcks).
OPTIONS = (
    "postgres",
    "redis",
    "redis_cluster",
    "topic",
    "postgres_timeout_s",
    "min_replica_acks",
    "replica_ack_timeout_ms",
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("restore", help="rebuild boards in Redis from the PostgreSQL archive")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every archived board")
    which.add_argument(
        "--board",
        help="one board (with its periods); never lifts a lost Redis's halts (a lost checkpoint: run --all)",
    )
    add_options(p, ArchiverSettings, only=OPTIONS)
    p.set_defaults(run=cmd_restore)


class Shown:
    """Each chunk of a board's players staged, as a :class:`cli.progress.Progress` bar on ``bar`` (lines off a
    terminal: a million-player board shows progress too), and each board restored, a line on ``out``."""

    def __init__(self, out: TextIO, bar: TextIO) -> None:
        self._out = out
        self._bar = Progress(bar)

    def copied(self, step: Copied) -> None:
        line = f"restoring {step.board}: {step.players}/{step.total} players"
        self._bar.step(f"restoring {step.board}", step.players, step.total, "players", line)

    def restored(self, done: Restored) -> None:
        print(f"restored {done.board}: {done.players} players", file=self._out, flush=True)


def cmd_restore(args: argparse.Namespace) -> int:
    settings = settings_from(ArchiverSettings, args)
    redis_connect.check(settings)
    settings.check_replica_acks()
    shown = Shown(sys.stdout, sys.stderr)  # stdout stays the boards restored; progress beside it

    async def main() -> int:
        redis = redis_connect.connect(settings, socket_timeout=settings.redis_timeout_s)
        try:
            await redis.ping()  # Redis unreachable is said before the archive is read, not after
            async with Archive(settings.postgres, settings.postgres_timeout_s) as archive:
                which = None if args.all else args.board
                done = await restore(
                    archive,
                    redis,
                    settings.topic,
                    which,
                    shown.restored,
                    shown.copied,
                    min_replica_acks=settings.replica_acks,
                    replica_ack_timeout_ms=settings.replica_ack_timeout_ms,
                )
        finally:
            await redis.aclose()
        print(f"restored {len(done)} boards, {sum(d.players for d in done)} players")
        return 0

    try:
        return asyncio.run(main())
    # RedisClusterException: no seed node of a cluster answers (redis-py's own error, not a ConnectionError)
    except (  # a cluster mid-failover or mid-migration (CLUSTERDOWN, TRYAGAIN) is an outage too: run it again
        ArchiveUnavailable,
        RedisConnectionError,
        RedisClusterException,
        ClusterError,
        TryAgainError,
        RedisTimeoutError,
        OSError,
    ) as exc:
        return logs.command_failed("restore", str(exc), exit_code=EXIT_UNAVAILABLE)
