"""``hotboard produce``: publish valid, Zipf-skewed score events (load for the demo and the benchmarks)."""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from cli.loadgen import generate, publish
from cli.options import add_options, settings_from
from hotboard import kafka_security
from ingest.settings import WorkerSettings


def add_parser(sub: Any) -> None:
    p = sub.add_parser("produce", help="publish valid, Zipf-skewed score events")
    add_options(p, WorkerSettings, only=("kafka", "topic", *kafka_security.KafkaSecuritySettings.model_fields))
    p.add_argument("--rate", type=float, default=1000.0, help="events/s, 0 = as fast as possible")
    p.add_argument("--count", type=int, default=100_000)
    p.add_argument("--players", type=int, default=10_000)
    p.add_argument("--zipf", type=float, default=1.1, help="skew exponent, 0 = uniform")
    p.add_argument("--boards", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(run=cmd_produce)


def cmd_produce(args: argparse.Namespace) -> int:
    target = settings_from(WorkerSettings, args)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        events = generate(args.count, players=args.players, zipf=args.zipf, boards=args.boards, seed=args.seed)
        security = kafka_security.client_kwargs(target)
        stats = await publish(
            target.kafka, target.topic, events, rate=args.rate, fresh_ts=True, stop=stop, security=security
        )
        print(f"sent {stats.events} events to {target.topic} in {stats.seconds:.2f}s ({stats.rate:,.0f} events/s)")

    asyncio.run(main())
    return 0
