"""``hotboard dev`` and ``hotboard demo``: the embedded broker and redis-server on loopback, and the whole
stack on them (two workers, the API, a producer) until Ctrl-C."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from cli.devstack import DevStack, require_free
from cli.process import LOOPBACK, Child, port_open, stop_all, url_answers
from ingest.settings import WorkerSettings


def add_dev_parser(sub: Any) -> None:
    p = sub.add_parser("dev", help="embedded Kafka-protocol broker + redis-server on loopback (Ctrl-C stops both)")
    p.add_argument("--kafka-port", type=int, default=19092)
    p.add_argument("--redis-port", type=int, default=16379)
    p.add_argument("--topic", default="scores")
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--data-dir", type=Path, help="keep Redis's append-only file here (default: a temp dir)")
    p.set_defaults(run=cmd_dev)


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


def add_demo_parser(sub: Any) -> None:
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
    p.set_defaults(run=cmd_demo)


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
        me = [sys.executable, "-m", "cli"]

        def start(name: str, command: list[str], ready: Callable[[], bool] | None = None) -> None:
            children.append(Child(name, [*me, *command], env=env, ready=ready))
            children[-1].start(timeout_s=30)

        try:
            for i in range(2):
                port = args.metrics_port + i
                start(f"worker {i + 1}", ["worker", "--metrics-port", str(port)], partial(port_open, port))
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
