"""Read API benchmark: requests/s and latency of rank, top-100 and around(5) through ``hotboard api``, side by
side with the same questions (the same Lua snapshot scripts) asked straight to Redis with redis-py from one
process, plus the gain of the top-page cache.

Everything runs on a private redis-server on a free loopback port; the API runs in its own process (uvicorn,
uvloop, httptools) and the load comes from a separate process: a closed-loop keep-alive HTTP/1.1 client on raw
sockets (one outstanding request per connection), so the client costs far less CPU than the server it
measures. While measuring, the board changes once per second (one player's score and the meta version, as a
flush would), so cache hits are earned, not assumed.

    python -m bench.api [--players 1000000] [--extra-sizes 10000000] [--seconds 3] [--sweep 1,2,4,8,16,32,64]
                        [--compare-servers httptools,bounded] [--flood httptools,h11,bounded]

``--compare-servers`` runs one API process per ``HOTBOARD_API_HTTP`` value (``httptools``: stock uvicorn
httptools, none of the limits; ``h11``; ``bounded``: the default) against the same board in the
same run, the sweep on the last one, and the cells interleaved question by question so drift hits all alike.
``--flood`` instead measures, per setup, the RSS one client can make the API hold by pipelining and never
reading (``--flood-cases``: 8 MiB on one connection, 1 MiB on each of ten).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import redis

from cli.devstack import RedisServer
from cli.process import LOOPBACK, Child, free_port, port_open
from hotboard import keys

BOARD = "bench"
FILL_CHUNK = 100_000
# Pseudo-random scores in [0, 1_000_003): ties occur, as on a real board.
FILL_SCRIPT = """
local first, last = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = first, last do
  redis.call('ZADD', KEYS[1], (i * 2654435761) % 1000003, 'p-' .. i)
