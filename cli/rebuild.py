"""``hotboard rebuild --all | --board B``: rebuild boards in Redis from the Kafka log alone (no archive), each
swapped in atomically as ``hotboard restore`` does; refused where retention cut the log, unless accepted."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, TextIO

from aiokafka.errors import KafkaError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException
from redis.exceptions import TimeoutError as RedisTimeoutError

from archive.audit import KafkaRange
from archive.rebuild import LogCut, Read, Rebuilt, rebuild
from archive.settings import ArchiverSettings
from cli.exits import EXIT_CONFIG, EXIT_NOT_FOUND, EXIT_UNAVAILABLE
from cli.log_ends import LogEndsUnavailable, last_offsets
from cli.options import add_options, settings_from
from cli.progress import Progress
from hotboard import logs, redis_connect
from hotboard.kafka_security import KafkaSecuritySettings, client_kwargs
from hotboard.redis_connect import RedisSettings

OPTIONS = ("kafka", "topic", "kafka_start_timeout_s", "redis_timeout_s")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("rebuild", help="rebuild boards in Redis from the Kafka log alone, where retention allows")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every board the log holds")
    which.add_argument("--board", help="one board (with its periods)")
    p.add_argument(
        "--accept-retention-loss",
        action="store_true",
        help="rebuild from what the log keeps although retention deleted its start (those events are lost)",
    )
    add_options(p, ArchiverSettings, only=(*OPTIONS, *RedisSettings.model_fields, *KafkaSecuritySettings.model_fields))
    p.set_defaults(run=cmd_rebuild)


class Shown:
    """The log's read as a :class:`cli.progress.Progress` bar on ``bar`` (lines off a terminal), and each board
    rebuilt, a line on ``out``: the results alone on stdout, as ``hotboard restore`` prints them."""

    def __init__(self, out: TextIO, bar: TextIO) -> None:
        self._out = out
        self._bar = Progress(bar)

    def read(self, step: Read) -> None:
        line = f"read {step.records}/{step.total} records (partition {step.partition})"
        self._bar.step("reading the log", step.records, step.total, "records", line)

    def rebuilt(self, done: Rebuilt) -> None:
        print(f"rebuilt {done.board}: {done.players} players", file=self._out, flush=True)


def cmd_rebuild(args: argparse.Namespace) -> int:
    settings = settings_from(ArchiverSettings, args)
    redis_connect.check(settings)
    shown = Shown(sys.stdout, sys.stderr)  # stdout stays the boards rebuilt; progress beside it

    async def main() -> int:
        ends = await last_offsets(
            settings.kafka, settings.topic, settings.kafka_start_timeout_s, client_kwargs(settings)
        )
        redis = redis_connect.connect(settings, socket_timeout=settings.redis_timeout_s)
        try:
            async with KafkaRange(settings) as kafka:
                done, skipped, invalid = await rebuild(
                    redis,
                    kafka,
                    settings.topic,
                    None if args.all else args.board,
                    ends,
                    accept_loss=args.accept_retention_loss,
                    timeout_s=settings.kafka_start_timeout_s,
                    read=shown.read,
                    progress=shown.rebuilt,
                )
        finally:
            await redis.aclose()
        for board, why in sorted(skipped.items()):
            print(f"SKIPPED {board}: its definition cannot be read ({why})")
        print(f"rebuilt {len(done)} boards, {sum(d.players for d in done)} players ({invalid} invalid records)")
        return EXIT_NOT_FOUND if skipped or not done else 0

    try:
        return asyncio.run(main())
    except LogCut as exc:
        return logs.command_failed(
            "rebuild",
            f"refused: {exc}; restore from the archive (hotboard restore), or pass "
            "--accept-retention-loss to rebuild from what the log keeps",
            exit_code=EXIT_CONFIG,
        )
    # RedisClusterException: no seed node of a cluster answers (redis-py's own error, not a ConnectionError)
    except (
        LogEndsUnavailable,
        KafkaError,
        RedisConnectionError,
        RedisClusterException,
        RedisTimeoutError,
        OSError,
    ) as exc:
        return logs.command_failed("rebuild", str(exc), exit_code=EXIT_UNAVAILABLE)
