"""``hotboard boards create|list|show|delete|erase``: declare and inspect board definitions (``hb:{B}:def``);
remove a board or a player (:mod:`cli.removal`).

The storage rules live in :mod:`hotboard.board_store`; this module only parses, prints and maps outcomes to
exit codes (:mod:`cli.exits`): 0 done, 1 no such board, 2 refused or invalid, 3 Redis unreachable.
``--redis`` and the options beside it (user, password file, TLS files) are the connection settings every
process shares (:class:`hotboard.redis_connect.RedisSettings`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from functools import partial
from typing import Any

from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.connection import parse_url
from redis.exceptions import AuthenticationError, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from cli import removal
from cli.exits import EXIT_CONFIG, EXIT_NOT_FOUND, EXIT_UNAVAILABLE, Refused
from cli.options import add_options, settings_from
from hotboard import board_store, keys, logs, redis_connect
from hotboard.boards import DEFAULT, OPERATORS, ORDERS, TIES, BoardDef, DefinitionError, from_hash
from hotboard.redis_client import Client
from hotboard.redis_connect import RedisSettings
from hotboard.redis_url import BadRedisUrl
from hotboard.safe_text import escape, redact, redact_url

#: Boards read per round trip pair by ``list`` (board_store.page): bounded replies whatever the board count.
PAGE_SIZE = 100

Command = removal.Command


def add_parser(sub: Any) -> None:
    """Register ``boards``, with the Redis connection options (and HOTBOARD_REDIS*) of the other commands."""
    p = sub.add_parser("boards", help="declare, inspect and delete boards; erase a player from one")
    leaves = p.add_subparsers(dest="boards_command", required=True)

    create = leaves.add_parser("create", help="declare a board (idempotent; refused once the board has scores)")
    create.add_argument("name", help="board name: 1-64 characters of A-Z a-z 0-9 _ . : -")
    # Each default is None here, so that _create knows which options were given (the definition's own default
    # applies to the others, and the output says which of those changed a stored definition).
    create.add_argument("--order", choices=ORDERS, help="desc: highest first (default); asc: lowest first")
    create.add_argument("--operator", choices=OPERATORS, help=f"default {DEFAULT.operator}")
    create.add_argument("--ties", choices=TIES, help=f"default {DEFAULT.ties}")
    create.add_argument(
        "--reset",
        help="seasons: never (default), hourly, daily, weekly "
        "(ISO, Monday 00:00), monthly or a 5-field cron expression, all UTC",
    )
    keep, grace = DEFAULT.keep, DEFAULT.grace_ms
    create.add_argument("--keep", type=int, help=f"closed periods kept queryable (default {keep})")
    grace_help = f"late events still count this long after their period closes (default {grace})"
    create.add_argument("--grace-ms", type=int, help=grace_help)
    list_ = leaves.add_parser("list", help="every board with its definition, by name")
    list_.add_argument("--page-size", type=int, default=PAGE_SIZE, help=f"boards per read (default {PAGE_SIZE})")
    show = leaves.add_parser("show", help="one board: definition, size, version, as_of")
    show.add_argument("name")
    commands: list[tuple[argparse.ArgumentParser, Command]] = [(create, _create), (list_, _list), (show, _show)]
    for leaf, _ in commands:
        add_options(leaf, RedisSettings)
    commands += removal.add_parsers(leaves)
    for leaf, command in commands:
        leaf.add_argument("--json", action="store_true", help="print JSON instead of text")
        leaf.set_defaults(run=partial(_run, command))


def _run(command: Command, args: argparse.Namespace) -> int:
    """One client per command, always closed; Redis failures become one line and exit 3, not a traceback.
    Every failure it prints goes through :func:`_err`, which masks the password of any URL in it."""
    settings = settings_from(RedisSettings, args)
    url = settings.redis
    shown = redact_url(url)  # the only spelling of the URL any message holds
    where = f"boards {args.boards_command}"

    async def main() -> int:
        try:
            redis_connect.check(settings)
        except BadRedisUrl as exc:
            raise Refused(str(exc)) from None
        # one quick retry: a person is waiting, the worker's patient reconnect policy is not wanted here
        client = redis_connect.connect(
            settings, retry=Retry(NoBackoff(), 1), socket_connect_timeout=5, socket_timeout=5
        )
        try:
            return await command(client, args)
        finally:
            await client.aclose()

    try:
        return asyncio.run(main())
    except (Refused, DefinitionError) as exc:
        return _err(where, str(exc), exc.code if isinstance(exc, Refused) else EXIT_CONFIG)
    except AuthenticationError as exc:  # a ConnectionError to redis-py, but not one a retry mends
        return _err(
            where, f"Redis refused the credentials of user {_user(settings)!r} at {shown}: {exc}", EXIT_UNAVAILABLE
        )
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        return _err(where, f"Redis unreachable at {shown}: {exc}", EXIT_UNAVAILABLE)
    except RedisError as exc:
        return _err(where, f"Redis error: {exc}", EXIT_UNAVAILABLE)


def _user(settings: RedisSettings) -> str:
    """The ACL user a connection logs in as: the setting, else the URL's, else Redis's ``default``."""
    return settings.redis_username or parse_url(settings.redis).get("username") or "default"  # type: ignore[no-untyped-call]


#: The fields of a definition, each an option of ``create``.
FIELDS = ("order", "operator", "ties", "reset", "keep", "grace_ms")


async def _create(redis: Client, args: argparse.Namespace) -> int:
    given = {name for name in FIELDS if getattr(args, name) is not None}
    definition = BoardDef(**{name: getattr(args, name) for name in given})  # the rest: BoardDef's defaults
    done = await board_store.declare(redis, args.name, definition)
    old, new = done.previous.as_dict(), done.definition.as_dict()
    changed = {name: [old[name], new[name]] for name in FIELDS if done.outcome == "replaced" and old[name] != new[name]}
    if args.json:
        _print_json(
            {
                "board": args.name,
                "outcome": done.outcome,
                **_definition(done.definition),
                "previous": done.previous.spec,
                "changed": changed,
                "defaulted": [name for name in changed if name not in given],
            }
        )
    elif done.outcome == "replaced":
        # A create states the whole definition: an option left out is its default again, which may undo a
        # choice made earlier. Each changed field is named, so that this never happens unseen.
        _out(f"replaced {args.name}: {done.definition.spec} (was {done.previous.spec})")
        for name, (before, after) in changed.items():
            _out(f"  {name}: {before} -> {after}" + ("" if name in given else " (not given: the default)"))
    else:
        _out(f"{done.outcome} {args.name}: {done.definition.spec}")
    return 0


async def _list(redis: Client, args: argparse.Namespace) -> int:
    if args.page_size < 1:
        raise Refused("--page-size must be at least 1")
    rows: list[dict[str, str | int]] = []
    after: bytes | None = None
    while True:
        found, after = await board_store.page(redis, after, args.page_size)
        for name, definition in found:
            if isinstance(definition, DefinitionError):  # written by something else: shown so it can be removed
                if args.json:
                    rows.append({"board": name, "error": str(definition)})
                else:
                    _out(f"{escape(name)}\tunreadable: {escape(str(definition))}")
            elif args.json:
                rows.append({"board": name, **_definition(definition)})
            else:
                _out(f"{escape(name)}\t{definition.spec}")  # a seasonal spec ends |reset|keep|grace_ms
        if after is None:
            break
    if args.json:
        _print_json(rows)
    return 0


async def _show(redis: Client, args: argparse.Namespace) -> int:
    board = args.name
    if not keys.is_valid_board(board):
        raise Refused("board must be 1-64 characters of A-Z a-z 0-9 _ . : -")
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.def_key(board))
        pipe.zcard(keys.board_key(board))
        pipe.hmget(keys.meta_key(board), [keys.META_VERSION, keys.META_AS_OF])
        pipe.exists(keys.board_key(board), keys.meta_key(board))
        stored, size, (version, as_of), written = await pipe.execute()
    if not stored and not written:
        raise Refused(f"no board {board!r}: not declared and never written (see hotboard boards list)", EXIT_NOT_FOUND)
    definition = from_hash(stored)
    created = stored.get(b"created")
    info: dict[str, Any] = {
        "board": board,
        **_definition(definition),
        "declared": bool(stored),
        "created": _int(created),
        "size": int(size),
        "version": _int(version),
        "as_of": _int(as_of),
    }
    if args.json:
        _print_json(info)
    else:
        width = max(map(len, info))
        for name, value in info.items():
            _out(f"{name.ljust(width)}  {escape(_shown(value))}")
    return 0


def _definition(definition: BoardDef) -> dict[str, str | int]:
    return {**definition.as_dict(), "spec": definition.spec}


def _shown(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _int(raw: bytes | None) -> int | None:
    return None if raw is None else int(raw)


def _print_json(value: object) -> None:
    _out(json.dumps(value, separators=(",", ":")))


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")


def _err(command: str, message: str, code: int) -> int:
    """Errors quote what they were given and what Redis holds: no password, no control character, one line
    (a JSON object with ``--log-format json``)."""
    return logs.command_failed(command, escape(redact(message)), exit_code=code)