end
return last - first + 1
"""
QUESTIONS = ("rank", "top-100", "around(5)")


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def summarise(latencies: list[float], seconds: float, errors: int) -> dict[str, Any]:
    latencies.sort()
    return {
        "rps": len(latencies) / seconds,
        "p50": percentile(latencies, 0.50) * 1000,
        "p99": percentile(latencies, 0.99) * 1000,
        "n": len(latencies),
        "errors": errors,
    }


def targets(question: str, players: int, count: int = 4096) -> list[str]:
    rng = random.Random(question)
    base = f"/v1/boards/{BOARD}"
    if question == "top-100":
        return [f"{base}/top?limit=100"]
    suffix = "/around?radius=5" if question == "around(5)" else ""
    return [f"{base}/players/p-{rng.randrange(players)}{suffix}" for _ in range(count)]


# --- load-generating child processes -------------------------------------------------------------------


async def http_client(port: int, question: str, players: int, concurrency: int, seconds: float) -> dict[str, Any]:
    requests = [f"GET {t} HTTP/1.1\r\nHost: bench\r\n\r\n".encode() for t in targets(question, players)]
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def connection(n: int) -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection(LOOPBACK, port)
        i = n
        try:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                writer.write(requests[i % len(requests)])
                i += concurrency
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                await reader.readexactly(length)
                latencies.append(time.perf_counter() - started)
                if head[9:12] != b"200":
                    errors += 1
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(connection(n) for n in range(concurrency)))
    return summarise(latencies, time.perf_counter() - started, errors)


async def direct_client(url: str, question: str, players: int, concurrency: int, seconds: float) -> dict[str, Any]:
    from redis.asyncio import Redis

    from reader_api.snapshot import Snapshots

    client = Redis.from_url(url, max_connections=concurrency)
    snapshots = Snapshots(client)
    rng = random.Random(question)
    names = [f"p-{rng.randrange(players)}" for _ in range(4096)]
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def one(n: int) -> None:
        i = n
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            if question == "rank":
                await snapshots.player(BOARD, names[i % len(names)])
            elif question == "around(5)":
                await snapshots.around(BOARD, names[i % len(names)], 5)
            else:
                await snapshots.top(BOARD, 0, 100)
            i += concurrency
            latencies.append(time.perf_counter() - started)

    try:
        started = time.perf_counter()
        await asyncio.gather(*(one(n) for n in range(concurrency)))
        return summarise(latencies, time.perf_counter() - started, 0)
    finally:
        await client.aclose()


def client_main(args: argparse.Namespace) -> None:
    import uvloop

    if args.client == "http":
        coro = http_client(int(args.target), args.question, args.players, args.concurrency, args.seconds)
    else:
        coro = direct_client(args.target, args.question, args.players, args.concurrency, args.seconds)
    print(json.dumps(uvloop.run(coro)))


def measure(kind: str, target: str, question: str, players: int, concurrency: int, seconds: float) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "bench.api",
        "--client",
        kind,
        "--target",
        target,
        "--question",
        question,
        "--players",
        str(players),
        "--concurrency",
        str(concurrency),
        "--seconds",
        str(seconds),
    ]
    out = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# --- pipelining flood: what one client that never reads makes the server hold ------------------------------

MiB = 1 << 20


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


@contextlib.contextmanager
def pipelined_flood(port: int, pid: int, request: bytes, mib: int, connections: int) -> Iterator[int]:
    """Sends ``mib`` MiB of pipelined ``request`` on each of ``connections`` connections and never reads; yields
    the server's peak RSS growth in bytes while those connections are still open. Sending on a connection
    stops when all is sent or the server stops reading (not writable for a second); then the server is
    watched until its CPU time stops moving, i.e. it has done all it will do with what it read."""
    with socket.create_connection((LOOPBACK, port), timeout=30) as warm:  # code loaded, pools filled: not the bound
        warm.sendall(request * 2000)
        answers = b""
        while answers.count(b"HTTP/1.1 200 ") < 2000:
            chunk = warm.recv(MiB)
            if not chunk:
                raise RuntimeError("the server closed the warm-up connection")
            answers += chunk
    base = peak = rss_bytes(pid)
    payload = memoryview(request * (mib * MiB // len(request)))
    socks: list[socket.socket] = []
    try:
        for _ in range(connections):
            sock = socket.create_connection((LOOPBACK, port))
            sock.setblocking(False)
            socks.append(sock)
            sent = 0
            while sent < len(payload) and select.select([], [sock], [], 1.0)[1]:
                with contextlib.suppress(BlockingIOError):
                    sent += sock.send(payload[sent : sent + 65536])
                peak = max(peak, rss_bytes(pid))
        deadline = time.monotonic() + 30
        last, unchanged = cpu_ticks(pid), 0
        while unchanged < 5 and time.monotonic() < deadline:
            time.sleep(0.05)  # the watch's sampling interval
            peak = max(peak, rss_bytes(pid))
            ticks = cpu_ticks(pid)
            unchanged = unchanged + 1 if ticks == last else 0
            last = ticks
        yield peak - base
    finally:
        for sock in socks:
            sock.close()


def flood_servers(url: str, tmp: Path, modes: list[str], cases: list[tuple[int, int]]) -> None:
    request = f"GET /v1/boards/{BOARD}/players/p-5 HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
    print("pipelined rank requests never read (peak RSS growth of the API process):")
    for mode in modes:
        for connections, mib in cases:
            api, port = start_api(url, tmp / f"api-flood-{mode}.log", cache_size=1024, http=mode)
            try:
                with pipelined_flood(port, api.pid, request, mib, connections) as growth:
                    print(f"  {mode:<10} {connections:>2} connection(s) x {mib} MiB: +{growth / MiB:,.1f} MiB")
            finally:
                stop(api)


# --- orchestration ---------------------------------------------------------------------------------------


def fill(client: redis.Redis, players: int) -> float:
    started = time.monotonic()
    client.delete(keys.board_key(BOARD), keys.meta_key(BOARD))
    script = client.register_script(FILL_SCRIPT)
    for first in range(0, players, FILL_CHUNK):
        script(keys=[keys.board_key(BOARD)], args=[first, min(players, first + FILL_CHUNK) - 1])
    client.hset(keys.meta_key(BOARD), mapping={keys.META_VERSION: 1, keys.META_AS_OF: int(time.time() * 1000)})
    return time.monotonic() - started


def memory(client: redis.Redis, players: int, before: int) -> str:
    usage = int(client.memory_usage(keys.board_key(BOARD), samples=0) or 0)
    used = int(client.info("memory")["used_memory"]) - before
    return (
        f"{players:,} players: MEMORY USAGE {usage / players:.1f} B/member, "
        f"INFO used_memory delta {used / players:.1f} B/member"
    )


class Flusher(threading.Thread):
    """Changes the board once per second like a window landing (score + version + as_of in one MULTI)."""

    def __init__(self, url: str, players: int) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.players = players
        self.done = threading.Event()

    def run(self) -> None:
        rng = random.Random(1)
        while not self.done.wait(1.0):
            with self.client.pipeline(transaction=True) as pipe:
                pipe.zincrby(keys.board_key(BOARD), rng.randint(1, 50), f"p-{rng.randrange(self.players)}")
                pipe.hincrby(keys.meta_key(BOARD), keys.META_VERSION, 1)
                pipe.hset(keys.meta_key(BOARD), keys.META_AS_OF, int(time.time() * 1000))
                pipe.execute()

    def close(self) -> None:
        self.done.set()
        self.join(5)
        self.client.close()


def start_api(redis_url: str, log: Path, cache_size: int, http: str = "bounded") -> tuple[ApiProcess, int]:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "cli.main",
        "--log-level",
        "WARNING",
        "api",
        "--redis",
        redis_url,
        "--port",
        str(port),
        "--cache-size",
        str(cache_size),
        "--api-metrics-port",
        "0",
    ]
    env = {**os.environ, "HOTBOARD_API_LOG_LEVEL": "warning", "HOTBOARD_API_HTTP": http}
    child = Child("hotboard api", command, log_path=log, env=env, ready=partial(port_open, port)).start(30)
    assert child.proc is not None
    return ApiProcess(child, child.proc.pid), port


@dataclass(frozen=True)
class ApiProcess:
    """A running ``hotboard api`` and its pid (the benchmark reads its RSS and CPU time from /proc)."""

    child: Child
    pid: int


def stop(api: ApiProcess) -> None:
    api.child.stop()


def row(name: str, api: dict[str, Any], direct: dict[str, Any] | None) -> str:
    cells = f"{name:<22}| {api['rps']:>9,.0f} | {api['p50']:>6.2f} | {api['p99']:>6.2f} "
    if direct is None:
        return cells + "|" + " " * 28 + "|"
    ratio = api["rps"] / direct["rps"]
    return cells + f"| {direct['rps']:>9,.0f} | {direct['p50']:>6.2f} | {direct['p99']:>6.2f} | {ratio:>5.2f}"


def print_header(first: str, extra: str = "") -> None:
    print(
        f"{first:<22}| {'API req/s':>9} | {'p50 ms':>6} | {'p99 ms':>6} "
        f"| {'redis-py/s':>9} | {'p50 ms':>6} | {'p99 ms':>6} | API/direct{extra}"
    )
    print("-" * (100 + len(extra)))


def sweep(port: int, args: argparse.Namespace, label: str) -> int:
    """Rank via the API at each concurrency, twice (up the list, then down) keeping each one's better run: on a
    shared machine noise only ever slows a run down. Returns the lowest concurrency giving >= 80% of the peak."""
    levels = [int(c) for c in args.sweep.split(",")]
    results: dict[int, dict[str, Any]] = {}
    for c in [*levels, *reversed(levels)]:
        r = measure("http", str(port), "rank", args.players, c, args.seconds)
        if c not in results or r["rps"] > results[c]["rps"]:
            results[c] = r
    peak = max(r["rps"] for r in results.values())
    chosen = min(c for c, r in results.items() if r["rps"] >= 0.8 * peak)
    print(
        f"  sweep (rank via API{label}, best of 2): "
        + ", ".join(f"c={c} {results[c]['rps']:,.0f}/s p99 {results[c]['p99']:.2f}ms" for c in levels)
    )
    print(f"  concurrency {chosen}: the lowest giving >= 80% of the peak {peak:,.0f} req/s")
    return chosen


def sweep_servers(url: str, tmp: Path, args: argparse.Namespace, modes: list[str]) -> int:
    """The sweep on the last server; returns the chosen concurrency."""
    api, port = start_api(url, tmp / f"api-sweep-{modes[-1]}.log", cache_size=1024, http=modes[-1])
    try:
        return sweep(port, args, f", {modes[-1]}")
    finally:
        stop(api)


def measure_cpu(
    proc: ApiProcess, port: int, question: str, args: argparse.Namespace, concurrency: int
) -> dict[str, Any]:
    """One cell, plus the API process's CPU time per answered request: far steadier than requests/s on a
    shared machine, since another process's load delays the server but does not make it spend more."""
    before = cpu_ticks(proc.pid)
    result = measure("http", str(port), question, args.players, concurrency, args.seconds)
    spent_s = (cpu_ticks(proc.pid) - before) / os.sysconf("SC_CLK_TCK")
    return {**result, "cpu_us": spent_s / max(1, result["n"]) * 1e6}


