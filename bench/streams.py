"""SSE fan-out benchmark: 1,000 open streams on one board updated every window, side by side in one run for the
API of this tree and (``--baseline-tree``, e.g. a checkout of main) the API of another tree, with the same
broker, redis-server and ``hotboard worker`` (1 s windows).

Per API: its CPU seconds per window and % of a core, its RSS before and with the streams, the Redis commands of
the streams per window (``INFO commandstats`` deltas of EVALSHA and HGET, calls and µs, less the worker's own
measured beforehand with no stream open), their round trips (the API's counters) and the events each stream
received per window. The streams are a mix: ``--tops`` on the top 10 and the rest each on a distinct player's
neighbourhood. The API of another tree runs that tree's code with this environment's packages.

    python -m bench.streams [--streams 1000] [--tops 100] [--windows 20] [--baseline-tree /work/main]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import redis
from aiokafka import AIOKafkaProducer

from bench.api import MiB, cpu_ticks, rss_bytes
from cli.devstack import KafkaBroker, RedisServer, create_topic
from cli.process import LOOPBACK, Child, free_port, url_answers
from hotboard import keys

BOARD = "fan"
PLAYERS = 2000
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
#: The commands a stream's reads are made of: the read scripts and the version poll.
COMMANDS = ("evalsha", "hget")


def commands(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """(calls, µs) of each of :data:`COMMANDS` so far."""
    stats = client.info("commandstats")
    return {
        c: (stats.get(f"cmdstat_{c}", {}).get("calls", 0), stats.get(f"cmdstat_{c}", {}).get("usec", 0))
        for c in COMMANDS
    }


#: The API's counters of stream round trips towards Redis: one per read before, one per version check or batch now.
ROUND_TRIPS = (
    "hotboard_api_stream_reads_total",
    "hotboard_api_stream_version_checks_total",
    "hotboard_api_stream_answer_round_trips_total",
)


def round_trips(metrics_port: int) -> float:
    """The API's stream round trips so far, from whichever of :data:`ROUND_TRIPS` its tree counts."""
    text = httpx.get(f"http://{LOOPBACK}:{metrics_port}/metrics", timeout=10).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.split(" ")[0] in ROUND_TRIPS)


def version(client: redis.Redis) -> int:
    """HMGET, not HGET: the bench's own polls stay out of the streams' counted commands."""
    (found,) = client.hmget(keys.meta_key(BOARD), [keys.META_VERSION])
    return int(found or 0)


class Feeder:
    """Scores for a few random players per window, each batch sent once the board applied the previous one: so
    every window changes the board. Bounded by ``windows`` and a deadline per window."""

    def __init__(self, kafka: str, topic: str, client: redis.Redis) -> None:
        self.kafka, self.topic, self.client = kafka, topic, client

    async def run(self, windows: int, per_window: int, seed: int) -> int:
        producer = AIOKafkaProducer(bootstrap_servers=self.kafka, acks="all", enable_idempotence=False)
        await producer.start()
        rng = random.Random(seed)
        try:
            start = version(self.client)
            for _ in range(windows):
                before = version(self.client)
                for _ in range(per_window):
                    player = f"p{rng.randrange(PLAYERS):04}"
                    event = {"board": BOARD, "player": player, "delta": rng.randrange(1, 500)}
                    await producer.send(self.topic, orjson.dumps(event), key=player.encode())
                await producer.flush()
                deadline = time.monotonic() + 15
                while version(self.client) == before:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the worker applied no window in 15 s")
                    await asyncio.sleep(0.02)
            return version(self.client) - start
        finally:
            await producer.stop()

    async def seed(self) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.kafka, acks="all", enable_idempotence=False)
        await producer.start()
        try:
            for i in range(PLAYERS):
                player = f"p{i:04}"
                event = {"board": BOARD, "player": player, "delta": 1 + i * 3}
                await producer.send(self.topic, orjson.dumps(event), key=player.encode())
            await producer.flush()
        finally:
            await producer.stop()
        deadline = time.monotonic() + 30
        while self.client.zcard(keys.board_key(BOARD)) < PLAYERS:
            if time.monotonic() > deadline:
                raise RuntimeError("the seed did not reach the board in 30 s")
            await asyncio.sleep(0.05)


