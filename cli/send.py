"""``hotboard send``: publish score events by hand, one from options or JSON lines from stdin.

Each event goes through the worker's codec (:mod:`hotboard.codec`) before anything is sent, so an event the
workers would dead-letter is refused here with the same reason. Events are keyed by player (one player, one
partition, in order) and acknowledged by every in-sync replica (``acks=all``) before the command exits.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator
from contextlib import AsyncExitStack
from typing import IO, Any

import orjson
from aiokafka import AIOKafkaProducer

from cli.exits import EXIT_CONFIG, EXIT_OK
from cli.kafka_cli import add_kafka_options, run_kafka
from cli.options import settings_from
from hotboard import logs
from hotboard.codec import AMOUNT_FIELD, Decoder, InvalidEvent
from hotboard.keys import DEFAULT_BOARD
from hotboard.safe_text import escape
from ingest.kafka_config import producer_config, start_clients
from ingest.settings import WorkerSettings

#: Acknowledgements awaited together when reading stdin: bounded memory whatever the input's length.
IN_FLIGHT = 1000


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "send",
        help="send one score event, or JSON lines from stdin (-), checked like the workers check them",
        description="Send score events to the score topic, keyed by player. Each is checked against the\n"
        "event contract first: an invalid one is refused with its reason (exit 2) and not sent.",
        epilog="examples:  hotboard send --board global --player alice --delta 10\n"
        '           hotboard send --board speedrun --player bob --op best --score 5230 --meta \'{"name":"Bob"}\'\n'
        '           printf \'%s\\n\' \'{"player":"alice","delta":1}\' | hotboard send -',
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("lines", nargs="?", choices=["-"], metavar="-", help="read one JSON event per line from stdin")
    p.add_argument("--board", help=f"board name (default {DEFAULT_BOARD})")
    p.add_argument("--player", help="player id: the record's key")
    p.add_argument("--delta", type=int, help="amount of an incr or decr")
    p.add_argument("--op", choices=list(AMOUNT_FIELD), help="operator; default the board's own")
    p.add_argument("--score", type=int, help="amount of a set or best")
    p.add_argument("--meta", help="display metadata, a JSON object")
    add_kafka_options(p)
    p.set_defaults(run=cmd_send)


def cmd_send(args: argparse.Namespace) -> int:
    settings = settings_from(WorkerSettings, args)
    fields = ("board", "player", "delta", "op", "score", "meta")
    given = [f"--{name}" for name in fields if getattr(args, name) is not None]
    if args.lines == "-":
        if given:
            return _refuse(f"{' '.join(given)} cannot be combined with -: each stdin line is a whole event")
        return run_kafka("send", lambda: _send_lines(settings, sys.stdin.buffer))
    try:
        value = _event_from(args)
        key = _key(Decoder().fields(value))
    except InvalidEvent as exc:  # refused before connecting: nothing is sent
        return _refuse(f"refused: {exc}")
    except ValueError as exc:
        return _refuse(str(exc))
    return run_kafka("send", lambda: _send_one(settings, key, value))


def _event_from(args: argparse.Namespace) -> bytes:
    """The event the options describe, as the value the workers will read."""
    if args.player is None:
        raise ValueError("--player is required (or - to read events from stdin)")
    body: dict[str, object] = {"board": args.board or DEFAULT_BOARD, "player": args.player}
    for name in ("op", "delta", "score"):
        if getattr(args, name) is not None:
            body[name] = getattr(args, name)
    if args.meta is not None:
        try:
            body["meta"] = orjson.loads(args.meta)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"--meta is not JSON: {exc}") from None
    return orjson.dumps(body)


def _key(fields: tuple[Any, ...]) -> bytes:
    return str(fields[1]).encode()  # the player: one player's events stay in order on one partition


async def _producer(stack: AsyncExitStack, settings: WorkerSettings) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(**producer_config(settings))  # acks=all; stop() sends what is still batched
    await start_clients(stack, [producer], settings.kafka, settings.kafka_start_timeout_s, settings)
    return producer


async def _send_one(settings: WorkerSettings, key: bytes, value: bytes) -> int:
    async with AsyncExitStack() as stack:
        producer = await _producer(stack, settings)
        sent = await producer.send_and_wait(settings.topic, value=value, key=key)
    print(f"sent to {settings.topic} partition {sent.partition} offset {sent.offset}: {escape(value.decode())}")
    return EXIT_OK


async def _send_lines(settings: WorkerSettings, source: IO[bytes]) -> int:
    """Each line checked and sent (refused ones reported on stderr, not sent); exit 2 if any was refused."""
    decoder = Decoder()
    refused = sent = 0
    async with AsyncExitStack() as stack:
        producer = await _producer(stack, settings)
        waiting: list[tuple[int, Any]] = []

        async def report() -> None:
            nonlocal sent
            for number, future in waiting:
                done = await future
                print(f"line {number}: sent to {settings.topic} partition {done.partition} offset {done.offset}")
                sent += 1
            waiting.clear()

        for number, line in _numbered(source):
            try:
                key = _key(decoder.fields(line))
            except InvalidEvent as exc:
                refused += 1
                said = f"line {number}: refused: {escape(str(exc))}"
                logs.command_failed("send", said, exit_code=EXIT_CONFIG, prefix=False, line=number)
                continue
            waiting.append((number, await producer.send(settings.topic, value=line, key=key)))
            if len(waiting) >= IN_FLIGHT:
                await report()
        await report()
    code = EXIT_CONFIG if refused else EXIT_OK
    level = logging.ERROR if refused else logging.INFO
    said = f"{sent} sent, {refused} refused"
    return logs.command_failed("send", said, exit_code=code, prefix=False, level=level, sent=sent, refused=refused)


def _numbered(source: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """Non-blank lines with their 1-based numbers, line endings removed."""
    for number, raw in enumerate(source, start=1):
        line = raw.rstrip(b"\r\n")
        if line.strip():
            yield number, line


def _refuse(message: str) -> int:
    return logs.command_failed("send", escape(message), exit_code=EXIT_CONFIG)