def compare_servers(url: str, tmp: Path, args: argparse.Namespace, modes: list[str]) -> None:
    """Every server setup at one concurrency against one board, interleaved question by question."""
    chosen = sweep_servers(url, tmp, args, modes)
    servers = {m: start_api(url, tmp / f"api-{m}.log", cache_size=1024, http=m) for m in modes}
    try:
        cells = {(q, m): measure_cpu(*servers[m], q, args, chosen) for q in QUESTIONS for m in modes}
    finally:
        for proc, _ in servers.values():
            stop(proc)
    direct = {q: measure("direct", url, q, args.players, chosen, args.seconds) for q in QUESTIONS}
    print()
    print(
        f"board of {args.players:,} players, concurrency {chosen}, {args.seconds:.0f}s per cell, "
        f"board changing once per second; servers: {', '.join(modes)}"
    )
    print_header("question / server", " | API CPU us/req")
    for q in QUESTIONS:
        for m in modes:
            print(row(f"{q} {m}", cells[(q, m)], direct[q]) + f" | {cells[(q, m)]['cpu_us']:>14,.0f}")
    print(f"non-200 answers: {sum(c['errors'] for c in cells.values())}")


def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="hotboard-bench-api-") as tmp:
        server = RedisServer(free_port(), Path(tmp), appendonly=False)
        server.start()
        client = redis.Redis.from_url(server.url, socket_timeout=120)
        try:
            version = client.info("server")["redis_version"]
            python = sys.version.split()[0]
            print(f"hotboard read API benchmark: Redis {version}, {os.cpu_count()} CPUs, Python {python}")
            for size in [int(s) for s in args.extra_sizes.split(",") if s]:
                before = int(client.info("memory")["used_memory"])
                took = fill(client, size)
                print(f"  memory  {memory(client, size, before)} (filled in {took:.1f}s)")
                client.flushall()
            before = int(client.info("memory")["used_memory"])
            took = fill(client, args.players)
            print(f"  memory  {memory(client, args.players, before)} (filled in {took:.1f}s)")
            flusher = Flusher(server.url, args.players)
            flusher.start()
            if args.flood:
                cases = [(int(n), int(m)) for n, _, m in (c.partition("x") for c in args.flood_cases.split(","))]
                flood_servers(server.url, Path(tmp), args.flood.split(","), cases)
                flusher.close()
                return
            if args.compare_servers:
                compare_servers(server.url, Path(tmp), args, args.compare_servers.split(","))
                flusher.close()
                return
            api, port = start_api(server.url, Path(tmp) / "api.log", cache_size=1024)
            try:
                chosen = sweep(port, args, "")
                results = {q: measure("http", str(port), q, args.players, chosen, args.seconds) for q in QUESTIONS}
            finally:
                stop(api)
            uncached_api, uncached_port = start_api(server.url, Path(tmp) / "api-nocache.log", cache_size=0)
            try:
                uncached = measure("http", str(uncached_port), "top-100", args.players, chosen, args.seconds)
            finally:
                stop(uncached_api)
            direct = {q: measure("direct", server.url, q, args.players, chosen, args.seconds) for q in QUESTIONS}
            flusher.close()
            errors = sum(r["errors"] for r in [*results.values(), uncached])
            print()
            print(
                f"board of {args.players:,} players, concurrency {chosen}, {args.seconds:.0f}s per cell, "
                f"board changing once per second"
            )
            print_header("question")
            for q in QUESTIONS:
                print(row(q, results[q], direct[q]))
            print(row("top-100 no cache", uncached, direct["top-100"]))
            gain = results["top-100"]["rps"] / uncached["rps"]
            p99s = f"p99 {results['top-100']['p99']:.2f} ms vs {uncached['p99']:.2f} ms"
            print(f"cache gain on top-100: {gain:.2f}x requests/s ({p99s}); non-200 answers: {errors}")
        finally:
            client.close()
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--players", type=int, default=1_000_000)
    parser.add_argument(
        "--extra-sizes", default="", help="e.g. 10000000: boards only filled to report memory per member (slow)"
    )
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--sweep", default="1,2,4,8,16,32,64")
    parser.add_argument(
        "--compare-servers", default="", help="e.g. httptools,bounded: HOTBOARD_API_HTTP values measured side by side"
    )
    parser.add_argument("--flood", default="", help="e.g. httptools,h11,bounded: pipelining memory per server setup")
    parser.add_argument("--flood-cases", default="1x8,10x1", help="CONNECTIONSxMIB each, for --flood")
    parser.add_argument("--client", choices=("http", "direct"), help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    parser.add_argument("--question", help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client_main(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