class Client:
    """One SSE stream over a raw socket (an HTTP client per stream would cost the bench more CPU than the API)."""

    def __init__(self) -> None:
        self.events = 0
        self.task: asyncio.Task[None] | None = None
        self.started = asyncio.Event()

    async def watch(self, port: int, path: str) -> None:
        reader, writer = await asyncio.open_connection(LOOPBACK, port)
        try:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n".encode())
            status = await reader.readline()
            if b" 200 " not in status:
                raise RuntimeError(f"{path}: {status!r}")
            while line := await reader.readline():
                if line.startswith(b"data:"):
                    self.events += 1
                    self.started.set()
        finally:
            writer.close()


@dataclass
class Figures:
    label: str
    rss_before_mib: float
    rss_streams_mib: float
    cpu_s_per_window: float
    core_pct: float
    commands_per_window: dict[str, float]
    round_trips_per_window: float
    usec_per_window: float
    events_per_stream_window: float
    windows: int


@contextlib.contextmanager
def api(tree: Path, env: dict[str, str], log: Path) -> Iterator[tuple[int, int, int]]:
    """``hotboard api`` of ``tree`` (its code first on the path): (port, metrics port, pid)."""
    port, metrics_port = free_port(), free_port()
    # -P: the working directory is not put first on the path, PYTHONPATH is
    command = [sys.executable, "-P", "-m", "cli.main", "--log-level", "WARNING", "api", "--port", str(port)]
    child_env = {**env, "PYTHONPATH": str(tree), "HOTBOARD_API_METRICS_PORT": str(metrics_port)}
    child = Child(
        "hotboard api",
        command,
        log_path=log,
        env=child_env,
        ready=lambda: url_answers(f"http://{LOOPBACK}:{port}/healthz"),
    )
    with child.start(30):
        assert child.proc is not None
        yield port, metrics_port, child.proc.pid


def paths(streams: int, tops: int) -> list[str]:
    around = [
        f"/v1/boards/{BOARD}/players/p{i * PLAYERS // (streams - tops):04}/around/stream?radius=2"
        for i in range(streams - tops)
    ]
    return [f"/v1/boards/{BOARD}/top/stream?limit=10"] * tops + around


async def measure(
    label: str,
    port: int,
    metrics_port: int,
    pid: int,
    args: argparse.Namespace,
    feeder: Feeder,
    client: redis.Redis,
    worker_per_window: dict[str, float],
) -> Figures:
    rss_before = rss_bytes(pid)
    clients = [Client() for _ in range(args.streams)]
    for c, path in zip(clients, paths(args.streams, args.tops), strict=True):
        c.task = asyncio.create_task(c.watch(port, path))
    try:
        async with asyncio.timeout(60):
            await asyncio.gather(*(c.started.wait() for c in clients))
        # from just after a version change to just after the last one: the streams read each change shortly after
        # it, so the reads of the first are counted and those of the last are not, one window's worth of each
        await feeder.run(1, args.per_window, seed=len(label) + 1)
        for c in clients:
            c.events = 0
        cpu, stats, trips, started = cpu_ticks(pid), commands(client), round_trips(metrics_port), time.monotonic()
        windows = await feeder.run(args.windows, args.per_window, seed=len(label))
        elapsed = time.monotonic() - started
        cpu_s = (cpu_ticks(pid) - cpu) / TICKS_PER_S
        after, trips = commands(client), round_trips(metrics_port) - trips
        rss_streams = rss_bytes(pid)
        failed = [c.task for c in clients if c.task is not None and c.task.done()]
        if failed:
            raise RuntimeError(f"{len(failed)} streams ended: {failed[0].exception()!r}")
        per_window = {c: (after[c][0] - stats[c][0]) / windows - worker_per_window[c] for c in COMMANDS}
        usec = sum(after[c][1] - stats[c][1] for c in COMMANDS) / windows - worker_per_window["usec"]
        return Figures(
            label,
            rss_before / MiB,
            rss_streams / MiB,
            cpu_s / windows,
            100 * cpu_s / elapsed,
            per_window,
            trips / windows,
            usec,
            sum(c.events for c in clients) / len(clients) / windows,
            windows,
        )
    finally:
        for c in clients:
            if c.task is not None:
                c.task.cancel()
        await asyncio.gather(*(c.task for c in clients if c.task is not None), return_exceptions=True)


