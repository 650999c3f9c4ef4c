"""``hotboard`` command line: worker, dev, produce, demo, boards (and api, from reader_api)."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hotboard import __version__, boards_cli, redis_url
from hotboard.devstack import DevStack, StackError, require_free
from hotboard.process import LOOPBACK, Child, port_open, stop_all, url_answers
from hotboard.settings import LogSettings
from hotboard.settings_cli import add_options, settings_from
from ingest.settings import WorkerSettings

EXIT_CONFIG = 2
EXIT_UNAVAILABLE = 3


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("aiokafka").setLevel(logging.WARNING)


def _worker_parser(sub: Any) -> None:
    p = sub.add_parser("worker", help="run one worker (scale out by starting more with the same --group)")
    add_options(p, WorkerSettings)


def cmd_worker(args: argparse.Namespace) -> int:
    from flusher.server import EvictionPolicyError
    from ingest.kafka_config import KafkaUnavailable
    from ingest.worker import Worker

    settings = settings_from(WorkerSettings, args)
    redis_url.check(settings.redis, settings.redis_cluster)

    async def main() -> None:
        async with Worker(settings) as worker:
            await worker.run()

    try:
        asyncio.run(main())
    except KafkaUnavailable as exc:
        logging.getLogger("hotboard").error("%s", exc)
        return EXIT_UNAVAILABLE
    except EvictionPolicyError as exc:
        print(f"hotboard worker: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    return 0


def _dev_parser(sub: Any) -> None:
    p = sub.add_parser("dev", help="embedded Kafka-protocol broker + redis-server on loopback (Ctrl-C stops both)")
    p.add_argument("--kafka-port", type=int, default=19092)
    p.add_argument("--redis-port", type=int, default=16379)
    p.add_argument("--topic", default="scores")
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--data-dir", type=Path, help="keep Redis's append-only file here (default: a temp dir)")


def _wait_for_signal() -> None:
    stop = {"flag": False}

    def handler(signum: int, frame: object) -> None:
        stop["flag"] = True

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    while not stop["flag"]:
        signal.pause()


def cmd_dev(args: argparse.Namespace) -> int:
    with DevStack(
        kafka_port=args.kafka_port,
        redis_port=args.redis_port,
        topic=args.topic,
        partitions=args.partitions,
        data_dir=args.data_dir,
    ) as stack:
        print(f"kafka  {stack.kafka.bootstrap}   (topic {stack.topic}, {stack.partitions} partitions)")
        print(f"redis  {stack.redis.url}")
        print(f"export HOTBOARD_KAFKA={stack.kafka.bootstrap} HOTBOARD_REDIS={stack.redis.url}")
        print("Ctrl-C stops both.", flush=True)
        _wait_for_signal()
    print("stopped.")
    return 0


def _produce_parser(sub: Any) -> None:
    p = sub.add_parser("produce", help="publish valid, Zipf-skewed score events")
    add_options(p, WorkerSettings, only=("kafka", "topic"))
    p.add_argument("--rate", type=float, default=1000.0, help="events/s, 0 = as fast as possible")
    p.add_argument("--count", type=int, default=100_000)
    p.add_argument("--players", type=int, default=10_000)
    p.add_argument("--zipf", type=float, default=1.1, help="skew exponent, 0 = uniform")
    p.add_argument("--boards", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)


def cmd_produce(args: argparse.Namespace) -> int:
    from hotboard.loadgen import generate, publish

    target = settings_from(WorkerSettings, args)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        events = generate(args.count, players=args.players, zipf=args.zipf, boards=args.boards, seed=args.seed)
        stats = await publish(target.kafka, target.topic, events, rate=args.rate, fresh_ts=True, stop=stop)
        print(f"sent {stats.events} events to {target.topic} in {stats.seconds:.2f}s ({stats.rate:,.0f} events/s)")

    asyncio.run(main())
    return 0


def _demo_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="dev stack + two workers + the API + a producer, all on loopback")
    p.add_argument("--kafka-port", type=int, default=19092)
    p.add_argument("--redis-port", type=int, default=16379)
    p.add_argument("--api-port", type=int, default=8000)
    metrics_port = WorkerSettings.model_fields["metrics_port"].default
    p.add_argument(
        "--metrics-port",
        type=int,
        default=metrics_port,
        help="first worker's; the second gets +1, the API's /metrics +2",
    )
    p.add_argument("--rate", type=float, default=2000.0)
    p.add_argument("--players", type=int, default=10_000)
    p.add_argument("--boards", type=int, default=3)
    p.add_argument("--duration-s", type=float, default=0.0, help="stop by itself after this long (0 = Ctrl-C)")


def cmd_demo(args: argparse.Namespace) -> int:
    for port, what in (
        (args.api_port, "the API (--api-port)"),
        (args.metrics_port, "metrics (--metrics-port)"),
        (args.metrics_port + 1, "metrics (--metrics-port)"),
        (args.metrics_port + 2, "metrics (--metrics-port)"),
    ):
        require_free(port, what)
    children: list[Child] = []
    with DevStack(kafka_port=args.kafka_port, redis_port=args.redis_port, partitions=8) as stack:
        env = {
            **os.environ,
            "HOTBOARD_KAFKA": stack.kafka.bootstrap,
            "HOTBOARD_REDIS": stack.redis.url,
            "HOTBOARD_SESSION_TIMEOUT_MS": "6000",
        }
        me = [sys.executable, "-m", "hotboard.cli"]

        def start(name: str, command: list[str], ready: Callable[[], bool] | None = None) -> None:
            children.append(Child(name, [*me, *command], env=env, ready=ready))
            children[-1].start(timeout_s=30)

        try:
            for i in range(2):
                port = args.metrics_port + i
                start(f"worker {i + 1}", ["worker", "--metrics-port", str(port)], partial(port_open, port))
            has_api = _api_available()
            if has_api:
                api_url = f"http://{LOOPBACK}:{args.api_port}/healthz"
                api = ["api", "--port", str(args.api_port), "--api-metrics-port", str(args.metrics_port + 2)]
                start("the API", api, partial(url_answers, api_url))
            count = int(args.rate * args.duration_s) if args.duration_s else 10**9
            start(
                "the producer",
                [
                    "produce",
                    "--rate",
                    str(args.rate),
                    "--count",
                    str(count),
                    "--players",
                    str(args.players),
                    "--boards",
                    str(args.boards),
                ],
            )
            print(
                f"\nhotboard demo running: {args.rate:.0f} events/s for {args.players} players on {args.boards} boards"
            )
            print(f"  top 10      redis-cli -p {stack.redis.port} ZREVRANGE 'hb:{{global}}' 0 9 WITHSCORES")
            if has_api:
                print(f"  read API    http://127.0.0.1:{args.api_port}/v1/boards/global/top?limit=10")
                print(f"  API docs    http://127.0.0.1:{args.api_port}/docs")
            print(f"  metrics     http://127.0.0.1:{args.metrics_port}/metrics  and :{args.metrics_port + 1}/metrics")
            print("Ctrl-C stops everything.\n", flush=True)
            if args.duration_s:
                _sleep_or_signal(args.duration_s)
            else:
                _wait_for_signal()
        finally:
            # The producer first, the workers last (they drain their final window within 10 s of SIGTERM).
            stop_all([child.proc for child in reversed(children) if child.proc is not None], grace_s=12)
    print("demo stopped.")
    return 0


def _sleep_or_signal(seconds: float) -> None:
    stop = {"flag": False}

    def handler(signum: int, frame: object) -> None:
        stop["flag"] = True

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    deadline = time.monotonic() + seconds
    while not stop["flag"] and time.monotonic() < deadline:
        time.sleep(0.1)


def _api_available() -> bool:
    return importlib.util.find_spec("reader_api") is not None and importlib.util.find_spec("reader_api.cli") is not None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hotboard", description=__doc__)
    parser.add_argument("--version", action="version", version=f"hotboard {__version__}")
    add_options(parser, LogSettings)
    sub = parser.add_subparsers(dest="command", required=True)
    _worker_parser(sub)
    _dev_parser(sub)
    _produce_parser(sub)
    _demo_parser(sub)
    boards_cli.add_parser(sub, WorkerSettings)  # the worker's --redis / HOTBOARD_REDIS
    if _api_available():
        importlib.import_module("reader_api.cli").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"worker": cmd_worker, "dev": cmd_dev, "produce": cmd_produce, "demo": cmd_demo}
    try:
        _setup_logging(settings_from(LogSettings, args).log_level)
        run = commands.get(args.command) or args.run
        return int(run(args))
    except StackError as exc:
        print(f"hotboard {args.command}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except ValidationError as exc:
        print(f"hotboard {args.command}: invalid settings:\n{exc}", file=sys.stderr)
        return EXIT_CONFIG
    except redis_url.BadRedisUrl as exc:  # before any client: one line, the password masked
        print(f"hotboard {args.command}: {exc}", file=sys.stderr)
        return EXIT_CONFIG


if __name__ == "__main__":
    sys.exit(main())
