"""Write API benchmark, side by side in one run: events/s of ``POST /v1/events`` (batches of 100) through
``hotboard api --kafka`` against a bare aiokafka producer in one process sending the same batches (key = player,
``acks=all``, every batch's acknowledgements awaited), and the latency of update-then-rank
(``POST .../scores?wait=true``) with a ``hotboard worker`` at 1 s windows.

Everything runs on a private broker and redis-server on free loopback ports; the API and the worker are
processes of their own. The API is driven twice with the same requests: by httpx, and by a keep-alive client that
writes and reads the requests directly (the API's own rate: httpx costs more CPU per request than the API on the
same cores).

    python -m bench.writes [--events 50000] [--batch 100] [--concurrency 8] [--waits 50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from aiokafka import AIOKafkaProducer

from cli.devstack import KafkaBroker, RedisServer, create_topic
from cli.process import LOOPBACK, Child, free_port, url_answers

TOKEN = "bench"


def batches(count: int, size: int, seed: int) -> list[list[dict[str, Any]]]:
    events = [{"board": "bench", "player": f"p-{(seed + i) % 10_000}", "delta": 1 + i % 7} for i in range(count)]
    return [events[i : i + size] for i in range(0, count, size)]


async def bare(kafka: str, topic: str, work: list[list[dict[str, Any]]], concurrency: int) -> float:
    """Events/s of one aiokafka producer: each batch produced and all its acknowledgements awaited."""
    producer = AIOKafkaProducer(bootstrap_servers=kafka, acks="all", enable_idempotence=False, linger_ms=2)
    await producer.start()
    queue = list(work)
    try:

        async def one() -> None:
            while queue:
                batch = queue.pop()
                futures = [await producer.send(topic, orjson.dumps(e), key=str(e["player"]).encode()) for e in batch]
                await asyncio.gather(*futures)

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(concurrency)))
        return sum(map(len, work)) / (time.perf_counter() - started)
    finally:
        await producer.stop()


async def through_api(base: str, work: list[list[dict[str, Any]]], concurrency: int) -> float:
    queue = list(work)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=base, timeout=30, limits=httpx.Limits(max_connections=concurrency)) as c:

        async def one() -> None:
            while queue:
                r = await c.post("/v1/events", content=orjson.dumps(queue.pop()), headers=headers)
                assert r.status_code == 200 and not r.json()["rejected"], r.text

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(concurrency)))
        return sum(map(len, work)) / (time.perf_counter() - started)


async def through_api_lean(port: int, work: list[list[dict[str, Any]]], concurrency: int) -> float:
    """The same requests as :func:`through_api` on keep-alive connections written and read directly: what the
    API takes, with the client's own cost near nothing (httpx spends more CPU per request than the API does, on
    the same two cores). Each answer is still read whole and checked."""
    queue = list(work)
    head = f"POST /v1/events HTTP/1.1\r\nHost: {LOOPBACK}\r\nAuthorization: Bearer {TOKEN}\r\n"
    head += "Content-Type: application/json\r\nContent-Length: "

    async def one() -> None:
        reader, writer = await asyncio.open_connection(LOOPBACK, port)
        try:
            while queue:
                body = orjson.dumps(queue.pop())
                writer.write(f"{head}{len(body)}\r\n\r\n".encode() + body)
                status = await reader.readline()
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                answer = await reader.readexactly(length)
                assert status.split()[1:2] == [b"200"] and not orjson.loads(answer)["rejected"], status + answer
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(concurrency)))
    return sum(map(len, work)) / (time.perf_counter() - started)


class Reference:
    """The ``waits`` board as the writes build it (default board: desc, incr, shared ties). The writes go one at a
    time and each answer comes only once its window was applied, so the first window holding write i holds
    exactly writes 0..i: the state right after it is this board after :meth:`add`."""

    def __init__(self) -> None:
        self.scores: dict[str, int] = {}

    def add(self, player: str, delta: int) -> dict[str, Any]:
        """The answer the write must get: the player's score, rank and the board's total right after it."""
        score = self.scores[player] = self.scores.get(player, 0) + delta
        rank = 1 + sum(1 for other in self.scores.values() if other > score)
        return {"score": score, "rank": rank, "total": len(self.scores), "exact": True}


def mismatch(expected: dict[str, Any], status: int, answer: dict[str, Any]) -> str | None:
    """Why a ``?wait=true`` answer is not the state right after the write's window, or None: a 200 whose score,
    rank, total equal the reference's and which says ``exact`` (the API saw the version before it)."""
    if status != 200:
        return f"status {status}: {answer}"
    wrong = {k: (answer.get(k), want) for k, want in expected.items() if answer.get(k) != want}
    if not wrong:
        return None
    return (
        ", ".join(f"{k} {got!r} (want {want!r})" for k, (got, want) in wrong.items())
        + f"; version {answer.get('version')}"
    )


