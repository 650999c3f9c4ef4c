"""``hotboard boards delete NAME`` and ``hotboard boards erase NAME PLAYER``: remove a board, or a player from one
(a user's right to erasure), while workers run. The rules (delete point, what a replay from Kafka does) are
:mod:`hotboard.board_removal`'s; this module reads the log's end from Kafka, waits where erasing must, prints.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from cli.exits import EXIT_NOT_FOUND, EXIT_UNAVAILABLE, Refused
from cli.log_ends import LogEndsUnavailable, last_offsets
from cli.options import add_options, settings_from
from hotboard import board_removal, kafka_security, keys
from hotboard.kafka_security import KafkaSecuritySettings
from hotboard.redis_client import Client
from hotboard.redis_connect import RedisSettings
from hotboard.safe_text import escape
from ingest.settings import WorkerSettings

#: The settings fields these commands need beside ``redis``: where the events come from.
NEEDS = frozenset({"kafka", "topic"})
#: How long ``erase`` waits by default for the workers to apply every event sent before it.
DEFAULT_WAIT_S = 60.0
#: How long reading the log's end from Kafka may take.
KAFKA_TIMEOUT_S = 15.0
_POLL_S = 0.2

Command = Callable[[Client, argparse.Namespace], Awaitable[int]]


def add_parsers(leaves: Any) -> list[tuple[argparse.ArgumentParser, Command]]:
    """Register ``delete`` and ``erase`` under ``boards``; each takes ``--redis``, ``--kafka`` and ``--topic``."""
    delete = leaves.add_parser(
        "delete",
        help="delete a board (scores, meta, definition); its events so far never count again, later ones "
        "start it afresh",
    )
    delete.add_argument("name")
    erase = leaves.add_parser(
        "erase",
        help="remove a player from a board (score, tie time, meta) once every event sent before is applied; "
        "stop sending the player's events first, or later ones count again",
    )
    erase.add_argument("name")
    erase.add_argument("player")
    erase.add_argument(
        "--wait-s",
        type=float,
        default=DEFAULT_WAIT_S,
        help=f"how long to wait for the workers to apply the events sent before (default {DEFAULT_WAIT_S:g})",
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


async def _delete(redis: Client, args: argparse.Namespace) -> int:
    _check_board(args.name)
    topic, last = await _log_end(args)
    done = await board_removal.delete(redis, topic, args.name, last)
    if not done.found:
        raise Refused(f"no board {args.name!r}: nothing to delete (see hotboard boards list)", EXIT_NOT_FOUND)
    point = {str(p): o for p, o in done.points.items()}
    if args.json:
        _out(json.dumps({"board": args.name, "outcome": "deleted", "version": done.version, "delete_point": point}))
    else:
        shown = " ".join(f"{p}:{o}" for p, o in point.items())
        _out(f"deleted {args.name}: events of {topic} at or below partition:offset {shown} no longer count")
    return 0


async def _erase(redis: Client, args: argparse.Namespace) -> int:
    _check_board(args.name)
    if not keys.is_valid_player(args.player):
        raise Refused("player must be 1-128 characters without control characters")
    topic, last = await _log_end(args)
    await _wait_applied(redis, topic, last, args.wait_s)
    done = await board_removal.erase(redis, args.name, args.player)
    if args.json:
        outcome = "erased" if done.found else "absent"
        _out(json.dumps({"board": args.name, "player": args.player, "outcome": outcome}))
    elif done.found:
        _out(f"erased {escape(args.player)} from {args.name}")
    else:
        _out(f"{escape(args.player)} is not on {args.name}: nothing to erase")
    return 0


async def _wait_applied(redis: Client, topic: str, last: dict[int, int], wait_s: float) -> None:
    """Until every partition's checkpoint reached the log's end read before: no window in flight then holds an
    event sent before the command."""
    wanted = {p: o for p, o in last.items() if o >= 0}
    deadline = time.monotonic() + wait_s
    while True:
        held = await board_removal.checkpoints(redis, topic, sorted(wanted))
        behind = {p: (held[p], o) for p, o in wanted.items() if held[p] < o}
        if not behind:
            return
        if time.monotonic() >= deadline:
            p, (at, end) = min(behind.items())
            raise Refused(
                f"the events sent before are not all applied after {wait_s:g}s ({len(behind)} partitions behind, "
                f"e.g. {p}: checkpoint {at}, log end {end}); are the workers running? Nothing was erased",
                EXIT_UNAVAILABLE,
            )
        await asyncio.sleep(_POLL_S)


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")
