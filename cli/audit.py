"""``hotboard audit [--board B]``: check every player of Redis against the archive plus the events in between
(read back from Kafka); one line per player that differs, exit 0 when every board agrees."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from aiokafka.errors import KafkaError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from archive.audit import BoardAudit, audit
from archive.pool import Archive, ArchiveUnavailable
from archive.settings import AuditSettings
from cli.exits import EXIT_UNAVAILABLE
from cli.options import add_options, settings_from
from hotboard import logs, redis_connect
from hotboard.kafka_security import KafkaSecuritySettings
from hotboard.redis_connect import RedisSettings

#: Some players differ, or could not be verified.
EXIT_DIFFERS = 1
OPTIONS = (
    "postgres",
    "topic",
    "kafka",
    "postgres_timeout_s",
    "kafka_start_timeout_s",
    "redis_timeout_s",
    "snapshot_timeout_s",
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("audit", help="check Redis against the archive and the topic, player by player")
    p.add_argument("--board", help="one board (with its periods); default every board")
    add_options(p, AuditSettings, only=(*OPTIONS, *RedisSettings.model_fields, *KafkaSecuritySettings.model_fields))
    p.set_defaults(run=cmd_audit)


def _state(state: Any) -> str:
    if state is None:
        return "absent"
    score, tie, meta = state
    return " ".join([f"score={score}", *([f"tie_ms={tie}"] if tie is not None else []), f"meta={meta!r}"])


def report(result: BoardAudit) -> None:
    for d in result.differences:
        print(f"DIFFERS board={d.board} player={d.player} have {_state(d.redis)}; {d.basis}: {_state(d.expected)}")
    for player in result.unverified_players:
        print(f"UNVERIFIED board={result.board} player={player}: its events lie on partitions moving opposite ways")
    if result.unverified is not None:
        print(f"UNVERIFIED board={result.board}: {result.unverified}")
    verdict = "exact" if result.exact else f"{len(result.differences)} differ"
    print(f"board {result.board}: {result.players} players, {result.events} events in between, {verdict}", flush=True)


def cmd_audit(args: argparse.Namespace) -> int:
    settings = settings_from(AuditSettings, args)
    redis_connect.check(settings)

    async def main() -> list[BoardAudit]:
        short = settings.redis_timeout_s
        redis = redis_connect.connect(settings, socket_timeout=short)
        # the snapshots' own client: a long read (a large board's MULTI), a connection made as fast as the others
        snapshots = redis_connect.connect(
            settings, socket_timeout=settings.snapshot_timeout_s, socket_connect_timeout=short
        )
        try:
            async with Archive(settings.postgres, settings.postgres_timeout_s) as archive:
                return await audit(
                    settings,
                    archive,
                    redis,
                    args.board,
                    report,
                    snapshots=snapshots,
                    snapshot_timeout_s=settings.snapshot_timeout_s,
                )
        finally:
            await snapshots.aclose()
            await redis.aclose()

    try:
        results = asyncio.run(main())
    except (ArchiveUnavailable, KafkaError, RedisConnectionError, RedisTimeoutError, TimeoutError) as exc:
        return logs.command_failed("audit", repr(exc), exit_code=EXIT_UNAVAILABLE)
    bad = [r for r in results if not r.exact]
    players = sum(r.players for r in results)
    print(f"audited {len(results)} boards, {players} players: {len(bad)} boards not exact")
    return EXIT_DIFFERS if bad else 0