async def waits(base: str, count: int) -> tuple[list[float], list[str]]:
    """Seconds per ``?wait=true`` write, one at a time, and every answer that is not exact (:func:`mismatch`)."""
    out: list[float] = []
    wrong: list[str] = []
    reference = Reference()
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=base, timeout=30) as c:
        for i in range(count):
            player = f"w{i % 20}"
            started = time.perf_counter()
            r = await c.post(f"/v1/boards/waits/players/{player}/scores?wait=true", json={"delta": 1}, headers=headers)
            out.append(time.perf_counter() - started)
            json = r.headers.get("content-type", "").startswith("application/json")
            body: dict[str, Any] = r.json() if json else {"body": r.text}
            if (why := mismatch(reference.add(player, 1), r.status_code, body)) is not None:
                wrong.append(f"write {i} ({player}): {why}")
    return out, wrong


def run(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-writes-"))
    broker, redis = KafkaBroker(free_port(), tmp), RedisServer(free_port(), tmp / "redis")
    (tmp / "redis").mkdir()
    broker.start()
    redis.start()
    try:
        for topic in ("bare", "api", "api.dlq"):
            asyncio.run(create_topic(broker.bootstrap, topic, 8))
        port = free_port()
        env = {
            **os.environ,
            "HOTBOARD_REDIS": redis.url,
            "HOTBOARD_KAFKA": broker.bootstrap,
            "HOTBOARD_TOPIC": "api",
            "HOTBOARD_API_WRITE_TOKENS": TOKEN,
            "HOTBOARD_API_WRITE_RATE": "1e9",
            "HOTBOARD_API_WRITE_BURST": "1000000",
            "HOTBOARD_API_METRICS_PORT": "0",
            "HOTBOARD_METRICS_PORT": "0",
            "HOTBOARD_SESSION_TIMEOUT_MS": "6000",
        }
        base = f"http://{LOOPBACK}:{port}"
        api = Child(
            "api",
            [sys.executable, "-m", "cli.main", "api", "--port", str(port)],
            log_path=tmp / "api.log",
            env=env,
            ready=lambda: url_answers(f"{base}/healthz"),
        )
        ops = free_port()
        worker = Child(
            "worker",
            [sys.executable, "-m", "cli.main", "worker", "--metrics-port", str(ops)],
            log_path=tmp / "worker.log",
            env=env,
            # measured from a worker that holds its partitions: a write before it joined waits for the join
            ready=lambda: url_answers(f"http://{LOOPBACK}:{ops}/readyz"),
        )
        with api.start(), worker.start():
            asyncio.run(through_api(base, batches(1000, args.batch, 1), args.concurrency))  # warm up
            rates: dict[str, list[float]] = {"bare": [], "api": [], "lean": []}
            for run_no in range(3):  # interleaved: drift hits all alike
                work = batches(args.events, args.batch, run_no)
                rates["bare"].append(asyncio.run(bare(broker.bootstrap, "bare", work, args.concurrency)))
                rates["api"].append(asyncio.run(through_api(base, work, args.concurrency)))
                rates["lean"].append(asyncio.run(through_api_lean(port, work, args.concurrency)))
            bare_rate, api_rate, lean_rate = (statistics.median(rates[k]) for k in ("bare", "api", "lean"))
            print(f"events/s, batches of {args.batch}, {args.concurrency} in flight, median of 3:")
            print(f"  bare aiokafka producer             {bare_rate:>10,.0f}")
            print(f"  POST /v1/events, httpx client      {api_rate:>10,.0f}   ratio {api_rate / bare_rate:.2f}")
            lean = f"{lean_rate:>10,.0f}   ratio {lean_rate / bare_rate:.2f} (goal >= 0.5)"
            print(f"  POST /v1/events, keep-alive client {lean}")
            seconds, wrong = asyncio.run(waits(base, args.waits))
            latencies = sorted(seconds)
            p50 = latencies[len(latencies) // 2]
            p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
            print(f"?wait=true at 1 s windows, {args.waits} writes: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms")
            print(f"  waits exact {args.waits - len(wrong)}/{args.waits}")
            for line in wrong:
                print(f"  not exact: {line}")
    finally:
        redis.stop()
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--waits", type=int, default=50)
    run(parser.parse_args())


if __name__ == "__main__":
    main()
