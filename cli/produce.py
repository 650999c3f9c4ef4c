"""``hotboard produce``: publish valid, Zipf-skewed score events (load for the demo and the benchmarks)."""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from cli.kafka_cli import add_kafka_options, run_kafka
from cli.loadgen import generate, publish
from cli.options import DefaultsFormatter, settings_from
from hotboard import kafka_security
from ingest.settings import WorkerSettings


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "produce",
        help="publish valid, Zipf-skewed score events (load for the demo and benchmarks)",
        description="Publish generated score events, keyed by player, at a steady rate. The events follow "
        "from --seed: the same options send the same events.",
        formatter_class=DefaultsFormatter,
    )
    add_kafka_options(p)
    p.add_argument("--rate", type=float, default=1000.0, help="events per second; 0 = as fast as possible")
    p.add_argument("--count", type=int, default=100_000, help="events to send, then exit")
    p.add_argument("--players", type=int, default=10_000, help="distinct players p-0, p-1, ...")
    p.add_argument("--zipf", type=float, default=1.1, help="skew of the players' activity; 0 = uniform")
    p.add_argument("--boards", type=int, default=1, help="boards: global, board-1, board-2, ...")
    p.add_argument("--seed", type=int, default=0, help="seed of the generator")
    p.set_defaults(run=cmd_produce)


def cmd_produce(args: argparse.Namespace) -> int:
    target = settings_from(WorkerSettings, args)

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        events = generate(args.count, players=args.players, zipf=args.zipf, boards=args.boards, seed=args.seed)
        stats = await publish(
            target.kafka,
            target.topic,
            events,
            rate=args.rate,
            fresh_ts=True,
            stop=stop,
            start_timeout_s=target.kafka_start_timeout_s,
            security=kafka_security.client_kwargs(target),
        )
        print(f"sent {stats.events} events to {target.topic} in {stats.seconds:.2f}s ({stats.rate:,.0f} events/s)")
        return 0

    return run_kafka("produce", main)
