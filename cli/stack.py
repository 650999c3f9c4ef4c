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
from cli.exits import EXIT_FAILED
from cli.options import DefaultsFormatter
from cli.process import LOOPBACK, Child, port_open, stop_all, url_answers
from hotboard import logs
from ingest.settings import WorkerSettings


def add_dev_parser(sub: Any) -> None:
    p = sub.add_parser(
        "dev",
        help="embedded Kafka-protocol broker + redis-server on loopback (Ctrl-C stops both)",
        description="Start the embedded Kafka-protocol broker and a redis-server on 127.0.0.1, create the topic and "
        "its DLQ, print the export line that points hotboard at them, and wait for Ctrl-C.",
        formatter_class=DefaultsFormatter,
    )
    _add_server_ports(p)
    p.add_argument("--topic", default="scores", help="score topic to create (and <topic>.dlq)")
    p.add_argument("--partitions", type=int, default=8, help="partitions of the score topic")
    _add_data_dir(p)
    p.set_defaults(run=cmd_dev)


def _add_server_ports(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kafka-port", type=int, default=19092, help="port of the embedded broker on 127.0.0.1")
    p.add_argument("--redis-port", type=int, default=16379, help="port of redis-server on 127.0.0.1")


def _add_data_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data-dir", type=Path, help="keep Redis's append-only file and the servers' logs here (default: a temp dir)"
    )


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
    p = sub.add_parser(
        "demo",
        help="dev stack + two workers + the API + a producer, all on loopback",
        description="The whole system on 127.0.0.1: the embedded broker, redis-server, two workers, the read "
        "API and a load generator. Ctrl-C drains the workers and stops everything.",
        formatter_class=DefaultsFormatter,
    )
    _add_server_ports(p)
    p.add_argument("--api-port", type=int, default=8000, help="port of the read API")
    metrics_port = WorkerSettings.model_fields["metrics_port"].default
    p.add_argument(
        "--metrics-port",
        type=int,
        default=metrics_port,
        help="first worker's /metrics; the second worker's is +1, the API's +2",
    )
    p.add_argument("--rate", type=float, default=2000.0, help="events per second the producer sends")
    p.add_argument("--players", type=int, default=10_000, help="distinct players")
    p.add_argument("--boards", type=int, default=3, help="boards: global, board-1, board-2, ...")
    p.add_argument("--duration-s", type=float, default=0.0, help="stop by itself after this long; 0 = at Ctrl-C")
    _add_data_dir(p)
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
    with DevStack(
        kafka_port=args.kafka_port, redis_port=args.redis_port, partitions=8, data_dir=args.data_dir
    ) as stack:
        env = {
            **os.environ,
            "HOTBOARD_KAFKA": stack.kafka.bootstrap,
            "HOTBOARD_REDIS": stack.redis.url,
            "HOTBOARD_TOPIC": stack.topic,
            "HOTBOARD_DLQ_TOPIC": "",
            "HOTBOARD_SESSION_TIMEOUT_MS": "6000",
        }
        me = [sys.executable, "-m", "cli"]

        def start(name: str, command: list[str], ready: Callable[[], bool] | None = None) -> None:
            # Each child in a session of its own (Child's default): a terminal's Ctrl-C reaches the demo only,
            # which then sends each child one SIGTERM; a second signal would make a worker exit without draining.
            children.append(Child(name, [*me, *command], env=env, ready=ready))
            children[-1].start(timeout_s=30)

        try:
            for i in range(2):
                port = args.metrics_port + i
                worker = ["worker", "--metrics-host", LOOPBACK, "--metrics-port", str(port)]
                start(f"worker {i + 1}", worker, partial(port_open, port))
            api_url = f"http://{LOOPBACK}:{args.api_port}/healthz"
            api = ["api", "--host", LOOPBACK, "--port", str(args.api_port)]
            api += ["--api-metrics-host", LOOPBACK, "--api-metrics-port", str(args.metrics_port + 2)]
            start("the API", api, partial(url_answers, api_url))
            count = int(args.rate * args.duration_s) if args.duration_s else 10**9
            load = ["--rate", str(args.rate), "--count", str(count), "--players", str(args.players)]
            start("the producer", ["produce", *load, "--boards", str(args.boards)])
            _print_guide(args, stack)
            if args.duration_s:
                _sleep_or_signal(args.duration_s)
            else:
                _wait_for_signal()
        finally:
            # One SIGTERM each, the producer first; the workers drain their last window within 10 s of it.
            started = [child for child in reversed(children) if child.proc is not None]
            codes = stop_all([child.proc for child in started if child.proc is not None], grace_s=12)
    # uvicorn ends by the signal it was stopped with, once it has shut down: the API's clean stop is -SIGTERM.
    clean = {0, -signal.SIGTERM}
    failed = [f"{c.name} exited with {code}" for c, code in zip(started, codes, strict=True) if code not in clean]
    if failed:
        return logs.command_failed("demo", f"demo stopped; {', '.join(failed)}", exit_code=EXIT_FAILED, prefix=False)
    print("demo stopped: every process exited cleanly.")
    return 0


def _print_guide(args: argparse.Namespace, stack: DevStack) -> None:
    api = f"http://{LOOPBACK}:{args.api_port}"
    print(f"\nhotboard demo running: {args.rate:.0f} events/s for {args.players} players on {args.boards} boards")
    print(f"  kafka       {stack.kafka.bootstrap}   (topic {stack.topic}, {stack.partitions} partitions)")
    print(f"  redis       {stack.redis.url}")
    print(f"  top 10      redis-cli -p {stack.redis.port} ZREVRANGE 'hb:{{global}}' 0 9 WITHSCORES")
    print(f"  read API    {api}/v1/boards/global/top?limit=10")
    print(f"  API docs    {api}/docs")
    print(f"  metrics     http://{LOOPBACK}:{args.metrics_port}/metrics  and :{args.metrics_port + 1}/metrics")
    print("From another shell, point hotboard at the demo (hotboard boards list, hotboard send, hotboard dlq):")
    print(f"  export HOTBOARD_KAFKA={stack.kafka.bootstrap} HOTBOARD_REDIS={stack.redis.url}")
    print("Ctrl-C stops everything.\n", flush=True)


def _sleep_or_signal(seconds: float) -> None:
    stop = {"flag": False}

    def handler(signum: int, frame: object) -> None:
        stop["flag"] = True

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    deadline = time.monotonic() + seconds
    while not stop["flag"] and time.monotonic() < deadline:
        time.sleep(0.1)