def run(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-streams-"))
    broker, server = KafkaBroker(free_port(), tmp), RedisServer(free_port(), tmp / "redis")
    (tmp / "redis").mkdir()
    broker.start()
    server.start()
    try:
        asyncio.run(create_topic(broker.bootstrap, "fan", 1))  # one flush, one version a window
        env = {
            **os.environ,
            "HOTBOARD_REDIS": server.url,
            "HOTBOARD_KAFKA": broker.bootstrap,
            "HOTBOARD_TOPIC": "fan",
            "HOTBOARD_METRICS_PORT": "0",
            "HOTBOARD_SESSION_TIMEOUT_MS": "6000",
        }
        api_env = {k: v for k, v in env.items() if k != "HOTBOARD_KAFKA"}  # read-only API
        api_env |= {
            "HOTBOARD_API_MAX_STREAMS": str(args.streams),
            "HOTBOARD_API_MAX_CONNECTIONS": str(args.streams + 100),
            "HOTBOARD_API_LOG_LEVEL": "warning",
        }
        client = redis.Redis.from_url(server.url)
        feeder = Feeder(broker.bootstrap, "fan", client)
        worker = Child("worker", [sys.executable, "-m", "cli.main", "worker"], log_path=tmp / "worker.log", env=env)
        with worker.start(30):
            asyncio.run(feeder.seed())
            before, windows = commands(client), asyncio.run(feeder.run(5, args.per_window, seed=0))
            after = commands(client)
            worker_per_window = {c: (after[c][0] - before[c][0]) / windows for c in COMMANDS}
            worker_per_window["usec"] = sum(after[c][1] - before[c][1] for c in COMMANDS) / windows
            trees = [("this tree", Path(__file__).resolve().parents[1])]
            if args.baseline_tree:
                trees.insert(0, (f"baseline {args.baseline_tree}", Path(args.baseline_tree)))
            results: list[Figures] = []
            for label, tree in trees:
                with api(tree, api_env, tmp / f"api-{len(results)}.log") as (port, metrics_port, pid):
                    results.append(
                        asyncio.run(measure(label, port, metrics_port, pid, args, feeder, client, worker_per_window))
                    )
        report(args, results, worker_per_window)
    finally:
        server.stop()
        broker.stop()


def report(args: argparse.Namespace, results: list[Figures], worker_per_window: dict[str, float]) -> None:
    questions = 1 + (args.streams - args.tops)
    print(
        f"SSE fan-out: {args.streams} streams on one board of {PLAYERS} players ({args.tops} on the top 10, "
        f"{args.streams - args.tops} on distinct neighbourhoods: {questions} questions), {args.per_window} events a "
        f"window, 1 s windows; the worker's own EVALSHA/HGET per window subtracted "
        f"({worker_per_window['evalsha']:.1f}/{worker_per_window['hget']:.1f})"
    )
    rows: list[tuple[str, Callable[[Figures], str]]] = [
        ("windows measured", lambda f: f"{f.windows}"),
        ("API CPU s per window", lambda f: f"{f.cpu_s_per_window:.3f}"),
        ("API % of a core", lambda f: f"{f.core_pct:.1f}"),
        ("API RSS MiB, no stream", lambda f: f"{f.rss_before_mib:.1f}"),
        ("API RSS MiB, streams open", lambda f: f"{f.rss_streams_mib:.1f}"),
        ("Redis EVALSHA per window", lambda f: f"{f.commands_per_window['evalsha']:.0f}"),
        ("Redis HGET per window", lambda f: f"{f.commands_per_window['hget']:.0f}"),
        ("stream round trips per window", lambda f: f"{f.round_trips_per_window:.0f}"),
        ("Redis µs in them, per window", lambda f: f"{f.usec_per_window:,.0f}"),
        ("events per stream per window", lambda f: f"{f.events_per_stream_window:.2f}"),
    ]
    print(f"{'':<30}" + "".join(f"| {f.label:<28}" for f in results))
    for name, cell in rows:
        print(f"{name:<30}" + "".join(f"| {cell(f):<28}" for f in results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--tops", type=int, default=100)
    parser.add_argument("--windows", type=int, default=20)
    parser.add_argument("--per-window", type=int, default=20, help="score events a window")
    parser.add_argument("--baseline-tree", default="", help="a checkout whose API to measure first, e.g. /work/main")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
