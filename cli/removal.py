"""``hotboard boards delete NAME`` and ``hotboard boards erase NAME PLAYER``: remove a board, or a player from one
(a user's right to erasure), while workers run. The rules (delete point, what a replay from Kafka does) are
:mod:`hotboard.board_removal`'s, the archive's half (``--postgres``) :mod:`archive.removal`'s; this module reads
the log's end from Kafka, waits where erasing must, prints.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

from redis.asyncio import RedisCluster

from archive import removal as archive_removal
from archive.pool import Archive, ArchiveUnavailable
from cli.exits import EXIT_NOT_FOUND, EXIT_UNAVAILABLE, Refused
from cli.log_ends import LogEndsUnavailable, last_offsets
from cli.options import add_options, settings_from
from flusher.cluster import ClusterSink, ReplicaAcksShort
from hotboard import board_removal, kafka_security, keys
from hotboard.kafka_security import KafkaSecuritySettings
from hotboard.redis_client import Client
from hotboard.redis_connect import RedisSettings
from hotboard.safe_text import escape
from hotboard.script import Script
from ingest.settings import WorkerSettings

#: The settings fields these commands need beside ``redis``: where the events come from, the archive (if any), and
#: on a Redis Cluster the replicas that must confirm the removal (as they confirm a window).
NEEDS = frozenset({"kafka", "topic", "postgres", "min_replica_acks", "replica_ack_timeout_ms"})
#: How long ``erase`` waits by default for the workers to apply every event sent before it.
DEFAULT_WAIT_S = 60.0
#: How long reading the log's end from Kafka may take.
KAFKA_TIMEOUT_S = 15.0
#: PostgreSQL connect and statement timeout of the archive's half.
ARCHIVE_TIMEOUT_S = 10.0
_POLL_S = 0.2

Command = Callable[[Client, argparse.Namespace], Awaitable[int]]


def add_parsers(leaves: Any) -> list[tuple[argparse.ArgumentParser, Command]]:
    """Register ``delete`` and ``erase`` under ``boards``; each takes ``--redis``, ``--kafka`` and ``--topic``."""
    delete = leaves.add_parser(
        "delete",
        help="delete a board (scores, meta, definition); its events so far never count again, later ones "
        "start it afresh; with --postgres in the archive too (pass it whenever an archiver runs)",
    )
    delete.add_argument("name")
    erase = leaves.add_parser(
        "erase",
        help="remove a player from a board (score, tie time, meta) once every event sent before is applied; "
        "stop sending the player's events first, or later ones count again; with --postgres in the archive too, "
        "once the archivers applied them as well",
    )
    erase.add_argument("name")
    erase.add_argument("player")
    erase.add_argument(
        "--wait-s",
        type=float,
        default=DEFAULT_WAIT_S,
        help=f"how long to wait for the workers (and archivers) to apply the events sent before "
        f"(default {DEFAULT_WAIT_S:g})",
    )
    for leaf in (delete, erase):
        add_options(leaf, RedisSettings)
        add_options(leaf, WorkerSettings, only=(*sorted(NEEDS), *KafkaSecuritySettings.model_fields))
    return [(delete, _delete), (erase, _erase)]


async def _log_end(args: argparse.Namespace) -> tuple[str, dict[int, int]]:
    s = settings_from(WorkerSettings, args)
    try:
        return s.topic, await last_offsets(s.kafka, s.topic, KAFKA_TIMEOUT_S, kafka_security.client_kwargs(s))
    except LogEndsUnavailable as exc:
        raise Refused(str(exc), EXIT_NOT_FOUND if exc.unknown_topic else EXIT_UNAVAILABLE) from None


def _check_board(board: str) -> None:
    if not keys.is_valid_board(board):
        raise Refused("board must be 1-64 characters of A-Z a-z 0-9 _ . : -")


def _send(redis: Client, args: argparse.Namespace, what: str) -> board_removal.Send | None:
    """On a Redis Cluster, the removal script ends with WAIT on the board's master for ``--min-replica-acks``
    replicas, as a window does: reported done, it survives a failover. Too few: exit 3, applied on the master
    (a rerun finds it done there and waits again). One server: None (straight)."""
    if not isinstance(redis, RedisCluster):
        return None
    s = settings_from(WorkerSettings, args)
    sink = ClusterSink(redis, s.topic, min_replica_acks=s.replica_acks, replica_ack_timeout_ms=s.replica_ack_timeout_ms)

    async def replicated(script: Script, keys_: Sequence[str], argv: Sequence[Any]) -> Any:
        try:
            return await sink.replicated(script, keys_, argv)
        except ReplicaAcksShort:
            raise Refused(
                f"the {what} of {args.name!r} is applied on its master but confirmed on {sink.last_acks} replicas, "
                f"fewer than {sink.min_replica_acks} within {sink.replica_ack_timeout_ms} ms (--min-replica-acks, "
                "--replica-ack-timeout-ms): a failover now could undo it; run the command again once the replicas "
                "answer",
                EXIT_UNAVAILABLE,
            ) from None

    return replicated


@contextlib.asynccontextmanager
async def _archive(args: argparse.Namespace) -> AsyncIterator[Archive | None]:
    """The archive when ``--postgres`` (HOTBOARD_POSTGRES) is set, else None; PostgreSQL down is exit 3."""
    url = settings_from(WorkerSettings, args).postgres
    with _unavailable():
        if not url:
            yield None
            return
        async with Archive(url, ARCHIVE_TIMEOUT_S) as archive:
            yield archive


@contextlib.contextmanager
def _unavailable() -> Iterator[None]:
    try:
        yield
    except ArchiveUnavailable as exc:
        raise Refused(f"the archive: {exc}", EXIT_UNAVAILABLE) from None


async def _delete(redis: Client, args: argparse.Namespace) -> int:
    _check_board(args.name)
    topic, last = await _log_end(args)
    send = _send(redis, args, "delete")

    async def in_redis(points: Mapping[int, int]) -> board_removal.Deleted:
        return await board_removal.delete(redis, topic, args.name, points, send)

    async with _archive(args) as archive:
        if archive is None:
            done = await in_redis(last)
        else:
            done = await archive_removal.delete(archive, topic, args.name, last, in_redis)
    if not done.found:
        raise Refused(f"no board {args.name!r}: nothing to delete (see hotboard boards list)", EXIT_NOT_FOUND)
    point = {str(p): o for p, o in done.points.items()}
    if done.already_deleted:  # a retry, or a second operator: say so, as for a board that never was (exit 1)
        raise Refused(
            f"board {args.name!r} was deleted already and not written since: nothing to delete (its events at or "
            f"below partition:offset {_points(point)} never count)",
            EXIT_NOT_FOUND,
        )
    if args.json:
        _out(json.dumps({"board": args.name, "outcome": "deleted", "version": done.version, "delete_point": point}))
    else:
        _out(f"deleted {args.name}: events of {topic} at or below partition:offset {_points(point)} no longer count")
    return 0


def _points(point: Mapping[str, int]) -> str:
    return " ".join(f"{p}:{o}" for p, o in point.items())


async def _erase(redis: Client, args: argparse.Namespace) -> int:
    """Both stores must have applied every event sent before, or nothing is erased anywhere; then the archive
    first: a failure in between leaves the player in Redis only, where a rerun finds it, and no restore can bring
    them back from the archive."""
    _check_board(args.name)
    if not keys.is_valid_player(args.player):
        raise Refused("player must be 1-128 characters without control characters")
    topic, last = await _log_end(args)
    deadline = time.monotonic() + args.wait_s

    async def in_redis(partitions: Collection[int]) -> dict[int, int]:
        return await board_removal.checkpoints(redis, topic, sorted(partitions))

    await _wait_applied(in_redis, "the workers", last, deadline, args.wait_s)
    archived = False
    async with _archive(args) as archive:
        if archive is not None:

            async def in_archive(partitions: Collection[int]) -> dict[int, int]:
                return await archive_removal.checkpoints(archive, topic, partitions)

            await _wait_applied(in_archive, "the archivers", last, deadline, args.wait_s)
            archived = await archive_removal.erase(archive, args.name, args.player, int(time.time() * 1000))
    done = await board_removal.erase(redis, args.name, args.player, _send(redis, args, "erasure"))
    found = done.found or archived
    if args.json:
        outcome = "erased" if found else "absent"
        _out(json.dumps({"board": args.name, "player": args.player, "outcome": outcome}))
    elif found:
        _out(f"erased {escape(args.player)} from {args.name}")
    else:
        _out(f"{escape(args.player)} is not on {args.name}: nothing to erase")
    return 0


async def _wait_applied(
    read: Callable[[Collection[int]], Awaitable[dict[int, int]]],
    who: str,
    last: dict[int, int],
    deadline: float,
    wait_s: float,
) -> None:
    """Until every partition's checkpoint (``read``) reached the log's end read before: no window in flight then
    holds an event sent before the command."""
    wanted = {p: o for p, o in last.items() if o >= 0}
    while True:
        held = await read(wanted)
        behind = {p: (held[p], o) for p, o in wanted.items() if held[p] < o}
        if not behind:
            return
        if time.monotonic() >= deadline:
            p, (at, end) = min(behind.items())
            raise Refused(
                f"the events sent before are not all applied by {who} after {wait_s:g}s ({len(behind)} partitions "
                f"behind, e.g. {p}: checkpoint {at}, log end {end}); are {who} running? Nothing was erased",
                EXIT_UNAVAILABLE,
            )
        await asyncio.sleep(_POLL_S)


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")
