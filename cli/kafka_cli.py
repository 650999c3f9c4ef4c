"""What the commands that talk to Kafka themselves share (``send``, ``dlq``, ``produce``): the worker's own
``--kafka``, ``--topic``, ``--kafka-start-timeout-s`` and TLS/SASL options (same variables, same defaults),
and Kafka's failures as one line and exit 3 instead of a traceback."""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiokafka.errors import KafkaError

from cli.exits import EXIT_UNAVAILABLE
from cli.options import add_options
from hotboard import logs
from hotboard.kafka_security import KafkaSecuritySettings
from ingest import kafka_config
from ingest.kafka_config import KafkaUnavailable
from ingest.settings import WorkerSettings

#: The worker's settings these commands take, so that they reach the worker's topic by default.
KAFKA_OPTIONS = ("kafka", "topic", "kafka_start_timeout_s", *KafkaSecuritySettings.model_fields)


def add_kafka_options(parser: argparse.ArgumentParser, *more: str) -> None:
    add_options(parser, WorkerSettings, only=(*KAFKA_OPTIONS, *more))


def run_kafka(command: str, main: Callable[[], Awaitable[int]]) -> int:
    """``asyncio.run(main())``; Kafka unreachable at start, or failing later, is one line and exit 3."""
    # The client and the start retries log every failed attempt; the one line below says what they came to.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    kafka_config.log.setLevel(logging.ERROR)
    try:
        return asyncio.run(_awaited(main))
    except KafkaUnavailable as exc:
        return logs.command_failed(command, str(exc), exit_code=EXIT_UNAVAILABLE)
    except KafkaError as exc:
        return logs.command_failed(command, f"Kafka failed: {exc!r}", exit_code=EXIT_UNAVAILABLE)


async def _awaited(main: Callable[[], Awaitable[int]]) -> int:
    return await main()
